//! Fenced object writes against unconditional puts on the same S3 endpoint (the emulator the
//! tests use), in the same run.
//!
//! ```text
//! cargo bench -p fencing-s3 --bench s3
//! ```
//!
//! Each round times every variant once, in rotating order, over the same objects; the medians
//! of the rounds are reported with their ratio to the unconditional put. Emulator times are not
//! the service's: only the ratios mean anything. Nothing here asserts a time.

use std::time::Instant;

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use fencing_core::{FencedStore, FencedWrite, FencingToken, RecordKey};
use fencing_s3::{S3Bucket, S3Store};
use fencing_test_support::{aws, bench, services};

const OBJECTS: usize = 100;
const ROUNDS: usize = 7;
const PAYLOAD: &[u8] = b"refund r_815: 70.25 EUR to card ending 4471";

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let endpoint = services::aws_endpoint();
    let client = aws::s3_client_at(&endpoint, aws_sdk_s3::Config::builder());
    let name = fencing_testkit::unique_name("bench");
    client.create_bucket().bucket(&name).send().await.unwrap();
    let bucket = S3Bucket::new(name, "receipts/").unwrap();
    let keys = bench::record_keys(OBJECTS);
    let bench = Bench {
        client: client.clone(),
        warm: S3Store::new(client, bucket.clone()),
        etags: Default::default(),
        bucket,
        keys,
    };

    println!("S3 at {endpoint}, {OBJECTS} objects, {ROUNDS} rounds, median per round\n");
    let results = bench::compare(
        &[
            "unconditional PutObject, raw SDK",
            "conditional PutObject, raw SDK (If-Match its own last ETag)",
            "fenced put, the holder's own ETag remembered",
            "fenced put, cold (GetObject + conditional PutObject)",
        ],
        ROUNDS,
        async |variant, round| {
            let token = FencingToken::new(round as u64 + 1).unwrap();
            let start = Instant::now();
            bench.run(variant, token).await;
            start.elapsed()
        },
    )
    .await;
    bench::report(&results, OBJECTS, "put");
}

struct Bench {
    client: Client,
    /// One holder's store: it remembers the ETag each of its own puts returned.
    warm: S3Store,
    /// The ETag of each raw conditional put, for the next one's `If-Match`.
    etags: std::sync::Mutex<std::collections::HashMap<RecordKey, String>>,
    bucket: S3Bucket,
    keys: Vec<RecordKey>,
}

impl Bench {
    async fn run(&self, variant: &str, token: FencingToken) {
        let write = FencedWrite::claim().set_payload(PAYLOAD.to_vec());
        match variant {
            "unconditional PutObject, raw SDK" => {
                for k in &self.keys {
                    self.client
                        .put_object()
                        .bucket(self.bucket.bucket())
                        .key(format!("raw/{k}"))
                        .body(ByteStream::from(PAYLOAD.to_vec()))
                        .send()
                        .await
                        .unwrap();
                }
            }
            "conditional PutObject, raw SDK (If-Match its own last ETag)" => {
                for k in &self.keys {
                    let last = self.etags.lock().unwrap().get(k).cloned();
                    let put = self
                        .client
                        .put_object()
                        .bucket(self.bucket.bucket())
                        .key(format!("conditional/{k}"))
                        .body(ByteStream::from(PAYLOAD.to_vec()));
                    let put = match last {
                        Some(etag) => put.if_match(etag),
                        None => put.if_none_match("*"),
                    };
                    let etag = put.send().await.unwrap().e_tag().unwrap().to_owned();
                    self.etags.lock().unwrap().insert(k.clone(), etag);
                }
            }
            "fenced put, the holder's own ETag remembered" => {
                for k in &self.keys {
                    self.warm.write(k, token, &write).await.unwrap();
                }
            }
            "fenced put, cold (GetObject + conditional PutObject)" => {
                // A store that has seen nothing: every put reads first.
                let cold = S3Store::new(self.client.clone(), self.bucket.clone());
                for k in &self.keys {
                    let k = RecordKey::new(format!("cold-{k}")).unwrap();
                    cold.write(&k, token, &write).await.unwrap();
                }
            }
            other => unreachable!("no variant {other}"),
        }
    }
}
