//! How tests find the servers they talk to. `$FENCING_TEST_SERVICES` chooses
//! ([`ServiceMode`]); `auto` keeps the order `../shared/DESIGN.md` fixes: an explicit URL in
//! the environment, a server on its standard local port, a local binary started on a free
//! port (Redis), a container where a Docker engine answers. A test that finds none fails and
//! says what it tried: a silent skip would hide a missing service.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

mod containers;

pub use containers::TestContainer;

/// The environment variable that chooses how tests get their servers.
pub const MODE_VAR: &str = "FENCING_TEST_SERVICES";

/// The environment variable that names a PostgreSQL server explicitly.
pub const POSTGRES_URL_VAR: &str = "FENCING_POSTGRES_URL";

/// The environment variable that names a Redis server explicitly.
pub const REDIS_URL_VAR: &str = "FENCING_REDIS_URL";

/// How tests get their servers, from `$FENCING_TEST_SERVICES`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceMode {
    /// `auto` (the default): an explicit URL, then the standard local port, then a local
    /// binary (Redis), then a container where a Docker engine answers.
    Auto,
    /// `env`: only the URLs in the environment.
    Env,
    /// `local`: only the standard local ports and local binaries.
    Local,
    /// `containers`: a container for every service, whatever else is there.
    Containers,
}

impl ServiceMode {
    /// The mode the environment asks for.
    ///
    /// # Panics
    ///
    /// On a value that is none of `auto`, `env`, `local`, `containers`.
    pub fn from_env() -> Self {
        match std::env::var(MODE_VAR).as_deref() {
            Err(_) | Ok("") | Ok("auto") => ServiceMode::Auto,
            Ok("env") => ServiceMode::Env,
            Ok("local") => ServiceMode::Local,
            Ok("containers") => ServiceMode::Containers,
            Ok(other) => panic!("{MODE_VAR}={other:?}: expected auto, env, local or containers"),
        }
    }

    fn uses_env(self) -> bool {
        matches!(self, ServiceMode::Auto | ServiceMode::Env)
    }

    fn uses_local(self) -> bool {
        matches!(self, ServiceMode::Auto | ServiceMode::Local)
    }

    fn uses_containers(self) -> bool {
        matches!(self, ServiceMode::Auto | ServiceMode::Containers)
    }
}

type Shared<T> = OnceLock<Result<T, String>>;

/// The container of one service for this test binary: started once, on first use, and kept
/// while the binary runs (a static is never dropped; `containers/teardown.sh` removes it).
fn shared_container(
    slot: &'static Shared<TestContainer>,
    start: fn() -> Result<TestContainer, String>,
) -> Result<String, String> {
    slot.get_or_init(start)
        .as_ref()
        .map(TestContainer::url)
        .map_err(Clone::clone)
}

/// A PostgreSQL URL for tests (trust authentication, user `postgres`, database `test`),
/// found as [`ServiceMode`] says: `$FENCING_POSTGRES_URL`, the server on 127.0.0.1:5432, or a
/// container.
///
/// # Panics
///
/// When none is available, with a message naming everything tried.
pub fn postgres_url() -> String {
    static CONTAINER: Shared<TestContainer> = OnceLock::new();
    let mode = ServiceMode::from_env();
    let mut tried = Vec::new();
    if mode.uses_env() {
        match std::env::var(POSTGRES_URL_VAR) {
            Ok(url) => return url,
            Err(_) => tried.push(format!("${POSTGRES_URL_VAR} is not set")),
        }
    }
    if mode.uses_local() {
        let standard: SocketAddr = ([127, 0, 0, 1], 5432).into();
        if listening(standard) {
            return "postgres://postgres@127.0.0.1:5432/test".to_owned();
        }
        tried.push(format!("nothing listens on {standard}"));
        tried.push("a local postgres binary: not supported (initdb refuses to run as root)".into());
    }
    if mode.uses_containers() {
        match shared_container(&CONTAINER, TestContainer::postgres) {
            Ok(url) => return url,
            Err(why) => tried.push(why),
        }
    }
    panic!(
        "no PostgreSQL for the tests ({MODE_VAR}={mode:?}); tried: {}",
        tried.join("; ")
    );
}

/// A Redis URL for tests, found as [`ServiceMode`] says: `$FENCING_REDIS_URL`, the server on
/// 127.0.0.1:6379, a `redis-server` started for this test binary on a free port (it stops
/// when the binary exits), or a container.
///
/// # Panics
///
/// When none is available, with a message naming everything tried.
pub fn redis_url() -> String {
    static SPARE: Shared<RedisServer> = OnceLock::new();
    static CONTAINER: Shared<TestContainer> = OnceLock::new();
    let mode = ServiceMode::from_env();
    let mut tried = Vec::new();
    if mode.uses_env() {
        match std::env::var(REDIS_URL_VAR) {
            Ok(url) => return url,
            Err(_) => tried.push(format!("${REDIS_URL_VAR} is not set")),
        }
    }
    if mode.uses_local() {
        let standard: SocketAddr = ([127, 0, 0, 1], 6379).into();
        if listening(standard) {
            return "redis://127.0.0.1:6379/".to_owned();
        }
        tried.push(format!("nothing listens on {standard}"));
        match SPARE.get_or_init(|| RedisServer::try_start(&[])) {
            Ok(server) => return server.url(),
            Err(why) => tried.push(format!("redis-server: {why}")),
        }
    }
    if mode.uses_containers() {
        match shared_container(&CONTAINER, TestContainer::redis) {
            Ok(url) => return url,
            Err(why) => tried.push(why),
        }
    }
    panic!(
        "no Redis for the tests ({MODE_VAR}={mode:?}); tried: {}",
        tried.join("; ")
    );
}

/// A server a test can restart, losing whatever it did not persist: a [`RedisServer`] of the
/// test's own, or a [`TestContainer`].
pub trait RestartableServer {
    /// Its URL now (a container's host port can change across a restart).
    fn url(&self) -> String;
    /// Stops it and starts it again, empty of anything it did not persist.
    fn restart(&mut self);
}

impl RestartableServer for RedisServer {
    fn url(&self) -> String {
        RedisServer::url(self)
    }
    fn restart(&mut self) {
        RedisServer::restart(self)
    }
}

impl RestartableServer for TestContainer {
    fn url(&self) -> String {
        TestContainer::url(self)
    }
    fn restart(&mut self) {
        TestContainer::restart(self)
    }
}

fn listening(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
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
