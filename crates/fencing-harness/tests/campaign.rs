//! The harness as CI runs it: a short campaign that injects every fault kind, then the rough
//! edges (a store without a fence column, a Redis that refuses scripts, an interrupted
//! campaign). Each test starts the harness as processes, as a user would.

use std::collections::BTreeSet;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fencing_harness::audit::Check;
use fencing_harness::plan::{FaultKind, LeaseKind, RunPlan, Sizing, TeamDatabase};
use fencing_harness::stores::{self, Clients, RunNames};
use fencing_test_support::services::{self, RedisServer, ServiceMode};
use sqlx::{AssertSqlSafe, Row};

const HARNESS: &str = env!("CARGO_BIN_EXE_fencing-harness");

fn text(output: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Whether a picture labels a lease tenure with its token: `lease, token N` where the tenure is
/// wide enough, the token alone where it is not (a pipelined holder's tenures are short).
fn labels_a_tenure(svg: &str) -> bool {
    svg.split("fill=\"#FFFFFF\">").skip(1).any(|rest| {
        let label = rest.split("</text>").next().unwrap_or_default().trim();
        label.starts_with("lease, token ")
            || (!label.is_empty() && label.bytes().all(|b| b.is_ascii_digit()))
    })
}

fn logs_dir(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(fencing_testkit::unique_name(name))
}

/// The first seed from which `runs` fenced plans together inject every kind this mode can.
fn seed_covering_every_fault(runs: u64, sizing: Sizing, containers: bool) -> u64 {
    let wanted: BTreeSet<FaultKind> = FaultKind::ALL
        .into_iter()
        .filter(|k| containers || *k != FaultKind::ContainerPause)
        .collect();
    (0..10_000)
        .find(|first| {
            let kinds: BTreeSet<FaultKind> = (*first..first + runs)
                .flat_map(|seed| RunPlan::from_seed(seed, true, sizing, containers).faults)
                .map(|f| f.kind)
                .collect();
            kinds == wanted
        })
        .expect("some seed covers every fault")
}

#[test]
fn a_short_campaign_injects_every_fault_and_finds_violations_only_without_fences() {
    short_campaign(120, 1, 1, 1);
}

/// The same with 8 refunds in flight per worker. More refunds per run than one at a time: a
/// pipelined holder finishes so fast that a control run's stalled worker often wakes to find
/// the job done, and side by side writing is what the control must show.
#[test]
fn a_short_pipelined_campaign_injects_every_fault_and_finds_violations_only_without_fences() {
    short_campaign(240, 8, 0, 0);
}

/// Six fenced runs that inject every fault kind between them (seeds rotate through the five
/// lease kinds, so two are on the Redis lease: one restarts Redis, the other fails it over), three control runs with fences off and
/// `unchecked` controls of the failover and `reissued` ones of the history checker, each of
/// `refunds` with `concurrency` in flight per worker; every fenced run must pass its audit and
/// its history check, and each control must find violations (the history checker's, in its
/// history check).
fn short_campaign(refunds: usize, concurrency: usize, unchecked: usize, reissued: usize) {
    let containers = ServiceMode::from_env() == ServiceMode::Containers;
    let sizing = Sizing {
        refunds,
        ttl: Duration::from_millis(800),
    };
    let first = seed_covering_every_fault(6, sizing, containers);
    let logs = logs_dir("short-campaign");
    let output = Command::new(HARNESS)
        .args([
            "campaign",
            "--fenced",
            "6",
            "--unfenced",
            "3",
            "--full",
            "0",
        ])
        .args(["--unchecked", &unchecked.to_string()])
        .args(["--reissued", &reissued.to_string()])
        .args(["--refunds", &refunds.to_string(), "--ttl-ms", "800"])
        .args(["--concurrency", &concurrency.to_string()])
        .args(["--first-seed", &first.to_string()])
        .arg("--logs")
        .arg(&logs)
        .arg("--report")
        .arg(logs.join("report.md"))
        .output()
        .unwrap();
    let out = text(&output);
    println!("{out}");
    // Success means: every fenced run passed its audit, and the control found violations.
    assert!(output.status.success(), "{out}");
    check_pictures(&logs, &out);
    for kind in FaultKind::ALL {
        if kind == FaultKind::ContainerPause && !containers {
            continue;
        }
        let row = out
            .lines()
            .find(|line| line.starts_with(&format!("| {} |", kind.name())))
            .unwrap_or_else(|| panic!("no row for {kind:?} in\n{out}"));
        assert!(
            !row.contains(&format!("| {} | 0 (0) |", kind.name())),
            "{kind:?} never injected with fences on: {row}"
        );
    }
    let control = row(&out, "off (control)");
    // | fences | runs | refunds | leases | runs with violations | violations | ...
    assert_eq!(control[2], "3", "{control:?}");
    assert_ne!(
        control[5], "0",
        "no control run showed a violation: {control:?}"
    );
    // | history check | fences on | fences off | ...
    for check in Check::ALL.into_iter().filter(|c| c.is_history()) {
        let cells = row(&out, check.name());
        assert_eq!(
            cells[2], "0",
            "the history check failed a fenced run: {cells:?}"
        );
    }
    let shared_tokens = row(&out, Check::OneHolderPerToken.name());
    assert_ne!(
        shared_tokens[3], "0",
        "the history check saw no control's holders share a token: {shared_tokens:?}"
    );
    if unchecked > 0 {
        let control = row(
            &out,
            "on, counter not bound to the server's history (control)",
        );
        assert_eq!(control[2], unchecked.to_string(), "{control:?}");
        assert_ne!(
            control[5], "0",
            "the failover's control issued no token twice: {control:?}\n{out}"
        );
        assert!(
            out.contains(&format!("{}: ", Check::TokenOrder.name())),
            "the reissued token named: {out}"
        );
    }
    if reissued > 0 {
        // The campaign passes only if the history check caught this control.
        let control = row(&out, "on, one token issued twice (control)");
        assert_eq!(control[2], reissued.to_string(), "{control:?}");
        assert_ne!(control[5], "0", "{control:?}\n{out}");
    }
    let _ = std::fs::remove_dir_all(logs);
}

/// The cells of the first line of `out` that starts with `| <first> |`, trimmed.
fn row<'a>(out: &'a str, first: &str) -> Vec<&'a str> {
    out.lines()
        .find(|line| line.starts_with(&format!("| {first} |")))
        .unwrap_or_else(|| panic!("no row for {first} in\n{out}"))
        .split('|')
        .map(str::trim)
        .collect()
}

