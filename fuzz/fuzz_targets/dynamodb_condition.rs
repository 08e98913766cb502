//! The fence condition merged into a team's own `UpdateItem`, on any expressions and
//! placeholder names: it never panics; a request with a placeholder of the fence's own
//! (`#fencing_…`, `:fencing_…`) is refused; otherwise the team's condition is kept whole and
//! `AND`ed with the fence's, every placeholder of the team's is still there, and a claim's
//! update sets the fence once: inside the team's `SET` clause where it has one (whatever
//! whitespace surrounds the keyword; DynamoDB refuses a second), as a clause of its own
//! otherwise.
#![no_main]

use std::sync::OnceLock;

use aws_sdk_dynamodb::types::AttributeValue;
use fencing_core::adapter::HolderExt;
use fencing_core::{FenceCheck, FencingToken, Holder, MemoryTokenSource, ResourceName};
use fencing_dynamodb::DynamoFenceCondition;
use libfuzzer_sys::fuzz_target;

fn client() -> &'static aws_sdk_dynamodb::Client {
    static CLIENT: OnceLock<aws_sdk_dynamodb::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::Config::builder()
                .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
                .build(),
        )
    })
}

/// `SET` clauses of an update expression (the word `SET` with something after it): DynamoDB
/// takes one.
fn set_clauses(update: &str) -> usize {
    let words: Vec<&str> = update.split_ascii_whitespace().collect();
    words
        .iter()
        .enumerate()
        .filter(|(i, word)| word.eq_ignore_ascii_case("SET") && i + 1 < words.len())
        .count()
}

const FENCE_SET: &str = "#fencing_fence = :fencing_token";

fuzz_target!(
    |input: (Option<&str>, Option<&str>, &str, &str, bool, u64)| {
        let (condition, update, name, value, claim, token) = input;
        let Ok(token) = FencingToken::new(token) else {
            return;
        };
        let check = if claim {
            FenceCheck::Claim
        } else {
            FenceCheck::HolderOnly
        };
        let request = client()
            .update_item()
            .table_name("payouts")
            .set_condition_expression(condition.map(str::to_owned))
            .set_update_expression(update.map(str::to_owned))
            .expression_attribute_names(name, "status")
            .expression_attribute_values(value, AttributeValue::S("sent".into()));
        let resource = ResourceName::new("settle:m_4471").expect("a valid name");
        let holder = Holder::new(&resource, token, &MemoryTokenSource::new());
        let fence = DynamoFenceCondition::new("fence", check, &holder);
        let reserved = [name, value]
            .iter()
            .any(|p| p.starts_with("#fencing_") || p.starts_with(":fencing_"));
        let merged = match fence.merge_into(request) {
            Ok(merged) => merged,
            Err(_) => {
                assert!(reserved, "refused {name:?} {value:?}");
                return;
            }
        };
        assert!(!reserved, "accepted the reserved {name:?} {value:?}");
        let expected = match condition {
            Some(own) => format!("({own}) AND ({})", fence.condition()),
            None => fence.condition().to_owned(),
        };
        assert_eq!(
            merged.get_condition_expression().as_deref(),
            Some(&*expected)
        );
        let names = merged.get_expression_attribute_names().clone().unwrap();
        let values = merged.get_expression_attribute_values().clone().unwrap();
        assert_eq!(names.get(name).map(String::as_str), Some("status"));
        assert_eq!(
            names.get("#fencing_fence").map(String::as_str),
            Some("fence")
        );
        assert!(values.contains_key(value) && values.contains_key(":fencing_token"));
        let merged_update = merged.get_update_expression().clone();
        if !claim {
            assert_eq!(merged_update.as_deref(), update);
            return;
        }
        let merged_update = merged_update.unwrap();
        let own = update.unwrap_or("");
        if set_clauses(own) == 0 {
            let expected = match update {
                Some(own) => format!("{own} SET {FENCE_SET}"),
                None => format!("SET {FENCE_SET}"),
            };
            assert_eq!(merged_update, expected);
            return;
        }
        assert_eq!(
            set_clauses(&merged_update),
            set_clauses(own),
            "{merged_update:?}"
        );
        assert_eq!(
            merged_update.matches(FENCE_SET).count(),
            own.matches(FENCE_SET).count() + 1,
            "{merged_update:?}"
        );
    }
);
