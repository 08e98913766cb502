//! The library's own events (`tracing`, target `fencing`, docs/operating.md) that the
//! campaign draws in a run's picture, printed as lines like the worker's others: every write a
//! store refused, every take-over of a record in flight, every look-up of an effect.
//!
//! ```text
//! refused <store> <record> <claim|holder_only> token <t>: <what it met>
//! took over <store> <record> token <t>
//! looked up <record> <found|not found>
//! unknown <store> <record> token <t>
//! settled <store> <record> token <t>: <applied|refused (<outcome>)|still unknown>
//! ```
//!
//! A write whose answer was lost (an attempt sent, its outcome never seen) is `unknown` once,
//! then `settled` by how the write ended: applied (its retry landed, or found it had), refused
//! (a newer holder's fence, or the record's state, by then), or still unknown when the
//! library gave up and returned it ambiguous.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// Says the lines above for the library's events, and nothing for any other; and, for every
/// fenced write that ended, its `op write` line for the history (`fencing_harness::history`),
/// naming the holder the worker says it is. Clones share one state.
#[derive(Clone)]
pub(crate) struct LibraryEvents {
    shared: Arc<Shared>,
}

struct Shared {
    say: Box<dyn Fn(String) + Send + Sync>,
    /// The writes (`<store> <record> token <t>`) said unknown and not settled yet.
    unsettled: Mutex<HashSet<String>>,
    /// The holder the worker's writes are made by now.
    holder: Mutex<String>,
}

impl LibraryEvents {
    /// The lines on standard output, where the campaign reads them.
    pub(crate) fn printed() -> Self {
        Self::saying(|line| println!("{line}"))
    }

    fn saying(say: impl Fn(String) + Send + Sync + 'static) -> Self {
        LibraryEvents {
            shared: Arc::new(Shared {
                say: Box::new(say),
                unsettled: Mutex::default(),
                holder: Mutex::new("none".to_owned()),
            }),
        }
    }

