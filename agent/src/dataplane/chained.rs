//! What the dataplane's chained plugin types (`plexus-portmap`, `plexus-bandwidth`) share:
//! reading the runtime's arguments and GC's list, and running the service off the async
//! workers.

use std::sync::Arc;

use serde_json::Value;

/// `namespace/name` of the pod, from CNI_ARGS.
pub fn pod_name(args: &str) -> Option<String> {
    let get = |key: &str| {
        args.split(';')
            .find_map(|kv| kv.split_once('=').filter(|(k, _)| *k == key).map(|(_, v)| v.to_owned()))
    };
    Some(format!("{}/{}", get("K8S_POD_NAMESPACE")?, get("K8S_POD_NAME")?))
}

/// GC's `cni.dev/valid-attachments`: (container ID, interface) pairs.
pub fn valid_attachments(config: &Value) -> Vec<(String, String)> {
    config
        .get("cni.dev/valid-attachments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|a| {
            Some((a.get("containerID")?.as_str()?.to_owned(), a.get("ifname")?.as_str()?.to_owned()))
        })
        .collect()
}

/// Runs `f` on the service in a blocking thread (map updates, attachments and record writes
/// are syscalls and fsyncs); `failed` makes the error of a task that died.
pub async fn off_workers<S, T, E>(
    service: &Arc<S>,
    f: impl FnOnce(&S) -> Result<T, E> + Send + 'static,
    failed: impl FnOnce(String) -> E,
) -> Result<T, E>
where
    S: Send + Sync + 'static,
    T: Send + 'static,
    E: Send + 'static,
{
    let service = service.clone();
    match tokio::task::spawn_blocking(move || f(&service)).await {
        Ok(r) => r,
        Err(e) => Err(failed(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pod_names_come_from_cni_args() {
        assert_eq!(
            pod_name("IgnoreUnknown=1;K8S_POD_NAMESPACE=team;K8S_POD_NAME=web-0;K8S_POD_UID=x").as_deref(),
            Some("team/web-0")
        );
        assert_eq!(pod_name("IgnoreUnknown=1"), None);
    }

    #[test]
    fn valid_attachments_skip_incomplete_entries() {
        let config = json!({"cni.dev/valid-attachments": [
            {"containerID": "a", "ifname": "net1"}, {"containerID": "b"}, {"ifname": "x"}]});
        assert_eq!(valid_attachments(&config), [("a".to_owned(), "net1".to_owned())]);
        assert!(valid_attachments(&json!({})).is_empty());
    }
}
