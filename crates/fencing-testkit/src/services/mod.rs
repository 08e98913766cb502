//! How tests find the servers they talk to. `$FENCING_TEST_SERVICES` chooses
//! ([`ServiceMode`]); `auto` keeps the order `../shared/DESIGN.md` fixes: an explicit URL in
//! the environment, a server on its standard local port, a local binary started on a free
//! port (Redis), a container where a Docker engine answers. A test that finds none fails and
//! says what it tried: a silent skip would hide a missing service.

use std::net::{SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;

mod containers;
mod local;

pub use containers::TestContainer;
pub use local::{MotoServer, RedisServer};

/// The environment variable that chooses how tests get their servers.
pub const MODE_VAR: &str = "FENCING_TEST_SERVICES";

/// The environment variable that names a PostgreSQL server explicitly.
pub const POSTGRES_URL_VAR: &str = "FENCING_POSTGRES_URL";

/// The environment variable that names a Redis server explicitly.
pub const REDIS_URL_VAR: &str = "FENCING_REDIS_URL";

/// The environment variable that names an AWS endpoint (S3 and DynamoDB) explicitly.
pub const AWS_ENDPOINT_VAR: &str = "FENCING_AWS_ENDPOINT";

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

/// An endpoint serving S3 and DynamoDB for tests (the moto emulator), found as
/// [`ServiceMode`] says: `$FENCING_AWS_ENDPOINT`, moto on its standard local port 5000, a
/// `moto_server` started for this test binary on a free port, or a container.
///
/// Moto does not serialise concurrent requests: test races on the in-memory stores and
/// interleavings against moto one step at a time.
///
/// # Panics
///
/// When none is available, with a message naming everything tried.
pub fn aws_endpoint() -> String {
    static SPARE: Shared<MotoServer> = OnceLock::new();
    static CONTAINER: Shared<TestContainer> = OnceLock::new();
    let mode = ServiceMode::from_env();
    let mut tried = Vec::new();
    if mode.uses_env() {
        match std::env::var(AWS_ENDPOINT_VAR) {
            Ok(url) => return url,
            Err(_) => tried.push(format!("${AWS_ENDPOINT_VAR} is not set")),
        }
    }
    if mode.uses_local() {
        if local::moto_answers(5000) {
            return "http://127.0.0.1:5000".to_owned();
        }
        tried.push("no moto answers on 127.0.0.1:5000".into());
        match SPARE.get_or_init(MotoServer::try_start) {
            Ok(server) => return server.endpoint(),
            Err(why) => tried.push(format!("moto_server: {why}")),
        }
    }
    if mode.uses_containers() {
        match shared_container(&CONTAINER, TestContainer::moto) {
            Ok(url) => return url,
            Err(why) => tried.push(why),
        }
    }
    panic!(
        "no AWS emulator for the tests ({MODE_VAR}={mode:?}); tried: {}",
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
