//! Fenced writes against the same requests sent with the raw SDK, on the same DynamoDB
//! endpoint (the one the tests use: moto, or Amazon's DynamoDB Local), in the same run.
//!
//! ```text
//! cargo bench -p fencing-dynamodb --bench dynamodb
//! FENCING_DYNAMODB_SERVER=dynamodb-local cargo bench -p fencing-dynamodb --bench dynamodb
//! ```
//!
//! Each round times every variant once, in rotating order, over the same items; the medians
//! of the rounds are reported with their ratio to the first variant. The composite-key table's
//! two variants alternate entry by entry instead, so an emulator that drifts within a round
//! slows both alike, and their ratio is also reported paired round by round. Emulator times are not
//! the service's times: only the ratios mean anything. Nothing here asserts a time: the
//! figures go to docs/benchmarks.md.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use fencing_core::adapter::{HolderExt, StoreWrites};
use fencing_core::{
    FencedWrite, FencingToken, Holder, Lifecycle, MemoryTokenSource, RecordKey, ResourceName,
    State, TokenSource,
};
use fencing_dynamodb::{DynamoKeyType, DynamoStore, DynamoTable, DynamoWrite};
use fencing_test_support::{aws, bench, services};

const ITEMS: usize = 200;
const ROUNDS: usize = 7;
const TRANSACTION: usize = 25;
/// The composite-key comparison alternates the two variants entry by entry, each round paired.
const ATTRIBUTE_ROUNDS: usize = 21;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let endpoint = services::dynamodb_endpoint();
    let client = aws::dynamodb_client_at(&endpoint, aws_sdk_dynamodb::Config::builder());
    let table = DynamoTable::new(fencing_testkit::unique_name("bench")).unwrap();
    table.create_if_missing(&client).await.unwrap();
    let store = DynamoStore::new(client.clone(), table);
    let keys = bench::pending_records(&store, ITEMS).await;
    let ledger = ledger(&client).await;
    let entries = ledger_entries(&ledger).await;
    let bench = Bench {
        client,
        store,
        keys,
        ledger,
        entries,
    };

    println!("DynamoDB at {endpoint}, {ITEMS} items, {ROUNDS} rounds, median per round\n");
    let writes = bench
        .compare(
            2,
            &[
                "conditional UpdateItem, raw SDK (the library's expression)",
                "DynamoStore::write (claim)",
                "unconditional UpdateItem, raw SDK",
            ],
        )
        .await;
    bench::report(&writes, ITEMS, "write");
    println!();
    let transactions = bench
        .compare(
            2 + ROUNDS as u64,
            &[
                "25 single fenced writes",
                "one fenced transaction of 25 writes",
            ],
        )
        .await;
    bench::report(&transactions, ITEMS, "write");
    println!();
    let attributes = bench::compare_per_item(
        &[
            "conditional UpdateItem, raw SDK, composite key and two attributes (the library's request)",
            "DynamoStore::write_with (lifecycle claim, composite key, two attributes)",
        ],
        ATTRIBUTE_ROUNDS,
        ITEMS,
        async |variant, round, entry| {
            let token = FencingToken::new(2 + 2 * ROUNDS as u64 + round as u64).unwrap();
            bench.write_entry(variant, token, entry).await
        },
    )
    .await;
    bench::report(&bench::medians(&attributes), ITEMS, "write");
    println!();
    bench::report_paired_ratios(&attributes);
}

/// A ledger keyed as a team's: merchant (String) and entry number (Number).
async fn ledger(client: &Client) -> DynamoStore {
    let table = DynamoTable::new(fencing_testkit::unique_name("bench-ledger"))
        .unwrap()
        .with_key_attribute("merchant")
        .unwrap()
        .with_sort_key("entry", DynamoKeyType::Number)
        .unwrap();
    table.create_if_missing(client).await.unwrap();
    DynamoStore::new(client.clone(), table)
}

/// `ITEMS` pending entries of merchant m_4471, numbered from 1.
async fn ledger_entries(ledger: &DynamoStore) -> Vec<RecordKey> {
    let pending = FencedWrite::claim().set_state(Lifecycle::default().pending().clone());
    let mut entries = Vec::with_capacity(ITEMS);
    for entry in 1..=ITEMS {
        let key = ledger
            .table()
            .record_key("m_4471", Some(&entry.to_string()))
            .unwrap();
        ledger
            .write(&key, FencingToken::MIN, &pending)
            .await
            .unwrap();
        entries.push(key);
    }
    entries
}

struct Bench {
    client: Client,
    store: DynamoStore,
    keys: Vec<RecordKey>,
    ledger: DynamoStore,
    entries: Vec<RecordKey>,
}

