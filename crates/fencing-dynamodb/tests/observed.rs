//! A fenced transaction is reported like any fenced write, each record with its outcome, and
//! its lost answer as a retry. Alone in its test binary (see `fencing_testkit::events`).

mod common;

use fencing_core::adapter::HolderExt;
use fencing_core::{
    FencedStore, FencedWrite, FencingToken, Holder, Lifecycle, MemoryTokenSource, RecordKey,
    ResourceName, TokenSource,
};
use fencing_dynamodb::DynamoStore;
use fencing_test_support::aws::LoseAnswers;
use fencing_testkit::conformance::make_pending;
use fencing_testkit::events::{capture, line};

#[test]
fn a_transaction_reports_each_record_its_retry_and_its_refusal() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (store_name, events) = capture(&runtime, async {
        let faults = LoseAnswers::default();
        let client =
            common::client_with(aws_sdk_dynamodb::Config::builder().interceptor(faults.clone()));
        let store = DynamoStore::new(client.clone(), common::table(&client).await);
        let lifecycle = Lifecycle::default();
        let keys: Vec<_> = ["r_1", "r_2"].map(|k| RecordKey::new(k).unwrap()).to_vec();
        for key in &keys {
            make_pending(&store, key).await;
        }
        let resource = ResourceName::new("settle:m_4471").unwrap();
        let source = MemoryTokenSource::new();
        let t = |n| FencingToken::new(n).unwrap();
        source.advance_to(&resource, t(34)).await.unwrap();
        let holder = Holder::new(&resource, t(34), &source);
        let claims: Vec<_> = keys
            .iter()
            .map(|k| (k.clone(), lifecycle.claim()))
            .collect();
        faults.arm(1);
        store.transact(&holder, &claims).await.unwrap();
        let stale = Holder::new(&resource, t(33), &source);
        let confirm = vec![(keys[1].clone(), FencedWrite::holder_only())];
        store.transact(&stale, &confirm).await.unwrap_err();
        store.name().to_owned()
    });
    line(&events, "fenced write outcome lost: sending it again");
    for record in ["r_1", "r_2"] {
        let accepted = events.lines().find(|l| {
            l.contains(&format!("record=\"{record}\""))
                && l.contains("token=34")
                && l.contains("outcome=\"accepted\"")
        });
        assert!(
            accepted.is_some(),
            "no accepted event for {record}:\n{events}"
        );
    }
    let refused = line(&events, "fenced write refused: a newer holder");
    for field in [
        format!("store=\"{store_name}\""),
        "record=\"r_2\"".to_owned(),
        "token=33".to_owned(),
        "found=34".to_owned(),
    ] {
        assert!(refused.contains(&field), "{field} missing from: {refused}");
    }
}
