//! Monotonic time, behind a trait so that a whole scenario can run in virtual time.

use std::fmt::Debug;
use std::time::{Duration, Instant};

use async_trait::async_trait;

/// A monotonic clock that can also wait.
///
/// Leases take their local deadline from it and the in-memory lease judges expiry by it, so
/// a test that swaps the clock controls every notion of time in a scenario.
#[async_trait]
pub trait Clock: Send + Sync + Debug {
    /// The current instant on this clock.
    fn now(&self) -> Instant;

    /// Waits until `duration` has passed on this clock.
    async fn sleep(&self, duration: Duration);
}

/// Tokio's clock: real time normally, virtual time in a runtime started paused.
///
/// Under `#[tokio::test(start_paused = true)]` (or `tokio::time::pause()`), time stands still
/// while any task can run and jumps to the next timer when all are idle, so a scenario of
/// pauses and expiries runs instantly and, on a current-thread runtime, identically every time.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioClock;

#[async_trait]
impl Clock for TokioClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    async fn sleep(&self, duration: Duration) {
        tokio::time::sleep(duration).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn paused_runtime_makes_time_virtual() {
        let clock = TokioClock;
        let start = clock.now();
        clock.sleep(Duration::from_secs(3600)).await;
        assert_eq!(clock.now() - start, Duration::from_secs(3600));
    }
}
