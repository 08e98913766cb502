//! Every operation the workers invoked, with when it started, when it ended and how, checked
//! as a history (after Knossos and Porcupine, for the few properties the protocol promises),
//! not only the end state the audit reads from the stores.
//!
//! A worker prints one line per operation once it ended, its times read from the machine's
//! monotonic clock (one clock for every process, which a faked wall clock does not move):
//!
//! ```text
//! op acquire <invoked ns> <ended ns> <holder> token <t>
//! op write <invoked ns> <ended ns> <holder> <store> <record> <claim|holder_only> token <t>: <accepted|refused|unknown>
//! ```
//!
//! An operation that never ended (its process killed, its answer lost for good) has no line:
//! the rules below only draw conclusions from what was seen, so they never accuse a run of
//! what it may not have done. Operation `a` precedes `b` in real time when `a` ended before
//! `b` was invoked; otherwise they overlap and neither order is implied.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::checks::{Check, Violation};

/// Now on the machine's monotonic clock, in nanoseconds: the clock every `op` line is timed
/// by, the same in every process and not moved by setting (or faking) the wall clock.
pub fn now() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let nanos = i128::from(now.tv_sec) * 1_000_000_000 + i128::from(now.tv_nsec);
    u64::try_from(nanos).unwrap_or(0)
}

/// When an operation was invoked and when its outcome was seen, in nanoseconds of the
/// machine's monotonic clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// Invoked.
    pub invoked: u64,
    /// Ended.
    pub ended: u64,
}

impl Span {
    /// Whether this operation ended before `later` was invoked.
    pub fn precedes(self, later: Span) -> bool {
        self.ended < later.invoked
    }
}

/// An acquisition of the lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acquisition {
    /// Its span.
    pub span: Span,
    /// The holder it made (`<worker>#<n>`).
    pub holder: String,
    /// The token it was issued.
    pub token: u64,
}

/// How a write ended, as its holder saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The store applied it.
    Accepted,
    /// The store refused it, or it failed before it was sent.
    Refused,
    /// Sent, its answer never seen.
    Unknown,
}

/// A fenced write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// Its span, from its first attempt to its outcome.
    pub span: Span,
    /// The holder that made it.
    pub holder: String,
    /// The store's name.
    pub store: String,
    /// The record.
    pub record: String,
    /// Whether it may raise the fence (`claim`) or must find its own (`holder_only`).
    pub claim: bool,
    /// The token it presented.
    pub token: u64,
    /// How it ended.
    pub outcome: WriteOutcome,
}

/// The operations of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    /// Every acquisition seen to end, in the order the lines came.
    pub acquisitions: Vec<Acquisition>,
    /// Every write seen to end.
    pub writes: Vec<Write>,
}

impl History {
    /// Takes in one line of a worker's output; lines of other kinds are left alone, and so is
    /// an `op` line that does not parse (counted by nothing: the checks would only be weaker).
    pub fn record(&mut self, line: &str) {
        let Some(op) = line.strip_prefix("op ") else {
            return;
        };
        if let Some(rest) = op.strip_prefix("acquire ") {
            if let Some(acquisition) = acquisition(rest) {
                self.acquisitions.push(acquisition);
            }
        } else if let Some(rest) = op.strip_prefix("write ")
            && let Some(write) = write(rest)
        {
            self.writes.push(write);
        }
    }

    /// How long each hand-over of the lease took: from the last write accepted under one
    /// acquisition's token (or, with none, its end) to the end of the next acquisition, the
    /// same worker's or another's (zero when the old holder's
    /// last accepted write came after it). What a fault costs in liveness shows here: a holder
    /// stalled or cut off loses the rest of its TTL and the queue's redelivery; a lease stolen
    /// early hands over sooner.
    pub fn handovers(&self) -> Vec<Duration> {
        let mut acquisitions: Vec<&Acquisition> = self.acquisitions.iter().collect();
        acquisitions.sort_by_key(|a| a.span.ended);
        acquisitions
            .windows(2)
            .map(|pair| {
                let last_write = self
                    .writes
                    .iter()
                    .filter(|w| w.token == pair[0].token && w.outcome == WriteOutcome::Accepted)
                    .map(|w| w.span.ended)
                    .max()
                    .unwrap_or(pair[0].span.ended);
                Duration::from_nanos(pair[1].span.ended.saturating_sub(last_write))
            })
            .collect()
    }

