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
