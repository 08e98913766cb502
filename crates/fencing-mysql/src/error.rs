//! This adapter's failures, and how each maps onto the core's meaning-level error.

use fencing_core::adapter::{Explained, RequestEffect};
use fencing_core::{BoxError, Error, Failure, InvalidInput};

/// What went wrong inside the adapter, before it is given a meaning for the caller.
#[derive(Debug)]
pub(crate) enum MySqlFailure {
    /// The driver failed.
    Driver(sqlx::Error),
    /// A value in the table breaks the adapter's format (e.g. a negative fence): what it is,
    /// and why it is not a value of the library's.
    Corrupt(String, InvalidInput),
    /// The server answered something the statement cannot produce.
    Inconsistent(&'static str),
    /// The server is read-only (a replica, or `read_only` set), and a counter is issued only
    /// by a primary: even a user whose privileges pass `read_only` is refused.
    ReadOnly,
    /// The table does not have the shape the store needs (missing, a key that is not unique,
    /// a key compared without regard to case); the message says how to fix it.
    Schema(String),
}

impl From<sqlx::Error> for MySqlFailure {
    fn from(err: sqlx::Error) -> Self {
        MySqlFailure::Driver(err)
    }
}

/// Whether the server rolled the transaction back whole (a deadlock, 1213), so that the
/// same write may be sent again at once: two claims creating one record meet this way.
pub(crate) fn is_rolled_back(err: &sqlx::Error) -> bool {
    number_of(err) == Some(1213)
}

/// Whether an insert met a row another transaction inserted first (1062).
pub(crate) fn is_duplicate(err: &sqlx::Error) -> bool {
    number_of(err) == Some(1062)
}

/// Whether a statement named an index the table no longer has (1176).
pub(crate) fn is_index_gone(err: &sqlx::Error) -> bool {
    number_of(err) == Some(1176)
}

/// The server's error number of a database error.
fn number_of(err: &sqlx::Error) -> Option<u16> {
    match err {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(|e| e.number()),
        _ => None,
    }
}

/// What a server error number means for the request, with the fix to name where there is
/// one. Only errors the server sends before it applies anything are definite failures.
fn meaning_of_number(number: u16) -> (Failure, Option<&'static str>) {
    match number {
        // No such table, column or database.
        1146 | 1054 | 1049 => (
            Failure::Misconfigured,
            Some(
                "a table or column this statement needs does not exist (the library's counter \
                 and lease tables come from MySqlTokenSource::create_if_missing and \
                 MySqlLease::create_if_missing; a fenced table from MySqlTable::create_table_sql \
                 or MySqlTable::migration_sql)",
            ),
        ),
        // A column without a default that a claim creating a row does not set.
        1364 => (
            Failure::Misconfigured,
            Some(
                "a claim that creates a row sets only its key, fence, state and payload; give \
                 the column a default or create the row before claiming it",
            ),
        ),
        // A value too long for its column (a state, a key, a payload).
        1406 => (Failure::Misconfigured, None),
        // Access denied to the database, the table, a column; a bad password.
        1044 | 1045 | 1142 | 1143 | 1227 => (Failure::PermissionDenied, None),
        // The server is read-only (a replica), too busy, shutting down, the statement or lock
        // wait timed out, a deadlock: refused or rolled back whole.
        1290 | 1792 | 1836 | 1040 | 1203 | 1205 | 1213 | 1969 | 3024 | 1053 => {
            (Failure::Unavailable, None)
        }
        // The connection was killed or the query interrupted while it ran.
        1927 | 1317 => (Failure::AnswerLost, None),
        _ => (Failure::Unexpected, None),
    }
}

/// What a driver failure means for the request, and the error to keep as its cause.
fn classify(err: sqlx::Error) -> (Failure, BoxError) {
    let failure = match &err {
        sqlx::Error::Database(db) => {
            let number = number_of(&err).unwrap_or_default();
            let (failure, fix) = meaning_of_number(number);
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

impl MySqlFailure {
    /// The core error for a failed request to `store` with this `effect`.
    pub(crate) fn into_error(self, store: &str, effect: RequestEffect) -> Error {
        let (failure, source): (Failure, BoxError) = match self {
            MySqlFailure::Driver(err) => classify(err),
            MySqlFailure::Corrupt(what, why) => (
                Failure::Corrupt,
                Box::new(Explained::new(format!("{what}: {why}"), why)),
            ),
            MySqlFailure::Schema(what) => (Failure::Misconfigured, what.into()),
            MySqlFailure::ReadOnly => (
                Failure::Unavailable,
                "the server is read-only (a replica, or read_only is set): a token is issued \
                 only by the primary, whatever the user's privileges"
                    .into(),
            ),
            MySqlFailure::Inconsistent(what) => (Failure::Unexpected, what.into()),
        };
        Error::failed_request(store, effect, failure, source)
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use fencing_core::{FencingToken, InputKind};

    use super::*;

    fn after(effect: RequestEffect, failure: MySqlFailure) -> Error {
        failure.into_error("mysql:test.refund", effect)
    }

    #[test]
    fn each_server_error_number_lands_in_its_meaning() {
        let cases = [
            (1146, Failure::Misconfigured),
            (1054, Failure::Misconfigured),
            (1364, Failure::Misconfigured),
            (1406, Failure::Misconfigured),
            (1045, Failure::PermissionDenied),
            (1142, Failure::PermissionDenied),
            (1290, Failure::Unavailable),
            (1205, Failure::Unavailable),
            (1213, Failure::Unavailable),
            (1969, Failure::Unavailable),
            (1927, Failure::AnswerLost),
            (1062, Failure::Unexpected),
        ];
        for (number, meaning) in cases {
            assert_eq!(meaning_of_number(number).0, meaning, "error {number}");
        }
    }

    #[test]
    fn a_lost_connection_after_a_write_is_ambiguous_and_a_refused_one_is_unavailable() {
        let lost = sqlx::Error::Io(io::Error::from(io::ErrorKind::ConnectionReset));
        let err = after(RequestEffect::Writes, MySqlFailure::Driver(lost));
        assert!(err.is_ambiguous(), "{err:?}");
        let lost = sqlx::Error::Io(io::Error::from(io::ErrorKind::ConnectionReset));
        let err = after(RequestEffect::ReadOnly, MySqlFailure::Driver(lost));
        assert_eq!(err.failure(), Some(Failure::Unavailable), "{err:?}");
        let refused = sqlx::Error::Io(io::Error::from(io::ErrorKind::ConnectionRefused));
        let err = after(RequestEffect::Writes, MySqlFailure::Driver(refused));
        assert_eq!(err.failure(), Some(Failure::Unavailable), "{err:?}");
        assert!(
            std::error::Error::source(&err)
                .is_some_and(|cause| cause.downcast_ref::<sqlx::Error>().is_some()),
            "the driver's error is kept as the cause: {err:?}"
        );
    }

    #[test]
    fn the_adapters_own_failures_keep_their_meaning_and_their_reason() {
        let bad = FencingToken::from_i64(-3).unwrap_err();
        assert_eq!(bad.kind(), InputKind::Token);
        let err = after(
            RequestEffect::ReadOnly,
            MySqlFailure::Corrupt("stored fence -3".into(), bad),
        );
        assert_eq!(err.failure(), Some(Failure::Corrupt), "{err:?}");
        assert!(err.to_string().contains("stored fence -3"), "{err}");
        let err = after(
            RequestEffect::Writes,
            MySqlFailure::Schema("the key column must be unique".into()),
        );
        assert_eq!(err.failure(), Some(Failure::Misconfigured), "{err:?}");
        let err = after(RequestEffect::Writes, MySqlFailure::ReadOnly);
        assert_eq!(err.failure(), Some(Failure::Unavailable), "{err:?}");
        assert!(err.to_string().contains("read-only"), "{err}");
        let err = after(RequestEffect::Writes, MySqlFailure::Inconsistent("odd"));
        assert_eq!(err.failure(), Some(Failure::Unexpected), "{err:?}");
    }
}
