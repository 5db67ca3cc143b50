//! The shim's whole job, minus the process boundary: [`run`] turns one CNI invocation
//! (environment and stdin) into what to print and the exit status, talking to the agent
//! over its Unix socket. `main` only collects the input and prints the [`Outcome`].

use crate::{ErrorCode, Request, Response, CURRENT_VERSION, DEFAULT_SOCKET, SUPPORTED_VERSIONS};
use serde::Serialize;
use std::collections::HashMap;
use std::io::{self, ErrorKind, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

/// Pauses between connection attempts while the agent is unreachable (about 1.5 s in
/// total). Long enough to ride out an agent restart during a rollout, short enough that
/// the runtime gets a prompt "try again later" instead of a hung sandbox setup.
pub const RETRY_SCHEDULE: &[Duration] = &[
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(200),
    Duration::from_millis(400),
    Duration::from_millis(800),
];

/// How long the agent may take to answer one request. ADD can legitimately be slow
/// (delegate plugins, IPAM), so this only guards against an agent that is hung.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10 * 60);

const UNREACHABLE_DETAILS: &str = "start the plexus agent (the plexus DaemonSet on Kubernetes, \
     `plexus-agent` standalone) or point the \"socket\" key of the CNI config at its socket";

/// One execution of the CNI binary as the container runtime made it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Invocation {
    /// The process environment; only the `CNI_*` variables are looked at.
    pub env: HashMap<String, String>,
    /// Everything the runtime wrote on stdin (the network configuration).
    pub stdin: Vec<u8>,
}

/// What the process should print on stdout and the status it should exit with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub exit_code: i32,
    /// Printed verbatim; already ends with a newline unless empty.
    pub stdout: String,
    /// A one-line explanation for stderr when the shim itself failed (the agent logs its
    /// own failures, so answers relayed from it carry none).
    pub diagnostic: Option<String>,
}

impl Outcome {
    /// A CNI error result: the JSON error object on stdout and exit status 1.
    pub fn error(
        cni_version: &str,
        code: ErrorCode,
        msg: impl Into<String>,
        details: impl Into<String>,
    ) -> Outcome {
        let (msg, details) = (msg.into(), details.into());
        let wire = crate::ErrorResult {
            cni_version: cni_version.to_owned(),
            code: code.code(),
            msg: msg.clone(),
            details,
        };
        Outcome { exit_code: 1, stdout: to_json_line(&wire), diagnostic: Some(msg) }
    }

    fn success(stdout: String) -> Outcome {
        Outcome { exit_code: 0, stdout, diagnostic: None }
    }
}

/// Handles one invocation with the production retry schedule and read timeout.
pub fn run(inv: &Invocation) -> Outcome {
    run_with_retry_schedule(inv, RETRY_SCHEDULE)
}

/// [`run`] with another pause schedule between connection attempts (tests use tiny ones).
pub fn run_with_retry_schedule(inv: &Invocation, schedule: &[Duration]) -> Outcome {
    run_with(
        inv,
        &Options { schedule, read_timeout: READ_TIMEOUT, default_socket: Path::new(DEFAULT_SOCKET) },
    )
}

/// The agent socket a network configuration asks for: its top-level `"socket"` string,
/// else [`DEFAULT_SOCKET`] (also when the configuration is not JSON at all).
pub fn socket_for(config: &[u8]) -> PathBuf {
    ConfigHints::parse(config)
        .ok()
        .and_then(|(_, hints)| hints.socket)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
}

/// The knobs that differ between production and tests.
struct Options<'a> {
    schedule: &'a [Duration],
    read_timeout: Duration,
    default_socket: &'a Path,
}

