//! What the library tells an operator: `tracing` events always, and `metrics` counters and
//! histograms behind the `metrics` feature. Every event and metric is made here, so their
//! names, levels and labels follow one convention (docs/operating.md lists them):
//!
//! * events have the target `fencing`, a message saying what happened, and fields `store`,
//!   `record`, `resource`, `token`, `kind` (`claim` / `holder_only`), `outcome`, `found`
//!   where they apply; never a payload. A refusal, a regression, an abort or a lost lease is
//!   `WARN`; a takeover, an ambiguous retry or a lease granted or released is `INFO`; a
//!   write accepted or an effect performed is `DEBUG`.
//! * metrics are named `fencing_<what>_total` (counters) and `fencing_<what>_seconds`
//!   (histograms), labelled by `store`, `kind` and `outcome` only (bounded sets: never a
//!   record key, a resource or a token).

use std::time::Duration;

use tracing::{debug, info, warn};

use crate::contract::store::FenceCheck;
use crate::value::error::{Error, Failure};
use crate::value::name::{RecordKey, ResourceName};
use crate::value::outcome::{Finished, SkippedRecord};
use crate::value::token::FencingToken;

/// The `kind` label of a fenced write.
fn kind(check: FenceCheck) -> &'static str {
    match check {
        FenceCheck::Claim => "claim",
        FenceCheck::HolderOnly => "holder_only",
    }
}

/// The `outcome` label of a failed write.
fn outcome(err: &Error) -> &'static str {
    match err {
        Error::Fenced { .. } => "fenced",
        Error::TokenRegression { .. } => "regression",
        Error::StateMismatch { .. } => "state_mismatch",
        Error::NotFound { .. } => "not_found",
        Error::Ambiguous { .. } => "ambiguous",
        Error::InvalidInput(_) => "invalid_input",
        _ => match err.failure() {
            Some(Failure::Unavailable) => "unavailable",
            Some(Failure::Misconfigured) => "misconfigured",
            Some(Failure::PermissionDenied) => "permission_denied",
            Some(Failure::Corrupt) => "corrupt",
            Some(Failure::NotSupported) => "not_supported",
            _ => "failed",
        },
    }
}

#[cfg(feature = "metrics")]
fn count(name: &'static str, labels: &[(&'static str, String)]) {
    metrics::counter!(name, labels).increment(1);
}

#[cfg(not(feature = "metrics"))]
fn count(_: &'static str, _: &[(&'static str, String)]) {}

#[cfg(feature = "metrics")]
fn time(name: &'static str, labels: &[(&'static str, String)], elapsed: Duration) {
    metrics::histogram!(name, labels).record(elapsed.as_secs_f64());
}

#[cfg(not(feature = "metrics"))]
fn time(_: &'static str, _: &[(&'static str, String)], _: Duration) {}

/// A fenced write ended: accepted (`Ok`) or not.
pub(crate) fn write_ended(
    store: &str,
    record: &RecordKey,
    token: FencingToken,
    check: FenceCheck,
    result: Result<(), &Error>,
    elapsed: Duration,
) {
    let kind = kind(check);
    let outcome = match result {
        Ok(()) => {
            debug!(target: "fencing", store, record = record.as_str(), token = token.get(), kind, elapsed_us = micros(elapsed), outcome = "accepted", "fenced write accepted");
            "accepted"
        }
        Err(err @ Error::Fenced { found, .. }) => {
            warn!(target: "fencing", store, record = record.as_str(), token = token.get(), kind, elapsed_us = micros(elapsed), outcome = "fenced", found = found.token().map(FencingToken::get), "fenced write refused: a newer holder's fence is on the record");
            outcome(err)
        }
        Err(err @ Error::TokenRegression { found, .. }) => {
            warn!(target: "fencing", store, record = record.as_str(), token = token.get(), kind, elapsed_us = micros(elapsed), outcome = "regression", found = found.get(), "fenced write refused by a fence above every token issued: the token counter went backwards");
            outcome(err)
        }
        Err(err) if err.is_rejection() => {
            info!(target: "fencing", store, record = record.as_str(), token = token.get(), kind, elapsed_us = micros(elapsed), outcome = outcome(err), error = %err, "fenced write refused by the record's state");
            outcome(err)
        }
        Err(err) => {
            warn!(target: "fencing", store, record = record.as_str(), token = token.get(), kind, elapsed_us = micros(elapsed), outcome = outcome(err), error = %err, "fenced write failed");
            outcome(err)
        }
    };
    let labels = [
        ("store", store.to_owned()),
        ("kind", kind.to_owned()),
        ("outcome", outcome.to_owned()),
    ];
    count("fencing_writes_total", &labels);
    time("fencing_write_seconds", &labels[..2], elapsed);
    if outcome == "regression" {
        count("fencing_token_regressions_total", &labels[..1]);
    }
}