    /// Every rule the history breaks.
    pub fn violations(&self) -> Vec<Violation> {
        let mut found = self.token_order();
        found.extend(self.one_holder_per_token());
        found.extend(self.no_stale_write_accepted());
        found.extend(self.confirms_after_own_claims());
        found
    }

    /// Tokens are unique, and rise in the real-time order of their acquisitions: the lease
    /// behaves as a linearizable counter.
    fn token_order(&self) -> Vec<Violation> {
        let mut found = Vec::new();
        for (i, a) in self.acquisitions.iter().enumerate() {
            for b in &self.acquisitions[i + 1..] {
                let (first, second) = if b.span.precedes(a.span) {
                    (b, a)
                } else {
                    (a, b)
                };
                let broken = if first.span.precedes(second.span) {
                    first.token >= second.token
                } else {
                    first.token == second.token
                };
                if broken {
                    found.push(violation(
                        Check::TokenOrder,
                        None,
                        format!(
                            "{} was issued token {}{} {} was issued token {}",
                            first.holder,
                            first.token,
                            if first.span.precedes(second.span) {
                                ", then"
                            } else {
                                " while"
                            },
                            second.holder,
                            second.token
                        ),
                    ));
                }
            }
        }
        found
    }

    /// No two holders had a write accepted under one token: a store can tell holders apart
    /// only by their tokens.
    fn one_holder_per_token(&self) -> Vec<Violation> {
        let mut holders: BTreeMap<u64, Vec<&str>> = BTreeMap::new();
        for write in self.accepted() {
            let of_token = holders.entry(write.token).or_default();
            if !of_token.contains(&write.holder.as_str()) {
                of_token.push(&write.holder);
            }
        }
        holders
            .into_iter()
            .filter(|(_, holders)| holders.len() > 1)
            .map(|(token, holders)| {
                let detail = format!(
                    "writes of {} accepted under token {token}",
                    holders.join(", ")
                );
                violation(Check::OneHolderPerToken, None, detail)
            })
            .collect()
    }

    /// Once a newer holder's claim on a record was accepted, no write an older holder invoked
    /// after it is accepted there: the fence's whole promise, seen from the clients. A holder
    /// is older than another when its acquisition ended before the other's was invoked.
    fn no_stale_write_accepted(&self) -> Vec<Violation> {
        let acquired: HashMap<&str, Span> = self
            .acquisitions
            .iter()
            .map(|a| (a.holder.as_str(), a.span))
            .collect();
        let older = |a: &str, b: &str| match (acquired.get(a), acquired.get(b)) {
            (Some(a), Some(b)) => a.precedes(*b),
            _ => false,
        };
        let mut found = Vec::new();
        let mut claims: HashMap<(&str, &str), Vec<&Write>> = HashMap::new();
        for write in self.accepted().filter(|w| w.claim) {
            claims
                .entry((&write.store, &write.record))
                .or_default()
                .push(write);
        }
        for write in self.accepted() {
            let newer_claim = claims
                .get(&(write.store.as_str(), write.record.as_str()))
                .into_iter()
                .flatten()
                .find(|claim| {
                    claim.span.precedes(write.span) && older(&write.holder, &claim.holder)
                });
            if let Some(claim) = newer_claim {
                let detail = format!(
                    "{} (token {}) had a write to {} accepted after {}'s claim (token {}) was",
                    write.holder, write.token, write.store, claim.holder, claim.token
                );
                found.push(violation(
                    Check::NoStaleWriteAccepted,
                    Some(&write.record),
                    detail,
                ));
            }
        }
        found
    }

