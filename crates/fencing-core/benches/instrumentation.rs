//! What the library's events and counters cost per fenced write, on the in-memory store (the
//! fastest store there is, so the worst case for the ratio), with no subscriber, with every
//! event formatted to a subscriber that discards it, and, with `--features metrics`, with the
//! counters recorded to no recorder.
//!
//! ```text
//! cargo bench -p fencing-core --bench instrumentation
//! cargo bench -p fencing-core --bench instrumentation --features metrics
//! ```
//!
//! Nothing here asserts a time: the figures go to docs/benchmarks.md.

use std::time::{Duration, Instant};

use fencing_core::adapter::HolderExt;
use fencing_core::{
    FencedWrite, FencingToken, Holder, MemoryStore, MemoryTokenSource, RecordKey, ResourceName,
    TokenSource,
};

const WRITES: usize = 20_000;
const ROUNDS: usize = 9;

async fn claims(keys: &[RecordKey], round: usize) -> Duration {
    let store = MemoryStore::new("refunds");
    let source = MemoryTokenSource::new();
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let token = FencingToken::new(round as u64 + 1).unwrap();
    source.advance_to(&resource, token).await.unwrap();
    let holder = Holder::new(&resource, token, &source);
    let claim = FencedWrite::claim();
    let start = Instant::now();
    for key in keys {
        holder.write(&store, key, &claim).await.unwrap();
    }
    start.elapsed()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let keys: Vec<_> = (0..WRITES)
        .map(|n| RecordKey::new(format!("r_{n:05}")).unwrap())
        .collect();
    let variants = [
        "Holder::write (claim), no subscriber",
        "Holder::write (claim), every event formatted to a discarding subscriber",
    ];
    let mut times = vec![Vec::new(); variants.len()];
    for round in 0..ROUNDS {
        for offset in 0..variants.len() {
            let i = (round + offset) % variants.len();
            let time = if i == 0 {
                claims(&keys, round).await
            } else {
                let discard = tracing_subscriber::fmt()
                    .with_max_level(tracing::Level::TRACE)
                    .with_writer(std::io::sink)
                    .finish();
                let _default = tracing::subscriber::set_default(discard);
                claims(&keys, round).await
            };
            times[i].push(time);
        }
    }
    println!(
        "in-memory store, {WRITES} claims, {ROUNDS} rounds, metrics feature {}\n",
        if cfg!(feature = "metrics") {
            "on"
        } else {
            "off"
        }
    );
    println!("| variant | median per write | ratio to first |");
    println!("| --- | ---: | ---: |");
    let medians: Vec<Duration> = times
        .into_iter()
        .map(|mut t| {
            t.sort();
            t[t.len() / 2]
        })
        .collect();
    for (name, median) in variants.iter().zip(&medians) {
        println!(
            "| {name} | {:.2} µs | {:.3}× |",
            median.as_secs_f64() * 1e6 / WRITES as f64,
            median.as_secs_f64() / medians[0].as_secs_f64()
        );
    }
}
