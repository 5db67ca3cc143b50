//! Running commands (iproute2 above all) and failing with what they printed.

use std::process::Command;

use crate::error::{or_panic, Error, Result};

/// Arguments as a caller has them: a slice of words, or one string split on whitespace
/// (`"link set lo up"`, or `&format!("link set {ifname} up")`).
pub trait Words {
    fn words(&self) -> Vec<&str>;
}

impl Words for &str {
    fn words(&self) -> Vec<&str> {
        self.split_whitespace().collect()
    }
}

impl Words for &String {
    fn words(&self) -> Vec<&str> {
        self.split_whitespace().collect()
    }
}

impl Words for &[&str] {
    fn words(&self) -> Vec<&str> {
        self.to_vec()
    }
}

impl<const N: usize> Words for &[&str; N] {
    fn words(&self) -> Vec<&str> {
        self.to_vec()
    }
}

impl Words for Vec<&str> {
    fn words(&self) -> Vec<&str> {
        self.clone()
    }
}

impl Words for &Vec<&str> {
    fn words(&self) -> Vec<&str> {
        self.to_vec()
    }
}

/// Runs `cmd` to completion; its stdout, or [`Error::Failed`] with its stderr.
pub fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().map_err(|source| Error::Spawn { command: format!("{cmd:?}"), source })?;
    if !out.status.success() {
        return Err(Error::Failed {
            command: format!("{cmd:?}"),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `argv` (program first), panicking with its stderr on failure; returns stdout.
#[track_caller]
pub fn run(argv: impl Words) -> String {
    let argv = argv.words();
    let (program, args) = argv.split_first().expect("a command line names its program");
    or_panic(output(Command::new(program).args(args)))
}

/// `ip ARGS`; its stdout.
pub fn try_ip(args: impl Words) -> Result<String> {
    output(Command::new("ip").args(args.words()))
}

/// `ip ARGS`, panicking with its stderr on failure; returns stdout.
#[track_caller]
pub fn ip(args: impl Words) -> String {
    or_panic(try_ip(args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_line_runs_as_a_string_or_as_words() {
        assert_eq!(run("echo a b"), "a b\n");
        assert_eq!(run(&["echo", "a b"]), "a b\n");
        assert_eq!(run(&format!("echo {}  b", "a")), "a b\n");
    }

    #[test]
    fn a_failure_carries_what_the_command_printed() {
        let failed = output(Command::new("sh").args(["-c", "echo nope >&2; exit 3"]));
        assert!(matches!(&failed, Err(Error::Failed { stderr, .. }) if stderr == "nope"), "{failed:?}");
        let missing = output(&mut Command::new("/nonexistent/program"));
        assert!(matches!(missing, Err(Error::Spawn { .. })), "{missing:?}");
    }
}
