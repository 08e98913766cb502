//! A store cut off by the network: a relay in front of the real PostgreSQL holds every packet
//! both ways and refuses nothing, as a partition does while TCP keeps resending. A fenced write
//! then gets no answer at all; with a request timeout the holder drops the attempt, its outcome
//! unknown, and settles it as any lost answer: sent again with the same token, a refused retry
//! read back and recognised. Without a timeout the driver would wait for minutes.

mod common;

use std::time::Duration;

use common::Schema;
use fencing_core::adapter::{HolderExt, StoreWrites};
use fencing_core::{
    Error, FencedStore, FencedWrite, FencingToken, Holder, Lifecycle, MemoryTokenSource, NoAnswer,
    ResourceName,
};
use fencing_postgres::PgStore;
use fencing_simulation::settlement::refund_key;
use fencing_test_support::relay::Relay;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

const TIMEOUT: Duration = Duration::from_millis(500);

fn server() -> PgConnectOptions {
    fencing_test_support::services::postgres_url()
        .parse()
        .unwrap()
}

/// A relay in front of the test server, on a loopback port of its own.
fn relay() -> Relay {
    Relay::start(server().get_port()).unwrap()
}

/// The schema's store, reached through `relay`, with one connection already open across it.
async fn store_behind(schema: &Schema, relay: &Relay) -> PgStore {
    let options = server();
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .test_before_acquire(false)
        .connect_with(options.host("127.0.0.1").port(relay.port()))
        .await
        .unwrap();
    let store = PgStore::new(pool, schema.table.clone());
    assert!(store.read(&refund_key(815)).await.is_ok());
    store
}

/// A test's world: `r_815` pending under the first token (written on the schema's own pool),
/// the store behind a relay not partitioned yet, and a source that has issued up to 34.
struct CutOff {
    schema: Schema,
    relay: Relay,
    store: PgStore,
    source: MemoryTokenSource,
    resource: ResourceName,
}

impl CutOff {
    async fn new() -> Self {
        let schema = Schema::new().await;
        let create = FencedWrite::claim().set_state(Lifecycle::default().pending().clone());
        schema
            .store()
            .write(&refund_key(815), FencingToken::MIN, &create)
            .await
            .unwrap();
        let relay = relay();
        let store = store_behind(&schema, &relay).await;
        let (source, resource) = fencing_testkit::issued_up_to(34).await;
        CutOff {
            schema,
            relay,
            store,
            source,
            resource,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_write_is_given_up_at_the_timeout_with_its_outcome_unknown() {
    let CutOff {
        schema,
        relay,
        store,
        source,
        resource,
    } = CutOff::new().await;
    let token = FencingToken::new(34).unwrap();
    let holder = Holder::new(&resource, token, &source)
        .with_request_timeout(TIMEOUT)
        .with_ambiguous_retries(0);
    let lifecycle = Lifecycle::default();

    relay.partition();
    let started = std::time::Instant::now();
    let err = holder
        .write(&store, &refund_key(815), &lifecycle.claim())
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert!(
        matches!(&err, Error::Ambiguous { source, .. } if source.downcast_ref::<NoAnswer>().is_some()),
        "no answer, no refusal: the outcome is unknown ({err:?})"
    );
    assert!(waited >= TIMEOUT && waited < 10 * TIMEOUT, "{waited:?}");
    // Held by the relay, the claim has not reached the server.
    let seen = schema
        .store()
        .read(&refund_key(815))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen.fence, Some(FencingToken::MIN));

    // Healed, the holder settles it with the same token: accepted, or recognised as its own.
    relay.heal();
    let settled = holder.with_ambiguous_retries(2);
    let written = settled
        .write(&store, &refund_key(815), &lifecycle.claim())
        .await
        .unwrap();
    assert_eq!(written.record.fence, Some(token));
    assert_eq!(written.record.state.as_ref(), Some(lifecycle.in_flight()));
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_cut_off_is_sent_again_until_the_partition_heals_and_a_stale_one_stays_refused() {
    let CutOff {
        schema,
        relay,
        store,
        source,
        resource,
    } = CutOff::new().await;
    let token = FencingToken::new(34).unwrap();
    // Three attempts of 500 ms each; the partition heals 800 ms in, during the second.
    let holder = Holder::new(&resource, token, &source).with_request_timeout(TIMEOUT);
    let lifecycle = Lifecycle::default();

    relay.partition();
    let heal = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(800)).await;
        relay.heal();
        relay
    });
    let written = holder
        .write(&store, &refund_key(815), &lifecycle.claim())
        .await
        .expect("answered once the partition healed");
    assert_eq!(written.record.fence, Some(token));
    let _relay = heal.await.unwrap();

    // Every attempt that reached the server carried token 34: a holder with 33 is refused.
    let stale = Holder::new(&resource, FencingToken::new(33).unwrap(), &source);
    let err = stale
        .write(&schema.store(), &refund_key(815), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Fenced { .. }), "{err:?}");
    holder
        .write(&store, &refund_key(815), &lifecycle.confirm())
        .await
        .unwrap();
    let row = schema
        .store()
        .read(&refund_key(815))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.state.as_ref(), Some(lifecycle.done()));
    schema.drop_schema().await;
}