fn run_with(inv: &Invocation, opts: &Options) -> Outcome {
    let parsed = ConfigHints::parse(&inv.stdin);
    let hints = parsed.as_ref().map(|(_, hints)| hints).ok();
    let requested_version = hints.and_then(|h| h.cni_version.clone());
    let requested_version = requested_version.as_deref();
    let error_version = requested_version.unwrap_or(CURRENT_VERSION);
    let command = match inv.env.get("CNI_COMMAND").filter(|c| !c.is_empty()) {
        Some(command) => command,
        None => return missing_command(error_version, inv.env.contains_key("CNI_COMMAND")),
    };
    if command == "VERSION" {
        return version(requested_version);
    }
    // A config the shim cannot read names no agent: guessing the default socket would wait
    // for an agent that may not be there, or ask the wrong one. Nothing can fix it but the
    // config, so it is answered here, at once.
    let (config, hints) = match parsed {
        Ok(parsed) => parsed,
        Err(err) => return err.into_outcome(),
    };
    let socket = hints.socket.as_deref().unwrap_or(opts.default_socket);
    forward(&build_request(inv, command, config), socket, opts)
        .unwrap_or_else(|err| err.into_outcome(error_version, socket, opts.read_timeout))
}

/// The few keys of the network configuration the shim itself needs.
#[derive(Debug, Default)]
struct ConfigHints {
    cni_version: Option<String>,
    socket: Option<PathBuf>,
}

/// Why the network configuration on stdin cannot be used.
#[derive(Debug)]
enum ConfigError {
    NotUtf8(std::str::Utf8Error),
    NotJson(serde_json::Error),
    NotAnObject,
}

impl ConfigError {
    fn into_outcome(self) -> Outcome {
        let problem = match self {
            ConfigError::NotUtf8(err) => format!("is not valid UTF-8 ({err})"),
            ConfigError::NotJson(err) => format!("is not valid JSON ({err})"),
            ConfigError::NotAnObject => "is not a JSON object".to_owned(),
        };
        Outcome::error(
            CURRENT_VERSION,
            ErrorCode::DecodeFailure,
            format!("the network configuration on stdin {problem}"),
            "fix the plexus CNI config file the container runtime reads (a JSON object)",
        )
    }
}

impl ConfigHints {
    /// The configuration as text (what the agent gets) and its hints; text that is not a
    /// JSON object is an error, with no lossy decoding that would hide it.
    fn parse(config: &[u8]) -> Result<(String, ConfigHints), ConfigError> {
        let text = std::str::from_utf8(config).map_err(ConfigError::NotUtf8)?;
        let value: serde_json::Value = serde_json::from_str(text).map_err(ConfigError::NotJson)?;
        let serde_json::Value::Object(map) = value else {
            return Err(ConfigError::NotAnObject);
        };
        let string = |key: &str| map.get(key).and_then(|v| v.as_str()).filter(|s| !s.is_empty());
        let hints = ConfigHints {
            cni_version: string("cniVersion").map(str::to_owned),
            socket: string("socket").map(PathBuf::from),
        };
        Ok((text.to_owned(), hints))
    }
}

fn missing_command(cni_version: &str, present: bool) -> Outcome {
    let state = if present { "is empty" } else { "is not set" };
    Outcome::error(
        cni_version,
        ErrorCode::InvalidEnvironment,
        format!("CNI_COMMAND {state}"),
        "the container runtime must set CNI_COMMAND (ADD, DEL, CHECK, GC, STATUS or VERSION) \
         when it executes a CNI plugin",
    )
}

/// `VERSION` needs no agent, so the runtime can probe the plugin before the agent runs.
fn version(requested: Option<&str>) -> Outcome {
    #[derive(Serialize)]
    struct Wire<'a> {
        #[serde(rename = "cniVersion")]
        cni_version: &'a str,
        #[serde(rename = "supportedVersions")]
        supported_versions: &'a [&'a str],
    }
    let cni_version = requested.filter(|v| SUPPORTED_VERSIONS.contains(v)).unwrap_or(CURRENT_VERSION);
    Outcome::success(to_json_line(&Wire { cni_version, supported_versions: SUPPORTED_VERSIONS }))
}

fn build_request(inv: &Invocation, command: &str, config: String) -> Request {
    let var = |name: &str| inv.env.get(name).cloned();
    Request {
        command: command.to_owned(),
        container_id: var("CNI_CONTAINERID"),
        netns: var("CNI_NETNS"),
        ifname: var("CNI_IFNAME"),
        args: var("CNI_ARGS"),
        path: var("CNI_PATH"),
        config,
    }
}

