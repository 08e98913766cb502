//! For backends that do not serialise concurrent requests (an emulator): the suite's races run
//! one request at a time, so they meet the per-request atomicity a real server gives.

use async_trait::async_trait;
use fencing_core::adapter::StoreWrites;
use fencing_core::{
    FencedStore, FencedWrite, FencingToken, Lease, LeaseGuard, LeaseStatus, Record, RecordKey,
    ResourceName, Result, TokenSource, Ttl, Written,
};
use tokio::sync::Mutex;

/// Wraps a backend so that each of its requests runs alone: concurrent callers still
/// interleave freely between requests, but never inside one.
#[derive(Debug)]
pub struct OneAtATime<T> {
    inner: T,
    turn: Mutex<()>,
}

impl<T> OneAtATime<T> {
    /// `inner`, one request at a time.
    pub fn new(inner: T) -> Self {
        OneAtATime {
            inner,
            turn: Mutex::new(()),
        }
    }
}

#[async_trait]
impl<S: FencedStore> FencedStore for OneAtATime<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn read(&self, key: &RecordKey) -> Result<Option<Record>> {
        let _turn = self.turn.lock().await;
        self.inner.read(key).await
    }
}

#[async_trait]
impl<S: FencedStore> StoreWrites for OneAtATime<S> {
    async fn write(
        &self,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Written> {
        let _turn = self.turn.lock().await;
        self.inner.write(key, token, write).await
    }

    async fn write_many(
        &self,
        keys: &[RecordKey],
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Vec<Result<Written>>> {
        let _turn = self.turn.lock().await;
        self.inner.write_many(keys, token, write).await
    }
}

#[async_trait]
impl<L: Lease> Lease for OneAtATime<L> {
    async fn try_acquire(&self, resource: &ResourceName, ttl: Ttl) -> Result<Option<LeaseGuard>> {
        let _turn = self.turn.lock().await;
        self.inner.try_acquire(resource, ttl).await
    }

    async fn extend(&self, guard: &mut LeaseGuard, ttl: Ttl) -> Result<()> {
        let _turn = self.turn.lock().await;
        self.inner.extend(guard, ttl).await
    }

    async fn release(&self, guard: LeaseGuard) -> Result<()> {
        let _turn = self.turn.lock().await;
        self.inner.release(guard).await
    }

    async fn status(&self, resource: &ResourceName) -> Result<Option<LeaseStatus>> {
        let _turn = self.turn.lock().await;
        self.inner.status(resource).await
    }

    fn token_source(&self) -> std::sync::Arc<dyn TokenSource> {
        self.inner.token_source()
    }
}

#[async_trait]
impl<T: TokenSource> TokenSource for OneAtATime<T> {
    async fn next(&self, resource: &ResourceName) -> Result<FencingToken> {
        let _turn = self.turn.lock().await;
        self.inner.next(resource).await
    }

    async fn current(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        let _turn = self.turn.lock().await;
        self.inner.current(resource).await
    }

    async fn advance_to(
        &self,
        resource: &ResourceName,
        floor: FencingToken,
    ) -> Result<FencingToken> {
        let _turn = self.turn.lock().await;
        self.inner.advance_to(resource, floor).await
    }
}
