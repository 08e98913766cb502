//! This adapter's failures, and how each maps onto the core's meaning-level error.

use fencing_core::Error;
use fencing_core::adapter::RequestEffect;

/// What went wrong inside the adapter, before it is given a meaning for the caller.
#[derive(Debug)]
pub(crate) enum PgFailure {
    /// The driver failed.
    Driver(sqlx::Error),
    /// A value in the table breaks the adapter's format (e.g. a negative fence).
    Corrupt(String),
    /// The server answered something the statement cannot produce.
    Inconsistent(&'static str),
    /// The table does not have the shape the store needs (missing, or a key that is not
    /// unique); the message says how to fix it.
    Schema(String),
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
    /// The core error for a failed request to `store` with this `effect`.
    pub(crate) fn into_error(self, store: &str, effect: RequestEffect) -> Error {
        let definite =
            |message: String| Error::failed_request(store, effect, false, message.into());
        let err = match self {
            PgFailure::Corrupt(what) | PgFailure::Schema(what) => return definite(what),
            PgFailure::Inconsistent(what) => return definite(what.to_owned()),
            PgFailure::Driver(err) => err,
        };
        if let sqlx::Error::Database(db) = &err
            && matches!(db.code().as_deref(), Some("42P01" | "42703" | "3F000"))
        {
            // One mapping serves stores, counters and leases: name the fix for each.
            return definite(format!(
                "{}: a table or column this statement needs does not exist (the library's \
                 counter and lease tables come from PgTokenSource::create_if_missing and \
                 PgLease::create_if_missing; a fence column from PgTable::migration_sql or \
                 PgTable::add_fence_column)",
                db.message()
            ));
        }
        if let sqlx::Error::Database(db) = &err
            && db.code().as_deref() == Some("42P10")
        {
            // Only a write's one-row guard names an ON CONFLICT arbiter (OneRowGuard::Arbiter).
            return definite(format!(
                "{}: the key column's unique index, there when the store read the table, is \
                 gone, so nothing was written: a store's key column must be unique (CREATE \
                 UNIQUE INDEX ON the table (its key column))",
                db.message()
            ));
        }
        if let sqlx::Error::Database(db) = &err
            && db.code().as_deref() == Some("23502")
        {
            return definite(format!(
                "{}: a claim that creates a row sets only its key, fence and state (and the \
                 columns given with PgWrite::set); give the column a default, set it with \
                 PgWrite::set, or create the row before claiming it",
                db.message()
            ));
        }
        if let sqlx::Error::Database(db) = &err
            && matches!(db.code().as_deref(), Some("42P05" | "26000"))
        {
            // Refused at prepare or bind: nothing ran.
            return definite(format!(
                "{}: this connection's named prepared statements are not where it left them, \
                 as behind a pooler in transaction mode (PgBouncer's pool_mode = transaction); \
                 build the store, token source, lease and fence floor with \
                 for_transaction_pooling() (docs/guide.md, \"PgBouncer\")",
                db.message()
            ));
        }
        let answer_lost = match &err {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(db) => db.code().is_some_and(|c| is_ambiguous_code(&c)),
            _ => false,
        };
        Error::failed_request(store, effect, answer_lost, Box::new(err))
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    fn after_a_write(err: sqlx::Error) -> Error {
        PgFailure::Driver(err).into_error("refunds", RequestEffect::Writes)
    }

    #[test]
    fn a_lost_connection_or_a_rolled_back_transaction_may_have_committed_or_not() {
        for code in [
            "08006", "08003", "40001", "40P01", "57P01", "57P02", "57P03",
        ] {
            assert!(is_ambiguous_code(code), "{code}");
        }
        for code in ["23505", "42P01", "57014", "0A000", "22003", "4"] {
            assert!(!is_ambiguous_code(code), "{code}");
        }
    }

    #[test]
    fn a_failure_of_the_connection_after_a_write_is_ambiguous() {
        for err in [
            sqlx::Error::Io(io::Error::from(io::ErrorKind::ConnectionReset)),
            sqlx::Error::Protocol("unexpected message".into()),
            sqlx::Error::WorkerCrashed,
        ] {
            let shown = format!("{err:?}");
            assert!(
                matches!(after_a_write(err), Error::Ambiguous { .. }),
                "{shown}"
            );
        }
        let read = PgFailure::Driver(sqlx::Error::WorkerCrashed)
            .into_error("refunds", RequestEffect::ReadOnly);
        assert!(matches!(read, Error::Backend { .. }), "{read:?}");
        assert!(matches!(
            after_a_write(sqlx::Error::RowNotFound),
            Error::Backend { .. }
        ));
    }
}
