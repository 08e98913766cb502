//! A run's picture (`fencing_timeline`), drawn from what the campaign saw, in wall time since
//! the run began: each worker's lines (its acquisitions, claims, filings, and the library's
//! refusals, take-overs and look-ups it prints) and the faults the campaign injected.

use std::time::Duration;

use fencing_core::FencingToken;
use fencing_harness::plan::RunPlan;
use fencing_timeline::{Mark, TimeLabels, Timeline};

/// The stores a worker writes, as the picture names them.
const REFUNDS: &str = "refunds (PostgreSQL)";
const LEDGER: &str = "ledger (DynamoDB)";
const RECEIPTS: &str = "receipts (S3)";
/// The lane of faults that strike no one worker.
const SERVICES: &str = "services";

/// A run's timeline as it happens.
#[derive(Debug)]
pub(crate) struct RunPicture {
    timeline: Timeline,
    ttl: Duration,
    fences: bool,
    /// The workers whose latest lease is not known to have ended, by lane.
    holding: Vec<String>,
}

fn lane(worker: &str) -> String {
    format!("worker {worker}")
}

impl RunPicture {
    pub(crate) fn new(plan: &RunPlan) -> Self {
        let title = format!(
            "Harness run, seed {}: {} refunds, {} lease (TTL {} ms), fences {}{}{}",
            plan.seed,
            plan.sizing.refunds,
            plan.lease.name(),
            plan.sizing.ttl.as_millis(),
            if plan.fences { "on" } else { "OFF" },
            if plan.counter_binding {
                ""
            } else {
                ", counter binding OFF"
            },
            if plan.concurrency > 1 {
                format!(", {} refunds in flight", plan.concurrency)
            } else {
                String::new()
            }
        );
        RunPicture {
            timeline: Timeline::new(title, TimeLabels::Elapsed),
            ttl: plan.sizing.ttl,
            fences: plan.fences,
            holding: Vec::new(),
        }
    }

    /// The timeline so far.
    pub(crate) fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    /// Whether `lane` writes after another worker was granted the lease: with fences on, the
    /// stores decide what such a write may do; with fences off nothing stops it.
    fn stale(&self, lane: &str) -> bool {
        !self.fences && !self.holding.iter().any(|l| l == lane)
    }

