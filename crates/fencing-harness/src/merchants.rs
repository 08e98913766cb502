//! The settlement at scale: many merchants' refunds in one PostgreSQL table, one queue
//! message per merchant, and an audit made of set queries (a per-merchant audit would be a
//! thousand round trips).
//!
//! A refund's id names its merchant and its number (`m_0042_r_000815`), so the audit can
//! tell from the gateway's journal alone that every refund it created is one of the run's.
//! The table has the columns the library's lifecycle needs (`state`, `fence`) and a trigger
//! that writes down every update lowering a fence or taking a refund out of `sent`: the
//! fence allows neither, and the audit asserts that nothing was written down.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use fencing_core::ResourceName;
use sqlx::{AssertSqlSafe, PgPool, Row};

use crate::payments::{self, Outcome};
use crate::stores::RunNames;

/// Refunds settled by a scale run: `merchants` × `refunds_each`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Work {
    /// Merchants, one queue message each (1..=9,999).
    pub merchants: u32,
    /// Refunds per merchant (1..=999,999).
    pub refunds_each: u32,
}

impl Work {
    /// Every refund of the run.
    pub fn refunds(&self) -> u64 {
        u64::from(self.merchants) * u64::from(self.refunds_each)
    }

    /// Whether the ids can name this work (four digits of merchant, six of refund).
    pub fn is_valid(&self) -> bool {
        (1..=9_999).contains(&self.merchants) && (1..=999_999).contains(&self.refunds_each)
    }
}

/// Merchant number `n`'s name (from 1).
pub fn merchant(n: u32) -> String {
    format!("m_{n:04}")
}

/// The lease's resource for `merchant`'s settlement.
pub fn settlement_of(merchant: &str) -> fencing_core::Result<ResourceName> {
    Ok(ResourceName::new(format!("settle:{merchant}"))?)
}

/// The amount of refund `r` of merchant `m`, in cents: spread over 1.00–900.99 EUR so that a
/// refund sent for another's amount shows in the sums.
const AMOUNT_SQL: &str = "100 + (m * 7919 + r * 104729) % 90000";

/// Creates the run's schema and its refunds, all pending, in two statements.
pub async fn create(names: &RunNames, pool: &PgPool, work: Work) -> Result<(), sqlx::Error> {
    let schema = names.schema();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE SCHEMA \"{schema}\";
         CREATE TABLE \"{schema}\".refunds (
             id text PRIMARY KEY, merchant text NOT NULL, amount_cents bigint NOT NULL,
             state text NOT NULL DEFAULT 'pending', fence bigint NOT NULL DEFAULT 0);
         CREATE TABLE \"{schema}\".regressions (
             id text NOT NULL, old_fence bigint NOT NULL, new_fence bigint NOT NULL,
             old_state text NOT NULL, new_state text NOT NULL);
         CREATE FUNCTION \"{schema}\".write_down() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO \"{schema}\".regressions VALUES
                 (NEW.id, OLD.fence, NEW.fence, OLD.state, NEW.state);
             RETURN NEW;
         END $$;
         CREATE TRIGGER write_down BEFORE UPDATE ON \"{schema}\".refunds FOR EACH ROW
             WHEN (NEW.fence < OLD.fence OR (OLD.state = 'sent' AND NEW.state <> 'sent'))
             EXECUTE FUNCTION \"{schema}\".write_down();"
    )))
    .execute(pool)
    .await?;
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO \"{schema}\".refunds (id, merchant, amount_cents)
         SELECT format('m_%s_r_%s', lpad(m::text, 4, '0'), lpad(r::text, 6, '0')),
                'm_' || lpad(m::text, 4, '0'), {AMOUNT_SQL}
         FROM generate_series(1, $1) AS m, generate_series(1, $2) AS r"
    )))
    .bind(i64::from(work.merchants))
    .bind(i64::from(work.refunds_each))
    .execute(pool)
    .await?;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE INDEX ON \"{schema}\".refunds (merchant, id); ANALYZE \"{schema}\".refunds"
    )))
    .execute(pool)
    .await
    .map(drop)
}