/// `elapsed` in whole microseconds, for an event's field.
fn micros(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
}

/// A write whose outcome was lost is sent again with the same token.
pub(crate) fn ambiguous_retry(store: &str, record: &RecordKey, token: FencingToken, retry: u32) {
    info!(target: "fencing", store, record = record.as_str(), token = token.get(), retry, "fenced write outcome lost: sending it again with the same token");
    count(
        "fencing_ambiguous_retries_total",
        &[("store", store.to_owned())],
    );
}

/// The token source was raised past a fence found above it.
pub(crate) fn token_advanced(
    resource: &ResourceName,
    to: FencingToken,
    result: Result<(), &Error>,
) {
    match result {
        Ok(()) => {
            warn!(target: "fencing", resource = resource.as_str(), token = to.get(), "token source raised past a fence found above it")
        }
        Err(err) => {
            warn!(target: "fencing", resource = resource.as_str(), token = to.get(), error = %err, "raising the token source past a fence found above it failed; the next refusal tries again")
        }
    }
}

/// A record in flight under an earlier claim was taken over.
pub(crate) fn takeover(
    store: &str,
    record: &RecordKey,
    token: FencingToken,
    previous: Option<FencingToken>,
) {
    info!(target: "fencing", store, record = record.as_str(), token = token.get(), previous = previous.map(FencingToken::get), "took over a record in flight: looking its effect up first");
    count("fencing_takeovers_total", &[("store", store.to_owned())]);
}

/// An effect was looked up by idempotency key.
pub(crate) fn effect_looked_up(record: &RecordKey, found: bool) {
    debug!(target: "fencing", record = record.as_str(), found, "effect looked up by idempotency key");
    let outcome = if found { "found" } else { "not_found" };
    count(
        "fencing_effect_lookups_total",
        &[("outcome", outcome.to_owned())],
    );
}

/// An effect was performed.
pub(crate) fn effect_performed(
    record: &RecordKey,
    result: Result<(), &crate::value::error::BoxError>,
) {
    match result {
        Ok(()) => debug!(target: "fencing", record = record.as_str(), "effect performed"),
        Err(err) => {
            warn!(target: "fencing", record = record.as_str(), error = %err, "effect failed; the record stays in flight under this holder's token")
        }
    }
    let outcome = if result.is_ok() {
        "performed"
    } else {
        "failed"
    };
    count("fencing_effects_total", &[("outcome", outcome.to_owned())]);
}

/// One attempt to acquire a lease ended.
pub(crate) fn acquisition(resource: &ResourceName, granted: Option<FencingToken>) {
    match granted {
        Some(token) => {
            info!(target: "fencing", resource = resource.as_str(), token = token.get(), outcome = "granted", "lease granted")
        }
        None => {
            debug!(target: "fencing", resource = resource.as_str(), outcome = "busy", "lease busy")
        }
    }
    let outcome = if granted.is_some() { "granted" } else { "busy" };
    count(
        "fencing_lease_acquisitions_total",
        &[("outcome", outcome.to_owned())],
    );
}

/// A renewal extended a lease, or failed to and gave it up as lost.
pub(crate) fn renewal(resource: &ResourceName, token: FencingToken, result: Result<(), &Error>) {
    match result {
        Ok(()) => {
            debug!(target: "fencing", resource = resource.as_str(), token = token.get(), "lease extended")
        }
        Err(err) => {
            warn!(target: "fencing", resource = resource.as_str(), token = token.get(), error = %err, "lease lost: extension failed; stop the batch early");
            count(
                "fencing_lease_acquisitions_total",
                &[("outcome", "lost".to_owned())],
            );
        }
    }
}

