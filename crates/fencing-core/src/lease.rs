//! Leases: liveness for a resource, and the fencing token that makes them safe.

use std::fmt::{self, Debug};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::input::{InputKind, InvalidInput};
use crate::name::ResourceName;
use crate::token::FencingToken;
use crate::token_source::TokenSource;

/// A lease's time-to-live: whole milliseconds, at least 1 ms and at most [`Ttl::MAX`].
///
/// The TTL is how long a crashed holder blocks the resource. It is not how long a live holder
/// may safely write: only the fence says that.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ttl(Duration);

impl Ttl {
    /// The longest TTL, one day: a longer one is a crash-recovery time nobody wants, and it
    /// fits every store's expiry arithmetic.
    pub const MAX: Ttl = Ttl(Duration::from_secs(24 * 60 * 60));

    /// Rounds `duration` down to whole milliseconds (what stores keep) and checks the range.
    pub fn new(duration: Duration) -> Result<Self, InvalidInput> {
        let millis = duration.as_millis();
        if millis == 0 {
            return Err(InvalidInput::new(
                InputKind::Ttl,
                format!("{duration:?} is less than the shortest TTL of 1 ms"),
            ));
        }
        if duration > Self::MAX.0 {
            return Err(InvalidInput::new(
                InputKind::Ttl,
                format!("{duration:?} is longer than the longest TTL of one day"),
            ));
        }
        Ok(Ttl(Duration::from_millis(millis as u64)))
    }

    /// A TTL of `millis` milliseconds.
    pub fn from_millis(millis: u64) -> Result<Self, InvalidInput> {
        Self::new(Duration::from_millis(millis))
    }

    /// A TTL of `secs` seconds.
    pub fn from_secs(secs: u64) -> Result<Self, InvalidInput> {
        Self::new(Duration::from_secs(secs))
    }

    /// The TTL as a duration.
    pub fn duration(self) -> Duration {
        self.0
    }

    /// The TTL in whole milliseconds.
    pub fn as_millis(self) -> u64 {
        self.0.as_millis() as u64
    }
}

/// Who holds a lease: a random id made at each acquisition, compared by the store on extend
/// and release so that only the holder can do either.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OwnerId(String);

impl OwnerId {
    /// A fresh random owner id.
    pub fn random() -> Self {
        OwnerId(uuid::Uuid::new_v4().simple().to_string())
    }

