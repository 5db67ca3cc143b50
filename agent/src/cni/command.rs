//! The CNI verbs (CNI_COMMAND).

use std::fmt;

use super::{CniError, ErrorCode};

/// A CNI operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Status,
    Gc,
    Version,
}

impl Command {
    /// The verb as CNI_COMMAND spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Status => "STATUS",
            Command::Gc => "GC",
            Command::Version => "VERSION",
        }
    }

    pub fn parse(s: &str) -> Result<Self, CniError> {
        Ok(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "STATUS" => Command::Status,
            "GC" => Command::Gc,
            "VERSION" => Command::Version,
            other => {
                return Err(CniError::new(
                    ErrorCode::InvalidEnvironment,
                    format!("CNI_COMMAND {other:?} is unknown; use ADD, DEL, CHECK, STATUS, GC or VERSION"),
                ))
            }
        })
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_round_trip_and_unknown_ones_name_the_choices() {
        for c in [Command::Add, Command::Del, Command::Check, Command::Status, Command::Gc, Command::Version]
        {
            assert_eq!(Command::parse(c.as_str()).unwrap(), c);
        }
        let err = Command::parse("ATTACH").unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidEnvironment);
        assert!(err.msg.contains("ADD, DEL, CHECK, STATUS, GC or VERSION"), "{}", err.msg);
    }
}
