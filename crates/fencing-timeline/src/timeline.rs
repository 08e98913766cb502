//! What a picture shows: lanes of workers, each with its lease tenures, stalls, kills, runs of
//! accepted writes per store and marks for refusals, take-overs and look-ups, all on one clock.

use std::collections::BTreeMap;
use std::time::Duration;

use fencing_core::FencingToken;

/// How the time axis is labelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeLabels {
    /// A wall clock that reads `start` (time since midnight) when the run begins: the worked
    /// example's `10:00:00.000`, in its virtual time.
    TimeOfDay {
        /// The time of day at the run's start.
        start: Duration,
    },
    /// Seconds since the run began (a real run's wall time).
    Elapsed,
}

impl TimeLabels {
    /// The worked example's labels: `10:00:00` at the start.
    pub const WORKED_EXAMPLE: TimeLabels = TimeLabels::TimeOfDay {
        start: Duration::from_secs(10 * 3600),
    };

    /// `at` as these labels read it: whole seconds where it has no fraction, else to the
    /// millisecond (elapsed seconds drop their trailing zeros: `1.25 s`).
    pub fn read(self, at: Duration) -> String {
        let millis = at.subsec_millis();
        match self {
            TimeLabels::TimeOfDay { start } => {
                let t = start.saturating_add(at);
                let secs = t.as_secs();
                let hms = format!(
                    "{:02}:{:02}:{:02}",
                    secs / 3600 % 24,
                    secs / 60 % 60,
                    secs % 60
                );
                match t.subsec_millis() {
                    0 => hms,
                    ms => format!("{hms}.{ms:03}"),
                }
            }
            TimeLabels::Elapsed if millis == 0 => format!("{} s", at.as_secs()),
            TimeLabels::Elapsed => {
                let text = format!("{:.3}", at.as_secs_f64());
                format!("{} s", text.trim_end_matches('0'))
            }
        }
    }
}

/// One acquisition of the lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tenure {
    /// The token issued with it.
    pub token: FencingToken,
    /// When it was granted.
    pub from: Duration,
    /// When the lease ended (released or expired); `None` while it is not known to have.
    pub lease_until: Option<Duration>,
    /// When the holder stopped acting under it; after `lease_until`, the holder wrote (or
    /// tried to) without a lease.
    pub acted_until: Option<Duration>,
}

/// A run of accepted writes of one lane to one store, with no other mark of the lane between.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteRun {
    /// The store written.
    pub store: String,
    /// The first record written.
    pub first: String,
    /// The last record written.
    pub last: String,
    /// How many writes.
    pub writes: usize,
    /// When the first was accepted.
    pub from: Duration,
    /// When the last was accepted.
    pub until: Duration,
    /// Whether these writes came after a newer holder had claimed their records: accepted
    /// only because nothing fenced them.
    pub stale: bool,
}

/// A moment on a lane the picture names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mark {
    /// A store refused a write.
    Refused {
        /// The store.
        store: String,
        /// The record.
        record: String,
        /// What the write was (`claim`, `confirm`, ...), where known.
        write: Option<String>,
        /// The token presented.
        token: FencingToken,
        /// What the write met, in a few words: `fence is 34` (a refusal's
        /// [`fencing_core::FoundFence`] as it prints), `state is sent`.
        met: String,
    },
    /// A claim took over a record another holder had in flight.
    TookOver {
        /// The store.
        store: String,
        /// The record.
        record: String,
        /// The token that took it.
        token: FencingToken,
    },
    /// The holder asked the outside world whether a record's effect had happened.
    LookedUp {
        /// The record.
        record: String,
        /// Whether it had.
        found: bool,
    },
    /// The worker stalled for `length` (a pause, a SIGSTOP).
    Stalled {
        /// How long.
        length: Duration,
    },
    /// The worker was killed.
    Killed,
    /// Anything else worth a word (a restart of a service, a gateway's answer), about one
    /// record or none. Notes with the same text close together in time are drawn as one.
    Note {
        /// What happened.
        text: String,
        /// The record it happened to, if any.
        record: Option<String>,
    },
}

impl Mark {
    /// A note about nothing in particular.
    pub fn note(text: impl Into<String>) -> Mark {
        Mark::Note {
            text: text.into(),
            record: None,
        }
    }

