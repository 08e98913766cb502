//! Leases: liveness for a resource, and the fencing token that makes them safe.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::Result;
use crate::guard::LeaseGuard;
use crate::name::ResourceName;
use crate::token_source::TokenSource;
use crate::ttl::Ttl;

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
