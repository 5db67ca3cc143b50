//! The façade against the reference plugins of /usr/lib/cni (Debian's containernetworking-plugins
//! 1.1.1): static results compared with the reference's, host-local sharing one range and
//! dataDir with the reference binary (in turn, concurrently, releasing each other's), and
//! dispatch of other types to their binary. Everything lives in temporary directories: no root
//! needed, only the package.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use super::host_local::store::DiskStore;
use super::*;
use crate::cni::ErrorCode;
use crate::delegate::exec::{self as delegate_exec, Exec};

const REFERENCE_DIR: &str = "/usr/lib/cni";

fn require_reference() {
    for plugin in ["host-local", "static"] {
        let p = Path::new(REFERENCE_DIR).join(plugin);
        assert!(p.exists(), "{} is missing: apt-get install -y containernetworking-plugins", p.display());
    }
}

fn env(id: &str, ifname: &str, args: &str) -> InvocationEnv {
    InvocationEnv {
        container_id: id.into(),
        netns: "/var/run/netns/plexus-ipam-test".into(),
        ifname: ifname.into(),
        args: args.into(),
    }
}

fn ipam() -> Ipam {
    Ipam { bin_dirs: vec![PathBuf::from(REFERENCE_DIR)], timeout: Duration::from_secs(20) }
}

/// Runs the reference plugin of `conf`'s ipam type, as a parent plugin would exec it.
async fn reference(
    command: Command,
    conf: &Value,
    e: &InvocationEnv,
) -> Result<Option<Value>, DelegateError> {
    // A config without an ipam type goes to host-local, to see how it refuses it.
    let plugin = conf["ipam"]["type"].as_str().unwrap_or("host-local");
    let dirs = [PathBuf::from(REFERENCE_DIR)];
    delegate_exec::run(&dirs, Exec { plugin, command, env: e.vars(), config: conf }, Duration::from_secs(30))
        .await
}

async fn reference_add(conf: &Value, e: &InvocationEnv) -> Result<CniResult, DelegateError> {
    let out = reference(Command::Add, conf, e).await?.expect("the reference ADD printed a result");
    Ok(CniResult::parse(&out, "").expect("the reference result parses"))
}

/// The code and message of a CNI error, whether the reference binary printed it or native
/// IPAM returned it.
fn code_msg(e: &DelegateError) -> (u32, String) {
    match e {
        DelegateError::Failed { code, msg, .. } => (code.code(), msg.clone()),
        DelegateError::Native { source, .. } => (source.cni_code().code(), source.to_string()),
        other => panic!("not a CNI error: {other}"),
    }
}

fn addresses(r: &CniResult) -> Vec<String> {
    r.ips.iter().map(|ip| ip.address.to_string()).collect()
}

fn ip_files(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| addr::parse_ip(n).is_some())
                .collect()
        })
        .unwrap_or_default()
}

fn host_local(data: &Path, ranges: Value) -> Value {
    json!({"cniVersion": "1.0.0", "name": "shared", "type": "macvlan",
           "ipam": {"type": "host-local", "dataDir": data, "ranges": ranges,
                    "routes": [{"dst": "0.0.0.0/0"}]}})
}

// ---- static ----

