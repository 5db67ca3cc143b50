//! Offload features of an interface in the calling thread's network namespace (run them
//! through [`super::run_in`] to reach a pod's), with the ethtool ioctl: the one feature plexus
//! changes is GRO on a pod's end of a veth, which gives that end the NAPI context a veth needs
//! to receive XDP frames redirected into its peer.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `ETHTOOL_GGRO` / `ETHTOOL_SGRO` (linux/ethtool.h).
const ETHTOOL_GGRO: u32 = 0x2b;
const ETHTOOL_SGRO: u32 = 0x2c;

/// `struct ethtool_value`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// Turns GRO on on `ifname` (in the calling thread's namespace) and says whether it is on
/// afterwards, as the kernel reports it.
pub fn gro_on(ifname: &str) -> io::Result<bool> {
    let socket = control_socket()?;
    ethtool(&socket, ifname, ETHTOOL_SGRO, 1)?;
    Ok(ethtool(&socket, ifname, ETHTOOL_GGRO, 0)? != 0)
}

fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: a plain socket(2) call; the descriptor is owned from here on.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One `SIOCETHTOOL` call with an `ethtool_value`; the value the kernel left in it.
fn ethtool(socket: &OwnedFd, ifname: &str, cmd: u32, data: u32) -> io::Result<u32> {
    let name = ifname.as_bytes();
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not an interface name: {ifname:?}"),
        ));
    }
    let mut value = EthtoolValue { cmd, data };
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (to, from) in req.ifr_name.iter_mut().zip(name) {
        *to = *from as libc::c_char;
    }
    req.ifr_ifru.ifru_data = (&raw mut value).cast();
    // SAFETY: `req` names the interface and points at `value`, both alive for the call.
    let rc = unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCETHTOOL, &raw mut req) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value.data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_kernel_cannot_take_are_refused_before_the_call() {
        for bad in ["", "a-name-much-too-long", "nul\0"] {
            let socket = control_socket().expect("a socket");
            let err = ethtool(&socket, bad, ETHTOOL_GGRO, 0).expect_err(bad);
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
    }

    #[test]
    fn an_interface_that_does_not_exist_is_the_kernels_no_such_device() {
        let err = gro_on("plexus-nope0").expect_err("no such interface");
        assert_eq!(err.raw_os_error(), Some(libc::ENODEV), "{err}");
    }
}
