//! Optional lease renewal: keeps a long batch's lease alive, and says when it failed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::contract::guard::LeaseGuard;
use crate::contract::lease::Lease;
use crate::telemetry;
use crate::value::clock::{Clock, TokioClock};
use crate::value::error::Error;

/// A background task that extends a lease every `every`, by the guard's TTL, until an
/// extension is refused ([`Error::LeaseLost`]) or no extension has succeeded in time; then it
/// stops and marks the lease lost, so the batch can stop early: every clone of the guard
/// (the batch's among them) then says [`LeaseGuard::has_ended_locally`], and the pipeline and
/// [`crate::Holder::run_effect`] start no new side effect. Each extension moves the deadline of
/// every clone too.
///
/// An extension that fails for another reason (the server unreachable for a moment, an
/// answer lost, a consensus cluster electing a new leader) is tried again at the next beat,
/// as long as that beat comes before the guard's local deadline: the lease may still be
/// alive, and a renewal that gave up at the first hiccup would let it expire for nothing.
///
/// Renewal is liveness, not safety. A process that pauses cannot renew, and when it resumes
/// it does not know that time passed: its lease may have expired and been granted to another
/// holder, with a higher token, between two renewals. Only the fence refuses that holder's
/// writes. Check [`LeaseRenewal::is_lost`] to stop wasting work; never to decide that a write
/// is safe.
#[derive(Debug)]
pub struct LeaseRenewal {
    lost: Arc<AtomicBool>,
    guard: Arc<Mutex<LeaseGuard>>,
    task: JoinHandle<()>,
}

impl LeaseRenewal {
    /// Starts renewing `guard` on `lease` every `every` (a third of the TTL is usual). Must be
    /// called inside a tokio runtime.
    pub fn start(lease: Arc<dyn Lease>, guard: LeaseGuard, every: Duration) -> Self {
        let lost = Arc::new(AtomicBool::new(false));
        let guard = Arc::new(Mutex::new(guard));
        let task = tokio::spawn({
            let (lost, guard) = (lost.clone(), guard.clone());
            async move {
                loop {
                    tokio::time::sleep(every).await;
                    let mut renewed = lock(&guard).clone();
                    let ttl = renewed.ttl();
                    let extended = lease.extend(&mut renewed, ttl).await;
                    telemetry::renewal(
                        renewed.resource(),
                        renewed.token(),
                        extended.as_ref().map(drop),
                    );
                    match extended {
                        Ok(()) => *lock(&guard) = renewed,
                        Err(Error::LeaseLost { .. }) => break,
                        Err(_) if beats_before_deadline(every, &renewed) => {}
                        Err(_) => break,
                    }
                }
                lost.store(true, Ordering::SeqCst);
                lock(&guard).renewal_failed();
            }
        });
        LeaseRenewal { lost, guard, task }
    }

    /// True once an extension was refused, or failed with no time left to try again: the
    /// lease is (or may be) gone.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// The guard as last extended (its local deadline moves with each renewal).
    pub fn guard(&self) -> LeaseGuard {
        lock(&self.guard).clone()
    }

    /// Stops renewing and returns the guard as last extended, e.g. to release it.
    pub fn stop(self) -> LeaseGuard {
        self.task.abort();
        self.guard()
    }
}

impl Drop for LeaseRenewal {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether the next beat, `every` from now, comes before `guard`'s local deadline.
fn beats_before_deadline(every: Duration, guard: &LeaseGuard) -> bool {
    TokioClock
        .now()
        .checked_add(every)
        .is_some_and(|beat| beat < guard.local_deadline())
}

fn lock(guard: &Mutex<LeaseGuard>) -> std::sync::MutexGuard<'_, LeaseGuard> {
    guard.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryLease;
    use crate::value::name::ResourceName;
    use crate::value::ttl::Ttl;

