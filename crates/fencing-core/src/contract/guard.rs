//! Proof of one acquisition: who holds a lease, with which token, until when.

use std::fmt::{self, Debug};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::contract::token_source::TokenSource;
use crate::value::clock::{Clock, TokioClock};
use crate::value::error::Error;
use crate::value::name::ResourceName;
use crate::value::random::random_u128;
use crate::value::token::FencingToken;
use crate::value::ttl::Ttl;

/// Who holds a lease: a random id made at each acquisition, compared by the store on extend
/// and release so that only the holder can do either.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OwnerId(String);

impl OwnerId {
    /// A fresh random owner id.
    pub fn random() -> Self {
        OwnerId(format!("{:032x}", random_u128()))
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
///
/// Clones of a guard are one acquisition seen from several places (a batch, a
/// [`crate::LeaseRenewal`] task): an extension through any clone moves the deadline of all,
/// and a renewal that gave up marks all of them ended ([`Self::has_ended_locally`]).
#[derive(Clone)]
pub struct LeaseGuard {
    resource: ResourceName,
    owner: OwnerId,
    token: FencingToken,
    source: Arc<dyn TokenSource>,
    tenure: Arc<Mutex<Tenure>>,
}

/// What extensions change, shared by every clone of one acquisition's guard.
#[derive(Clone, Copy, Debug)]
struct Tenure {
    ttl: Ttl,
    local_deadline: Instant,
    renewal_failed: bool,
    /// The highest fence this holder's refusals found above every token issued, to which it
    /// raised the token source.
    repaired_to: Option<FencingToken>,
}

impl Debug for LeaseGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tenure = self.tenure();
        f.debug_struct("LeaseGuard")
            .field("resource", &self.resource)
            .field("owner", &self.owner)
            .field("token", &self.token)
            .field("ttl", &tenure.ttl)
            .field("local_deadline", &tenure.local_deadline)
            .field("renewal_failed", &tenure.renewal_failed)
            .finish()
    }
}

impl LeaseGuard {
    fn tenure(&self) -> MutexGuard<'_, Tenure> {
        self.tenure.lock().unwrap_or_else(PoisonError::into_inner)
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

    /// The counter the token was drawn from: the lease's [`crate::Lease::token_source`]. A
    /// fenced write checks a refusal against it ([`Self::holder`]).
    pub fn token_source(&self) -> &Arc<dyn TokenSource> {
        &self.source
    }

    /// The TTL last granted.
    pub fn ttl(&self) -> Ttl {
        self.tenure().ttl
    }

    /// The conservative local deadline.
    pub fn local_deadline(&self) -> Instant {
        self.tenure().local_deadline
    }

    /// Time left before the local deadline at `now`; zero once it has passed.
    pub fn time_left(&self, now: Instant) -> Duration {
        self.local_deadline().saturating_duration_since(now)
    }

    /// True once the holder can tell by itself that its lease may be over: the local
    /// deadline has passed by tokio's clock (the monotonic clock, or virtual time in a
    /// paused runtime), or a [`crate::LeaseRenewal`] of this acquisition gave up.
    ///
    /// A process that was stopped sees this on waking, before any store refuses it, so the
    /// helpers start no new side effect once it is true. It is liveness and cost, never
    /// safety: `false` does not make a write safe (the process can pause right after the
    /// check); the fence does.
    pub fn has_ended_locally(&self) -> bool {
        let tenure = *self.tenure();
        tenure.renewal_failed || TokioClock.now() >= tenure.local_deadline
    }

    /// The highest fence a refusal under this acquisition found above every token the source
    /// had issued (and raised the source to), if any.
    pub(crate) fn repaired_to(&self) -> Option<FencingToken> {
        self.tenure().repaired_to
    }

    /// Notes that a refusal under this acquisition found `fence` above every token issued.
    pub(crate) fn repaired(&self, fence: FencingToken) {
        let mut tenure = self.tenure();
        tenure.repaired_to = tenure.repaired_to.max(Some(fence));
    }

    /// Marks every clone of this guard ended: its renewal gave up.
    pub(crate) fn renewal_failed(&self) {
        self.tenure().renewal_failed = true;
    }
}

/// An acquisition's request as it leaves for the lease's server: the resource, the TTL asked
/// for, a fresh owner id and when it left (the guard's local deadline counts from then, so a
/// slow answer shortens the tenure the holder trusts, never lengthens it). A lease adapter
/// makes one as `try_acquire` begins and turns it into the guard once its server grants it.
#[derive(Clone, Debug)]
pub struct LeaseRequest {
    resource: ResourceName,
    owner: OwnerId,
    ttl: Ttl,
    requested_at: Instant,
}

impl LeaseRequest {
    /// A request for `resource` under a fresh owner id, leaving now (tokio's clock, virtual
    /// under a paused runtime).
    pub fn new(resource: &ResourceName, ttl: Ttl) -> Self {
        LeaseRequest {
            resource: resource.clone(),
            owner: OwnerId::random(),
            ttl,
            requested_at: TokioClock.now(),
        }
    }

    /// The owner id the server is to record.
    pub fn owner(&self) -> &OwnerId {
        &self.owner
    }

