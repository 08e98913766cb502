//! MariaDB servers of a test's own, from the machine's `mariadbd`: a primary writing a binary
//! log, its asynchronous replica, and what fault tests do to them (kill, restart, promote,
//! dump and restore).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::local::{Watched, free_port, scratch};

/// A `mariadbd` on a free loopback port with a data directory of its own (user `root`
/// without a password, a database `test`), its binary log on (row format, GTIDs), the
/// character set and collation Debian's configuration gives the machine's server (utf8mb4,
/// `utf8mb4_general_ci`), killed and removed when dropped, and also when the test process
/// dies.
#[derive(Debug)]
pub struct LocalMariaDb {
    process: Option<Watched>,
    port: u16,
    server_id: u32,
    data: PathBuf,
    dir: PathBuf,
}

/// Runs the `mariadb` client on `port` with `sql`, panicking with its output on failure;
/// its output, tab-separated and without column names.
fn client(port: u16, database: &str, sql: &str) -> String {
    let out = Command::new("mariadb")
        .args(["-uroot", "-h127.0.0.1", "-N", "-B"])
        .arg(format!("-P{port}"))
        .arg(database)
        .arg("-e")
        .arg(sql)
        .output()
        .unwrap_or_else(|e| panic!("mariadb client: {e}"));
    assert!(
        out.status.success(),
        "mariadb on {port}: {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim_end().to_owned()
}

impl LocalMariaDb {
    /// A new primary (server id 1) with a database `test`.
    pub fn primary() -> Self {
        let mut server = Self::installed(1);
        server.start();
        server.sql("mysql", "CREATE DATABASE test");
        server
    }

    /// An asynchronous replica of `primary` (server id 2), replicating everything the primary
    /// has written since it was installed, started.
    pub fn replica_of(primary: &LocalMariaDb) -> Self {
        let mut replica = Self::installed(primary.server_id + 1);
        replica.start();
        replica.sql(
            "mysql",
            &format!(
                "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {port}, \
                 MASTER_USER = 'root', MASTER_PASSWORD = '', MASTER_USE_GTID = slave_pos; \
                 SET GLOBAL read_only = ON; START SLAVE",
                port = primary.port
            ),
        );
        replica
    }

    /// A physical backup of `primary`, as a backup tool takes one: the primary killed (the
    /// copy is what a crash leaves, which InnoDB recovers), its data directory copied, the
    /// primary started again. The copy keeps the primary's server id, as a restored backup
    /// does; it is not started.
    pub fn backup_of(primary: &mut LocalMariaDb) -> Self {
        let dir = scratch("fencing-mariadb").unwrap_or_else(|why| panic!("{why}"));
        let data = dir.join("data");
        primary.kill();
        let status = Command::new("cp")
            .arg("-a")
            .arg(&primary.data)
            .arg(&data)
            .status()
            .expect("cp");
        assert!(status.success(), "copy {}", primary.data.display());
        primary.start();
        LocalMariaDb {
            process: None,
            port: free_port().unwrap_or_else(|why| panic!("{why}")),
            server_id: primary.server_id,
            data,
            dir,
        }
    }

    fn installed(server_id: u32) -> Self {
        let dir = scratch("fencing-mariadb").unwrap_or_else(|why| panic!("{why}"));
        let data = dir.join("data");
        // A temporary directory of its own: installs running side by side in the shared one
        // remove each other's files.
        let tmp = dir.join("tmp");
        std::fs::create_dir_all(&tmp).expect("the installer's temporary directory");
        let out = Command::new("mariadb-install-db")
            .args([
                "--no-defaults",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ])
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .output()
            .unwrap_or_else(|e| panic!("mariadb-install-db: {e}"));
        assert!(
            out.status.success(),
            "mariadb-install-db: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        LocalMariaDb {
            process: None,
            port: free_port().unwrap_or_else(|why| panic!("{why}")),
            server_id,
            data,
            dir,
        }
    }

    /// Starts it (again), and waits until it answers.
    pub fn start(&mut self) {
        let log = self.dir.join("server.log");
        std::fs::create_dir_all(self.dir.join("tmp")).expect("the server's temporary directory");
        let command = format!(
            "/usr/sbin/mariadbd --no-defaults --user=root --datadir='{data}' --port={port} \
             --bind-address=127.0.0.1 --socket='{dir}/mysqld.sock' --pid-file='{dir}/mysqld.pid' \
             --tmpdir='{dir}/tmp' \
             --server-id={id} --log-bin='{data}/binlog' --binlog-format=ROW \
             --innodb-buffer-pool-size=32M --skip-name-resolve \
             --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci",
            data = self.data.display(),
            dir = self.dir.display(),
            port = self.port,
            id = self.server_id,
        );
        let process = Watched::spawn(&command, &log).unwrap_or_else(|why| panic!("{why}"));
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(60) {
            let answers = Command::new("mariadb-admin")
                .args(["-uroot", "-h127.0.0.1", "--connect-timeout=1"])
                .arg(format!("-P{}", self.port))
                .arg("ping")
                .output()
                .is_ok_and(|out| out.status.success());
            if answers {
                self.process = Some(process);
                return;
            }
            assert!(
                process.signal("0"),
                "mariadbd on {} exited: {}",
                self.port,
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("mariadbd on {} did not answer within 60 s", self.port);
    }

    /// Stops it at once, as a crash does (SIGKILL).
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.signal("KILL");
            process.stop(self.port);
        }
    }

    /// Stops applying what its primary writes: from now on it lags.
    pub fn stop_replicating(&self) {
        self.sql("mysql", "STOP SLAVE");
    }

    /// Waits until this replica has applied everything `primary` has written so far.
    pub fn catch_up_with(&self, primary: &LocalMariaDb, patience: Duration) -> Result<(), String> {
        let written = primary.sql("mysql", "SELECT @@gtid_binlog_pos");
        let waited = self.sql(
            "mysql",
            &format!(
                "SELECT MASTER_GTID_WAIT('{written}', {})",
                patience.as_secs_f64()
            ),
        );
        match waited.as_str() {
            "0" => Ok(()),
            other => Err(format!(
                "replica on {} did not reach {written} within {patience:?} ({other})",
                self.port
            )),
        }
    }

    /// Makes a replica a primary: replication stopped and forgotten, writes taken.
    pub fn promote(&self) {
        self.sql(
            "mysql",
            "STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = OFF",
        );
    }

    /// The whole of `database` as `mariadb-dump` writes it (tables dropped and created again,
    /// then their rows).
    pub fn dump(&self, database: &str) -> String {
        let out = Command::new("mariadb-dump")
            .args(["-uroot", "-h127.0.0.1", "--single-transaction"])
            .arg(format!("-P{}", self.port))
            .arg(database)
            .output()
            .unwrap_or_else(|e| panic!("mariadb-dump: {e}"));
        assert!(
            out.status.success(),
            "mariadb-dump: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Restores a [`Self::dump`] into `database`, as `mariadb < dump.sql` does.
    pub fn restore(&self, database: &str, dump: &str) {
        let path = self.dir.join("restore.sql");
        std::fs::write(&path, dump).expect("write the dump");
        self.sql(database, &format!("SOURCE {}", path.display()));
    }

    /// Runs `sql` in `database` with the `mariadb` client; its output, tab-separated.
    pub fn sql(&self, database: &str, sql: &str) -> String {
        client(self.port, database, sql)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL for sqlx, to `database`.
    pub fn url(&self, database: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{database}", self.port)
    }

    /// Its data directory.
    pub fn data(&self) -> &Path {
        &self.data
    }
}

impl Drop for LocalMariaDb {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
