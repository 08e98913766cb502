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
/// the part of the report that does not change with its figures.
const WHAT_A_RUN_IS: &str = "This page is written by the harness (`crates/fencing-harness`); every figure below was
measured by the command at the end, on a 2-core machine, against PostgreSQL, Redis, etcd and
the moto emulator of S3 and DynamoDB.

## What a run is

A run settles merchant m_4471's refunds of 70.25 EUR each (1,200 of them make the 84,300.00
EUR settlement) with separate processes:

* `gateway`, a payment gateway over HTTP that creates a refund once per idempotency key (the
  refund id) and journals every call;
* a job queue: the settlement is one message on an SQS queue (on the emulator). A worker
  receives it with a visibility timeout of the lease's TTL (in whole seconds, rounded up) and
  extends that every third of the TTL while it works; a worker that stalls or dies stops
  extending, the message becomes visible again, and the next worker to poll receives it;
* two workers (`fencing-harness worker`) polling the queue. The one that receives the job takes the merchant's lease (Redis, PostgreSQL, DynamoDB,
  a three-member etcd cluster or MySQL, rotating with the seed), takes the job's row and
  claims each refund in PostgreSQL (in MariaDB on the MySQL lease: a team whose tables all
  live in MySQL, the lease's tables beside them in the run's database), calls the gateway,
  confirms the refund, posts its ledger entry in DynamoDB, puts its receipt in S3 and marks it
  filed; once none is left it marks the job finished and deletes the message. Every one of
  those writes carries the lease's fencing token and is checked by the
  store it goes to; the message is deleted only after the job's finishing write was
  accepted, so a worker that stalled cannot delete the job another is working on (the
  emulator, unlike SQS, honours an old receipt handle). A worker does not consult its lease renewal before writing (that check
  narrows the window without closing it): what keeps a stale worker out is the fences alone.

The seed of a run decides its lease, its faults and when they strike; the campaign prints each
run's plan, and `campaign --replay SEED` runs one again (with the campaign's `--refunds` and
`--ttl-ms`; `--fences off` for a control run, `--counter-binding off` for a failover's control;
`--worked-example` for the full-figures run; `--lease KIND` puts every run on one lease).
The plan is replayed exactly; where in a refund's steps a signal lands is the operating
system's business, so the interleavings, unlike the plan, can differ.

## The faults

* **SIGSTOP past the TTL**: the holder (the last worker to acquire the lease or file a
  refund) is stopped for 1.5 to 2 TTLs, renewal and all, then continued; the other worker
  takes over meanwhile.
* **SIGKILL between call and confirm**: the worker stops itself right after the gateway
  answered for a chosen refund and is killed there; a new worker starts in its place, and the
  next holder finds the refund in flight and asks the gateway before sending anything.
* **Redis restart, nothing persisted** (half the runs on the Redis lease): the lease and the
  counter vanish; the epochs behind Redis tokens live in PostgreSQL, so tokens still rise.
* **Redis failover to a lagging replica** (the other half: the run's Redis is a primary, a
  replica and three sentinels of its own, and the workers reach the primary through the
  sentinels): the replica is made to lag (it has every write so far, then it is stopped and
  the primary drops its link), the holder is killed so that the lease changes hands on the
  primary alone, then the primary is killed and the sentinels promote the replica, whose
  counter is behind the token just issued. The counter is bound to the server's history
  (`run_id` and `master_replid`), so the promoted replica's first acquisition opens a new
  epoch rather than issue that token again. In half these runs the replica lags from before
  the run's first acquisition, so the promoted replica has no counter for the resource at all.
* **PostgreSQL failover to a lagging standby** (half the runs on the PostgreSQL lease: its
  leases and counters live on a primary and an asynchronous streaming standby of the run's
  own, the machine's PostgreSQL 15, which the workers reach through a relay standing for a
  virtual address): the standby is stopped once it has replayed everything, the holder is
  killed so that the lease changes hands on the primary alone, then the primary is killed,
  the standby started and promoted, and the relay moved to it (connections open then are
  cut). The counter rows are bound to the server's history (timeline and postmaster start),
  so the next token jumps past anything the lost primary could have issued. In half these
  runs the standby stops before the run's first acquisition, so the promoted standby has no
  counter row for the resource at all: the table's binding row makes it start above every
  token the lost primary issued.
* **pg_terminate_backend** on every connection of the run's workers (runs whose refunds
  are in PostgreSQL).
