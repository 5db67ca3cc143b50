//! A container runtime's CRI server for tests: `tests/py/cri_server.py`, a grpcio server of
//! `runtime.v1.RuntimeService/ListPodSandbox` generated at each run from the CRI's own field
//! numbers, which shares no code (nor proto file) with plexus. The test says which sandboxes
//! the runtime holds with [`CriServer::set`].

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use plexus_testkit::Proc;
use serde_json::{json, Value};

/// The server, on `<dir>/cri.sock`; stopped on drop.
pub struct CriServer {
    socket: PathBuf,
    sandboxes: PathBuf,
    _proc: Proc,
}

impl CriServer {
    /// Starts listing the sandboxes `ids` (ready, in pods named after them) and returns once
    /// the socket accepts calls.
    pub fn start(dir: &Path, ids: &[&str]) -> CriServer {
        let socket = dir.join("cri.sock");
        let sandboxes = dir.join("sandboxes.json");
        write(&sandboxes, ids);
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let mut child = Command::new("/usr/bin/python3")
            .arg(root.join("py/cri_server.py"))
            .arg("--socket")
            .arg(&socket)
            .arg("--sandboxes")
            .arg(&sandboxes)
            .stdout(Stdio::piped())
            .spawn()
            .expect("running tests/py/cri_server.py");
        let stdout = child.stdout.take().expect("the server's stdout");
        let proc = Proc(child);
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("reading the server's first line");
        assert_eq!(line.trim(), "serving", "the CRI server did not start (see its stderr above)");
        CriServer { socket, sandboxes, _proc: proc }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The sandboxes the runtime lists from now on.
    pub fn set(&self, ids: &[&str]) {
        write(&self.sandboxes, ids);
    }

    /// The methods called so far, in order.
    pub fn calls(&self) -> Vec<String> {
        let mut path = self.sandboxes.clone().into_os_string();
        path.push(".calls");
        std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_owned).collect()
    }
}

fn write(path: &Path, ids: &[&str]) {
    // One of them NOTREADY: a sandbox in any state is the runtime's.
    let list: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let state = if i % 2 == 1 { "NOTREADY" } else { "READY" };
            json!({"id": id, "name": format!("pod-{id}"), "namespace": "default", "state": state})
        })
        .collect();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, Value::Array(list).to_string()).expect("writing the sandboxes");
    std::fs::rename(&tmp, path).expect("replacing the sandboxes");
}
