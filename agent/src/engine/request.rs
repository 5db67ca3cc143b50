//! A CNI request as the engine sees it: validated environment and plexus's own config.

use serde_json::{Map, Value};

use crate::catalog::names;
use crate::cni::result::is_supported_version;
use crate::cni::{AttachmentKey, CniError, Command, ErrorCode, CURRENT_VERSION};
use crate::spec::sandbox_networks;
use crate::spec::validate::is_kernel_ifname;

/// The config the runtime passed to plexus itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlexusConf {
    pub cni_version: String,
    pub name: String,
    /// kubelet's runtimeConfig: for the cluster default network only (spec 7.5). Without
    /// `podSandboxNetworks`, which is plexus's own.
    pub runtime_config: Map<String, Value>,
    /// `runtimeConfig.podSandboxNetworks` as the runtime passed it: read by an ADD only, so
    /// that no other command fails on it (`spec::sandbox_networks`).
    pub pod_sandbox_networks: Option<Value>,
    pub valid_attachments: Option<Vec<AttachmentKey>>,
}

/// The version of the request's config, for answering even when the rest is unusable.
pub fn request_version(config: &str) -> String {
    serde_json::from_str::<Value>(config)
        .ok()
        .and_then(|v| v.get("cniVersion").and_then(Value::as_str).map(str::to_owned))
        .filter(|v| is_supported_version(v))
        .unwrap_or_else(|| CURRENT_VERSION.to_owned())
}

impl PlexusConf {
    pub fn parse(config: &str) -> Result<Self, CniError> {
        let value: Value = serde_json::from_str(config).map_err(|e| {
            CniError::new(ErrorCode::DecodeFailure, format!("the CNI config on stdin is not valid JSON: {e}"))
        })?;
        let Value::Object(obj) = value else {
            return Err(CniError::new(
                ErrorCode::DecodeFailure,
                "the CNI config on stdin must be a JSON object",
            ));
        };
        let cni_version = match obj.get("cniVersion").and_then(Value::as_str) {
            Some(v) if is_supported_version(v) => v.to_owned(),
            Some(v) => {
                return Err(CniError::new(
                    ErrorCode::IncompatibleVersion,
                    format!(
                        "cniVersion {v:?} is not supported by plexus; use one of {}",
                        crate::cni::SUPPORTED_VERSIONS.join(", ")
                    ),
                ))
            }
            None => return Err(CniError::invalid_config("the plexus CNI config has no \"cniVersion\"")),
        };
        let name = obj.get("name").and_then(Value::as_str).unwrap_or("plexus").to_owned();
        let mut runtime_config = match obj.get("runtimeConfig") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err(CniError::invalid_config("\"runtimeConfig\" must be an object")),
        };
        let valid_attachments = match obj.get("cni.dev/valid-attachments") {
            None | Some(Value::Null) => None,
            Some(v) => Some(serde_json::from_value(v.clone()).map_err(|e| {
                CniError::invalid_config(format!(
                    "\"cni.dev/valid-attachments\" must be a list of {{\"containerID\", \"ifname\"}}: {e}"
                ))
            })?),
        };
        let pod_sandbox_networks = runtime_config.remove(sandbox_networks::RUNTIME_CONFIG_KEY);
        Ok(PlexusConf { cni_version, name, runtime_config, pod_sandbox_networks, valid_attachments })
    }
}

/// The CNI_* variables of a request, validated per command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniEnv {
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    pub args: String,
}

/// The pod named by CNI_ARGS (kubelet and CRI runtimes pass these).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodArgs {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
}