    /// A line `worker` printed, `at` since the run began.
    pub(crate) fn line(&mut self, at: Duration, worker: &str, line: &str) {
        let lane = lane(worker);
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["acquired", _, "token", token] => {
                let Some(token) = token.parse().ok().and_then(|t| FencingToken::new(t).ok()) else {
                    return;
                };
                // A new grant proves every earlier lease over.
                for holder in std::mem::take(&mut self.holding) {
                    self.timeline.lease_ended(&holder, at);
                }
                self.timeline.acquired(&lane, at, token);
                self.holding.push(lane);
            }
            ["claimed", record] => {
                let stale = self.stale(&lane);
                self.timeline.accepted(&lane, at, REFUNDS, record, stale);
            }
            ["filed", record] => {
                let stale = self.stale(&lane);
                for store in [LEDGER, RECEIPTS, REFUNDS] {
                    self.timeline.accepted(&lane, at, store, record, stale);
                }
            }
            ["refused", store, record, kind, "token", token_met @ ..] => {
                let joined = token_met.join(" ");
                let Some((token, met)) = joined.split_once(": ") else {
                    return;
                };
                let Some(token) = token.parse().ok().and_then(|t| FencingToken::new(t).ok()) else {
                    return;
                };
                let write = match *kind {
                    "holder_only" => "confirm",
                    other => other,
                };
                let mark = Mark::Refused {
                    store: (*store).to_owned(),
                    record: (*record).to_owned(),
                    write: Some(write.to_owned()),
                    token,
                    met: met.to_owned(),
                };
                self.timeline.mark(&lane, at, mark);
            }
            ["took", "over", store, record, "token", token] => {
                if let Some(token) = token.parse().ok().and_then(|t| FencingToken::new(t).ok()) {
                    let mark = Mark::TookOver {
                        store: (*store).to_owned(),
                        record: (*record).to_owned(),
                        token,
                    };
                    self.timeline.mark(&lane, at, mark);
                }
            }
            ["looked", "up", record, found @ ..] => {
                let mark = Mark::LookedUp {
                    record: (*record).to_owned(),
                    found: found == ["found"],
                };
                self.timeline.mark(&lane, at, mark);
            }
            ["ended", ..] => {
                if line.ends_with("Ok(Released)") {
                    self.timeline.lease_ended(&lane, at);
                    self.holding.retain(|l| *l != lane);
                }
                self.timeline.stopped(&lane, at);
            }
            _ => {}
        }
    }

    /// The campaign stopped `worker` for `pause` from `at`: its renewals stopped too, so a
    /// stall past the TTL ended its lease within a TTL of the stall's start.
    pub(crate) fn stalled(&mut self, at: Duration, worker: &str, pause: Duration) {
        let lane = lane(worker);
        self.timeline
            .mark(&lane, at, Mark::Stalled { length: pause });
        if pause > self.ttl {
            self.timeline.lease_ended(&lane, at + self.ttl);
        }
    }

    /// The campaign cut `worker` off from `server` for `pause` from `at`: the process runs,
    /// and what it sends waits in the network until the partition heals.
    pub(crate) fn partitioned(
        &mut self,
        at: Duration,
        worker: &str,
        server: &str,
        pause: Duration,
    ) {
        self.timeline.mark(
            &lane(worker),
            at,
            Mark::note(format!(
                "cut off from {server} for {} ms",
                pause.as_millis()
            )),
        );
    }

    /// The campaign set `worker`'s wall clock `offset_ms` off (behind when negative) for
    /// `lasting` from `at`.
    pub(crate) fn clock_jumped(
        &mut self,
        at: Duration,
        worker: &str,
        offset_ms: i64,
        lasting: Duration,
    ) {
        let off = Duration::from_millis(offset_ms.unsigned_abs());
        self.timeline.mark(
            &lane(worker),
            at,
            Mark::note(format!(
                "clock {} ms {} for {} ms",
                off.as_millis(),
                if offset_ms < 0 { "behind" } else { "ahead" },
                lasting.as_millis()
            )),
        );
    }

    /// The campaign killed `worker`.
    pub(crate) fn killed(&mut self, at: Duration, worker: &str) {
        let lane = lane(worker);
        self.timeline.mark(&lane, at, Mark::Killed);
        self.timeline.stopped(&lane, at);
    }

    /// `worker`'s process exited.
    pub(crate) fn exited(&mut self, at: Duration, worker: &str) {
        self.timeline.stopped(&lane(worker), at);
    }

    /// A fault that struck a service, not one worker.
    pub(crate) fn service_fault(&mut self, at: Duration, what: &str) {
        self.timeline.mark(SERVICES, at, Mark::note(what));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencing_harness::plan::Sizing;
    use fencing_timeline::Tenure;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn token(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap()
    }

    fn plan(fences: bool) -> RunPlan {
        let sizing = Sizing {
            refunds: 20,
            ttl: ms(800),
        };
        RunPlan::from_seed(1000, fences, sizing, false)
    }

    #[test]
    fn a_stalled_holder_refused_after_a_take_over_is_drawn_from_the_lines() {
        let mut p = RunPicture::new(&plan(true));
        p.line(ms(10), "A", "received m-1 (receive 1)");
        p.line(ms(20), "A", "acquired A#1 token 3");
        p.line(ms(30), "A", "claimed r_0001");
        p.line(ms(40), "A", "filed r_0001");
        p.line(ms(50), "A", "claimed r_0002");
        p.stalled(ms(60), "A", ms(1_500));
        p.line(ms(1_000), "B", "acquired B#1 token 4");
        p.line(ms(1_010), "B", "took over refunds r_0002 token 4");
        p.line(ms(1_020), "B", "looked up r_0002 not found");
        p.line(ms(1_030), "B", "filed r_0002");
        p.line(
            ms(1_600),
            "A",
            "refused refunds r_0002 holder_only token 3: fence is 4",
        );
        p.line(ms(1_601), "A", "ended A#1: refunds: write to \"r_0002\" …");
        p.line(
            ms(2_000),
            "B",
            "ended B#1: 1 filed, job finished, Ok(Released)",
        );
        let t = p.timeline();
        let [a, b] = t.lanes() else {
            panic!("{:?}", t.lanes());
        };
        assert_eq!(
            a.tenures,
            [Tenure {
                token: token(3),
                from: ms(20),
                lease_until: Some(ms(860)),
                acted_until: Some(ms(1_601)),
            }]
        );
        assert_eq!(b.tenures[0].lease_until, Some(ms(2_000)));
        assert_eq!(a.stores(), [REFUNDS, LEDGER, RECEIPTS]);
        let labels: Vec<String> = a.moments.iter().map(|m| m.mark.label()).collect();
        assert_eq!(
            labels,
            [
                "stalls 1.5 s",
                "REFUSED by refunds: confirm r_0002 with token 3: fence is 4"
            ]
        );
        let b_labels: Vec<String> = b.moments.iter().map(|m| m.mark.label()).collect();
        assert_eq!(
            b_labels,
            [
                "takes r_0002 over in refunds with token 4",
                "looks r_0002 up: not done"
            ]
        );
        assert!(a.writes.iter().chain(&b.writes).all(|w| !w.stale));
    }

    #[test]
    fn without_fences_writes_after_another_grant_are_stale() {
        let mut p = RunPicture::new(&plan(false));
        p.line(ms(0), "A", "acquired A#1 token 1");
        p.line(ms(10), "A", "claimed r_0001");
        p.line(ms(20), "B", "acquired B#1 token 1");
        p.line(ms(30), "A", "filed r_0001");
        p.line(ms(40), "B", "claimed r_0002");
        let t = p.timeline();
        let stale: Vec<(&str, bool)> = t
            .lanes()
            .iter()
            .flat_map(|l| l.writes.iter().map(|w| (w.first.as_str(), w.stale)))
            .collect();
        assert_eq!(
            stale,
            [
                ("r_0001", false),
                ("r_0001", true),
                ("r_0001", true),
                ("r_0001", true),
                ("r_0002", false)
            ]
        );
        assert_eq!(t.lanes()[0].tenures[0].lease_until, Some(ms(20)));
    }

    #[test]
    fn kills_exits_and_service_faults_are_marked() {
        let mut p = RunPicture::new(&plan(true));
        p.line(ms(0), "A", "acquired A#1 token 1");
        p.killed(ms(100), "A");
        p.service_fault(ms(150), "Redis restarted, nothing persisted");
        p.line(ms(200), "C", "acquired C#1 token 2");
        p.exited(ms(300), "C");
        let t = p.timeline();
        let names: Vec<&str> = t.lanes().iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["worker A", "services", "worker C"]);
        assert_eq!(t.lanes()[0].tenures[0].acted_until, Some(ms(100)));
        assert_eq!(t.lanes()[0].tenures[0].lease_until, Some(ms(200)));
        assert_eq!(t.lanes()[2].tenures[0].acted_until, Some(ms(300)));
        assert_eq!(
            t.lanes()[1].moments[0].mark.label(),
            "Redis restarted, nothing persisted"
        );
        assert!(p.timeline().title().contains("seed 1000"));
    }
}
