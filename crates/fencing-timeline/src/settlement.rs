//! The worked example's settlement ([`fencing_simulation::settlement`]) as a timeline, in its
//! virtual time.

use std::collections::HashMap;
use std::time::Duration;

use fencing_core::FenceCheck;
use fencing_simulation::Fencing;
use fencing_simulation::settlement::{CallResult, SettlementConfig, SettlementReport, What};

use crate::timeline::{Mark, TimeLabels, Timeline};

/// The run `report` of `config` as a timeline: a lane per worker, its lease from grant to
/// release (or to its expiry, one TTL after the grant, when the release found it lost: the
/// simulation's workers do not renew), its stalls, its runs of accepted writes, every refusal,
/// take-over and look-up, and the gateway's answers that were not a new refund.
pub fn settlement(config: &SettlementConfig, report: &SettlementReport) -> Timeline {
    let mut timeline = Timeline::new(title(config), TimeLabels::WORKED_EXAMPLE);
    let mut granted: HashMap<&str, Duration> = HashMap::new();
    for event in &report.events {
        let lane = format!("worker {}", event.worker);
        let at = event.at;
        match &event.what {
            What::Acquired { token } => {
                granted.insert(&event.worker, at);
                timeline.acquired(&lane, at, *token);
            }
            What::Busy => timeline.mark(&lane, at, Mark::note("gives up: the lease stays busy")),
            What::Accepted { .. } | What::Refused { .. } => {
                mark_write(&mut timeline, &lane, at, &event.what);
            }
            What::Paused { length, .. } => {
                timeline.mark(&lane, at, Mark::Stalled { length: *length });
            }
            What::LookedUp { key, found } => {
                let mark = Mark::LookedUp {
                    record: key.as_str().to_owned(),
                    found: *found,
                };
                timeline.mark(&lane, at, mark);
            }
            What::Called { key, result } => {
                let text = match result {
                    CallResult::Created => continue,
                    CallResult::ReturnedExisting => "the gateway returns the refund already made",
                    CallResult::PaidTwice => "the gateway PAYS A SECOND TIME",
                };
                timeline.mark(&lane, at, Mark::note_on(text, key.as_str()));
            }
            What::Aborted { key, .. } => {
                timeline.mark(&lane, at, Mark::note_on("abandons the batch", key.as_str()));
                timeline.stopped(&lane, at);
            }
            What::Released { held } => {
                let ended = match (held, granted.get(event.worker.as_str())) {
                    (false, Some(from)) => *from + config.ttl.duration(),
                    _ => at,
                };
                timeline.lease_ended(&lane, ended);
                timeline.stopped(&lane, at);
            }
            What::Resumed { .. }
            | What::Sent { .. }
            | What::Recovered { .. }
            | What::Skipped { .. }
            | What::Finished => {}
        }
    }
    timeline
}

/// The title: the merchant, the refunds, the lease and whether fences were on.
fn title(config: &SettlementConfig) -> String {
    format!(
        "Settlement of merchant {}: {} refunds under the lease on {} (TTL {} s), fences {}",
        config.merchant,
        config.refunds,
        config.resource(),
        config.ttl.duration().as_secs(),
        match config.fencing {
            Fencing::On => "on",
            Fencing::Off => "OFF (every write presents token 1)",
        }
    )
}

/// An accepted write (with its take-over, if it took one over) or a refusal, on `lane`.
fn mark_write(timeline: &mut Timeline, lane: &str, at: Duration, what: &What) {
    match what {
        What::Accepted {
            store,
            key,
            token,
            took_over_from,
            stale,
            ..
        } => {
            timeline.accepted(lane, at, store, key.as_str(), *stale);
            if took_over_from.is_some() {
                let mark = Mark::TookOver {
                    store: store.clone(),
                    record: key.as_str().to_owned(),
                    token: *token,
                };
                timeline.mark(lane, at, mark);
            }
        }
        What::Refused {
            store,
            key,
            check,
            token,
            met,
            ..
        } => {
            let mark = Mark::Refused {
                store: store.clone(),
                record: key.as_str().to_owned(),
                write: Some(write_name(*check).to_owned()),
                token: *token,
                met: met.clone(),
            };
            timeline.mark(lane, at, mark);
        }
        _ => {}
    }
}

fn write_name(check: FenceCheck) -> &'static str {
    match check {
        FenceCheck::Claim => "claim",
        FenceCheck::HolderOnly => "confirm",
    }
}