    /// Every accepted holder-only write (a confirm) was invoked after its own holder's claim of
    /// the record was accepted.
    fn confirms_after_own_claims(&self) -> Vec<Violation> {
        // The end of each holder's first accepted claim of a record under a token.
        let mut first_claims: HashMap<(&str, u64, &str, &str), u64> = HashMap::new();
        for claim in self.accepted().filter(|w| w.claim) {
            let at = (
                claim.holder.as_str(),
                claim.token,
                claim.store.as_str(),
                claim.record.as_str(),
            );
            let ended = first_claims.entry(at).or_insert(claim.span.ended);
            *ended = (*ended).min(claim.span.ended);
        }
        self.accepted()
            .filter(|w| !w.claim)
            .filter(|confirm| {
                let at = (confirm.holder.as_str(), confirm.token, confirm.store.as_str(), confirm.record.as_str());
                first_claims
                    .get(&at)
                    .is_none_or(|&ended| ended >= confirm.span.invoked)
            })
            .map(|confirm| {
                let detail = format!(
                    "{} (token {}) had a holder-only write to {} accepted with no claim of its own before it",
                    confirm.holder, confirm.token, confirm.store
                );
                violation(Check::ConfirmAfterClaim, Some(&confirm.record), detail)
            })
            .collect()
    }

    fn accepted(&self) -> impl Iterator<Item = &Write> {
        self.writes
            .iter()
            .filter(|w| w.outcome == WriteOutcome::Accepted)
    }
}

fn violation(check: Check, record: Option<&str>, detail: String) -> Violation {
    Violation {
        check,
        refund: record.map(str::to_owned),
        detail,
    }
}

/// `<invoked> <ended> <rest>`.
fn span(text: &str) -> Option<(Span, &str)> {
    let (invoked, rest) = text.split_once(' ')?;
    let (ended, rest) = rest.split_once(' ')?;
    let span = Span {
        invoked: invoked.parse().ok()?,
        ended: ended.parse().ok()?,
    };
    (span.invoked <= span.ended).then_some((span, rest))
}

/// `<invoked> <ended> <holder> token <t>`.
fn acquisition(text: &str) -> Option<Acquisition> {
    let (span, rest) = span(text)?;
    let (holder, token) = rest.split_once(" token ")?;
    Some(Acquisition {
        span,
        holder: holder.to_owned(),
        token: token.parse().ok()?,
    })
}