impl Bench {
    /// Times the variants; every round claims with a higher token than the one before, from
    /// `first_token` on.
    async fn compare(
        &self,
        first_token: u64,
        variants: &[&'static str],
    ) -> Vec<(&'static str, Duration)> {
        bench::compare(variants, ROUNDS, async |variant, round| {
            let token = FencingToken::new(first_token + round as u64).unwrap();
            let start = Instant::now();
            self.run(variant, token).await;
            start.elapsed()
        })
        .await
    }

    async fn run(&self, variant: &str, token: FencingToken) {
        let sending = State::new("sending").unwrap();
        let claim = FencedWrite::claim().set_state(sending.clone());
        let table = self.store.table();
        match variant {
            "conditional UpdateItem, raw SDK (the library's expression)" => {
                for k in &self.keys {
                    self.client
                        .update_item()
                        .table_name(table.name())
                        .key("id", AttributeValue::S(k.to_string()))
                        .condition_expression(
                            "(attribute_not_exists(#fence) OR (attribute_type(#fence, :type_n) \
                             AND #fence BETWEEN :zero AND :token)) AND \
                             (attribute_not_exists(#state) OR (attribute_type(#state, :type_s) \
                             AND size(#state) BETWEEN :one AND :max_state)) AND \
                             (attribute_not_exists(#payload) OR attribute_type(#payload, :type_b))",
                        )
                        .update_expression("SET #fence = :token, #state = :new_state")
                        .expression_attribute_names("#fence", "fence")
                        .expression_attribute_names("#state", "state")
                        .expression_attribute_names("#payload", "payload")
                        .expression_attribute_values(":token", n(token))
                        .expression_attribute_values(":zero", n(0))
                        .expression_attribute_values(":one", n(1))
                        .expression_attribute_values(":max_state", n(State::MAX_BYTES))
                        .expression_attribute_values(":type_n", s("N"))
                        .expression_attribute_values(":type_s", s("S"))
                        .expression_attribute_values(":type_b", s("B"))
                        .expression_attribute_values(":new_state", s(&sending))
                        .return_values(ReturnValue::AllOld)
                        .return_values_on_condition_check_failure(
                            ReturnValuesOnConditionCheckFailure::AllOld,
                        )
                        .send()
                        .await
                        .unwrap();
                }
            }
            "DynamoStore::write (claim)" | "25 single fenced writes" => {
                for k in &self.keys {
                    self.store.write(k, token, &claim).await.unwrap();
                }
            }
            "unconditional UpdateItem, raw SDK" => {
                for k in &self.keys {
                    self.client
                        .update_item()
                        .table_name(table.name())
                        .key("id", AttributeValue::S(k.to_string()))
                        .update_expression("SET #state = :new_state")
                        .expression_attribute_names("#state", "state")
                        .expression_attribute_values(":new_state", s(&sending))
                        .send()
                        .await
                        .unwrap();
                }
            }
            "one fenced transaction of 25 writes" => {
                let source = MemoryTokenSource::new();
                let resource = ResourceName::new("settle:m_4471").unwrap();
                source.advance_to(&resource, token).await.unwrap();
                let holder = Holder::new(&resource, token, &source);
                for chunk in self.keys.chunks(TRANSACTION) {
                    let writes: Vec<_> = chunk.iter().map(|k| (k.clone(), claim.clone())).collect();
                    self.store.transact(&holder, &writes).await.unwrap();
                }
            }
            other => unreachable!("no variant {other}"),
        }
    }

    /// Writes ledger entry `i` as `variant` does and returns the time of that write alone.
    async fn write_entry(&self, variant: &str, token: FencingToken, i: usize) -> Duration {
        let lifecycle = Lifecycle::default();
        let k = &self.entries[i];
        match variant {
            "conditional UpdateItem, raw SDK, composite key and two attributes (the library's request)" =>
            {
                let update = self
                    .client
                    .update_item()
                    .table_name(self.ledger.table().name())
                    .key("merchant", s("m_4471"))
                    .key("entry", n(i + 1))
                    .condition_expression(
                        "(attribute_not_exists(#fence) OR (attribute_type(#fence, :type_n) \
                         AND #fence BETWEEN :zero AND :token)) AND \
                         (attribute_not_exists(#payload) OR attribute_type(#payload, :type_b)) \
                         AND attribute_exists(#key) AND #state IN (:required0, :required1)",
                    )
                    .update_expression(
                        "SET #fence = :token, #state = :new_state, #attribute0 = :attribute0, \
                         #attribute1 = :attribute1",
                    )
                    .expression_attribute_names("#fence", "fence")
                    .expression_attribute_names("#state", "state")
                    .expression_attribute_names("#payload", "payload")
                    .expression_attribute_names("#key", "merchant")
                    .expression_attribute_names("#attribute0", "amount_cents")
                    .expression_attribute_names("#attribute1", "posted by")
                    .expression_attribute_values(":token", n(token))
                    .expression_attribute_values(":zero", n(0))
                    .expression_attribute_values(":type_n", s("N"))
                    .expression_attribute_values(":type_b", s("B"))
                    .expression_attribute_values(":required0", s(lifecycle.pending()))
                    .expression_attribute_values(":required1", s(lifecycle.in_flight()))
                    .expression_attribute_values(":new_state", s(lifecycle.in_flight()))
                    .expression_attribute_values(":attribute0", n(1000 + i))
                    .expression_attribute_values(":attribute1", s("worker-b"))
                    .return_values(ReturnValue::AllOld)
                    .return_values_on_condition_check_failure(
                        ReturnValuesOnConditionCheckFailure::AllOld,
                    );
                let start = Instant::now();
                update
                    .send()
                    .await
                    .unwrap_or_else(|e| panic!("{k:?}: {e:?}"));
                start.elapsed()
            }
            "DynamoStore::write_with (lifecycle claim, composite key, two attributes)" => {
                let source = MemoryTokenSource::new();
                let resource = ResourceName::new("settle:m_4471").unwrap();
                source.advance_to(&resource, token).await.unwrap();
                let holder = Holder::new(&resource, token, &source);
                let start = Instant::now();
                let write = DynamoWrite::new(lifecycle.claim())
                    .set("amount_cents", n(1000 + i))
                    .unwrap()
                    .set("posted by", s("worker-b"))
                    .unwrap();
                self.ledger.write_with(&holder, k, write).await.unwrap();
                start.elapsed()
            }
            other => unreachable!("no variant {other}"),
        }
    }
}

fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}
