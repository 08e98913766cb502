//! This adapter's failures, and how each maps onto the core's meaning-level error.

use fencing_core::adapter::{Explained, RequestEffect};
use fencing_core::{BoxError, Error, Failure, InvalidInput};

/// What went wrong inside the adapter, before it is given a meaning for the caller.
#[derive(Debug)]
pub(crate) enum PgFailure {
    /// The driver failed.
    Driver(sqlx::Error),
    /// A value in the table breaks the adapter's format (e.g. a negative fence): what it is,
    /// and why it is not a value of the library's.
    Corrupt(String, InvalidInput),
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

/// What a SQLSTATE means for the request, with the fix to name where there is one. Only
/// codes the server sends before it applies anything are definite failures.
fn meaning_of_code(code: &str) -> (Failure, Option<&'static str>) {
    match code {
        // One mapping serves stores, counters and leases: name the fix for each.
        "42P01" | "42703" | "3F000" => (
            Failure::Misconfigured,
            Some(
                "a table or column this statement needs does not exist (the library's counter \
                 and lease tables come from PgTokenSource::create_if_missing and \
                 PgLease::create_if_missing; a fence column from PgTable::migration_sql or \
                 PgTable::add_fence_column)",
            ),
        ),
        // Only a write's one-row guard names an ON CONFLICT arbiter (OneRowGuard::Arbiter).
        "42P10" => (
            Failure::Misconfigured,
            Some(
                "the key column's unique index, there when the store read the table, is gone, \
                 so nothing was written: a store's key column must be unique (CREATE UNIQUE \
                 INDEX ON the table (its key column))",
            ),
        ),
        "23502" => (
            Failure::Misconfigured,
            Some(
                "a claim that creates a row sets only its key, fence and state (and the columns \
                 given with PgWrite::set); give the column a default, set it with PgWrite::set, \
                 or create the row before claiming it",
            ),
        ),
        // Refused at prepare or bind: nothing ran.
        "42P05" | "26000" => (
            Failure::Misconfigured,
            Some(
                "this connection's named prepared statements are not where it left them, as \
                 behind a pooler in transaction mode (PgBouncer's pool_mode = transaction); \
                 build the store, token source, lease and fence floor with \
                 for_transaction_pooling() (docs/guide.md, \"PgBouncer\")",
            ),
        ),
        // Bad password, no such role, no grant on the table.
        "28000" | "28P01" | "42501" => (Failure::PermissionDenied, None),
        "0A000" => (Failure::NotSupported, None),
        code if is_ambiguous_code(code) => (Failure::AnswerLost, None),
        // Canceled (statement or lock timeout), no lock, too many connections or out of
        // resources, a standby's read-only transaction, a server starting or stopping: the
        // statement was refused or rolled back whole.
        "57014" | "55P03" | "25006" | "57P04" | "57P05" => (Failure::Unavailable, None),
        code if code.starts_with("53") => (Failure::Unavailable, None),
        _ => (Failure::Unexpected, None),
    }
}

/// What a driver failure means for the request, and the error to keep as its cause.
fn classify(err: sqlx::Error) -> (Failure, BoxError) {
    let failure = match &err {
        sqlx::Error::Database(db) => {
            let (failure, fix) = meaning_of_code(db.code().as_deref().unwrap_or_default());
            if let Some(fix) = fix {
                let message = format!("{}: {fix}", db.message());
                return (failure, Box::new(Explained::new(message, err)));
            }
            failure
        }
        sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
            Failure::Unavailable
        }
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => Failure::AnswerLost,
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => Failure::Unavailable,
        sqlx::Error::Configuration(_)
        | sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::TypeNotFound { .. } => Failure::Misconfigured,
        _ => Failure::Unexpected,
    };
    (failure, Box::new(err))
}

