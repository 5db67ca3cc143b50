//! What a person reads about a failed API request: what the server said (its `Status`'
//! message, code and reason) or why it could not be reached, and what to do, once.
//!
//! kube's own `Display` of an API error is `ApiError: <message>: <reason> (Status { ... })`,
//! a Rust debug dump; nothing the agent logs or puts in a pod event or a CNI error uses it.

use ::kube::core::Status;
use ::kube::runtime::watcher;

use crate::cni::error::chain;

/// A failed request, as the agent reports it.
pub fn describe(e: &::kube::Error) -> String {
    match e {
        ::kube::Error::Api(s) => describe_status(s),
        ::kube::Error::HyperError(_) | ::kube::Error::Service(_) => {
            format!("cannot reach the API server: {}", causes(e))
        }
        ::kube::Error::Auth(_) => format!(
            "cannot authenticate to the API server: {}; check the agent's service account token (or the \
             --kubeconfig user)",
            causes(e)
        ),
        ::kube::Error::SerdeError(inner) => format!("the API server's answer could not be decoded: {inner}"),
        _ => causes(e),
    }
}

/// The server's answer: its message, then code and reason, then what to do.
pub fn describe_status(s: &Status) -> String {
    let said = if s.message.is_empty() { "no message" } else { s.message.as_str() };
    let code = match (s.code, s.reason.as_str()) {
        (0, "") => "no code".to_owned(),
        (c, "") => c.to_string(),
        (0, r) => r.to_owned(),
        (c, r) => format!("{c} {r}"),
    };
    let verb = if s.code == 429 || s.code >= 500 { "failed" } else { "refused" };
    let mut out = format!("the API server {verb}: {said} ({code})");
    if let Some(hint) = hint(s.code) {
        out.push_str("; ");
        out.push_str(hint);
    }
    out
}

/// What to do about an answer, where the code alone says it.
fn hint(code: u16) -> Option<&'static str> {
    match code {
        401 => Some(
            "the agent's credentials were not accepted: check its service account token (or the --kubeconfig \
             user)",
        ),
        403 => Some("grant the agent's service account this access: apply deploy/rbac.yaml"),
        429 => Some("the API server is overloaded; plexus retries"),
        c if c >= 500 => Some("plexus retries"),
        _ => None,
    }
}

/// A watch's failure, as the agent reports it.
pub fn describe_watch(e: &watcher::Error) -> String {
    match e {
        watcher::Error::InitialListFailed(k) => format!("listing failed: {}", describe(k)),
        watcher::Error::WatchStartFailed(k) => format!("starting the watch failed: {}", describe(k)),
        watcher::Error::WatchError(s) => format!("the watch reported an error: {}", describe_status(s)),
        watcher::Error::WatchFailed(k) => format!("the watch broke: {}", describe(k)),
        watcher::Error::NoResourceVersion => {
            "the API server sent an object without a resourceVersion; relisting".to_owned()
        }
    }
}

/// The HTTP code the API server answered a watch with, when it answered.
pub fn watch_code(e: &watcher::Error) -> Option<u16> {
    match e {
        watcher::Error::InitialListFailed(::kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(::kube::Error::Api(s))
        | watcher::Error::WatchFailed(::kube::Error::Api(s)) => Some(s.code),
        watcher::Error::WatchError(s) => Some(s.code),
        _ => None,
    }
}

/// The error's causes, innermost last, each said once: kube and hyper wrap an error in
/// layers whose text repeats the layer below ("ServiceError: client error (Connect)" above
/// "client error (Connect)"), and the outermost layer's prefix says nothing to a person.
fn causes(e: &::kube::Error) -> String {
    let start: &dyn std::error::Error = match e {
        // The wrapper's own text is its source's with a type name in front.
        ::kube::Error::HyperError(_) | ::kube::Error::Service(_) | ::kube::Error::Auth(_) => {
            std::error::Error::source(e).unwrap_or(e)
        }
        _ => e,
    };
    let text = chain(start);
    if text.is_empty() {
        e.to_string()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::kube::core::response::StatusSummary;

    fn forbidden() -> Status {
        Status {
            status: Some(StatusSummary::Failure),
            code: 403,
            message: "pods \"p\" is forbidden: User \"system:serviceaccount:kube-system:plexus\" cannot get \
                      resource \"pods\" in API group \"\" in the namespace \"ns1\""
                .into(),
            reason: "Forbidden".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_403_renders_the_servers_message_code_and_what_to_do_without_a_debug_dump() {
        let e = ::kube::Error::Api(Box::new(forbidden()));
        let text = describe(&e);
        assert_eq!(
            text,
            "the API server refused: pods \"p\" is forbidden: User \"system:serviceaccount:kube-system:plexus\" \
             cannot get resource \"pods\" in API group \"\" in the namespace \"ns1\" (403 Forbidden); grant the \
             agent's service account this access: apply deploy/rbac.yaml"
        );
        assert!(!text.contains("Status {") && !text.contains("ApiError"), "{text}");
        // kube's own text is the dump this module exists to avoid.
        assert!(e.to_string().contains("Status {"));
    }

    #[test]
    fn watch_errors_name_the_step_once() {
        let e = watcher::Error::WatchStartFailed(::kube::Error::Api(Box::new(forbidden())));
        let text = describe_watch(&e);
        assert!(text.starts_with("starting the watch failed: the API server refused: pods"), "{text}");
        assert_eq!(watch_code(&e), Some(403));
        let gone = watcher::Error::WatchError(Box::new(Status {
            code: 410,
            reason: "Expired".into(),
            message: "too old resource version: 5 (9)".into(),
            ..Default::default()
        }));
        assert_eq!(watch_code(&gone), Some(410));
        assert_eq!(
            describe_watch(&gone),
            "the watch reported an error: the API server refused: too old resource version: 5 (9) (410 Expired)"
        );
        let server = Status { code: 503, message: "etcd is down".into(), ..Default::default() };
        assert_eq!(describe_status(&server), "the API server failed: etcd is down (503); plexus retries");
    }

    #[tokio::test]
    async fn an_unreachable_server_says_so_with_each_cause_once() {
        // A port nothing listens on: bound, then closed.
        let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let config = ::kube::Config::new(format!("http://{addr}").parse().unwrap());
        let client = ::kube::Client::try_from(config).unwrap();
        let api: ::kube::Api<k8s_openapi::api::core::v1::Pod> = ::kube::Api::namespaced(client, "ns1");
        let e = api.get("p").await.unwrap_err();
        let text = describe(&e);
        assert!(text.starts_with("cannot reach the API server: "), "{text}");
        assert!(text.contains("onnection refused"), "{text}");
        assert!(!text.contains("ServiceError") && !text.contains("HyperError"), "{text}");
        let once = text.split(": ").collect::<Vec<_>>();
        let mut unique = once.clone();
        unique.dedup();
        assert_eq!(once, unique, "{text}");
    }
}
