//! A worker process stopped past the TTL (SIGSTOP, then SIGCONT: its renewal stops with it,
//! so the lease passes to the other worker, and what it had in flight lands when it wakes) or
//! killed between its gateway call and its confirm (it stops itself right after the call, so
//! the kill strikes with the refund in flight by construction; a new worker takes its place,
//! and the next holder must find the refund in flight and ask the gateway before sending).

use std::time::Duration;

use fencing_harness::plan::Fault;
use fencing_harness::signal;

use super::super::{RunError, Watch};

impl Watch<'_> {
    /// Stops `holder` for the fault's pause; whether it struck (a holder known).
    pub(super) fn stall(
        &mut self,
        fault: &Fault,
        holder: Option<(String, u32)>,
        at: Duration,
    ) -> bool {
        let Some((name, pid)) = holder else {
            return false;
        };
        self.picture.stalled(at, &name, fault.pause);
        signal("STOP", pid);
        let pause = fault.pause;
        tokio::spawn(async move {
            tokio::time::sleep(pause).await;
            signal("CONT", pid);
        });
        true
    }

    /// SIGKILLs worker `name` and starts a new one in its place.
    pub(in crate::programs::campaign::run) fn kill_and_replace(
        &mut self,
        name: &str,
        at: Duration,
    ) -> Result<(), RunError> {
        if let Some(worker) = self.workers.get_mut(name) {
            signal("KILL", worker.pid);
            worker.killed = true;
        }
        self.picture.killed(at, name);
        if self.last_writer.as_deref() == Some(name) {
            self.last_writer = None;
        }
        let (name, worker) = self.spawner.spawn(None)?;
        self.workers.insert(name, worker);
        Ok(())
    }
}

/// Waits (up to 2 s) until `pid` is stopped, as `/proc/<pid>/stat` shows.
pub(in crate::programs::campaign::run) async fn wait_until_stopped(pid: u32) {
    for _ in 0..200 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the parenthesised command name.
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next());
        if matches!(state, Some("T" | "t") | None) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