/// The report shows a sample run's picture and links one for every run that failed (here
/// the control's), each an SVG with the workers' lanes; a failed run's logs keep it too.
fn check_pictures(logs: &std::path::Path, out: &str) {
    let report = std::fs::read_to_string(logs.join("report.md")).expect("the report");
    assert!(report.contains("## Pictures"), "{report}");
    let links: Vec<&str> = report
        .split("](pictures/report/")
        .skip(1)
        .map(|rest| rest.split(')').next().unwrap())
        .collect();
    assert!(
        links.iter().any(|l| l.ends_with("-on.svg")),
        "no sample run's picture in {links:?}"
    );
    let failed: Vec<&&str> = links.iter().filter(|l| l.ends_with("-off.svg")).collect();
    assert!(!failed.is_empty(), "no failed run's picture in {links:?}");
    for link in &links {
        let svg = std::fs::read_to_string(logs.join("pictures/report").join(link))
            .unwrap_or_else(|e| panic!("{link}: {e}"));
        assert!(svg.starts_with("<svg"), "{link}");
        assert!(svg.contains("worker A") && labels_a_tenure(&svg), "{link}");
    }
    for link in failed {
        let dir = logs.join(link.trim_end_matches(".svg"));
        assert!(
            dir.join("timeline.svg").exists(),
            "no timeline.svg in the kept logs {} ({out})",
            dir.display()
        );
    }
}

/// Creates a run's stores (without the fence column when told) and returns its clients.
fn run_stores(names: &RunNames, lease: LeaseKind, with_fence: bool) -> Clients {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut clients = Clients::connect(
            &services::postgres_url(),
            "harness_test",
            &services::aws_endpoint(),
        )
        .await
        .unwrap();
        if lease.team_database() == TeamDatabase::Mysql {
            clients = clients
                .with_mysql(&services::mysql_url(), None)
                .await
                .unwrap();
        }
        let plan = RunPlan {
            lease,
            ..RunPlan::from_seed(
                1,
                true,
                Sizing {
                    refunds: 20,
                    ttl: Duration::from_secs(1),
                },
                false,
            )
        };
        stores::create(names, &clients, &plan, with_fence)
            .await
            .unwrap();
        clients
    })
}