* **KILL of the workers' MySQL connections** (half the runs on the MySQL lease, drawn):
  `KILL CONNECTION` of every connection whose default database is the run's; a write in
  flight is rolled back or committed, and its worker cannot tell which (it sends it again
  with the same token).
* **A worker cut off from PostgreSQL past the TTL** (half the runs whose refunds are in PostgreSQL, drawn): in such a run
  each worker reaches PostgreSQL (its refunds, the job row, and the leases, counters or
  epochs kept there) through a TCP relay of its own; the holder's relay is partitioned for
  1.5 to 2 TTLs, then healed. A partition holds every byte both ways: nothing is refused and
  nothing answered, so what the worker sent meanwhile has an unknown outcome to it and
  reaches the server only at the heal, after the other worker may have taken the lease over
  and written. The workers give up on an attempt unanswered for a TTL
  (`Holder::with_request_timeout`) and send it again with the same token, twice, so a write
  cut off for longer returns with its outcome unknown and the next holder settles it. The worker process runs on throughout (unlike a stall): its Redis, DynamoDB
  or etcd lease may be renewed meanwhile, and then no one takes over.
* **A worker cut off from Redis past the TTL** (every run on the Redis lease without
  Sentinel): each worker reaches Redis through a relay of its own, and the holder's
  is partitioned the same way. This is the case a fence is for, with the worker awake: it
  cannot renew, so its lease runs out and the other worker takes over, while its own
  PostgreSQL writes (and gateway calls) go on; the fences refuse them once the new holder
  has written. Its renewals and acquisitions sent meanwhile reach Redis at the heal.
* **A worker cut off from the AWS emulator past the TTL** (half the runs, drawn): the same
  again between the holder and the emulator, which serves the queue, the DynamoDB ledger, the
  S3 receipts and (on that lease) the DynamoDB lease and counters. The holder cannot extend
  its message's visibility, so the job is delivered to the other worker; its ledger entries
  and receipts sent meanwhile have unknown outcomes and arrive at the heal, where the fences
  in the item and in the object judge them.
* **A worker cut off from one etcd member past the TTL** (half the runs on the etcd lease):
  each worker reaches the first member of the cluster through a relay of its own and the
  other two directly; the holder's relay is partitioned. A minority is lost to one client
  while the cluster stays whole: the client's requests to that member hang until they time
  out, and its lease renewals must go through the others.
* **A worker cut off from MySQL past the TTL** (every run on the MySQL lease): each worker
  reaches MySQL, where the lease, its counters, the refunds and the job's row live, through
  a relay of its own; the holder's relay is partitioned. It cannot renew, so its lease runs
  out and the other worker takes over; its renewal and its refund writes, held in the
  relay, arrive at the heal, after the new holder may have written, and must be refused.
* **etcd leader SIGKILL** (runs on the etcd lease): the cluster's leader is killed and
  restarted on its data 1.5 to 2 TTLs later; the other two members elect a new leader
  meanwhile, under the holder's renewals and the other worker's acquisitions.
* **A store's container paused past the TTL** (`docker pause`, containers mode only:
  `FENCING_TEST_SERVICES=containers`).
