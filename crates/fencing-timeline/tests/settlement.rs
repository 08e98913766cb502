//! The worked example's run as the timeline draws it: the settlement example's own job
//! (examples/settlement_job), with fences on and off.

use std::time::Duration;

use fencing_core::FencingToken;
use fencing_simulation::Fencing;
use fencing_simulation::settlement::{self, GatewayMode, SettlementConfig};
use fencing_timeline::{Mark, Tenure, Timeline};

fn secs(n: f64) -> Duration {
    Duration::from_secs_f64(n)
}

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

async fn worked_example(fencing: Fencing) -> Timeline {
    let config = SettlementConfig::worked_example(fencing, GatewayMode::Idempotent);
    fencing_timeline::settlement(
        &config,
        &settlement::run(&config, settlement_job::Settle).await,
    )
}

#[tokio::test(start_paused = true)]
async fn the_worked_example_has_both_leases_the_stall_and_the_refusal_at_r_815() {
    let timeline = worked_example(Fencing::On).await;
    let [a, b] = timeline.lanes() else {
        panic!("two lanes: {:?}", timeline.lanes());
    };
    assert_eq!((a.name.as_str(), b.name.as_str()), ("worker A", "worker B"));
    assert_eq!(
        a.tenures,
        [Tenure {
            token: token(33),
            from: Duration::ZERO,
            lease_until: Some(secs(30.0)),
            acted_until: Some(secs(34.08)),
        }]
    );
    assert_eq!(b.tenures[0].token, token(34));
    assert_eq!(b.tenures[0].from, secs(31.0));
    assert_eq!(b.tenures[0].lease_until, b.tenures[0].acted_until);
    let labels: Vec<String> = a.moments.iter().map(|m| m.mark.label()).collect();
    assert_eq!(
        labels,
        [
            "stalls 8.0 s",
            "the gateway returns the refund already made: r_815",
            "REFUSED by refunds: confirm r_815 with token 33: fence is 34",
            "abandons the batch: r_815",
        ]
    );
    let runs: Vec<(&str, &str, usize, bool)> = a
        .writes
        .iter()
        .map(|r| (r.first.as_str(), r.last.as_str(), r.writes, r.stale))
        .collect();
    // 814 claims and confirms, then r_815's claim before the stall.
    assert_eq!(runs, [("r_001", "r_815", 1_629, false)]);
    let b_labels: Vec<String> = b.moments.iter().map(|m| m.mark.label()).collect();
    assert_eq!(
        b_labels,
        [
            "takes r_815 over in refunds with token 34",
            "looks r_815 up: not done",
        ]
    );
    assert!(b.writes.iter().all(|r| !r.stale));
    assert_eq!(b.writes.last().unwrap().last, "r_1200");
}

#[tokio::test(start_paused = true)]
async fn without_fences_the_stale_worker_writes_beside_the_new_holder() {
    let timeline = worked_example(Fencing::Off).await;
    let a = &timeline.lanes()[0];
    assert!(
        a.moments
            .iter()
            .all(|m| !matches!(m.mark, Mark::Refused { .. }))
    );
    let stale: usize = a.writes.iter().filter(|r| r.stale).map(|r| r.writes).sum();
    assert!(stale > 0, "{:?}", a.writes);
    assert_eq!(a.tenures[0].lease_until, Some(secs(30.0)));
    assert!(a.tenures[0].acted_until > Some(secs(34.0)));
    assert!(timeline.title().contains("fences OFF"));
}
