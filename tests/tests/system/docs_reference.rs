//! The reference pages stay true to the code: every metric the agent registers is named in
//! docs/metrics.md, and every flag of `plexus-agent run` in docs/configuration.md.

use std::path::PathBuf;
use std::process::Command;

use plexus_tests::world::bin;

fn doc(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Whether `text` names `word` whole (not as the start of a longer name).
fn names(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let next = text[at + word.len()..].chars().next();
        !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    })
}

#[test]
fn every_registered_metric_is_in_the_metrics_reference() {
    let reference = doc("metrics.md");
    // The names `metrics::registry` registers (the exposition lists a family only once it
    // has a sample): the first string after each `register(`.
    let source_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../agent/src/metrics.rs");
    let source = std::fs::read_to_string(&source_path).expect("agent/src/metrics.rs");
    let registered: Vec<&str> =
        source.split("r.register(").skip(1).filter_map(|call| call.split('"').nth(1)).collect();
    assert!(registered.len() > 15, "too few metrics found in {}: {registered:?}", source_path.display());
    // Each of them is exposed under that name.
    let exposed = plexus_agent::metrics::encode();
    assert!(registered.iter().all(|m| m.starts_with("plexus_")), "{registered:?}");
    assert!(names(&exposed, "plexus_adds_in_flight"), "{exposed}");
    // A counter is exposed with `_total`; the reference may name either.
    let missing: Vec<&&str> = registered
        .iter()
        .filter(|m| !names(&reference, m) && !names(&reference, &format!("{m}_total")))
        .collect();
    assert!(missing.is_empty(), "docs/metrics.md does not name {missing:?}");
}

#[test]
fn every_flag_of_the_agent_is_in_the_configuration_reference() {
    let reference = doc("configuration.md");
    let out =
        Command::new(bin("plexus-agent")).args(["run", "--help"]).output().expect("plexus-agent run --help");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{help}");
    let flags: Vec<String> = help
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .flat_map(|l| {
            l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).filter(|w| w.starts_with("--"))
        })
        .map(str::to_owned)
        .filter(|f| f != "--help" && f != "--version")
        .collect();
    assert!(flags.len() > 30, "too few flags read from the help:\n{help}");
    let missing: Vec<&String> = flags.iter().filter(|f| !names(&reference, f)).collect();
    assert!(missing.is_empty(), "docs/configuration.md does not name {missing:?}");
}
