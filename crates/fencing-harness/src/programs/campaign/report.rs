//! The summary table at the end of a campaign, and `docs/reliability.md`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use fencing_harness::audit::{Check, euros};
use fencing_harness::plan::{FaultKind, LeaseKind, Protection};

use super::gallery::Drawn;
use super::run::{RunResult, UnknownOutcomes};

/// Totals over the runs with fences on, or off.
#[derive(Default)]
struct Totals {
    runs: usize,
    faults: BTreeMap<FaultKind, usize>,
    runs_with_fault: BTreeMap<FaultKind, usize>,
    leases: BTreeMap<LeaseKind, usize>,
    runs_with_violations: usize,
    violations: BTreeMap<Check, usize>,
    incidents: usize,
    repeated_calls: usize,
    redeliveries: usize,
    unknown_outcomes: UnknownOutcomes,
    refunds: usize,
    wall: Duration,
}

fn totals<'a>(results: impl Iterator<Item = &'a RunResult>) -> Totals {
    let mut totals = Totals::default();
    for result in results {
        totals.runs += 1;
        for (kind, n) in &result.injected {
            *totals.faults.entry(*kind).or_default() += n;
            *totals.runs_with_fault.entry(*kind).or_default() += 1;
        }
        *totals.leases.entry(result.plan.lease).or_default() += 1;
        if !result.audit.violations.is_empty() {
            totals.runs_with_violations += 1;
        }
        for violation in &result.audit.violations {
            *totals.violations.entry(violation.check).or_default() += 1;
        }
        totals.incidents += result.incidents.len();
        totals.repeated_calls += result.audit.repeated_calls;
        totals.redeliveries += result.deliveries.saturating_sub(1);
        totals.unknown_outcomes.add(&result.unknown_outcomes);
        totals.refunds += result.plan.sizing.refunds;
        totals.wall += result.wall;
    }
    totals
}

fn minutes(d: Duration) -> String {
    format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
}

/// The table printed at the end and written to the report: the runs with fences on, the
/// control with fences off, and the failover's control (shown only when it ran).
pub(crate) fn summary(results: &[RunResult]) -> String {
    // Fences on and off always; the failover's control only when it ran.
    let groups: Vec<(Protection, Totals)> = Protection::ALL
        .into_iter()
        .map(|p| {
            (
                p,
                totals(results.iter().filter(|r| r.plan.protection() == p)),
            )
        })
        .filter(|(p, t)| matches!(p, Protection::Full | Protection::FencesOff) || t.runs > 0)
        .collect();
    let mut out = totals_table(&groups);
    out.push_str(&unknown_outcomes_table(&groups));
    out.push_str(&breakdown_tables(&groups));
    out.push_str(&failover_timings(results));
    out.push_str(&clock_costs(results));
    out
}

/// What the clock faults cost in liveness, lease by lease: the hand-overs of the lease in
/// fenced runs with a clock fault and without one, and how long each took.
fn clock_costs(results: &[RunResult]) -> String {
    let clock_fault = |r: &RunResult| {
        r.injected.contains_key(&FaultKind::ClockBehind)
            || r.injected.contains_key(&FaultKind::ClockAhead)
    };
    if !results.iter().any(clock_fault) {
        return String::new();
    }
    let mut out = "\nWhat the clock faults cost: every hand-over of the lease in the fenced runs, \
                   from the last write accepted under the old token to the new acquisition, in \
                   TTLs of its run, in runs with a clock fault and without.\n\n| lease | clock \
                   fault | runs | hand-overs | per run | hand-over, median | hand-over, longest \
                   |\n|---|---|---:|---:|---:|---:|---:|\n"
        .to_owned();
    for lease in LeaseKind::ALL {
        for struck in [true, false] {
            let runs: Vec<&RunResult> = results
                .iter()
                .filter(|r| r.plan.protection() == Protection::Full && r.plan.lease == lease)
                .filter(|r| clock_fault(r) == struck)
                .collect();
            if runs.is_empty() {
                continue;
            }
            let mut ttls: Vec<f64> = runs
                .iter()
                .flat_map(|r| {
                    let ttl = r.plan.sizing.ttl.as_secs_f64();
                    r.handovers.iter().map(move |gap| gap.as_secs_f64() / ttl)
                })
                .collect();
            ttls.sort_unstable_by(f64::total_cmp);
            let shown = |ttl: Option<&f64>| ttl.map_or("-".to_owned(), |t| format!("{t:.2} TTL"));
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {:.1} | {} | {} |",
                lease.name(),
                if struck { "yes" } else { "no" },
                runs.len(),
                ttls.len(),
                ttls.len() as f64 / runs.len() as f64,
                shown(ttls.get(ttls.len() / 2)),
                shown(ttls.last()),
            );
        }
    }
    out
}

