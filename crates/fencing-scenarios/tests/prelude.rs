//! `use fencing::prelude::*` brings every type a job needs and leaves the store crates' own
//! names alone.

use fencing::prelude::*;

#[test]
fn the_prelude_leaves_the_redis_crate_its_name() {
    // With `use fencing::*`, `redis` would be the facade's module and this would not resolve.
    let client = redis::Client::open("redis://127.0.0.1:6379/").unwrap();
    let table = PgTable::new("public", "payouts").unwrap();
    let _: fn(redis::aio::MultiplexedConnection, std::sync::Arc<dyn fencing::EpochSource>) -> _ =
        RedisLease::new;
    assert_eq!(table.store_name(), "postgres:public.payouts");
    drop(client);
}

/// A worker written against 0.1's names still compiles: each renamed type is its old name,
/// deprecated (a warning naming the new one, allowed here), and the same type as the new.
#[test]
#[allow(deprecated)]
fn the_names_renamed_in_0_2_still_compile_as_their_new_types() {
    use fencing::object_store::{FencedObjectStore, ObjectStoreStore};
    use fencing::redis::{RedisSentinelConnection, SentinelConnection};

    let in_memory: std::sync::Arc<dyn ::object_store::ObjectStore> =
        std::sync::Arc::new(::object_store::memory::InMemory::new());
    let old: FencedObjectStore = FencedObjectStore::new(in_memory, "receipts".into());
    let _new: ObjectStoreStore = old;
    let _: fn(&[String], &str) -> redis::RedisResult<RedisSentinelConnection> =
        SentinelConnection::to_service;
}
