//! The worked example (docs/protocol.md), asserted to the event: worker A (token 33) stalls at r_815, B takes over
//! with token 34 at 31 s, A's stale confirm is refused at 34 s and A claims nothing further.

use std::time::Duration;

use fencing::{FenceCheck, FencingToken, RecordKey};
use fencing_simulation::Fencing;
use fencing_simulation::settlement::{
    self, CallResult, Event, GatewayMode, SettlementConfig, SettlementReport, What, refund_key,
};

async fn worked_example(fencing: Fencing, gateway: GatewayMode) -> SettlementReport {
    settlement::run(
        &SettlementConfig::worked_example(fencing, gateway),
        settlement_job::Settle,
    )
    .await
}

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

fn find<'a>(report: &'a SettlementReport, worker: &str, pick: impl Fn(&What) -> bool) -> &'a Event {
    report
        .events
        .iter()
        .find(|e| e.worker == worker && pick(&e.what))
        .unwrap_or_else(|| panic!("no such event for {worker}"))
}

fn touches(what: &What, key: &RecordKey) -> bool {
    match what {
        What::Accepted { key: k, .. } | What::Refused { key: k, .. } => k == key,
        _ => false,
    }
}

#[tokio::test(start_paused = true)]
async fn with_fences_the_stale_confirm_is_refused_and_nothing_is_sent_twice() {
    let report = worked_example(Fencing::On, GatewayMode::Idempotent).await;
    let (r815, r816) = (refund_key(815), refund_key(816));

    let a_acquired = find(&report, "A", |w| matches!(w, What::Acquired { .. }));
    assert_eq!(a_acquired.what, What::Acquired { token: token(33) });
    assert_eq!(a_acquired.at, Duration::ZERO);

    let paused = find(&report, "A", |w| matches!(w, What::Paused { .. }));
    assert_eq!(paused.at, Duration::from_millis(26_048));
    assert_eq!(
        paused.what,
        What::Paused {
            key: r815.clone(),
            length: Duration::from_secs(8)
        }
    );

    let b_acquired = find(&report, "B", |w| matches!(w, What::Acquired { .. }));
    assert_eq!(b_acquired.what, What::Acquired { token: token(34) });
    assert_eq!(b_acquired.at, Duration::from_secs(31));

    let takeover = find(&report, "B", |w| touches(w, &r815));
    assert!(
        matches!(&takeover.what, What::Accepted { check: FenceCheck::Claim, token: t, took_over_from: Some(1), .. } if *t == token(34)),
        "{takeover:?}"
    );
    let lookup = find(&report, "B", |w| matches!(w, What::LookedUp { .. }));
    assert_eq!(
        lookup.what,
        What::LookedUp {
            key: r815.clone(),
            found: false
        }
    );

    let a_call = find(
        &report,
        "A",
        |w| matches!(w, What::Called { key, .. } if *key == r815),
    );
    assert_eq!(a_call.at, Duration::from_millis(34_080));
    assert!(matches!(
        a_call.what,
        What::Called {
            result: CallResult::ReturnedExisting,
            ..
        }
    ));

    let refused = find(&report, "A", |w| matches!(w, What::Refused { .. }));
    match &refused.what {
        What::Refused {
            store,
            key,
            check,
            token: t,
            reason,
            met,
            stale,
        } => {
            assert_eq!(store, "refunds");
            assert_eq!(met, "fence is 34");
            assert_eq!(key, &r815);
            assert_eq!(*check, FenceCheck::HolderOnly);
            assert_eq!(*t, token(33));
            assert!(*stale);
            assert!(reason.contains("fence is 34"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    find(
        &report,
        "A",
        |w| matches!(w, What::Aborted { key, .. } if *key == r815),
    );
    assert!(
        !report
            .events
            .iter()
            .any(|e| e.worker == "A" && touches(&e.what, &r816)),
        "A must not claim r_816"
    );
    find(&report, "B", |w| *w == What::Finished);
    // A's lease expired at 30 s: its release finds it lost; B's finds it held.
    find(&report, "A", |w| *w == What::Released { held: false });
    find(&report, "B", |w| *w == What::Released { held: true });

    let audit = &report.audit;
    assert_eq!(audit.rows_sent, 1200);
    assert_eq!(audit.rows_unsent, 0);
    assert_eq!(audit.cents_recorded, 8_430_000);
    assert_eq!(audit.gateway.cents_paid, 8_430_000);
    assert_eq!(audit.gateway.calls, 1201);
    assert_eq!(audit.gateway.refunds_created, 1200);
    assert_eq!(audit.gateway.keys_paid_twice, 0);
    assert_eq!(audit.gateway.lookups, 1);
    assert_eq!(audit.calls_for_existing_refund, 1);
    assert_eq!(audit.takeovers, 1);
    assert_eq!(audit.stale_writes_rejected, 1);
    assert_eq!(audit.stale_writes_accepted, 0);
    assert_eq!(audit.violations(), Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn without_fences_the_stale_worker_writes_beside_the_new_holder() {
    let report = worked_example(Fencing::Off, GatewayMode::Idempotent).await;
    let audit = &report.audit;
    // A's confirm of r_815 finds the row already sent by B and counts it as its own; then A
    // walks on past r_815 and claims rows B has in flight.
    find(&report, "A", |w| {
        *w == What::Skipped {
            key: refund_key(816),
        }
    });
    let stale = find(&report, "A", |w| {
        matches!(w, What::Accepted { stale: true, .. })
    });
    assert!(stale.at > Duration::from_secs(34), "{stale:?}");
    assert!(audit.stale_writes_accepted > 100, "{audit:?}");
    assert_eq!(audit.stale_writes_rejected, 0);
    assert!(!audit.violations().is_empty());
}

#[tokio::test(start_paused = true)]
async fn without_fences_and_idempotency_keys_a_refund_is_paid_twice() {
    let report = worked_example(Fencing::Off, GatewayMode::IgnoresKeys).await;
    let audit = &report.audit;
    assert!(audit.gateway.keys_paid_twice >= 1, "{audit:?}");
    assert!(audit.gateway.cents_paid > 8_430_000);
    assert!(audit.stale_writes_accepted > 0);
}

/// The fence decides who owns the row; it cannot see the gateway call A already had in
/// flight. Without an idempotency key that one call pays twice, fence or no fence.
#[tokio::test(start_paused = true)]
async fn the_fence_cannot_deduplicate_the_call_under_way() {
    let report = worked_example(Fencing::On, GatewayMode::IgnoresKeys).await;
    let audit = &report.audit;
    assert_eq!(audit.gateway.keys_paid_twice, 1);
    assert_eq!(audit.gateway.cents_paid, 8_430_000 + 7025);
    assert_eq!(audit.stale_writes_accepted, 0);
    assert_eq!(audit.stale_writes_rejected, 1);
}

#[tokio::test(start_paused = true)]
async fn the_same_configuration_gives_the_same_journal() {
    let first = worked_example(Fencing::On, GatewayMode::Idempotent).await;
    let second = worked_example(Fencing::On, GatewayMode::Idempotent).await;
    assert_eq!(first.events, second.events);
}

/// The same job pipelined, 32 refunds in flight: the same tally (every refund sent once, none
/// twice, no stale write accepted), and A finishes well inside its 30-second TTL, so B, handed
/// the job at 31 s, finds everything sent.
#[tokio::test(start_paused = true)]
async fn pipelined_the_job_finishes_inside_its_ttl_with_the_same_tally() {
    let config =
        SettlementConfig::worked_example(Fencing::On, GatewayMode::Idempotent).with_concurrency(32);
    let report = settlement::run(&config, settlement_job::Settle).await;
    let audit = &report.audit;
    assert_eq!(audit.violations(), Vec::<String>::new(), "{audit:?}");
    assert_eq!(audit.rows_sent, 1200);
    assert_eq!(audit.gateway.refunds_created, 1200);
    assert_eq!(audit.gateway.keys_paid_twice, 0);
    let finished = find(&report, "A", |w| matches!(w, What::Finished));
    assert!(
        finished.at < Duration::from_secs(10),
        "A finished at {:?}",
        finished.at
    );
    let serial = worked_example(Fencing::On, GatewayMode::Idempotent).await;
    let b_finished = find(&serial, "B", |w| matches!(w, What::Finished));
    assert!(
        b_finished.at > Duration::from_secs(31),
        "one by one, B has to finish the job"
    );
    assert!(
        report
            .events
            .iter()
            .filter(|e| e.worker == "B")
            .all(|e| !matches!(e.what, What::Sent { .. } | What::Recovered { .. })),
        "B has nothing left to send"
    );
}

/// The pictures in docs/ are the worked example drawn as the code draws it now: a change to
/// the example, the simulation or the drawing that changes them fails here until they are
/// drawn again, with the commands in docs/protocol.md.
#[tokio::test(start_paused = true)]
async fn the_docs_pictures_are_the_worked_example_as_drawn_now() {
    for (fencing, file, flag) in [
        (Fencing::On, "worked-example.svg", ""),
        (Fencing::Off, "worked-example-no-fence.svg", " --no-fence"),
    ] {
        let config = SettlementConfig::worked_example(fencing, GatewayMode::Idempotent);
        let report = settlement::run(&config, settlement_job::Settle).await;
        let drawn =
            fencing_timeline::Picture::draw(&fencing_timeline::settlement(&config, &report))
                .expect("the worked example draws");
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("docs/pictures")
            .join(file);
        let kept = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            kept == drawn.svg(),
            "docs/pictures/{file} is not the worked example as drawn now: run \
             `cargo run --example settlement --{flag} --timeline docs/pictures/{file}`"
        );
    }
}
