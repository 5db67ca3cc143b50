//! Telling the neighbours about a new interface: gratuitous ARP (IPv4, RFC 5227 announcement)
//! and unsolicited neighbour advertisements (IPv6, RFC 4861 7.2.6), sent from inside the pod so
//! that switches and hosts that knew the addresses under another MAC (a previous pod) update
//! their caches now rather than after they expire.
//!
//! The packets go out on raw sockets created on a thread inside the pod's namespace
//! ([`crate::netlink::run_in`]). Announcing is best effort, as in the reference plugins: a failure
//! costs a few seconds of stale caches, never the attachment.
//!
//! The sockets are closed off the request's path: closing a packet socket waits for an RCU
//! grace period (`synchronize_net` in the kernel's `packet_release`), about 10 ms here, which
//! the ADD would otherwise wait for once per address.

use std::io;
use std::mem;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use crate::netlink::{run_in, write_sysctl, Mac, NamespaceError};

/// The kernel could not be told to announce on its own.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error(transparent)]
    Namespace(#[from] NamespaceError),

    #[error("setting net.ipv4.conf.{ifname}.arp_notify: {source}")]
    ArpNotify { ifname: String, source: io::Error },

    #[error("setting net.ipv6.conf.{ifname}.ndisc_notify: {source}")]
    NdiscNotify { ifname: String, source: io::Error },
}

/// Makes the kernel announce on its own from now on (what the current reference plugins set):
/// gratuitous ARP when the link comes up or changes MAC (`arp_notify`), and an unsolicited
/// advertisement for every IPv6 address once its duplicate address detection completes
/// (`ndisc_notify`), which covers the addresses still tentative when [`announce`] runs.
pub async fn enable_kernel_notify(netns: &Path, ifname: &str) -> Result<(), NotifyError> {
    let ifname = ifname.to_owned();
    run_in(netns, move || {
        if let Err(source) = write_sysctl(&["net", "ipv4", "conf", &ifname, "arp_notify"], "1") {
            return Err(NotifyError::ArpNotify { ifname, source });
        }
        match write_sysctl(&["net", "ipv6", "conf", &ifname, "ndisc_notify"], "1") {
            // Absent when the kernel has no IPv6 (or it is off for the link): nothing to announce.
            Err(source) if source.kind() != io::ErrorKind::NotFound => {
                Err(NotifyError::NdiscNotify { ifname, source })
            }
            _ => Ok(()),
        }
    })
    .await?
}

/// Announces `addresses` of the interface `ifindex` (MAC `mac`) in `netns`. Returns what could
/// not be announced and why, for the log.
pub async fn announce(netns: &Path, ifindex: u32, mac: Mac, addresses: Vec<IpAddr>) -> Vec<String> {
    let outcome = run_in(netns, move || {
        let mut failures = Vec::new();
        let mut used = Vec::new();
        for address in addresses {
            let sent = match address {
                IpAddr::V4(ip) => send_arp_announcement(ifindex, mac, ip),
                IpAddr::V6(ip) => send_neighbour_advertisement(ifindex, mac, ip),
            };
            match sent {
                Ok(socket) => used.push(socket),
                Err(e) => {
                    let hint = if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) {
                        " (still tentative: the kernel announces it once duplicate address detection is done)"
                    } else {
                        ""
                    };
                    failures.push(format!("{address}: {e}{hint}"));
                }
            }
        }
        (failures, used)
    })
    .await;
    match outcome {
        Ok((failures, used)) => {
            close_later(used);
            failures
        }
        Err(e) => vec![e.to_string()],
    }
}

/// Closes `sockets` on a blocking thread without waiting for it (see the module's notes).
fn close_later(sockets: Vec<OwnedFd>) {
    if !sockets.is_empty() {
        drop(tokio::task::spawn_blocking(move || drop(sockets)));
    }
}

/// An ARP announcement (RFC 5227 section 2.3): a request for our own address with sender and
/// target protocol address both ours and target hardware address zero.
pub fn arp_announcement(mac: Mac, ip: Ipv4Addr) -> [u8; 28] {
    let mut packet = [0u8; 28];
    packet[0..2].copy_from_slice(&1u16.to_be_bytes()); // hardware type: Ethernet
    packet[2..4].copy_from_slice(&0x0800u16.to_be_bytes()); // protocol type: IPv4
    packet[4] = 6; // hardware address length
    packet[5] = 4; // protocol address length
    packet[6..8].copy_from_slice(&1u16.to_be_bytes()); // operation: request
    packet[8..14].copy_from_slice(&mac.0);
    packet[14..18].copy_from_slice(&ip.octets());
    // 18..24: target hardware address, zero
    packet[24..28].copy_from_slice(&ip.octets());
    packet
}

/// An unsolicited neighbour advertisement for `target` (RFC 4861 7.2.6): Override set,
/// Solicited clear, with the target link-layer address option. The checksum stays zero: the
/// kernel computes it for ICMPv6 raw sockets.
pub fn neighbour_advertisement(mac: Mac, target: Ipv6Addr) -> [u8; 32] {
    let mut packet = [0u8; 32];
    packet[0] = 136; // ICMPv6 type: neighbour advertisement
    packet[4] = 0x20; // flags: Override
    packet[8..24].copy_from_slice(&target.octets());
    packet[24] = 2; // option: target link-layer address
    packet[25] = 1; // option length, in units of 8 bytes
    packet[26..32].copy_from_slice(&mac.0);
    packet
}