impl PgFailure {
    /// The core error for a failed request to `store` with this `effect`.
    pub(crate) fn into_error(self, store: &str, effect: RequestEffect) -> Error {
        let (failure, source): (Failure, BoxError) = match self {
            PgFailure::Driver(err) => classify(err),
            PgFailure::Corrupt(what, why) => (
                Failure::Corrupt,
                Box::new(Explained::new(format!("{what}: {why}"), why)),
            ),
            PgFailure::Schema(what) => (Failure::Misconfigured, what.into()),
            PgFailure::Inconsistent(what) => (Failure::Unexpected, what.into()),
        };
        Error::failed_request(store, effect, failure, source)
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
            assert_eq!(meaning_of_code(code).0, Failure::AnswerLost, "{code}");
        }
        for code in ["23505", "42P01", "57014", "0A000", "22003", "4"] {
            assert!(!is_ambiguous_code(code), "{code}");
        }
    }

    #[test]
    fn each_sqlstate_the_server_sends_before_applying_anything_has_its_meaning() {
        for (code, meaning) in [
            ("42P01", Failure::Misconfigured),
            ("42703", Failure::Misconfigured),
            ("3F000", Failure::Misconfigured),
            ("42P10", Failure::Misconfigured),
            ("23502", Failure::Misconfigured),
            ("42P05", Failure::Misconfigured),
            ("26000", Failure::Misconfigured),
            ("28P01", Failure::PermissionDenied),
            ("28000", Failure::PermissionDenied),
            ("42501", Failure::PermissionDenied),
            ("0A000", Failure::NotSupported),
            ("57014", Failure::Unavailable),
            ("55P03", Failure::Unavailable),
            ("25006", Failure::Unavailable),
            ("53300", Failure::Unavailable),
            ("57P04", Failure::Unavailable),
            ("23505", Failure::Unexpected),
            ("22003", Failure::Unexpected),
        ] {
            assert_eq!(meaning_of_code(code).0, meaning, "{code}");
        }
    }

    #[test]
    fn a_failure_of_the_connection_after_a_write_is_ambiguous_and_after_a_read_unavailable() {
        for err in [
            || sqlx::Error::Io(io::Error::from(io::ErrorKind::ConnectionReset)),
            || sqlx::Error::Protocol("unexpected message".into()),
            || sqlx::Error::WorkerCrashed,
        ] {
            let shown = format!("{:?}", err());
            assert!(
                matches!(after_a_write(err()), Error::Ambiguous { .. }),
                "{shown}"
            );
            let read = PgFailure::Driver(err()).into_error("refunds", RequestEffect::ReadOnly);
            assert!(matches!(read, Error::Unavailable { .. }), "{read:?}");
        }
    }

    #[test]
    fn a_driver_failure_before_anything_was_sent_has_its_meaning_and_keeps_its_cause() {
        for (err, meaning) in [
            (
                sqlx::Error::Io(io::Error::from(io::ErrorKind::ConnectionRefused)),
                Failure::Unavailable,
            ),
            (sqlx::Error::PoolTimedOut, Failure::Unavailable),
            (sqlx::Error::PoolClosed, Failure::Unavailable),
            (
                sqlx::Error::ColumnNotFound("fence".into()),
                Failure::Misconfigured,
            ),
            (sqlx::Error::RowNotFound, Failure::Unexpected),
        ] {
            let err = after_a_write(err);
            assert_eq!(err.failure(), Some(meaning), "{err:?}");
            let cause = std::error::Error::source(&err).expect("the driver's error");
            assert!(cause.downcast_ref::<sqlx::Error>().is_some(), "{err:?}");
        }
    }

    #[test]
    fn a_value_of_the_table_that_is_not_the_librarys_is_corrupt_with_its_reason_beneath() {
        let why = fencing_core::FencingToken::from_i64(-3).unwrap_err();
        let err = PgFailure::Corrupt("stored fence -3".into(), why)
            .into_error("refunds", RequestEffect::ReadOnly);
        assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
        assert!(
            err.to_string().starts_with("refunds: stored fence -3: "),
            "{err}"
        );
        let explained = std::error::Error::source(&err).unwrap();
        assert!(explained.source().unwrap().is::<InvalidInput>(), "{err:?}");
    }
}