    /// A note about `record`.
    pub fn note_on(text: impl Into<String>, record: impl Into<String>) -> Mark {
        Mark::Note {
            text: text.into(),
            record: Some(record.into()),
        }
    }

    /// The record the mark is about, if any.
    pub fn record(&self) -> Option<&str> {
        match self {
            Mark::Refused { record, .. }
            | Mark::TookOver { record, .. }
            | Mark::LookedUp { record, .. } => Some(record),
            Mark::Note { record, .. } => record.as_deref(),
            Mark::Stalled { .. } | Mark::Killed => None,
        }
    }

    /// The words beside the mark.
    pub fn label(&self) -> String {
        match self {
            Mark::Refused {
                store,
                record,
                write,
                token,
                met,
            } => format!(
                "REFUSED by {store}: {} {record} with token {token}: {met}",
                write.as_deref().unwrap_or("write of")
            ),
            Mark::TookOver {
                store,
                record,
                token,
            } => format!("takes {record} over in {store} with token {token}"),
            Mark::LookedUp { record, found } => format!(
                "looks {record} up: {}",
                if *found { "already done" } else { "not done" }
            ),
            Mark::Stalled { length } => format!("stalls {:.1} s", length.as_secs_f64()),
            Mark::Killed => "killed".to_owned(),
            Mark::Note { text, record: None } => text.clone(),
            Mark::Note {
                text,
                record: Some(record),
            } => format!("{text}: {record}"),
        }
    }
}

/// A mark at its moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Moment {
    /// When.
    pub at: Duration,
    /// What.
    pub mark: Mark,
}

/// One worker (or process) of the run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lane {
    /// Its name.
    pub name: String,
    /// Its acquisitions, in order.
    pub tenures: Vec<Tenure>,
    /// Its accepted writes, grouped into runs.
    pub writes: Vec<WriteRun>,
    /// Everything else it did or suffered.
    pub moments: Vec<Moment>,
    /// The run of accepted writes still growing, per store: its index in `writes`.
    open_runs: BTreeMap<String, usize>,
}

impl Lane {
    /// The stores this lane wrote, in the order it first wrote them.
    pub fn stores(&self) -> Vec<&str> {
        let mut stores: Vec<&str> = Vec::new();
        for run in &self.writes {
            if !stores.contains(&run.store.as_str()) {
                stores.push(&run.store);
            }
        }
        stores
    }

    fn mark(&mut self, at: Duration, mark: Mark) {
        self.open_runs.clear();
        self.moments.push(Moment { at, mark });
    }
}

/// A run's story in time, built event by event, drawn by [`crate::Picture::draw`].
///
/// Events are given in the order they happened, each with its time since the run began;
/// a lane is created by its first event. Accepted writes are grouped: consecutive writes of one
/// lane to one store form one [`WriteRun`] until any other mark of that lane intervenes, so a
/// settlement of 1,200 refunds is a handful of runs, not 2,400 ticks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timeline {
    title: String,
    labels: TimeLabels,
    lanes: Vec<Lane>,
    end: Duration,
}

impl Timeline {
    /// An empty timeline with a title, its times labelled by `labels`.
    pub fn new(title: impl Into<String>, labels: TimeLabels) -> Self {
        Timeline {
            title: title.into(),
            labels,
            lanes: Vec::new(),
            end: Duration::ZERO,
        }
    }

    /// The title.
    pub fn title(&self) -> &str {
        &self.title
    }

    /// How its times are labelled.
    pub fn labels(&self) -> TimeLabels {
        self.labels
    }

    /// [`Self::labels`], as 0.1 named it.
    #[deprecated(since = "0.2.0", note = "renamed `Timeline::labels()`")]
    #[doc(hidden)]
    pub fn clock(&self) -> TimeLabels {
        self.labels()
    }

    /// The lanes, in the order of their first event.
    pub fn lanes(&self) -> &[Lane] {
        &self.lanes
    }