/// What the audit of a scale run found, from the refunds table and the gateway's journal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScaleAudit {
    /// Refunds in the table.
    pub refunds: u64,
    /// Refunds not `sent` at the end.
    pub unsettled: u64,
    /// Refunds the gateway created more than once.
    pub sent_twice: u64,
    /// Refunds the gateway never created.
    pub never_sent: u64,
    /// Keys the gateway created that are none of the run's refunds.
    pub strangers: u64,
    /// Creates refused for another amount under a key used before.
    pub conflicts: u64,
    /// The sum of the table's amounts, in cents.
    pub table_cents: i64,
    /// The sum of the amounts the gateway created, in cents.
    pub sent_cents: i64,
    /// Updates that lowered a refund's fence or took it out of `sent`.
    pub regressions: u64,
    /// Calls in the gateway's journal (creates, replays, look-ups).
    pub gateway_calls: u64,
}

impl ScaleAudit {
    /// Each rule the run broke, said in a sentence; empty when it broke none.
    pub fn violations(&self) -> Vec<String> {
        let mut found = Vec::new();
        let mut rule = |count: u64, what: &str| {
            if count > 0 {
                found.push(format!("{count} {what}"));
            }
        };
        rule(self.unsettled, "refunds not sent at the end");
        rule(self.sent_twice, "refunds sent to the gateway twice");
        rule(
            self.never_sent,
            "refunds marked or left without a gateway refund",
        );
        rule(self.strangers, "gateway refunds of no refund of the run");
        rule(self.conflicts, "creates for another amount");
        rule(
            self.regressions,
            "updates lowering a fence or undoing a sent refund",
        );
        if self.table_cents != self.sent_cents {
            found.push(format!(
                "the gateway refunded {} cents for refunds of {} cents",
                self.sent_cents, self.table_cents
            ));
        }
        found
    }
}

/// Audits run `names` of `work`: the table by set queries, the journal at `journal` line by
/// line.
pub async fn audit(
    names: &RunNames,
    pool: &PgPool,
    work: Work,
    journal: &Path,
) -> Result<ScaleAudit, Box<dyn std::error::Error + Send + Sync>> {
    let schema = names.schema();
    let row = sqlx::query(AssertSqlSafe(format!(
        "SELECT count(*), count(*) FILTER (WHERE state <> 'sent'), COALESCE(sum(amount_cents), 0)::bigint,
                (SELECT count(*) FROM \"{schema}\".regressions)
         FROM \"{schema}\".refunds"
    )))
    .fetch_one(pool)
    .await?;
    let count = |i: usize| -> u64 { row.get::<i64, _>(i).try_into().unwrap_or(0) };
    let mut audit = ScaleAudit {
        refunds: count(0),
        unsettled: count(1),
        table_cents: row.get(2),
        regressions: count(3),
        ..ScaleAudit::default()
    };
    let mut created: HashMap<String, u32> = HashMap::with_capacity(work.refunds() as usize);
    for entry in payments::read_journal(journal)? {
        audit.gateway_calls += 1;
        match entry.outcome {
            Outcome::Created => {
                audit.sent_cents += entry.amount_cents.unwrap_or(0);
                *created.entry(entry.key).or_default() += 1;
            }
            Outcome::Conflict => audit.conflicts += 1,
            Outcome::Replayed | Outcome::Found | Outcome::Absent => {}
        }
    }
    for (key, times) in &created {
        if !is_refund_of(key, work) {
            audit.strangers += 1;
        } else if *times > 1 {
            audit.sent_twice += 1;
        }
    }
    let ours = created.keys().filter(|key| is_refund_of(key, work)).count() as u64;
    audit.never_sent = work.refunds().saturating_sub(ours);
    Ok(audit)
}

/// A process's CPU time (user and system) and high-water resident memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU time spent so far.
    pub cpu: Duration,
    /// The most resident memory it has had, in KiB (`VmHWM`).
    pub peak_rss_kib: u64,
}

/// This process's [`Usage`], as `/proc/self` says it (zero where it cannot be read).
pub fn own_usage() -> Usage {
    usage_of("self")
}

