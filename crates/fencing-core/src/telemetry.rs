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

use crate::error::Error;
use crate::name::{RecordKey, ResourceName};
use crate::outcome::{Finished, SkippedRecord};
use crate::store::FenceCheck;
use crate::token::FencingToken;

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
        _ => "failed",
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
            debug!(target: "fencing", store, record = record.as_str(), token = token.get(), kind, outcome = "accepted", "fenced write accepted");
            "accepted"
        }
        Err(err @ Error::Fenced { found, .. }) => {
            warn!(target: "fencing", store, record = record.as_str(), token = token.get(), kind, outcome = "fenced", found = found.token().map(FencingToken::get), "fenced write refused: a newer holder's fence is on the record");
            outcome(err)
        }
        Err(err @ Error::TokenRegression { found, .. }) => {
            warn!(target: "fencing", store, record = record.as_str(), token = token.get(), kind, outcome = "regression", found = found.get(), "fenced write refused by a fence above every token issued: the token counter went backwards");
            outcome(err)
        }
        Err(err) if err.is_rejection() => {
            info!(target: "fencing", store, record = record.as_str(), token = token.get(), kind, outcome = outcome(err), error = %err, "fenced write refused by the record's state");
            outcome(err)
        }
        Err(err) => {
            warn!(target: "fencing", store, record = record.as_str(), token = token.get(), kind, outcome = outcome(err), error = %err, "fenced write failed");
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
pub(crate) fn effect_performed(record: &RecordKey, result: Result<(), &crate::error::BoxError>) {
    match result {
        Ok(()) => debug!(target: "fencing", record = record.as_str(), "effect performed"),
        Err(err) => {
            warn!(target: "fencing", record = record.as_str(), error = %err, "effect failed; the record stays in flight under this fence")
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
        Ok(Finished::LeaseAlreadyExpired) => {
            warn!(target: "fencing", resource = resource.as_str(), token = token.get(), outcome = "expired", "batch finished after its lease expired; every write was accepted by its fence")
        }
        Err(err) => {
            warn!(target: "fencing", resource = resource.as_str(), token = token.get(), error = %err, "batch ended without finishing")
        }
    }
}
