//! `campaign --soak-minutes M`: fenced runs back to back on one set of services for M minutes
//! (a run under way when time is up finishes; then it stops), every process of the campaign
//! sampled as it goes: the memory and open files of the campaign itself, the emulator, Redis,
//! every etcd member, the gateway and the workers, and the PostgreSQL connections of the run's
//! processes. The report says the refunds per second and whether anything grew from the first
//! windows to the last.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::PgPool;

/// How often the processes are sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(10);

/// The processes the campaign starts, by what they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Role {
    Campaign,
    Emulator,
    Redis,
    Etcd,
    Gateway,
    Worker,
}

impl Role {
    const ALL: [Role; 6] = [
        Role::Campaign,
        Role::Emulator,
        Role::Redis,
        Role::Etcd,
        Role::Gateway,
        Role::Worker,
    ];

    fn name(self) -> &'static str {
        match self {
            Role::Campaign => "campaign",
            Role::Emulator => "AWS emulator",
            Role::Redis => "Redis",
            Role::Etcd => "etcd member",
            Role::Gateway => "gateway",
            Role::Worker => "worker",
        }
    }

    /// What a process is, from its command line; `None` for the shells and `kill`s between.
    /// Redis rewrites its own to one string (`redis-server 127.0.0.1:6379`): the program is
    /// the first word of the first argument.
    fn of(argv: &[String]) -> Option<Role> {
        let program = argv
            .first()?
            .split_whitespace()
            .next()?
            .rsplit('/')
            .next()?;
        if argv.iter().any(|a| a.ends_with("one_request_at_a_time.py")) {
            return Some(Role::Emulator);
        }
        match (program, argv.get(1).map(String::as_str)) {
            ("redis-server", _) => Some(Role::Redis),
            ("etcd", _) => Some(Role::Etcd),
            ("fencing-harness", Some("worker")) => Some(Role::Worker),
            ("fencing-harness", Some("gateway")) => Some(Role::Gateway),
            _ => None,
        }
    }
}

/// The largest of each role's processes at one moment (the largest etcd member, the largest
/// worker alive).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    rss_kib: u64,
    open_files: u64,
}

/// One sample.
#[derive(Clone, Debug)]
pub(crate) struct Sample {
    at: Duration,
    usage: BTreeMap<Role, Usage>,
    pg_connections: u64,
}

/// Samples every process under this one until dropped.
pub(crate) struct Sampler {
    samples: Arc<Mutex<Vec<Sample>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    /// Starts sampling now; `pool` counts the PostgreSQL connections of the runs' processes.
    pub(crate) fn start(pool: PgPool, started: Instant) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let samples = samples.clone();
            async move {
                loop {
                    let usage = tokio::task::spawn_blocking(usage_now)
                        .await
                        .unwrap_or_default();
                    let pg_connections = sqlx::query_scalar::<_, i64>(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'harness\\_%'",
                    )
                    .fetch_one(&pool)
                    .await
                    .map_or(0, |n| n.max(0) as u64);
                    samples.lock().expect("never poisoned").push(Sample {
                        at: started.elapsed(),
                        usage,
                        pg_connections,
                    });
                    tokio::time::sleep(SAMPLE_EVERY).await;
                }
            }
        });
        Sampler { samples, task }
    }

    /// Stops sampling and returns the samples.
    pub(crate) fn finish(self) -> Vec<Sample> {
        self.task.abort();
        self.samples.lock().expect("never poisoned").clone()
    }
}

/// Every process under this one, by role: the largest resident set and open-file count.
fn usage_now() -> BTreeMap<Role, Usage> {
    let me = std::process::id();
    let mut parents: BTreeMap<u32, u32> = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The parent is the second field after the parenthesised command name.
        if let Some(ppid) = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
        {
            parents.insert(pid, ppid);
        }
    }
    let descends = |mut pid: u32| {
        while let Some(&parent) = parents.get(&pid) {
            if parent == me {
                return true;
            }
            pid = parent;
        }
        false
    };
    let mut usage: BTreeMap<Role, Usage> = BTreeMap::new();
    let mut note = |role: Role, pid: u32| {
        let Some(now) = process_usage(pid) else {
            return;
        };
        let most = usage.entry(role).or_default();
        most.rss_kib = most.rss_kib.max(now.rss_kib);
        most.open_files = most.open_files.max(now.open_files);
    };
    note(Role::Campaign, me);
    for &pid in parents.keys() {
        if !descends(pid) {
            continue;
        }
        let argv: Vec<String> = std::fs::read(format!("/proc/{pid}/cmdline"))
            .unwrap_or_default()
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if let Some(role) = Role::of(&argv) {
            note(role, pid);
        }
    }
    usage
}

