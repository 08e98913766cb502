//! The audit after a run, independent of the library: plain SQL on the refunds and their
//! history (in PostgreSQL or MariaDB, [`crate::tables`]), plain SDK calls on the ledger and on every version of every receipt, and the
//! gateway's journal, and the job queue's own counts. It trusts nothing the workers reported
//! but the one thing no store can tell: which worker's call deleted the job's message.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use aws_sdk_dynamodb::types::AttributeValue;

pub use fencing_simulation::settlement::euros;

pub use crate::checks::{Check, Violation};
use crate::history::History;
use crate::payments::{Outcome, read_journal};
use crate::plan::{REFUND_CENTS, RunPlan};
use crate::stores::{Clients, JOB, RunNames, RunStores};
use crate::tables::RefundRow;

/// What the audit found.
#[derive(Clone, Debug, Default)]
pub struct AuditReport {
    /// Every violation.
    pub violations: Vec<Violation>,
    /// Refunds in state `sent`.
    pub sent: usize,
    /// Cents the gateway created refunds for.
    pub paid_cents: i64,
    /// Cents in the ledger.
    pub recorded_cents: i64,
    /// Creates the gateway answered from an earlier create (harmless, by idempotency key).
    pub repeated_calls: usize,
}

type AuditError = Box<dyn std::error::Error + Send + Sync>;

impl AuditReport {
    fn violation(&mut self, check: Check, refund: Option<&str>, detail: impl Into<String>) {
        self.violations.push(Violation {
            check,
            refund: refund.map(str::to_owned),
            detail: detail.into(),
        });
    }
}

/// What the workers of a run reported on their standard output that the audit checks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerReports {
    /// Who deleted the job's message: the `by` of each `deleted <message> by <by>` line.
    pub deletions: Vec<String>,
    /// Every operation seen to end, from the `op` lines.
    pub history: History,
}

impl WorkerReports {
    /// Takes in one line of a worker's output; lines of other kinds are left alone.
    pub fn record(&mut self, line: &str) {
        if let Some((_, by)) = line
            .strip_prefix("deleted ")
            .and_then(|rest| rest.split_once(" by "))
        {
            self.deletions.push(by.to_owned());
        }
        self.history.record(line);
    }
}

/// Audits run `names` of `plan` from its stores, the gateway's journal at `journal`, the job
/// queue and what its workers `reported`.
pub async fn audit(
    names: &RunNames,
    plan: &RunPlan,
    clients: &Clients,
    journal: &Path,
    reported: &WorkerReports,
) -> Result<AuditReport, AuditError> {
    let mut auditor = Auditor {
        report: AuditReport::default(),
        names,
        clients,
        stores: RunStores::new(names, clients, plan.lease)?,
        expected: (0..plan.sizing.refunds).map(RunPlan::refund_key).collect(),
        references: HashMap::new(),
        refund_fences: HashMap::new(),
    };
    auditor.gateway(journal)?;
    auditor.refunds().await?;
    auditor.ledger().await?;
    auditor.receipts().await?;
    auditor.job(&reported.deletions).await?;
    let Auditor {
        mut report,
        expected,
        ..
    } = auditor;
    report.violations.extend(reported.history.violations());
    let total = plan.total_cents();
    if report.sent != expected.len() {
        let detail = format!("{} of {} refunds sent", report.sent, expected.len());
        report.violation(Check::Totals, None, detail);
    }
    for (what, cents) in [
        ("paid", report.paid_cents),
        ("recorded", report.recorded_cents),
    ] {
        if cents != total {
            let detail = format!("{} {what}, expected {}", euros(cents), euros(total));
            report.violation(Check::Totals, None, detail);
        }
    }
    Ok(report)
}

/// One audit under way: what it reads and what it found so far.
struct Auditor<'a> {
    report: AuditReport,
    names: &'a RunNames,
    clients: &'a Clients,
    /// The run's stores, whose refunds and job tables it reads plainly.
    stores: RunStores,
    expected: Vec<String>,
    /// The gateway's reference of every refund it created.
    references: HashMap<String, String>,
    /// Every refund's fence, as its table holds it.
    refund_fences: HashMap<String, i64>,
}

