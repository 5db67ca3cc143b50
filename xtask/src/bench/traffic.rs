//! Traffic: the hidden `bench-net` subcommand (small std TCP servers and clients run inside
//! namespaces with `ip netns exec` of this binary, and the runtime helper), plus the
//! bench-side wrappers around them, iperf3 and ping.
//!
//! CPU per gigabit: the iperf3 client and server of a run are put in one cgroup v2 group
//! before they exec, and `cpu.stat` `usage_usec` is read around the client's run. Softirq
//! work (veth, bridge, TC programs, netfilter) runs in the context of the task that raised
//! it, which is one of the two, so it is counted. Without cgroup v2 the whole machine's
//! /proc/stat busy time is used instead (then background load is included; the figure says
//! which source it used).
//!
//! The TCP figures' clients run on one CPU and their servers on another ([`Role`]), on every
//! side: left to the scheduler, a client and its server shared a CPU in some runs and not in
//! others, and a request/response then took about half the time, which made the sides' runs
//! differ by where they were placed more than by their dataplane. With one CPU allowed,
//! nothing is pinned.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use plexus_testkit::{Netns, Proc};
use serde_json::{json, Value};

use super::live_frames::{self, parse_mac, Udp4};
use super::stats::{mean, percentile};
use super::topology::{helper_exe, Cgroup};

#[derive(Debug, clap::Subcommand)]
pub enum NetCommand {
    /// Exec CNI binaries on request, from inside the node (the bench's container runtime).
    Runtime,
    /// TCP echo server (one thread per connection); prints `ready` once listening.
    Serve {
        #[arg(long)]
        port: u16,
    },
    /// Request/response on one connection for SECS seconds: latency percentiles as JSON.
    Rr {
        #[arg(long)]
        addr: SocketAddr,
        #[arg(long)]
        secs: f64,
        #[arg(long, default_value_t = 64)]
        size: usize,
    },
    /// Connect, one request/response, close, for SECS seconds: connections per second as JSON.
    Crr {
        #[arg(long)]
        addr: SocketAddr,
        #[arg(long)]
        secs: f64,
        #[arg(long, default_value_t = 64)]
        size: usize,
    },
    /// UDP server that reads and discards; prints `ready` once bound.
    UdpSink {
        #[arg(long)]
        port: u16,
    },
    /// One UDP datagram to ADDR from each of FLOWS distinct (source address, source port)
    /// pairs: ports FIRST_PORT and up of each source address in turn, each from a socket bound
    /// to the pair. What was sent, as JSON.
    UdpFill {
        #[arg(long)]
        addr: SocketAddr,
        /// Local addresses, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        sources: Vec<Ipv4Addr>,
        #[arg(long)]
        first_port: u16,
        #[arg(long)]
        flows: u32,
    },
    /// One UDP frame from DEV's address and SRC to DST_MAC and DST, sent out of DEV for SECS
    /// seconds as live XDP frames (see `live_frames`): what was sent, as JSON.
    XdpFlood {
        #[arg(long)]
        dev: String,
        #[arg(long)]
        dst_mac: String,
        #[arg(long)]
        src: SocketAddrV4,
        #[arg(long)]
        dst: SocketAddrV4,
        #[arg(long)]
        payload: usize,
        #[arg(long)]
        secs: f64,
    },
}

pub fn run(cmd: &NetCommand) -> anyhow::Result<()> {
    match cmd {
        NetCommand::Runtime => super::runner::serve_runtime(),
        NetCommand::Serve { port } => serve(*port),
        NetCommand::Rr { addr, secs, size } => {
            println!("{}", rr(*addr, *secs, *size)?);
            Ok(())
        }
        NetCommand::Crr { addr, secs, size } => {
            println!("{}", crr(*addr, *secs, *size)?);
            Ok(())
        }
        NetCommand::UdpSink { port } => discard_udp(*port),
        NetCommand::UdpFill { addr, sources, first_port, flows } => {
            println!("{}", udp_fill(*addr, sources, *first_port, *flows)?);
            Ok(())
        }
        NetCommand::XdpFlood { dev, dst_mac, src, dst, payload, secs } => {
            let src_mac = std::fs::read_to_string(format!("/sys/class/net/{dev}/address"))
                .with_context(|| format!("no interface {dev} here"))?;
            let frame = Udp4 {
                src_mac: parse_mac(&src_mac)?,
                dst_mac: parse_mac(dst_mac)?,
                src: *src,
                dst: *dst,
                payload: *payload,
            };
            println!("{}", live_frames::flood(dev, &frame, *secs)?);
            Ok(())
        }
    }
}