* **A holder's clock set behind**, and **the waiting workers' clocks set ahead** (each drawn
  in half the runs, on every lease): in such a run the workers run under libfaketime
  (Debian's `faketime`, preloaded), each reading its wall clock's offset from a file of its
  own. When the fault strikes, the holder's wall clock is set back by 1.5 to 2 TTLs (or every
  other live worker's set ahead by as much) for as long, then put right: two jumps, during a
  lease. The monotonic clock is left alone (every timer, the guard's local deadline and the
  history's times run on it), as a clock stepped by NTP or an operator leaves it. Of the
  leases only DynamoDB's reads a wall clock: its item's expiry is written by the holder's
  clock and judged by the taker's, so a holder behind renews its lease into the past and a
  waiting worker ahead sees a live lease as expired; every AWS call's signature carries the
  skewed time too. The others keep their expiry on their servers. Safety must not depend on
  any of it (the fences order the holders); what it costs in liveness is the table of
  hand-overs below the summary: how often the lease changed hands in fenced runs with a clock
  fault and without, and how long each hand-over took, from the last write accepted under
  the old token to the new acquisition.

## The audit

After each run the campaign reads the stores directly, never through the library: plain SQL
on the refunds and on a history table a trigger fills with every accepted write, a DynamoDB
scan of the ledger, every version of every receipt in the versioned S3 bucket (the fence read
from each envelope by hand), and the gateway's journal. It checks that every refund was
created exactly once at the gateway; that all were sent and filed, with the whole amount both
paid (gateway) and recorded (ledger); that each refund was confirmed by the holder that
claimed it, with the gateway's reference; that no fence ever went down, in the refunds'
history or across receipt versions; that each refund, its ledger entry and its receipt were
last written under one token, the filer's (the ledger keeps no history of its own, so this is
what the audit can say of it); that every sent refund has its ledger entry and its
receipt; and that the job was finished by one holder and its message deleted at most once by
that holder, and otherwise only by workers that received it again and found the job finished
(had the finisher died before deleting, or the message come back while it held it), with the
queue empty by its own counts. Claims and confirms are recorded as the acquisition that
wrote them (worker name and acquisition number, in columns of the refunds table), so these
checks mean the same with fences off, where every token is the same.

## The history check

The end state can hide what happened on the way. Each worker also prints every operation it
saw end, timed by the machine's monotonic clock (one clock for every process): each
acquisition (`op acquire <invoked> <ended> <holder> token <t>`) and each fenced write, from
the library's own event when the write ended (`op write <invoked> <ended> <holder> <store>
<record> <claim|holder_only> token <t>: <accepted|refused|unknown>`, invoked at its first
attempt). One operation precedes another when it ended before the other was invoked;
otherwise they overlapped and neither order is implied. An operation that never ended (its
process killed) has no line, and a write whose outcome stayed unknown proves nothing, so the
rules only accuse a run of what was seen. The campaign checks the whole history against four
rules:

* **tokens unique, in real-time order**: no two acquisitions carry one token, and an
  acquisition that ended before another was invoked carries the lower token (the lease acts
  as a linearizable counter);
* **one holder's writes per token**: no two holders had a write accepted under one token
  (a store tells holders apart by their tokens only);
* **no stale write accepted**: once a holder's claim on a record was accepted, no write that
  an older holder (one whose acquisition ended before this holder's began) invoked after
  that was accepted on the record, in any store: the fence's promise, seen from the clients;
* **confirm after its holder's claim**: every accepted holder-only write (a confirm) was
  invoked after its own holder's claim of the record, under the same token, was accepted.

With fences off, every rule but the last must break (every acquisition presents one token,
and stale writes are accepted). The history checker's own control (`--reissued`) runs with
fences on and a seeded bug in the lease: an acquisition issued an even token is handed the
token below it, the one the acquisition before it was issued. Its holders present that token
to the stores, which refuse most of what it lets through; the history check must find the
token issued twice whatever the end state shows.

The control runs the same job with fences off: every write presents one token, so the stores
admit everything and only the lease's TTL separates the workers. Each control run includes a
stall. The audit must find violations there, or it proves nothing. The failover's control
(`--unchecked`) runs with fences on, behind Sentinel, failed over, with the Redis counter not
bound to the server's history (`RedisLease::may_reissue_tokens`): the promoted replica issues
again the token the last holder got, and the history check must find it.

Runs are sized to fit a 2-core machine: 200 refunds and a 1.5 s TTL each (faults strike
between the 10th and the 50th percent of the refunds), and one run of the worked example at
its full figures: 1,200 refunds, a 30 s TTL, the holder stalled at r_0815 for 45 s. The
same runs back to back for an hour, every process's memory and open files sampled, are in
[soak.md](soak.md).

## Results

";

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
    let _ = write!(
        out,
        "# Soak: the settlement for an hour

This page is written by the harness (`crates/fencing-harness`, `campaign --soak-minutes`);
every figure below was measured by the command at the end, on a 2-core machine.

A soak is the fault campaign of [reliability.md](reliability.md) with fences on, run back to
back on one set of services for a fixed time: the same runs (each a settlement of refunds by
two workers taking the job from its SQS queue, under the faults its seed draws, audited from
the stores), seeds rising from the first. It stops by itself: no run starts after the time is
up, and the one under way finishes. Every 10 s it samples every process it started (the
campaign itself, the AWS emulator, Redis, each etcd member, the gateway and the workers alive
at that moment) for its resident memory (`VmRSS`) and open files (`/proc/PID/fd`), and counts
the PostgreSQL connections of the runs' processes (`pg_stat_activity`). A run that passed its
audit has its PostgreSQL schema and its emulator tables, bucket and queue dropped, as a
deployment's retention would.

Each window gives the largest value seen in it (for etcd, the largest member; for workers,
the largest alive). Growth is measured from the second window (the first holds the start-up)
to the last.

"
    );
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