/// Every row of the refunds' history: (id, state), one per write the table accepted; the
/// run's tables dropped after.
fn history(names: &RunNames, lease: LeaseKind) -> Vec<(String, String)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let sql =
            |table: String| format!("SELECT id, state FROM {table}.refund_history ORDER BY seq");
        match lease.team_database() {
            TeamDatabase::Mysql => {
                let pool = sqlx::MySqlPool::connect(&services::mysql_url())
                    .await
                    .unwrap();
                let sql = sql(format!("`{}`", names.mysql_database()));
                let rows = sqlx::query(AssertSqlSafe(sql))
                    .fetch_all(&pool)
                    .await
                    .unwrap();
                stores::drop_mysql_database(names, &pool).await.unwrap();
                rows.iter().map(|r| (r.get(0), r.get(1))).collect()
            }
            TeamDatabase::Postgres => {
                let pool = sqlx::PgPool::connect(&services::postgres_url())
                    .await
                    .unwrap();
                let sql = sql(format!("\"{}\"", names.schema()));
                let rows = sqlx::query(AssertSqlSafe(sql))
                    .fetch_all(&pool)
                    .await
                    .unwrap();
                stores::drop_schema(names, &pool).await.unwrap();
                rows.iter().map(|r| (r.get(0), r.get(1))).collect()
            }
        }
    })
}

fn worker(names: &RunNames, lease: LeaseKind, redis_url: &str) -> Output {
    Command::new(HARNESS)
        .args(["worker", "--name", "A", "--run", names.id()])
        .args(["--lease", lease.name(), "--ttl-ms", "1000"])
        .args(["--database-url", &services::postgres_url()])
        .args(["--redis-url", redis_url])
        .args(["--aws-endpoint", &services::aws_endpoint()])
        .args(["--mysql-url", &services::mysql_url()])
        // Nothing listens on the discard port: a worker that got as far as calling would fail.
        .args(["--gateway", "127.0.0.1:9"])
        .output()
        .unwrap()
}

#[test]
fn a_worker_on_a_table_without_a_fence_column_fails_fast_and_writes_nothing() {
    without_a_fence_column(LeaseKind::Postgres);
}

/// The same where the refunds live in MariaDB (a run on the MySQL lease).
#[test]
fn a_worker_on_a_mysql_table_without_a_fence_column_fails_fast_and_writes_nothing() {
    without_a_fence_column(LeaseKind::Mysql);
}

fn without_a_fence_column(lease: LeaseKind) {
    let names = RunNames::fresh(7);
    run_stores(&names, lease, false);
    let output = worker(&names, lease, "redis://127.0.0.1:1/");
    let out = text(&output);
    println!("{out}");
    assert_eq!(output.status.code(), Some(2), "{out}");
    assert!(out.contains("has no fence column"), "{out}");
    assert!(out.contains("nothing was written"), "{out}");
    let history = history(&names, lease);
    assert_eq!(history.len(), 20, "only the 20 inserts: {history:?}");
    assert!(history.iter().all(|(_, state)| state == "pending"));
}

#[test]
fn a_redis_that_refuses_scripts_stops_the_worker_before_it_writes() {
    let redis = RedisServer::start(&[
        "--rename-command",
        "EVAL",
        "",
        "--rename-command",
        "EVALSHA",
        "",
    ]);
    let names = RunNames::fresh(8);
    run_stores(&names, LeaseKind::Redis, true);
    let output = worker(&names, LeaseKind::Redis, &redis.url());
    let out = text(&output);
    assert_eq!(output.status.code(), Some(2), "{out}");
    assert!(out.contains("refuses scripts"), "{out}");
    assert!(out.contains("nothing was written"), "{out}");
    assert_eq!(
        history(&names, LeaseKind::Redis).len(),
        20,
        "only the inserts"
    );
}

