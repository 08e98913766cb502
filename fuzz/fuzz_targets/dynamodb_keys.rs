//! DynamoDB table shapes and record keys on any text: they never panic, and a record key
//! accepted is the partition value, the separator and the sort value exactly as given (one
//! item, one spelling); the team's attribute names are checked without panicking.
#![no_main]

use aws_sdk_dynamodb::types::AttributeValue;
use fencing_core::FencedWrite;
use fencing_dynamodb::{DynamoKeyType, DynamoTable, DynamoWrite};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (&str, &str, &str, u8, &str, &str, &str)| {
    let (name, partition_key, sort_key, kind, partition, sort, attribute) = input;
    let kind = match kind % 3 {
        0 => DynamoKeyType::String,
        1 => DynamoKeyType::Number,
        _ => DynamoKeyType::Binary,
    };
    let _ = DynamoWrite::new(FencedWrite::claim()).set(attribute, AttributeValue::S(sort.into()));
    let Ok(table) = DynamoTable::new(name).and_then(|t| t.with_key_attribute(partition_key)) else {
        return;
    };
    if let Ok(key) = table.record_key(partition, None) {
        assert_eq!(key.as_str(), partition);
    }
    let Ok(table) = table.with_sort_key(sort_key, kind) else {
        return;
    };
    if let Ok(key) = table.record_key(partition, Some(sort)) {
        let separator = table.key_separator();
        assert_eq!(key.as_str(), format!("{partition}{separator}{sort}"));
        assert!(!partition.contains(separator));
    }
    assert!(
        table.record_key(partition, None).is_err(),
        "the sort key is missing"
    );
});
