//! How this repository's benchmarks time variants against a baseline on the same server, in
//! the same run: every variant once per round, in rotating order, medians compared.

use std::time::Duration;

use fencing_core::{FencedStore, FencedWrite, FencingToken, Lifecycle, RecordKey};

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
    variants
        .iter()
        .zip(times)
        .map(|(name, mut t)| {
            t.sort();
            (*name, t[t.len() / 2])
        })
        .collect()
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