impl CniEnv {
    pub fn from_request(req: &plexus_cni_shim::Request, command: Command) -> Result<Self, CniError> {
        let env = CniEnv {
            container_id: req.container_id.clone().unwrap_or_default(),
            netns: req.netns.clone().unwrap_or_default(),
            ifname: req.ifname.clone().unwrap_or_default(),
            args: req.args.clone().unwrap_or_default(),
        };
        let need = |name: &str, value: &str| {
            if value.is_empty() {
                Err(CniError::new(
                    ErrorCode::InvalidEnvironment,
                    format!("{name} is required for this command"),
                ))
            } else {
                Ok(())
            }
        };
        match command {
            Command::Add | Command::Check => {
                need("CNI_CONTAINERID", &env.container_id)?;
                need("CNI_NETNS", &env.netns)?;
                need("CNI_IFNAME", &env.ifname)?;
            }
            Command::Del => {
                need("CNI_CONTAINERID", &env.container_id)?;
                need("CNI_IFNAME", &env.ifname)?;
            }
            Command::Status | Command::Gc | Command::Version => return Ok(env),
        }
        if !is_container_id(&env.container_id) {
            return Err(CniError::new(
                ErrorCode::InvalidEnvironment,
                format!(
                    "CNI_CONTAINERID {:?} is invalid: it must start with a letter or digit and hold only \
                     letters, digits, '_', '.' and '-'",
                    env.container_id
                ),
            ));
        }
        if !is_kernel_ifname(&env.ifname) {
            return Err(CniError::new(
                ErrorCode::InvalidEnvironment,
                format!("CNI_IFNAME {:?} is not a valid interface name", env.ifname),
            ));
        }
        check_pod_args(&env.args)?;
        Ok(env)
    }

    /// The pod, when CNI_ARGS names one (K8S_POD_NAMESPACE and K8S_POD_NAME).
    pub fn pod(&self) -> Option<PodArgs> {
        let mut ns = None;
        let mut name = None;
        let mut uid = None;
        for pair in self.args.split(';') {
            match pair.split_once('=') {
                Some(("K8S_POD_NAMESPACE", v)) if !v.is_empty() => ns = Some(v.to_owned()),
                Some(("K8S_POD_NAME", v)) if !v.is_empty() => name = Some(v.to_owned()),
                Some(("K8S_POD_UID", v)) if !v.is_empty() => uid = Some(v.to_owned()),
                _ => {}
            }
        }
        Some(PodArgs { namespace: ns?, name: name?, uid })
    }
}

/// The pod's namespace and name in CNI_ARGS, checked as the API server checks them: they
/// become file names (standalone) and lookups, so `../x` or a name no pod can have is
/// refused before either (every occurrence, whichever one a reader would take).
fn check_pod_args(args: &str) -> Result<(), CniError> {
    for pair in args.split(';') {
        let checked = match pair.split_once('=') {
            Some(("K8S_POD_NAMESPACE", v)) if !v.is_empty() => names::check_namespace("K8S_POD_NAMESPACE", v),
            Some(("K8S_POD_NAME", v)) if !v.is_empty() => names::check_object_name("K8S_POD_NAME", v),
            _ => Ok(()),
        };
        checked.map_err(|e| CniError::new(ErrorCode::InvalidEnvironment, format!("CNI_ARGS: {e}")))?;
    }
    Ok(())
}

