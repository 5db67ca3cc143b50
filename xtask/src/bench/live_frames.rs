//! Frames as a NIC's driver hands them to XDP, for the XDP figures (issue #18): the hidden
//! `bench-net xdp-flood` sends one crafted UDP frame over and over out of a veth with the
//! kernel's own packet generator, `BPF_PROG_TEST_RUN` in live-frame mode
//! (`BPF_F_TEST_XDP_LIVE_FRAMES`, Linux 5.18+). A small XDP program (see [`program`]) writes
//! the frame's headers and returns `XDP_TX`, which the kernel turns into a redirect out of the
//! context's ingress device: the frames leave through `veth_ndo_xdp_xmit` and reach the peer
//! (the macvlan master, the bridge's uplink) as XDP frames on its NAPI ring, with no socket
//! buffer built, exactly as a NIC's receive ring delivers them. The receiving side's native
//! XDP program runs on them before any skb exists; without one, veth builds the skb and the
//! packet takes the TC path, as on a NIC. (A veth receives such frames only while it has NAPI:
//! an XDP program attached, or GRO on; the bench turns GRO on on the receiving veth.)
//!
//! Why the program writes the headers: the kernel fills a live-frame page with the frame once
//! and then recycles it as it comes back, and the receiving side translates frames in place
//! (XDP, or TC on the skb built around the same page). Left alone, a page would come back
//! already addressed to the pod and be sent again as such: the port mapping's figure would
//! measure mostly unmapped frames.
//!
//! Frames the receiving ring has no room for are dropped by the sender's veth (counted in its
//! `xdp_xmit_err` statistics); the figures count what arrived, not what was sent.
//!
//! The program is loaded and run with the `bpf(2)` system call directly, not through libbpf
//! (libbpf-sys): the xtask is the first thing a fresh machine builds, before `cargo xtask
//! setup` could install the libelf headers libbpf needs.

use std::io;
use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;
/// The kernel's limit on a live-frame batch.
const MAX_BATCH: u32 = 256;
const XDP_TX: i32 = 3;

/// `struct bpf_insn`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    /// dst_reg in the low nibble, src_reg in the high one.
    regs: u8,
    off: i16,
    imm: i32,
}

/// The headers of a frame: Ethernet, IPv4 without options, UDP.
const HEADERS: usize = 14 + 20 + 8;

/// The generator's program for `frame`: writes its headers at the start of the packet (when
/// the packet is that long), then `XDP_TX`.
///
/// ```text
/// r2 = ctx->data; r3 = ctx->data_end; r4 = r2 + HEADERS
/// if r4 > r3 goto tx
/// *(r2 + off) = the headers' bytes, 8 (then 4, 2, 1) at a time
/// tx: r0 = XDP_TX; exit
/// ```
fn program(frame: &[u8]) -> Vec<Insn> {
    let headers = &frame[..HEADERS.min(frame.len())];
    let mut stores = Vec::new();
    let mut off = 0;
    while off < headers.len() {
        let left = headers.len() - off;
        let (size, code) = match left {
            8.. => (8, 0),
            4..=7 => (4, 0x62),
            2 | 3 => (2, 0x6a),
            _ => (1, 0x72),
        };
        let chunk = &headers[off..off + size];
        if size == 8 {
            let v = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            // BPF_LD | BPF_IMM | BPF_DW: r5 = v (two instructions), then
            // BPF_STX | BPF_MEM | BPF_DW: *(u64 *)(r2 + off) = r5.
            stores.push(Insn { code: 0x18, regs: 5, off: 0, imm: v as u32 as i32 });
            stores.push(Insn { code: 0, regs: 0, off: 0, imm: (v >> 32) as u32 as i32 });
            stores.push(Insn { code: 0x7b, regs: 5 << 4 | 2, off: off as i16, imm: 0 });
        } else {
            // BPF_ST | BPF_MEM | size: *(r2 + off) = imm.
            let mut word = [0u8; 4];
            word[..size].copy_from_slice(chunk);
            stores.push(Insn { code, regs: 2, off: off as i16, imm: u32::from_le_bytes(word) as i32 });
        }
        off += size;
    }
    let mut p = vec![
        // BPF_LDX | BPF_MEM | BPF_W: r2 = ctx->data, r3 = ctx->data_end.
        Insn { code: 0x61, regs: 1 << 4 | 2, off: 0, imm: 0 },
        Insn { code: 0x61, regs: 1 << 4 | 3, off: 4, imm: 0 },
        // BPF_ALU64 | BPF_MOV | BPF_X: r4 = r2; BPF_ALU64 | BPF_ADD | BPF_K: r4 += len.
        Insn { code: 0xbf, regs: 2 << 4 | 4, off: 0, imm: 0 },
        Insn { code: 0x07, regs: 4, off: 0, imm: headers.len() as i32 },
        // BPF_JMP | BPF_JGT | BPF_X: if r4 > r3 skip the stores.
        Insn { code: 0x2d, regs: 3 << 4 | 4, off: stores.len() as i16, imm: 0 },
    ];
    p.extend(stores);
    // BPF_ALU64 | BPF_MOV | BPF_K: r0 = XDP_TX; BPF_JMP | BPF_EXIT.
    p.push(Insn { code: 0xb7, regs: 0, off: 0, imm: XDP_TX });
    p.push(Insn { code: 0x95, regs: 0, off: 0, imm: 0 });
    p
}

