//! Reading aya's errors: their errno, which decides whether something is gone or there already.
//! Their whole chain of causes as text (aya's syscall errors keep the errno in their source,
//! which their own message leaves out) is [`crate::cni::error::chain`].

use aya::programs::tc::TcError;
use aya::programs::ProgramError;

/// The errno behind a TC error, if the kernel gave one.
pub fn tc_errno(e: &TcError) -> Option<i32> {
    match e {
        TcError::NetlinkError(n) => n.raw_os_error(),
        TcError::IoError(io) => io.raw_os_error(),
        _ => None,
    }
}

/// The errno behind a program error, if the kernel gave one.
pub fn program_errno(e: &ProgramError) -> Option<i32> {
    match e {
        ProgramError::NetlinkError(n) => n.raw_os_error(),
        ProgramError::SyscallError(s) => s.io_error.raw_os_error(),
        ProgramError::IOError(io) => io.raw_os_error(),
        ProgramError::TcError(tc) => tc_errno(tc),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::error::chain;

    #[test]
    fn chains_name_every_cause_and_errnos_come_from_the_kernels_answer() {
        let e = ProgramError::IOError(std::io::Error::from_raw_os_error(libc::ENODEV));
        assert_eq!(program_errno(&e), Some(libc::ENODEV));
        let tc = TcError::IoError(std::io::Error::from_raw_os_error(libc::EEXIST));
        assert_eq!(tc_errno(&tc), Some(libc::EEXIST));
        assert_eq!(program_errno(&ProgramError::TcError(tc)), Some(libc::EEXIST));
        assert_eq!(program_errno(&ProgramError::UnexpectedProgramType), None);
        let syscall = aya::sys::SyscallError {
            call: "bpf_link_create",
            io_error: std::io::Error::from_raw_os_error(libc::EINVAL),
        };
        let text = chain(&ProgramError::SyscallError(syscall));
        assert!(
            text.starts_with("`bpf_link_create` failed: ") && text.contains("Invalid argument"),
            "{text}"
        );
    }
}
