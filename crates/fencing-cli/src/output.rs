//! What a command prints: a table for people, one JSON object for scripts, and the exit code.

use std::process::ExitCode;

use serde_json::Value;

/// What a command found, in both forms.
#[derive(Debug)]
pub(crate) struct Report {
    /// Lines for people.
    pub(crate) lines: Vec<String>,
    /// The same for scripts.
    pub(crate) json: Value,
    /// The exit code: 0, or [`PROBE_FAILED`] / [`SERVICE`] for a probe that found a store
    /// misbehaving or failing without the command itself failing.
    pub(crate) code: u8,
}

impl Report {
    pub(crate) fn new(lines: Vec<String>, json: Value) -> Self {
        Report {
            lines,
            json,
            code: 0,
        }
    }
}

/// A command that could not do its work: a sentence saying what to do, and the exit code.
#[derive(Debug)]
pub(crate) struct Failure {
    message: String,
    code: u8,
}

/// Exit code: a probe found a store that does not behave as a fenced store.
pub(crate) const PROBE_FAILED: u8 = 1;
/// Exit code: bad usage (also clap's own).
pub(crate) const USAGE: u8 = 2;
/// Exit code: a store or service failed or could not be reached.
pub(crate) const SERVICE: u8 = 3;

impl Failure {
    /// Bad input on the command line.
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code: USAGE,
        }
    }

    /// A store or service failed.
    pub(crate) fn service(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code: SERVICE,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<fencing_core::Error> for Failure {
    fn from(err: fencing_core::Error) -> Self {
        match err {
            fencing_core::Error::InvalidInput(invalid) => Failure::usage(invalid.to_string()),
            other => Failure::service(other.to_string()),
        }
    }
}

impl From<fencing_core::InvalidInput> for Failure {
    fn from(err: fencing_core::InvalidInput) -> Self {
        Failure::usage(err.to_string())
    }
}

pub(crate) fn print(json: bool, report: &Report) -> ExitCode {
    if json {
        println!("{}", report.json);
    } else {
        for line in &report.lines {
            println!("{line}");
        }
    }
    ExitCode::from(report.code)
}

/// Prints the failure on stderr (as one JSON object with `--json`) and returns its code.
pub(crate) fn fail(json: bool, failure: &Failure) -> ExitCode {
    if json {
        eprintln!("{}", serde_json::json!({ "error": failure.message }));
    } else {
        eprintln!("fencing: {}", failure.message);
    }
    ExitCode::from(failure.code)
}
