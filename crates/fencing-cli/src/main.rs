//! `fencing`, the operator's command: see the `fencing_cli` library for what it does and
//! `docs/operating.md` for how to use it.

use std::process::ExitCode;

fn main() -> ExitCode {
    fencing_cli::run(std::env::args_os())
}