#[tokio::test]
async fn static_results_match_the_reference() {
    require_reference();
    let base = |ipam: Value| json!({"cniVersion": "1.0.0", "name": "s", "type": "macvlan", "ipam": ipam});
    let full = json!({"type": "static",
        "addresses": [{"address": "10.1.0.5/24", "gateway": "10.1.0.1"}, {"address": "fd00::5/64", "gateway": "fd00::1"}],
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.1.0.254"}, {"dst": "fd01::/64"}],
        "dns": {"nameservers": ["8.8.8.8"], "domain": "example.com", "search": ["example.com"], "options": ["ndots:2"]}});
    let mut with_args = base(json!({"type": "static", "addresses": [{"address": "10.1.0.5/24"}]}));
    with_args["args"] = json!({"cni": {"ips": ["10.3.0.5/24", "fd00::3/64"]}});
    let mut with_runtime = with_args.clone();
    with_runtime["runtimeConfig"] = json!({"ips": ["10.4.0.5/24"]});
    let mut old =
        base(json!({"type": "static", "addresses": [{"address": "10.1.0.5/24", "gateway": "10.1.0.1"}],
                               "routes": [{"dst": "10.8.0.0/16"}]}));
    old["cniVersion"] = json!("0.2.0");
    let mut tagged = base(full.clone());
    tagged["cniVersion"] = json!("0.3.1");
    let cases = [
        (base(full.clone()), ""),
        (tagged, ""),
        (old, ""),
        (base(json!({"type": "static"})), ""),
        (base(json!({"type": "static", "addresses": [{"address": "::ffff:10.1.0.5/120"}]})), ""),
        (
            base(json!({"type": "static", "addresses": [{"address": "10.1.0.5/24", "gateway": "10.9.9.9"}]})),
            "",
        ),
        (
            base(full.clone()),
            "IgnoreUnknown=1;K8S_POD_NAME=p;IP=10.2.0.5/24,fd00::7/64;GATEWAY=10.2.0.1,fd00::1",
        ),
        (base(full.clone()), "IP=10.2.0.5/24;GATEWAY=10.1.0.254"),
        (with_args, "IP=10.2.0.5/24"),
        (with_runtime, "IP=10.2.0.5/24"),
    ];
    for (conf, args) in cases {
        let e = env("c1", "net1", args);
        let want = reference_add(&conf, &e).await.unwrap_or_else(|err| panic!("{conf} {args}: {err}"));
        let got = ipam().add(&conf, &e).await.unwrap_or_else(|err| panic!("{conf} {args}: {err}"));
        assert_eq!(got, want, "{conf} {args}");
        // And in the wire format of the version asked for.
        let printed = reference(Command::Add, &conf, &e).await.unwrap().unwrap();
        let version = conf["cniVersion"].as_str().unwrap();
        let mut mine = got.to_version(version).unwrap();
        // libcni up to 1.0 prints an empty "dns" object that plexus omits from 1.0.0 on.
        if printed.get("dns") == Some(&json!({})) {
            mine.as_object_mut().unwrap().entry("dns").or_insert(json!({}));
        }
        assert_eq!(mine, printed, "{conf} {args}");
    }
}

#[tokio::test]
async fn static_errors_carry_the_reference_message() {
    require_reference();
    let base = |ipam: Value| json!({"cniVersion": "1.0.0", "name": "s", "type": "macvlan", "ipam": ipam});
    let mut bad_runtime = base(json!({"type": "static"}));
    bad_runtime["runtimeConfig"] = json!({"ips": ["10.4.0.5"]});
    let mut bad_args = base(json!({"type": "static"}));
    bad_args["args"] = json!({"cni": {"ips": ["10.3.0.5"]}});
    let mut too_many = base(
        json!({"type": "static", "addresses": [{"address": "10.1.0.5/24"}, {"address": "10.1.0.6/24"}]}),
    );
    too_many["cniVersion"] = json!("0.2.0");
    let cases = [
        (base(json!({"type": "static", "addresses": [{"address": "10.1.0.5"}]})), "", 7),
        (base(json!({"type": "static", "addresses": [{"gateway": "10.1.0.1"}]})), "", 7),
        (base(json!({"type": "static", "addresses": [{"address": "10.1.0.5/24", "gateway": "x"}]})), "", 7),
        (base(json!({"type": "static", "routes": [{"dst": "x"}]})), "", 7),
        (base(json!({"type": "static"})), "IP=10.2.0.5", 4),
        (base(json!({"type": "static"})), "GATEWAY=x", 4),
        (base(json!({"type": "static"})), "K8S_POD_NAME=x", 4),
        (base(json!({"type": "static"})), "IP", 4),
        (bad_runtime, "", 7),
        (bad_args, "", 7),
        (too_many, "", 7),
    ];
    for (conf, args, code) in cases {
        let e = env("c1", "net1", args);
        let (ref_code, ref_msg) = code_msg(&reference(Command::Add, &conf, &e).await.unwrap_err());
        assert_eq!(ref_code, ErrorCode::Internal.code());
        let (my_code, my_msg) = code_msg(&ipam().add(&conf, &e).await.unwrap_err());
        assert_eq!(my_code, code, "{conf} {args}: {my_msg}");
        assert!(my_msg.starts_with(&ref_msg), "{conf} {args}:\n mine {my_msg}\n  ref {ref_msg}");
    }
}

