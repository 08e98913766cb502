//! Leases: liveness for a resource, and the fencing token that makes them safe.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::contract::guard::LeaseGuard;
use crate::contract::token_source::TokenSource;
use crate::value::error::Result;
use crate::value::name::ResourceName;
use crate::value::token::FencingToken;
use crate::value::ttl::Ttl;

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
///   lease, and otherwise return [`crate::Error::LeaseLost`] and change nothing.
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

    /// Who holds `resource` now, as the lease's store says: `None` when nobody does (never
    /// held, released, or expired). For operators and tools; never a safety check (the
    /// answer can be stale the moment it arrives; the fence is what is safe).
    async fn status(&self, resource: &ResourceName) -> Result<Option<LeaseStatus>>;

    /// The counter this lease draws its tokens from, for regression checks and seeding: a
    /// handle that shares the lease's counter (a [`crate::Holder`] keeps one).
    fn token_source(&self) -> Arc<dyn TokenSource>;
}

/// A live lease as its store reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseStatus {
    /// The holder's owner id.
    pub owner: String,
    /// The holder's token, where the store keeps it with the lease; otherwise the highest
    /// token issued for the resource (the Redis lease), which is the holder's unless a counter
    /// was raised since.
    pub token: Option<FencingToken>,
    /// How long until the lease expires, by the store's clock where it judges expiry.
    pub time_left: Duration,
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
            async fn status(&self, resource: &ResourceName) -> Result<Option<LeaseStatus>> {
                (**self).status(resource).await
            }
            fn token_source(&self) -> Arc<dyn TokenSource> {
                (**self).token_source()
            }
        }
    )*};
}
forward_lease!(Arc, Box);