/// One line per protection: runs, refunds, leases, violations, incidents, wall time.
fn totals_table(groups: &[(Protection, Totals)]) -> String {
    let mut out = String::new();
    let kinds: Vec<&str> = LeaseKind::ALL.iter().map(|k| k.name()).collect();
    let _ = writeln!(
        out,
        "| fences | runs | refunds | leases ({}) | runs with violations | violations | incidents | repeated gateway calls | job redeliveries | wall time |",
        kinds.join("/")
    );
    let _ = writeln!(out, "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|");
    for (protection, t) in groups {
        if t.runs == 0 {
            continue;
        }
        let label = match protection {
            Protection::Full => "on",
            Protection::FencesOff => "off (control)",
            Protection::CounterUnbound => "on, counter not bound to the server's history (control)",
            Protection::TokenReissued => "on, one token issued twice (control)",
        };
        let leases: Vec<String> = LeaseKind::ALL
            .iter()
            .map(|k| t.leases.get(k).copied().unwrap_or(0).to_string())
            .collect();
        let _ = writeln!(
            out,
            "| {label} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            t.runs,
            t.refunds,
            leases.join("/"),
            t.runs_with_violations,
            t.violations.values().sum::<usize>(),
            t.incidents,
            t.repeated_calls,
            t.redeliveries,
            minutes(t.wall)
        );
    }
    out
}

/// Per protection, the writes whose answer a worker lost, and how each ended.
fn unknown_outcomes_table(groups: &[(Protection, Totals)]) -> String {
    let mut out = String::new();
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| fences | writes with an unknown outcome | settled: applied | settled: refused | returned still unknown |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|");
    for (protection, t) in groups.iter().filter(|(_, t)| t.runs > 0) {
        let u = &t.unknown_outcomes;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            protection.label(),
            u.unknown,
            u.applied,
            u.refused,
            u.still_unknown
        );
    }
    out
}

/// Per protection, the runs and injections of each fault kind, and the violations of each
/// audit check.
fn breakdown_tables(groups: &[(Protection, Totals)]) -> String {
    let mut out = String::new();
    let _ = writeln!(out);
    let columns = |what: &str| -> String {
        groups
            .iter()
            .map(|(p, _)| format!(" {}: {what} |", p.label()))
            .collect()
    };
    let rule = "---:|".repeat(groups.len());
    let _ = writeln!(out, "| fault |{}", columns("runs (injections)"));
    let _ = writeln!(out, "|---|{rule}");
    for kind in FaultKind::ALL {
        let cells: String = groups
            .iter()
            .map(|(_, t)| {
                format!(
                    " {} ({}) |",
                    t.runs_with_fault.get(&kind).copied().unwrap_or(0),
                    t.faults.get(&kind).copied().unwrap_or(0)
                )
            })
            .collect();
        let _ = writeln!(out, "| {} |{cells}", kind.name());
    }
    for (heading, history) in [("end-state audit check", false), ("history check", true)] {
        let _ = writeln!(out);
        let _ = writeln!(out, "| {heading} |{}", columns("violations"));
        let _ = writeln!(out, "|---|{rule}");
        for check in Check::ALL.into_iter().filter(|c| c.is_history() == history) {
            let cells: String = groups
                .iter()
                .map(|(_, t)| format!(" {} |", t.violations.get(&check).copied().unwrap_or(0)))
                .collect();
            let _ = writeln!(out, "| {} |{cells}", check.name());
        }
    }
    out
}

