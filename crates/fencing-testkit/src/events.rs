//! The `tracing` events a piece of code emits, captured as plain text for a test to read.
//!
//! `tracing` caches per call site whether anyone listens, so a test that captures events
//! should run alone in its test binary: a test beside it without a subscriber could make a
//! call site decide that nobody does.

use std::io;
use std::sync::{Arc, Mutex, PoisonError};

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Runs `run` to completion on `runtime` with every event up to `DEBUG` recorded, and returns
/// its output with the events, one per line, as plain text (no colours, whatever features
/// other crates turn on).
pub fn capture<T>(runtime: &tokio::runtime::Runtime, run: impl Future<Output = T>) -> (T, String) {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer({
            let captured = captured.clone();
            move || captured.clone()
        })
        .finish();
    let output = tracing::subscriber::with_default(subscriber, || runtime.block_on(run));
    let bytes = captured
        .0
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    (output, String::from_utf8_lossy(&bytes).into_owned())
}

/// The first line of `events` that contains `needle`, or a panic that shows them all.
pub fn line<'a>(events: &'a str, needle: &str) -> &'a str {
    events
        .lines()
        .find(|line| line.contains(needle))
        .unwrap_or_else(|| panic!("no event {needle:?} in:\n{events}"))
}
