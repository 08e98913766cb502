//! Randomised schedules in virtual time: 2–8 workers, random start times, stalls shorter and
//! longer than the TTL, leases expiring mid-batch, redeliveries. With fences every schedule
//! must be safe; without them the same checker must find damage. The same again with
//! pipelined workers: 2–8 refunds in flight per worker, claims and confirms grouped, stalls
//! mid-window.

use std::time::Duration;

use fencing_core::{RetryPolicy, Ttl};
use fencing_simulation::Fencing;
use fencing_simulation::settlement::{
    self, GatewayMode, Pause, SettlementConfig, WorkerPlan, refund_key,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const SCHEDULES: u64 = 500;
const PIPELINED_SCHEDULES: u64 = 1000;
const REFUNDS: usize = 30;

/// How many refunds each worker has in flight.
#[derive(Clone, Copy)]
enum Mode {
    OneByOne,
    Pipelined,
}

fn schedule(seed: u64, fencing: Fencing, mode: Mode) -> SettlementConfig {
    let mut rng = StdRng::seed_from_u64(seed);
    let ttl = Ttl::from_secs(1).unwrap();
    let worker_count = rng.random_range(2..=8);
    let workers = (0..worker_count)
        .map(|i| {
            let last = i == worker_count - 1;
            let pauses = if last {
                Vec::new()
            } else {
                (0..rng.random_range(0..=3))
                    .map(|_| Pause {
                        before_call_for: refund_key(rng.random_range(1..=REFUNDS)),
                        length: Duration::from_millis(rng.random_range(100..=3000)),
                        until_taken_over: false,
                    })
                    .collect()
            };
            WorkerPlan {
                name: format!("W{i}"),
                starts_at: Duration::from_millis(rng.random_range(0..=3000)),
                retry: RetryPolicy::new(
                    400,
                    Duration::from_millis(250),
                    Duration::from_millis(250),
                )
                .unwrap(),
                pauses,
                redeliveries: if last { 10 } else { rng.random_range(0..=3) },
            }
        })
        .collect();
    let concurrency = match mode {
        Mode::OneByOne => 1,
        Mode::Pipelined => rng.random_range(2..=8),
    };
    SettlementConfig {
        merchant: format!("m_{seed}"),
        refunds: REFUNDS,
        cents_each: 7025,
        ttl,
        first_token: fencing_core::FencingToken::MIN,
        gateway_latency: Duration::from_millis(rng.random_range(10..=80)),
        gateway: GatewayMode::Idempotent,
        fencing,
        workers,
        concurrency,
    }
}

/// Runs `schedules` fenced schedules: every one safe, every refund sent once, and takeovers
/// and stale writes among them.
async fn all_safe_with_fences(schedules: u64, mode: Mode) {
    let mut takeovers = 0;
    let mut stale_rejected = 0;
    for seed in 0..schedules {
        let report =
            settlement::run(&schedule(seed, Fencing::On, mode), settlement_job::Settle).await;
        let audit = &report.audit;
        assert_eq!(
            audit.violations(),
            Vec::<String>::new(),
            "schedule {seed}: {audit:?}"
        );
        assert_eq!(
            audit.rows_sent as usize, REFUNDS,
            "schedule {seed}: {audit:?}"
        );
        assert_eq!(
            audit.gateway.refunds_created as usize, REFUNDS,
            "schedule {seed}"
        );
        assert_eq!(
            audit.effects_started_past_deadline, 0,
            "schedule {seed}: a worker started a call after its lease's deadline"
        );
        takeovers += audit.takeovers;
        stale_rejected += audit.stale_writes_rejected;
    }
    println!(
        "{schedules} schedules: {takeovers} takeovers, {stale_rejected} stale writes rejected"
    );
    assert!(
        takeovers > 0 && stale_rejected > 0,
        "the schedules must exercise takeovers"
    );
}

/// How many of `schedules` unfenced schedules broke a guarantee; the checker must bite.
async fn unsafe_without_fences(schedules: u64, mode: Mode) {
    let mut unsafe_schedules = 0;
    for seed in 0..schedules {
        let report =
            settlement::run(&schedule(seed, Fencing::Off, mode), settlement_job::Settle).await;
        if !report.audit.violations().is_empty() {
            unsafe_schedules += 1;
        }
    }
    println!("{unsafe_schedules} of {schedules} schedules broke a guarantee without fences");
    assert!(
        unsafe_schedules > schedules / 10,
        "only {unsafe_schedules} unsafe schedules: the checker is not biting"
    );
}

#[tokio::test(start_paused = true)]
async fn every_schedule_is_safe_with_fences() {
    all_safe_with_fences(SCHEDULES, Mode::OneByOne).await;
}

#[tokio::test(start_paused = true)]
async fn the_checker_finds_damage_without_fences() {
    unsafe_without_fences(SCHEDULES, Mode::OneByOne).await;
}

#[tokio::test(start_paused = true)]
async fn every_pipelined_schedule_is_safe_with_fences() {
    all_safe_with_fences(PIPELINED_SCHEDULES, Mode::Pipelined).await;
}

#[tokio::test(start_paused = true)]
async fn the_checker_finds_damage_in_pipelined_schedules_without_fences() {
    unsafe_without_fences(PIPELINED_SCHEDULES, Mode::Pipelined).await;
}
