use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;

use super::{MemoryTokenSource, lock};
use crate::contract::guard::{LeaseGuard, LeaseGuardExt, OwnerId};
use crate::contract::lease::{Lease, LeaseStatus};
use crate::contract::token_source::TokenSource;
use crate::value::clock::{Clock, TokioClock};
use crate::value::error::Result;
use crate::value::name::ResourceName;
use crate::value::token::FencingToken;
use crate::value::ttl::Ttl;

#[derive(Debug)]
struct Holding {
    owner: OwnerId,
    token: FencingToken,
    expires_at: Instant,
}

/// Leases in memory, judged by a [`Clock`], with tokens from a [`MemoryTokenSource`].
///
/// Acquisition and token happen under one lock, as the Redis script does them in one step;
/// opening a new epoch ([`MemoryTokenSource::with_epochs`]) happens before it, as in Redis.
/// Clones share the same leases.
#[derive(Clone, Debug)]
pub struct MemoryLease {
    clock: Arc<dyn Clock>,
    tokens: Arc<MemoryTokenSource>,
    holders: Arc<Mutex<HashMap<ResourceName, Holding>>>,
}

impl MemoryLease {
    /// Leases on tokio's clock (virtual in a paused runtime) with fresh counters.
    pub fn new() -> Self {
        Self::with_parts(Arc::new(TokioClock), MemoryTokenSource::new())
    }

    /// Leases judged by `clock`, drawing tokens from `tokens`.
    pub fn with_parts(clock: Arc<dyn Clock>, tokens: MemoryTokenSource) -> Self {
        MemoryLease {
            clock,
            tokens: Arc::new(tokens),
            holders: Arc::default(),
        }
    }

    /// The token source the tokens come from, as its own type (with the methods of that
    /// store's source); [`Lease::token_source`] gives the same source as a `&dyn TokenSource`
    /// (and is what a `dyn Lease` or an `Arc` of this lease answers).
    pub fn token_source(&self) -> &MemoryTokenSource {
        &self.tokens
    }

    /// [`Self::token_source`], as 0.1 named it.
    #[deprecated(since = "0.2.0", note = "renamed `MemoryLease::token_source()`")]
    #[doc(hidden)]
    pub fn tokens(&self) -> &MemoryTokenSource {
        self.token_source()
    }
}

fn is_live_owner(holder: &Holding, guard: &LeaseGuard, now: Instant) -> bool {
    holder.owner == *guard.owner() && holder.expires_at > now
}

impl Default for MemoryLease {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Lease for MemoryLease {
    async fn try_acquire(&self, resource: &ResourceName, ttl: Ttl) -> Result<Option<LeaseGuard>> {
        loop {
            let opening = {
                let now = self.clock.now();
                let mut holders = lock(&self.holders);
                if holders.get(resource).is_some_and(|h| h.expires_at > now) {
                    return Ok(None);
                }
                match self.tokens.try_issue(resource)? {
                    Err(opening) => opening,
                    Ok(token) => {
                        let owner = OwnerId::random();
                        holders.insert(
                            resource.clone(),
                            Holding {
                                owner: owner.clone(),
                                token,
                                expires_at: now + ttl.duration(),
                            },
                        );
                        return Ok(Some(LeaseGuard::new(
                            resource.clone(),
                            owner,
                            token,
                            ttl,
                            now,
                            self.tokens.clone(),
                        )));
                    }
                }
            };
            // The counter was lost (or used up its epoch): open one outside the lock, since
            // the durable epoch source is asynchronous, then try again.
            self.tokens.open_epoch(resource, &opening).await?;
        }
    }

    async fn extend(&self, guard: &mut LeaseGuard, ttl: Ttl) -> Result<()> {
        let now = self.clock.now();
        let mut holders = lock(&self.holders);
        match holders.get_mut(guard.resource()) {
            Some(h) if is_live_owner(h, guard, now) => {
                h.expires_at = now + ttl.duration();
                guard.extended(ttl, now);
                Ok(())
            }
            _ => Err(guard.lost()),
        }
    }

    async fn release(&self, guard: LeaseGuard) -> Result<()> {
        let now = self.clock.now();
        let mut holders = lock(&self.holders);
        match holders.get(guard.resource()) {
            Some(h) if is_live_owner(h, &guard, now) => {
                holders.remove(guard.resource());
                Ok(())
            }
            _ => Err(guard.lost()),
        }
    }

    async fn status(&self, resource: &ResourceName) -> Result<Option<LeaseStatus>> {
        let now = self.clock.now();
        Ok(lock(&self.holders)
            .get(resource)
            .filter(|h| h.expires_at > now)
            .map(|h| LeaseStatus {
                owner: h.owner.to_string(),
                token: Some(h.token),
                time_left: h.expires_at - now,
            }))
    }

    fn token_source(&self) -> Arc<dyn TokenSource> {
        self.tokens.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn resource() -> ResourceName {
        ResourceName::new("settle:m_4471").unwrap()
    }

    /// A lease of 30 s is the holder's for 30 s and not an instant longer: at its deadline
    /// exactly, extend and release are refused, the status shows nobody, another owner
    /// acquires it.
    #[tokio::test(start_paused = true)]
    async fn a_lease_ends_at_its_deadline_exactly() {
        let lease = MemoryLease::new();
        let ttl = Ttl::from_secs(30).unwrap();
        let mut guard = lease.try_acquire(&resource(), ttl).await.unwrap().unwrap();
        tokio::time::advance(Duration::from_millis(29_999)).await;
        assert!(lease.status(&resource()).await.unwrap().is_some());
        assert!(lease.try_acquire(&resource(), ttl).await.unwrap().is_none());
        lease.extend(&mut guard, ttl).await.unwrap();
        tokio::time::advance(ttl.duration()).await;
        assert!(lease.extend(&mut guard, ttl).await.is_err());
        assert!(lease.status(&resource()).await.unwrap().is_none());
        assert!(lease.release(guard.clone()).await.is_err());
        let next = lease.try_acquire(&resource(), ttl).await.unwrap();
        assert!(next.is_some_and(|g| g.token() > guard.token()));
    }
}