fn discard_udp(port: u16) -> anyhow::Result<()> {
    let socket = UdpSocket::bind(("0.0.0.0", port)).with_context(|| format!("binding UDP port {port}"))?;
    println!("ready");
    std::io::stdout().flush()?;
    let mut buf = [0u8; 2048];
    loop {
        // Errors (none are expected on a bound UDP socket) do not end the sink.
        let _ = socket.recv(&mut buf);
    }
}

/// The `i`-th (source address, source port) pair of a fill of `flows` over `sources` from
/// `first_port`: each address takes a block of consecutive ports. `None` past the end, or when
/// the ports would run past 65535.
fn fill_pair(sources: &[Ipv4Addr], first_port: u16, flows: u32, i: u32) -> Option<(Ipv4Addr, u16)> {
    let n = u32::try_from(sources.len()).ok().filter(|n| *n > 0)?;
    let per_address = flows.div_ceil(n);
    if i >= flows || u32::from(first_port) + per_address > 65_536 {
        return None;
    }
    let address = sources.get(usize::try_from(i / per_address).ok()?)?;
    let port = u16::try_from(u32::from(first_port) + i % per_address).ok()?;
    Some((*address, port))
}

fn udp_fill(addr: SocketAddr, sources: &[Ipv4Addr], first_port: u16, flows: u32) -> anyhow::Result<Value> {
    if flows > 0 && fill_pair(sources, first_port, flows, flows - 1).is_none() {
        bail!("{flows} flows do not fit {} source addresses from port {first_port}", sources.len());
    }
    let payload = [0x5a_u8; 16];
    let (mut sent, mut errors, mut first_error) = (0u32, 0u32, None::<String>);
    let start = Instant::now();
    for (src, port) in (0..flows).filter_map(|i| fill_pair(sources, first_port, flows, i)) {
        match UdpSocket::bind((src, port)).and_then(|s| s.send_to(&payload, addr)) {
            Ok(_) => sent += 1,
            Err(e) => {
                errors += 1;
                first_error.get_or_insert_with(|| format!("from {src}:{port}: {e}"));
            }
        }
    }
    Ok(json!({
        "flows": flows,
        "sent": sent,
        "errors": errors,
        "first_error": first_error,
        "secs": start.elapsed().as_secs_f64(),
        "sources": sources.iter().map(Ipv4Addr::to_string).collect::<Vec<_>>(),
        "first_port": first_port,
    }))
}

fn serve(port: u16) -> anyhow::Result<()> {
    let listener = TcpListener::bind(("0.0.0.0", port)).with_context(|| format!("binding port {port}"))?;
    println!("ready");
    std::io::stdout().flush()?;
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        std::thread::spawn(move || echo(stream));
    }
    Ok(())
}

fn echo(mut s: TcpStream) {
    let _ = s.set_nodelay(true);
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if s.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
}

/// Connects, retrying for a few seconds: a mapping or a server may need a moment.
fn connect_retrying(addr: SocketAddr) -> anyhow::Result<TcpStream> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() > deadline => bail!("connecting to {addr}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn exchange(s: &mut TcpStream, msg: &[u8], back: &mut [u8]) -> std::io::Result<()> {
    s.write_all(msg)?;
    s.read_exact(back)
}

fn rr(addr: SocketAddr, secs: f64, size: usize) -> anyhow::Result<Value> {
    let mut s = connect_retrying(addr)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let msg = vec![0x5a; size.max(1)];
    let mut back = vec![0; msg.len()];
    // Warm-up: neighbours resolved, caches and the connection's state settled.
    for _ in 0..50 {
        exchange(&mut s, &msg, &mut back).context("warm-up exchange")?;
    }
    let mut samples = Vec::new();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        let t = Instant::now();
        exchange(&mut s, &msg, &mut back).context("request/response")?;
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(json!({
        "count": samples.len(),
        "secs": start.elapsed().as_secs_f64(),
        "p50_us": percentile(&samples, 50.0),
        "p99_us": percentile(&samples, 99.0),
        "mean_us": mean(&samples),
    }))
}

