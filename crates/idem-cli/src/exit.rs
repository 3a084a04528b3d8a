//! Exit codes of the `idem` command and the error type that carries one.
//!
//! Scripts and cron wrappers branch on these numbers, so they are part of the command's
//! contract: never renumber one, only add. The table is printed by `idem --help`.

use idem::ClaimOutcome;

use crate::client::ApiError;

/// Success: the call succeeded, or a claim was `acquired` (do the side effect now). Never a
/// duplicate: `idem claim … && ./charge.sh` charges only when this claim won the key.
pub const OK: u8 = 0;
/// Runtime error: bad input (file, JSON, key), local ledger failure, internal error.
pub const ERROR: u8 = 1;
/// Command-line usage error (unknown flag, missing argument).
pub const USAGE: u8 = 2;
pub const IN_FLIGHT: u8 = 10;
pub const BACKOFF: u8 = 11;
pub const NEEDS_REVIEW: u8 = 12;
pub const AWAITING_APPROVAL: u8 = 13;
pub const CONFLICT: u8 = 14;
pub const PAUSED: u8 = 15;
pub const LIMITED: u8 = 16;
pub const FAILED_PERMANENT: u8 = 17;
pub const LEASE_LOST: u8 = 18;
/// A duplicate: the key is `completed`, its stored result was replayed (`idem run`: the
/// command did not run again). Not 0, so `idem claim … && cmd` never repeats the effect.
pub const COMPLETED: u8 = 19;
pub const HTTP_ERROR: u8 = 20;
pub const CONNECTION: u8 = 21;
/// `idem run`: the command could not be started (not found, not executable).
pub const CANNOT_RUN: u8 = 127;

/// The table shown in `--help`.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
    0   ok: call succeeded; claim acquired (do the side effect now)
    1   error: bad input (file, JSON, key), local ledger failure, internal error
    2   usage error (unknown flag, missing argument)
   10   in_flight: another worker holds a valid lease on the key
   11   backoff: failed_retryable, next attempt not allowed yet
   12   needs_review: ambiguous outcome, a person must resolve it
   13   awaiting_approval: prepared payload waits for an operator
   14   conflict: same key, different payload/fingerprint
   15   paused: the namespace is paused by an operator
   16   limited: the namespace's daily limit of new keys is reached
   17   failed_permanent: the key failed permanently (stored error replayed)
   18   lease_lost: a newer claim took the lease; this token is fenced
   19   completed: a duplicate; the effect already happened and its stored result was
        replayed (idem run: the command did not run again, its stored stdout was printed)
   20   HTTP error answer from the server (problem+json; code printed on stderr)
   21   cannot reach the server (connection refused, DNS, timeout)
  idem run, when the command ran: the command's own exit code (128+N when killed by
  signal N); 127 when the command could not be started.
";

/// The exit code for a claim outcome: 0 only for `acquired`, so a script's `&&` never runs
/// the side effect for a duplicate.
pub fn for_outcome(outcome: ClaimOutcome) -> u8 {
    match outcome {
        ClaimOutcome::Acquired => OK,
        ClaimOutcome::Completed => COMPLETED,
        ClaimOutcome::FailedPermanent => FAILED_PERMANENT,
        ClaimOutcome::Conflict => CONFLICT,
        ClaimOutcome::InFlight => IN_FLIGHT,
        ClaimOutcome::Backoff => BACKOFF,
        ClaimOutcome::NeedsReview => NEEDS_REVIEW,
        ClaimOutcome::AwaitingApproval => AWAITING_APPROVAL,
        ClaimOutcome::Paused => PAUSED,
        ClaimOutcome::Limited => LIMITED,
    }
}

/// An error that ends the command, with the exit code it maps to.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad input given to the command (exit 1).
    #[error("{0}")]
    Input(String),
    /// The server or the local ledger refused or failed.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// Anything else (exit 1).
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl CliError {
    pub fn input(msg: impl Into<String>) -> Self {
        CliError::Input(msg.into())
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Input(_) | CliError::Other(_) => ERROR,
            CliError::Api(e) => e.exit_code(),
        }
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> Self {
        CliError::Other(e.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_has_a_distinct_documented_code() {
        let mut seen = std::collections::HashSet::new();
        for o in ClaimOutcome::ALL {
            let code = for_outcome(o);
            assert!(
                EXIT_CODES_HELP.contains(&format!("{code:>4}   ")),
                "{o:?} → {code}"
            );
            assert!(seen.insert(code), "{o:?} shares code {code}");
        }
    }

    #[test]
    fn only_acquired_exits_0() {
        for o in ClaimOutcome::ALL {
            assert_eq!(for_outcome(o) == OK, o == ClaimOutcome::Acquired, "{o:?}");
        }
        assert_eq!(for_outcome(ClaimOutcome::Completed), COMPLETED);
        assert_eq!(COMPLETED, 19, "exit codes are never renumbered");
        for code in [ERROR, USAGE, HTTP_ERROR, CONNECTION, CANNOT_RUN] {
            assert_ne!(code, COMPLETED);
        }
    }
}
