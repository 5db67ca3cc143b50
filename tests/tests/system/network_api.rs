//! The CRI network API (docs/network-api.md) from outside plexus: every API test runs twice,
//! once through a Python grpcio client generated at test time from `proto/network.proto`
//! (`tests/py/network_api_client.py`, which shares no code with plexus) and once through the
//! operator's client, `plexus-agent network`. The node tests then attach pods to networks set
//! through the API, with the real shim, agent and reference plugins.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use plexus_tests::addresses::{bare, only_address};
use plexus_tests::traffic::python;
use plexus_tests::world::{bin, run_with_stdin as run};
use plexus_tests::{status_of, CniOutput, Netns, World};
use serde_json::{json, Value};

const NS: &str = "default";

// ---------------------------------------------------------------------------------------
// The two clients.
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq)]
enum Client {
    /// `tests/py/network_api_client.py`, generated from the proto at each run.
    Python,
    /// `plexus-agent network`.
    Cli,
}

const CLIENTS: [Client; 2] = [Client::Python, Client::Cli];

/// What a client said: the response in the proto's JSON mapping (lowerCamelCase), or the gRPC
/// status code's canonical name ("INVALID_ARGUMENT") and its message.
#[derive(Debug)]
enum Reply {
    Ok(Value),
    Err { code: String, details: String },
}

impl Reply {
    #[track_caller]
    fn ok(self) -> Value {
        match self {
            Reply::Ok(v) => v,
            Reply::Err { code, details } => panic!("expected success, got {code}: {details}"),
        }
    }

    /// Fails unless the reply is the error `code` whose message holds every one of `needles`.
    #[track_caller]
    fn refused(self, code: &str, needles: &[&str]) {
        match self {
            Reply::Ok(v) => panic!("expected {code}, got success: {v}"),
            Reply::Err { code: got, details } => {
                assert_eq!(got, code, "details: {details}");
                for needle in needles {
                    assert!(details.contains(needle), "{code} does not mention {needle:?}: {details}");
                }
            }
        }
    }
}

fn proto_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../proto/network.proto")
}

fn python_client() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("py/network_api_client.py")
}

/// The Python client's answer: JSON on stdout, exit 3 with {code, details} on an RPC error.
fn python_reply(w: &World, args: &[&str], stdin: &str) -> Reply {
    let mut cmd = Command::new(python());
    cmd.arg(python_client()).arg("--proto").arg(proto_file()).arg("--socket").arg(w.network_api_socket());
    cmd.args(args);
    let (code, stdout, stderr) = run(&mut cmd, stdin);
    let parsed: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("python client {args:?} exit {code}: {e}: {stdout} {stderr}"));
    match code {
        0 => Reply::Ok(parsed),
        3 => Reply::Err {
            code: parsed["code"].as_str().unwrap_or_default().to_owned(),
            details: parsed["details"].as_str().unwrap_or_default().to_owned(),
        },
        _ => panic!("python client {args:?} exit {code}: {stdout} {stderr}"),
    }
}

/// `plexus-agent network <args>`: stdout (JSON with --json) on success; exit 3 with
/// "error: <CODE>: <message>" on stderr for an RPC error.
fn cli_reply(w: &World, args: &[&str]) -> Reply {
    let mut cmd = Command::new(bin("plexus-agent"));
    cmd.arg("network").args(args).arg("--socket").arg(w.network_api_socket());
    let (code, stdout, stderr) = run(&mut cmd, "");
    match code {
        0 => Reply::Ok(serde_json::from_str(stdout.trim()).unwrap_or(Value::String(stdout))),
        3 => {
            let line = stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or_else(|| {
                panic!("plexus-agent network {args:?}: exit 3 without an error line: {stderr}")
            });
            let (code, details) = line["error: ".len()..].split_once(": ").unwrap_or((line, ""));
            Reply::Err { code: code.to_owned(), details: details.to_owned() }
        }
        _ => panic!("plexus-agent network {args:?} exit {code}: {stdout} {stderr}"),
    }
}

fn set(w: &World, client: Client, config: &Value) -> Reply {
    match client {
        Client::Python => python_reply(w, &["set"], &config.to_string()),
        Client::Cli => {
            let file = tempfile::Builder::new()
                .suffix(".json")
                .tempfile_in(w.dir.path())
                .expect("temporary network file");
            std::fs::write(file.path(), config.to_string()).expect("writing the network file");
            cli_reply(w, &["set", "-f", &file.path().display().to_string()])
        }
    }
}

