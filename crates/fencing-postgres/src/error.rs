//! This adapter's failures, and how each maps onto the core's meaning-level error.

use fencing_core::{BoxError, Error};

/// What went wrong inside the adapter, before it is given a meaning for the caller.
#[derive(Debug)]
pub(crate) enum PgFailure {
    /// The driver failed.
    Driver(sqlx::Error),
    /// A value in the table breaks the adapter's format (e.g. a negative fence).
    Corrupt(String),
    /// The server answered something the statement cannot produce.
    Inconsistent(&'static str),
}

impl From<sqlx::Error> for PgFailure {
    fn from(err: sqlx::Error) -> Self {
        PgFailure::Driver(err)
    }
}

/// SQLSTATEs after which a statement may or may not have committed: the connection was lost
/// (class 08), the server shut it down (57P01–57P03), or the transaction was rolled back by a
/// serialization failure or deadlock (class 40, nothing applied, so a retry is just as safe).
fn is_ambiguous_code(code: &str) -> bool {
    code.starts_with("08") || code.starts_with("40") || matches!(code, "57P01" | "57P02" | "57P03")
}

impl PgFailure {
    /// The core error for a failure on `store`. `wrote` says whether the failed request could
    /// have changed data, which is what makes a lost answer ambiguous.
    pub(crate) fn into_error(self, store: &str, wrote: bool) -> Error {
        let backend = |source: BoxError| Error::Backend {
            store: store.to_owned(),
            source,
        };
        let err = match self {
            PgFailure::Corrupt(what) => return backend(what.into()),
            PgFailure::Inconsistent(what) => return backend(what.into()),
            PgFailure::Driver(err) => err,
        };
        let ambiguous = match &err {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(db) => db.code().is_some_and(|c| is_ambiguous_code(&c)),
            _ => false,
        };
        if let sqlx::Error::Database(db) = &err
            && matches!(db.code().as_deref(), Some("42P01" | "42703" | "3F000"))
        {
            return backend(
                format!(
                    "{}: the fenced table or one of its columns does not exist \
                     (FencedTable::add_fence_column adds the fence column)",
                    db.message()
                )
                .into(),
            );
        }
        if ambiguous && wrote {
            Error::Ambiguous {
                store: store.to_owned(),
                source: Box::new(err),
            }
        } else {
            backend(Box::new(err))
        }
    }
}