fn process_usage(pid: u32) -> Option<Usage> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())?;
    let open_files = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(Usage {
        rss_kib,
        open_files,
    })
}

/// A run as the soak counts it: when it ended, and how many refunds it settled.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Finished {
    pub(crate) at: Duration,
    pub(crate) refunds: usize,
}

/// The windows a soak of `wall` is reported in: six, of at least a minute each.
fn window_length(wall: Duration) -> Duration {
    (wall / 6).max(Duration::from_secs(60))
}

/// Growth that counts: more than a quarter above the first full window, and by more than
/// what a process's ordinary churn moves (16 MiB resident, 8 open files, 4 connections).
fn grew(first: u64, last: u64, slack: u64) -> bool {
    last > first + first / 4 && last > first + slack
}

/// The per-window table and the verdict of a soak, in Markdown; the verdict's `bool` is true
/// when nothing grew.
pub(crate) fn report(samples: &[Sample], finished: &[Finished], wall: Duration) -> (String, bool) {
    let windows = Windows::of(samples, finished, wall);
    let (mut out, used) = windows.table(wall);
    // The first window holds the warm-up (imports, first connections): growth is measured
    // from the second, where there is one.
    let Some(&last) = used.iter().rev().find(|&&w| windows.seen[w]) else {
        return (out, false);
    };
    let first = used[if used.len() > 2 { 1 } else { 0 }];
    let grown = windows.growth(first, last);
    let _ = writeln!(out);
    let from_minute = (windows.window * first as u32).as_secs() / 60;
    if grown.is_empty() {
        let _ = writeln!(
            out,
            "Nothing grew: from the window at {from_minute} min to the last, no process's \
             resident memory rose by more than a quarter (and 16 MiB), no open-file count by \
             more than a quarter (and 8), and the PostgreSQL connections by no more than a \
             quarter (and 4)."
        );
    } else {
        let _ = writeln!(
            out,
            "Grew, from the window at {from_minute} min to the last:"
        );
        for line in &grown {
            let _ = writeln!(out, "* {line}");
        }
    }
    (out, grown.is_empty())
}

/// A soak's samples and finished runs, window by window.
struct Windows {
    /// Each window's length.
    window: Duration,
    /// The most each role used in each window.
    most: Vec<BTreeMap<Role, Usage>>,
    /// The most PostgreSQL connections in each window.
    connections: Vec<u64>,
    /// Whether a sample fell in each window.
    seen: Vec<bool>,
    refunds: Vec<usize>,
    runs: Vec<usize>,
}

impl Windows {
    fn of(samples: &[Sample], finished: &[Finished], wall: Duration) -> Self {
        let window = window_length(wall);
        // Whole windows only: the seconds past the last one (the run that was under way when
        // the soak's time ran out) belong to it, not to a window of their own.
        let count = (wall.as_secs() / window.as_secs().max(1)).max(1) as usize;
        let index =
            |at: Duration| ((at.as_secs() / window.as_secs().max(1)) as usize).min(count - 1);
        let mut windows = Windows {
            window,
            most: vec![BTreeMap::new(); count],
            connections: vec![0; count],
            seen: vec![false; count],
            refunds: vec![0; count],
            runs: vec![0; count],
        };
        for sample in samples {
            let w = index(sample.at);
            windows.seen[w] = true;
            windows.connections[w] = windows.connections[w].max(sample.pg_connections);
            for (role, usage) in &sample.usage {
                let m = windows.most[w].entry(*role).or_default();
                m.rss_kib = m.rss_kib.max(usage.rss_kib);
                m.open_files = m.open_files.max(usage.open_files);
            }
        }
        for run in finished {
            windows.refunds[index(run.at)] += run.refunds;
            windows.runs[index(run.at)] += 1;
        }
        windows
    }

