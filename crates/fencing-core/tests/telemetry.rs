//! What an operator sees: the `tracing` events of a takeover and a stale holder's refusal,
//! captured and checked field by field.

mod common;

use std::io;
use std::sync::{Arc, Mutex};

use common::{paused_runtime, takeover_and_stale_confirm};

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_takeover_and_a_stale_refusal_are_told_with_their_fields_and_never_the_payload() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        // Plain text whatever features the workspace's other crates turn on.
        .with_ansi(false)
        .with_writer({
            let captured = captured.clone();
            move || captured.clone()
        })
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        paused_runtime().block_on(takeover_and_stale_confirm())
    });
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let line = |needle: &str| {
        text.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no event {needle:?} in:\n{text}"))
            .to_owned()
    };

    let refused = line("fenced write refused");
    for field in [
        "WARN",
        "store=\"refunds\"",
        "record=\"r_815\"",
        "token=1",
        "kind=\"holder_only\"",
        "outcome=\"fenced\"",
        "found=2",
    ] {
        assert!(refused.contains(field), "{field} missing from: {refused}");
    }
    let takeover = line("took over a record in flight");
    for field in ["INFO", "token=2", "previous=1"] {
        assert!(takeover.contains(field), "{field} missing from: {takeover}");
    }
    let accepted = line("fenced write accepted");
    assert!(accepted.contains("DEBUG"), "{accepted}");
    for token in ["token=1", "token=2"] {
        assert!(
            text.lines()
                .any(|l| l.contains("lease granted") && l.contains(token)),
            "no grant of {token}:\n{text}"
        );
    }
    let aborted = line("batch aborted");
    assert!(
        aborted.contains("WARN") && aborted.contains("token=1"),
        "{aborted}"
    );
    assert!(line("batch finished; lease released").contains("token=2"));
    assert!(
        !text.contains("SECRET"),
        "a payload reached the log:\n{text}"
    );
}