/// `<invoked> <ended> <holder> <store> <record> <kind> token <t>: <outcome>`.
fn write(text: &str) -> Option<Write> {
    let (span, rest) = span(text)?;
    let (what, outcome) = rest.split_once(": ")?;
    let (what, token) = what.split_once(" token ")?;
    let mut words = what.split(' ');
    let (holder, store, record, kind) =
        (words.next()?, words.next()?, words.next()?, words.next()?);
    if words.next().is_some() {
        return None;
    }
    Some(Write {
        span,
        holder: holder.to_owned(),
        store: store.to_owned(),
        record: record.to_owned(),
        claim: match kind {
            "claim" => true,
            "holder_only" => false,
            _ => return None,
        },
        token: token.parse().ok()?,
        outcome: match outcome {
            "accepted" => WriteOutcome::Accepted,
            "refused" => WriteOutcome::Refused,
            "unknown" => WriteOutcome::Unknown,
            _ => return None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(lines: &[&str]) -> History {
        let mut history = History::default();
        for line in lines {
            history.record(line);
        }
        history
    }

    fn checks(history: &History) -> Vec<Check> {
        history.violations().into_iter().map(|v| v.check).collect()
    }

    /// The worked example as the workers report it: A (33) claims r_815 and stalls; B (34)
    /// acquires, claims and confirms it; A wakes and its confirm is refused.
    const FENCED: [&str; 7] = [
        "op acquire 0 10 A#1 token 33",
        "op write 20 30 A#1 refunds r_815 claim token 33: accepted",
        "op acquire 100 110 B#1 token 34",
        "op write 120 130 B#1 refunds r_815 claim token 34: accepted",
        "op write 140 150 B#1 refunds r_815 holder_only token 34: accepted",
        "op write 160 170 A#1 refunds r_815 holder_only token 33: refused",
        "received 1 (receive 1)",
    ];

    #[test]
    fn the_worked_example_breaks_no_rule() {
        let history = history(&FENCED);
        assert_eq!((history.acquisitions.len(), history.writes.len()), (2, 4));
        assert_eq!(checks(&history), []);
    }

    #[test]
    fn a_hand_over_lasts_from_the_old_holders_last_accepted_write_to_the_new_acquisition() {
        let mut history = history(&FENCED);
        // A's only accepted write ended at 30, B's acquisition at 110; A again at 300, after
        // B's last accepted write at 150; A once more at 410, nothing written under 35.
        history.record("op acquire 290 300 A#2 token 35");
        history.record("op acquire 400 410 A#3 token 36");
        let gaps: Vec<u64> = history
            .handovers()
            .iter()
            .map(|gap| gap.as_nanos() as u64)
            .collect();
        assert_eq!(gaps, [80, 150, 110]);
    }

    #[test]
    fn a_token_issued_twice_or_out_of_real_time_order_is_found() {
        let mut reissued = history(&FENCED);
        reissued.record("op acquire 200 210 C#1 token 34");
        assert_eq!(checks(&reissued), [Check::TokenOrder]);
        let mut behind = history(&FENCED);
        behind.record("op acquire 200 210 C#1 token 30");
        assert_eq!(checks(&behind), [Check::TokenOrder, Check::TokenOrder]);
        // Overlapping acquisitions may be issued in either order, but never one token.
        let overlapping = history(&[
            "op acquire 0 100 A#1 token 34",
            "op acquire 50 60 B#1 token 33",
        ]);
        assert_eq!(checks(&overlapping), []);
    }

    #[test]
    fn a_stale_write_accepted_after_a_newer_claim_is_found_and_one_in_flight_before_it_is_not() {
        let stale = FENCED[5].replace("refused", "accepted");
        let mut with_stale = history(&FENCED[..5]);
        with_stale.record(&stale);
        assert_eq!(checks(&with_stale), [Check::NoStaleWriteAccepted]);
        // Invoked before B's claim was accepted, A's write may have landed first.
        let mut in_flight = history(&FENCED[..5]);
        in_flight.record("op write 125 300 A#1 refunds r_815 holder_only token 33: accepted");
        assert_eq!(checks(&in_flight), []);
    }

    #[test]
    fn two_holders_accepted_under_one_token_are_found() {
        // The control: every acquisition presents token 1, and the stores accept both.
        let history = history(&[
            "op acquire 0 10 A#1 token 1",
            "op write 20 30 A#1 refunds r_815 claim token 1: accepted",
            "op acquire 100 110 B#1 token 1",
            "op write 120 130 B#1 refunds r_815 claim token 1: accepted",
            "op write 160 170 A#1 refunds r_815 holder_only token 1: accepted",
        ]);
        let found = checks(&history);
        for check in [
            Check::TokenOrder,
            Check::OneHolderPerToken,
            Check::NoStaleWriteAccepted,
        ] {
            assert!(found.contains(&check), "{check:?} in {found:?}");
        }
    }

    #[test]
    fn a_confirm_without_its_holders_claim_before_it_is_found() {
        let history = history(&[
            "op acquire 0 10 A#1 token 33",
            "op write 20 30 A#1 refunds r_815 holder_only token 33: accepted",
            "op write 40 50 A#1 refunds r_815 claim token 33: accepted",
        ]);
        assert_eq!(checks(&history), [Check::ConfirmAfterClaim]);
    }

    #[test]
    fn writes_refused_or_unknown_prove_nothing_and_malformed_lines_are_left_out() {
        let history = history(&[
            "op acquire 0 10 A#1 token 1",
            "op acquire 100 110 B#1 token 2",
            "op write 120 130 B#1 refunds r_815 claim token 2: accepted",
            "op write 140 150 A#1 refunds r_815 claim token 1: unknown",
            "op write 140 150 A#1 refunds r_815 claim token 1: refused",
            "op write 150 140 A#1 refunds r_815 claim token 1: accepted",
            "op write 140 150 A#1 refunds r_815 maybe token 1: accepted",
            "op write 140 150 A#1 refunds r_815 claim token x: accepted",
            "op acquire 1 2 C#1 token",
        ]);
        assert_eq!((history.acquisitions.len(), history.writes.len()), (2, 3));
        assert_eq!(checks(&history), []);
    }
}
