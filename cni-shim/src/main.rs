//! `plexus`: the CNI binary the container runtime executes. It forwards the invocation to
//! the plexus agent and relays the answer; see [`plexus_cni_shim::shim`].

use plexus_cni_shim::shim::{self, Invocation, Outcome};
use plexus_cni_shim::ErrorCode;
use plexus_cni_shim::CURRENT_VERSION;
use std::collections::HashMap;
use std::io::{self, Read, Write};

fn main() {
    let outcome = match read_stdin() {
        Ok(stdin) => shim::run(&Invocation { env: cni_env(), stdin }),
        Err(err) => Outcome::error(
            CURRENT_VERSION,
            ErrorCode::IoFailure,
            format!("reading the network configuration from stdin: {err}"),
            "",
        ),
    };
    std::process::exit(emit(&outcome));
}

fn read_stdin() -> io::Result<Vec<u8>> {
    let mut stdin = Vec::new();
    io::stdin().lock().read_to_end(&mut stdin)?;
    Ok(stdin)
}

/// The process environment, lossily decoded: CNI variables are plain ASCII, and a
/// non-UTF-8 value elsewhere must not stop the plugin.
fn cni_env() -> HashMap<String, String> {
    std::env::vars_os()
        .map(|(name, value)| (name.to_string_lossy().into_owned(), value.to_string_lossy().into_owned()))
        .collect()
}

/// Prints the outcome and returns the exit status to use.
fn emit(outcome: &Outcome) -> i32 {
    if let Some(diagnostic) = &outcome.diagnostic {
        eprintln!("plexus: {diagnostic}");
    }
    let mut stdout = io::stdout().lock();
    // `process::exit` skips destructors, so flush explicitly and notice a lost result.
    match stdout.write_all(outcome.stdout.as_bytes()).and_then(|()| stdout.flush()) {
        Ok(()) => outcome.exit_code,
        Err(err) => {
            eprintln!("plexus: writing the result to stdout: {err}");
            if outcome.exit_code == 0 {
                1
            } else {
                outcome.exit_code
            }
        }
    }
}