fn crr(addr: SocketAddr, secs: f64, size: usize) -> anyhow::Result<Value> {
    drop(connect_retrying(addr)?);
    let msg = vec![0x5a; size.max(1)];
    let mut back = vec![0; msg.len()];
    let one = |back: &mut [u8]| -> std::io::Result<()> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(1)))?;
        exchange(&mut s, &msg, back)
    };
    let (mut errors, mut samples) = (0u64, Vec::new());
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    while Instant::now() < end && errors < 1000 {
        let t = Instant::now();
        match one(&mut back) {
            Ok(()) => samples.push(t.elapsed().as_secs_f64() * 1e6),
            Err(_) => errors += 1,
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    Ok(json!({
        "count": samples.len(),
        "errors": errors,
        "secs": elapsed,
        "rate": samples.len() as f64 / elapsed,
        "p50_us": percentile(&samples, 50.0),
    }))
}

/// Which end of a TCP figure a process is: where it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Client,
    Server,
}

/// The first two CPUs this process may run on (clients on the first, servers on the second),
/// or `None` with fewer.
fn tcp_cpus() -> Option<(usize, usize)> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set, which the call fills.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a cpu_set_t of the size passed.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return None;
    }
    // SAFETY: CPU_ISSET reads the set within CPU_SETSIZE.
    let mut allowed = (0..libc::CPU_SETSIZE as usize).filter(|cpu| unsafe { libc::CPU_ISSET(*cpu, &set) });
    Some((allowed.next()?, allowed.next()?))
}

