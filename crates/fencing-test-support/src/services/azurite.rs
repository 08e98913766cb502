//! Azurite, Azure Storage's emulator (its blob service), from the npm package that
//! `scripts/setup` installs under `crates/fencing-test-support/azurite`: started by the tests
//! on a free loopback port, its data in a scratch directory, killed with the test process.

use std::path::PathBuf;
use std::process::Command;

use super::local::{Watched, exchange, free_port, scratch};

/// The emulator's well-known account.
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";

/// The emulator's well-known account key (public: it is Azurite's, the same everywhere).
pub const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Where `scripts/setup` installs Azurite and the script that creates containers.
fn package_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("azurite")
}

/// An Azurite blob service of the test's own.
#[derive(Debug)]
pub struct Azurite {
    process: Watched,
    port: u16,
    dir: PathBuf,
}

impl Azurite {
    /// Starts one on a free port.
    pub(crate) fn try_start() -> Result<Self, String> {
        let binary = package_dir().join("node_modules/.bin/azurite-blob");
        if !binary.exists() {
            return Err(format!(
                "{} is missing: run scripts/setup (it installs Azurite with npm)",
                binary.display()
            ));
        }
        let port = free_port()?;
        let dir = scratch("fencing-azurite")?;
        let process = Watched::spawn(
            &format!(
                "'{}' --blobHost 127.0.0.1 --blobPort {port} --location '{}' --silent \
                 --skipApiVersionCheck --disableTelemetry",
                binary.display(),
                dir.join("data").display()
            ),
            &dir.join("azurite.log"),
        )?;
        let server = Azurite { process, port, dir };
        server.process.wait_for(port, "Azurite", azurite_answers)?;
        Ok(server)
    }

    /// Its blob endpoint with the account, path-style: `http://127.0.0.1:<port>/devstoreaccount1`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/{AZURITE_ACCOUNT}", self.port)
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        self.process.stop(self.port);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// True when the server on `port` says it is Azurite's blob service.
pub(crate) fn azurite_answers(port: u16) -> bool {
    let request = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    exchange(port, request, |_| false)
        .is_some_and(|reply| String::from_utf8_lossy(&reply).contains("Server: Azurite-Blob"))
}

/// Creates container `name` at `endpoint` (`object_store` cannot create one) with the Azure
/// SDK for JavaScript installed beside Azurite.
///
/// # Panics
///
/// When the container cannot be created, with the SDK's words.
pub fn create_azure_container(endpoint: &str, name: &str) {
    let output = Command::new("node")
        .arg(package_dir().join("create-container.js"))
        .args([endpoint, name])
        .output()
        .unwrap_or_else(|e| panic!("cannot run node: {e}"));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
