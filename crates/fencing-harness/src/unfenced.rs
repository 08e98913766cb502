//! The control: a lease whose every acquisition presents the same token, so the stores'
//! fences admit every write. Mutual exclusion is then only the lease's TTL, and the audit must
//! find what that lets through. Never a thing to deploy.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use fencing_core::adapter::LeaseGuardExt;
use fencing_core::{
    FencingToken, Lease, LeaseGuard, LeaseStatus, ResourceName, Result, TokenSource, Ttl,
};

/// Wraps a real lease: acquisition, extension and release go to it, but the guards it hands
/// out carry token 1, and their holders never learn by themselves that the lease ended (the
/// local deadline a day away, extensions that never fail), as a job that takes a lease and
/// nothing more: the library's own deadline checks would otherwise stop a woken holder before
/// the audit could see what a lease alone lets through.
#[derive(Debug)]
pub struct OneTokenLease {
    inner: Arc<dyn Lease>,
    /// The real guard of every live acquisition, by owner id.
    real: Mutex<HashMap<String, LeaseGuard>>,
}

impl OneTokenLease {
    /// `inner`, its tokens replaced by one.
    pub fn new(inner: Arc<dyn Lease>) -> Self {
        OneTokenLease {
            inner,
            real: Mutex::new(HashMap::new()),
        }
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
impl Lease for OneTokenLease {
    async fn try_acquire(&self, resource: &ResourceName, ttl: Ttl) -> Result<Option<LeaseGuard>> {
        let requested_at = Instant::now();
        let Some(real) = self.inner.try_acquire(resource, ttl).await? else {
            return Ok(None);
        };
        let owner = real.owner().clone();
        let source = real.token_source().clone();
        self.real
            .lock()
            .expect("never poisoned")
            .insert(owner.as_str().to_owned(), real);
        Ok(Some(LeaseGuard::new(
            resource.clone(),
            owner,
            FencingToken::MIN,
            Ttl::MAX,
            requested_at,
            source,
        )))
    }

    /// Extends the real lease by its own TTL; a refusal or failure is not reported.
    async fn extend(&self, guard: &mut LeaseGuard, _: Ttl) -> Result<()> {
        let requested_at = Instant::now();
        let Ok(mut real) = self.real_guard(guard) else {
            return Ok(());
        };
        let ttl = real.ttl();
        if self.inner.extend(&mut real, ttl).await.is_ok() {
            self.real
                .lock()
                .expect("never poisoned")
                .insert(guard.owner().as_str().to_owned(), real);
        }
        guard.extended(Ttl::MAX, requested_at);
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

    fn token_source(&self) -> &dyn TokenSource {
        self.inner.token_source()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencing_core::MemoryLease;

    #[tokio::test]
    async fn every_acquisition_carries_token_one_and_the_real_lease_still_excludes() {
        let lease = OneTokenLease::new(Arc::new(MemoryLease::new()));
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
        let lease = OneTokenLease::new(Arc::new(MemoryLease::new()));
        let resource = ResourceName::new("settle:m_4471").unwrap();
        let ttl = Ttl::from_millis(50).unwrap();
        let mut guard = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(!guard.has_ended_locally());
        let _newer = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
        lease.extend(&mut guard, ttl).await.unwrap();
        assert!(!guard.has_ended_locally());
    }
}
