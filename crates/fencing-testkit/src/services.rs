//! How tests find the servers they talk to, in the order `../shared/DESIGN.md` fixes:
//! an explicit URL in the environment, then a server on its standard local port, then (for
//! Redis) a local binary started on a free port. A test that finds none fails and says what
//! it tried: a silent skip would hide a missing service.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The environment variable that names a PostgreSQL server explicitly.
pub const POSTGRES_URL_VAR: &str = "FENCING_POSTGRES_URL";

/// A PostgreSQL URL for tests: `$FENCING_POSTGRES_URL`, or the server on 127.0.0.1:5432
/// (trust authentication, user `postgres`, database `test`).
///
/// # Panics
///
/// When neither is there, with a message naming both.
pub fn postgres_url() -> String {
    if let Ok(url) = std::env::var(POSTGRES_URL_VAR) {
        return url;
    }
    let standard: SocketAddr = ([127, 0, 0, 1], 5432).into();
    if listening(standard) {
        return "postgres://postgres@127.0.0.1:5432/test".to_owned();
    }
    panic!(
        "no PostgreSQL for the tests: ${POSTGRES_URL_VAR} is not set and nothing listens on \
         {standard}. Start PostgreSQL there (trust auth, database `test`) or set \
         {POSTGRES_URL_VAR}. (Starting a local binary or a container is not implemented yet.)"
    );
}

fn listening(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
}

/// The environment variable that names a Redis server explicitly.
pub const REDIS_URL_VAR: &str = "FENCING_REDIS_URL";

/// A Redis URL for tests: `$FENCING_REDIS_URL`, the server on 127.0.0.1:6379, or a
/// `redis-server` started for this test binary on a free port (it stops when the binary
/// exits).
///
/// # Panics
///
/// When none of the three is possible, with a message naming each.
pub fn redis_url() -> String {
    if let Ok(url) = std::env::var(REDIS_URL_VAR) {
        return url;
    }
    let standard: SocketAddr = ([127, 0, 0, 1], 6379).into();
    if listening(standard) {
        return "redis://127.0.0.1:6379/".to_owned();
    }
    static SPARE: std::sync::OnceLock<Result<RedisServer, String>> = std::sync::OnceLock::new();
    match SPARE.get_or_init(|| RedisServer::try_start(&[])) {
        Ok(server) => server.url(),
        Err(why) => panic!(
            "no Redis for the tests: ${REDIS_URL_VAR} is not set, nothing listens on \
             {standard}, and starting redis-server failed: {why}"
        ),
    }
}

/// A `redis-server` of the test's own, on a free loopback port, with nothing persisted.
/// It is killed when dropped, and also when the test process dies (a watcher ends it).
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
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

    fn try_start(extra: &[&str]) -> Result<Self, String> {
        let port = free_port()?;
        let dir = std::env::temp_dir().join(crate::unique_name("fencing-redis"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let child = spawn_redis(port, &dir, &extra)?;
        let server = RedisServer {
            child,
            port,
            dir,
            extra,
        };
        server.wait_ready()?;
        Ok(server)
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
        self.stop();
        self.child = spawn_redis(self.port, &self.dir, &self.extra)
            .unwrap_or_else(|why| panic!("restart redis-server: {why}"));
        self.wait_ready()
            .unwrap_or_else(|why| panic!("restart redis-server: {why}"));
    }

    fn stop(&mut self) {
        // TERM, not KILL: the shell's trap must run to kill redis-server with it.
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
        // The shell's watcher kills redis-server when the shell goes; wait for the port.
        for _ in 0..100 {
            if !listening(([127, 0, 0, 1], self.port).into()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn wait_ready(&self) -> Result<(), String> {
        for _ in 0..250 {
            if ping(self.port) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!("no PONG on port {} within 5 s", self.port))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs redis-server under a shell that kills it when the shell is killed or the test process
/// that started it is gone, so no server outlives its test.
fn spawn_redis(port: u16, dir: &std::path::Path, extra: &[String]) -> Result<Child, String> {
    let mut args = format!(
        "--port {port} --bind 127.0.0.1 --save '' --appendonly no --dir '{}'",
        dir.display()
    );
    for arg in extra {
        args.push_str(&format!(" '{arg}'"));
    }
    let script = format!(
        "redis-server {args} >'{log}' 2>&1 & server=$!; \
         trap 'kill -9 $server 2>/dev/null; exit 0' TERM INT HUP; \
         while kill -0 {parent} 2>/dev/null && kill -0 $server 2>/dev/null; do sleep 0.2; done; \
         kill -9 $server 2>/dev/null",
        log = dir.join("redis.log").display(),
        parent = std::process::id(),
    );
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run sh for redis-server: {e}"))
}

fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

fn ping(port: u16) -> bool {
    let Ok(mut stream) =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut reply = [0u8; 7];
    stream.write_all(b"PING\r\n").is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}
