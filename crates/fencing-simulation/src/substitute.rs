//! The controls' leases: a real lease whose guards carry another token than the one it
//! issued. With every acquisition presenting the same token, the stores' fences admit every
//! write, mutual exclusion is only the lease's TTL, and the audit must find what that lets
//! through; with one token handed to two acquisitions (a seeded bug), the history checker must
//! see it. Never a thing to deploy.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use fencing_core::adapter::LeaseGuardExt;
use fencing_core::{
    FencingToken, Lease, LeaseGuard, LeaseStatus, ResourceName, Result, TokenSource, Ttl,
};

/// What a [`SubstitutedLease`]'s guards carry in place of the token the real lease issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Substitute {
    /// Token 1 on every guard, with holders that never learn their lease ended.
    OneToken,
    /// On every even token, the token below it: on a counter that rises by one, the token of
    /// the acquisition before.
    ReissuedToken,
}

/// Wraps a real lease: acquisition, extension and release go to it, but the guards it hands
/// out carry a substitute for the token it issued.
#[derive(Debug)]
pub struct SubstitutedLease {
    inner: Arc<dyn Lease>,
    substitute: Substitute,
    /// The real guard of every live acquisition, by owner id.
    real: Mutex<HashMap<String, LeaseGuard>>,
}

impl SubstitutedLease {
    /// The control of the fences: `inner`, its tokens replaced by 1, and its holders never
    /// learning by themselves that the lease ended (the local deadline a day away, extensions
    /// that never fail), as a job that takes a lease and nothing more: the library's own
    /// deadline checks would otherwise stop a woken holder before the audit could see what a
    /// lease alone lets through.
    pub fn one_token(inner: Arc<dyn Lease>) -> Self {
        Self::new(inner, Substitute::OneToken)
    }

    /// The history checker's seeded bug: `inner`, each acquisition issued an even token
    /// handed the token below it instead, so that on a counter rising by one it carries the
    /// token the acquisition before it carried. Deadlines and extensions are the real ones.
    pub fn reissuing(inner: Arc<dyn Lease>) -> Self {
        Self::new(inner, Substitute::ReissuedToken)
    }

    fn new(inner: Arc<dyn Lease>, substitute: Substitute) -> Self {
        SubstitutedLease {
            inner,
            substitute,
            real: Mutex::new(HashMap::new()),
        }
    }

    /// Keeps `real` as the real guard of its owner.
    fn keep(&self, real: LeaseGuard) {
        self.real
            .lock()
            .expect("never poisoned")
            .insert(real.owner().as_str().to_owned(), real);
    }

    fn real_guard(&self, guard: &LeaseGuard) -> Result<LeaseGuard> {
        self.real
            .lock()
            .expect("never poisoned")
            .get(guard.owner().as_str())
            .cloned()
            .ok_or_else(|| guard.lost())
    }
}

#[async_trait]
impl Lease for SubstitutedLease {
    async fn try_acquire(&self, resource: &ResourceName, ttl: Ttl) -> Result<Option<LeaseGuard>> {
        let requested_at = Instant::now();
        let Some(real) = self.inner.try_acquire(resource, ttl).await? else {
            return Ok(None);
        };
        let owner = real.owner().clone();
        let source = real.token_source().clone();
        let issued = real.token();
        self.keep(real);
        let (token, ttl) = match self.substitute {
            Substitute::OneToken => (FencingToken::MIN, Ttl::MAX),
            Substitute::ReissuedToken => (reissued(issued), ttl),
        };
        Ok(Some(LeaseGuard::new(
            resource.clone(),
            owner,
            token,
            ttl,
            requested_at,
            source,
        )))
    }

    /// Extends the real lease. With one token, by its own TTL, a refusal or failure not
    /// reported; a reissued token's holder learns of both, as a real one does.
    async fn extend(&self, guard: &mut LeaseGuard, ttl: Ttl) -> Result<()> {
        let requested_at = Instant::now();
        let real = self.real_guard(guard);
        if self.substitute == Substitute::OneToken {
            let Ok(mut real) = real else {
                return Ok(());
            };
            let ttl = real.ttl();
            if self.inner.extend(&mut real, ttl).await.is_ok() {
                self.keep(real);
            }
            guard.extended(Ttl::MAX, requested_at);
            return Ok(());
        }
        let mut real = real?;
        self.inner.extend(&mut real, ttl).await?;
        self.keep(real);
        guard.extended(ttl, requested_at);
        Ok(())
    }

    async fn release(&self, guard: LeaseGuard) -> Result<()> {
        let real = self.real_guard(&guard)?;
        self.real
            .lock()
            .expect("never poisoned")
            .remove(guard.owner().as_str());
        self.inner.release(real).await
    }

    async fn status(&self, resource: &ResourceName) -> Result<Option<LeaseStatus>> {
        self.inner.status(resource).await
    }

    fn token_source(&self) -> std::sync::Arc<dyn TokenSource> {
        self.inner.token_source()
    }
}

/// The token a reissuing lease hands out for `issued`: the one below it, when it is even.
fn reissued(issued: FencingToken) -> FencingToken {
    match issued.get() % 2 {
        0 => FencingToken::new(issued.get() - 1).expect("an even token is above 1"),
        _ => issued,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencing_core::MemoryLease;

    #[tokio::test]
    async fn every_acquisition_carries_token_one_and_the_real_lease_still_excludes() {
        let lease = SubstitutedLease::one_token(Arc::new(MemoryLease::new()));
        let resource = ResourceName::new("settle:m_4471").unwrap();
        let ttl = Ttl::from_secs(30).unwrap();
        let mut first = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
        assert_eq!(first.token(), FencingToken::MIN);
        assert!(lease.try_acquire(&resource, ttl).await.unwrap().is_none());
        lease.extend(&mut first, ttl).await.unwrap();
        lease.release(first).await.unwrap();
        let second = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
        assert_eq!(second.token(), FencingToken::MIN);
    }

    #[tokio::test]
    async fn its_holders_never_learn_that_their_lease_ended() {
        let lease = SubstitutedLease::one_token(Arc::new(MemoryLease::new()));
        let resource = ResourceName::new("settle:m_4471").unwrap();
        let ttl = Ttl::from_millis(50).unwrap();
        let mut guard = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(!guard.has_ended_locally());
        let _newer = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
        lease.extend(&mut guard, ttl).await.unwrap();
        assert!(!guard.has_ended_locally());
    }

    #[tokio::test]
    async fn every_even_token_is_handed_out_as_the_one_before_and_extensions_are_real() {
        let lease = SubstitutedLease::reissuing(Arc::new(MemoryLease::new()));
        let resource = ResourceName::new("settle:m_4471").unwrap();
        let ttl = Ttl::from_millis(200).unwrap();
        let mut handed = Vec::new();
        for _ in 0..4 {
            let mut guard = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
            assert_eq!(guard.ttl(), ttl);
            lease.extend(&mut guard, ttl).await.unwrap();
            handed.push(guard.token().get());
            lease.release(guard).await.unwrap();
        }
        assert_eq!(handed, [1, 1, 3, 3]);
        let mut lost = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let _newer = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
        assert!(lease.extend(&mut lost, ttl).await.is_err());
    }
}
