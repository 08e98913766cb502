//! Fenced puts against unconditional puts through the same `object_store` client on the same
//! server, in the same run: Azure Blob Storage on Azurite, then S3 (ETag matching) on moto.
//!
//! ```text
//! cargo bench -p fencing-object-store --bench object_store
//! ```
//!
//! The variants alternate object by object (each object is put by every variant in turn, in
//! rotating order, every round), so the emulator's drift falls on all of them alike; the
//! medians of the rounds are reported with their ratio to the unconditional put, and the
//! ratios paired round by round with their quartiles. Emulator times are not the services':
//! only the ratios mean anything. Nothing here asserts a time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencing_core::adapter::StoreWrites;
use fencing_core::{FencedWrite, FencingToken, RecordKey};
use fencing_object_store::ObjectStoreStore;
use fencing_test_support::{bench, object_stores};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

const OBJECTS: usize = 100;
const ROUNDS: usize = 21;
const PAYLOAD: &[u8] = b"refund r_815: 70.25 EUR to card ending 4471";

const UNCONDITIONAL: &str = "unconditional put (PutMode::Overwrite)";
const WARM: &str = "fenced put, the holder's own version remembered";
const COLD: &str = "fenced put, cold (get + conditional put)";

#[tokio::main(flavor = "current_thread")]
async fn main() {
    for (backend, name) in [
        (
            object_stores::azurite_container(),
            "Azure Blob Storage on Azurite",
        ),
        (
            object_stores::s3_bucket().await,
            "S3 (ETag matching) on moto",
        ),
    ] {
        println!("{name}: {OBJECTS} objects, {ROUNDS} rounds, median per round\n");
        let bench = Bench {
            warm: ObjectStoreStore::new(backend.clone(), Path::from("receipts")),
            backend,
            keys: bench::record_keys(OBJECTS),
        };
        let rounds = bench::compare_per_item(
            &[UNCONDITIONAL, WARM, COLD],
            ROUNDS,
            OBJECTS,
            async |variant, round, object| {
                let token = FencingToken::new(round as u64 + 1).unwrap();
                bench.put(variant, token, &bench.keys[object]).await
            },
        )
        .await;
        bench::report(&bench::medians(&rounds), OBJECTS, "put");
        println!();
        bench::report_paired_ratios(&rounds);
        println!();
    }
}

struct Bench {
    backend: Arc<dyn ObjectStore>,
    /// One holder's store: it remembers the version each of its own puts returned.
    warm: ObjectStoreStore,
    keys: Vec<RecordKey>,
}

impl Bench {
    /// Puts object `k` as `variant` does and returns the time of that put alone.
    async fn put(&self, variant: &str, token: FencingToken, k: &RecordKey) -> Duration {
        let write = FencedWrite::claim().set_payload(PAYLOAD.to_vec());
        match variant {
            UNCONDITIONAL => {
                let location = Path::from(format!("raw/{k}"));
                let start = Instant::now();
                self.backend
                    .put(&location, PutPayload::from_static(PAYLOAD))
                    .await
                    .unwrap();
                start.elapsed()
            }
            WARM => {
                let start = Instant::now();
                self.warm.write(k, token, &write).await.unwrap();
                start.elapsed()
            }
            COLD => {
                // A store that has seen nothing: the put reads first. Its probe of the
                // backend's conditional updates runs before the clock starts.
                let cold = ObjectStoreStore::new(self.backend.clone(), Path::from("cold"));
                let probe = RecordKey::new(format!("probe-{k}-{token}")).unwrap();
                cold.write(&probe, token, &write).await.unwrap();
                let start = Instant::now();
                cold.write(k, token, &write).await.unwrap();
                start.elapsed()
            }
            other => unreachable!("no variant {other}"),
        }
    }
}
