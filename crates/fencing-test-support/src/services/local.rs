//! Servers the tests start themselves from local binaries, each under a shell watcher that
//! kills it when the test process is gone, so none outlives its test.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A process run under `sh`, which kills it when the shell is told to stop or the test
/// process that started it is gone.
#[derive(Debug)]
pub(super) struct Watched {
    shell: Child,
    /// Where the shell wrote the server's own process id.
    pid_file: PathBuf,
}

impl Watched {
    pub(super) fn spawn(command_line: &str, log: &Path) -> Result<Self, String> {
        let pid_file = log.with_extension("pid");
        // A server restarted under the same log left its process id here: until the shell
        // writes the new one, that would name a process that is gone (or, reused, another).
        let _ = std::fs::remove_file(&pid_file);
        let script = format!(
            "{command_line} >'{log}' 2>&1 & server=$!; echo $server >'{pid}'; \
             trap 'kill -9 $server 2>/dev/null; exit 0' TERM INT HUP; \
             while kill -0 {parent} 2>/dev/null && kill -0 $server 2>/dev/null; do sleep 0.2; done; \
             kill -9 $server 2>/dev/null",
            log = log.display(),
            pid = pid_file.display(),
            parent = std::process::id(),
        );
        // No inherited output: a parent whose output is read to its end (a test running a
        // program that started a server) would otherwise wait for this shell too, and the
        // shell waits for that parent to be reaped.
        let shell = Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run sh: {e}"))?;
        Ok(Watched { shell, pid_file })
    }

    /// Sends `signal` (`KILL`, `STOP`, `CONT`, or `0` to ask whether it runs) to the server
    /// itself, not its shell; false if it could not (the server is gone).
    pub(super) fn signal(&self, signal: &str) -> bool {
        let pid = (0..250).find_map(|_| {
            let pid = std::fs::read_to_string(&self.pid_file).unwrap_or_default();
            let pid = pid.trim().to_owned();
            if pid.is_empty() {
                // The shell has not written it yet.
                std::thread::sleep(Duration::from_millis(20));
                return None;
            }
            Some(pid)
        });
        let Some(pid) = pid else {
            return false;
        };
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(&pid)
            .stderr(Stdio::null())
            .status();
        status.is_ok_and(|s| s.success())
    }

