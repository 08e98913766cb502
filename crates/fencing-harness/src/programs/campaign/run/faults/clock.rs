//! Clock faults: a run with one starts its workers under libfaketime (Debian's `faketime`),
//! each reading its wall clock's offset from a file of its own that the campaign rewrites.
//! Only the wall clock moves: the monotonic clock (every timer, the guard's local deadline,
//! the history's times) is left alone, as a clock step by NTP or an operator leaves it.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

use fencing_harness::plan::{Fault, FaultKind};

use super::super::{RunError, Watch};

/// Where Debian's `faketime` package puts the library, its thread-safe build first.
const LIBRARIES: [&str; 2] = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
];

/// A worker's wall clock, offset by what its file says.
#[derive(Debug)]
pub(crate) struct FakedClock {
    file: PathBuf,
}

impl FakedClock {
    /// Starts `command` with its wall clock read through a new file in `dir` named after
    /// `worker`, at no offset yet.
    pub(crate) fn start(command: &mut Command, dir: &Path, worker: &str) -> io::Result<Self> {
        let library = LIBRARIES
            .into_iter()
            .map(Path::new)
            .find(|path| path.exists())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    "libfaketime is not installed (scripts/setup installs Debian's faketime)",
                )
            })?;
        let clock = FakedClock {
            file: dir.join(format!("{worker}.clock")),
        };
        clock.set(0)?;
        command
            .env("LD_PRELOAD", library)
            .env("FAKETIME_TIMESTAMP_FILE", &clock.file)
            // Read on every call, so that a jump takes effect at once.
            .env("FAKETIME_NO_CACHE", "1")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        Ok(clock)
    }

    /// Sets the clock `offset_ms` ahead of the real one (behind when negative). The file is
    /// replaced whole, so the worker never reads half of it.
    pub(crate) fn set(&self, offset_ms: i64) -> io::Result<()> {
        let next = self.file.with_extension("clock.next");
        std::fs::write(&next, offset(offset_ms))?;
        std::fs::rename(&next, &self.file)
    }

    /// Sets the clock `offset_ms` off now, and right again after `lasting`.
    pub(crate) fn jump(
        self: &std::sync::Arc<Self>,
        offset_ms: i64,
        lasting: Duration,
    ) -> io::Result<()> {
        self.set(offset_ms)?;
        let clock = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(lasting).await;
            // A worker killed meanwhile has no one reading its file.
            let _ = clock.set(0);
        });
        Ok(())
    }
}

/// An offset as libfaketime reads it: a signed number of seconds.
fn offset(offset_ms: i64) -> String {
    let sign = if offset_ms < 0 { '-' } else { '+' };
    let ms = offset_ms.unsigned_abs();
    format!("{sign}{}.{:03}\n", ms / 1000, ms % 1000)
}

impl Watch<'_> {
    /// Sets the holder's clock behind, or every other live worker's ahead, by the fault's
    /// pause for as long; whether it struck (a holder known, and someone to jump).
    pub(super) fn jump_clocks(
        &mut self,
        fault: &Fault,
        holder: Option<(String, u32)>,
        at: Duration,
    ) -> Result<bool, RunError> {
        let Some((holder, _)) = holder else {
            return Ok(false);
        };
        let behind = fault.kind == FaultKind::ClockBehind;
        let offset_ms = i64::try_from(fault.pause.as_millis())?;
        let offset_ms = if behind { -offset_ms } else { offset_ms };
        let mut jumped = false;
        for (name, worker) in &self.workers {
            let Some(clock) = worker.clock.as_ref().filter(|_| !worker.killed) else {
                continue;
            };
            if (*name == holder) == behind {
                clock.jump(offset_ms, fault.pause)?;
                self.picture.clock_jumped(at, name, offset_ms, fault.pause);
                jumped = true;
            }
        }
        Ok(jumped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_signed_seconds_with_milliseconds() {
        assert_eq!(offset(0), "+0.000\n");
        assert_eq!(offset(1_250), "+1.250\n");
        assert_eq!(offset(-2_005), "-2.005\n");
    }
}