/// The [`Usage`] of process `pid` (`self` for this one), zero where it cannot be read.
pub fn usage_of(pid: &str) -> Usage {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let peak_rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    Usage {
        cpu: ticks_to_time(stat_ticks(&stat, 2)),
        peak_rss_kib,
    }
}

/// The CPU time of every process whose command is `command` (as `/proc/<pid>/stat` names it),
/// with that of the children they reaped: a server's processes that ended between two reads
/// stay counted in the one that reaped them.
pub fn cpu_of_command(command: &str) -> Duration {
    let wanted = format!("({command})");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Duration::ZERO;
    };
    let ticks = entries
        .filter_map(|entry| std::fs::read_to_string(entry.ok()?.path().join("stat")).ok())
        .filter(|stat| stat.split_whitespace().nth(1) == Some(wanted.as_str()))
        .map(|stat| stat_ticks(&stat, 4))
        .sum();
    ticks_to_time(ticks)
}

/// The sum of the first `fields` of utime, stime, cutime, cstime in a `/proc/<pid>/stat`
/// line: the 14th to 17th fields, counted from the state after the command's parenthesis.
fn stat_ticks(stat: &str, fields: usize) -> u64 {
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    after_name
        .split_whitespace()
        .skip(11)
        .take(fields)
        .filter_map(|n| n.parse::<u64>().ok())
        .sum()
}

fn ticks_to_time(ticks: u64) -> Duration {
    let per_second = rustix::param::clock_ticks_per_second().max(1);
    Duration::from_micros(ticks * 1_000_000 / per_second)
}

/// Whether `key` is the id of one of `work`'s refunds.
fn is_refund_of(key: &str, work: Work) -> bool {
    let parse = |digits: &str, width: usize| {
        (digits.len() == width && digits.bytes().all(|b| b.is_ascii_digit()))
            .then(|| digits.parse::<u32>().ok())
            .flatten()
    };
    let Some((m, r)) = key
        .strip_prefix("m_")
        .and_then(|rest| rest.split_once("_r_"))
    else {
        return false;
    };
    matches!(
        (parse(m, 4), parse(r, 6)),
        (Some(m), Some(r)) if (1..=work.merchants).contains(&m) && (1..=work.refunds_each).contains(&r)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_sees_its_own_cpu_time_and_peak_memory() {
        let before = own_usage();
        let spun = std::time::Instant::now();
        let mut x = 0u64;
        while spun.elapsed() < Duration::from_millis(150) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let grown = vec![1u8; 64 << 20];
        std::hint::black_box(&grown);
        let after = own_usage();
        assert!(
            after.cpu >= before.cpu + Duration::from_millis(50),
            "{before:?} {after:?}"
        );
        assert!(
            after.peak_rss_kib >= before.peak_rss_kib + 60 * 1024,
            "{before:?} {after:?}"
        );
    }

    #[test]
    fn only_the_runs_own_ids_are_its_refunds() {
        let work = Work {
            merchants: 12,
            refunds_each: 300,
        };
        assert!(is_refund_of("m_0001_r_000001", work));
        assert!(is_refund_of("m_0012_r_000300", work));
        for stranger in [
            "m_0013_r_000001",
            "m_0001_r_000301",
            "m_0000_r_000001",
            "m_0001_r_000000",
            "m_001_r_000001",
            "m_0001_r_00001",
            "m_0001_r_+00001",
            "r_0815",
            "",
        ] {
            assert!(!is_refund_of(stranger, work), "{stranger}");
        }
    }

    #[test]
    fn each_broken_rule_is_said_and_a_clean_audit_says_nothing() {
        let clean = ScaleAudit {
            refunds: 10,
            table_cents: 500,
            sent_cents: 500,
            ..ScaleAudit::default()
        };
        assert!(clean.violations().is_empty());
        let broken = ScaleAudit {
            sent_twice: 2,
            regressions: 1,
            sent_cents: 600,
            ..clean.clone()
        };
        let said = broken.violations();
        assert_eq!(said.len(), 3, "{said:?}");
        assert!(said[0].contains("twice"), "{said:?}");
    }
}