    /// Every store written, in the order of its first write in the run (the order of each
    /// lane's rows, so that a store sits at the same place in every lane).
    pub fn stores(&self) -> Vec<&str> {
        let mut first: Vec<(Duration, &str)> = Vec::new();
        for run in self.lanes.iter().flat_map(|l| &l.writes) {
            match first.iter_mut().find(|(_, s)| *s == run.store) {
                Some(seen) => seen.0 = seen.0.min(run.from),
                None => first.push((run.from, &run.store)),
            }
        }
        first.sort_by_key(|(at, _)| *at);
        first.into_iter().map(|(_, store)| store).collect()
    }

    /// The time of the last event.
    pub fn end(&self) -> Duration {
        self.end
    }

    fn lane(&mut self, name: &str, at: Duration) -> &mut Lane {
        self.end = self.end.max(at);
        let index = match self.lanes.iter().position(|l| l.name == name) {
            Some(index) => index,
            None => {
                self.lanes.push(Lane {
                    name: name.to_owned(),
                    ..Lane::default()
                });
                self.lanes.len() - 1
            }
        };
        &mut self.lanes[index]
    }

    /// `lane` was granted the lease with `token`.
    pub fn acquired(&mut self, lane: &str, at: Duration, token: FencingToken) {
        let lane = self.lane(lane, at);
        lane.open_runs.clear();
        lane.tenures.push(Tenure {
            token,
            from: at,
            lease_until: None,
            acted_until: None,
        });
    }

    /// The lease of `lane`'s latest acquisition ended (released, or known to have expired).
    /// Only the first end given counts.
    pub fn lease_ended(&mut self, lane: &str, at: Duration) {
        let lane = self.lane(lane, at);
        if let Some(tenure) = lane.tenures.last_mut()
            && tenure.lease_until.is_none()
        {
            tenure.lease_until = Some(at);
        }
    }

    /// `lane` stopped acting under its latest acquisition (its batch ended, or it died).
    /// Only the first stop given counts.
    pub fn stopped(&mut self, lane: &str, at: Duration) {
        let lane = self.lane(lane, at);
        if let Some(tenure) = lane.tenures.last_mut()
            && tenure.acted_until.is_none()
        {
            tenure.acted_until = Some(at);
        }
    }

    /// `store` accepted `lane`'s write of `record`; `stale` when a newer holder had claimed
    /// the record before (accepted only because nothing fenced it).
    pub fn accepted(&mut self, lane: &str, at: Duration, store: &str, record: &str, stale: bool) {
        let lane = self.lane(lane, at);
        if let Some(&index) = lane.open_runs.get(store) {
            let run = &mut lane.writes[index];
            if run.stale == stale {
                run.last = record.to_owned();
                run.writes += 1;
                run.until = at;
                return;
            }
        }
        lane.writes.push(WriteRun {
            store: store.to_owned(),
            first: record.to_owned(),
            last: record.to_owned(),
            writes: 1,
            from: at,
            until: at,
            stale,
        });
        let index = lane.writes.len() - 1;
        lane.open_runs.insert(store.to_owned(), index);
    }

