//! Who may ask the agent for networks. The socket's file mode is the first gate; the peer's
//! credentials, as the kernel recorded them at connect (SO_PEERCRED, SO_PEERGROUPS), are the
//! second, so a socket whose mode was widened by mistake still admits only root, the agent's
//! own user and the members of `--socket-group`.

use std::fmt;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use tokio::net::UnixStream;

use crate::cni::{CniCode, ErrorCode};

/// The peers the agent serves besides root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// `--socket-group`: members (primary or supplementary) may connect.
    pub group: Option<u32>,
    /// The agent's own user: it owns the socket, so it may always use it.
    pub agent_uid: u32,
}

impl Access {
    /// Root, the agent's own user, and the members of `group`.
    pub fn new(group: Option<u32>) -> Self {
        Access { group, agent_uid: nix::unistd::geteuid().as_raw() }
    }

    /// Whether a peer may send requests; the error says who may, and how to allow more.
    pub fn check(&self, peer: &Peer) -> Result<(), Refused> {
        let member = |gid: u32| peer.gid == gid || peer.groups.contains(&gid);
        if peer.uid == 0 || peer.uid == self.agent_uid || self.group.is_some_and(member) {
            Ok(())
        } else {
            Err(Refused { peer: peer.clone(), group: self.group })
        }
    }
}

/// The credentials of a connected peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<i32>,
    /// Supplementary groups at connect time.
    pub groups: Vec<u32>,
}

impl Peer {
    /// The kernel's record of who connected.
    pub fn of(stream: &UnixStream) -> io::Result<Peer> {
        let cred = stream.peer_cred()?;
        let groups = peer_groups(stream.as_fd())?;
        Ok(Peer { uid: cred.uid(), gid: cred.gid(), pid: cred.pid(), groups })
    }
}

/// SO_PEERGROUPS: the peer's supplementary groups (Linux 4.13+).
fn peer_groups(fd: BorrowedFd<'_>) -> io::Result<Vec<u32>> {
    let mut groups: Vec<libc::gid_t> = vec![0; 32];
    loop {
        let mut len = (groups.len() * size_of::<libc::gid_t>()) as libc::socklen_t;
        // SAFETY: `groups` is valid for writes of `len` bytes, and the kernel writes at most
        // that much; `len` is a valid socklen_t it updates.
        let rc = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let needed = len as usize / size_of::<libc::gid_t>();
        if rc == 0 {
            groups.truncate(needed);
            return Ok(groups);
        }
        let err = io::Error::last_os_error();
        // ERANGE: too small a buffer; `len` now says how much is needed.
        if err.raw_os_error() == Some(libc::ERANGE) && needed > groups.len() {
            groups.resize(needed, 0);
            continue;
        }
        return Err(err);
    }
}

/// A peer the agent does not serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    peer: Peer,
    group: Option<u32>,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Peer { uid, gid, pid, .. } = &self.peer;
        write!(f, "uid {uid} (gid {gid}")?;
        if let Some(pid) = pid {
            write!(f, ", pid {pid}")?;
        }
        write!(f, ") may not ask plexus-agent for networks: only root")?;
        if let Some(group) = self.group {
            write!(f, " and members of group {group}")?;
        }
        write!(f, " may connect to its socket")
    }
}

impl std::error::Error for Refused {}

impl Refused {
    /// What the operator can do about it.
    pub fn remedy(&self) -> String {
        match self.group {
            Some(gid) => format!(
                "run the CNI plugin as root, or add its user to group {gid} (the agent's --socket-group)"
            ),
            None => "run the CNI plugin as root, or start the agent with --socket-group NAME|GID and \
                     add the plugin's user to that group"
                .to_owned(),
        }
    }
}

impl CniCode for Refused {
    fn cni_code(&self) -> ErrorCode {
        ErrorCode::PermissionDenied
    }
}

/// `--socket-group`: a GID, or a group name looked up in the agent's /etc/group.
pub fn parse_group(spec: &str) -> Result<u32, String> {
    let spec = spec.trim();
    if let Ok(gid) = spec.parse::<u32>() {
        return Ok(gid);
    }
    match nix::unistd::Group::from_name(spec) {
        Ok(Some(group)) => Ok(group.gid.as_raw()),
        Ok(None) => Err(format!(
            "no group named {spec:?} in the agent's group database: give its GID (e.g. --socket-group 1500)"
        )),
        Err(errno) => Err(format!("looking up group {spec:?}: {errno}; give its GID instead")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32, gid: u32, groups: &[u32]) -> Peer {
        Peer { uid, gid, pid: Some(42), groups: groups.to_vec() }
    }

    const AGENT: u32 = 999;

    #[test]
    fn root_and_the_agents_own_user_are_always_served() {
        for access in [Access { group: None, agent_uid: AGENT }, Access { group: Some(7), agent_uid: AGENT }]
        {
            assert_eq!(access.check(&peer(0, 0, &[])), Ok(()));
            assert_eq!(access.check(&peer(AGENT, 100, &[])), Ok(()));
        }
    }

    #[test]
    fn members_of_the_group_by_primary_or_supplementary_group_are_served() {
        let access = Access { group: Some(7), agent_uid: AGENT };
        assert_eq!(access.check(&peer(1000, 7, &[])), Ok(()));
        assert_eq!(access.check(&peer(1000, 100, &[5, 7])), Ok(()));
        assert!(access.check(&peer(1000, 100, &[5, 8])).is_err());
    }

    #[test]
    fn others_are_refused_saying_who_may_connect_and_how_to_allow_a_group() {
        let refused = Access { group: None, agent_uid: AGENT }.check(&peer(1000, 100, &[7])).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "uid 1000 (gid 100, pid 42) may not ask plexus-agent for networks: only root may connect \
             to its socket"
        );
        assert!(refused.remedy().contains("--socket-group NAME|GID"), "{}", refused.remedy());
        assert_eq!(refused.cni_code(), ErrorCode::PermissionDenied);
        assert_eq!(refused.cni_code().code(), 101);

        let refused = Access { group: Some(7), agent_uid: AGENT }.check(&peer(1000, 100, &[])).unwrap_err();
        assert!(refused.to_string().ends_with("only root and members of group 7 may connect to its socket"));
        assert!(refused.remedy().contains("add its user to group 7"), "{}", refused.remedy());
    }

    #[tokio::test]
    async fn a_peers_credentials_are_the_kernels_record_of_the_connecting_process() {
        let (a, _b) = UnixStream::pair().unwrap();
        let peer = Peer::of(&a).unwrap();
        assert_eq!((peer.uid, peer.gid), (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw()));
        assert_eq!(peer.pid, Some(std::process::id() as i32));
        let mut expected: Vec<u32> = nix::unistd::getgroups().unwrap().iter().map(|g| g.as_raw()).collect();
        let mut got = peer.groups.clone();
        expected.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, expected);
    }

    #[test]
    fn a_group_is_a_gid_or_a_name() {
        assert_eq!(parse_group("1500"), Ok(1500));
        assert_eq!(parse_group("root"), Ok(0));
        let err = parse_group("no-such-group-plexus").unwrap_err();
        assert!(err.contains("no group named \"no-such-group-plexus\""), "{err}");
    }
}