/// CNI spec: `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`.
pub fn is_container_id(id: &str) -> bool {
    let mut bytes = id.bytes();
    bytes.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && bytes.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use plexus_cni_shim::Request;

    fn req(cid: &str, ifname: &str) -> Request {
        Request {
            command: "ADD".into(),
            container_id: Some(cid.into()),
            netns: Some("/var/run/netns/x".into()),
            ifname: Some(ifname.into()),
            args: Some("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=u".into()),
            path: None,
            config: String::new(),
        }
    }

    #[test]
    fn environment_is_validated_per_command() {
        let env = CniEnv::from_request(&req("abc-1.2_3", "eth0"), Command::Add).unwrap();
        assert_eq!(
            env.pod(),
            Some(PodArgs { namespace: "ns".into(), name: "p".into(), uid: Some("u".into()) })
        );
        for (cid, ifname, want) in [
            ("", "eth0", "CNI_CONTAINERID is required"),
            ("-bad", "eth0", "CNI_CONTAINERID \"-bad\" is invalid"),
            ("../x", "eth0", "is invalid"),
            ("c", "", "CNI_IFNAME is required"),
            ("c", "a/b", "not a valid interface name"),
        ] {
            let err = CniEnv::from_request(&req(cid, ifname), Command::Add).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidEnvironment);
            assert!(err.msg.contains(want), "{}", err.msg);
        }
        let mut del = req("c", "eth0");
        del.netns = None;
        assert!(CniEnv::from_request(&del, Command::Del).is_ok(), "DEL needs no netns");
        assert!(CniEnv::from_request(&del, Command::Check).is_err());
    }

    #[test]
    fn pod_names_in_cni_args_are_checked_as_the_api_server_would() {
        let with_args = |args: &str, command| {
            let mut r = req("c1", "eth0");
            r.args = Some(args.to_owned());
            CniEnv::from_request(&r, command)
        };
        for command in [Command::Add, Command::Check, Command::Del] {
            for (args, arg, rule) in [
                ("K8S_POD_NAMESPACE=ns;K8S_POD_NAME=../../../../x", "K8S_POD_NAME", "DNS-1123 subdomain"),
                ("K8S_POD_NAMESPACE=../etc;K8S_POD_NAME=p", "K8S_POD_NAMESPACE", "DNS-1123 label"),
                ("K8S_POD_NAMESPACE=..;K8S_POD_NAME=p", "K8S_POD_NAMESPACE", "DNS-1123 label"),
                ("K8S_POD_NAMESPACE=ns;K8S_POD_NAME=..", "K8S_POD_NAME", "DNS-1123 subdomain"),
                ("K8S_POD_NAMESPACE=a.b;K8S_POD_NAME=p", "K8S_POD_NAMESPACE", "DNS-1123 label"),
                ("K8S_POD_NAMESPACE=ns;K8S_POD_NAME=Web", "K8S_POD_NAME", "DNS-1123 subdomain"),
                ("K8S_POD_NAMESPACE=ns;K8S_POD_NAME=a/b", "K8S_POD_NAME", "DNS-1123 subdomain"),
                // A second occurrence is checked too, whichever a reader keeps.
                ("K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_NAME=../x", "K8S_POD_NAME", "subdomain"),
            ] {
                let err = with_args(args, command).unwrap_err();
                assert_eq!(err.code, ErrorCode::InvalidEnvironment, "{args}");
                assert!(err.msg.starts_with(&format!("CNI_ARGS: {arg} ")), "{}", err.msg);
                assert!(err.msg.contains(rule), "{}", err.msg);
            }
        }
        let env =
            with_args("IgnoreUnknown=1;K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=web-0.a", Command::Add)
                .unwrap();
        assert_eq!(env.pod().map(|p| p.name), Some("web-0.a".to_owned()));
        // Empty values name no pod, as before; other keys are not ours to judge.
        assert_eq!(with_args("K8S_POD_NAMESPACE=;K8S_POD_NAME=", Command::Add).unwrap().pod(), None);
        assert!(with_args("K8S_POD_INFRA_CONTAINER_ID=../x;FOO", Command::Add).is_ok());
    }

    #[test]
    fn plexus_conf_errors_have_the_right_codes() {
        assert_eq!(PlexusConf::parse("nope").unwrap_err().code, ErrorCode::DecodeFailure);
        assert_eq!(
            PlexusConf::parse(r#"{"cniVersion":"7.0.0"}"#).unwrap_err().code,
            ErrorCode::IncompatibleVersion
        );
        assert_eq!(PlexusConf::parse(r#"{"name":"x"}"#).unwrap_err().code, ErrorCode::InvalidNetworkConfig);
        let c = PlexusConf::parse(
            r#"{"cniVersion":"1.1.0","name":"plexus","type":"plexus","runtimeConfig":{"portMappings":[]},
                "cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]}"#,
        )
        .unwrap();
        assert!(c.runtime_config.contains_key("portMappings"));
        assert_eq!(c.pod_sandbox_networks, None);
        assert_eq!(c.valid_attachments.unwrap()[0].container_id, "c1");
        assert_eq!(request_version(r#"{"cniVersion":"0.3.1"}"#), "0.3.1");
        assert_eq!(request_version("garbage"), CURRENT_VERSION);
    }

    #[test]
    fn the_sandboxs_networks_are_taken_out_of_kubelets_runtime_config_unread() {
        let c = PlexusConf::parse(
            r#"{"cniVersion":"1.1.0","name":"plexus","runtimeConfig":{"portMappings":[],
                "podSandboxNetworks":[{"networkName":"Not Valid"}]}}"#,
        )
        .unwrap();
        assert_eq!(c.runtime_config.keys().collect::<Vec<_>>(), ["portMappings"]);
        assert_eq!(c.pod_sandbox_networks, Some(serde_json::json!([{"networkName": "Not Valid"}])));
    }

    #[test]
    fn unknown_commands_are_invalid_environment() {
        assert_eq!(Command::parse("ADD").unwrap(), Command::Add);
        assert_eq!(Command::parse("UP").unwrap_err().code, ErrorCode::InvalidEnvironment);
    }
}