/// Why a request got no usable answer from the agent.
#[derive(Debug)]
enum ExchangeError {
    Unreachable(io::Error),
    /// EOF or reset before a complete response: the agent died or restarted mid-request.
    Closed,
    TimedOut,
    Io(&'static str, io::Error),
    InvalidResponse(serde_json::Error),
}

impl ExchangeError {
    fn into_outcome(self, cni_version: &str, socket: &Path, read_timeout: Duration) -> Outcome {
        let socket = socket.display();
        match self {
            ExchangeError::Unreachable(err) => Outcome::error(
                cni_version,
                ErrorCode::TryAgainLater,
                format!("plexus agent is not reachable at {socket}: {err}"),
                UNREACHABLE_DETAILS,
            ),
            ExchangeError::Closed => Outcome::error(
                cni_version,
                ErrorCode::TryAgainLater,
                format!(
                    "the plexus agent at {socket} closed the connection without answering; \
                     the request may be retried"
                ),
                "the agent probably crashed or restarted mid-request; check its logs",
            ),
            ExchangeError::TimedOut => Outcome::error(
                cni_version,
                ErrorCode::TryAgainLater,
                format!("the plexus agent at {socket} did not answer within {read_timeout:?}"),
                "the agent looks hung; check its logs and restart it",
            ),
            ExchangeError::Io(context, err) => Outcome::error(
                cni_version,
                ErrorCode::IoFailure,
                format!("{context} (plexus agent at {socket}): {err}"),
                "",
            ),
            ExchangeError::InvalidResponse(err) => Outcome::error(
                cni_version,
                ErrorCode::IoFailure,
                format!("the plexus agent at {socket} sent an invalid response: {err}"),
                "the shim and the agent may be from different plexus versions",
            ),
        }
    }
}

/// Classifies an I/O error on an established connection.
fn exchange_error(context: &'static str, err: io::Error) -> ExchangeError {
    match err.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => ExchangeError::TimedOut,
        ErrorKind::BrokenPipe | ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted => {
            ExchangeError::Closed
        }
        _ => ExchangeError::Io(context, err),
    }
}

fn forward(request: &Request, socket: &Path, opts: &Options) -> Result<Outcome, ExchangeError> {
    let body = serde_json::to_vec(request)
        .map_err(|err| ExchangeError::Io("encoding the request", io::Error::other(err)))?;
    let mut stream = connect_with_retry(socket, opts.schedule).map_err(ExchangeError::Unreachable)?;
    let deadline = Instant::now() + opts.read_timeout;
    send(&mut stream, &body, opts.read_timeout)?;
    let raw = receive(&mut stream, deadline)?;
    let response = decode(&raw)?;
    Ok(relay(response))
}

/// Connects, pausing per `schedule` after each failure; the last failure is returned.
fn connect_with_retry(socket: &Path, schedule: &[Duration]) -> io::Result<UnixStream> {
    let mut pauses = schedule.iter();
    loop {
        match UnixStream::connect(socket) {
            Ok(stream) => return Ok(stream),
            Err(err) => match pauses.next() {
                Some(pause) => thread::sleep(*pause),
                None => return Err(err),
            },
        }
    }
}

/// Writes the request and half-closes, which is how the agent knows the request is whole.
fn send(stream: &mut UnixStream, body: &[u8], timeout: Duration) -> Result<(), ExchangeError> {
    // A hung agent that never reads would otherwise block a large request forever.
    stream
        .set_write_timeout(Some(timeout))
        .map_err(|err| ExchangeError::Io("setting a write timeout", err))?;
    stream.write_all(body).map_err(|err| exchange_error("sending the request", err))?;
    stream.shutdown(Shutdown::Write).map_err(|err| exchange_error("half-closing the connection", err))
}

/// Reads until EOF. The deadline bounds the whole read, not each `read` call, so an agent
/// trickling bytes cannot stretch it.
fn receive(stream: &mut UnixStream, deadline: Instant) -> Result<Vec<u8>, ExchangeError> {
    let mut raw = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(ExchangeError::TimedOut);
        }
        stream
            .set_read_timeout(Some(remaining))
            .map_err(|err| ExchangeError::Io("setting a read timeout", err))?;
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(raw),
            Ok(n) => raw.extend_from_slice(&chunk[..n]),
            Err(err) if err.kind() == ErrorKind::Interrupted => {}
            Err(err) => return Err(exchange_error("reading the response", err)),
        }
    }
}

