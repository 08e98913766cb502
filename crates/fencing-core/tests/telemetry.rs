//! What an operator sees: the `tracing` events of a takeover and a stale holder's refusal,
//! captured and checked field by field.

mod common;

use common::{paused_runtime, takeover_and_stale_confirm};
use fencing_testkit::events::{capture, line};

#[test]
fn a_takeover_and_a_stale_refusal_are_told_with_their_fields_and_never_the_payload() {
    let ((), text) = capture(&paused_runtime(), takeover_and_stale_confirm());
    let line = |needle: &str| line(&text, needle);

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