impl Auditor<'_> {
    fn gateway(&mut self, journal: &Path) -> Result<(), AuditError> {
        let mut created: HashMap<String, Vec<(String, i64)>> = HashMap::new();
        for entry in read_journal(journal)? {
            match entry.outcome {
                Outcome::Created => created.entry(entry.key).or_default().push((
                    entry.reference.unwrap_or_default(),
                    entry.amount_cents.unwrap_or_default(),
                )),
                Outcome::Replayed => self.report.repeated_calls += 1,
                _ => {}
            }
        }

        for key in &self.expected.clone() {
            match created.remove(key).as_deref() {
                Some([(reference, cents)]) => {
                    self.report.paid_cents += cents;
                    if *cents != REFUND_CENTS {
                        self.report.violation(
                            Check::CreatedOnce,
                            Some(key),
                            format!("created for {cents} cents"),
                        );
                    }
                    self.references.insert(key.clone(), reference.clone());
                }
                None => self
                    .report
                    .violation(Check::CreatedOnce, Some(key), "never created"),
                Some(many) => {
                    self.report.paid_cents += many.iter().map(|(_, c)| c).sum::<i64>();
                    self.report.violation(
                        Check::CreatedOnce,
                        Some(key),
                        format!("created {} times", many.len()),
                    );
                }
            }
        }
        for key in created.keys() {
            self.report
                .violation(Check::CreatedOnce, Some(key), "created, but no such refund");
        }
        Ok(())
    }

    async fn refunds(&mut self) -> Result<(), AuditError> {
        let rows = self.stores.refunds.refund_rows().await?;
        let by_key: HashMap<&str, &RefundRow> = rows.iter().map(|r| (r.id.as_str(), r)).collect();
        for key in &self.expected.clone() {
            let Some(row) = by_key.get(key.as_str()) else {
                self.report
                    .violation(Check::Totals, Some(key), "the refund row is gone");
                continue;
            };
            let state = &row.state;
            if state != "sent" || !row.filed {
                self.report.violation(
                    Check::Totals,
                    Some(key),
                    format!("left {state}, filed {}", row.filed),
                );
            }
            if state != "sent" {
                continue;
            }
            self.report.sent += 1;
            self.refund_fences.insert(key.clone(), row.fence);
            let (claimed, confirmed) = (&row.claimed_by, &row.confirmed_by);
            if claimed != confirmed {
                self.report.violation(
                    Check::ConfirmedByClaimer,
                    Some(key),
                    format!("claimed by {claimed:?}, confirmed by {confirmed:?}"),
                );
            }
            let recorded = &row.gateway_ref;
            if recorded.as_ref() != self.references.get(key) {
                self.report.violation(
                    Check::ConfirmedByClaimer,
                    Some(key),
                    format!(
                        "reference {recorded:?}, the gateway's {:?}",
                        self.references.get(key)
                    ),
                );
            }
        }
        let history = self.stores.refunds.refund_fence_history().await?;
        let mut highest: HashMap<String, i64> = HashMap::new();
        for (key, fence) in history {
            let before = highest.entry(key.clone()).or_insert(fence);
            if fence < *before {
                self.report.violation(
                    Check::FenceNeverDown,
                    Some(&key),
                    format!("refund fence {before} then {fence}"),
                );
            }
            *before = (*before).max(fence);
        }
        Ok(())
    }

    async fn job(&mut self, deletions: &[String]) -> Result<(), AuditError> {
        let finishers = self.stores.job.finishers().await?;
        let finished_by = self.stores.job.finished_by(JOB).await?;
        let violation = |report: &mut AuditReport, detail: String| {
            report.violation(Check::JobDeletedOnce, None, detail)
        };
        if finishers.len() > 1 {
            violation(
                &mut self.report,
                format!("finished by each of {finishers:?}"),
            );
        }
        let Some(finisher) = finished_by else {
            violation(&mut self.report, "never finished".to_owned());
            return Ok(());
        };
        let depth = self.clients.job_queue(self.names).await?.depth().await?;
        if depth.visible + depth.in_flight > 0 {
            violation(
                &mut self.report,
                format!("the message is still queued: {depth:?}"),
            );
        }
        // Besides the finisher's own delete, a worker that received the message again and
        // found the job finished deletes it too: SQS delivers at least once, and a message
        // that came back while the finisher held it is deleted by each who saw it.
        let after_finish = format!(", finished by {finisher}");
        let by_finisher = deletions.iter().filter(|by| **by == finisher).count();
        let by_others: Vec<&String> = deletions
            .iter()
            .filter(|by| **by != finisher && !by.ends_with(&after_finish))
            .collect();
        if deletions.is_empty() || by_finisher > 1 || !by_others.is_empty() {
            violation(
                &mut self.report,
                format!("deleted by {deletions:?}, finished by {finisher}"),
            );
        }
        Ok(())
    }

    async fn ledger(&mut self) -> Result<(), AuditError> {
        let mut entries: BTreeMap<String, serde_json::Value> = BTreeMap::new();
        let mut pages = self
            .clients
            .dynamodb
            .scan()
            .table_name(self.names.ledger_table())
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            for item in page?.items() {
                let Some(AttributeValue::S(key)) = item.get("id") else {
                    self.report.violation(
                        Check::LedgerEntry,
                        None,
                        format!("an item without an id: {item:?}"),
                    );
                    continue;
                };
                let entry = match item.get("payload") {
                    Some(AttributeValue::B(bytes)) => serde_json::from_slice(bytes.as_ref()).ok(),
                    _ => None,
                };
                let fence = match item.get("fence") {
                    Some(AttributeValue::N(n)) => n.parse::<i64>().ok(),
                    _ => None,
                };
                match entry {
                    Some(entry) => {
                        self.compare_fence(key, "ledger entry", fence);
                        entries.insert(key.clone(), entry);
                    }
                    None => {
                        self.report
                            .violation(Check::LedgerEntry, Some(key), "no readable entry")
                    }
                }
            }
        }
        for key in &self.expected.clone() {
            let Some(entry) = entries.remove(key) else {
                self.report
                    .violation(Check::LedgerEntry, Some(key), "missing");
                continue;
            };
            let cents = entry["amount_cents"].as_i64().unwrap_or_default();
            self.report.recorded_cents += cents;
            if cents != REFUND_CENTS
                || entry["reference"].as_str() != self.references.get(key).map(String::as_str)
            {
                self.report
                    .violation(Check::LedgerEntry, Some(key), format!("entry {entry}"));
            }
        }
        for key in entries.keys() {
            self.report
                .violation(Check::LedgerEntry, Some(key), "an entry for no such refund");
        }
        Ok(())
    }

    /// Compares `what`'s fence with the sent refund's.
    fn compare_fence(&mut self, key: &str, what: &str, fence: Option<i64>) {
        if let Some(refund) = self.refund_fences.get(key).copied()
            && fence != Some(refund)
        {
            let detail = format!("{what} fence {fence:?}, the refund's {refund}");
            self.report
                .violation(Check::OneFilerToken, Some(key), detail);
        }
    }

    /// Every version of every receipt in the bucket, newest first within a key (as S3 lists
    /// them).
    async fn receipt_versions(
        &self,
        bucket: &str,
    ) -> Result<BTreeMap<String, Vec<String>>, AuditError> {
        let mut versions: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let (mut key_marker, mut version_marker) = (None, None);
        loop {
            let page = self
                .clients
                .s3
                .list_object_versions()
                .bucket(bucket)
                .set_key_marker(key_marker.take())
                .set_version_id_marker(version_marker.take())
                .send()
                .await?;
            for version in page.versions() {
                if let (Some(key), Some(id)) = (version.key(), version.version_id()) {
                    versions
                        .entry(key.to_owned())
                        .or_default()
                        .push(id.to_owned());
                }
            }
            if page.is_truncated() != Some(true) {
                return Ok(versions);
            }
            key_marker = page.next_key_marker().map(str::to_owned);
            version_marker = page.next_version_id_marker().map(str::to_owned);
        }
    }

    async fn receipts(&mut self) -> Result<(), AuditError> {
        let bucket = self.names.receipts_bucket();
        let mut versions = self.receipt_versions(&bucket).await?;
        for key in &self.expected.clone() {
            let Some(ids) = versions.remove(key) else {
                self.report.violation(Check::Receipt, Some(key), "missing");
                continue;
            };
            let mut newer_fence = u64::MAX;
            for (age, id) in ids.iter().enumerate() {
                let object = self
                    .clients
                    .s3
                    .get_object()
                    .bucket(&bucket)
                    .key(key)
                    .version_id(id)
                    .send()
                    .await?;
                let body = object.body.collect().await?.into_bytes();
                let Some((fence, payload)) = envelope(&body) else {
                    self.report.violation(
                        Check::Receipt,
                        Some(key),
                        format!("version {id} is not an envelope"),
                    );
                    continue;
                };
                if fence > newer_fence {
                    self.report.violation(
                        Check::FenceNeverDown,
                        Some(key),
                        format!("receipt fence {fence} then {newer_fence}"),
                    );
                }
                newer_fence = fence;
                if age == 0 {
                    self.compare_fence(key, "receipt", i64::try_from(fence).ok());
                    let text = String::from_utf8_lossy(payload);
                    let reference = self.references.get(key).map(String::as_str).unwrap_or("?");
                    if !text.contains(&format!("gateway reference {reference},")) {
                        self.report.violation(
                            Check::Receipt,
                            Some(key),
                            format!("receipt says {text:?}"),
                        );
                    }
                }
            }
        }
        for key in versions.keys() {
            self.report
                .violation(Check::Receipt, Some(key), "a receipt for no such refund");
        }
        Ok(())
    }
}

