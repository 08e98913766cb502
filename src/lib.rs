#![doc = include_str!("../README.md")]
//!
//! This facade re-exports [`fencing_core`]; each store adapter joins it behind its feature, as
//! a module named after the store ([`postgres`], [`redis`], [`dynamodb`], [`s3`]) and, by its
//! types, in the [`prelude`].

pub use fencing_core::*;

/// Everything a job needs, without the adapter modules: `use fencing::prelude::*;` leaves the
/// names `redis`, `postgres`, `dynamodb` and `s3` to the crates (and modules) of your own, so
/// `redis::Client` still means the `redis` crate. `use fencing::*` brings the modules too.
pub mod prelude {
    pub use fencing_core::*;

    #[cfg(feature = "postgres")]
    pub use fencing_postgres::{
        ColumnValue, KeyType, ManyWritten, PgFenceFloor, PgLease, PgStore, PgTable, PgTokenSource,
        PgWrite,
    };

    #[cfg(feature = "redis")]
    pub use fencing_redis::{RedisKeys, RedisLease, RedisTokenSource};

    #[cfg(feature = "dynamodb")]
    pub use fencing_dynamodb::{
        DynamoFenceFloor, DynamoLease, DynamoStore, DynamoTable, DynamoTokenSource,
    };

    #[cfg(feature = "s3")]
    pub use fencing_s3::{S3Bucket, S3FenceFloor, S3Store};
}

/// PostgreSQL: fenced tables, batch claims, a durable token source and a database-clock lease.
#[cfg(feature = "postgres")]
pub use fencing_postgres as postgres;

/// Redis: a lease that issues its fencing token in the same round trip, and its token source.
#[cfg(feature = "redis")]
pub use fencing_redis as redis;

/// DynamoDB: fenced item writes by condition expression, fenced transactions, an atomic-counter
/// token source and a lease that issues its token in the same `UpdateItem`.
#[cfg(feature = "dynamodb")]
pub use fencing_dynamodb as dynamodb;

/// S3: fenced object writes by conditional `PUT`, the fence inside the object.
#[cfg(feature = "s3")]
pub use fencing_s3 as s3;
