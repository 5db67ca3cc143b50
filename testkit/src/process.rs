//! A child process that does not outlive its test.

use std::process::Child;

/// A process killed and reaped on drop (servers, agents, helpers), also when a test panics.
#[derive(Debug)]
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        // One that exited already is not an error: kill signals the zombie, wait reaps it.
        if let Err(e) = self.0.kill() {
            eprintln!("could not kill process {}: {e}", self.0.id());
        }
        if let Err(e) = self.0.wait() {
            eprintln!("could not reap process {}: {e}", self.0.id());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::Command;

    use super::*;

    #[test]
    fn a_process_is_killed_and_reaped_on_drop() {
        let proc = Proc(Command::new("sleep").arg("60").spawn().expect("running sleep"));
        let status = format!("/proc/{}/status", proc.0.id());
        assert!(Path::new(&status).exists());
        drop(proc);
        assert!(!Path::new(&status).exists(), "neither running nor a zombie");
    }
}
