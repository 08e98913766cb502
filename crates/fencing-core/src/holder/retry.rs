//! Waiting for a lease another owner holds: a bounded retry policy and [`acquire`].

use std::time::Duration;

use crate::contract::guard::LeaseGuard;
use crate::contract::lease::Lease;
use crate::telemetry;
use crate::value::error::{Error, Result};
use crate::value::input::{InputKind, InvalidInput};
use crate::value::name::ResourceName;
use crate::value::random::random_u128;
use crate::value::ttl::Ttl;

/// How [`acquire`] retries a lease held by another owner: exponential backoff, bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    attempts: u32,
    first_backoff: Duration,
    max_backoff: Duration,
}

impl RetryPolicy {
    /// `attempts` tries in all (at least 1), waiting `first_backoff` after the first failure
    /// and doubling each time up to `max_backoff`.
    pub fn new(
        attempts: u32,
        first_backoff: Duration,
        max_backoff: Duration,
    ) -> Result<Self, InvalidInput> {
        if attempts == 0 {
            return Err(InvalidInput::new(
                InputKind::Retry,
                "a retry policy needs at least one attempt",
            ));
        }
        if first_backoff > max_backoff {
            return Err(InvalidInput::new(
                InputKind::Retry,
                format!("first backoff {first_backoff:?} exceeds the maximum {max_backoff:?}"),
            ));
        }
        Ok(RetryPolicy {
            attempts,
            first_backoff,
            max_backoff,
        })
    }

    /// One attempt, no waiting.
    pub fn once() -> Self {
        RetryPolicy {
            attempts: 1,
            first_backoff: Duration::ZERO,
            max_backoff: Duration::ZERO,
        }
    }

    /// The number of attempts.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    fn backoff_after(&self, failures: u32) -> Duration {
        let factor = 1u32
            .checked_shl(failures.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.first_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }
}

impl Default for RetryPolicy {
    /// 10 attempts, from 50 ms doubling to 2 s.
    fn default() -> Self {
        RetryPolicy {
            attempts: 10,
            first_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
        }
    }
}

/// How long a compare-and-swap loop waits after the `refusals`-th refusal in a row by a writer
/// that got in first: nothing after the first (that one only means the value remembered was
/// stale), then a random part of a window that doubles from 1 ms to 512 ms, so writers racing
/// for one item spread out instead of meeting again round after round (eight writers that
/// only ever retried at once would each lose a round seven times in eight).
pub fn contention_pause(refusals: u32) -> Duration {
    if refusals <= 1 {
        return Duration::ZERO;
    }
    let window_us = 1_000u64 << (refusals - 2).min(9);
    let random = random_u128() as u64;
    Duration::from_micros(random % window_us + 1)
}

/// Acquires `resource`, retrying under `retry` while another owner holds it, waiting on
/// tokio's clock (virtual under a paused runtime). Returns [`Error::LeaseBusy`] when the
/// attempts run out.
pub async fn acquire<L: Lease + ?Sized>(
    lease: &L,
    resource: &ResourceName,
    ttl: Ttl,
    retry: &RetryPolicy,
) -> Result<LeaseGuard> {
    for attempt in 1..=retry.attempts {
        let granted = lease.try_acquire(resource, ttl).await?;
        telemetry::acquisition(resource, granted.as_ref().map(LeaseGuard::token));
        if let Some(guard) = granted {
            return Ok(guard);
        }
        if attempt < retry.attempts {
            tokio::time::sleep(retry.backoff_after(attempt)).await;
        }
    }
    Err(Error::LeaseBusy {
        resource: resource.clone(),
        attempts: retry.attempts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_busy_lease_is_tried_the_attempts_given_with_no_wait_after_the_last() {
        use crate::memory::MemoryLease;

        let lease = MemoryLease::new();
        let r = ResourceName::new("settle:m_4471").unwrap();
        let ttl = Ttl::from_secs(60).unwrap();
        let _holder = lease.try_acquire(&r, ttl).await.unwrap().unwrap();
        let retry = RetryPolicy::new(3, Duration::from_secs(1), Duration::from_secs(1)).unwrap();
        assert_eq!(retry.attempts(), 3);
        let started = tokio::time::Instant::now();
        let err = acquire(&lease, &r, ttl, &retry).await.unwrap_err();
        assert!(
            matches!(err, Error::LeaseBusy { attempts: 3, .. }),
            "{err:?}"
        );
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(2),
            "two waits between three tries"
        );
    }

    #[test]
    fn contention_pauses_start_after_the_first_refusal_and_stay_within_a_doubling_window() {
        assert_eq!(contention_pause(0), Duration::ZERO);
        assert_eq!(contention_pause(1), Duration::ZERO);
        for (refusals, window_ms) in [(2, 1), (3, 2), (4, 4), (11, 512), (40, 512)] {
            let pauses: Vec<Duration> = (0..200).map(|_| contention_pause(refusals)).collect();
            let window = Duration::from_millis(window_ms);
            assert!(
                pauses.iter().all(|p| !p.is_zero() && *p <= window),
                "{refusals}: {pauses:?}"
            );
            let distinct: std::collections::BTreeSet<_> = pauses.iter().collect();
            assert!(distinct.len() > 20, "{refusals}: spread out, {distinct:?}");
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let retry =
            RetryPolicy::new(6, Duration::from_millis(50), Duration::from_millis(300)).unwrap();
        let waits: Vec<_> = (1..6).map(|n| retry.backoff_after(n).as_millis()).collect();
        assert_eq!(waits, [50, 100, 200, 300, 300]);
        assert!(RetryPolicy::new(0, Duration::ZERO, Duration::ZERO).is_err());
        assert!(RetryPolicy::new(2, Duration::from_secs(2), Duration::from_secs(1)).is_err());
    }
}
