//! Failpoints: a test knob that crashes the agent at a chosen point of a CNI request, so a
//! test can prove the durability rule (a crash at any point of an ADD or DEL leaves a state
//! that the runtime's DEL, after a restart, finishes: nothing left behind).
//!
//! `PLEXUS_FAILPOINT=<verb>:<point>[:<n>]`, read once when the agent starts: the `n`th time
//! (1 when not given) a request of `verb` (`ADD`, `DEL`, ... in any case) reaches `point`, the
//! agent kills itself with SIGKILL: no destructor, no flush, no answer to the runtime, as a
//! crash would. The points are the ends of the request's phases ([`Phase`]'s names: the work
//! of the phase done, nothing after it started) and the points inside a phase where a crash
//! leaves a state of its own ([`Point`]). Not an operator option: unset, reaching a point
//! costs one branch on a static.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use crate::cni::Command;
use crate::phase::Phase;

/// The environment variable naming the failpoint.
pub const ENV: &str = "PLEXUS_FAILPOINT";

/// Where a request can be crashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Point {
    /// The end of a phase: its work done, nothing after it started.
    End(Phase),
    /// A native plugin created the pod's link, before naming, addressing or raising it.
    LinkCreated,
    /// The request is done (recorded, published), its answer not yet sent.
    Answer,
}

impl Point {
    /// Every point, in no particular order: the phases' ends and the points inside them.
    pub fn all() -> Vec<Point> {
        let mut all: Vec<Point> = Phase::ALL.iter().copied().map(Point::End).collect();
        all.extend([Point::LinkCreated, Point::Answer]);
        all
    }

    /// The point's name in [`ENV`]: a phase's name for its end.
    pub fn as_str(self) -> &'static str {
        match self {
            Point::End(phase) => phase.as_str(),
            Point::LinkCreated => "link_created",
            Point::Answer => "answer",
        }
    }

    fn from_name(name: &str) -> Option<Point> {
        Point::all().into_iter().find(|p| p.as_str() == name)
    }
}

/// A failpoint: the `nth` time a request of `verb` reaches `point`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failpoint {
    pub verb: Command,
    pub point: Point,
    pub nth: u32,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FailpointError {
    #[error("{ENV}={value:?}: write <verb>:<point>[:<n>], such as ADD:plugins:2")]
    Shape { value: String },
    #[error("{ENV}={value:?}: unknown verb {verb:?}; use ADD, DEL, CHECK, STATUS or GC")]
    Verb { value: String, verb: String },
    #[error("{ENV}={value:?}: unknown point {point:?}; the points are {known}")]
    Point { value: String, point: String, known: String },
    #[error("{ENV}={value:?}: {n:?} is not a count from 1 up")]
    Count { value: String, n: String },
}

impl Failpoint {
    pub fn parse(value: &str) -> Result<Failpoint, FailpointError> {
        let mut parts = value.split(':');
        let (Some(verb), Some(point), nth, None) = (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(FailpointError::Shape { value: value.to_owned() });
        };
        let verb = Command::parse(&verb.to_ascii_uppercase())
            .ok()
            .filter(|v| *v != Command::Version)
            .ok_or_else(|| FailpointError::Verb { value: value.to_owned(), verb: verb.to_owned() })?;
        let point = Point::from_name(point).ok_or_else(|| FailpointError::Point {
            value: value.to_owned(),
            point: point.to_owned(),
            known: Point::all().iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", "),
        })?;
        let nth = match nth {
            None => 1,
            Some(n) => n
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| FailpointError::Count { value: value.to_owned(), n: n.to_owned() })?,
        };
        Ok(Failpoint { verb, point, nth })
    }

    /// How `PLEXUS_FAILPOINT` spells it.
    pub fn to_env(self) -> String {
        format!("{}:{}:{}", self.verb, self.point.as_str(), self.nth)
    }
}

/// The failpoint armed at start, with the times it was reached so far.
struct Armed {
    failpoint: Failpoint,
    reached: AtomicU32,
}

static ARMED: OnceLock<Armed> = OnceLock::new();

/// Arms the failpoint [`ENV`] names, if any; called once at start. A value that does not
/// parse is an error: a test whose failpoint never fires must not pass by accident.
pub fn arm_from_env() -> Result<Option<Failpoint>, FailpointError> {
    let Some(value) = std::env::var_os(ENV) else { return Ok(None) };
    let failpoint = Failpoint::parse(&value.to_string_lossy())?;
    // Set once; a second call keeps the first (the environment does not change).
    let armed = ARMED.get_or_init(|| Armed { failpoint, reached: AtomicU32::new(0) });
    // Every phase's end is a failpoint.
    crate::phase::on_end(|verb, phase| reached(verb, Point::End(phase)));
    Ok(Some(armed.failpoint))
}

