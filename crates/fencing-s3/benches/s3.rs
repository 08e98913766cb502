//! Fenced object writes against unconditional puts on the same S3 endpoint (the emulator the
//! tests use), in the same run.
//!
//! ```text
//! cargo bench -p fencing-s3 --bench s3
//! ```
//!
//! The variants alternate object by object (each object is put by every variant in turn, in
//! rotating order, every round), so the emulator's drift falls on all of them alike; the
//! medians of the rounds are reported with their ratio to the unconditional put, and the
//! ratios paired round by round with their quartiles. Emulator times are not the service's:
//! only the ratios mean anything. Nothing here asserts a time.

use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use aws_sdk_s3::operation::put_object::builders::PutObjectFluentBuilder;
use aws_sdk_s3::primitives::ByteStream;
use fencing_core::adapter::{Contents, StoreWrites, WriteId};
use fencing_core::{FencedWrite, FencingToken, Record, RecordKey};
use fencing_s3::{JsonCodec, ObjectCodec, S3Bucket, S3Store};
use fencing_test_support::{aws, bench, services};

const OBJECTS: usize = 100;
const ROUNDS: usize = 21;
const PAYLOAD: &[u8] = b"refund r_815: 70.25 EUR to card ending 4471";
/// The same receipt as the team's own JSON, for the JSON codec's variants.
const JSON_PAYLOAD: &[u8] = br#"{"refund":"r_815","cents":7025,"currency":"EUR","card":"4471"}"#;

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
        warm: S3Store::new(client.clone(), bucket.clone()),
        warm_json: S3Store::new(client, bucket.clone()).with_codec(JsonCodec::new()),
        etags: Default::default(),
        bucket,
        keys,
    };

    println!("S3 at {endpoint}, {OBJECTS} objects, {ROUNDS} rounds, median per round\n");
    let rounds = bench::compare_per_item(
        &[
            "unconditional PutObject, raw SDK",
            "conditional PutObject, raw SDK (If-Match its own last ETag)",
            "fenced put, the holder's own ETag remembered",
            "fenced put, cold (GetObject + conditional PutObject)",
            "conditional PutObject, raw SDK, the JSON codec's body (If-Match its own last ETag)",
            "fenced put, JSON codec, the holder's own ETag remembered",
        ],
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
}

struct Bench {
    client: Client,
    /// One holder's store: it remembers the ETag each of its own puts returned.
    warm: S3Store,
    /// The same, its objects the team's own JSON.
    warm_json: S3Store,
    /// The ETag of each raw conditional put, for the next one's `If-Match`.
    etags: std::sync::Mutex<std::collections::HashMap<RecordKey, String>>,
    bucket: S3Bucket,
    keys: Vec<RecordKey>,
}

impl Bench {
    /// Sends `put` on condition that the object is still what the last put remembered for
    /// `memo` left (or absent), remembers the new ETag, and returns the time of the put.
    async fn put_if_last(&self, memo: RecordKey, put: PutObjectFluentBuilder) -> Duration {
        let last = self.etags.lock().unwrap().get(&memo).cloned();
        let put = match last {
            Some(etag) => put.if_match(etag),
            None => put.if_none_match("*"),
        };
        let start = Instant::now();
        let etag = put.send().await.unwrap().e_tag().unwrap().to_owned();
        let elapsed = start.elapsed();
        self.etags.lock().unwrap().insert(memo, etag);
        elapsed
    }

    /// Puts object `k` as `variant` does and returns the time of that put alone.
    async fn put(&self, variant: &str, token: FencingToken, k: &RecordKey) -> Duration {
        let write = FencedWrite::claim().set_payload(PAYLOAD.to_vec());
        match variant {
            "unconditional PutObject, raw SDK" => {
                let put = self
                    .client
                    .put_object()
                    .bucket(self.bucket.bucket())
                    .key(format!("raw/{k}"))
                    .body(ByteStream::from(PAYLOAD.to_vec()));
                let start = Instant::now();
                put.send().await.unwrap();
                start.elapsed()
            }
            "conditional PutObject, raw SDK (If-Match its own last ETag)" => {
                let put = self
                    .client
                    .put_object()
                    .bucket(self.bucket.bucket())
                    .key(format!("conditional/{k}"))
                    .body(ByteStream::from(PAYLOAD.to_vec()));
                self.put_if_last(k.clone(), put).await
            }
            "fenced put, the holder's own ETag remembered" => {
                let start = Instant::now();
                self.warm.write(k, token, &write).await.unwrap();
                start.elapsed()
            }
            "fenced put, cold (GetObject + conditional PutObject)" => {
                // A store that has seen nothing: the put reads first.
                let cold = S3Store::new(self.client.clone(), self.bucket.clone());
                let k = RecordKey::new(format!("cold-{k}")).unwrap();
                let start = Instant::now();
                cold.write(&k, token, &write).await.unwrap();
                start.elapsed()
            }
            "conditional PutObject, raw SDK, the JSON codec's body (If-Match its own last ETag)" => {
                let k = RecordKey::new(format!("json-{k}")).unwrap();
                let receipt = Contents::Record(Record {
                    key: k.clone(),
                    fence: Some(token),
                    state: None,
                    payload: JSON_PAYLOAD.to_vec(),
                });
                let body = JsonCodec::new()
                    .encode(&receipt, WriteId::random())
                    .unwrap();
                let put = self
                    .client
                    .put_object()
                    .bucket(self.bucket.bucket())
                    .key(format!("json-conditional/{k}"))
                    .content_type("application/json")
                    .metadata("fence", token.to_string())
                    .metadata("state", "")
                    .body(ByteStream::from(body));
                self.put_if_last(k, put).await
            }
            "fenced put, JSON codec, the holder's own ETag remembered" => {
                let write = FencedWrite::claim().set_payload(JSON_PAYLOAD.to_vec());
                // Objects of its own: the envelope store's are not JSON.
                let k = RecordKey::new(format!("json-{k}")).unwrap();
                let start = Instant::now();
                self.warm_json.write(&k, token, &write).await.unwrap();
                start.elapsed()
            }
            other => unreachable!("no variant {other}"),
        }
    }
}