fn socket(domain: libc::c_int, kind: libc::c_int, protocol: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes plain integers; a non-negative result is a new descriptor that
    // nothing else owns.
    let fd = unsafe { libc::socket(domain, kind | libc::SOCK_CLOEXEC, protocol) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn send_to<A>(fd: RawFd, packet: &[u8], address: &A) -> io::Result<()> {
    // SAFETY: `packet` and `address` are valid for the lengths given for the whole call.
    let sent = unsafe {
        libc::sendto(
            fd,
            packet.as_ptr().cast(),
            packet.len(),
            0,
            (address as *const A).cast(),
            mem::size_of::<A>() as libc::socklen_t,
        )
    };
    if sent < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn set_int_option(fd: RawFd, level: libc::c_int, option: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: `value` is a valid c_int for the duration of the call.
    let done = unsafe {
        libc::setsockopt(
            fd,
            level,
            option,
            (&value as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if done < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Must run inside the interface's namespace. Returns the socket it used, still open.
fn send_arp_announcement(ifindex: u32, mac: Mac, ip: Ipv4Addr) -> io::Result<OwnedFd> {
    let protocol = (libc::ETH_P_ARP as u16).to_be();
    // SOCK_DGRAM: the kernel writes the Ethernet header (our MAC, the destination below).
    let fd = socket(libc::AF_PACKET, libc::SOCK_DGRAM, libc::c_int::from(protocol))?;
    // SAFETY: sockaddr_ll is plain old data; all zeroes is a valid value.
    let mut to: libc::sockaddr_ll = unsafe { mem::zeroed() };
    to.sll_family = libc::AF_PACKET as libc::c_ushort;
    to.sll_protocol = protocol;
    to.sll_ifindex = i32::try_from(ifindex).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    to.sll_halen = 6;
    to.sll_addr[..6].copy_from_slice(&[0xff; 6]);
    send_to(fd.as_raw_fd(), &arp_announcement(mac, ip), &to)?;
    Ok(fd)
}

/// Must run inside the interface's namespace. Fails with EADDRNOTAVAIL while `target` is
/// tentative: RFC 4861 forbids advertising an address before its duplicate address detection.
/// Returns the socket it used, still open.
fn send_neighbour_advertisement(ifindex: u32, mac: Mac, target: Ipv6Addr) -> io::Result<OwnedFd> {
    let fd = socket(libc::AF_INET6, libc::SOCK_RAW, libc::IPPROTO_ICMPV6)?;
    let raw = fd.as_raw_fd();
    let index = libc::c_int::try_from(ifindex).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // Receivers drop neighbour discovery packets that crossed a router (RFC 4861 7.1.2).
    set_int_option(raw, libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_HOPS, 255)?;
    set_int_option(raw, libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_IF, index)?;
    // The source must be the advertised address itself.
    let link_local = target.segments()[0] & 0xffc0 == 0xfe80;
    let from = sockaddr_in6(target, if link_local { ifindex } else { 0 });
    // SAFETY: `from` is a valid sockaddr_in6 for the duration of the call.
    let bound = unsafe {
        libc::bind(
            raw,
            (&from as *const libc::sockaddr_in6).cast(),
            mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
        )
    };
    if bound < 0 {
        return Err(io::Error::last_os_error());
    }
    let all_nodes = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
    send_to(raw, &neighbour_advertisement(mac, target), &sockaddr_in6(all_nodes, ifindex))?;
    Ok(fd)
}

fn sockaddr_in6(ip: Ipv6Addr, scope_id: u32) -> libc::sockaddr_in6 {
    // SAFETY: sockaddr_in6 is plain old data; all zeroes is a valid value.
    let mut address: libc::sockaddr_in6 = unsafe { mem::zeroed() };
    address.sin6_family = libc::AF_INET6 as libc::sa_family_t;
    address.sin6_addr.s6_addr = ip.octets();
    address.sin6_scope_id = scope_id;
    address
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: Mac = Mac([0x0a, 0x58, 0x0a, 0x01, 0x00, 0x05]);

    #[test]
    fn arp_announcement_is_a_request_for_our_own_address() {
        let packet = arp_announcement(MAC, Ipv4Addr::new(10, 1, 0, 5));
        assert_eq!(
            packet,
            [
                0, 1, 8, 0, 6, 4, 0, 1, // Ethernet/IPv4, request
                0x0a, 0x58, 0x0a, 0x01, 0x00, 0x05, 10, 1, 0, 5, // sender: us
                0, 0, 0, 0, 0, 0, 10, 1, 0, 5, // target: unknown MAC, our address
            ]
        );
    }

    #[test]
    fn neighbour_advertisement_overrides_and_carries_our_mac() {
        let target: Ipv6Addr = "fd00::5".parse().unwrap();
        let packet = neighbour_advertisement(MAC, target);
        assert_eq!(packet[0], 136);
        assert_eq!(packet[4] & 0xe0, 0x20, "override only: not solicited, not a router");
        assert_eq!(packet[8..24], target.octets());
        assert_eq!(packet[24..26], [2, 1]);
        assert_eq!(packet[26..32], MAC.0);
    }
}
