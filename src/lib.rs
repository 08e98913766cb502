#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
//!
//! This facade re-exports the job-facing names of [`fencing_core`]; each store adapter joins it behind its feature, as
//! a module named after the store ([`postgres`], [`redis`], [`dynamodb`], [`s3`], [`etcd`],
//! [`object_store`]) and, by its types, in the [`prelude`].
//!
//! The default Redis lease takes its epochs from an [`EpochSource`], a type of its own: a
//! counter of tokens (which opens no epoch once per loss, and counts up to 2^20 a second) is
//! refused when the program is compiled, not when a resource runs out of epochs.
//!
#![cfg_attr(
    all(feature = "postgres", feature = "redis"),
    doc = r#"
```
use std::sync::Arc;
use fencing::postgres::PgEpochSource;
use fencing::redis::{RedisLease, RedisSentinelConnection};

fn lease(conn: RedisSentinelConnection, epochs: PgEpochSource) -> RedisLease<RedisSentinelConnection> {
    RedisLease::new(conn, Arc::new(epochs))
}
```

```compile_fail,E0277
use std::sync::Arc;
use fencing::postgres::PgTokenSource;
use fencing::redis::{RedisLease, RedisSentinelConnection};

// A counter of tokens where the epochs go: error[E0277], `PgTokenSource: EpochSource` is not
// satisfied.
fn lease(conn: RedisSentinelConnection, counters: PgTokenSource) -> RedisLease<RedisSentinelConnection> {
    RedisLease::new(conn, Arc::new(counters))
}
```
"#
)]
//!
//! A job reaches a store through a holder, never with a bare token: the writes a store applies
//! under a token are the adapter's (`fencing_core::adapter::StoreWrites`), and so is a holder
//! of a token no lease handed out (`fencing_core::adapter::HolderExt::new`). With the prelude
//! alone, both are refused when the program is compiled:
//!
//! ```
//! use fencing::prelude::*;
//!
//! async fn claim(guard: &LeaseGuard, store: &MemoryStore, key: &RecordKey) -> fencing::Result<()> {
//!     guard.holder().write(store, key, &fencing::FencedWrite::claim()).await?;
//!     Ok(())
//! }
//! ```
//!
//! ```compile_fail,E0599
//! use fencing::prelude::*;
//!
//! // error[E0599]: `write` is `StoreWrites`'s, an adapter's trait the prelude does not bring.
//! async fn claim(token: FencingToken, store: &MemoryStore, key: &RecordKey) -> fencing::Result<()> {
//!     store.write(key, token, &fencing::FencedWrite::claim()).await?;
//!     Ok(())
//! }
//! ```
//!
//! ```compile_fail,E0599
//! use fencing::prelude::*;
//!
//! // error[E0599]: `Holder::new` is `HolderExt`'s, on the adapter surface.
//! fn holder(r: &ResourceName, token: FencingToken, source: &fencing::MemoryTokenSource) -> Holder {
//!     Holder::new(r, token, source)
//! }
//! ```
//!
//! The prelude shadows nothing of the standard library's: after `use fencing::prelude::*;`,
//! `Result` is still `std::result::Result`, so a `Result` with one argument does not compile
//! (write `fencing::Result<T>`, or import it by name):
//!
//! ```compile_fail,E0107
//! use fencing::prelude::*;
//!
//! // error[E0107]: `std::result::Result` takes two generic arguments.
//! fn key(text: &str) -> Result<RecordKey> {
//!     Ok(RecordKey::new(text)?)
//! }
//! ```
//!
//! ```
//! use fencing::prelude::*;
//!
//! fn key(text: &str) -> Result<RecordKey, fencing::Error> {
//!     Ok(RecordKey::new(text)?)
//! }
//! ```

/// The core's job-facing names, each listed: what an adapter author needs besides is in
/// `fencing_core::adapter`, which this crate does not re-export.
pub use fencing_core::{
    BatchScope, BoxError, CounterHistory, EffectOutcome, EffectStart, EpochSource, Error, Failure,
    FenceCheck, FenceFloor, FencedBatch, FencedStore, FencedWrite, FencingToken, Finished,
    FoundFence, Holder, InputKind, InvalidInput, Lease, LeaseGuard, LeaseRenewal, LeaseStatus,
    Lifecycle, MemoryEpochSource, MemoryLease, MemoryStore, MemoryTokenSource, Mismatch,
    MismatchPolicy, NoAnswer, OwnerId, Pipeline, RateBound, Record, RecordKey, RecordWrites,
    ResourceName, Result, RetryPolicy, Settled, SideEffect, SkippedRecord, State, TokenSource, Ttl,
    WriteWith, Written, acquire, async_trait, seed_from_floors,
};