    /// Any other mark on `lane` at `at`. A [`Mark::Stalled`] stands for the whole stall, from
    /// `at`.
    pub fn mark(&mut self, lane: &str, at: Duration, mark: Mark) {
        if let Mark::Stalled { length } = &mark {
            self.end = self.end.max(at.saturating_add(*length));
        }
        self.lane(lane, at).mark(at, mark);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn token(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap()
    }

    #[test]
    fn writes_group_into_runs_per_store_until_a_mark() {
        let mut t = Timeline::new("t", TimeLabels::Elapsed);
        t.accepted("A", ms(1), "refunds", "r_1", false);
        t.accepted("A", ms(2), "ledger", "r_1", false);
        t.accepted("A", ms(3), "refunds", "r_2", false);
        t.accepted("B", ms(3), "refunds", "r_9", false);
        t.mark("A", ms(4), Mark::note("n"));
        t.accepted("A", ms(5), "refunds", "r_3", false);
        t.accepted("A", ms(6), "refunds", "r_4", true);
        let a = &t.lanes()[0];
        let runs: Vec<(&str, &str, &str, usize, bool)> = a
            .writes
            .iter()
            .map(|r| {
                (
                    r.store.as_str(),
                    r.first.as_str(),
                    r.last.as_str(),
                    r.writes,
                    r.stale,
                )
            })
            .collect();
        assert_eq!(
            runs,
            [
                ("refunds", "r_1", "r_2", 2, false),
                ("ledger", "r_1", "r_1", 1, false),
                ("refunds", "r_3", "r_3", 1, false),
                ("refunds", "r_4", "r_4", 1, true),
            ]
        );
        assert_eq!(a.writes[0].from, ms(1));
        assert_eq!(a.writes[0].until, ms(3));
        assert_eq!(a.stores(), ["refunds", "ledger"]);
        t.accepted("C", ms(0), "receipts", "r_0", false);
        assert_eq!(t.stores(), ["receipts", "refunds", "ledger"]);
        assert_eq!(t.lanes()[1].writes[0].first, "r_9");
        assert_eq!(t.end(), ms(6));
    }

    #[test]
    fn an_acquisition_starts_new_runs_and_only_the_first_end_counts() {
        let mut t = Timeline::new("t", TimeLabels::Elapsed);
        t.acquired("A", ms(0), token(3));
        t.accepted("A", ms(1), "s", "r_1", false);
        t.lease_ended("A", ms(30));
        t.lease_ended("A", ms(31));
        t.stopped("A", ms(34));
        t.stopped("A", ms(35));
        t.acquired("A", ms(40), token(5));
        t.accepted("A", ms(41), "s", "r_2", false);
        let a = &t.lanes()[0];
        assert_eq!(a.writes.len(), 2);
        assert_eq!(
            a.tenures[0],
            Tenure {
                token: token(3),
                from: ms(0),
                lease_until: Some(ms(30)),
                acted_until: Some(ms(34)),
            }
        );
        assert_eq!(a.tenures[1].lease_until, None);
    }

    #[test]
    fn a_stall_reaches_the_end_of_the_timeline() {
        let mut t = Timeline::new("t", TimeLabels::Elapsed);
        t.mark("A", ms(10), Mark::Stalled { length: ms(500) });
        assert_eq!(t.end(), ms(510));
    }

    #[test]
    fn clocks_read_as_the_run_tells_time() {
        let c = TimeLabels::WORKED_EXAMPLE;
        assert_eq!(c.read(Duration::from_secs(34)), "10:00:34");
        assert_eq!(c.read(ms(26_048)), "10:00:26.048");
        assert_eq!(c.read(Duration::from_secs(3_600 * 15)), "01:00:00");
        assert_eq!(TimeLabels::Elapsed.read(Duration::from_secs(12)), "12 s");
        assert_eq!(TimeLabels::Elapsed.read(ms(1_250)), "1.25 s");
        assert_eq!(TimeLabels::Elapsed.read(ms(100)), "0.1 s");
    }

    #[test]
    fn a_refusal_names_the_store_the_record_the_token_and_what_it_met() {
        let mark = Mark::Refused {
            store: "refunds".into(),
            record: "r_815".into(),
            write: Some("confirm".into()),
            token: token(33),
            met: "fence is 34".into(),
        };
        assert_eq!(
            mark.label(),
            "REFUSED by refunds: confirm r_815 with token 33: fence is 34"
        );
        let unnamed = Mark::Refused {
            store: "refunds".into(),
            record: "r_815".into(),
            write: None,
            token: token(33),
            met: "fence is 34".into(),
        };
        assert_eq!(
            unnamed.label(),
            "REFUSED by refunds: write of r_815 with token 33: fence is 34"
        );
    }

    #[test]
    fn every_other_mark_says_what_happened() {
        let labels: Vec<String> = [
            Mark::TookOver {
                store: "refunds".into(),
                record: "r_815".into(),
                token: token(34),
            },
            Mark::LookedUp {
                record: "r_815".into(),
                found: false,
            },
            Mark::LookedUp {
                record: "r_815".into(),
                found: true,
            },
            Mark::Stalled { length: ms(8_000) },
            Mark::Killed,
            Mark::note("Redis restarted"),
            Mark::note_on("the gateway returns the refund already made", "r_815"),
        ]
        .iter()
        .map(Mark::label)
        .collect();
        assert_eq!(
            labels,
            [
                "takes r_815 over in refunds with token 34",
                "looks r_815 up: not done",
                "looks r_815 up: already done",
                "stalls 8.0 s",
                "killed",
                "Redis restarted",
                "the gateway returns the refund already made: r_815",
            ]
        );
    }
}