    /// The table, a line per window that saw a sample or a run, and those windows.
    fn table(&self, wall: Duration) -> (String, Vec<usize>) {
        let count = self.seen.len();
        let mut out = String::new();
        let roles: Vec<&str> = Role::ALL.iter().map(|r| r.name()).collect();
        let _ = writeln!(
            out,
            "| window | runs | refunds | refunds/s | resident MiB ({}) | open files (same order) | PostgreSQL connections |",
            roles.join(" / ")
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---|---|---:|");
        let used: Vec<usize> = (0..count)
            .filter(|&w| self.seen[w] || self.runs[w] > 0)
            .collect();
        for &w in &used {
            let from = self.window * w as u32;
            let to = if w + 1 == count {
                wall
            } else {
                self.window * (w as u32 + 1)
            };
            let secs = (to.saturating_sub(from)).as_secs_f64().max(1.0);
            let cell = |f: fn(&Usage) -> String| {
                Role::ALL
                    .iter()
                    .map(|r| self.most[w].get(r).map_or("-".to_owned(), f))
                    .collect::<Vec<_>>()
                    .join(" / ")
            };
            let _ = writeln!(
                out,
                "| {}–{} min | {} | {} | {:.1} | {} | {} | {} |",
                from.as_secs() / 60,
                to.as_secs() / 60,
                self.runs[w],
                self.refunds[w],
                self.refunds[w] as f64 / secs,
                cell(|u| format!("{:.0}", u.rss_kib as f64 / 1024.0)),
                cell(|u| u.open_files.to_string()),
                self.connections[w]
            );
        }
        (out, used)
    }

    /// What grew from window `first` to window `last`, a line each.
    fn growth(&self, first: usize, last: usize) -> Vec<String> {
        let mut grown = Vec::new();
        for role in Role::ALL {
            let (Some(a), Some(b)) = (self.most[first].get(&role), self.most[last].get(&role))
            else {
                continue;
            };
            if grew(a.rss_kib, b.rss_kib, 16 * 1024) {
                grown.push(format!(
                    "{} resident memory {:.0} → {:.0} MiB",
                    role.name(),
                    a.rss_kib as f64 / 1024.0,
                    b.rss_kib as f64 / 1024.0
                ));
            }
            if grew(a.open_files, b.open_files, 8) {
                grown.push(format!(
                    "{} open files {} → {}",
                    role.name(),
                    a.open_files,
                    b.open_files
                ));
            }
        }
        let (first, last) = (self.connections[first], self.connections[last]);
        if grew(first, last, 4) {
            grown.push(format!("PostgreSQL connections {first} → {last}"));
        }
        grown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_secs: u64, worker_rss_kib: u64) -> Sample {
        Sample {
            at: Duration::from_secs(at_secs),
            usage: BTreeMap::from([(
                Role::Worker,
                Usage {
                    rss_kib: worker_rss_kib,
                    open_files: 20,
                },
            )]),
            pg_connections: 9,
        }
    }

    #[test]
    fn processes_are_told_apart_by_their_command_lines() {
        let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            Role::of(&argv(&[
                "/work/target/debug/fencing-harness",
                "worker",
                "--name",
                "A"
            ])),
            Some(Role::Worker)
        );
        assert_eq!(
            Role::of(&argv(&[
                "python3",
                "/x/moto/one_request_at_a_time.py",
                "-p",
                "1"
            ])),
            Some(Role::Emulator)
        );
        assert_eq!(
            Role::of(&argv(&["/usr/bin/etcd", "--name", "m0"])),
            Some(Role::Etcd)
        );
        assert_eq!(
            Role::of(&argv(&["redis-server 127.0.0.1:41231"])),
            Some(Role::Redis)
        );
        assert_eq!(
            Role::of(&argv(&["sh", "-c", "redis-server --port 1"])),
            None
        );
        assert_eq!(Role::of(&[]), None);
    }

    #[test]
    fn the_seconds_past_the_last_window_belong_to_it() {
        let wall = Duration::from_secs(3612);
        let samples: Vec<Sample> = (0..360).map(|i| sample(i * 10, 30_000 + i * 100)).collect();
        let finished = [
            Finished {
                at: Duration::from_secs(3100),
                refunds: 200,
            },
            Finished {
                at: Duration::from_secs(3611),
                refunds: 200,
            },
        ];
        let (text, nothing_grew) = report(&samples, &finished, wall);
        assert!(
            !nothing_grew,
            "the growth is judged on the last window with samples: {text}"
        );
        let rows: Vec<&str> = text.lines().filter(|l| l.contains(" min |")).collect();
        assert_eq!(rows.len(), 6, "{text}");
        assert!(rows[0].starts_with("| 0–10 min |"), "{text}");
        assert!(
            rows[5].starts_with("| 50–60 min | 2 | 400 | 0.7 |"),
            "{text}"
        );
    }

    #[test]
    fn a_steady_soak_passes_and_a_growing_one_is_named() {
        let wall = Duration::from_secs(600);
        let finished = [Finished {
            at: Duration::from_secs(300),
            refunds: 200,
        }];
        let steady: Vec<Sample> = (0..60).map(|i| sample(i * 10, 30_000 + i % 3)).collect();
        let (text, nothing_grew) = report(&steady, &finished, wall);
        assert!(nothing_grew, "{text}");
        assert!(text.contains("Nothing grew"), "{text}");

        let leaking: Vec<Sample> = (0..60)
            .map(|i| sample(i * 10, 30_000 + i * 1_000))
            .collect();
        let (text, nothing_grew) = report(&leaking, &finished, wall);
        assert!(!nothing_grew, "{text}");
        assert!(text.contains("worker resident memory"), "{text}");
    }
}