/// A request of `verb` reached `point`: crashes the agent when that is the armed failpoint's
/// turn.
#[inline]
pub fn reached(verb: Option<Command>, point: Point) {
    if let Some(armed) = ARMED.get() {
        armed.reached(verb, point);
    }
}

/// [`reached`] by the request this task serves (its verb is the task's: see
/// [`crate::phase::for_verb`]).
#[inline]
pub fn reached_in_request(point: Point) {
    if let Some(armed) = ARMED.get() {
        armed.reached(crate::phase::current_verb(), point);
    }
}

impl Armed {
    #[cold]
    fn reached(&self, verb: Option<Command>, point: Point) {
        if verb != Some(self.failpoint.verb) || point != self.failpoint.point {
            return;
        }
        if self.reached.fetch_add(1, Ordering::SeqCst) + 1 == self.failpoint.nth {
            crash(self.failpoint);
        }
    }
}

/// SIGKILL to itself, after one line on stderr (unbuffered) saying why, for the test to see
/// that the crash was the failpoint's.
fn crash(failpoint: Failpoint) -> ! {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "failpoint {} reached: killing the agent", failpoint.to_env());
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    // SIGKILL cannot be caught or ignored; should raise fail, the process still ends at once.
    std::process::abort()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_point_has_its_own_name_and_parses_back() {
        let all = Point::all();
        let names: std::collections::BTreeSet<&str> = all.iter().map(|p| p.as_str()).collect();
        assert_eq!(names.len(), all.len());
        for verb in [Command::Add, Command::Del, Command::Check, Command::Status, Command::Gc] {
            for point in &all {
                for nth in [1, 2, 17] {
                    let fp = Failpoint { verb, point: *point, nth };
                    assert_eq!(Failpoint::parse(&fp.to_env()), Ok(fp));
                }
            }
        }
        for phase in Phase::ALL {
            assert!(all.contains(&Point::End(phase)), "{phase:?} has no failpoint");
        }
    }

    #[test]
    fn the_verb_is_any_case_and_the_count_defaults_to_one() {
        let fp = Failpoint::parse("add:state_write").unwrap();
        assert_eq!(fp, Failpoint { verb: Command::Add, point: Point::End(Phase::StateWrite), nth: 1 });
        let fp = Failpoint::parse("Del:link_created:3").unwrap();
        assert_eq!(fp, Failpoint { verb: Command::Del, point: Point::LinkCreated, nth: 3 });
    }

    #[test]
    fn malformed_values_say_what_is_wrong() {
        let shape = |v: &str| FailpointError::Shape { value: v.into() };
        for v in ["", "add", "add:plugins:1:2"] {
            assert_eq!(Failpoint::parse(v), Err(shape(v)), "{v}");
        }
        assert!(matches!(Failpoint::parse("put:plugins"), Err(FailpointError::Verb { .. })));
        assert!(matches!(Failpoint::parse("version:plugins"), Err(FailpointError::Verb { .. })));
        let err = Failpoint::parse("add:plugin").unwrap_err();
        assert!(matches!(err, FailpointError::Point { .. }));
        assert!(err.to_string().contains("plugins, default_route"), "{err}");
        for n in ["0", "-1", "x", ""] {
            let v = format!("add:plugins:{n}");
            assert!(matches!(Failpoint::parse(&v), Err(FailpointError::Count { .. })), "{v}");
        }
    }

    #[test]
    fn only_the_nth_reach_of_the_armed_verb_and_point_counts() {
        let armed = Armed {
            failpoint: Failpoint { verb: Command::Add, point: Point::End(Phase::Plugins), nth: 3 },
            reached: AtomicU32::new(0),
        };
        armed.reached(Some(Command::Add), Point::End(Phase::Plugins));
        armed.reached(Some(Command::Del), Point::End(Phase::Plugins));
        armed.reached(None, Point::End(Phase::Plugins));
        armed.reached(Some(Command::Add), Point::End(Phase::Ipam));
        armed.reached(Some(Command::Add), Point::LinkCreated);
        armed.reached(Some(Command::Add), Point::End(Phase::Plugins));
        assert_eq!(armed.reached.load(Ordering::SeqCst), 2, "the third would have crashed");
    }
}
