//! Fenced writes against the same requests sent with the raw SDK, on the same DynamoDB
//! endpoint (the emulator the tests use), in the same run.
//!
//! ```text
//! cargo bench -p fencing-dynamodb --bench dynamodb
//! ```
//!
//! Each round times every variant once, in rotating order, over the same items; the medians
//! of the rounds are reported with their ratio to the first variant. Emulator times are not
//! the service's times: only the ratios mean anything. Nothing here asserts a time: the
//! figures go to docs/benchmarks.md.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use fencing_core::{
    Fence, FencedStore, FencedWrite, FencingToken, MemoryTokenSource, RecordKey, ResourceName,
    State, TokenSource,
};
use fencing_dynamodb::{DynamoStore, DynamoTable};
use fencing_test_support::{aws, bench, services};

const ITEMS: usize = 200;
const ROUNDS: usize = 7;
const TRANSACTION: usize = 25;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let endpoint = services::aws_endpoint();
    let client = aws::dynamodb_client_at(&endpoint, aws_sdk_dynamodb::Config::builder());
    let table = DynamoTable::new(fencing_testkit::unique_name("bench")).unwrap();
    table.create(&client).await.unwrap();
    let store = DynamoStore::new(client.clone(), table);
    let keys = bench::pending_records(&store, ITEMS).await;
    let bench = Bench {
        client,
        store,
        keys,
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
}

struct Bench {
    client: Client,
    store: DynamoStore,
    keys: Vec<RecordKey>,
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
                let fence = Fence::new(&resource, token, &source);
                for chunk in self.keys.chunks(TRANSACTION) {
                    let writes: Vec<_> = chunk.iter().map(|k| (k.clone(), claim.clone())).collect();
                    self.store.transact(&fence, &writes).await.unwrap();
                }
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
