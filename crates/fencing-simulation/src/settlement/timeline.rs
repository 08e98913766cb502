use std::collections::BTreeMap;
use std::time::Duration;

use fencing_core::{FenceCheck, RecordKey};

use super::SettlementReport;
use super::gateway::CallResult;
use super::journal::{Event, What};

/// How many notable lines of one kind per worker are printed before the rest are counted.
const SAME_KIND_SHOWN: usize = 4;

#[derive(Clone, Copy, PartialEq, Eq)]
enum RunKind {
    Sent,
    Recovered,
    Skipped,
}

struct Run {
    kind: RunKind,
    first: RecordKey,
    last: RecordKey,
    count: usize,
    from: Duration,
    to: Duration,
}

impl SettlementReport {
    /// The journal as lines a person can read: clock time from 10:00:00.000, runs of routine
    /// refunds folded into ranges, and repeated notable lines of one kind counted after a few.
    pub fn timeline(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let mut runs: BTreeMap<String, Run> = BTreeMap::new();
        let mut shown: BTreeMap<(String, &'static str), usize> = BTreeMap::new();
        for event in &self.events {
            if let Some(kind) = routine_run(&event.what) {
                extend_run(&mut runs, &mut lines, event, kind);
                continue;
            }
            let Some((label, text)) = describe(&event.what) else {
                continue;
            };
            let seen = shown.entry((event.worker.clone(), label)).or_default();
            *seen += 1;
            if *seen <= SAME_KIND_SHOWN {
                flush_runs(&mut runs, &mut lines);
                lines.push(format!("{}  {} {text}", clock(event.at), event.worker));
            }
        }
        flush_runs(&mut runs, &mut lines);
        for ((worker, label), count) in shown {
            if count > SAME_KIND_SHOWN {
                lines.push(format!(
                    "              … and {} more times: {worker} {label}",
                    count - SAME_KIND_SHOWN
                ));
            }
        }
        lines
    }
}

fn routine_run(what: &What) -> Option<RunKind> {
    match what {
        What::Sent { .. } => Some(RunKind::Sent),
        What::Recovered { .. } => Some(RunKind::Recovered),
        What::Skipped { .. } => Some(RunKind::Skipped),
        _ => None,
    }
}

fn key_of(what: &What) -> &RecordKey {
    match what {
        What::Sent { key } | What::Recovered { key } | What::Skipped { key } => key,
        _ => unreachable!("only runs have keys here"),
    }
}

fn extend_run(
    runs: &mut BTreeMap<String, Run>,
    lines: &mut Vec<String>,
    event: &Event,
    kind: RunKind,
) {
    let key = key_of(&event.what);
    if let Some(run) = runs.get_mut(&event.worker) {
        if run.kind == kind {
            run.last = key.clone();
            run.count += 1;
            run.to = event.at;
            return;
        }
        let run = runs.remove(&event.worker).expect("present");
        lines.push(render_run(&event.worker, &run));
    }
    runs.insert(
        event.worker.clone(),
        Run {
            kind,
            first: key.clone(),
            last: key.clone(),
            count: 1,
            from: event.at,
            to: event.at,
        },
    );
}

fn flush_runs(runs: &mut BTreeMap<String, Run>, lines: &mut Vec<String>) {
    for (worker, run) in std::mem::take(runs) {
        lines.push(render_run(&worker, &run));
    }
}

fn render_run(worker: &str, run: &Run) -> String {
    let verb = match run.kind {
        RunKind::Sent => "claims, refunds and confirms",
        RunKind::Recovered => "confirms, finding the refund already made:",
        RunKind::Skipped => "skips, already sent:",
    };
    let span = if run.count == 1 {
        format!("{}", run.first)
    } else {
        format!("{} … {} ({} refunds)", run.first, run.last, run.count)
    };
    format!(
        "{}  {worker} {verb} {span}, until {}",
        clock(run.from),
        clock(run.to)
    )
}

/// A label (for counting repeats) and the sentence, or `None` for routine events not shown.
fn describe(what: &What) -> Option<(&'static str, String)> {
    Some(match what {
        What::Accepted { .. } | What::Refused { .. } => return describe_write(what),
        What::Called { key, result } => return describe_call(key, result),
        What::Acquired { token } => ("acquires", format!("acquires the lease, token {token}")),
        What::Busy => ("gives up", "gives up: the lease stays busy".into()),
        What::Sent { .. }
        | What::Recovered { .. }
        | What::Skipped { .. }
        | What::Released { .. } => return None,
        What::Paused { key, length } => (
            "stalls",
            format!(
                "stalls before the gateway call for {key} ({} s)",
                length.as_secs_f64()
            ),
        ),
        What::Resumed { key } => (
            "wakes",
            format!("wakes up believing it still holds the lease; calls the gateway for {key}"),
        ),
        What::LookedUp { key, found } => (
            "asks the gateway",
            format!(
                "asks the gateway whether {key} was refunded: {}",
                if *found { "yes" } else { "no" }
            ),
        ),
        What::Aborted { key, .. } => (
            "abandons",
            format!("abandons the batch at {key}, claiming nothing further"),
        ),
        What::Finished => ("finishes", "finishes the batch".into()),
    })
}

/// The fenced writes worth a line: a stale write accepted, a take-over, a refusal.
fn describe_write(what: &What) -> Option<(&'static str, String)> {
    let check_name = |check: &FenceCheck| match check {
        FenceCheck::Claim => "claim",
        FenceCheck::HolderOnly => "confirm",
    };
    Some(match what {
        What::Accepted {
            key,
            check,
            token,
            stale: true,
            ..
        } => (
            "stale write accepted",
            format!(
                "has its {} of {key} with token {token} ACCEPTED although a newer holder claimed it",
                check_name(check)
            ),
        ),
        What::Accepted {
            key,
            token,
            took_over_from: Some(_),
            ..
        } => (
            "takes over",
            format!("claims {key} with token {token}, taking it over from a holder in flight"),
        ),
        What::Refused {
            key,
            check,
            token,
            reason,
            ..
        } => (
            "refused",
            format!(
                "is refused on its {} of {key} with token {token}: {reason}",
                check_name(check)
            ),
        ),
        _ => return None,
    })
}

/// The gateway calls worth a line: a refund returned by its idempotency key, or paid twice.
fn describe_call(key: &RecordKey, result: &CallResult) -> Option<(&'static str, String)> {
    Some(match result {
        CallResult::Created => return None,
        CallResult::ReturnedExisting => (
            "gateway returns existing",
            format!(
                "gets the refund already made for {key} back from the gateway (idempotency key)"
            ),
        ),
        CallResult::PaidTwice => (
            "pays twice",
            format!("makes the gateway PAY {key} A SECOND TIME"),
        ),
    })
}

/// Time since the start as the worked example's wall clock, from 10:00:00.000.
fn clock(at: Duration) -> String {
    let millis = at.as_millis();
    let (secs, ms) = (millis / 1000, millis % 1000);
    format!("10:{:02}:{:02}.{ms:03}", secs / 60, secs % 60)
}
