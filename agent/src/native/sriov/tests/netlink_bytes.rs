//! The PF-side messages, byte for byte against iproute2.
//!
//! Each case runs `ip link set dev PF vf N ARGS` under strace, live, on a veth in a throwaway
//! namespace, and takes the RTM_NEWLINK request from strace's hex dump of what `ip` wrote to its
//! netlink socket. The kernel refuses it (a veth has no VFs), but `ip` has sent it by then, and
//! the request is all that matters here. The same setting, built by the netlink layer
//! ([`set_vf_request`]) for the veth's ifindex, must be the same bytes except for:
//!
//! - `nlmsg_seq` (bytes 8..12): `ip` numbers requests from the clock, plexus's socket from 1;
//! - `nlmsg_type` (bytes 4..6): `ip` sends RTM_NEWLINK (16), plexus RTM_SETLINK (19), which the
//!   kernel handles identically for an existing device (both end in `do_setlink`); asserted,
//!   then zeroed.
//!
//! Nothing else is normalised: length, flags (REQUEST|ACK), port id (0), the ifinfomsg with the
//! PF's real index, and every attribute and padding byte must match.

use plexus_testkit::{run, unique_ifname, Netns};

use crate::native::sriov::config::SriovConf;
use crate::native::sriov::vf_netlink::{LinkState, NetlinkPf, PfControl, VfSetting, VlanProto};
use crate::netlink::sriov_vf::set_vf_request;

const RTM_NEWLINK: u16 = 16;
const RTM_SETLINK: u16 = 19;

/// A veth in a fresh namespace, standing in for a PF: `ip` only needs a device to address.
struct Pf {
    ns: Netns,
    name: String,
    index: u32,
}

impl Pf {
    fn new() -> Pf {
        let ns = Netns::new("plx-sb");
        let name = unique_ifname("pf");
        ns.ip(&format!("link add {name} type veth peer name {name}p"));
        let link = ns.link(&name).expect("the veth just created");
        let index = link["ifindex"].as_u64().and_then(|i| u32::try_from(i).ok()).expect("an ifindex");
        Pf { ns, name, index }
    }

    /// The RTM_NEWLINK request `ip -n NS link set dev PF vf VF ARGS` sends.
    fn ip_request(&self, vf: u32, args: &str) -> Vec<u8> {
        // `-e write=all` dumps, in hex, every buffer the process writes, sendmsg's iovecs included;
        // `-o /dev/stdout` keeps the trace apart from ip's error message on stderr.
        let strace = "strace -f -qq -e trace=sendmsg -e write=all -xx -s 65535 -o /dev/stdout";
        let ip = format!("ip -n {} link set dev {} vf {vf} {args}", self.ns.name, self.name);
        let argv: Vec<&str> = strace.split_whitespace().chain(ip.split_whitespace()).collect();
        // `ip` fails (no VFs on a veth) after sending; only strace's own failure matters.
        let out =
            std::process::Command::new(argv[0]).args(&argv[1..]).output().expect("strace must be installed");
        let trace = String::from_utf8_lossy(&out.stdout);
        let requests = hex_dumps(&trace);
        let mut newlinks =
            requests.into_iter().filter(|m| m.len() >= 16 && u16::from_le_bytes([m[4], m[5]]) == RTM_NEWLINK);
        let request = newlinks.next().unwrap_or_else(|| {
            panic!(
                "no RTM_NEWLINK in the trace of ip link set dev {} vf {vf} {args}:\n{trace}\nstderr: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr)
            )
        });
        assert!(newlinks.next().is_none(), "ip sent more than one RTM_NEWLINK for {args}");
        request
    }
}

/// The buffers of strace's `-e write=` hex dumps, one per syscall:
/// ` | 00000  94 00 00 00 10 00 05 00  dc 90 01 6b 00 00 00 00  ...........k.... |`
fn hex_dumps(trace: &str) -> Vec<Vec<u8>> {
    let mut dumps: Vec<Vec<u8>> = Vec::new();
    let mut current: Option<Vec<u8>> = None;
    for line in trace.lines() {
        let Some(body) = line.trim_start().strip_prefix("| ") else {
            dumps.extend(current.take());
            continue;
        };
        let Some(offset) = body.get(..5).and_then(|o| usize::from_str_radix(o, 16).ok()) else { continue };
        let buffer = current.get_or_insert_with(Vec::new);
        assert_eq!(offset, buffer.len(), "strace dump lines out of order: {line}");
        // The hex column is fixed width (16 bytes of "xx ", an extra space after the eighth);
        // the ASCII column after it can look like hex itself, so it is cut off by position.
        let column = body.get(7..56).or_else(|| body.get(7..)).unwrap_or_default();
        for word in column.split_whitespace() {
            buffer.push(u8::from_str_radix(word, 16).unwrap_or_else(|_| panic!("not a hex byte: {line}")));
        }
    }
    dumps.extend(current);
    dumps
}

