//! What the storm does, as values: a pod's life as kubelet drives it, the next operation, the
//! fault that goes with it, and whether an answer is acceptable. No I/O here.

use serde_json::Value;

use super::rng::Rng;

/// Where a pod is in kubelet's eyes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The sandbox (namespace) exists; no ADD has succeeded yet.
    Created,
    /// Its ADD succeeded.
    Attached,
    /// An ADD failed, or the pod is being deleted: kubelet DELs until a DEL succeeds.
    Deleting,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    Add,
    Del,
    Check,
    Gc,
    Status,
}

impl Op {
    pub const ALL: [Op; 5] = [Op::Add, Op::Del, Op::Check, Op::Gc, Op::Status];

    pub fn verb(self) -> &'static str {
        match self {
            Op::Add => "ADD",
            Op::Del => "DEL",
            Op::Check => "CHECK",
            Op::Gc => "GC",
            Op::Status => "STATUS",
        }
    }
}

/// A fault injected with one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// The agent is killed (SIGKILL) this long after the operation starts, and restarted.
    KillAgent { after_ms: u64 },
    /// The shim is killed this long after its start (the runtime gave up on it).
    KillShim { after_ms: u64 },
    /// The pod's namespace is deleted before its DEL (the runtime lost it); the DEL names
    /// the old path, or none.
    NetnsGone { keep_path: bool },
    /// The runtime forgets the pod entirely: no DEL ever comes, only GC can clean it.
    Forgotten,
    /// The state directory is full while the operation runs.
    StateFull,
    /// The ADD selects a network whose real plugin rejects its config.
    PluginRejects,
    /// The ADD selects a network whose real IPAM plugin waits on a lock past the agent's
    /// delegate timeout.
    PluginHangs,
}

impl Fault {
    /// The kind, for the report.
    pub fn kind(self) -> &'static str {
        match self {
            Fault::KillAgent { .. } => "agent killed",
            Fault::KillShim { .. } => "shim killed",
            Fault::NetnsGone { .. } => "netns deleted before DEL",
            Fault::Forgotten => "pod forgotten by the runtime (GC only)",
            Fault::StateFull => "state directory full",
            Fault::PluginRejects => "plugin rejects its config",
            Fault::PluginHangs => "plugin hangs past its timeout",
        }
    }

    pub const KINDS: [&'static str; 7] = [
        "agent killed",
        "shim killed",
        "netns deleted before DEL",
        "pod forgotten by the runtime (GC only)",
        "state directory full",
        "plugin rejects its config",
        "plugin hangs past its timeout",
    ];
}

/// The next operation for a pod in `phase`, and its fault (if any). `fault_percent` is the
/// share of operations that carry one.
pub fn next(phase: Phase, rng: &mut Rng, fault_percent: u64) -> (Op, Option<Fault>) {
    let op = match phase {
        Phase::Created => match rng.below(100) {
            0..=89 => Op::Add,
            90..=94 => Op::Gc,
            _ => Op::Status,
        },
        Phase::Attached => match rng.below(100) {
            0..=29 => Op::Check,
            30..=89 => Op::Del,
            90..=94 => Op::Gc,
            _ => Op::Status,
        },
        Phase::Deleting => Op::Del,
    };
    if !rng.chance(fault_percent) {
        return (op, None);
    }
    (op, fault_for(op, phase, rng))
}

/// A fault that fits the operation.
fn fault_for(op: Op, phase: Phase, rng: &mut Rng) -> Option<Fault> {
    let kill_agent = Fault::KillAgent { after_ms: rng.between(0, 60) };
    let kill_shim = Fault::KillShim { after_ms: rng.between(1, 40) };
    let netns_gone = Fault::NetnsGone { keep_path: rng.chance(50) };
    let pick = |rng: &mut Rng, options: &[Fault]| options[rng.below(options.len() as u64) as usize];
    match (op, phase) {
        (Op::Add, _) => Some(pick(
            rng,
            &[kill_agent, kill_shim, Fault::StateFull, Fault::PluginRejects, Fault::PluginHangs],
        )),
        (Op::Del, Phase::Attached) => {
            Some(pick(rng, &[kill_agent, kill_shim, Fault::StateFull, netns_gone, Fault::Forgotten]))
        }
        (Op::Del, _) => Some(pick(rng, &[kill_agent, kill_shim, Fault::StateFull])),
        (Op::Check | Op::Gc | Op::Status, _) => Some(pick(rng, &[kill_agent, kill_shim])),
    }
}

