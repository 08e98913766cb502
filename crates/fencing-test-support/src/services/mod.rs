//! How tests find the servers they talk to. `$FENCING_TEST_SERVICES` chooses
//! ([`ServiceMode`]); `auto` tries, in this order: an explicit URL in the environment, a
//! server on its standard local port, a local binary started on a free port (Redis, MariaDB,
//! moto), a container where a Docker engine answers. A test that finds none fails and says
//! what it tried: a silent skip would hide a missing service.

use std::net::{SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;

mod azurite;
mod containers;
mod dynamodb_local;
mod etcd;
mod local;
mod mariadb;
mod postgres;

pub use azurite::{AZURITE_ACCOUNT, AZURITE_KEY, Azurite, create_azure_container};
pub use containers::TestContainer;
pub use dynamodb_local::DynamoDbLocal;
pub use etcd::EtcdCluster;
pub use local::{MotoServer, PgBouncer, RedisSentinels, RedisServer, TestCertificates, redis_cli};
pub use mariadb::LocalMariaDb;
pub use postgres::{LocalPostgres, PgRelease};

/// The environment variable that chooses how tests get their servers.
pub const MODE_VAR: &str = "FENCING_TEST_SERVICES";

/// The environment variable that names a PostgreSQL server explicitly.
pub const POSTGRES_URL_VAR: &str = "FENCING_POSTGRES_URL";

/// The environment variable that names a MySQL or MariaDB server explicitly.
pub const MYSQL_URL_VAR: &str = "FENCING_MYSQL_URL";

/// The environment variable that names a Redis server explicitly.
pub const REDIS_URL_VAR: &str = "FENCING_REDIS_URL";

/// The environment variable that names an etcd cluster explicitly: its client endpoints,
/// comma-separated (`127.0.0.1:2379,127.0.0.1:22379`).
pub const ETCD_ENDPOINTS_VAR: &str = "FENCING_ETCD_ENDPOINTS";

/// The environment variable that names an Azurite blob endpoint explicitly, with the account
/// (`http://127.0.0.1:10000/devstoreaccount1`).
pub const AZURITE_ENDPOINT_VAR: &str = "FENCING_AZURITE_ENDPOINT";

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

/// One service, as [`find`] looks for it.
struct Service {
    /// Its name in the failure message.
    name: &'static str,
    /// The environment variable that names it explicitly.
    env_var: &'static str,
    /// Its URL on its standard local port, and whether something there answers.
    standard: (&'static str, fn() -> bool),
    /// Starts (once per test binary) a server from a local binary; `Err` says why not.
    local_binary: fn() -> Result<String, String>,
    /// Starts (once per test binary) a container; `Err` says why not.
    container: fn() -> Result<String, String>,
}

/// The one lookup order, as [`ServiceMode`] allows: the environment variable, the standard
/// local port, a local binary, a container.
///
/// # Panics
///
/// When none is available, with a message naming everything tried.
fn find(service: Service) -> String {
    let mode = ServiceMode::from_env();
    let mut tried = Vec::new();
    if mode.uses_env() {
        match std::env::var(service.env_var) {
            Ok(url) => return url,
            Err(_) => tried.push(format!("${} is not set", service.env_var)),
        }
    }
    if mode.uses_local() {
        let (url, answers) = service.standard;
        if answers() {
            return url.to_owned();
        }
        tried.push(format!("nothing answers at {url}"));
        match (service.local_binary)() {
            Ok(url) => return url,
            Err(why) => tried.push(why),
        }
    }
    if mode.uses_containers() {
        match (service.container)() {
            Ok(url) => return url,
            Err(why) => tried.push(why),
        }
    }
    panic!(
        "no {} for the tests ({MODE_VAR}={mode:?}); tried: {}",
        service.name,
        tried.join("; ")
    );
}

/// A PostgreSQL URL for tests (trust authentication, user `postgres`, database `test`).
/// On PostgreSQL 15 (the default), found as [`ServiceMode`] says: `$FENCING_POSTGRES_URL`,
/// the server on 127.0.0.1:5432, or a container. Where `$FENCING_POSTGRES_RELEASE` is `18`
/// ([`PgRelease`]), a server of 18 started for this test binary on a free port (it stops when
/// the binary exits), whatever the mode: no other server of 18 is on this kind of machine.
///
/// # Panics
///
/// When none is available, with a message naming everything tried.
pub fn postgres_url() -> String {
    static CONTAINER: Shared<TestContainer> = OnceLock::new();
    static RELEASE_18: OnceLock<LocalPostgres> = OnceLock::new();
    if PgRelease::from_env() == PgRelease::V18 {
        return RELEASE_18
            .get_or_init(|| LocalPostgres::primary_of(PgRelease::V18))
            .url("test");
    }
    find(Service {
        name: "PostgreSQL",
        env_var: POSTGRES_URL_VAR,
        standard: ("postgres://postgres@127.0.0.1:5432/test", || {
            listening(([127, 0, 0, 1], 5432).into())
        }),
        local_binary: || {
            Err("a local postgres binary: not supported (initdb refuses to run as root)".into())
        },
        container: || shared_container(&CONTAINER, TestContainer::postgres),
    })
}

/// A MySQL or MariaDB URL for tests (user `root` without a password, database `test`), found
/// as [`ServiceMode`] says: `$FENCING_MYSQL_URL`, the server on 127.0.0.1:3306 (MariaDB on
/// every machine of this project's kind; `scripts/setup` starts it where it stopped), a
/// [`LocalMariaDb`] started for this test binary on a free port (it stops when the binary
/// exits), or a container.
///
/// # Panics
///
/// When none is available, with a message naming everything tried.
pub fn mysql_url() -> String {
    static SPARE: OnceLock<LocalMariaDb> = OnceLock::new();
    static CONTAINER: Shared<TestContainer> = OnceLock::new();
    find(Service {
        name: "MySQL or MariaDB",
        env_var: MYSQL_URL_VAR,
        standard: ("mysql://root@127.0.0.1:3306/test", || {
            listening(([127, 0, 0, 1], 3306).into())
        }),
        local_binary: || Ok(SPARE.get_or_init(LocalMariaDb::primary).url("test")),
        container: || shared_container(&CONTAINER, TestContainer::mariadb),
    })
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
    find(Service {
        name: "Redis",
        env_var: REDIS_URL_VAR,
        standard: ("redis://127.0.0.1:6379/", || {
            listening(([127, 0, 0, 1], 6379).into())
        }),
        local_binary: || match SPARE.get_or_init(|| RedisServer::try_start(&[])) {
            Ok(server) => Ok(server.url()),
            Err(why) => Err(format!("redis-server: {why}")),
        },
        container: || shared_container(&CONTAINER, TestContainer::redis),
    })
}

/// An endpoint serving S3 and DynamoDB for tests (the moto emulator), found as
/// [`ServiceMode`] says: `$FENCING_AWS_ENDPOINT`, moto on its standard local port 5000, a
/// `moto_server` started for this test binary on a free port, or a container.
///
/// The moto these fixtures start answers one request at a time ([`MotoServer`]), so its
/// conditional writes are atomic; one found running (the variable, port 5000) may be moto's
/// own threaded server, which is not, so the suites still race against moto one step at a
/// time.
///
/// # Panics
///
/// When none is available, with a message naming everything tried.
pub fn aws_endpoint() -> String {
    static SPARE: Shared<MotoServer> = OnceLock::new();
    static CONTAINER: Shared<TestContainer> = OnceLock::new();
    find(Service {
        name: "AWS emulator",
        env_var: AWS_ENDPOINT_VAR,
        standard: ("http://127.0.0.1:5000", || local::moto_answers(5000)),
        local_binary: || match SPARE.get_or_init(MotoServer::try_start) {
            Ok(server) => Ok(server.endpoint()),
            Err(why) => Err(format!("moto_server: {why}")),
        },
        container: || shared_container(&CONTAINER, TestContainer::moto),
    })
}

/// The DynamoDB the DynamoDB tests run on, from `$FENCING_DYNAMODB_SERVER`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DynamoServer {
    /// `moto` (the default): the AWS emulator of [`aws_endpoint`].
    Moto,
    /// `dynamodb-local`: Amazon's DynamoDB Local ([`DynamoDbLocal`]), started for the test
    /// binary whatever the mode.
    DynamoDbLocal,
}

impl DynamoServer {
    /// The environment variable that chooses it.
    pub const VAR: &str = "FENCING_DYNAMODB_SERVER";

    /// The server `$FENCING_DYNAMODB_SERVER` asks for.
    ///
    /// # Panics
    ///
    /// On a value other than `moto` or `dynamodb-local`.
    pub fn from_env() -> Self {
        match std::env::var(Self::VAR).as_deref() {
            Err(_) | Ok("moto") => DynamoServer::Moto,
            Ok("dynamodb-local") => DynamoServer::DynamoDbLocal,
            Ok(other) => panic!("{}={other}: moto or dynamodb-local", Self::VAR),
        }
    }
}

/// The endpoint of the DynamoDB for tests: [`aws_endpoint`], or where
/// `$FENCING_DYNAMODB_SERVER` is `dynamodb-local` ([`DynamoServer`]), a [`DynamoDbLocal`]
/// started for this test binary (it stops when the binary exits).
///
/// # Panics
///
/// When none can be had, saying why.
pub fn dynamodb_endpoint() -> String {
    static LOCAL: Shared<DynamoDbLocal> = OnceLock::new();
    match DynamoServer::from_env() {
        DynamoServer::Moto => aws_endpoint(),
        DynamoServer::DynamoDbLocal => match LOCAL.get_or_init(DynamoDbLocal::try_start) {
            Ok(server) => server.endpoint(),
            Err(why) => panic!("no DynamoDB Local for the tests: {why}"),
        },
    }
}

/// The client endpoints of an etcd cluster for tests: `$FENCING_ETCD_ENDPOINTS` where
/// [`ServiceMode`] reads the environment, otherwise a three-member [`EtcdCluster`] started for
/// this test binary (it stops when the binary exits). Tests that kill or stop members start a
/// cluster of their own.
///
/// # Panics
///
/// When no cluster can be had, saying why.
pub fn etcd_endpoints() -> Vec<String> {
    static SHARED: OnceLock<EtcdCluster> = OnceLock::new();
    if ServiceMode::from_env().uses_env()
        && let Ok(endpoints) = std::env::var(ETCD_ENDPOINTS_VAR)
    {
        return endpoints.split(',').map(str::to_owned).collect();
    }
    SHARED.get_or_init(|| EtcdCluster::start(3)).endpoints()
}

/// An Azurite blob endpoint for tests, with the account: `$FENCING_AZURITE_ENDPOINT` where
/// [`ServiceMode`] reads the environment, Azurite on its standard port 10000, or an [`Azurite`]
/// started for this test binary on a free port (it stops when the binary exits). No container
/// image of it is built here, so containers mode starts it locally too.
///
/// # Panics
///
/// When none can be had, saying why.
pub fn azurite_endpoint() -> String {
    static SPARE: Shared<Azurite> = OnceLock::new();
    if ServiceMode::from_env().uses_env()
        && let Ok(endpoint) = std::env::var(AZURITE_ENDPOINT_VAR)
    {
        return endpoint;
    }
    if azurite::azurite_answers(10000) {
        return format!("http://127.0.0.1:10000/{AZURITE_ACCOUNT}");
    }
    match SPARE.get_or_init(Azurite::try_start) {
        Ok(server) => server.endpoint(),
        Err(why) => panic!("no Azurite for the tests: {why}"),
    }
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
