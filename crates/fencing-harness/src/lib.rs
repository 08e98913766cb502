//! The refund settlement as separate processes under real faults, and the audit that judges
//! each run from the stores themselves.
//!
//! The executable's programs (`src/programs/`, one module each, named after its command):
//! `campaign` (starts the services and processes of each run, injects the faults its seed
//! schedules, audits, and writes `docs/reliability.md`), `worker` (the job, received from an
//! SQS queue: lease, claim, gateway call, confirm, ledger entry, receipt, each write fenced,
//! then the message deleted), `gateway` (a payment gateway over HTTP, idempotent by refund
//! id, which journals every call), `scale` and `scale-worker` (many merchants, many workers,
//! measured). This library is what they share: the plan of a run, its stores and the team's
//! tables, the gateway ([`payments`]), the audits and checks, the many-merchant tables
//! ([`merchants`]). `docs/reliability.md` says how to run a campaign and what it found.

pub mod audit;
pub mod checks;
pub mod history;
pub mod http;
pub mod merchants;
pub mod payments;
pub mod plan;
pub mod queue;
pub mod servers;
pub mod stores;
pub mod tables;

use std::time::Duration;

/// Exits this process (code 70) once the process that started it is gone, so that an
/// interrupted or killed campaign leaves no worker or gateway behind.
pub fn exit_with_parent() {
    let parent = std::os::unix::process::parent_id();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_millis(250));
            if std::os::unix::process::parent_id() != parent {
                std::process::exit(70);
            }
        }
    });
}

/// Stops this process (SIGSTOP) by a system call of its own: no other task of the process
/// runs past this point, as it would while a `kill` process is being started to send it.
pub fn stop_this_process() {
    use rustix::process::{Signal, getpid, kill_process};
    let _ = kill_process(getpid(), Signal::STOP);
}

/// Sends signal `name` (`STOP`, `CONT`, `KILL`) to process `pid`; a process that is gone
/// already is no error.
pub fn signal(name: &str, pid: u32) {
    let _ = std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status();
}