    /// The guard of this request, granted with `token` drawn from `source`.
    pub fn granted(self, token: FencingToken, source: Arc<dyn TokenSource>) -> LeaseGuard {
        LeaseGuard::new(
            self.resource,
            self.owner,
            token,
            self.ttl,
            self.requested_at,
            source,
        )
    }
}

/// What a lease adapter does with the guards it hands out and a job does not: record an
/// acquisition and its extensions, and refuse an owner that lost its lease. Bring it in with
/// `use fencing_core::adapter::LeaseGuardExt`.
pub trait LeaseGuardExt {
    /// Records an acquisition whose request left at `requested_at`, its token drawn from
    /// `source`.
    fn new(
        resource: ResourceName,
        owner: OwnerId,
        token: FencingToken,
        ttl: Ttl,
        requested_at: Instant,
        source: Arc<dyn TokenSource>,
    ) -> Self;

    /// Records a successful extension whose request left at `requested_at`.
    fn extended(&mut self, ttl: Ttl, requested_at: Instant);

    /// The refusal ([`Error::LeaseLost`]) naming this guard's resource and owner.
    fn lost(&self) -> Error;
}

impl LeaseGuardExt for LeaseGuard {
    fn new(
        resource: ResourceName,
        owner: OwnerId,
        token: FencingToken,
        ttl: Ttl,
        requested_at: Instant,
        source: Arc<dyn TokenSource>,
    ) -> Self {
        LeaseGuard {
            resource,
            owner,
            token,
            source,
            tenure: Arc::new(Mutex::new(Tenure {
                ttl,
                local_deadline: deadline(requested_at, ttl),
                renewal_failed: false,
                repaired_to: None,
            })),
        }
    }

    fn extended(&mut self, ttl: Ttl, requested_at: Instant) {
        let mut tenure = self.tenure();
        tenure.ttl = ttl;
        tenure.local_deadline = deadline(requested_at, ttl);
    }

    fn lost(&self) -> Error {
        Error::LeaseLost {
            resource: self.resource.clone(),
            owner: self.owner.to_string(),
        }
    }
}

/// The TTL less 1 %, from `requested_at`. Where the platform's clock cannot hold that instant
/// (a TTL is at most a day: only a clock at the end of its range), the deadline is
/// `requested_at` itself, the conservative answer.
fn deadline(requested_at: Instant, ttl: Ttl) -> Instant {
    let ttl = ttl.duration();
    requested_at
        .checked_add(ttl - ttl / 100)
        .unwrap_or(requested_at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryTokenSource;

    fn guard_from(requested_at: Instant, ttl: Ttl) -> LeaseGuard {
        LeaseGuard::new(
            ResourceName::new("settle:m_4471").unwrap(),
            OwnerId::random(),
            FencingToken::MIN,
            ttl,
            requested_at,
            Arc::new(MemoryTokenSource::new()),
        )
    }

    #[test]
    fn local_deadline_is_before_the_ttl_ends() {
        let start = Instant::now();
        let ttl = Ttl::from_secs(30).unwrap();
        let guard = guard_from(start, ttl);
        assert_eq!(
            guard.local_deadline(),
            start + Duration::from_millis(29_700)
        );
        assert_eq!(
            guard.time_left(start + Duration::from_secs(31)),
            Duration::ZERO
        );
    }

    #[tokio::test(start_paused = true)]
    async fn clones_share_one_tenure_and_end_together() {
        let start = TokioClock.now();
        let ttl = Ttl::from_secs(30).unwrap();
        let guard = guard_from(start, ttl);
        let mut renewed = guard.clone();
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert!(!guard.has_ended_locally());
        renewed.extended(Ttl::from_secs(60).unwrap(), TokioClock.now());
        assert_eq!(guard.ttl(), Ttl::from_secs(60).unwrap());
        assert_eq!(guard.local_deadline(), renewed.local_deadline());
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(!guard.has_ended_locally(), "50 s in, the extension holds");
        renewed.renewal_failed();
        assert!(
            guard.has_ended_locally(),
            "a failed renewal ends every clone"
        );
        assert!(format!("{guard:?}").contains("renewal_failed: true"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_guard_ends_locally_at_its_deadline_exactly() {
        let guard = guard_from(TokioClock.now(), Ttl::from_secs(1).unwrap());
        tokio::time::sleep(Duration::from_millis(989)).await;
        assert!(!guard.has_ended_locally());
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(guard.has_ended_locally());
    }

    #[test]
    fn random_owners_are_32_hex_digits_and_differ() {
        let owners: std::collections::HashSet<String> =
            (0..1000).map(|_| OwnerId::random().to_string()).collect();
        assert_eq!(owners.len(), 1000);
        assert!(
            owners
                .iter()
                .all(|o| o.len() == 32 && o.bytes().all(|b| b.is_ascii_hexdigit()))
        );
    }

    #[test]
    fn an_owner_shows_as_its_id() {
        let owner = OwnerId::random();
        assert_eq!(format!("{owner:?}"), format!("{:?}", owner.as_str()));
        assert_eq!(owner.to_string(), owner.as_str());
    }
}