fn decode(raw: &[u8]) -> Result<Response, ExchangeError> {
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Err(ExchangeError::Closed);
    }
    serde_json::from_slice(raw).map_err(|err| {
        // A truncated document means the agent went away mid-answer, not that it is broken.
        if err.is_eof() {
            ExchangeError::Closed
        } else {
            ExchangeError::InvalidResponse(err)
        }
    })
}

fn relay(response: Response) -> Outcome {
    let mut stdout = response.stdout;
    if !stdout.is_empty() && !stdout.ends_with('\n') {
        stdout.push('\n');
    }
    Outcome { exit_code: response.exit_code, stdout, diagnostic: None }
}

fn to_json_line<T: Serialize>(value: &T) -> String {
    // Serializing these plain structs cannot fail; fall back to an empty object rather
    // than panic in the runtime's face.
    let mut line = serde_json::to_string(value).unwrap_or_else(|_| String::from("{}"));
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use std::os::unix::net::UnixListener;
    use std::sync::mpsc;
    use std::thread::JoinHandle;

    const TINY: &[Duration] =
        &[Duration::from_millis(20), Duration::from_millis(20), Duration::from_millis(20)];

    fn invocation(command: Option<&str>, stdin: &str) -> Invocation {
        let mut env = HashMap::new();
        if let Some(command) = command {
            env.insert("CNI_COMMAND".to_owned(), command.to_owned());
        }
        Invocation { env, stdin: stdin.as_bytes().to_vec() }
    }

    fn config_with_socket(socket: &Path) -> String {
        serde_json::json!({"cniVersion": "0.4.0", "name": "net", "type": "plexus", "socket": socket})
            .to_string()
    }

    /// Accepts one connection, reads the request to EOF, answers with `reply`'s bytes
    /// (none: close without answering) and returns the raw request.
    fn serve_once(
        socket: &Path,
        reply: impl FnOnce(&[u8]) -> Option<Vec<u8>> + Send + 'static,
    ) -> JoinHandle<Vec<u8>> {
        let listener = UnixListener::bind(socket).expect("bind test socket");
        thread::spawn(move || answer(&listener, reply))
    }

    fn answer(listener: &UnixListener, reply: impl FnOnce(&[u8]) -> Option<Vec<u8>>) -> Vec<u8> {
        let (mut stream, _) = listener.accept().expect("accept");
        let mut request = Vec::new();
        stream.read_to_end(&mut request).expect("read request");
        if let Some(bytes) = reply(&request) {
            stream.write_all(&bytes).expect("write reply");
        }
        request
    }

    fn respond(exit_code: i32, stdout: &str) -> Option<Vec<u8>> {
        serde_json::to_vec(&Response { exit_code, stdout: stdout.to_owned() }).ok()
    }

    fn error_json(outcome: &Outcome) -> Value {
        assert_eq!(outcome.exit_code, 1, "stdout: {}", outcome.stdout);
        assert!(outcome.stdout.ends_with('\n'));
        serde_json::from_str(&outcome.stdout).expect("error is JSON")
    }

    #[test]
    fn forwards_every_env_field_and_stdin_verbatim() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let server = serve_once(&socket, |_| respond(0, "{}"));
        let config = format!("  {}\n", config_with_socket(&socket));
        let mut inv = invocation(Some("ADD"), &config);
        for (name, value) in [
            ("CNI_CONTAINERID", "ctr-1"),
            ("CNI_NETNS", "/var/run/netns/ns1"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", "K8S_POD_NAME=web;K8S_POD_NAMESPACE=default"),
            ("CNI_PATH", "/opt/cni/bin:/usr/lib/cni"),
            ("UNRELATED", "ignored"),
        ] {
            inv.env.insert(name.to_owned(), value.to_owned());
        }

        let outcome = run_with_retry_schedule(&inv, TINY);
        let request: Request = serde_json::from_slice(&server.join().unwrap()).unwrap();

        assert_eq!(outcome.exit_code, 0, "{outcome:?}");
        let expected = Request {
            command: "ADD".to_owned(),
            container_id: Some("ctr-1".to_owned()),
            netns: Some("/var/run/netns/ns1".to_owned()),
            ifname: Some("eth0".to_owned()),
            args: Some("K8S_POD_NAME=web;K8S_POD_NAMESPACE=default".to_owned()),
            path: Some("/opt/cni/bin:/usr/lib/cni".to_owned()),
            config,
        };
        assert_eq!(request, expected);
    }

    #[test]
    fn absent_optional_variables_are_forwarded_as_absent() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let server = serve_once(&socket, |_| respond(0, ""));
        run_with_retry_schedule(&invocation(Some("DEL"), &config_with_socket(&socket)), TINY);
        let request: Request = serde_json::from_slice(&server.join().unwrap()).unwrap();
        assert_eq!((request.command.as_str(), request.container_id, request.path), ("DEL", None, None));
    }

    #[test]
    fn relays_agent_stdout_and_exit_code() {
        let cases =
            [(0, "{\"ips\":[]}", "{\"ips\":[]}\n"), (7, "{\"code\":7}\n", "{\"code\":7}\n"), (0, "", "")];
        for (exit_code, stdout, printed) in cases {
            let dir = tempfile::tempdir().unwrap();
            let socket = dir.path().join("agent.sock");
            let server = serve_once(&socket, move |_| respond(exit_code, stdout));
            let outcome =
                run_with_retry_schedule(&invocation(Some("ADD"), &config_with_socket(&socket)), TINY);
            server.join().unwrap();
            assert_eq!(outcome, Outcome { exit_code, stdout: printed.to_owned(), diagnostic: None });
        }
    }

    #[test]
    fn unknown_commands_are_left_to_the_agent() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let server = serve_once(&socket, |_| respond(4, "{\"code\":4}"));
        let outcome = run_with_retry_schedule(&invocation(Some("FROB"), &config_with_socket(&socket)), TINY);
        let request: Request = serde_json::from_slice(&server.join().unwrap()).unwrap();
        assert_eq!(request.command, "FROB");
        assert_eq!(outcome.exit_code, 4);
    }

    #[test]
    fn socket_for_reads_the_top_level_socket_key() {
        let default = PathBuf::from(DEFAULT_SOCKET);
        assert_eq!(socket_for(br#"{"socket":"/tmp/a.sock"}"#), PathBuf::from("/tmp/a.sock"));
        assert_eq!(socket_for(br#"{"cniVersion":"1.0.0"}"#), default);
        assert_eq!(socket_for(br#"{"socket":42}"#), default);
        assert_eq!(socket_for(br#"{"socket":""}"#), default);
        assert_eq!(socket_for(br#"{"plugins":[{"socket":"/tmp/nested.sock"}]}"#), default);
        assert_eq!(socket_for(br#"["socket"]"#), default);
        assert_eq!(socket_for(b"not json"), default);
        assert_eq!(socket_for(b""), default);
    }

    /// Stdin that is not a JSON object, with a "socket" key the shim cannot read.
    fn unusable_configs(socket: &Path) -> Vec<(&'static str, Vec<u8>)> {
        let socket = socket.display().to_string();
        let mut deep = format!(r#"{{"cniVersion":"1.0.0","socket":"{socket}","x":"#).into_bytes();
        deep.extend(std::iter::repeat_n(b'[', 200));
        deep.extend(std::iter::repeat_n(b']', 200));
        deep.push(b'}');
        vec![
            ("not JSON", format!(r#"{{not json "socket":"{socket}""#).into_bytes()),
            ("NUL bytes", format!("{{\"cniVersion\":\"1.0.0\",\"socket\":\"{socket}\"}}\0\0").into_bytes()),
            (
                "invalid UTF-8 in a string",
                [format!(r#"{{"cniVersion":"1.0.0","socket":"{socket}","name":"n"#).as_bytes(), b"\xff\"}"]
                    .concat(),
            ),
            (
                "invalid UTF-8 outside strings",
                [b"\xfe".as_slice(), format!(r#"{{"socket":"{socket}"}}"#).as_bytes()].concat(),
            ),
            ("a lone surrogate escape", format!(r#"{{"socket":"{socket}","name":"\udc80"}}"#).into_bytes()),
            ("nesting deeper than the parser's limit", deep),
            ("not an object", format!(r#"["socket","{socket}"]"#).into_bytes()),
            ("empty", Vec::new()),
        ]
    }

    #[test]
    fn unusable_stdin_is_a_decode_failure_without_asking_any_agent() {
        let dir = tempfile::tempdir().unwrap();
        // Both the socket the config names and the default are served: a request reaching
        // either would be accepted.
        let named = UnixListener::bind(dir.path().join("named.sock")).unwrap();
        let default = UnixListener::bind(dir.path().join("default.sock")).unwrap();
        for l in [&named, &default] {
            l.set_nonblocking(true).unwrap();
        }
        let opts = Options {
            schedule: RETRY_SCHEDULE,
            read_timeout: READ_TIMEOUT,
            default_socket: &dir.path().join("default.sock"),
        };
        for (what, stdin) in unusable_configs(&dir.path().join("named.sock")) {
            let mut inv = invocation(Some("ADD"), "");
            inv.stdin = stdin;
            let outcome = run_with(&inv, &opts);
            let error = error_json(&outcome);
            assert_eq!(error["code"], 6, "{what}: {error}");
            let msg = error["msg"].as_str().unwrap();
            assert!(msg.starts_with("the network configuration on stdin is not "), "{what}: {msg}");
            assert!(error["details"].as_str().unwrap().contains("CNI config"), "{what}: {error}");
            for l in [&named, &default] {
                assert_eq!(
                    l.accept().unwrap_err().kind(),
                    ErrorKind::WouldBlock,
                    "{what}: a connection was made"
                );
            }
        }
        // VERSION needs no config, as before.
        let mut inv = invocation(Some("VERSION"), "");
        inv.stdin = b"\xff".to_vec();
        assert_eq!(run_with(&inv, &opts).exit_code, 0);
    }

    #[test]
    fn version_is_answered_without_the_agent() {
        // The socket key points nowhere: any attempt to reach the agent would fail.
        let nowhere = Path::new("/nonexistent/plexus.sock");
        let cases = [
            (serde_json::json!({"cniVersion": "0.4.0", "socket": nowhere}).to_string(), "0.4.0"),
            (serde_json::json!({"cniVersion": "9.9.9", "socket": nowhere}).to_string(), CURRENT_VERSION),
            ("garbage".to_owned(), CURRENT_VERSION),
            (String::new(), CURRENT_VERSION),
        ];
        for (stdin, expected) in cases {
            let outcome = run(&invocation(Some("VERSION"), &stdin));
            assert_eq!(outcome.exit_code, 0, "{outcome:?}");
            let answer: Value = serde_json::from_str(&outcome.stdout).unwrap();
            assert_eq!(answer["cniVersion"], expected, "stdin {stdin:?}");
            assert_eq!(answer["supportedVersions"], serde_json::json!(SUPPORTED_VERSIONS));
        }
    }

    #[test]
    fn unreachable_agent_is_try_again_later_after_the_schedule() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("missing.sock");
        let started = Instant::now();
        let outcome = run_with_retry_schedule(&invocation(Some("ADD"), &config_with_socket(&socket)), TINY);
        let elapsed = started.elapsed();

        let error = error_json(&outcome);
        assert_eq!(error["code"], 11);
        assert_eq!(error["cniVersion"], "0.4.0");
        let msg = error["msg"].as_str().unwrap();
        assert!(
            msg.starts_with(&format!("plexus agent is not reachable at {}: ", socket.display())),
            "{msg}"
        );
        assert!(msg.contains("os error"), "{msg}");
        assert_eq!(error["details"], UNREACHABLE_DETAILS);
        assert!(elapsed >= TINY.iter().sum(), "gave up after {elapsed:?}");
        assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    }

    #[test]
    fn refused_connection_is_try_again_later() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("stale.sock");
        // A socket file nobody listens on any more: connect gets ECONNREFUSED.
        drop(UnixListener::bind(&socket).unwrap());
        let outcome = run_with_retry_schedule(&invocation(Some("ADD"), &config_with_socket(&socket)), TINY);
        let error = error_json(&outcome);
        assert_eq!(error["code"], 11);
        assert!(error["msg"].as_str().unwrap().contains(&socket.display().to_string()));
    }

    #[test]
    fn agent_that_starts_during_the_retries_is_reached() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("late.sock");
        let late = socket.clone();
        let server = thread::spawn(move || {
            thread::sleep(Duration::from_millis(60));
            let listener = UnixListener::bind(&late).expect("bind");
            answer(&listener, |_| respond(0, "{}"))
        });
        let schedule = [Duration::from_millis(25); 40];
        let outcome =
            run_with_retry_schedule(&invocation(Some("ADD"), &config_with_socket(&socket)), &schedule);
        server.join().unwrap();
        assert_eq!(outcome.exit_code, 0, "{outcome:?}");
    }

    #[test]
    fn agent_closing_without_a_complete_answer_is_try_again_later() {
        let replies: [Option<&'static [u8]>; 3] = [None, Some(b"{\"exit_code\":0,\"std"), Some(b"\n")];
        for reply in replies {
            let dir = tempfile::tempdir().unwrap();
            let socket = dir.path().join("agent.sock");
            let server = serve_once(&socket, move |_| reply.map(<[u8]>::to_vec));
            let outcome =
                run_with_retry_schedule(&invocation(Some("ADD"), &config_with_socket(&socket)), TINY);
            server.join().unwrap();
            let error = error_json(&outcome);
            assert_eq!(error["code"], 11, "reply {reply:?}");
            let msg = error["msg"].as_str().unwrap();
            assert!(msg.contains("closed the connection without answering"), "{msg}");
            assert!(msg.contains("may be retried"), "{msg}");
        }
    }

    #[test]
    fn garbage_response_is_an_io_failure() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let server = serve_once(&socket, |_| Some(b"hello, not json".to_vec()));
        let outcome = run_with_retry_schedule(&invocation(Some("ADD"), &config_with_socket(&socket)), TINY);
        server.join().unwrap();
        let error = error_json(&outcome);
        assert_eq!(error["code"], 5);
        assert!(error["msg"].as_str().unwrap().contains("invalid response"), "{error}");
    }

    #[test]
    fn hung_agent_times_out_as_try_again_later() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("hung.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let (release, released) = mpsc::channel::<()>();
        let server = thread::spawn(move || {
            let (stream, _) = listener.accept().expect("accept");
            // Hold the connection open without answering until the test is done: it drops
            // `release`, which ends this wait with an error that says just that.
            let _ = released.recv();
            drop(stream);
        });
        let opts =
            Options { schedule: TINY, read_timeout: Duration::from_millis(100), default_socket: &socket };

        let outcome = run_with(&invocation(Some("ADD"), &config_with_socket(&socket)), &opts);
        drop(release);
        server.join().unwrap();

        let error = error_json(&outcome);
        assert_eq!(error["code"], 11);
        assert!(error["msg"].as_str().unwrap().contains("did not answer within"), "{error}");
    }

    #[test]
    fn missing_command_is_invalid_environment() {
        for inv in [invocation(None, "{\"cniVersion\":\"1.0.0\"}"), invocation(Some(""), "")] {
            let outcome = run(&inv);
            let error = error_json(&outcome);
            assert_eq!(error["code"], 4);
            assert!(error["msg"].as_str().unwrap().contains("CNI_COMMAND"), "{error}");
        }
        let error = error_json(&run(&invocation(None, "{\"cniVersion\":\"1.0.0\"}")));
        assert_eq!(error["cniVersion"], "1.0.0");
    }

    #[test]
    fn error_outcome_carries_a_diagnostic() {
        let outcome = Outcome::error("1.0.0", ErrorCode::TryAgainLater, "boom", "why");
        assert_eq!(outcome.exit_code, 1);
        assert_eq!(outcome.diagnostic.as_deref(), Some("boom"));
        assert_eq!(
            outcome.stdout,
            "{\"cniVersion\":\"1.0.0\",\"code\":11,\"msg\":\"boom\",\"details\":\"why\"}\n"
        );
    }
}