fn remove(w: &World, client: Client, name: &str, namespace: &str) -> Reply {
    match client {
        Client::Python => python_reply(w, &["remove", name, namespace], ""),
        Client::Cli => cli_reply(w, &["remove", name, "-n", namespace]),
    }
}

/// ListPodNetwork's `networks`, in the proto's JSON mapping.
#[track_caller]
fn list(w: &World, client: Client) -> Vec<Value> {
    let reply = match client {
        Client::Python => python_reply(w, &["list"], ""),
        Client::Cli => cli_reply(w, &["list", "--json"]),
    };
    let v = reply.ok();
    v["networks"].as_array().unwrap_or_else(|| panic!("no networks array: {v}")).clone()
}

/// PodSandboxNetworks.
fn sandbox_ips(w: &World, client: Client, sandbox: &str) -> Reply {
    match client {
        Client::Python => python_reply(w, &["ips", sandbox], ""),
        Client::Cli => cli_reply(w, &["ips", sandbox, "--json"]),
    }
}

/// PodSandboxNetworks' `ips` as (ip, network name) pairs.
fn ip_pairs(v: &Value) -> Vec<(String, String)> {
    v["ips"]
        .as_array()
        .unwrap_or_else(|| panic!("no ips array: {v}"))
        .iter()
        .map(|i| {
            (
                i["ip"].as_str().unwrap_or_default().to_owned(),
                i["networkName"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The listed network `namespace/name` (`_fallback` has an empty namespace).
#[track_caller]
fn listed<'a>(networks: &'a [Value], namespace: &str, name: &str) -> Option<&'a Value> {
    networks.iter().find(|n| {
        n["config"]["metadata"]["name"] == name && n["config"]["metadata"]["namespace"] == namespace
    })
}

#[track_caller]
fn names(networks: &[Value]) -> Vec<String> {
    networks
        .iter()
        .map(|n| {
            let m = &n["config"]["metadata"];
            format!(
                "{}/{}",
                m["namespace"].as_str().unwrap_or_default(),
                m["name"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// (sandbox_management, connectivity) of a listed network.
#[track_caller]
fn status(network: &Value) -> (bool, bool) {
    let s = &network["status"];
    (
        s["sandboxManagement"].as_bool().unwrap_or_else(|| panic!("no status: {network}")),
        s["connectivity"].as_bool().unwrap_or_else(|| panic!("no status: {network}")),
    )
}

// ---------------------------------------------------------------------------------------
// Networks.
// ---------------------------------------------------------------------------------------

/// A bridge network in the proto's JSON mapping: `ip_ranges` fill its IPAM (host-local,
/// its data in this world so that allocations count as leftovers).
fn bridge_network(w: &World, name: &str, bridge: &str, cidr: &str, generation: u32) -> Value {
    json!({
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "generation": generation},
        "ipRanges": [{"cidr": cidr}],
        "networkType": "CNIv1",
        "cniv1Config": {
            "cniVersion": "1.0.0",
            "networkName": name,
            "plugins": [{
                "type": "bridge",
                "parameters": {
                    "bridge": bridge,
                    "isGateway": "true",
                    "ipam": json!({"type": "host-local", "dataDir": w.path("ipam").join(name)}).to_string(),
                },
            }],
        },
    })
}

/// A network whose only plugin is not installed anywhere.
fn missing_plugin_network(name: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": NS, "generation": 1},
        "cniv1Config": {
            "cniVersion": "1.0.0",
            "plugins": [{"type": "plexus-test-no-such-plugin", "parameters": {"mtu": "1400"}}],
        },
    })
}

/// A world whose agent serves the network API.
fn api_world() -> World {
    let mut w = World::new();
    w.start_agent();
    w
}

// ---------------------------------------------------------------------------------------
// 1. Set, update, generations.
// ---------------------------------------------------------------------------------------

#[test]
fn kernel_set_then_update_with_a_higher_generation_and_stale_or_unchanged_generations_refused() {
    for client in CLIENTS {
        let w = api_world();
        let v1 = bridge_network(&w, "blue", "br-blue", "10.10.1.0/24", 1);
        set(&w, client, &v1).ok();

        let networks = list(&w, client);
        let blue = listed(&networks, NS, "blue").unwrap_or_else(|| panic!("{client:?}: {networks:#?}"));
        assert_eq!(blue["config"]["metadata"]["generation"], 1, "{client:?}: {blue:#}");
        assert_eq!(blue["config"]["metadata"]["uid"], "uid-blue", "{client:?}: {blue:#}");
        assert_eq!(blue["config"]["ipRanges"], json!([{"cidr": "10.10.1.0/24"}]), "{client:?}: {blue:#}");
        let plugin = &blue["config"]["cniv1Config"]["plugins"][0];
        assert_eq!(plugin["type"], "bridge", "{client:?}: {blue:#}");
        assert_eq!(plugin["parameters"]["bridge"], "br-blue", "{client:?}: {blue:#}");
        assert_eq!(status(blue), (true, true), "{client:?}: the bridge plugin is installed: {blue:#}");

        // A higher generation replaces it.
        let mut v2 = bridge_network(&w, "blue", "br-blue2", "10.10.1.0/24", 2);
        set(&w, client, &v2).ok();
        let networks = list(&w, client);
        let blue = listed(&networks, NS, "blue").expect("blue after the update");
        assert_eq!(blue["config"]["metadata"]["generation"], 2, "{client:?}: {blue:#}");
        assert_eq!(blue["config"]["cniv1Config"]["plugins"][0]["parameters"]["bridge"], "br-blue2");

        // A lower one is stale, whatever it holds.
        set(&w, client, &v1).refused("FAILED_PRECONDITION", &["stale generation 1", "2"]);
        // The same generation with another config needs a higher generation.
        let mut changed = v2.clone();
        changed["cniv1Config"]["plugins"][0]["parameters"]["bridge"] = json!("br-other");
        set(&w, client, &changed).refused("FAILED_PRECONDITION", &["higher generation"]);
        // The same generation with the same config is a no-op.
        set(&w, client, &v2).ok();
        let networks = list(&w, client);
        let blue = listed(&networks, NS, "blue").expect("blue after the refusals");
        assert_eq!(blue["config"]["cniv1Config"]["plugins"][0]["parameters"]["bridge"], "br-blue2");

        // A new uid is a new object (deleted and re-created): its generation starts again.
        v2["metadata"]["uid"] = json!("uid-blue-recreated");
        v2["metadata"]["generation"] = json!(1);
        set(&w, client, &v2).ok();
        let networks = list(&w, client);
        let blue = listed(&networks, NS, "blue").expect("blue re-created");
        assert_eq!(blue["config"]["metadata"]["uid"], "uid-blue-recreated", "{client:?}: {blue:#}");
        assert_eq!(blue["config"]["metadata"]["generation"], 1, "{client:?}: {blue:#}");
    }
}

// ---------------------------------------------------------------------------------------
// 2. Invalid configs.
// ---------------------------------------------------------------------------------------

/// A valid network changed by `edit`, and what the refusal must name.
type Breakage = (&'static str, fn(&mut Value), &'static [&'static str]);

fn remove_key(v: &mut Value, key: &str) {
    if let Some(object) = v.as_object_mut() {
        object.remove(key);
    }
}

const BREAKAGES: &[Breakage] = &[
    ("no metadata", |v| remove_key(v, "metadata"), &["metadata"]),
    ("an upper-case name", |v| v["metadata"]["name"] = json!("Blue"), &["metadata.name", "Blue"]),
    ("an empty name", |v| v["metadata"]["name"] = json!(""), &["metadata.name"]),
    (
        "a namespace that is no label",
        |v| v["metadata"]["namespace"] = json!("a.b"),
        &["metadata.namespace", "a.b"],
    ),
    ("the reserved name", |v| v["metadata"]["name"] = json!("_fallback"), &["_fallback"]),
    ("no CNI config", |v| remove_key(v, "cniv1Config"), &["cniv1_config"]),
    ("no plugin", |v| v["cniv1Config"]["plugins"] = json!([]), &["cniv1_config.plugins"]),
    (
        "an unsupported cniVersion",
        |v| v["cniv1Config"]["cniVersion"] = json!("9.9.9"),
        &["cni_version", "9.9.9"],
    ),
    (
        "a plugin type that is a path",
        |v| v["cniv1Config"]["plugins"][0]["type"] = json!("../bridge"),
        &["cniv1_config.plugins[0].type", "../bridge"],
    ),
    (
        "an unknown capability",
        |v| v["cniv1Config"]["plugins"][0]["capabilities"] = json!(["portMappings", "teleport"]),
        &["cniv1_config.plugins[0].capabilities", "teleport"],
    ),
    (
        "a parameter that a field sets",
        |v| v["cniv1Config"]["plugins"][0]["parameters"]["type"] = json!("macvlan"),
        &["cniv1_config.plugins[0].parameters", "type"],
    ),
    (
        "a CIDR with host bits",
        |v| v["ipRanges"] = json!([{"cidr": "10.10.1.1/24"}]),
        &["ip_ranges[0].cidr", "10.10.1.1/24"],
    ),
    (
        "a second range that is no CIDR",
        |v| v["ipRanges"] = json!([{"cidr": "10.10.1.0/24"}, {"cidr": "ten"}]),
        &["ip_ranges[1].cidr", "ten"],
    ),
];

#[test]
fn kernel_invalid_configs_are_refused_naming_the_field_and_nothing_is_stored() {
    for client in CLIENTS {
        let w = api_world();
        for (what, edit, needles) in BREAKAGES {
            let mut v = bridge_network(&w, "blue", "br-blue", "10.10.1.0/24", 1);
            edit(&mut v);
            match set(&w, client, &v) {
                Reply::Ok(_) => panic!("{client:?}: {what} was accepted: {v:#}"),
                reply => reply.refused("INVALID_ARGUMENT", needles),
            }
        }
        let networks = list(&w, client);
        assert_eq!(
            names(&networks),
            ["/_fallback"],
            "{client:?}: only the on-disk default network is listed"
        );
    }
}

// ---------------------------------------------------------------------------------------
// 3. The on-disk default network, NADs, statuses.
// ---------------------------------------------------------------------------------------

#[test]
fn kernel_the_on_disk_default_network_is_listed_as_fallback_and_can_be_neither_set_nor_removed() {
    for client in CLIENTS {
        let w = api_world();
        let networks = list(&w, client);
        let fallback =
            listed(&networks, "", "_fallback").unwrap_or_else(|| panic!("{client:?}: {networks:#?}"));
        let cni = &fallback["config"]["cniv1Config"];
        assert_eq!(cni["networkName"], "cluster", "{client:?}: {fallback:#}");
        assert_eq!(cni["cniVersion"], "1.0.0", "{client:?}: {fallback:#}");
        assert_eq!(cni["plugins"][0]["type"], "bridge", "{client:?}: {fallback:#}");
        assert_eq!(cni["plugins"][0]["parameters"]["bridge"], "cni0", "{client:?}: {fallback:#}");
        assert_eq!(status(fallback), (true, true), "{client:?}: {fallback:#}");

        let mut v = bridge_network(&w, "x", "br-x", "10.10.9.0/24", 1);
        v["metadata"]["name"] = json!("_fallback");
        v["metadata"]["namespace"] = json!("");
        set(&w, client, &v).refused("INVALID_ARGUMENT", &["_fallback", "on-disk default network"]);
        remove(&w, client, "_fallback", "")
            .refused("INVALID_ARGUMENT", &["_fallback", "on-disk default network"]);
        assert!(listed(&list(&w, client), "", "_fallback").is_some(), "{client:?}");
    }
}

/// The proposal's backwards compatibility: an empty list from an agent that serves; its CNI
/// config for the runtime is written, and STATUS succeeds, once the API holds a network a
/// sandbox can name (not before: spec 6.1 on a node with no network at all), and pods get
/// networks only by naming them.
#[test]
fn kernel_a_node_without_networks_lists_none_and_is_ready() {
    for client in CLIENTS {
        let mut w = World::new();
        std::fs::remove_file(w.path("default").join("10-cluster.conflist"))
            .expect("removing the default network");
        w.start_agent();
        assert_eq!(list(&w, client), Vec::<Value>::new(), "{client:?}");
        let status = || w.shim(&[("CNI_COMMAND", "STATUS")], &w.plexus_config("1.1.0"));
        let down = status();
        assert!(!down.ok(), "{client:?}: STATUS with no network at all succeeded: {}", down.stdout);
        assert_eq!(down.code(), Some(50), "{client:?}: {}", down.stdout);
        assert!(
            down.json()["cniVersion"].is_string(),
            "{client:?}: error without cniVersion: {}",
            down.stdout
        );
        assert!(down.msg().contains("default network"), "{client:?}: {}", down.stdout);
        let conf = w.path("runtime").join("00-plexus.conflist");
        // The readiness loop runs every second: more than one round.
        std::thread::sleep(Duration::from_millis(1500));
        assert!(!conf.exists(), "{client:?}: written with no network at all");

        set(&w, client, &bridge_network(&w, "blue", "br-blue", "10.10.1.0/24", 1)).ok();
        let up = status();
        assert!(up.ok() && up.stdout.is_empty(), "{client:?}: STATUS: {up:?}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !conf.exists() {
            assert!(Instant::now() < deadline, "{client:?}: no CNI config written; log:\n{}", w.agent_log());
            std::thread::sleep(Duration::from_millis(20));
        }
        let written: Value =
            serde_json::from_str(&std::fs::read_to_string(&conf).expect("the CNI config")).expect("its JSON");
        assert_eq!(written["plugins"][0]["capabilities"]["podSandboxNetworks"], true, "{written:#}");

        // A pod that names no network has none to get; one that names an API network gets it.
        w.write_pod(NS, "p", None);
        let pod = Netns::new("pxpod");
        let out = w.add("c1", &pod, (NS, "p"));
        assert!(!out.ok(), "{client:?}: an ADD without any network succeeded: {}", out.stdout);
        assert_eq!(out.code(), Some(11), "{client:?}: try again later: {}", out.stdout);
        assert!(out.msg().contains("default network is not ready"), "{client:?}: {}", out.stdout);
        w.assert_nothing_left(&[&pod]);

        let networks = json!([{"interfaceName": "eth0", "networkName": "blue"}]);
        sandbox_cni(&w, "ADD", "c2", &pod, "p", &networks).expect_ok();
        assert!(only_address(&pod, "eth0").starts_with("10.10.1."), "{client:?}");
        sandbox_cni(&w, "DEL", "c2", &pod, "p", &networks).expect_ok();
        w.assert_nothing_left(&[&pod]);
    }
}

#[test]
fn kernel_a_network_whose_plugin_is_missing_cannot_manage_sandboxes() {
    for client in CLIENTS {
        let w = api_world();
        set(&w, client, &missing_plugin_network("ghost")).ok();
        set(&w, client, &bridge_network(&w, "blue", "br-blue", "10.10.1.0/24", 1)).ok();
        let networks = list(&w, client);
        let ghost = listed(&networks, NS, "ghost").unwrap_or_else(|| panic!("{client:?}: {networks:#?}"));
        assert_eq!(status(ghost), (false, false), "{client:?}: {ghost:#}");
        let blue = listed(&networks, NS, "blue").expect("blue listed");
        assert_eq!(status(blue), (true, true), "{client:?}: {blue:#}");
    }
}

#[test]
fn kernel_nads_are_listed_unless_an_api_network_of_the_same_name_shadows_them() {
    for client in CLIENTS {
        let w = World::new();
        w.write_nad(NS, "green", Some(&w.bridge_config("green", "br-green", "10.10.2.0/24", true)));
        w.write_nad("other", "blue", Some(&w.bridge_config("blue", "br-nad-blue", "10.10.3.0/24", true)));
        let mut w = w;
        w.start_agent();
        let mut api_blue = bridge_network(&w, "blue", "br-api-blue", "10.10.1.0/24", 1);
        api_blue["metadata"]["namespace"] = json!("other");
        set(&w, client, &api_blue).ok();

        let networks = list(&w, client);
        let mut got = names(&networks);
        got.sort();
        assert_eq!(got, ["/_fallback", "default/green", "other/blue"], "{client:?}: {networks:#?}");
        // The API network first, then the NADs, then the on-disk default network.
        assert_eq!(names(&networks).first().map(String::as_str), Some("other/blue"), "{client:?}");
        assert_eq!(names(&networks).last().map(String::as_str), Some("/_fallback"), "{client:?}");
        let blue = listed(&networks, "other", "blue").expect("other/blue");
        assert_eq!(blue["config"]["cniv1Config"]["plugins"][0]["parameters"]["bridge"], "br-api-blue");
        let green = listed(&networks, NS, "green").expect("the green NAD");
        assert_eq!(green["config"]["cniv1Config"]["networkName"], "green", "{green:#}");
        assert_eq!(green["config"]["cniv1Config"]["plugins"][0]["parameters"]["isGateway"], "true");
        assert_eq!(status(green), (true, true), "{client:?}: {green:#}");

        // Removing the API network uncovers the NAD.
        remove(&w, client, "blue", "other").ok();
        let networks = list(&w, client);
        let blue = listed(&networks, "other", "blue").expect("the blue NAD once uncovered");
        assert_eq!(blue["config"]["cniv1Config"]["plugins"][0]["parameters"]["bridge"], "br-nad-blue");
    }
}

// ---------------------------------------------------------------------------------------
// 4. Remove; restarts.
// ---------------------------------------------------------------------------------------

#[test]
fn kernel_remove_deletes_the_network_and_a_second_remove_is_not_found() {
    for client in CLIENTS {
        let w = api_world();
        set(&w, client, &bridge_network(&w, "blue", "br-blue", "10.10.1.0/24", 1)).ok();
        assert!(listed(&list(&w, client), NS, "blue").is_some(), "{client:?}");
        remove(&w, client, "blue", NS).ok();
        assert!(listed(&list(&w, client), NS, "blue").is_none(), "{client:?}");
        remove(&w, client, "blue", NS).refused("NOT_FOUND", &["default/blue"]);
        // An empty namespace is "default".
        set(&w, client, &bridge_network(&w, "blue", "br-blue", "10.10.1.0/24", 1)).ok();
        remove(&w, client, "blue", "").ok();
        assert!(listed(&list(&w, client), NS, "blue").is_none(), "{client:?}");
    }
}

#[test]
fn kernel_networks_survive_an_agent_restart() {
    for client in CLIENTS {
        let mut w = api_world();
        set(&w, client, &bridge_network(&w, "blue", "br-blue", "10.10.1.0/24", 3)).ok();
        w.kill_agent();
        w.start_agent();
        let networks = list(&w, client);
        let blue = listed(&networks, NS, "blue").unwrap_or_else(|| panic!("{client:?}: {networks:#?}"));
        assert_eq!(blue["config"]["metadata"]["generation"], 3, "{client:?}: {blue:#}");
        // The restarted agent still knows the stored generation.
        set(&w, client, &bridge_network(&w, "blue", "br-blue", "10.10.1.0/24", 2))
            .refused("FAILED_PRECONDITION", &["stale generation 2", "3"]);
    }
}

// ---------------------------------------------------------------------------------------
// 5. The operator's client on its own: YAML, the table, errors.
// ---------------------------------------------------------------------------------------

#[test]
fn kernel_the_cli_reads_yaml_with_proto_field_names_and_prints_a_table() {
    let w = api_world();
    let yaml = format!(
        "metadata:\n  name: blue\n  generation: 1\nip_ranges:\n  - cidr: 10.10.1.0/24\ncniv1_config:\n  \
         cni_version: 1.0.0\n  plugins:\n    - type: bridge\n      parameters:\n        bridge: br-blue\n        \
         ipam: '{{\"type\": \"host-local\", \"dataDir\": \"{}\"}}'\n",
        w.path("ipam").join("blue").display()
    );
    let file = w.path("blue.yaml");
    std::fs::write(&file, yaml).expect("writing blue.yaml");
    cli_reply(&w, &["set", "-f", &file.display().to_string()]).ok();
    set(&w, Client::Cli, &missing_plugin_network("ghost")).ok();

    let mut cmd = Command::new(bin("plexus-agent"));
    cmd.args(["network", "list", "--socket"]).arg(w.network_api_socket());
    let (code, table, stderr) = run(&mut cmd, "");
    assert_eq!(code, 0, "{table} {stderr}");
    let rows: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        rows[0],
        ["NAMESPACE", "NAME", "GENERATION", "TYPES", "SANDBOX-MANAGEMENT", "CONNECTIVITY"],
        "{table}"
    );
    assert!(rows.contains(&vec!["default", "blue", "1", "bridge", "true", "true"]), "{table}");
    assert!(
        rows.contains(&vec!["default", "ghost", "1", "plexus-test-no-such-plugin", "false", "false"]),
        "{table}"
    );
    assert!(rows.contains(&vec!["-", "_fallback", "0", "bridge", "true", "true"]), "{table}");

    // A file that is no NetworkConfig is refused before any RPC, naming the file.
    std::fs::write(w.path("bad.yaml"), "metadata: [1, 2]\n").expect("writing bad.yaml");
    let mut cmd = Command::new(bin("plexus-agent"));
    cmd.args(["network", "set", "-f"]).arg(w.path("bad.yaml")).arg("--socket").arg(w.network_api_socket());
    let (code, _, stderr) = run(&mut cmd, "");
    assert!(code != 0 && code != 3, "exit {code}: {stderr}");
    assert!(stderr.contains("bad.yaml"), "{stderr}");
}

#[test]
fn kernel_the_cli_says_which_socket_it_could_not_reach() {
    let w = World::new();
    let mut cmd = Command::new(bin("plexus-agent"));
    cmd.args(["network", "list", "--socket"]).arg(w.network_api_socket());
    let (code, stdout, stderr) = run(&mut cmd, "");
    assert_ne!(code, 0, "{stdout}");
    assert!(stderr.contains(&w.network_api_socket().display().to_string()), "{stderr}");
}

// ---------------------------------------------------------------------------------------
// 6. Pods on networks set through the API.
// ---------------------------------------------------------------------------------------

#[test]
fn kernel_a_pod_selects_an_api_network_by_name_like_a_nad() {
    let w = api_world();
    set(&w, Client::Python, &bridge_network(&w, "blue", "br-blue", "10.10.1.0/24", 1)).ok();
    w.write_pod(NS, "p", Some("blue"));
    let pod = Netns::new("pxpod");

    w.add("c1", &pod, (NS, "p")).expect_ok();
    let net1 = only_address(&pod, "net1");
    assert!(net1.starts_with("10.10.1.") && net1.ends_with("/24"), "{net1}");
    let status = w.network_status(NS, "p");
    assert_eq!(status_of(&status, "net1")["name"], "default/blue", "{status:#}");
    // The bridge the network's parameters name, in the node.
    assert!(w.node.has_link("br-blue"), "no br-blue in the node");

    for client in CLIENTS {
        let ips = ip_pairs(&sandbox_ips(&w, client, "c1").ok());
        assert_eq!(ips.len(), 2, "{client:?}: {ips:?}");
        assert_eq!(ips[0].0, bare(&only_address(&pod, "eth0")), "{client:?}: {ips:?}");
        assert_eq!(ips[1], (bare(&net1).to_owned(), "default/blue".to_owned()), "{client:?}: {ips:?}");
        sandbox_ips(&w, client, "c-none").refused("NOT_FOUND", &["c-none"]);
    }

    w.del("c1", &pod, (NS, "p")).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_a_network_changed_or_removed_while_a_pod_uses_it_detaches_cleanly_on_del() {
    let w = api_world();
    set(&w, Client::Cli, &bridge_network(&w, "blue", "br-blue", "10.10.1.0/24", 1)).ok();
    set(&w, Client::Cli, &bridge_network(&w, "green", "br-green", "10.10.2.0/24", 1)).ok();
    w.write_pod(NS, "p", Some("blue,green"));
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, (NS, "p")).expect_ok();
    assert!(pod.has_link("net1") && pod.has_link("net2"), "{:?}", pod.link_names());

    // blue moves to another bridge, green goes: the pod's DEL uses what it was attached with.
    set(&w, Client::Cli, &bridge_network(&w, "blue", "br-moved", "10.10.1.0/24", 2)).ok();
    remove(&w, Client::Cli, "green", NS).ok();
    w.del("c1", &pod, (NS, "p")).expect_ok();
    w.assert_nothing_left(&[&pod]);

    // A new pod gets the new blue, and cannot select green any more.
    let pod2 = Netns::new("pxpod");
    w.write_pod(NS, "q", Some("blue"));
    w.add("c2", &pod2, (NS, "q")).expect_ok();
    let br = pod2.link("net1").expect("net1");
    assert!(br["ifname"] == "net1", "{br}");
    assert!(w.node.has_link("br-moved"), "the new blue's bridge is missing");
    w.del("c2", &pod2, (NS, "q")).expect_ok();
    w.write_pod(NS, "r", Some("green"));
    let out = w.add("c3", &pod2, (NS, "r"));
    assert!(!out.ok(), "green was removed, yet selectable: {}", out.stdout);
    assert!(out.msg().contains("green"), "{}", out.stdout);
    w.assert_nothing_left(&[&pod, &pod2]);
}

/// An ADD that failed because a network's plugin binary is missing, saying which.
#[track_caller]
fn assert_names_the_missing_plugin(out: &CniOutput) {
    assert!(!out.ok(), "ADD succeeded without the plugin: {}", out.stdout);
    let text = format!("{} {}", out.msg(), out.json()["details"].as_str().unwrap_or_default());
    assert!(
        text.contains("plexus-test-no-such-plugin"),
        "the error does not name the plugin: {}",
        out.stdout
    );
}

#[test]
fn kernel_a_pod_selecting_a_network_whose_plugin_is_missing_fails_clearly_and_leaves_nothing() {
    let w = api_world();
    set(&w, Client::Python, &missing_plugin_network("ghost")).ok();
    w.write_pod(NS, "p", Some("ghost"));
    let pod = Netns::new("pxpod");
    let out = w.add("c1", &pod, (NS, "p"));
    assert_names_the_missing_plugin(&out);
    w.assert_nothing_left(&[&pod]);
}

// ---------------------------------------------------------------------------------------
// 7. Sandboxes that name networks set through the API.
// ---------------------------------------------------------------------------------------

/// A CNI call as a runtime that implements the proposal makes it: plexus's config with the
/// sandbox's PodSandboxNetworkConfig list as `runtimeConfig.podSandboxNetworks`.
fn sandbox_cni(w: &World, command: &str, cid: &str, netns: &Netns, pod: &str, networks: &Value) -> CniOutput {
    w.cni_with_runtime_config(command, cid, netns, (NS, pod), &json!({"podSandboxNetworks": networks}))
}

#[test]
fn kernel_a_sandbox_that_names_an_api_network_gets_it_and_its_ips_are_answered_per_network() {
    let w = api_world();
    // The bridge takes a MAC and host-local addresses from runtimeConfig when it says so.
    let mut blue = bridge_network(&w, "blue", "br-blue", "10.10.1.0/24", 1);
    blue["cniv1Config"]["plugins"][0]["capabilities"] = json!(["ips", "mac"]);
    set(&w, Client::Python, &blue).ok();
    w.write_pod(NS, "p", None);
    let pod = Netns::new("pxpod");
    let networks = json!([
        {"interfaceName": "eth0", "networkName": "_fallback"},
        {"interfaceName": "blue0", "networkName": "blue",
         "parameters": {"mac": "02:00:00:0b:1e:01", "ips": "[\"10.10.1.77/24\"]"}},
    ]);

    sandbox_cni(&w, "ADD", "c1", &pod, "p", &networks).expect_ok();
    let mut links = pod.link_names();
    links.sort();
    assert_eq!(links, ["blue0", "eth0", "lo"], "exactly the sandbox's networks");
    let eth0 = only_address(&pod, "eth0");
    assert!(eth0.starts_with("10.88.0."), "{eth0}");
    assert_eq!(only_address(&pod, "blue0"), "10.10.1.77/24");
    assert_eq!(pod.link("blue0").expect("blue0")["address"], "02:00:00:0b:1e:01");

    let status = w.network_status(NS, "p");
    let blue_name = status_of(&status, "blue0")["name"].as_str().expect("blue's name").to_owned();
    let default_name = status_of(&status, "eth0")["name"].as_str().expect("the default's name").to_owned();
    assert!(blue_name.ends_with("blue"), "{status:#}");
    assert_eq!(status_of(&status, "eth0")["default"], true, "{status:#}");
    for client in CLIENTS {
        let ips = ip_pairs(&sandbox_ips(&w, client, "c1").ok());
        assert_eq!(
            ips,
            [(bare(&eth0).to_owned(), default_name.clone()), ("10.10.1.77".to_owned(), blue_name.clone())],
            "{client:?}"
        );
    }

    sandbox_cni(&w, "DEL", "c1", &pod, "p", &networks).expect_ok();
    w.assert_nothing_left(&[&pod]);
    for client in CLIENTS {
        sandbox_ips(&w, client, "c1").refused("NOT_FOUND", &["c1"]);
    }
}

#[test]
fn kernel_a_sandbox_network_removed_while_in_use_detaches_cleanly_and_a_missing_plugin_fails_clearly() {
    let w = api_world();
    set(&w, Client::Cli, &bridge_network(&w, "blue", "br-blue", "10.10.1.0/24", 1)).ok();
    set(&w, Client::Cli, &missing_plugin_network("ghost")).ok();
    w.write_pod(NS, "p", None);
    let pod = Netns::new("pxpod");
    let networks = json!([
        {"interfaceName": "eth0", "networkName": "_fallback"},
        {"interfaceName": "net1", "networkName": "blue"},
    ]);
    sandbox_cni(&w, "ADD", "c1", &pod, "p", &networks).expect_ok();
    assert!(pod.has_link("net1"), "{:?}", pod.link_names());
    remove(&w, Client::Cli, "blue", NS).ok();
    sandbox_cni(&w, "DEL", "c1", &pod, "p", &networks).expect_ok();
    w.assert_nothing_left(&[&pod]);

    // Removed, blue is no network any more; ghost's plugin is nowhere.
    let out = sandbox_cni(&w, "ADD", "c2", &pod, "p", &networks);
    assert!(!out.ok(), "blue was removed, yet attached: {}", out.stdout);
    assert!(out.msg().contains("blue"), "{}", out.stdout);
    w.assert_nothing_left(&[&pod]);
    let ghost = json!([
        {"interfaceName": "eth0", "networkName": "_fallback"},
        {"interfaceName": "net1", "networkName": "ghost"},
    ]);
    let out = sandbox_cni(&w, "ADD", "c3", &pod, "p", &ghost);
    assert_names_the_missing_plugin(&out);
    w.assert_nothing_left(&[&pod]);
}