#[tokio::test]
async fn static_check_and_del_behave_like_the_reference() {
    require_reference();
    let conf = |prev: Value| {
        json!({"cniVersion": "1.0.0", "name": "s", "type": "macvlan", "prevResult": prev,
               "ipam": {"type": "static", "addresses": [{"address": "10.1.0.5/24", "gateway": "10.1.0.1"}]}})
    };
    let e = env("c1", "net1", "");
    for (prev, ok) in [
        (json!({"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.5/24", "gateway": "10.1.0.1"}]}), true),
        (json!({"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.9/24", "gateway": "10.1.0.1"}]}), true),
        (json!({"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.5/24", "gateway": "10.1.0.2"}]}), false),
        (Value::Null, false),
    ] {
        let c = conf(prev);
        let want = reference(Command::Check, &c, &e).await;
        let got = ipam().check(&c, &e).await;
        assert_eq!(got.is_ok(), ok, "{c}: {got:?}");
        assert_eq!(want.is_ok(), ok, "{c}: {want:?}");
        if let (Err(w), Err(g)) = (&want, &got) {
            assert!(code_msg(g).1.starts_with(&code_msg(w).1), "{g} vs {w}");
        }
    }
    ipam().del(&conf(Value::Null), &e).await.unwrap();
    ipam().del(&json!({"name": "s", "ipam": {"type": "static", "addresses": "garbage"}}), &e).await.unwrap();
}

// ---- host-local ----

#[tokio::test]
async fn host_local_takes_turns_with_the_reference_on_one_range() {
    require_reference();
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("shared");
    // 10.20.0.1-.14, gateway .1: 13 addresses to hand out.
    let conf = host_local(data.path(), json!([[{"subnet": "10.20.0.0/28"}]]));
    let mut got = Vec::new();
    for i in 0..13 {
        let e = env(&format!("c{i}"), "net1", "");
        let r = if i % 2 == 0 {
            reference_add(&conf, &e).await.unwrap()
        } else {
            ipam().add(&conf, &e).await.unwrap()
        };
        assert_eq!(r.routes.len(), 1);
        assert_eq!(r.ips[0].gateway, Some("10.20.0.1".parse().unwrap()));
        got.extend(addresses(&r));
    }
    // One round robin between both, in the reference's order: no address twice.
    let want: Vec<String> = (2..=14).map(|i| format!("10.20.0.{i}/28")).collect();
    assert_eq!(got, want);

    // The files plexus wrote are those the reference writes.
    let reference_file = dir.join("10.20.0.2");
    let native_file = dir.join("10.20.0.3");
    assert_eq!(std::fs::read(&native_file).unwrap(), b"c1\r\nnet1");
    assert_eq!(std::fs::read(&reference_file).unwrap(), b"c0\r\nnet1");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode();
    assert_eq!(mode(&native_file), mode(&reference_file));
    assert_eq!(std::fs::read(dir.join("last_reserved_ip.0")).unwrap(), b"10.20.0.14");

    // Exhausted: both refuse the same way.
    let e = env("late", "net1", "");
    let (ref_code, ref_msg) = code_msg(&reference(Command::Add, &conf, &e).await.unwrap_err());
    let (code, msg) = code_msg(&ipam().add(&conf, &e).await.unwrap_err());
    assert_eq!((code, msg.as_str()), (ref_code, ref_msg.as_str()));
    assert_eq!(
        msg,
        "failed to allocate for range 0: no IP addresses available in range set: 10.20.0.1-10.20.0.14"
    );
    assert_eq!(code, 999);

    // Each reads the other's files: CHECK finds them, a second ADD is refused as a duplicate.
    ipam().check(&conf, &env("c0", "net1", "")).await.unwrap();
    reference(Command::Check, &conf, &env("c1", "net1", "")).await.unwrap();
    // The duplicate check comes before the search for a free address, so this names plexus's file.
    let (_, ref_dup) = code_msg(&reference(Command::Add, &conf, &env("c1", "net1", "")).await.unwrap_err());
    assert_eq!(ref_dup, "failed to allocate for range 0: 10.20.0.3 has been allocated to c1, duplicate allocation is not allowed");

    // Each releases the other's allocations.
    for i in 0..13 {
        let e = env(&format!("c{i}"), "net1", "");
        if i % 2 == 0 {
            ipam().del(&conf, &e).await.unwrap();
        } else {
            reference(Command::Del, &conf, &e).await.unwrap();
        }
    }
    assert!(ip_files(&dir).is_empty(), "{:?}", ip_files(&dir));
    // And the round robin goes on where it stopped, for both.
    let r = reference_add(&conf, &env("n1", "net1", "")).await.unwrap();
    assert_eq!(addresses(&r), ["10.20.0.2/28"]);
    let r = ipam().add(&conf, &env("n2", "net1", "")).await.unwrap();
    assert_eq!(addresses(&r), ["10.20.0.3/28"]);

    // Now a duplicate ADD, after the range has room again.
    let (dup_code, dup) = code_msg(&ipam().add(&conf, &env("n1", "net1", "")).await.unwrap_err());
    let (ref_code, ref_dup) =
        code_msg(&reference(Command::Add, &conf, &env("n2", "net1", "")).await.unwrap_err());
    assert_eq!(dup, "failed to allocate for range 0: 10.20.0.2 has been allocated to n1, duplicate allocation is not allowed");
    assert_eq!(ref_dup, "failed to allocate for range 0: 10.20.0.3 has been allocated to n2, duplicate allocation is not allowed");
    assert_eq!((dup_code, ref_code), (999, 999));

    // DEL twice, and DEL of what was never allocated, are fine.
    for _ in 0..2 {
        ipam().del(&conf, &env("n1", "net1", "")).await.unwrap();
    }
    ipam().del(&conf, &env("never", "net1", "")).await.unwrap();
    let (code, msg) = code_msg(&ipam().check(&conf, &env("n1", "net1", "")).await.unwrap_err());
    let (_, ref_msg) = code_msg(&reference(Command::Check, &conf, &env("n1", "net1", "")).await.unwrap_err());
    assert_eq!((code, msg.as_str()), (999, ref_msg.as_str()));
}