/// Makes `c` run on `role`'s CPU (see [`tcp_cpus`]), from before it execs: its threads and
/// children inherit it.
fn pin(c: &mut Command, role: Role) -> &mut Command {
    let Some((client, server)) = tcp_cpus() else { return c };
    let cpu = if role == Role::Client { client } else { server };
    // SAFETY: the closure runs in the child between fork and exec and only makes the
    // async-signal-safe sched_setaffinity call, on a set built before the fork.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` < CPU_SETSIZE, as tcp_cpus found it in a set.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    unsafe {
        c.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// This binary (for its `bench-net` subcommand) inside `ns`, on `role`'s CPU if any.
fn helper_command(ns: &Netns, role: Option<Role>) -> anyhow::Result<Command> {
    let mut c = ns.command(helper_exe()?);
    if let Some(role) = role {
        pin(&mut c, role);
    }
    Ok(c)
}

/// `program args` inside `ns`, and inside the cgroup when there is one: a shell writes its own
/// pid to the group and execs, so everything the program does is counted from its first
/// instruction.
fn command_in(ns: &Netns, cg: Option<&Cgroup>, program: &str, args: &[&str]) -> Command {
    match cg {
        Some(cg) => {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(r#"echo $$ > "$0" && exec "$@""#)
                .arg(cg.procs())
                .args(["ip", "netns", "exec", &ns.name, program])
                .args(args);
            c
        }
        None => {
            let mut c = ns.command(program);
            c.args(args);
            c
        }
    }
}

/// The echo server of rr/crr in a pod, once it listens.
pub fn echo_server(ns: &Netns, port: u16) -> anyhow::Result<Proc> {
    helper_server(ns, "serve", port, "the echo server", Some(Role::Server))
}

/// A UDP server in a pod that discards what it gets (so datagrams to it draw no ICMP port
/// unreachable), once it is bound.
pub fn udp_sink(ns: &Netns, port: u16) -> anyhow::Result<Proc> {
    helper_server(ns, "udp-sink", port, "the UDP sink", None)
}

/// A `bench-net` server in `ns`, once it printed `ready`; on `role`'s CPU if any.
fn helper_server(ns: &Netns, mode: &str, port: u16, what: &str, role: Option<Role>) -> anyhow::Result<Proc> {
    let child = helper_command(ns, role)?
        .args(["bench-net", mode, "--port", &port.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {what}"))?;
    let mut server = Proc(child);
    let stdout = server.0.stdout.take().context("server stdout")?;
    let mut ready = String::new();
    BufReader::new(stdout).read_line(&mut ready)?;
    if ready.trim() != "ready" {
        bail!("{what} in {} did not start", ns.name);
    }
    Ok(server)
}

/// `bench-net udp-fill` from the client: one datagram to `addr` from each of `flows` distinct
/// (source, port) pairs (see [`NetCommand::UdpFill`]); its JSON report.
pub fn udp_fill_from(
    client: &Netns,
    addr: &str,
    sources: &[&str],
    first_port: u16,
    flows: u32,
) -> anyhow::Result<Value> {
    let sources = sources.join(",");
    let (first_port, flows) = (first_port.to_string(), flows.to_string());
    let args = ["--addr", addr, "--sources", &sources, "--first-port", &first_port, "--flows", &flows];
    bench_net(client, "udp-fill", &args, addr)
}

/// `bench-net xdp-flood` in `client`: `frame`'s addresses (its source MAC is `dev`'s) out of
/// `dev` for `secs` seconds; its report ({"sent", "secs", "frame_bytes"}).
pub fn flood_from(
    client: &Netns,
    dev: &str,
    dst_mac: &str,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    payload: usize,
    secs: u32,
) -> anyhow::Result<Value> {
    let (src, to) = (src.to_string(), dst.to_string());
    let (payload, secs) = (payload.to_string(), secs.to_string());
    let args = [
        "--dev",
        dev,
        "--dst-mac",
        dst_mac,
        "--src",
        &src,
        "--dst",
        &to,
        "--payload",
        &payload,
        "--secs",
        &secs,
    ];
    bench_net(client, "xdp-flood", &args, &to)
}

/// UDP datagrams `ns`'s sockets were handed so far: read by their owners (`InDatagrams`) or
/// dropped for a full receive buffer (`RcvbufErrors`), from /proc/net/snmp. What the node
/// delivered, whether or not the application kept up; a datagram with a wrong checksum or to
/// no socket is in neither.
pub fn udp_delivered(ns: &Netns) -> anyhow::Result<u64> {
    let out = ns.command("cat").arg("/proc/net/snmp").output().context("reading /proc/net/snmp")?;
    udp_counters(&String::from_utf8_lossy(&out.stdout))
}

/// InDatagrams + RcvbufErrors of /proc/net/snmp's `Udp:` lines (a header line, then values).
fn udp_counters(snmp: &str) -> anyhow::Result<u64> {
    let mut lines = snmp.lines().filter(|l| l.starts_with("Udp: "));
    let (names, values) = (lines.next(), lines.next());
    let (Some(names), Some(values)) = (names, values) else {
        anyhow::bail!("no Udp lines in /proc/net/snmp");
    };
    let field = |name: &str| -> anyhow::Result<u64> {
        let i = names.split_whitespace().position(|n| n == name).with_context(|| format!("no Udp {name}"))?;
        values
            .split_whitespace()
            .nth(i)
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("Udp {name} value"))
    };
    Ok(field("InDatagrams")? + field("RcvbufErrors")?)
}

pub fn iperf_server(ns: &Netns, port: u16, cg: Option<&Cgroup>) -> anyhow::Result<Proc> {
    let child = pin(&mut command_in(ns, cg, "iperf3", &["-s", "-p", &port.to_string()]), Role::Server)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting iperf3 -s")?;
    Ok(Proc(child))
}

/// One iperf3 run's outcome.
#[derive(Debug)]
pub struct Iperf {
    pub bits_per_sec: f64,
    pub bytes: f64,
    /// CPU time of client and server during the run, and where it was read.
    pub cpu_usec: f64,
    pub cpu_source: &'static str,
}

/// iperf3 from the client to `host:port` for `secs` seconds (TCP, one stream).
pub fn iperf(client: &Netns, host: &str, port: u16, secs: u32, cg: Option<&Cgroup>) -> anyhow::Result<Iperf> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let cpu_before = cpu_usec(cg)?;
        let mut c = command_in(
            client,
            cg,
            "iperf3",
            &["-c", host, "-p", &port.to_string(), "-t", &secs.to_string(), "-J"],
        );
        let out = pin(&mut c, Role::Client).stdin(Stdio::null()).output().context("running iperf3")?;
        let cpu_after = cpu_usec(cg)?;
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if let Some(bps) = v["end"]["sum_received"]["bits_per_second"].as_f64() {
            return Ok(Iperf {
                bits_per_sec: bps,
                bytes: v["end"]["sum_received"]["bytes"].as_f64().unwrap_or(0.0),
                cpu_usec: cpu_after.saturating_sub(cpu_before) as f64,
                cpu_source: if cg.is_some() {
                    "cgroup v2 cpu.stat of iperf3 client+server"
                } else {
                    "/proc/stat, whole machine"
                },
            });
        }
        let err = v["error"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| String::from_utf8_lossy(&out.stderr).into_owned());
        // The server or the mapping may not be ready yet; anything else is a real failure.
        let transient = err.contains("unable to connect") || err.contains("busy");
        if !transient || Instant::now() > deadline {
            bail!("iperf3 to {host}:{port}: {}", err.trim());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn cpu_usec(cg: Option<&Cgroup>) -> anyhow::Result<u64> {
    match cg {
        Some(cg) => cg.usage_usec(),
        None => {
            let stat = std::fs::read_to_string("/proc/stat")?;
            let line = stat.lines().find(|l| l.starts_with("cpu ")).unwrap_or_default();
            let f: Vec<u64> = line.split_whitespace().skip(1).filter_map(|w| w.parse().ok()).collect();
            let busy: u64 = f.iter().take(8).sum::<u64>()
                - f.get(3).copied().unwrap_or(0)
                - f.get(4).copied().unwrap_or(0);
            // SAFETY: sysconf has no preconditions.
            let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
            Ok(busy * 1_000_000 / hz)
        }
    }
}

/// rr or crr from the client, on the clients' CPU; their JSON report.
pub fn tcp_client(client: &Netns, mode: &str, addr: &str, secs: u32) -> anyhow::Result<Value> {
    bench_net_on(client, mode, &["--addr", addr, "--secs", &secs.to_string()], addr, Some(Role::Client))
}

/// `bench-net <mode> <args>` run to its end in `ns`; the JSON it printed. `to` says where it
/// sent traffic, for the error.
pub fn bench_net(ns: &Netns, mode: &str, args: &[&str], to: &str) -> anyhow::Result<Value> {
    bench_net_on(ns, mode, args, to, None)
}

/// [`bench_net`], on `role`'s CPU if any.
fn bench_net_on(
    ns: &Netns,
    mode: &str,
    args: &[&str],
    to: &str,
    role: Option<Role>,
) -> anyhow::Result<Value> {
    let out = helper_command(ns, role)?
        .args(["bench-net", mode])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running bench-net {mode}"))?;
    if !out.status.success() {
        bail!("bench-net {mode} to {to}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    serde_json::from_slice(&out.stdout).with_context(|| format!("bench-net {mode} output"))
}

/// Round-trip times of pings every 10 ms for `secs` seconds, in ms, and how many were lost.
pub fn ping(client: &Netns, host: &str, secs: u32) -> anyhow::Result<(Vec<f64>, u64)> {
    let out = client
        .command("ping")
        .args(["-n", "-i", "0.01", "-W", "1", "-w", &secs.to_string(), host])
        .stdin(Stdio::null())
        .output()
        .context("running ping")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let rtts: Vec<f64> = text
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next())
        .filter_map(|t| t.parse().ok())
        .collect();
    let sent = text
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(rtts.len() as u64);
    if rtts.is_empty() {
        bail!("no ping to {host} was answered: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok((rtts.clone(), sent.saturating_sub(rtts.len() as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivered_datagrams_are_read_and_buffer_dropped_ones() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                    Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
                    Udp: 100 3 7 0 7 0\n\
                    UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
                    UdpLite: 5 0 0 0 9 0\n";
        assert_eq!(udp_counters(snmp).unwrap(), 107);
        assert!(udp_counters("Ip: Forwarding\nIp: 1\n").is_err());
    }

    #[test]
    fn fill_pairs_are_distinct_blocks_of_ports_per_address() {
        let a = Ipv4Addr::new(10, 0, 0, 1);
        let b = Ipv4Addr::new(10, 0, 0, 2);
        let pairs: Vec<_> = (0..5).map(|i| fill_pair(&[a, b], 100, 5, i)).collect();
        assert_eq!(
            pairs,
            vec![Some((a, 100)), Some((a, 101)), Some((a, 102)), Some((b, 100)), Some((b, 101))]
        );
        assert_eq!(fill_pair(&[a, b], 100, 5, 5), None, "past the end");
        let all: std::collections::HashSet<_> =
            (0..100_000).filter_map(|i| fill_pair(&[a, b], 10_000, 100_000, i)).collect();
        assert_eq!(all.len(), 100_000);
        assert_eq!(fill_pair(&[a, b], 10_000, 100_000, 99_999), Some((b, 59_999)));
        assert_eq!(fill_pair(&[a], 10_000, 100_000, 0), None, "100,000 ports do not fit one address");
        assert_eq!(fill_pair(&[a], 65_535, 1, 0), Some((a, 65_535)));
        assert_eq!(fill_pair(&[], 1, 1, 0), None);
    }
}
