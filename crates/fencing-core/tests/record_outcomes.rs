//! An adapter's write of several records that applied some and refused others
//! (`RecordOutcomes`) is reported record by record, each with its own outcome. Alone in its
//! test binary: `tracing` caches per call site whether anyone listens, and a test running
//! beside it without a subscriber could make it decide nobody does.

use fencing_core::adapter::{HolderExt, RecordOutcomes};
use fencing_core::{
    Error, FencedWrite, FencingToken, Holder, MemoryStore, MemoryTokenSource, RecordKey,
    ResourceName, State, TokenSource,
};
use fencing_testkit::events::{capture, line};

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

fn state(name: &str) -> State {
    State::new(name).unwrap()
}

/// An adapter's write of two records that applied one and refused the other.
struct OneRefused(Vec<Error>);

impl RecordOutcomes for OneRefused {
    fn refusals(&self) -> Vec<&Error> {
        self.0.iter().collect()
    }
}

#[test]
fn each_record_of_an_adapters_write_is_reported_with_its_own_outcome() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ((), events) = capture(&runtime, async {
        let source = MemoryTokenSource::new();
        let resource = ResourceName::new("settle:m_4471").unwrap();
        source.advance_to(&resource, token(34)).await.unwrap();
        let holder = Holder::new(&resource, token(34), &source);
        let applied = RecordKey::new("r_815").unwrap();
        let refused = RecordKey::new("r_816").unwrap();
        let mismatch = || Error::StateMismatch {
            store: "refunds".into(),
            record: refused.clone(),
            presented: token(34),
            expected: vec![state("pending")],
            found: Some(state("sent")),
        };
        holder
            .run_write(
                &MemoryStore::new("refunds"),
                &[&applied, &refused],
                &FencedWrite::claim(),
                async || Ok(OneRefused(vec![mismatch()])),
            )
            .await
            .unwrap();
    });
    let accepted = line(&events, "fenced write accepted");
    assert!(accepted.contains("record=\"r_815\""), "{events}");
    let refused = line(&events, "refused by the record's state");
    assert!(refused.contains("record=\"r_816\""), "{events}");
}
