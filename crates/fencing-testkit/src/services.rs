//! How tests find the servers they talk to, in the order `../shared/DESIGN.md` fixes:
//! an explicit URL in the environment, then a server on its standard local port. A test that
//! finds none fails and says what it tried: a silent skip would hide a missing service.

use std::net::{SocketAddr, TcpStream};
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