    #[tokio::test(start_paused = true)]
    async fn renewal_keeps_the_lease_past_many_ttls_and_ends_when_stopped() {
        let lease = Arc::new(MemoryLease::new());
        let r = ResourceName::new("settle:m_4471").unwrap();
        let ttl = Ttl::from_secs(30).unwrap();
        let guard = lease.try_acquire(&r, ttl).await.unwrap().unwrap();
        let first_deadline = guard.local_deadline();
        let renewal = LeaseRenewal::start(lease.clone(), guard, ttl.duration() / 3);
        tokio::time::sleep(ttl.duration() * 5).await;
        assert!(lease.try_acquire(&r, ttl).await.unwrap().is_none());
        assert!(!renewal.is_lost());
        assert!(renewal.guard().local_deadline() > first_deadline);
        let guard = renewal.stop();
        tokio::time::sleep(ttl.duration() * 2).await;
        assert!(lease.try_acquire(&r, ttl).await.unwrap().is_some());
        assert!(lease.release(guard).await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_dropped_stops_renewing() {
        let lease = Arc::new(MemoryLease::new());
        let r = ResourceName::new("settle:m_4471").unwrap();
        let ttl = Ttl::from_secs(30).unwrap();
        let guard = lease.try_acquire(&r, ttl).await.unwrap().unwrap();
        drop(LeaseRenewal::start(
            lease.clone(),
            guard,
            ttl.duration() / 3,
        ));
        tokio::time::sleep(ttl.duration() * 2).await;
        assert!(
            lease.try_acquire(&r, ttl).await.unwrap().is_some(),
            "nothing renews a dropped renewal's lease"
        );
    }

    /// A lease whose extensions fail (the server unreachable) the first `failures` times.
    #[derive(Debug)]
    struct Unreachable {
        inner: MemoryLease,
        failures: std::sync::atomic::AtomicU32,
    }

    #[async_trait::async_trait]
    impl Lease for Unreachable {
        async fn try_acquire(
            &self,
            resource: &ResourceName,
            ttl: Ttl,
        ) -> crate::Result<Option<LeaseGuard>> {
            self.inner.try_acquire(resource, ttl).await
        }
        async fn extend(&self, guard: &mut LeaseGuard, ttl: Ttl) -> crate::Result<()> {
            let left = self.failures.load(Ordering::SeqCst);
            if left > 0 {
                self.failures.store(left - 1, Ordering::SeqCst);
                return Err(Error::Unavailable {
                    store: "lease".into(),
                    source: "connection refused".into(),
                });
            }
            self.inner.extend(guard, ttl).await
        }
        async fn release(&self, guard: LeaseGuard) -> crate::Result<()> {
            self.inner.release(guard).await
        }
        async fn status(
            &self,
            resource: &ResourceName,
        ) -> crate::Result<Option<crate::contract::lease::LeaseStatus>> {
            self.inner.status(resource).await
        }
        fn token_source(&self) -> std::sync::Arc<dyn crate::contract::token_source::TokenSource> {
            Lease::token_source(&self.inner)
        }
    }

    fn unreachable(failures: u32) -> Arc<Unreachable> {
        Arc::new(Unreachable {
            inner: MemoryLease::new(),
            failures: std::sync::atomic::AtomicU32::new(failures),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_request_is_tried_again_while_the_lease_can_still_be_alive() {
        let lease = unreachable(1);
        let r = ResourceName::new("settle:m_4471").unwrap();
        let ttl = Ttl::from_secs(30).unwrap();
        let guard = lease.try_acquire(&r, ttl).await.unwrap().unwrap();
        let renewal = LeaseRenewal::start(lease.clone(), guard, ttl.duration() / 3);
        tokio::time::sleep(ttl.duration() * 3).await;
        assert!(!renewal.is_lost(), "one failed request is not a lost lease");
        assert!(lease.try_acquire(&r, ttl).await.unwrap().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn failed_requests_mark_the_lease_lost_before_its_local_deadline() {
        let lease = unreachable(u32::MAX);
        let r = ResourceName::new("settle:m_4471").unwrap();
        let ttl = Ttl::from_secs(30).unwrap();
        let guard = lease.try_acquire(&r, ttl).await.unwrap().unwrap();
        let deadline = guard.local_deadline();
        let renewal = LeaseRenewal::start(lease.clone(), guard, ttl.duration() / 3);
        tokio::time::sleep(Duration::from_secs(15)).await;
        assert!(
            !renewal.is_lost(),
            "the first failure leaves time to try again"
        );
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert!(renewal.is_lost());
        assert!(
            TokioClock.now() < deadline,
            "said before the lease could have expired"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_extension_marks_the_lease_lost_and_stops() {
        let lease = Arc::new(MemoryLease::new());
        let r = ResourceName::new("settle:m_4471").unwrap();
        let ttl = Ttl::from_secs(30).unwrap();
        let stale = lease.try_acquire(&r, ttl).await.unwrap().unwrap();
        tokio::time::sleep(ttl.duration() * 2).await;
        let holder = lease.try_acquire(&r, ttl).await.unwrap().unwrap();
        let renewal = LeaseRenewal::start(lease.clone(), stale, Duration::from_secs(10));
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert!(renewal.is_lost());
        tokio::time::sleep(Duration::from_secs(10)).await;
        lease
            .release(holder)
            .await
            .expect("the new holder's lease is untouched");
    }
}