/// Zeroes what the module documentation lists, after checking the message types.
fn normalised(mut request: Vec<u8>, expected_type: u16) -> Vec<u8> {
    assert_eq!(u16::from_le_bytes([request[4], request[5]]), expected_type);
    request[4..6].fill(0);
    request[8..12].fill(0);
    request
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .chunks(16)
        .map(|row| row.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}

fn assert_same(pf: &Pf, vf: u32, args: &str, setting: &VfSetting) {
    let ip = normalised(pf.ip_request(vf, args), RTM_NEWLINK);
    let plexus = normalised(set_vf_request(pf.index, vf, setting), RTM_SETLINK);
    assert_eq!(plexus, ip, "vf {vf} {args}:\nplexus:\n{}\nip:\n{}", hex(&plexus), hex(&ip));
}

#[test]
fn kernel_every_setting_is_sent_as_iproute2_sends_it() {
    let pf = Pf::new();
    let mac = "02:11:22:33:44:55".parse().expect("a MAC");
    let cases: Vec<(u32, &str, VfSetting)> = vec![
        (0, "mac 02:11:22:33:44:55", VfSetting::Mac { mac }),
        (3, "vlan 10 qos 3", VfSetting::Vlan { vlan: 10, qos: 3, proto: VlanProto::Dot1Q }),
        (3, "vlan 10 qos 3 proto 802.1Q", VfSetting::Vlan { vlan: 10, qos: 3, proto: VlanProto::Dot1Q }),
        (
            3,
            "vlan 4094 qos 7 proto 802.1ad",
            VfSetting::Vlan { vlan: 4094, qos: 7, proto: VlanProto::Dot1Ad },
        ),
        (1, "vlan 0 qos 0", VfSetting::Vlan { vlan: 0, qos: 0, proto: VlanProto::Dot1Q }),
        (2, "spoofchk on", VfSetting::SpoofCheck { on: true }),
        (2, "spoofchk off", VfSetting::SpoofCheck { on: false }),
        (5, "trust on", VfSetting::Trust { on: true }),
        (5, "trust off", VfSetting::Trust { on: false }),
        (7, "state auto", VfSetting::LinkState { state: LinkState::Auto }),
        (7, "state enable", VfSetting::LinkState { state: LinkState::Enable }),
        (7, "state disable", VfSetting::LinkState { state: LinkState::Disable }),
        (9, "min_tx_rate 10 max_tx_rate 100", VfSetting::Rate { min_tx_rate: 10, max_tx_rate: 100 }),
        (9, "min_tx_rate 0 max_tx_rate 0", VfSetting::Rate { min_tx_rate: 0, max_tx_rate: 0 }),
        (63, "min_tx_rate 0 max_tx_rate 25000", VfSetting::Rate { min_tx_rate: 0, max_tx_rate: 25000 }),
    ];
    for (vf, args, setting) in &cases {
        assert_same(&pf, *vf, args, setting);
        // The text errors show is the same command, so a failure can be reproduced by hand.
        if !args.contains("proto") && !args.starts_with("vlan") {
            assert_eq!(setting.to_string(), *args);
        }
    }
}

/// From config to bytes: each combination of sriov-cni keys yields exactly the requests the
/// matching `ip` commands send, in sriov-cni's order.
#[test]
fn kernel_configs_become_the_requests_of_the_matching_ip_commands() {
    let pf = Pf::new();
    let cases: Vec<(serde_json::Value, Vec<&str>)> = vec![
        (serde_json::json!({"mac": "02:00:00:aa:bb:cc"}), vec!["vlan 0 qos 0", "mac 02:00:00:aa:bb:cc"]),
        (serde_json::json!({"vlan": 100, "vlanQoS": 5}), vec!["vlan 100 qos 5"]),
        (
            serde_json::json!({"vlan": 100, "vlanQoS": 5, "vlanProto": "802.1AD"}),
            vec!["vlan 100 qos 5 proto 802.1ad"],
        ),
        (
            serde_json::json!({"spoofchk": "off", "trust": "on", "link_state": "disable"}),
            vec!["vlan 0 qos 0", "spoofchk off", "trust on", "state disable"],
        ),
        (
            serde_json::json!({"spoofchk": "on", "trust": "off", "link_state": "enable", "max_tx_rate": 200}),
            vec!["vlan 0 qos 0", "min_tx_rate 0 max_tx_rate 200", "spoofchk on", "trust off", "state enable"],
        ),
        (
            serde_json::json!({
                "vlan": 7, "vlanQoS": 1, "vlanProto": "802.1q", "mac": "02:00:00:00:00:07",
                "min_tx_rate": 10, "max_tx_rate": 1000, "spoofchk": "on", "trust": "on", "link_state": "auto",
                "runtimeConfig": {"bandwidth": {"egressRate": 2_500_000_001_u64}}
            }),
            vec![
                "vlan 7 qos 1",
                "mac 02:00:00:00:00:07",
                // 2.5 Gbit/s and one bit more, rounded up to whole Mbps.
                "min_tx_rate 10 max_tx_rate 2501",
                "spoofchk on",
                "trust on",
                "state auto",
            ],
        ),
    ];
    for (keys, commands) in cases {
        let mut config = serde_json::json!({"cniVersion": "1.0.0", "name": "n", "type": "sriov"});
        config["deviceID"] = "0000:03:02.3".into();
        for (key, value) in keys.as_object().expect("an object") {
            config[key] = value.clone();
        }
        let settings = SriovConf::parse(&config, "").expect("a valid config").vf_settings();
        assert_eq!(settings.len(), commands.len(), "{keys}: {settings:?}");
        for (setting, args) in settings.iter().zip(&commands) {
            assert_same(&pf, 4, args, setting);
        }
    }
}

#[test]
fn hex_dumps_are_read_as_strace_prints_them() {
    let trace = concat!(
        "sendmsg(3, ...) = 20\n",
        " * 20 bytes in buffer 0\n",
        " | 00000  14 00 00 00 10 00 05 00  dc 90 01 6b 00 00 00 00  ...........k.... |\n",
        // The ASCII column of a short row ("ab") looks like hex: it must not be read as bytes.
        " | 00010  61 62                                             ab               |\n",
        "+++ exited with 2 +++\n",
    );
    assert_eq!(
        hex_dumps(trace),
        vec![vec![0x14, 0, 0, 0, 0x10, 0, 5, 0, 0xdc, 0x90, 1, 0x6b, 0, 0, 0, 0, 0x61, 0x62]]
    );
    // strace itself is what the live tests rely on.
    run(&["strace", "-V"]);
}

/// The real [`NetlinkPf`] against the kernel: a veth has no VFs, so every setting is refused,
/// but with EOPNOTSUPP ("no VF support"), which the kernel answers only after parsing the
/// attributes; a malformed request would get EINVAL instead. Reading finds no VF list.
#[tokio::test]
async fn the_kernel_parses_what_netlink_pf_sends() {
    let pf = Pf::new();
    let control = NetlinkPf { host_netns: Some(pf.ns.path()) };
    let settings = [
        VfSetting::Mac { mac: "02:11:22:33:44:55".parse().expect("a MAC") },
        VfSetting::Vlan { vlan: 10, qos: 3, proto: VlanProto::Dot1Q },
        VfSetting::Vlan { vlan: 10, qos: 3, proto: VlanProto::Dot1Ad },
        VfSetting::Rate { min_tx_rate: 1, max_tx_rate: 2 },
        VfSetting::SpoofCheck { on: true },
        VfSetting::Trust { on: true },
        VfSetting::LinkState { state: LinkState::Disable },
    ];
    for setting in settings {
        let err = control.apply(&pf.name, 2, setting).await.expect_err("a veth has no VFs").to_string();
        let expected = format!("ip link set dev {} vf 2 {setting}: Operation not supported", pf.name);
        assert!(err.starts_with(&expected), "{err}");
    }
    let err = control.read(&pf.name, 2).await.expect_err("no VFs to read").to_string();
    assert!(err.contains("reports no such VF"), "{err}");
    let err = control.read("nonexistent0", 2).await.expect_err("no such PF").to_string();
    assert!(err.contains("nonexistent0") && err.contains("no such interface"), "{err}");
}