    /// An owner id read back from a store.
    pub fn from_stored(id: impl Into<String>) -> Self {
        OwnerId(id.into())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Debug for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Proof of one acquisition: the resource, the owner, the token, and a local deadline.
///
/// The local deadline is measured on a monotonic clock from *before* the acquire request was
/// sent, less a 1 % allowance for clock-rate drift, so it never lies after the store's expiry.
/// Checking it lets a holder stop early instead of wasting work; correctness never rests on
/// it, because a process can pause between the check and the write. The fence is what holds.
#[derive(Clone, Debug)]
pub struct LeaseGuard {
    resource: ResourceName,
    owner: OwnerId,
    token: FencingToken,
    ttl: Ttl,
    local_deadline: Instant,
}

impl LeaseGuard {
    /// Records an acquisition whose request left at `requested_at` (for adapters).
    pub fn new(
        resource: ResourceName,
        owner: OwnerId,
        token: FencingToken,
        ttl: Ttl,
        requested_at: Instant,
    ) -> Self {
        LeaseGuard {
            resource,
            owner,
            token,
            ttl,
            local_deadline: deadline(requested_at, ttl),
        }
    }

    /// The resource this lease is on.
    pub fn resource(&self) -> &ResourceName {
        &self.resource
    }

    /// The owner id the store holds for this lease.
    pub fn owner(&self) -> &OwnerId {
        &self.owner
    }

    /// The fencing token issued with this acquisition. Present it on every protected write.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The TTL last granted.
    pub fn ttl(&self) -> Ttl {
        self.ttl
    }

    /// The conservative local deadline.
    pub fn local_deadline(&self) -> Instant {
        self.local_deadline
    }

    /// Time left before the local deadline at `now`; zero once it has passed.
    pub fn time_left(&self, now: Instant) -> Duration {
        self.local_deadline.saturating_duration_since(now)
    }

    /// Records a successful extension whose request left at `requested_at` (for adapters).
    pub fn extended(&mut self, ttl: Ttl, requested_at: Instant) {
        self.ttl = ttl;
        self.local_deadline = deadline(requested_at, ttl);
    }

    /// A refusal naming this guard's resource and owner (for adapters).
    pub fn lost(&self) -> Error {
        Error::LeaseLost {
            resource: self.resource.clone(),
            owner: self.owner.to_string(),
        }
    }
}

fn deadline(requested_at: Instant, ttl: Ttl) -> Instant {
    let ttl = ttl.duration();
    requested_at + ttl - ttl / 100
}

/// A lease on named resources, issuing a fencing token with every acquisition.
///
/// # Contract
///
/// * **Exclusive while live**: while a lease on a resource is unexpired, `try_acquire` of the
///   same resource returns `Ok(None)` to everyone.
/// * **Expiry**: once the TTL has passed without an extension, the resource can be acquired
///   again. The old guard is then worthless, but nothing tells its holder: a paused holder
///   keeps its guard. Only fenced writes stop it.
/// * **Tokens**: each acquisition takes the next token of [`Lease::token_source`] for the
///   resource, so tokens strictly increase across acquisitions and are never reused.
/// * **Owner-only**: `extend` and `release` succeed only for the current owner of an unexpired
///   lease, and otherwise return [`Error::LeaseLost`] and change nothing.
/// * **Local deadline**: the guard's deadline is taken from a monotonic instant read before the
///   request was sent.
#[async_trait]
pub trait Lease: Send + Sync + Debug {
    /// Tries once to acquire `resource` for `ttl`; `Ok(None)` when another owner holds it.
    async fn try_acquire(&self, resource: &ResourceName, ttl: Ttl) -> Result<Option<LeaseGuard>>;

    /// Extends the guard's lease to `ttl` from now, if its owner still holds it.
    async fn extend(&self, guard: &mut LeaseGuard, ttl: Ttl) -> Result<()>;

    /// Releases the guard's lease, if its owner still holds it.
    async fn release(&self, guard: LeaseGuard) -> Result<()>;

    /// The counter this lease draws its tokens from, for regression checks and seeding.
    fn token_source(&self) -> &dyn TokenSource;
}

macro_rules! forward_lease {
    ($($wrapper:ident),*) => {$(
        #[async_trait]
        impl<L: Lease + ?Sized> Lease for $wrapper<L> {
            async fn try_acquire(
                &self,
                resource: &ResourceName,
                ttl: Ttl,
            ) -> Result<Option<LeaseGuard>> {
                (**self).try_acquire(resource, ttl).await
            }
            async fn extend(&self, guard: &mut LeaseGuard, ttl: Ttl) -> Result<()> {
                (**self).extend(guard, ttl).await
            }
            async fn release(&self, guard: LeaseGuard) -> Result<()> {
                (**self).release(guard).await
            }
            fn token_source(&self) -> &dyn TokenSource {
                (**self).token_source()
            }
        }
    )*};
}
forward_lease!(Arc, Box);

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

/// Acquires `resource`, retrying under `retry` while another owner holds it, sleeping on
/// `clock`. Returns [`Error::LeaseBusy`] when the attempts run out.
pub async fn acquire<L: Lease + ?Sized>(
    lease: &L,
    resource: &ResourceName,
    ttl: Ttl,
    retry: &RetryPolicy,
    clock: &dyn Clock,
) -> Result<LeaseGuard> {
    for attempt in 1..=retry.attempts {
        if let Some(guard) = lease.try_acquire(resource, ttl).await? {
            return Ok(guard);
        }
        if attempt < retry.attempts {
            clock.sleep(retry.backoff_after(attempt)).await;
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

    #[test]
    fn ttl_is_whole_milliseconds_within_range() {
        assert_eq!(Ttl::new(Duration::ZERO).unwrap_err().kind(), InputKind::Ttl);
        assert!(Ttl::new(Duration::from_micros(999)).is_err());
        assert_eq!(
            Ttl::new(Duration::from_micros(1500)).unwrap().as_millis(),
            1
        );
        assert!(Ttl::new(Ttl::MAX.duration()).is_ok());
        assert!(Ttl::new(Ttl::MAX.duration() + Duration::from_millis(1)).is_err());
    }

    #[test]
    fn local_deadline_is_before_the_ttl_ends() {
        let start = Instant::now();
        let ttl = Ttl::from_secs(30).unwrap();
        let guard = LeaseGuard::new(
            ResourceName::new("settle:m_4471").unwrap(),
            OwnerId::random(),
            FencingToken::MIN,
            ttl,
            start,
        );
        assert_eq!(
            guard.local_deadline(),
            start + Duration::from_millis(29_700)
        );
        assert_eq!(
            guard.time_left(start + Duration::from_secs(31)),
            Duration::ZERO
        );
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
