//! How this repository's benchmarks time variants against a baseline on the same server, in
//! the same run: every variant once per round (or once per item of every round), in rotating
//! order, medians compared.

use std::time::Duration;

use async_trait::async_trait;
use fencing_core::{
    BoxError, FencedStore, FencedWrite, FencingToken, Lifecycle, Record, RecordKey, SideEffect,
};

/// The gateway latencies a settlement is timed at: none, and a fixed 5 ms per call.
pub const LATENCIES: [Duration; 2] = [Duration::ZERO, Duration::from_millis(5)];

/// An in-process payment gateway for a timed settlement: every refund takes `latency` and
/// nothing is ever found by lookup (no record is in flight when a round starts).
#[derive(Clone, Debug)]
pub struct Gateway {
    /// How long each refund takes.
    pub latency: Duration,
}

#[async_trait]
impl SideEffect for Gateway {
    type Receipt = ();

    async fn lookup(&self, _: &RecordKey) -> Result<Option<()>, BoxError> {
        Ok(None)
    }

    async fn perform(&self, _: &RecordKey, _: &Record) -> Result<(), BoxError> {
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        Ok(())
    }
}

/// Runs every variant once per round, rotating which goes first, and returns each variant's
/// median. `run(variant, round)` does any set-up it needs and returns the time of the part
/// being measured.
pub async fn compare(
    variants: &[&'static str],
    rounds: usize,
    mut run: impl AsyncFnMut(&'static str, usize) -> Duration,
) -> Vec<(&'static str, Duration)> {
    let mut times = vec![Vec::new(); variants.len()];
    for round in 0..rounds {
        for offset in 0..variants.len() {
            let i = (round + offset) % variants.len();
            times[i].push(run(variants[i], round).await);
        }
    }
    medians(&variants.iter().copied().zip(times).collect::<Vec<_>>())
}

/// Each variant's time of every round, the variants alternating item by item: in each round,
/// every item is handled by every variant in turn (rotating which goes first from item to
/// item), so a server that drifts within a round slows every variant alike.
/// `run(variant, round, item)` returns the time of that one operation.
pub async fn compare_per_item(
    variants: &[&'static str],
    rounds: usize,
    items: usize,
    mut run: impl AsyncFnMut(&'static str, usize, usize) -> Duration,
) -> Vec<(&'static str, Vec<Duration>)> {
    let mut times = vec![Vec::new(); variants.len()];
    for round in 0..rounds {
        let mut totals = vec![Duration::ZERO; variants.len()];
        for item in 0..items {
            for offset in 0..variants.len() {
                let i = (round + item + offset) % variants.len();
                totals[i] += run(variants[i], round, item).await;
            }
        }
        for (i, total) in totals.into_iter().enumerate() {
            times[i].push(total);
        }
    }
    variants.iter().copied().zip(times).collect()
}

/// The median of each variant's rounds.
pub fn medians(times: &[(&'static str, Vec<Duration>)]) -> Vec<(&'static str, Duration)> {
    times
        .iter()
        .map(|(name, t)| {
            let mut t = t.clone();
            t.sort();
            (*name, t[t.len() / 2])
        })
        .collect()
}

/// Prints the median of each variant's ratio to the first round by round (the rounds paired:
/// a slow round is slow for both) with its quartiles, which say how finely the run resolves
/// a difference.
pub fn report_paired_ratios(times: &[(&str, Vec<Duration>)]) {
    let baseline = &times[0].1;
    println!("| variant | ratio to first, paired by round: median | quartiles |");
    println!("| --- | ---: | ---: |");
    for (name, t) in times {
        let mut ratios: Vec<f64> = t
            .iter()
            .zip(baseline)
            .map(|(a, b)| a.as_secs_f64() / b.as_secs_f64())
            .collect();
        ratios.sort_by(f64::total_cmp);
        let at = |q: usize| ratios[(ratios.len() - 1) * q / 4];
        println!("| {name} | {:.3}× | {:.3}–{:.3} |", at(2), at(1), at(3));
    }
}

/// Prints the medians as a Markdown table, each with its ratio to the first (the baseline);
/// `per` is the number of operations in one timed run, and `unit` what one is (singular).
pub fn report(results: &[(&str, Duration)], per: usize, unit: &str) {
    let baseline = results[0].1;
    println!("| variant | median per {per} {unit}s | per {unit} | ratio to first |");
    println!("| --- | ---: | ---: | ---: |");
    for (name, time) in results {
        println!(
            "| {name} | {:.1} ms | {:.1} µs | {:.3}× |",
            time.as_secs_f64() * 1e3,
            time.as_secs_f64() * 1e6 / per as f64,
            time.as_secs_f64() / baseline.as_secs_f64()
        );
    }
}

/// The keys `r_0001`, `r_0002`, … of a benchmark's `count` records.
pub fn record_keys(count: usize) -> Vec<RecordKey> {
    (1..=count)
        .map(|n| RecordKey::new(format!("r_{n:04}")).expect("valid record key"))
        .collect()
}

/// Writes `count` records in the lifecycle's `pending` state under the lowest fence, as a
/// job's producer does, and returns their keys.
pub async fn pending_records<S: FencedStore + ?Sized>(store: &S, count: usize) -> Vec<RecordKey> {
    let keys = record_keys(count);
    let create = FencedWrite::claim().set_state(Lifecycle::default().pending().clone());
    for key in &keys {
        store
            .write(key, FencingToken::MIN, &create)
            .await
            .unwrap_or_else(|err| panic!("create {key:?}: {err}"));
    }
    keys
}