/// The leading fields of `union bpf_attr` for BPF_PROG_LOAD; the kernel zeroes the rest.
#[repr(C, align(8))]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
}

/// The `test` member of `union bpf_attr`, for BPF_PROG_TEST_RUN. The kernel refuses the call
/// (EINVAL) unless every byte after `batch_size` is zero, so the struct's tail is a field that
/// `Default` zeroes rather than padding, whose bytes are whatever the stack held (the bench's
/// live-frame figures failed that way in one build and not another).
#[repr(C, align(8))]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    tail: u32,
}

/// `struct xdp_md`, the context of an XDP test run.
#[repr(C)]
struct XdpMd {
    data: u32,
    data_end: u32,
    data_meta: u32,
    ingress_ifindex: u32,
    rx_queue_index: u32,
    egress_ifindex: u32,
}

impl XdpMd {
    /// A frame of `len` bytes received on `ifindex`, queue 0, without metadata.
    fn frame(len: usize, ifindex: u32) -> XdpMd {
        XdpMd {
            data: 0,
            data_end: len as u32,
            data_meta: 0,
            ingress_ifindex: ifindex,
            rx_queue_index: 0,
            egress_ifindex: 0,
        }
    }
}

fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a valid, initialised attribute struct of the size passed; the kernel
    // reads (and for a test run writes) only within it, and the pointers inside it point to
    // buffers that outlive the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut T, std::mem::size_of::<T>()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r)
}

/// The loaded [`program`] of one frame.
pub struct Generator {
    prog: OwnedFd,
}

impl Generator {
    pub fn load(frame: &[u8]) -> anyhow::Result<Self> {
        let license = c"GPL";
        let mut name = [0u8; 16];
        name[..7].copy_from_slice(b"pxbench");
        let program = program(frame);
        let mut attr = ProgLoadAttr {
            prog_type: BPF_PROG_TYPE_XDP,
            insn_cnt: program.len() as u32,
            insns: program.as_ptr() as u64,
            license: license.as_ptr() as u64,
            prog_name: name,
            ..Default::default()
        };
        let fd = bpf(BPF_PROG_LOAD, &mut attr).context("loading the frame generator's XDP program")?;
        // SAFETY: a new file descriptor the kernel just returned, owned by nothing else.
        Ok(Generator { prog: unsafe { OwnedFd::from_raw_fd(fd as i32) } })
    }

    /// Sends `frame` `count` times out of `ifindex` (of the caller's network namespace), in
    /// batches of `batch`.
    pub fn send(&self, frame: &[u8], ifindex: u32, count: u32, batch: u32) -> anyhow::Result<()> {
        let ctx = XdpMd::frame(frame.len(), ifindex);
        let mut attr = TestRunAttr {
            prog_fd: self.prog.as_raw_fd() as u32,
            data_size_in: frame.len() as u32,
            data_in: frame.as_ptr() as u64,
            repeat: count,
            ctx_size_in: std::mem::size_of::<XdpMd>() as u32,
            ctx_in: &ctx as *const XdpMd as u64,
            flags: BPF_F_TEST_XDP_LIVE_FRAMES,
            batch_size: batch.min(MAX_BATCH),
            ..Default::default()
        };
        bpf(BPF_PROG_TEST_RUN, &mut attr)
            .context("BPF_PROG_TEST_RUN with live frames (Linux 5.18 or later)")?;
        Ok(())
    }
}

