//! What a recorder sees with the `metrics` feature: counters and latencies of a takeover and
//! a stale holder's refusal, by store, kind and outcome.
#![cfg(feature = "metrics")]

mod common;

use common::{paused_runtime, takeover_and_stale_confirm};

#[test]
fn counters_and_latencies_count_each_outcome_by_store_kind_and_outcome() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        paused_runtime().block_on(takeover_and_stale_confirm())
    });
    let snapshot = snapshotter.snapshot().into_vec();
    let value = |name: &str, labels: &[(&str, &str)]| -> Option<&DebugValue> {
        snapshot.iter().find_map(|(key, _, _, value)| {
            let key = key.key();
            let matches = key.name() == name
                && labels.len() == key.labels().count()
                && labels
                    .iter()
                    .all(|(k, v)| key.labels().any(|l| l.key() == *k && l.value() == *v));
            matches.then_some(value)
        })
    };
    let counter = |name: &str, labels: &[(&str, &str)]| match value(name, labels) {
        Some(DebugValue::Counter(n)) => *n,
        other => panic!("{name} {labels:?}: {other:?}"),
    };
    let write = |kind, outcome| {
        counter(
            "fencing_writes_total",
            &[("store", "refunds"), ("kind", kind), ("outcome", outcome)],
        )
    };
    assert_eq!(write("claim", "accepted"), 2, "A's claim and B's");
    assert_eq!(write("holder_only", "accepted"), 1, "B's confirm");
    assert_eq!(write("holder_only", "fenced"), 1, "A's stale confirm");
    assert_eq!(
        counter("fencing_takeovers_total", &[("store", "refunds")]),
        1
    );
    assert_eq!(
        counter("fencing_batch_aborts_total", &[("store", "refunds")]),
        1
    );
    assert_eq!(
        counter(
            "fencing_lease_acquisitions_total",
            &[("outcome", "granted")]
        ),
        2
    );
    match value(
        "fencing_write_seconds",
        &[("store", "refunds"), ("kind", "claim")],
    ) {
        Some(DebugValue::Histogram(samples)) => assert_eq!(samples.len(), 2),
        other => panic!("fencing_write_seconds: {other:?}"),
    }
}