    /// From now on the worker's writes are `holder`'s.
    pub(crate) fn holder_is(&self, holder: &str) {
        *lock(&self.shared.holder) = holder.to_owned();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An event's fields, each as its value prints (strings without quotes).
#[derive(Default)]
struct Fields(HashMap<&'static str, String>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(field.name(), format!("{value:?}"));
    }
}

impl Fields {
    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
}

/// The line for an event with `fields`, if the campaign draws it.
fn line(fields: &Fields) -> Option<String> {
    let store = fields.get("store");
    let record = fields.get("record")?;
    if let (Some(store), Some(outcome)) = (store, fields.get("outcome")) {
        let kind = fields.get("kind")?;
        let token = fields.get("token")?;
        // An optional field that is `None` is not recorded at all.
        let met = match (outcome, fields.get("found")) {
            ("fenced", None) => "fence not reported".to_owned(),
            ("fenced", Some(found)) => format!("fence is {found}"),
            ("regression", Some(found)) => {
                format!("fence is {found}, above every token issued")
            }
            ("not_found", _) => "no record".to_owned(),
            ("state_mismatch", _) => {
                let error = fields.get("error").unwrap_or_default();
                // The error says what the record had after "refused: "; what the write
                // expected is the picture's to leave out.
                let met = error.split_once("refused: ").map_or(error, |(_, met)| met);
                met.split_once(", expected")
                    .map_or(met, |(had, _)| had)
                    .to_owned()
            }
            _ => return None,
        };
        return Some(format!(
            "refused {store} {record} {kind} token {token}: {met}"
        ));
    }
    if let (Some(store), Some(token)) = (store, fields.get("token"))
        && fields
            .get("message")
            .is_some_and(|m| m.starts_with("took over"))
    {
        return Some(format!("took over {store} {record} token {token}"));
    }
    match (store, fields.get("found")) {
        (None, Some("true")) => Some(format!("looked up {record} found")),
        (None, Some("false")) => Some(format!("looked up {record} not found")),
        _ => None,
    }
}

/// The `unknown` and `settled` lines for an event with `fields`, given the writes said
/// unknown and not settled yet (updated).
fn unknown_outcomes(fields: &Fields, unsettled: &mut HashSet<String>) -> Vec<String> {
    let (Some(store), Some(record), Some(token)) = (
        fields.get("store"),
        fields.get("record"),
        fields.get("token"),
    ) else {
        return Vec::new();
    };
    let write = format!("{store} {record} token {token}");
    if fields.get("retry").is_some() {
        // Sent again after a lost answer: said once, however many retries.
        return match unsettled.insert(write.clone()) {
            true => vec![format!("unknown {write}")],
            false => Vec::new(),
        };
    }
    let Some(outcome) = fields.get("outcome") else {
        return Vec::new();
    };
    let how = match outcome {
        "accepted" => "applied".to_owned(),
        "ambiguous" => "still unknown".to_owned(),
        refused => format!("refused ({refused})"),
    };
    match (unsettled.remove(&write), outcome) {
        (true, _) => vec![format!("settled {write}: {how}")],
        // Returned ambiguous without a retry (a write sent once).
        (false, "ambiguous") => vec![
            format!("unknown {write}"),
            format!("settled {write}: {how}"),
        ],
        (false, _) => Vec::new(),
    }
}

/// The `op write` line for an event with `fields` that ends a fenced write, by `holder`,
/// ended `now` (monotonic nanoseconds).
fn history_line(fields: &Fields, holder: &str, now: u64) -> Option<String> {
    let (store, record, kind, token) = (
        fields.get("store")?,
        fields.get("record")?,
        fields.get("kind")?,
        fields.get("token")?,
    );
    let elapsed_us: u64 = fields.get("elapsed_us")?.parse().ok()?;
    let invoked = now.saturating_sub(elapsed_us.saturating_mul(1_000));
    let outcome = match fields.get("outcome")? {
        "accepted" => "accepted",
        "ambiguous" => "unknown",
        _ => "refused",
    };
    Some(format!(
        "op write {invoked} {now} {holder} {store} {record} {kind} token {token}: {outcome}"
    ))
}

impl<S: Subscriber> Layer<S> for LibraryEvents {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != "fencing" {
            return;
        }
        let now = fencing_harness::history::now();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let shared = &self.shared;
        if let Some(line) = line(&fields) {
            (shared.say)(line);
        }
        for line in unknown_outcomes(&fields, &mut lock(&shared.unsettled)) {
            (shared.say)(line);
        }
        if let Some(line) = history_line(&fields, &lock(&shared.holder), now) {
            (shared.say)(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use fencing_core::adapter::HolderExt;
    use fencing_core::{
        FencedWrite, Holder, Lifecycle, MemoryStore, MemoryTokenSource, RecordKey, ResourceName,
        TokenSource,
    };
    use fencing_harness::history::{History, WriteOutcome};
    use fencing_testkit::faults::RecordingEffect;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    /// What the layer says while the library claims, takes over, looks up and is refused.
    #[tokio::test]
    async fn the_librarys_own_events_become_the_lines() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let events = LibraryEvents::saying(move |line| sink.lock().unwrap().push(line));
        let _events = tracing_subscriber::registry()
            .with(events.clone())
            .set_default();
        events.holder_is("A#1");
        let store = MemoryStore::new("refunds");
        let source = MemoryTokenSource::new();
        let resource = ResourceName::new("settle:m_4471").unwrap();
        let (older, newer) = (
            source.next(&resource).await.unwrap(),
            source.next(&resource).await.unwrap(),
        );
        let key = RecordKey::new("r_0815").unwrap();
        let lifecycle = Lifecycle::default();
        let (a, b) = (
            Holder::new(&resource, older, &source),
            Holder::new(&resource, newer, &source),
        );
        a.write(
            &store,
            &key,
            &FencedWrite::claim().set_state(lifecycle.pending().clone()),
        )
        .await
        .unwrap();
        a.write(&store, &key, &lifecycle.claim()).await.unwrap();
        let effect = RecordingEffect::new();
        b.run_effect(&store, &key, &lifecycle, &effect)
            .await
            .unwrap();
        a.write(&store, &key, &lifecycle.confirm())
            .await
            .unwrap_err();
        // Sent already: the fence admits B's claim, the state does not.
        b.write(&store, &key, &lifecycle.claim()).await.unwrap_err();
        let (ops, said): (Vec<String>, Vec<String>) = lines
            .lock()
            .unwrap()
            .iter()
            .cloned()
            .partition(|line| line.starts_with("op "));
        let mut history = History::default();
        for op in &ops {
            history.record(op);
        }
        let writes: Vec<_> = history
            .writes
            .iter()
            .map(|w| (w.token, w.claim, w.outcome))
            .collect();
        let (older_n, newer_n) = (older.get(), newer.get());
        assert_eq!(
            writes,
            [
                (older_n, true, WriteOutcome::Accepted),
                (older_n, true, WriteOutcome::Accepted),
                (newer_n, true, WriteOutcome::Accepted),
                (newer_n, false, WriteOutcome::Accepted),
                (older_n, false, WriteOutcome::Refused),
                (newer_n, true, WriteOutcome::Refused),
            ],
            "{ops:?}"
        );
        assert!(
            history
                .writes
                .iter()
                .all(|w| w.holder == "A#1" && w.store == "refunds" && w.record == "r_0815"),
            "{ops:?}"
        );
        assert_eq!(
            said,
            [
                format!("took over refunds r_0815 token {newer}"),
                "looked up r_0815 not found".to_owned(),
                format!("refused refunds r_0815 holder_only token {older}: fence is {newer}"),
                format!("refused refunds r_0815 claim token {newer}: state is sent"),
            ]
        );
    }

    fn fields(pairs: &[(&'static str, &str)]) -> Fields {
        Fields(pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect())
    }

    #[test]
    fn a_refusal_names_store_record_kind_token_and_what_it_met() {
        let base = [
            ("store", "refunds"),
            ("record", "r_0815"),
            ("kind", "holder_only"),
            ("token", "3"),
        ];
        let with = |extra: &[(&'static str, &str)]| {
            let mut all = base.to_vec();
            all.extend_from_slice(extra);
            line(&fields(&all))
        };
        assert_eq!(
            with(&[("outcome", "fenced"), ("found", "4")]).unwrap(),
            "refused refunds r_0815 holder_only token 3: fence is 4"
        );
        assert_eq!(
            with(&[("outcome", "fenced")]).unwrap(),
            "refused refunds r_0815 holder_only token 3: fence not reported"
        );
        assert_eq!(
            with(&[("outcome", "regression"), ("found", "9")]).unwrap(),
            "refused refunds r_0815 holder_only token 3: fence is 9, above every token issued"
        );
        let error = "refunds: write to \"r_0815\" with token 3 refused: state is sent, expected one of sending";
        assert_eq!(
            with(&[("outcome", "state_mismatch"), ("error", error)]).unwrap(),
            "refused refunds r_0815 holder_only token 3: state is sent"
        );
        assert_eq!(
            with(&[
                ("outcome", "not_found"),
                ("error", "refunds: record \"r_0815\" does not exist")
            ])
            .unwrap(),
            "refused refunds r_0815 holder_only token 3: no record"
        );
        assert_eq!(with(&[("outcome", "accepted")]), None);
        let ended = |outcome| {
            let mut all = base.to_vec();
            all.extend_from_slice(&[("outcome", outcome), ("elapsed_us", "250")]);
            history_line(&fields(&all), "B#2", 1_000_000)
        };
        assert_eq!(
            ended("accepted").unwrap(),
            "op write 750000 1000000 B#2 refunds r_0815 holder_only token 3: accepted"
        );
        assert!(ended("ambiguous").unwrap().ends_with(": unknown"));
        assert!(ended("fenced").unwrap().ends_with(": refused"));
        assert_eq!(history_line(&fields(&base), "B#2", 1_000_000), None);
        assert_eq!(with(&[("outcome", "ambiguous"), ("error", "lost")]), None);
    }

    #[test]
    fn take_overs_and_look_ups_have_lines_and_other_events_none() {
        let took = fields(&[
            ("store", "refunds"),
            ("record", "r_0815"),
            ("token", "4"),
            (
                "message",
                "took over a record in flight: looking its effect up first",
            ),
        ]);
        assert_eq!(line(&took).unwrap(), "took over refunds r_0815 token 4");
        let found = fields(&[("record", "r_0815"), ("found", "true")]);
        assert_eq!(line(&found).unwrap(), "looked up r_0815 found");
        let missing = fields(&[("record", "r_0815"), ("found", "false")]);
        assert_eq!(line(&missing).unwrap(), "looked up r_0815 not found");
        let renewal = fields(&[("resource", "settle:m_4471"), ("token", "4")]);
        assert_eq!(line(&renewal), None);
        let retry = fields(&[
            ("store", "refunds"),
            ("record", "r_0815"),
            ("token", "4"),
            ("retry", "1"),
            (
                "message",
                "fenced write outcome lost: sending it again with the same token",
            ),
        ]);
        assert_eq!(line(&retry), None);
    }

    #[test]
    fn a_lost_answer_is_unknown_once_then_settled_by_how_the_write_ended() {
        let write = [("store", "refunds"), ("record", "r_0815"), ("token", "4")];
        let event = |extra: (&'static str, &str)| {
            let mut all = write.to_vec();
            all.push(extra);
            fields(&all)
        };
        let mut unsettled = HashSet::new();
        let mut said = Vec::new();
        for fields in [
            event(("outcome", "accepted")),
            event(("retry", "1")),
            event(("retry", "2")),
            event(("outcome", "accepted")),
            event(("retry", "1")),
            event(("outcome", "fenced")),
            event(("retry", "1")),
            event(("outcome", "ambiguous")),
            event(("outcome", "ambiguous")),
        ] {
            said.extend(unknown_outcomes(&fields, &mut unsettled));
        }
        let w = "refunds r_0815 token 4";
        assert_eq!(
            said,
            [
                format!("unknown {w}"),
                format!("settled {w}: applied"),
                format!("unknown {w}"),
                format!("settled {w}: refused (fenced)"),
                format!("unknown {w}"),
                format!("settled {w}: still unknown"),
                format!("unknown {w}"),
                format!("settled {w}: still unknown"),
            ]
        );
        assert!(unsettled.is_empty());
        let lease = fields(&[("resource", "settle:m_4471"), ("outcome", "granted")]);
        assert!(unknown_outcomes(&lease, &mut unsettled).is_empty());
    }
}