/// The failovers' timings, kind by kind: the promotion, and the first token on the promoted
/// server.
fn failover_timings(results: &[RunResult]) -> String {
    let spread = |mut ms: Vec<u128>| -> String {
        ms.sort_unstable();
        match (ms.first(), ms.get(ms.len() / 2), ms.last()) {
            (Some(min), Some(median), Some(max)) => {
                format!("median {median} ms (from {min} to {max} ms)")
            }
            _ => "none".to_owned(),
        }
    };
    let mut out = String::new();
    for kind in [FaultKind::RedisFailover, FaultKind::PgFailover] {
        let timings: Vec<_> = results
            .iter()
            .flat_map(|r| &r.failovers)
            .filter(|t| t.kind == kind)
            .collect();
        if timings.is_empty() {
            continue;
        }
        let promoted = spread(timings.iter().map(|t| t.promoted.as_millis()).collect());
        let first: Vec<u128> = timings
            .iter()
            .filter_map(|t| t.first_token.map(|d| d.as_millis()))
            .collect();
        let seen = first.len();
        let fresh = timings.iter().filter(|t| t.fresh_resource).count();
        let _ = write!(
            out,
            "\n{}: {} ({fresh} on a resource first used during the lag, whose counter the \
             promoted server did not have at all); the lagging server took writes {promoted} \
             after the primary was killed; the first token on it was reported {} after the \
             kill ({seen} of the {} saw one before the run ended).\n",
            kind.name(),
            timings.len(),
            spread(first),
            timings.len()
        );
    }
    out
}

/// One line per run.
pub(crate) fn run_line(result: &RunResult) -> String {
    let faults: Vec<String> = result
        .injected
        .iter()
        .map(|(k, n)| format!("{} x{n}", k.name()))
        .collect();
    let verdict = if result.audit.violations.is_empty() {
        "0 violations".to_owned()
    } else {
        format!("{} violations", result.audit.violations.len())
    };
    let incidents = if result.incidents.is_empty() {
        String::new()
    } else {
        format!("; incidents: {}", result.incidents.join("; "))
    };
    format!(
        "seed {:>5} {:<8} {:<17} {:>5} sent, {} paid, {} recorded, job received {}x, {verdict} [{}] {:.1} s{incidents}",
        result.plan.seed,
        result.plan.lease.name(),
        result.plan.protection().label(),
        result.audit.sent,
        euros(result.audit.paid_cents),
        euros(result.audit.recorded_cents),
        result.deliveries,
        faults.join(", "),
        result.wall.as_secs_f64(),
    )
}

/// The report's pictures: the sample run shown, each failed run linked.
fn pictures(drawn: &[Drawn]) -> String {
    let mut out = String::new();
    if drawn.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\n## Pictures\n\nEach picture is drawn by the harness (`crates/fencing-timeline`) from what the \
         campaign saw of the run: a lane per worker with each lease it was granted (labelled with \
         its token) and, where it went on after the lease ended, the time it acted without one; \
         the stalls and kills the campaign struck it with; its accepted writes, a band per run of \
         records per store; every write a store refused, naming the store, the record and the \
         fence it met; take-overs and look-ups; and a lane for faults that struck a service.\n"
    );
    for d in drawn.iter().filter(|d| d.passed) {
        let _ = writeln!(
            out,
            "A sample run (seed {}, {}; {}):\n\n![seed {}]({})\n",
            d.seed,
            d.protection.label(),
            d.faults.join(", "),
            d.seed,
            d.link
        );
    }
    let failed: Vec<String> = drawn
        .iter()
        .filter(|d| !d.passed)
        .map(|d| format!("[seed {}, {}]({})", d.seed, d.protection.label(), d.link))
        .collect();
    if !failed.is_empty() {
        let _ = writeln!(out, "Every run whose audit failed: {}.", failed.join(", "));
    }
    out
}