/// A batch stopped at a rejection.
pub(crate) fn batch_aborted(
    resource: &ResourceName,
    token: FencingToken,
    store: &str,
    record: &RecordKey,
) {
    warn!(target: "fencing", resource = resource.as_str(), token = token.get(), store, record = record.as_str(), "batch aborted: every later write is refused unsent");
    count("fencing_batch_aborts_total", &[("store", store.to_owned())]);
}

/// A batch left a record alone under the skip policy.
pub(crate) fn batch_skipped(token: FencingToken, skipped: &SkippedRecord) {
    info!(target: "fencing", store = skipped.store.as_str(), record = skipped.record.as_str(), token = token.get(), mismatch = ?skipped.mismatch, "record skipped");
    count(
        "fencing_records_skipped_total",
        &[("store", skipped.store.clone())],
    );
}

/// A batch ended and its lease was released (or had already gone).
pub(crate) fn batch_finished(
    resource: &ResourceName,
    token: FencingToken,
    finished: Result<Finished, &Error>,
) {
    match finished {
        Ok(Finished::Released) => {
            info!(target: "fencing", resource = resource.as_str(), token = token.get(), outcome = "released", "batch finished; lease released")
        }
        Ok(Finished::LeaseLost) => {
            warn!(target: "fencing", resource = resource.as_str(), token = token.get(), outcome = "expired", "batch finished after its lease expired; every write was accepted by its fence")
        }
        Err(err) => {
            warn!(target: "fencing", resource = resource.as_str(), token = token.get(), error = %err, "batch ended without finishing")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::error::{FoundFence, RequestEffect};
    use crate::value::input::{InputKind, InvalidInput};
    use crate::value::name::State;
    use crate::value::outcome::Mismatch;

    fn key() -> RecordKey {
        RecordKey::new("r_815").unwrap()
    }

    fn resource() -> ResourceName {
        ResourceName::new("settle:m_4471").unwrap()
    }

    fn token(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap()
    }

    fn state_mismatch() -> Error {
        Error::StateMismatch {
            store: "refunds".into(),
            record: key(),
            presented: token(34),
            expected: vec![State::new("sending").unwrap()],
            found: Some(State::new("sent").unwrap()),
        }
    }

    fn regression() -> Error {
        Error::TokenRegression {
            store: "refunds".into(),
            record: key(),
            presented: token(3),
            found: token(34),
            highest_issued: Some(token(3)),
        }
    }

    fn unavailable() -> Error {
        Error::Unavailable {
            store: "refunds".into(),
            source: "connection refused".into(),
        }
    }

    /// The events `calls` made, as text.
    fn told(calls: impl FnOnce()) -> String {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        fencing_testkit::events::capture(&runtime, async { calls() }).1
    }

    #[test]
    fn every_failure_has_its_outcome_label() {
        let fenced = Error::Fenced {
            store: "refunds".into(),
            record: key(),
            presented: token(33),
            found: FoundFence::Fence(token(34)),
        };
        let not_found = Error::NotFound {
            store: "refunds".into(),
            record: key(),
        };
        let ambiguous = Error::Ambiguous {
            store: "refunds".into(),
            source: "timed out".into(),
        };
        let invalid = Error::InvalidInput(InvalidInput::new(InputKind::Ttl, "0 ms"));
        for (err, label) in [
            (fenced, "fenced"),
            (regression(), "regression"),
            (state_mismatch(), "state_mismatch"),
            (not_found, "not_found"),
            (ambiguous, "ambiguous"),
            (invalid, "invalid_input"),
            (unavailable(), "unavailable"),
        ] {
            assert_eq!(outcome(&err), label, "{err:?}");
        }
        for (failure, label) in [
            (Failure::Misconfigured, "misconfigured"),
            (Failure::PermissionDenied, "permission_denied"),
            (Failure::Corrupt, "corrupt"),
            (Failure::NotSupported, "not_supported"),
            (Failure::Unexpected, "failed"),
        ] {
            let err = Error::failed_request("refunds", RequestEffect::Writes, failure, "no".into());
            assert_eq!(outcome(&err), label, "{err:?}");
        }
    }

    #[test]
    fn a_refusal_by_state_is_told_as_information_and_a_failure_as_a_warning() {
        let text = told(|| {
            let mismatch = state_mismatch();
            let failure = unavailable();
            let (key, check, spent) = (key(), FenceCheck::HolderOnly, Duration::ZERO);
            write_ended("refunds", &key, token(34), check, Err(&mismatch), spent);
            write_ended("refunds", &key, token(34), check, Err(&failure), spent);
        });
        let by_state = fencing_testkit::events::line(&text, "refused by the record's state");
        assert!(
            by_state.contains("INFO") && by_state.contains("outcome=\"state_mismatch\""),
            "{by_state}"
        );
        let failed = fencing_testkit::events::line(&text, "fenced write failed");
        assert!(
            failed.contains("WARN") && failed.contains("outcome=\"unavailable\""),
            "{failed}"
        );
    }

    #[test]
    fn retries_raises_lookups_effects_renewals_and_skips_are_each_told() {
        let text = told(|| {
            let lost = Error::LeaseLost {
                resource: resource(),
                owner: "worker-a".into(),
            };
            ambiguous_retry("refunds", &key(), token(34), 1);
            token_advanced(&resource(), token(35), Ok(()));
            token_advanced(&resource(), token(36), Err(&unavailable()));
            effect_looked_up(&key(), true);
            effect_performed(&key(), Ok(()));
            effect_performed(&key(), Err(&"declined".into()));
            renewal(&resource(), token(34), Ok(()));
            renewal(&resource(), token(34), Err(&lost));
            let skipped = SkippedRecord {
                store: "refunds".into(),
                record: key(),
                mismatch: Mismatch::Missing,
            };
            batch_skipped(token(34), &skipped);
        });
        for told in [
            "sending it again with the same token",
            "token source raised past a fence found above it",
            "raising the token source past a fence found above it failed",
            "effect looked up by idempotency key",
            "effect performed",
            "effect failed",
            "lease extended",
            "lease lost: extension failed",
            "record skipped",
        ] {
            assert!(text.contains(told), "{told:?} not told:\n{text}");
        }
    }

    #[cfg(feature = "metrics")]
    #[test]
    fn each_counter_counts_what_it_names() {
        use metrics_util::debugging::{DebugValue, DebuggingRecorder};

        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let (key, check, spent) = (key(), FenceCheck::Claim, Duration::ZERO);
            write_ended("refunds", &key, token(3), check, Err(&regression()), spent);
            write_ended(
                "refunds",
                &key,
                token(34),
                check,
                Err(&state_mismatch()),
                spent,
            );
            write_ended("refunds", &key, token(34), check, Ok(()), spent);
            ambiguous_retry("refunds", &key, token(34), 1);
            effect_looked_up(&key, false);
            effect_performed(&key, Ok(()));
            renewal(&resource(), token(34), Err(&unavailable()));
            let skipped = SkippedRecord {
                store: "refunds".into(),
                record: key.clone(),
                mismatch: Mismatch::Missing,
            };
            batch_skipped(token(34), &skipped);
        });
        let counters: Vec<(String, Vec<String>, u64)> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter_map(|(key, _, _, value)| match value {
                DebugValue::Counter(n) => {
                    let labels = key
                        .key()
                        .labels()
                        .map(|l| format!("{}={}", l.key(), l.value()));
                    Some((key.key().name().to_owned(), labels.collect(), n))
                }
                _ => None,
            })
            .collect();
        let count = |name: &str, label: &str| {
            counters
                .iter()
                .filter(|(n, labels, _)| n == name && labels.iter().any(|l| l == label))
                .map(|(_, _, n)| n)
                .sum::<u64>()
        };
        assert_eq!(count("fencing_token_regressions_total", "store=refunds"), 1);
        assert_eq!(count("fencing_writes_total", "outcome=regression"), 1);
        assert_eq!(count("fencing_writes_total", "outcome=accepted"), 1);
        assert_eq!(count("fencing_ambiguous_retries_total", "store=refunds"), 1);
        assert_eq!(
            count("fencing_effect_lookups_total", "outcome=not_found"),
            1
        );
        assert_eq!(count("fencing_effects_total", "outcome=performed"), 1);
        assert_eq!(count("fencing_lease_acquisitions_total", "outcome=lost"), 1);
        assert_eq!(count("fencing_records_skipped_total", "store=refunds"), 1);
    }
}
