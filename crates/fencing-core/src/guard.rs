//! Proof of one acquisition: who holds a lease, with which token, until when.

use std::fmt::{self, Debug};
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::name::ResourceName;
use crate::token::FencingToken;
use crate::ttl::Ttl;

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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn an_owner_shows_as_its_id() {
        let owner = OwnerId::random();
        assert_eq!(format!("{owner:?}"), format!("{:?}", owner.as_str()));
        assert_eq!(owner.to_string(), owner.as_str());
    }
}