/// `docs/reliability.md`: how the campaign works, the command, what it measured, and the
/// pictures in `drawn`.
pub(crate) fn document(
    results: &[RunResult],
    command: &str,
    wall: Duration,
    containers: bool,
    drawn: &[Drawn],
) -> String {
    let concurrency = results.first().map_or(1, |r| r.plan.concurrency);
    let leases: Vec<&str> = LeaseKind::ALL
        .iter()
        .filter(|kind| results.iter().any(|r| r.plan.lease == **kind))
        .map(|kind| kind.name())
        .collect();
    let one_lease = if leases.len() < LeaseKind::ALL.len() {
        format!(", runs on the {} lease only", leases.join(" and "))
    } else {
        String::new()
    };
    let mut out = format!(
        "# Reliability: the settlement under real faults{}{}{one_lease}\n\n",
        if containers {
            ", stores in containers"
        } else {
            ""
        },
        if concurrency > 1 { ", pipelined" } else { "" }
    );
    out.push_str(WHAT_A_RUN_IS);
    if concurrency > 1 {
        let _ = write!(
            out,
            "Each worker keeps {concurrency} refunds in flight through the batch's pipeline\n\
             (`--concurrency {concurrency}`): claims, gateway calls and confirms side by side, each\n\
             confirm followed by the refund's ledger entry, receipt and `filed`, under the rules of\n\
             one at a time (the first refusal stops every new claim and call; what is in flight\n\
             finishes, still fenced). The campaign one refund at a time:\n\
             [reliability.md](reliability.md).\n\n"
        );
    }
    out.push_str(if containers {
        "PostgreSQL and the AWS emulator ran in containers (`FENCING_TEST_SERVICES=containers`,\n\
         images from `containers/prepare.sh`), so a store's container could be paused too. The\n\
         campaign on the machine's own services: [reliability.md](reliability.md).\n\n"
    } else {
        "PostgreSQL and the AWS emulator were the machine's own. The campaign with both in\n\
         containers, where a store's container is also paused past the TTL:\n\
         [reliability-containers.md](reliability-containers.md).\n\n"
    });
    out.push_str(&summary(results));
    out.push_str(&every_run(results, command, wall));
    out.push_str(&pictures(drawn));
    out
}

/// How the campaign ran its runs, what faults it struck them with and what the audit checks:
/// the part of the report that does not change with its figures (a template of its own, so
/// the prose is edited as the Markdown it is).
const WHAT_A_RUN_IS: &str = include_str!("prose/what_a_run_is.md");

/// The notes on the summary, the command, every run's line, and a few of the controls'
/// violations.
fn every_run(results: &[RunResult], command: &str, wall: Duration) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "
Incidents are problems of a run itself (a worker that exited with an error, a run past its
deadline); repeated gateway calls are creates answered from an earlier create by idempotency
key: harmless, and what the idempotency key is for. Job redeliveries are receives of the job's
message after the first: a stalled or killed worker's message coming back to the queue.
A write with an unknown outcome is one with an attempt whose answer its worker never saw (a
connection cut or terminated mid-request, a server restarted under it); the library sent it
again with the same token and settled it by how it ended: applied (the retry landed, or
found that the lost attempt had), refused (by then a newer holder's fence or the record's
state), or returned to the worker still unknown, which then leaves the record to the next
holder. The workers say each one as it happens (`unknown` and `settled` lines in the logs).

Wall time of the campaign: {}. Command:

```
{command}
```

Every run:

```
",
        minutes(wall)
    );
    for result in results {
        out.push_str(&run_line(result));
        out.push('\n');
    }
    out.push_str("```\n");
    let examples: Vec<String> = results
        .iter()
        .filter(|r| !r.plan.fences)
        .flat_map(|r| r.audit.violations.iter().take(2))
        .take(6)
        .map(|v| format!("* {v}"))
        .collect();
    if !examples.is_empty() {
        let _ = write!(
            out,
            "\nWhat the control's violations look like (the first few):\n\n{}\n",
            examples.join("\n")
        );
    }
    out
}

/// What a soak is and how it samples: the part of `docs/soak.md` that does not change with its
/// figures.
const SOAK_IS: &str = include_str!("prose/soak.md");

/// `docs/soak.md`: what a soak is, its windows and verdict (`windows`), the audit of its runs,
/// the command, and the pictures in `drawn`.
pub(crate) fn soak_document(
    results: &[RunResult],
    windows: &str,
    command: &str,
    wall: Duration,
    drawn: &[Drawn],
) -> String {
    let mut out = String::new();
    out.push_str(SOAK_IS);
    out.push_str(windows);
    let _ = write!(
        out,
        "
The runs' audit:

{}
Wall time: {}. Command:

```
{command}
```
",
        summary(results),
        minutes(wall)
    );
    out.push_str(&pictures(drawn));
    out
}