mod since_0_1;

/// The handle a holder writes with, as 0.1 named it.
#[doc(hidden)]
#[allow(deprecated)]
pub use since_0_1::Fence;

/// What a job names: `use fencing::prelude::*;` brings the traits a job calls or implements
/// (the lease, the store, the side effect, the token source, a pipeline's writes), the handful of core names a job writes down (the
/// guard and its holder, the batch, the names and tokens, the in-memory lease and store), and
/// the stores and leases of the enabled adapters. Nothing in it shadows a name of the standard
/// library's prelude: the error and result types are `fencing::Error` and `fencing::Result`.
/// Everything else is at the crate root (`fencing::RetryPolicy`, `fencing::seed_from_floors`,
/// …). It leaves the names `redis`, `postgres`, `mysql`, `dynamodb`, `s3`, `etcd` and `object_store`
/// to the crates (and modules) of your own, so `redis::Client` still means the `redis` crate.
/// What an adapter author needs is in `fencing_core::adapter`.
pub mod prelude {
    pub use fencing_core::{
        BoxError, EffectOutcome, FencedBatch, FencedStore, FencingToken, Finished, Holder, Lease,
        LeaseGuard, Lifecycle, MemoryLease, MemoryStore, Record, RecordKey, RecordWrites,
        ResourceName, SideEffect, TokenSource, Ttl, async_trait,
    };

    // 0.1's prelude names that moved: deprecated one release, each naming its new path.
    #[doc(hidden)]
    #[allow(deprecated)]
    pub use crate::since_0_1::*;

    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub use fencing_postgres::{
        PgEpochSource, PgFenceFloor, PgKeyType, PgLease, PgQualifiedName, PgStore, PgTable,
        PgTokenSource, PgWrite, PgWrittenTogether,
    };

    #[cfg(feature = "mysql")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
    pub use fencing_mysql::{
        MySqlEpochSource, MySqlFenceFloor, MySqlLease, MySqlQualifiedName, MySqlStore, MySqlTable,
        MySqlTokenSource, MySqlWrite,
    };

    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub use fencing_redis::{RedisKeys, RedisLease, RedisTokenSource};

    #[cfg(feature = "dynamodb")]
    #[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
    pub use fencing_dynamodb::{
        DynamoFenceFloor, DynamoKeyType, DynamoLease, DynamoStore, DynamoTable, DynamoTokenSource,
        DynamoWrite,
    };

    #[cfg(feature = "s3")]
    #[cfg_attr(docsrs, doc(cfg(feature = "s3")))]
    pub use fencing_s3::{S3Bucket, S3FenceFloor, S3Store};

    #[cfg(any(feature = "s3", feature = "object-store"))]
    #[cfg_attr(docsrs, doc(cfg(any(feature = "s3", feature = "object-store"))))]
    pub use fencing_core::adapter::JsonCodec;

    #[cfg(feature = "etcd")]
    #[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
    pub use fencing_etcd::{EtcdKeys, EtcdLease, EtcdTokenSource};

    #[cfg(feature = "object-store")]
    #[cfg_attr(docsrs, doc(cfg(feature = "object-store")))]
    pub use fencing_object_store::ObjectStoreStore;
}

/// PostgreSQL: fenced tables, batch claims, a durable token source and a database-clock lease.
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use fencing_postgres as postgres;

/// MySQL and MariaDB: fenced tables, a durable token source bound to the server's history and
/// a database-clock lease.
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub use fencing_mysql as mysql;

/// Redis: a lease that issues its fencing token in the same round trip, and its token source.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use fencing_redis as redis;

/// DynamoDB: fenced item writes by condition expression, fenced transactions, an atomic-counter
/// token source and a lease that issues its token in the same `UpdateItem`.
#[cfg(feature = "dynamodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
pub use fencing_dynamodb as dynamodb;

/// S3: fenced object writes by conditional `PUT`, the fence inside the object.
#[cfg(feature = "s3")]
#[cfg_attr(docsrs, doc(cfg(feature = "s3")))]
pub use fencing_s3 as s3;

/// etcd: a lease and a token source on a consensus cluster, their tokens from etcd's
/// revision.
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub use fencing_etcd as etcd;

/// `object_store`: fenced writes on any backend whose conditional put supports
/// `PutMode::Update` (in memory, S3, Azure Blob Storage, Google Cloud Storage).
#[cfg(feature = "object-store")]
#[cfg_attr(docsrs, doc(cfg(feature = "object-store")))]
pub use fencing_object_store as object_store;