    /// Waits until the server answers on `port`. Up to a minute: a Node or Python server
    /// (Azurite, moto) has taken over ten seconds to start while the machine's cores were
    /// compiling. A server that exited (its port taken, a bad argument) is reported at once.
    pub(super) fn wait_for(
        &self,
        port: u16,
        what: &str,
        answers: fn(u16) -> bool,
    ) -> Result<(), String> {
        const PATIENCE: Duration = Duration::from_secs(60);
        let started = Instant::now();
        while started.elapsed() < PATIENCE {
            if answers(port) {
                return Ok(());
            }
            if !self.signal("0") {
                return Err(format!("{what} exited before it answered on port {port}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "{what} did not answer on port {port} within {PATIENCE:?}"
        ))
    }

    /// TERM, not KILL: the shell's trap must run to take the server with it.
    pub(super) fn stop(&mut self, port: u16) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.shell.id().to_string())
            .status();
        let _ = self.shell.wait();
        for _ in 0..100 {
            if !super::listening(([127, 0, 0, 1], port).into()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A scratch directory for one server, removed with it.
pub(super) fn scratch(prefix: &str) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(fencing_testkit::unique_name(prefix));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// A `redis-server` of the test's own, on a free loopback port, with nothing persisted.
/// It is killed when dropped, and also when the test process dies.
#[derive(Debug)]
pub struct RedisServer {
    process: Watched,
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts one with the machine's `redis-server`, passing `extra` arguments.
    ///
    /// # Panics
    ///
    /// When it cannot start, saying why.
    pub fn start(extra: &[&str]) -> Self {
        Self::try_start(extra).unwrap_or_else(|why| panic!("redis-server: {why}"))
    }

    /// Tries three ports: a port handed out free can be taken by another process before the
    /// server binds it, and a cluster node also binds its port + 10000 (its bus), which
    /// nothing reserved.
    pub(crate) fn try_start(extra: &[&str]) -> Result<Self, String> {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let cluster = extra.iter().any(|arg| arg == "--cluster-enabled");
        let mut failures = Vec::new();
        for _ in 0..3 {
            let port = if cluster {
                free_cluster_port()?
            } else {
                free_port()?
            };
            let dir = scratch("fencing-redis")?;
            let process = Self::spawn(port, &dir, &extra)?;
            let mut server = RedisServer {
                process,
                port,
                dir,
                extra: extra.clone(),
            };
            match server.process.wait_for(port, "redis-server", ping) {
                Ok(()) => return Ok(server),
                Err(why) => {
                    let log =
                        std::fs::read_to_string(server.dir.join("redis.log")).unwrap_or_default();
                    let last = log.lines().last().unwrap_or("(no log)").to_owned();
                    failures.push(format!("{why}: {last}"));
                    server.process.stop(port);
                }
            }
        }
        Err(failures.join("; "))
    }

    fn spawn(port: u16, dir: &Path, extra: &[String]) -> Result<Watched, String> {
        let mut command = format!(
            "redis-server --port {port} --bind 127.0.0.1 --save '' --appendonly no --dir '{}'",
            dir.display()
        );
        for arg in extra {
            command.push_str(&format!(" '{arg}'"));
        }
        Watched::spawn(&command, &dir.join("redis.log"))
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills it and starts it again on the same port: with nothing persisted, every key,
    /// counters included, is gone, as after a crash of a Redis without persistence.
    pub fn restart(&mut self) {
        self.process.stop(self.port);
        self.process = Self::spawn(self.port, &self.dir, &self.extra)
            .unwrap_or_else(|why| panic!("restart redis-server: {why}"));
        self.process
            .wait_for(self.port, "redis-server", ping)
            .unwrap_or_else(|why| panic!("restart redis-server: {why}"));
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.process.stop(self.port);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl RedisServer {
    /// Kills it (SIGKILL): nothing is saved, its clients' connections break.
    pub fn kill(&self) {
        assert!(
            self.process.signal("KILL"),
            "redis-server on {} is gone",
            self.port
        );
    }

    /// Stops it (SIGSTOP): it answers nothing until [`Self::resume`], and its connections
    /// stay open.
    pub fn pause(&self) {
        assert!(
            self.process.signal("STOP"),
            "redis-server on {} is gone",
            self.port
        );
    }

    /// Lets a server stopped by [`Self::pause`] go on.
    pub fn resume(&self) {
        assert!(
            self.process.signal("CONT"),
            "redis-server on {} is gone",
            self.port
        );
    }
}

/// Redis Sentinel as operators run it: `count` sentinels (`redis-server CONF --sentinel`) on
/// free loopback ports, each monitoring the primary on `primary_port` as service `service`
/// with a quorum of `quorum`, a primary judged down after one second without answers. Killed
/// when dropped, and also when the test process dies.
#[derive(Debug)]
pub struct RedisSentinels {
    sentinels: Vec<(Watched, u16)>,
    dir: PathBuf,
    service: String,
}

impl RedisSentinels {
    /// Starts them, and waits until each knows the primary.
    ///
    /// # Panics
    ///
    /// When a sentinel cannot start, saying why.
    pub fn start(primary_port: u16, count: usize, quorum: usize, service: &str) -> Self {
        let dir = scratch("fencing-sentinel").unwrap_or_else(|why| panic!("{why}"));
        let mut sentinels = Vec::new();
        for i in 0..count {
            let port = free_port().unwrap_or_else(|why| panic!("{why}"));
            let conf = dir.join(format!("sentinel-{i}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                     sentinel monitor {service} 127.0.0.1 {primary_port} {quorum}\n\
                     sentinel down-after-milliseconds {service} 1000\n\
                     sentinel failover-timeout {service} 5000\n",
                    dir = dir.display()
                ),
            )
            .unwrap_or_else(|e| panic!("{}: {e}", conf.display()));
            let process = Watched::spawn(
                &format!("redis-server '{}' --sentinel", conf.display()),
                &dir.join(format!("sentinel-{i}.log")),
            )
            .unwrap_or_else(|why| panic!("redis-server --sentinel: {why}"));
            process
                .wait_for(port, "redis-server --sentinel", ping)
                .unwrap_or_else(|why| panic!("{why}"));
            sentinels.push((process, port));
        }
        let sentinels = RedisSentinels {
            sentinels,
            dir,
            service: service.to_owned(),
        };
        sentinels
            .wait_for_primary(|port| port == Some(primary_port), Duration::from_secs(10))
            .unwrap_or_else(|why| panic!("{why}"));
        sentinels
    }

    /// Each sentinel's URL, `redis://127.0.0.1:PORT/`.
    pub fn urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|(_, port)| format!("redis://127.0.0.1:{port}/"))
            .collect()
    }

    /// The service's name.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// The primary's port as the first sentinel that answers names it.
    pub fn primary_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|(_, port)| {
            let reply = redis_cli(
                *port,
                &["SENTINEL", "get-master-addr-by-name", &self.service],
            )?;
            reply.lines().nth(1)?.trim().parse().ok()
        })
    }

    /// Waits until every sentinel knows `count` replicas of the primary (the candidates it
    /// can promote).
    pub fn wait_for_replicas(&self, count: usize, patience: Duration) -> Result<(), String> {
        let started = std::time::Instant::now();
        loop {
            let known: Vec<usize> = self
                .sentinels
                .iter()
                .map(|(_, port)| {
                    redis_cli(*port, &["SENTINEL", "replicas", &self.service])
                        .map_or(0, |r| r.lines().filter(|l| l.trim() == "name").count())
                })
                .collect();
            if known.iter().all(|&n| n >= count) {
                return Ok(());
            }
            if started.elapsed() > patience {
                return Err(format!(
                    "the sentinels knew {known:?} replicas after {patience:?}, not {count}"
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until every sentinel names a primary `wanted` accepts.
    pub fn wait_for_primary(
        &self,
        wanted: impl Fn(Option<u16>) -> bool,
        patience: Duration,
    ) -> Result<u16, String> {
        let started = std::time::Instant::now();
        loop {
            let named: Vec<Option<u16>> = self
                .sentinels
                .iter()
                .map(|(_, port)| {
                    redis_cli(
                        *port,
                        &["SENTINEL", "get-master-addr-by-name", &self.service],
                    )
                    .and_then(|r| r.lines().nth(1)?.trim().parse().ok())
                })
                .collect();
            if let Some(&Some(port)) = named.first()
                && named.iter().all(|n| *n == Some(port) && wanted(*n))
            {
                return Ok(port);
            }
            if started.elapsed() > patience {
                return Err(format!(
                    "the sentinels named {named:?} after {patience:?}, not the primary wanted"
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for RedisSentinels {
    fn drop(&mut self) {
        for (process, port) in &mut self.sentinels {
            process.stop(*port);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `redis-cli -p PORT ARGS…`'s output, `None` when it failed.
pub fn redis_cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A certificate authority and a certificate for `127.0.0.1` and `localhost` signed by it,
/// made with the machine's `openssl` in a scratch folder of the test's own: what a TLS test
/// server presents and what its client trusts. Removed when dropped.
#[derive(Debug)]
pub struct TestCertificates {
    dir: PathBuf,
}

impl TestCertificates {
    /// Makes them.
    ///
    /// # Panics
    ///
    /// When `openssl` fails, with what it said.
    pub fn make() -> Self {
        let dir = scratch("fencing-tls").unwrap_or_else(|why| panic!("{why}"));
        std::fs::write(
            dir.join("san.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .expect("write the certificate's extensions");
        for args in [
            "req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=fencing-test-ca \
             -keyout ca.key -out ca.pem",
            "req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout server.key -out server.csr",
            "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
             -extfile san.ext -out server.pem",
        ] {
            let out = std::process::Command::new("openssl")
                .args(args.split_whitespace())
                .current_dir(&dir)
                .output()
                .unwrap_or_else(|e| panic!("openssl {args}: {e}"));
            assert!(
                out.status.success(),
                "openssl {args}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        TestCertificates { dir }
    }

    /// The authority's certificate (PEM): what a client trusts.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// The server's certificate (PEM).
    pub fn certificate(&self) -> PathBuf {
        self.dir.join("server.pem")
    }

    /// The server's private key (PEM).
    pub fn key(&self) -> PathBuf {
        self.dir.join("server.key")
    }
}

impl Drop for TestCertificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl RedisServer {
    /// Starts one that also answers TLS on a port of its own with `certificates` (clients
    /// need no certificate of their own). Returns it and its `rediss://` URL.
    pub fn start_tls(certificates: &TestCertificates) -> (Self, String) {
        let tls_port = free_port().unwrap_or_else(|why| panic!("{why}"));
        let paths = [
            certificates.certificate(),
            certificates.key(),
            certificates.ca(),
        ]
        .map(|p| p.display().to_string());
        let server = Self::start(&[
            "--tls-port",
            &tls_port.to_string(),
            "--tls-cert-file",
            &paths[0],
            "--tls-key-file",
            &paths[1],
            "--tls-ca-cert-file",
            &paths[2],
            "--tls-auth-clients",
            "no",
        ]);
        (server, format!("rediss://127.0.0.1:{tls_port}/"))
    }
}

/// The moto server (S3 and DynamoDB emulator, from pip's `moto[server]`) of the test's own,
/// on a free loopback port, answering one request at a time so that its conditional writes
/// are atomic as on AWS (`moto/one_request_at_a_time.py`; moto's own `moto_server` lets two
/// conditional writes that meet both apply). It is killed when dropped, and also when the
/// test process dies.
#[derive(Debug)]
pub struct MotoServer {
    process: Watched,
    port: u16,
    dir: PathBuf,
}

impl MotoServer {
    /// Starts one.
    ///
    /// # Panics
    ///
    /// When moto cannot be started, saying why.
    pub fn start() -> Self {
        Self::try_start().unwrap_or_else(|why| panic!("moto: {why}"))
    }

    pub(crate) fn try_start() -> Result<Self, String> {
        let port = free_port()?;
        let dir = scratch("fencing-moto")?;
        let launcher = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("moto")
            .join("one_request_at_a_time.py");
        let process = Watched::spawn(
            &format!("python3 '{}' -H 127.0.0.1 -p {port}", launcher.display()),
            &dir.join("moto.log"),
        )?;
        let server = MotoServer { process, port, dir };
        server.process.wait_for(port, "moto_server", moto_answers)?;
        Ok(server)
    }

    /// Its endpoint URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        self.process.stop(self.port);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(crate) fn free_port() -> Result<u16, String> {
    // Never the same port twice in one process: two servers started side by side (say, two
    // etcd clusters) could otherwise both be told the port one of them is about to bind, and
    // a test would talk to the other's server.
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for _ in 0..100 {
        let listener =
            TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
        let port = listener
            .local_addr()
            .map(|a| a.port())
            .map_err(|e| format!("no free port: {e}"))?;
        if !handed_out.contains(&port) {
            handed_out.push(port);
            return Ok(port);
        }
    }
    Err("no free port that was not handed out already".into())
}

/// A free port for a Redis Cluster node: at most 55535, with its bus port (+ 10000) free too.
fn free_cluster_port() -> Result<u16, String> {
    for _ in 0..100 {
        let port = free_port()?;
        if port <= 55535 && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return Ok(port);
        }
    }
    Err("no free port whose cluster bus port is free too".into())
}

/// True when a Redis on `port` answers `PING` with `PONG`.
pub(crate) fn ping(port: u16) -> bool {
    exchange(port, b"PING\r\n", |reply| reply.len() >= 7)
        .is_some_and(|reply| reply.starts_with(b"+PONG\r\n"))
}

/// True when the emulator on `port` answers S3's ListBuckets (`GET /`).
pub(crate) fn moto_answers(port: u16) -> bool {
    let request = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    exchange(port, request, |_| false).is_some_and(|reply| {
        reply.starts_with(b"HTTP/1.1 200")
            && String::from_utf8_lossy(&reply).contains("ListAllMyBucketsResult")
    })
}

/// Sends `request` and reads the reply until `complete` says so, the peer closes, or half a
/// second passes without data.
pub(super) fn exchange(port: u16, request: &[u8], complete: fn(&[u8]) -> bool) -> Option<Vec<u8>> {
    let mut stream =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
            .ok()?;
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    stream.write_all(request).ok()?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(n) = stream.read(&mut chunk) {
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&chunk[..n]);
        if complete(&reply) {
            break;
        }
    }
    (!reply.is_empty()).then_some(reply)
}

/// A PgBouncer (Debian's `pgbouncer`) of the test's own, in transaction pooling mode, on a
/// free loopback port, in front of the PostgreSQL at `127.0.0.1:<postgres_port>` with trust
/// authentication; every database is passed through. Its server connections carry the
/// application name [`PgBouncer::application_name`], so a test can find and terminate them.
/// It is killed when dropped, and also when the test process dies.
#[derive(Debug)]
pub struct PgBouncer {
    process: Watched,
    port: u16,
    dir: PathBuf,
}

impl PgBouncer {
    /// Starts one sharing `pool_size` server connections among all its clients.
    ///
    /// # Panics
    ///
    /// When it cannot start, saying why (`.ci/run` installs the package).
    pub fn start(postgres_port: u16, pool_size: u32) -> Self {
        Self::try_start(postgres_port, pool_size).unwrap_or_else(|why| panic!("pgbouncer: {why}"))
    }

    fn try_start(postgres_port: u16, pool_size: u32) -> Result<Self, String> {
        let binary = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
            .into_iter()
            .find(|path| Path::new(path).exists())
            .ok_or("no pgbouncer binary (apt-get install pgbouncer)")?;
        let port = free_port()?;
        let dir = scratch("fencing-pgbouncer")?;
        let write = |name: &str, text: String| {
            std::fs::write(dir.join(name), text).map_err(|e| format!("{name}: {e}"))
        };
        write("userlist.txt", "\"postgres\" \"\"\n".to_owned())?;
        write(
            "pgbouncer.ini",
            format!(
                "[databases]\n\
                 * = host=127.0.0.1 port={postgres_port} application_name={app}\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = trust\n\
                 auth_file = {dir}/userlist.txt\n\
                 pool_mode = transaction\n\
                 default_pool_size = {pool_size}\n\
                 max_client_conn = 200\n\
                 ignore_startup_parameters = extra_float_digits,options,search_path\n",
                app = Self::application_name_for(port),
                dir = dir.display(),
            ),
        )?;
        // PgBouncer refuses to run as root; as root, it is told which user to become.
        let as_root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|out| out.stdout.starts_with(b"0\n"));
        let user = if as_root { "-u postgres " } else { "" };
        let process = Watched::spawn(
            &format!("{binary} {user}'{}'", dir.join("pgbouncer.ini").display()),
            &dir.join("pgbouncer.log"),
        )?;
        let bouncer = PgBouncer { process, port, dir };
        bouncer.process.wait_for(port, "pgbouncer", |port| {
            super::listening(([127, 0, 0, 1], port).into())
        })?;
        Ok(bouncer)
    }

    fn application_name_for(port: u16) -> String {
        format!("fencing_pgbouncer_{port}")
    }

    /// The URL of database `database` through it, as user `postgres`.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// The application name of its server connections in `pg_stat_activity`.
    pub fn application_name(&self) -> String {
        Self::application_name_for(self.port)
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        self.process.stop(self.port);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
