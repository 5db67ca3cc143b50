//! A kubelet PodResources API server for tests: `tests/py/podresources_server.py`, a grpcio
//! server generated at each run from `proto/podresources.proto` (the kubelet's `v1` API), which
//! shares no code with plexus. The test says what kubelet allocated with [`PodResourcesServer::set`].

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use plexus_testkit::Proc;
use serde_json::{json, Value};

/// One pod's devices as kubelet lists them: (resource name, device IDs) of its one container.
pub fn pod_resources(namespace: &str, name: &str, devices: &[(&str, &[&str])]) -> Value {
    let devices: Vec<Value> =
        devices.iter().map(|(resource, ids)| json!({"resourceName": resource, "deviceIds": ids})).collect();
    json!({"name": name, "namespace": namespace, "containers": [{"name": "main", "devices": devices}]})
}

/// The server, on `<dir>/kubelet.sock`; stopped on drop.
pub struct PodResourcesServer {
    socket: PathBuf,
    resources: PathBuf,
    _proc: Proc,
}

impl PodResourcesServer {
    /// Starts serving `pods` (see [`pod_resources`]) and returns once the socket accepts calls.
    pub fn start(dir: &Path, pods: &[Value]) -> PodResourcesServer {
        let socket = dir.join("kubelet.sock");
        let resources = dir.join("pod-resources.json");
        write(&resources, pods);
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let mut child = Command::new("/usr/bin/python3")
            .arg(root.join("py/podresources_server.py"))
            .arg("--proto")
            .arg(root.join("../proto/podresources.proto"))
            .arg("--socket")
            .arg(&socket)
            .arg("--resources")
            .arg(&resources)
            .stdout(Stdio::piped())
            .spawn()
            .expect("running tests/py/podresources_server.py");
        let stdout = child.stdout.take().expect("the server's stdout");
        let proc = Proc(child);
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("reading the server's first line");
        assert_eq!(line.trim(), "serving", "the PodResources server did not start (see its stderr above)");
        PodResourcesServer { socket, resources, _proc: proc }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// What kubelet says from now on.
    pub fn set(&self, pods: &[Value]) {
        write(&self.resources, pods);
    }

    /// The methods called so far, in order.
    pub fn calls(&self) -> Vec<String> {
        let mut path = self.resources.clone().into_os_string();
        path.push(".calls");
        std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_owned).collect()
    }
}

fn write(path: &Path, pods: &[Value]) {
    let body = json!({"podResources": pods}).to_string();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, body).expect("writing the pod resources");
    std::fs::rename(&tmp, path).expect("replacing the pod resources");
}
