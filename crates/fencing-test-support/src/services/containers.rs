//! Test services in containers, through `testcontainers`. Image names and tags come from the
//! environment (`FENCING_POSTGRES_IMAGE`/`_TAG`, `FENCING_MARIADB_IMAGE`/`_TAG`,
//! `FENCING_REDIS_IMAGE`/`_TAG`, `FENCING_MOTO_IMAGE`/`_TAG`); the defaults are the official images a machine with a
//! registry pulls. `containers/prepare.sh` builds
//! compatible images locally where there is no registry.
//!
//! Every container carries the label `fencing.test=1`; `containers/teardown.sh` removes them.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::SyncRunner;
use testcontainers::{Container, GenericImage, ImageExt};

/// A running test container. Dropping it removes it.
#[derive(Debug)]
pub struct TestContainer {
    container: Option<Container<GenericImage>>,
    id: String,
    port: u16,
    internal_port: u16,
    service: Service,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Service {
    Postgres,
    MariaDb,
    Redis,
    Moto,
}

impl TestContainer {
    /// A PostgreSQL server (trust auth, user `postgres`, database `test`, `fsync=off`).
    pub fn postgres() -> Result<Self, String> {
        let (image, tag) = image_from_env("POSTGRES", "postgres", "15");
        let request = GenericImage::new(image, tag)
            .with_exposed_port(5432.tcp())
            .with_wait_for(WaitFor::message_on_stderr(
                "database system is ready to accept connections",
            ))
            .with_env_var("POSTGRES_HOST_AUTH_METHOD", "trust")
            .with_env_var("POSTGRES_DB", "test")
            .with_cmd(["-c", "fsync=off"])
            .with_label("fencing.test", "1");
        Self::start(Service::Postgres, 5432, move || request.start())
    }

    /// A MariaDB server (user `root` without a password from any address, database `test`).
    pub fn mariadb() -> Result<Self, String> {
        let (image, tag) = image_from_env("MARIADB", "mariadb", "10.11");
        let request = GenericImage::new(image, tag)
            .with_exposed_port(3306.tcp())
            .with_wait_for(WaitFor::message_on_stderr("ready for connections"))
            .with_env_var("MARIADB_ALLOW_EMPTY_ROOT_PASSWORD", "1")
            .with_env_var("MARIADB_DATABASE", "test")
            .with_label("fencing.test", "1");
        Self::start(Service::MariaDb, 3306, move || request.start())
    }

    /// A Redis server with nothing persisted.
    pub fn redis() -> Result<Self, String> {
        let (image, tag) = image_from_env("REDIS", "redis", "7");
        let request = GenericImage::new(image, tag)
            .with_exposed_port(6379.tcp())
            .with_wait_for(WaitFor::message_on_stdout("Ready to accept connections"))
            .with_label("fencing.test", "1");
        Self::start(Service::Redis, 6379, move || request.start())
    }

    /// The moto server, serving S3 and DynamoDB on one endpoint.
    pub fn moto() -> Result<Self, String> {
        let (image, tag) = image_from_env("MOTO", "motoserver/moto", "latest");
        let request = GenericImage::new(image, tag)
            .with_exposed_port(5000.tcp())
            .with_wait_for(WaitFor::message_on_stderr("Running on"))
            .with_label("fencing.test", "1");
        Self::start(Service::Moto, 5000, move || request.start())
    }

    /// testcontainers' blocking runner drives its own runtime, which must not run inside the
    /// test's: starting (and dropping) happens on a thread of its own.
    fn start(
        service: Service,
        internal_port: u16,
        start: impl FnOnce() -> testcontainers::core::error::Result<Container<GenericImage>>
        + Send
        + 'static,
    ) -> Result<Self, String> {
        let started = std::thread::spawn(move || {
            let container = start().map_err(|e| format!("{service:?} container: {e}"))?;
            let port = container
                .get_host_port_ipv4(internal_port)
                .map_err(|e| format!("{service:?} container port: {e}"))?;
            let id = container.id().to_owned();
            Ok::<_, String>((container, id, port))
        })
        .join()
        .map_err(|_| format!("starting the {service:?} container panicked"))??;
        let (container, id, port) = started;
        let this = TestContainer {
            container: Some(container),
            id,
            port,
            internal_port,
            service,
        };
        this.wait_until_serving()?;
        Ok(this)
    }

    /// The container's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The service's URL on the host.
    pub fn url(&self) -> String {
        match self.service {
            Service::Postgres => format!("postgres://postgres@127.0.0.1:{}/test", self.port),
            Service::MariaDb => format!("mysql://root@127.0.0.1:{}/test", self.port),
            Service::Redis => format!("redis://127.0.0.1:{}/", self.port),
            Service::Moto => format!("http://127.0.0.1:{}", self.port),
        }
    }

    /// Freezes every process in the container (`docker pause`): the server stops answering
    /// without closing a connection, as in a stop-the-world pause or a slow network hop.
    pub fn pause(&self) {
        docker(&["pause", &self.id]);
    }

    /// Thaws a paused container.
    pub fn unpause(&self) {
        docker(&["unpause", &self.id]);
    }

    /// Stops and starts the container again; a Redis without persistence comes back empty.
    /// The host port may change, so [`Self::url`] is read again afterwards.
    pub fn restart(&mut self) {
        docker(&["restart", "-t", "0", &self.id]);
        let mapping = docker(&["port", &self.id, &format!("{}/tcp", self.internal_port)]);
        self.port = mapping
            .lines()
            .find_map(|line| line.rsplit(':').next()?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no port mapping after restart: {mapping:?}"));
        self.wait_until_serving()
            .unwrap_or_else(|why| panic!("after restart: {why}"));
    }

    /// The wait-for line can appear before the server takes TCP connections (the official
    /// Postgres image prints it once for its init server), and the proxy accepts connections
    /// before the server does; so ask the server itself.
    fn wait_until_serving(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let answered = match self.service {
                Service::Postgres => postgres_answers(self.port),
                Service::MariaDb => mysql_answers(self.port),
                Service::Redis => super::local::ping(self.port),
                Service::Moto => super::local::moto_answers(self.port),
            };
            if answered {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "the {:?} container never answered on port {}",
            self.service, self.port
        ))
    }
}

impl Drop for TestContainer {
    fn drop(&mut self) {
        if let Some(container) = self.container.take() {
            let _ = std::thread::spawn(move || drop(container)).join();
        }
    }
}

fn image_from_env(service: &str, image: &str, tag: &str) -> (String, String) {
    (
        std::env::var(format!("FENCING_{service}_IMAGE")).unwrap_or_else(|_| image.to_owned()),
        std::env::var(format!("FENCING_{service}_TAG")).unwrap_or_else(|_| tag.to_owned()),
    )
}

/// True when the PostgreSQL server on `port` answers an SSLRequest (with `S` or `N`).
fn postgres_answers(port: u16) -> bool {
    let Ok(mut stream) =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(500))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let ssl_request = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    let mut reply = [0u8; 1];
    stream.write_all(&ssl_request).is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && matches!(&reply, b"S" | b"N")
}

/// True when the server on `port` greets with a MySQL handshake (protocol 10) rather than an
/// error packet (a host it does not let in yet, a server still starting).
fn mysql_answers(port: u16) -> bool {
    let Ok(mut stream) =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(500))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut header = [0u8; 5];
    stream.read_exact(&mut header).is_ok() && header[4] == 10
}

/// Runs the docker CLI (it follows `DOCKER_HOST`) and returns its standard output.
fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("docker {args:?}: {e}"));
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