#[tokio::test]
async fn host_local_dual_stack_and_requested_addresses_interoperate() {
    require_reference();
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("shared");
    let conf = host_local(
        data.path(),
        json!([[{"subnet": "10.30.0.0/24", "rangeStart": "10.30.0.100", "rangeEnd": "10.30.0.103"},
                {"subnet": "10.31.0.0/24", "rangeStart": "10.31.0.10", "rangeEnd": "10.31.0.11"}],
               [{"subnet": "fd30::/120", "gateway": "fd30::2"}]]),
    );
    let mut seen = Vec::new();
    for i in 0..6 {
        let e = env(&format!("d{i}"), "eth1", "");
        let r = if i % 2 == 1 {
            reference_add(&conf, &e).await.unwrap()
        } else {
            ipam().add(&conf, &e).await.unwrap()
        };
        seen.push(addresses(&r));
    }
    let flat: Vec<String> = seen.iter().flatten().cloned().collect();
    assert_eq!(flat.iter().collect::<BTreeSet<_>>().len(), flat.len(), "{flat:?}");
    assert_eq!(
        seen,
        [
            ["10.30.0.100/24", "fd30::1/120"],
            ["10.30.0.101/24", "fd30::3/120"],
            ["10.30.0.102/24", "fd30::4/120"],
            ["10.30.0.103/24", "fd30::5/120"],
            ["10.31.0.10/24", "fd30::6/120"],
            ["10.31.0.11/24", "fd30::7/120"],
        ]
    );
    assert_eq!(std::fs::read(dir.join("last_reserved_ip.1")).unwrap(), b"fd30::7");

    // Requested addresses: what one holds, the other cannot have. Free one v4 address each.
    ipam().del(&conf, &env("d0", "eth1", "")).await.unwrap();
    reference(Command::Del, &conf, &env("d1", "eth1", "")).await.unwrap();
    let mut want = conf.clone();
    want["runtimeConfig"] = json!({"ips": ["fd30::80"]});
    let r = ipam().add(&want, &env("r1", "eth1", "")).await.unwrap();
    assert_eq!(addresses(&r), ["10.30.0.100/24", "fd30::80/120"]);
    let taken = "failed to allocate for range 1: requested IP address fd30::80 is not available in range set fd30::1-fd30::ff";
    let (code, ref_msg) =
        code_msg(&reference(Command::Add, &want, &env("r2", "eth1", "")).await.unwrap_err());
    assert_eq!((code, ref_msg.as_str()), (999, taken));
    let (code, msg) = code_msg(&ipam().add(&want, &env("r3", "eth1", "")).await.unwrap_err());
    assert_eq!((code, msg.as_str()), (999, taken));
    reference(Command::Del, &conf, &env("r1", "eth1", "")).await.unwrap();
    let r = reference_add(&want, &env("r2", "eth1", "IgnoreUnknown=1;K8S_POD_NAME=x")).await.unwrap();
    assert_eq!(addresses(&r), ["10.30.0.100/24", "fd30::80/120"]);

    // A request that fits no range set; then the CNI_ARGS form.
    let mut nowhere = conf.clone();
    nowhere["args"] = json!({"cni": {"ips": ["10.99.0.1"]}});
    let (_, msg) = code_msg(&ipam().add(&nowhere, &env("x", "eth1", "")).await.unwrap_err());
    let (_, ref_msg) = code_msg(&reference(Command::Add, &nowhere, &env("x", "eth1", "")).await.unwrap_err());
    assert_eq!(msg, ref_msg);
    assert_eq!(msg, "failed to allocate all requested IPs: 10.99.0.1");
    let r = ipam().add(&conf, &env("y", "eth1", "IP=10.30.0.101")).await.unwrap();
    assert_eq!(addresses(&r)[0], "10.30.0.101/24");
    // Nothing leaked by the failures: d2..d5, r2 and y hold two addresses each.
    assert_eq!(ip_files(&dir).len(), 2 * 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn host_local_concurrent_native_and_reference_allocations_are_unique() {
    require_reference();
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("shared");
    // 10.40.0.1-.62 minus the gateway: 61 addresses for 30 containers.
    let conf = host_local(data.path(), json!([[{"subnet": "10.40.0.0/26"}]]));
    let mut tasks = Vec::new();
    for i in 0..30 {
        let conf = conf.clone();
        tasks.push(tokio::spawn(async move {
            let e = env(&format!("k{i}"), "net1", "");
            let r = if i % 3 == 0 { reference_add(&conf, &e).await } else { ipam().add(&conf, &e).await };
            (i, r.map(|r| addresses(&r)))
        }));
    }
    let mut all = BTreeSet::new();
    for t in tasks {
        let (i, r) = t.await.unwrap();
        let got = r.unwrap_or_else(|e| panic!("k{i}: {e}"));
        assert_eq!(got.len(), 1);
        assert!(all.insert(got[0].clone()), "{} given twice", got[0]);
        let file = dir.join(got[0].trim_end_matches("/26"));
        assert_eq!(std::fs::read_to_string(file).unwrap(), format!("k{i}\r\nnet1"));
    }
    assert_eq!(all.len(), 30);
    // Under one lock, 30 sequential allocations from .2 on: exactly .2 to .31.
    let want: BTreeSet<String> = (2..32).map(|i| format!("10.40.0.{i}/26")).collect();
    assert_eq!(all, want);

    let mut tasks = Vec::new();
    for i in 0..30 {
        let conf = conf.clone();
        tasks.push(tokio::spawn(async move {
            let e = env(&format!("k{i}"), "net1", "");
            // Each releases what the other side allocated.
            if i % 3 == 0 {
                ipam().del(&conf, &e).await
            } else {
                reference(Command::Del, &conf, &e).await.map(drop)
            }
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert!(ip_files(&dir).is_empty());
}

#[tokio::test]
async fn host_local_and_the_reference_wait_for_each_others_lock() {
    require_reference();
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("shared");
    let conf = host_local(data.path(), json!([[{"subnet": "10.50.0.0/24"}]]));
    let held = DiskStore::open(&dir, std::time::Instant::now() + Duration::from_secs(5)).unwrap();
    // The reference blocks on plexus's lock...
    let c = conf.clone();
    let waiting = tokio::spawn(async move { reference_add(&c, &env("w", "net1", "")).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "the reference did not wait for the lock");
    assert!(ip_files(&dir).is_empty());
    // ...and plexus gives up with "try again" when the lock stays held.
    let impatient = Ipam { timeout: Duration::from_millis(200), ..ipam() };
    let (code, msg) = code_msg(&impatient.add(&conf, &env("p", "net1", "")).await.unwrap_err());
    assert_eq!(code, 11, "{msg}");
    assert!(msg.contains("lock"), "{msg}");
    drop(held);
    let r = waiting.await.unwrap().unwrap();
    assert_eq!(addresses(&r), ["10.50.0.2/24"]);
}

#[tokio::test]
async fn host_local_config_errors_carry_the_reference_message() {
    require_reference();
    let data = tempfile::tempdir().unwrap();
    let d = data.path();
    let ipam_conf = |extra: Value| {
        let mut i = json!({"type": "host-local", "dataDir": d});
        for (k, v) in extra.as_object().unwrap() {
            i[k] = v.clone();
        }
        json!({"cniVersion": "1.0.0", "name": "bad", "type": "macvlan", "ipam": i})
    };
    let mut old = ipam_conf(json!({"ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "10.2.0.0/24"}]]}));
    old["cniVersion"] = json!("0.2.0");
    let cases = [
        (ipam_conf(json!({})), "", 7),
        (ipam_conf(json!({"subnet": "10.1.0.0/31"})), "", 7),
        (ipam_conf(json!({"subnet": "10.1.0.5/24"})), "", 7),
        (ipam_conf(json!({"subnet": "10.1.0.0/24", "rangeStart": "10.2.0.1"})), "", 7),
        (ipam_conf(json!({"subnet": "10.1.0.0/24", "rangeEnd": "10.1.1.1"})), "", 7),
        (
            ipam_conf(json!({"subnet": "10.1.0.0/24", "rangeStart": "10.1.0.20", "rangeEnd": "10.1.0.10"})),
            "",
            7,
        ),
        (ipam_conf(json!({"ranges": [[]]})), "", 7),
        (ipam_conf(json!({"ranges": [[{"subnet": "10.1.0.0/24"}, {"subnet": "fd00::/64"}]]})), "", 7),
        (ipam_conf(json!({"ranges": [[{"subnet": "10.1.0.0/24"}, {"subnet": "10.1.0.0/25"}]]})), "", 7),
        (ipam_conf(json!({"ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "10.1.0.0/25"}]]})), "", 7),
        (ipam_conf(json!({"subnet": "bogus"})), "", 7),
        (old, "", 7),
        (ipam_conf(json!({"subnet": "10.1.0.0/24"})), "K8S_POD_NAME=x", 4),
        (ipam_conf(json!({"subnet": "10.1.0.0/24"})), "IP=10.1.0.300", 4),
        (ipam_conf(json!({"subnet": "10.1.0.0/24"})), "IP=1;", 4),
        (json!({"cniVersion": "1.0.0", "name": "bad", "type": "macvlan"}), "", 7),
    ];
    for (conf, args, code) in cases {
        let e = env("c1", "net1", args);
        let (ref_code, ref_msg) = code_msg(&reference(Command::Add, &conf, &e).await.unwrap_err());
        assert_eq!(ref_code, ErrorCode::Internal.code(), "{ref_msg}");
        let (my_code, my_msg) = code_msg(&ipam().add(&conf, &e).await.unwrap_err());
        assert_eq!(my_code, code, "{conf} {args}: {my_msg}");
        assert!(my_msg.starts_with(&ref_msg), "{conf} {args}:\n mine {my_msg}\n  ref {ref_msg}");
    }
    assert!(ip_files(&d.join("bad")).is_empty());
}

#[tokio::test]
async fn host_local_reads_resolv_conf_like_the_reference() {
    require_reference();
    let data = tempfile::tempdir().unwrap();
    let resolv = data.path().join("resolv.conf");
    std::fs::write(
        &resolv,
        "nameserver 10.0.0.53\nsearch a.example b.example\noptions ndots:3\ndomain x.example\n",
    )
    .unwrap();
    let mut conf = host_local(data.path(), json!([[{"subnet": "10.60.0.0/24"}]]));
    conf["ipam"]["resolvConf"] = json!(resolv);
    let want = reference_add(&conf, &env("a", "net1", "")).await.unwrap();
    let got = ipam().add(&conf, &env("b", "net1", "")).await.unwrap();
    assert_eq!(got.dns, want.dns);
    assert_eq!(got.routes, want.routes);
    assert_eq!(got.dns.nameservers, ["10.0.0.53"]);
    conf["ipam"]["resolvConf"] = json!(data.path().join("missing"));
    let (code, msg) = code_msg(&ipam().add(&conf, &env("c", "net1", "")).await.unwrap_err());
    assert_eq!(code, 7);
    assert!(msg.contains("missing") && msg.contains("resolvConf"), "{msg}");
}

// ---- the façade ----

#[tokio::test]
async fn invalid_calls_are_refused_with_cni_codes() {
    let data = tempfile::tempdir().unwrap();
    let conf = host_local(data.path(), json!([[{"subnet": "10.70.0.0/24"}]]));
    let cases = [
        (
            json!({"name": "n", "cniVersion": "1.0.0"}),
            env("c", "net1", ""),
            7,
            "IPAM config missing 'ipam' key",
        ),
        (json!({"name": "n", "ipam": {}}), env("c", "net1", ""), 7, "has no \"type\""),
        (json!({"name": "n", "ipam": {"type": ""}}), env("c", "net1", ""), 7, "has no \"type\""),
        (conf.clone(), env("", "net1", ""), 4, "CNI_CONTAINERID"),
        (conf.clone(), env("../../etc", "net1", ""), 4, "invalid characters in containerID"),
        (conf.clone(), env("c", "a\r\nb", ""), 4, "interface name"),
        (
            json!({"name": "../x", "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}}),
            env("c", "net1", ""),
            7,
            "network name",
        ),
        (
            json!({"ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}}),
            env("c", "net1", ""),
            7,
            "missing network name",
        ),
    ];
    for (netconf, e, code, want) in cases {
        for err in
            [ipam().add(&netconf, &e).await.unwrap_err(), ipam().check(&netconf, &e).await.unwrap_err()]
        {
            let (c, msg) = code_msg(&err);
            assert_eq!(c, code, "{netconf} {e:?}: {msg}");
            assert!(msg.contains(want), "{netconf}: {msg}");
            assert!(err.to_string().contains(&msg));
        }
    }
    assert!(ip_files(&data.path().join("shared")).is_empty());
    // DEL of a network never used creates nothing.
    ipam().del(&conf, &env("c", "net1", "")).await.unwrap();
    assert!(!data.path().join("shared").exists());
}

fn script(dir: &Path, name: &str, body: &str) {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[tokio::test]
async fn other_types_are_exec_d_with_the_cni_environment_and_the_whole_config() {
    let d = tempfile::tempdir().unwrap();
    let log = d.path().join("log");
    script(
        d.path(),
        "fake-ipam",
        &format!(
            r#"conf=$(cat)
echo "$CNI_COMMAND|$CNI_CONTAINERID|$CNI_NETNS|$CNI_IFNAME|$CNI_ARGS|$CNI_PATH|$conf" >> {log}
[ "$CNI_COMMAND" = ADD ] && echo '{{"cniVersion":"0.4.0","ips":[{{"version":"4","address":"10.80.0.5/24","gateway":"10.80.0.1","interface":0}}],"interfaces":[{{"name":"x"}}],"routes":[{{"dst":"0.0.0.0/0"}}],"dns":{{"nameservers":["10.80.0.53"]}}}}'
exit 0"#,
            log = log.display()
        ),
    );
    script(d.path(), "silent-ipam", "cat >/dev/null; exit 0");
    script(d.path(), "failing-ipam", r#"echo '{"code":11,"msg":"no lease yet"}'; exit 1"#);
    let ipam = Ipam { bin_dirs: vec![d.path().to_owned()], timeout: Duration::from_secs(10) };
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "macvlan", "master": "eth0",
                      "ipam": {"type": "fake-ipam", "anything": [1, 2]}});
    let e = env("c9", "net3", "IgnoreUnknown=1;K8S_POD_NAME=p");
    let r = ipam.add(&conf, &e).await.unwrap();
    assert_eq!(addresses(&r), ["10.80.0.5/24"]);
    assert_eq!(r.ips[0].interface, None, "the parent sets the interface index");
    assert_eq!(r.dns.nameservers, ["10.80.0.53"]);
    ipam.check(&conf, &e).await.unwrap();
    ipam.del(&conf, &e).await.unwrap();
    let lines: Vec<String> = std::fs::read_to_string(&log).unwrap().lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 3);
    for (line, command) in lines.iter().zip(["ADD", "CHECK", "DEL"]) {
        let fields: Vec<&str> = line.splitn(7, '|').collect();
        assert_eq!(
            fields[..6],
            [
                command,
                "c9",
                "/var/run/netns/plexus-ipam-test",
                "net3",
                "IgnoreUnknown=1;K8S_POD_NAME=p",
                &d.path().display().to_string()
            ]
        );
        assert_eq!(serde_json::from_str::<Value>(fields[6]).unwrap(), conf, "the whole config on stdin");
    }

    let silent = json!({"cniVersion": "1.0.0", "name": "n", "ipam": {"type": "silent-ipam"}});
    assert!(matches!(ipam.add(&silent, &e).await, Err(DelegateError::BadOutput { .. })));
    ipam.del(&silent, &e).await.unwrap();
    let failing = json!({"cniVersion": "1.0.0", "name": "n", "ipam": {"type": "failing-ipam"}});
    assert_eq!(code_msg(&ipam.add(&failing, &e).await.unwrap_err()), (11, "no lease yet".into()));
    let missing = json!({"cniVersion": "1.0.0", "name": "n", "ipam": {"type": "dhcp-nope"}});
    assert!(matches!(ipam.add(&missing, &e).await, Err(DelegateError::NotFound { .. })));
}

/// An IPAMClaim through the façade: host-local allocates for the claim (a second container
/// gets the same address, the containers' DELs leave it, CHECK finds it), static takes the
/// claim's addresses in place of its own, and a claim without addresses leaves static's.
#[tokio::test]
async fn an_ipam_claim_is_honoured_by_host_local_and_static() {
    let dir = tempfile::tempdir().unwrap();
    let claim = |ips: Value| json!({"namespace": "ns1", "name": "vm-a", "ips": ips});
    let host_local = |ips: Value| {
        json!({"cniVersion": "1.0.0", "name": "tenantred", "runtimeConfig": {claim::RUNTIME_CONFIG_KEY: claim(ips)},
               "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.66.0.0/24"}]], "dataDir": dir.path()}})
    };
    let first = ipam().add(&host_local(json!([])), &env("c1", "net1", "")).await.unwrap();
    assert_eq!(first.ips[0].address.to_string(), "10.66.0.2/24");
    ipam().del(&host_local(json!([])), &env("c1", "net1", "")).await.unwrap();
    let again = ipam().add(&host_local(json!(["10.66.0.2/24"])), &env("c2", "net1", "")).await.unwrap();
    assert_eq!(again.ips[0].address.to_string(), "10.66.0.2/24");
    ipam().check(&host_local(json!(["10.66.0.2/24"])), &env("c2", "net1", "")).await.unwrap();
    ipam().del(&host_local(json!(["10.66.0.2/24"])), &env("c2", "net1", "")).await.unwrap();
    let held: Vec<String> = std::fs::read_dir(dir.path().join("tenantred"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("10."))
        .collect();
    assert_eq!(held, ["10.66.0.2"]);
    let owner = std::fs::read_to_string(dir.path().join("tenantred/10.66.0.2")).unwrap();
    assert_eq!(owner, "ipamclaim/ns1/vm-a\r\nipamclaim");

    let static_conf = |ips: Value| {
        json!({"cniVersion": "1.0.0", "name": "n", "runtimeConfig": {claim::RUNTIME_CONFIG_KEY: claim(ips)},
               "ipam": {"type": "static", "addresses": [{"address": "10.9.0.5/24"}]}})
    };
    let claimed = ipam().add(&static_conf(json!(["10.9.0.7/24"])), &env("c3", "net1", "")).await.unwrap();
    assert_eq!(claimed.ips.iter().map(|ip| ip.address.to_string()).collect::<Vec<_>>(), ["10.9.0.7/24"]);
    let own = ipam().add(&static_conf(json!([])), &env("c3", "net1", "")).await.unwrap();
    assert_eq!(own.ips.iter().map(|ip| ip.address.to_string()).collect::<Vec<_>>(), ["10.9.0.5/24"]);
}