/// Ethernet, IPv4 and UDP of one frame.
pub struct Udp4 {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    pub payload: usize,
}

/// One's-complement sum of `bytes` as big-endian words, folded.
fn csum_fold(mut sum: u32, bytes: &[u8]) -> u16 {
    for w in bytes.chunks(2) {
        let hi = u32::from(w[0]) << 8;
        sum += hi | w.get(1).map_or(0, |&lo| u32::from(lo));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

impl Udp4 {
    /// The frame, every checksum computed.
    pub fn frame(&self) -> Vec<u8> {
        let udp_len = 8 + self.payload;
        let total = 20 + udp_len;
        let mut f = Vec::with_capacity(14 + total);
        f.extend_from_slice(&self.dst_mac);
        f.extend_from_slice(&self.src_mac);
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        let ip = 14;
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&(total as u16).to_be_bytes());
        // Identification 0, don't fragment, TTL 64, UDP, checksum (below).
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&self.src.ip().octets());
        f.extend_from_slice(&self.dst.ip().octets());
        let ip_csum = !csum_fold(0, &f[ip..ip + 20]);
        f[ip + 10..ip + 12].copy_from_slice(&ip_csum.to_be_bytes());
        let udp = f.len();
        f.extend_from_slice(&self.src.port().to_be_bytes());
        f.extend_from_slice(&self.dst.port().to_be_bytes());
        f.extend_from_slice(&(udp_len as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend((0..self.payload).map(|i| i as u8));
        let mut pseudo = Vec::with_capacity(12);
        pseudo.extend_from_slice(&self.src.ip().octets());
        pseudo.extend_from_slice(&self.dst.ip().octets());
        pseudo.extend_from_slice(&[0, 17]);
        pseudo.extend_from_slice(&(udp_len as u16).to_be_bytes());
        let sum = u32::from(csum_fold(0, &pseudo));
        let mut udp_csum = !csum_fold(sum, &f[udp..]);
        if udp_csum == 0 {
            udp_csum = 0xffff;
        }
        f[udp + 6..udp + 8].copy_from_slice(&udp_csum.to_be_bytes());
        f
    }
}

/// A MAC address as `ip link` prints it.
pub fn parse_mac(s: &str) -> anyhow::Result<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.trim().split(':');
    for b in &mut mac {
        let p = parts.next().with_context(|| format!("{s:?} is not a MAC address"))?;
        *b = u8::from_str_radix(p, 16).with_context(|| format!("{s:?} is not a MAC address"))?;
    }
    anyhow::ensure!(parts.next().is_none(), "{s:?} is not a MAC address");
    Ok(mac)
}

/// `bench-net xdp-flood`: `frame` out of `dev` for `secs` seconds, as fast as the kernel sends
/// live frames; what was sent, as JSON.
pub fn flood(dev: &str, frame: &Udp4, secs: f64) -> anyhow::Result<Value> {
    let ifindex = std::fs::read_to_string(format!("/sys/class/net/{dev}/ifindex"))
        .with_context(|| format!("no interface {dev} here"))?
        .trim()
        .parse::<u32>()
        .context("ifindex")?;
    let bytes = frame.frame();
    let generator = Generator::load(&bytes)?;
    // A round of 2^16 frames takes a few tens of milliseconds: the end is overshot by at most
    // that, and `secs` reports the time actually spent.
    const ROUND: u32 = 1 << 16;
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let mut sent: u64 = 0;
    while Instant::now() < end {
        generator.send(&bytes, ifindex, ROUND, 64)?;
        sent += u64::from(ROUND);
    }
    Ok(json!({"sent": sent, "secs": start.elapsed().as_secs_f64(), "frame_bytes": bytes.len()}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(payload: usize) -> Udp4 {
        Udp4 {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src: "10.69.0.200:40000".parse().unwrap(),
            dst: "10.69.0.1:7201".parse().unwrap(),
            payload,
        }
    }

    /// One plain (not live) test run of the generator's program on `packet`: its verdict and
    /// the packet it left.
    fn run_once(generator: &Generator, packet: &[u8]) -> (u32, Vec<u8>) {
        let mut out = vec![0u8; packet.len() + 64];
        let ctx = XdpMd::frame(packet.len(), 1);
        let mut attr = TestRunAttr {
            ctx_size_in: std::mem::size_of::<XdpMd>() as u32,
            ctx_in: &ctx as *const XdpMd as u64,
            prog_fd: generator.prog.as_raw_fd() as u32,
            data_size_in: packet.len() as u32,
            data_in: packet.as_ptr() as u64,
            data_size_out: out.len() as u32,
            data_out: out.as_mut_ptr() as u64,
            repeat: 1,
            ..Default::default()
        };
        bpf(BPF_PROG_TEST_RUN, &mut attr)
            .unwrap_or_else(|e| panic!("BPF_PROG_TEST_RUN (as root) of {} bytes: {e}", packet.len()));
        out.truncate(attr.data_size_out as usize);
        (attr.retval, out)
    }

    /// What the receiving side translated in place is written back before each send; the
    /// payload is left alone (nobody changes it).
    #[test]
    fn kernel_the_program_writes_the_headers_back_and_transmits() {
        for payload in [22, 23, 100] {
            let frame = sample(payload).frame();
            let generator = Generator::load(&frame).expect("loading the generator's program (as root)");
            let mut translated = frame.clone();
            translated[..HEADERS].iter_mut().for_each(|b| *b ^= 0x5a);
            assert_eq!(
                run_once(&generator, &translated),
                (XDP_TX as u32, frame.clone()),
                "payload {payload}"
            );
        }
    }

    /// Every byte of the attributes is a field: no padding the kernel could read as a nonzero
    /// tail.
    #[test]
    fn the_test_run_attributes_have_no_padding() {
        // The last field ends where the struct does; the kernel's batch_size is at 72.
        assert_eq!(std::mem::offset_of!(TestRunAttr, batch_size), 72);
        assert_eq!(std::mem::offset_of!(TestRunAttr, tail) + 4, std::mem::size_of::<TestRunAttr>());
    }

    #[test]
    fn a_22_byte_payload_makes_a_64_byte_frame() {
        assert_eq!(sample(22).frame().len(), 64);
    }

    #[test]
    fn headers_are_laid_out_as_on_the_wire() {
        let f = sample(22).frame();
        assert_eq!(&f[0..6], &[2, 0, 0, 0, 0, 2]);
        assert_eq!(&f[6..12], &[2, 0, 0, 0, 0, 1]);
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        assert_eq!(f[14], 0x45);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]), 50);
        assert_eq!(f[23], 17);
        assert_eq!(&f[26..30], &[10, 69, 0, 200]);
        assert_eq!(&f[30..34], &[10, 69, 0, 1]);
        assert_eq!(u16::from_be_bytes([f[34], f[35]]), 40000);
        assert_eq!(u16::from_be_bytes([f[36], f[37]]), 7201);
        assert_eq!(u16::from_be_bytes([f[38], f[39]]), 30);
    }

    #[test]
    fn checksums_verify_to_zero() {
        for payload in [0, 1, 22, 1000] {
            let f = sample(payload).frame();
            // A header with its checksum sums to all ones.
            assert_eq!(csum_fold(0, &f[14..34]), 0xffff, "IPv4 header, payload {payload}");
            let mut pseudo = Vec::new();
            pseudo.extend_from_slice(&f[26..34]);
            pseudo.extend_from_slice(&[0, 17]);
            pseudo.extend_from_slice(&f[38..40]);
            let sum = u32::from(csum_fold(0, &pseudo));
            assert_eq!(csum_fold(sum, &f[34..]), 0xffff, "UDP, payload {payload}");
        }
    }

    #[test]
    fn macs_parse_as_ip_link_prints_them() {
        assert_eq!(parse_mac("02:ab:0c:00:ff:10\n").unwrap(), [2, 0xab, 0x0c, 0, 0xff, 0x10]);
        assert!(parse_mac("02:ab:0c:00:ff").is_err());
        assert!(parse_mac("02:ab:0c:00:ff:10:11").is_err());
        assert!(parse_mac("02:ab:0c:00:ff:zz").is_err());
    }
}