#[test]
fn an_interrupted_campaign_says_which_run_and_leaves_no_process_behind() {
    let logs = logs_dir("interrupted");
    let campaign = Command::new(HARNESS)
        .args([
            "campaign",
            "--fenced",
            "3",
            "--unfenced",
            "0",
            "--unchecked",
            "0",
            "--reissued",
            "0",
            "--full",
            "0",
        ])
        .args([
            "--refunds",
            "400",
            "--ttl-ms",
            "1000",
            "--first-seed",
            "91000",
        ])
        .arg("--logs")
        .arg(&logs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt once the first run's workers are settling.
    let events = logs.join("seed-91000-on").join("events.log");
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(&events).map_or(true, |e| !e.contains("filed")) {
        assert!(
            Instant::now() < deadline,
            "the first run never filed a refund"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Command::new("kill")
        .args(["-INT", &campaign.id().to_string()])
        .status()
        .unwrap();
    let output = campaign.wait_with_output().unwrap();
    let out = text(&output);
    assert_eq!(output.status.code(), Some(130), "{out}");
    assert!(out.contains("interrupted during run 1 of 3"), "{out}");
    assert!(out.contains("seed 91000"), "{out}");
    std::thread::sleep(Duration::from_secs(1));
    let left = Command::new("pgrep")
        .args(["-f", "settle_91000_"])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "processes left behind: {}",
        String::from_utf8_lossy(&left.stdout)
    );
    let _ = std::fs::remove_dir_all(logs);
}

/// The audit's job check is not a formality: a message left on the queue, a job never
/// finished, deleted twice, or deleted by a worker other than its finisher is each reported.
#[test]
fn the_audit_reports_a_job_message_left_deleted_twice_or_deleted_by_another() {
    let names = RunNames::fresh(8);
    run_stores(&names, LeaseKind::Postgres, true);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Clients of this runtime: the pool of the one that created the stores is gone with it.
    let clients = runtime
        .block_on(Clients::connect(
            &services::postgres_url(),
            "harness_test",
            &services::aws_endpoint(),
        ))
        .unwrap();
    let journal = logs_dir("journal");
    std::fs::write(&journal, "").unwrap();
    let plan = RunPlan::from_seed(
        1,
        true,
        Sizing {
            refunds: 20,
            ttl: Duration::from_secs(1),
        },
        false,
    );
    let job_findings = |deletions: &[&str]| -> Vec<String> {
        let reported = fencing_harness::audit::WorkerReports {
            deletions: deletions.iter().map(|d| d.to_string()).collect(),
            history: Default::default(),
        };
        let report = runtime
            .block_on(fencing_harness::audit::audit(
                &names, &plan, &clients, &journal, &reported,
            ))
            .unwrap();
        report
            .violations
            .iter()
            .filter(|v| v.check == fencing_harness::audit::Check::JobDeletedOnce)
            .map(|v| v.detail.clone())
            .collect()
    };
    let finish = |by: &str| {
        runtime.block_on(async {
            sqlx::query(AssertSqlSafe(format!(
                "UPDATE \"{}\".jobs SET finished_by = $1",
                names.schema()
            )))
            .bind(by)
            .execute(&clients.pool)
            .await
            .unwrap();
        })
    };

    assert_eq!(job_findings(&[]), ["never finished"]);
    finish("B#1");
    let left = job_findings(&["B#1"]);
    assert!(left[0].contains("still queued"), "{left:?}");

    let queue = runtime.block_on(clients.job_queue(&names)).unwrap();
    runtime.block_on(async {
        let message = queue.receive(1).await.unwrap().expect("the job");
        queue.delete(&message).await.unwrap();
    });
    assert_eq!(job_findings(&["B#1"]), Vec::<String>::new());
    assert_eq!(
        job_findings(&["C, finished by B#1"]),
        Vec::<String>::new(),
        "the finisher died before deleting: the next receiver deletes"
    );
    assert_eq!(
        job_findings(&["B#1", "C, finished by B#1", "A, finished by B#1"]),
        Vec::<String>::new(),
        "the message came back while B#1 held it: each who received it again deletes it"
    );
    assert_eq!(
        job_findings(&["A#1", "B#1"]),
        [r#"deleted by ["A#1", "B#1"], finished by B#1"#]
    );
    assert_eq!(
        job_findings(&["B#1", "B#1"]),
        [r#"deleted by ["B#1", "B#1"], finished by B#1"#]
    );
    assert_eq!(
        job_findings(&["A#1"]),
        [r#"deleted by ["A#1"], finished by B#1"#]
    );
    finish("A#1");
    assert_eq!(
        job_findings(&["A#1"]),
        [r#"finished by each of ["A#1", "B#1"]"#]
    );
    let _ = std::fs::remove_file(&journal);
    runtime.block_on(async {
        stores::drop_schema(&names, &clients.pool).await.unwrap();
        // The run's emulator resources go too, so that a long campaign does not keep them.
        stores::drop_aws(&names, &clients, LeaseKind::Postgres)
            .await
            .unwrap();
        let bucket = clients
            .s3
            .head_bucket()
            .bucket(names.receipts_bucket())
            .send()
            .await;
        assert!(bucket.is_err(), "the receipts bucket is still there");
        assert!(
            clients.job_queue(&names).await.is_err(),
            "the queue is still there"
        );
    });
}