/// The fence and payload of an envelope (`docs/envelope.md`, version 1), read by hand.
fn envelope(body: &[u8]) -> Option<(u64, &[u8])> {
    if body.len() < 39 || &body[..5] != b"FNCE\x01" {
        return None;
    }
    let fence = u64::from_be_bytes(body[6..14].try_into().ok()?);
    let state_len = body[30] as usize;
    let payload = body.get(39 + state_len..)?;
    Some((fence, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_envelope_is_read_by_hand_as_the_format_says() {
        let record = fencing_core::Record {
            key: fencing_core::RecordKey::new("r_0815").unwrap(),
            fence: Some(fencing_core::FencingToken::new(34).unwrap()),
            state: Some(fencing_core::State::new("sent").unwrap()),
            payload: b"refund r_0815".to_vec(),
        };
        let body = fencing_core::adapter::envelope::encode(
            &record,
            fencing_core::adapter::WriteId::random(),
        );
        assert_eq!(envelope(&body), Some((34, &b"refund r_0815"[..])));
        assert_eq!(envelope(b"not an envelope at all, not at all, no"), None);
    }

    #[test]
    fn the_workers_lines_give_deletions_and_the_history() {
        let mut reported = WorkerReports::default();
        for line in [
            "received 7f1 (receive 1)",
            "acquired A#1 token 33",
            "op acquire 0 10 A#1 token 33",
            "filed r_0001",
            "op acquire 100 110 B#1 token 34",
            "op write 120 130 B#1 refunds r_0001 claim token 34: accepted",
            "deleted 7f1 by B#1",
        ] {
            reported.record(line);
        }
        assert_eq!(reported.deletions, ["B#1"]);
        assert_eq!(reported.history.acquisitions.len(), 2);
        assert_eq!(reported.history.writes.len(), 1);
    }
}