/// The phase after an operation: `ok` whether it succeeded.
pub fn after(phase: Phase, op: Op, ok: bool) -> Option<Phase> {
    match (op, ok) {
        (Op::Add, true) => Some(Phase::Attached),
        // kubelet tears a sandbox down after a failed ADD.
        (Op::Add, false) => Some(Phase::Deleting),
        // The pod is gone: the slot takes a new one.
        (Op::Del, true) => None,
        (Op::Del, false) => Some(Phase::Deleting),
        _ => Some(phase),
    }
}

/// Why an answer is not acceptable, if it is not: a failure must be a CNI error (JSON with a
/// numeric `code` and a non-empty `msg`), unless the shim itself was killed (then nothing
/// was printed); a success prints nothing but for ADD (a result) and VERSION.
pub fn judge(op: Op, exit_code: i32, stdout: &str, shim_killed: bool) -> Result<(), String> {
    if exit_code == 0 {
        return match op {
            Op::Add => match serde_json::from_str::<Value>(stdout.trim()) {
                Ok(v) if v.get("cniVersion").is_some() => Ok(()),
                _ => Err(format!("ADD succeeded without a result: {stdout:?}")),
            },
            _ => Ok(()),
        };
    }
    if shim_killed && stdout.trim().is_empty() {
        return Ok(());
    }
    let v: Value = serde_json::from_str(stdout.trim())
        .map_err(|_| format!("{} failed (exit {exit_code}) without a CNI error: {stdout:?}", op.verb()))?;
    let code_ok = v["code"].as_u64().is_some_and(|c| c > 0);
    let msg_ok = v["msg"].as_str().is_some_and(|m| !m.trim().is_empty());
    if code_ok && msg_ok {
        Ok(())
    } else {
        Err(format!("{} failed with an incomplete CNI error (code and msg needed): {stdout}", op.verb()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_dels_until_a_del_succeeds() {
        assert_eq!(after(Phase::Created, Op::Add, true), Some(Phase::Attached));
        assert_eq!(after(Phase::Created, Op::Add, false), Some(Phase::Deleting));
        assert_eq!(after(Phase::Deleting, Op::Del, false), Some(Phase::Deleting));
        assert_eq!(after(Phase::Deleting, Op::Del, true), None);
        assert_eq!(after(Phase::Attached, Op::Check, false), Some(Phase::Attached));
        let mut rng = Rng::new(3);
        for _ in 0..1000 {
            assert_eq!(next(Phase::Deleting, &mut rng, 50).0, Op::Del);
        }
    }

    #[test]
    fn faults_fit_their_operation() {
        let mut rng = Rng::new(9);
        for _ in 0..5000 {
            let phase = [Phase::Created, Phase::Attached, Phase::Deleting][rng.below(3) as usize];
            let (op, fault) = next(phase, &mut rng, 100);
            let fault = fault.expect("every operation carries a fault at 100%");
            match fault {
                Fault::PluginRejects | Fault::PluginHangs => assert_eq!(op, Op::Add),
                Fault::NetnsGone { .. } | Fault::Forgotten => {
                    assert_eq!((op, phase), (Op::Del, Phase::Attached))
                }
                Fault::StateFull => assert!(matches!(op, Op::Add | Op::Del)),
                Fault::KillAgent { after_ms } => assert!(after_ms <= 60),
                Fault::KillShim { after_ms } => assert!((1..=40).contains(&after_ms)),
            }
            assert!(Fault::KINDS.contains(&fault.kind()));
        }
        let mut rng = Rng::new(9);
        assert!((0..1000).all(|_| next(Phase::Attached, &mut rng, 0).1.is_none()));
    }

    #[test]
    fn answers_are_judged() {
        assert!(judge(Op::Add, 0, r#"{"cniVersion":"1.1.0","ips":[]}"#, false).is_ok());
        assert!(judge(Op::Add, 0, "", false).is_err());
        assert!(judge(Op::Del, 0, "", false).is_ok());
        assert!(judge(Op::Del, 1, r#"{"cniVersion":"1.1.0","code":11,"msg":"retry"}"#, false).is_ok());
        assert!(judge(Op::Del, 1, r#"{"code":11,"msg":""}"#, false).is_err());
        assert!(judge(Op::Del, 1, r#"{"msg":"no code"}"#, false).is_err());
        assert!(judge(Op::Check, 1, "panic: oops", false).is_err());
        assert!(judge(Op::Add, -1, "", true).is_ok(), "a killed shim prints nothing");
        assert!(judge(Op::Add, -1, "", false).is_err());
    }
}
