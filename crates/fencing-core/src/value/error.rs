//! One error type for every store, with variants that say what happened, not how.

use std::fmt;
use std::time::Duration;

use crate::value::input::InvalidInput;
use crate::value::name::{RecordKey, ResourceName, State};
use crate::value::token::FencingToken;

/// A boxed error from a driver, a side effect or a user callback.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The result type of this crate and of every adapter.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, at the level of meaning. Every adapter maps its driver errors into this.
///
/// The variants fall into five groups, and callers act on the group:
/// * **Rejections** ([`Error::Fenced`], [`Error::TokenRegression`], [`Error::StateMismatch`],
///   [`Error::NotFound`]): the store refused the write and changed nothing. Abort the batch;
///   never retry with the same token. [`Error::is_rejection`] tells them apart.
/// * **Ambiguous outcomes** ([`Error::Ambiguous`]): the request was sent and the answer lost.
///   Retry the *same* write with the *same* token: a claim accepts `stored == token`, so the
///   retry is idempotent.
/// * **Lease outcomes** ([`Error::LeaseBusy`], [`Error::LeaseLost`], [`Error::TokenExhausted`]).
/// * **Bad input** ([`Error::InvalidInput`]), reported before anything is sent.
/// * **Failures of the store** that wrote nothing, each with the driver's error as its
///   `source` and a meaning an operator and a caller act on
///   ([`Error::is_store_failure`]): [`Error::Unavailable`] (try again later),
///   [`Error::Misconfigured`] (fix the schema or the configuration),
///   [`Error::PermissionDenied`] (fix the credentials), [`Error::Corrupt`] (a stored value
///   the library cannot read, left as it is), [`Error::NotSupported`] (the server lacks what
///   the library needs) and [`Error::Backend`] (none of these: an answer the request cannot
///   produce, or a driver failure of no known kind).
/// * **Everything else**: [`Error::BatchAborted`] (a batch already stopped at a rejection
///   refuses later writes unsent) and [`Error::Effect`] (the side effect itself failed; the
///   record stays in flight under this holder's fence).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument was out of range or malformed; nothing was sent to any store.
    #[error(transparent)]
    InvalidInput(#[from] InvalidInput),

    /// The record's fence did not admit the presented token: a newer holder has written it
    /// (claim), or the presenter is not the holder that claimed it (holder-only write).
    #[error("{store}: write to {record:?} with token {presented} refused: {found}")]
    Fenced {
        /// The store that refused.
        store: String,
        /// The record that was written.
        record: RecordKey,
        /// The token the writer presented.
        presented: FencingToken,
        /// The fence the store found, where it could report one.
        found: FoundFence,
    },

    /// A claim was refused because the record's fence is higher than any token the token
    /// source has issued: the counter went backwards (e.g. a Redis built to
    /// reissue tokens restarted without persistence), or the server the source asked is not
    /// the one that issued the fence (an old Redis primary still granting after a failover,
    /// until the sentinels demote it: `min-replicas-to-write` stops that). [`crate::Holder`]
    /// has already raised the source past the fence found, so the next acquisition gets a
    /// token above it; raise it above every store's `MAX(fence)` with
    /// [`crate::seed_from_floors`].
    #[error(
        "{store}: token regression on {record:?}: presented {presented}, found fence {found}, \
         but the token source has issued at most {}: its counter went backwards, or the \
         server it asked is not the one that issued the fence (an old primary still answering \
         after a failover: docs/guide.md, min-replicas-to-write); either way a newer holder \
         wrote, so stop",
        highest_issued.map_or_else(|| "nothing".to_owned(), |t| t.to_string())
    )]
    TokenRegression {
        /// The store that refused.
        store: String,
        /// The record that was written.
        record: RecordKey,
        /// The token the writer presented.
        presented: FencingToken,
        /// The fence found on the record.
        found: FencingToken,
        /// The highest token the source reports having issued, if any.
        highest_issued: Option<FencingToken>,
    },

    /// The fence admitted the token but the record's state did not meet the write's
    /// precondition (e.g. a confirm of a row that is not `sending`).
    #[error(
        "{store}: write to {record:?} with token {presented} refused: state is {}, expected one of {}",
        found.as_ref().map_or("unset", State::as_str),
        expected.iter().map(State::as_str).collect::<Vec<_>>().join(", ")
    )]
    StateMismatch {
        /// The store that refused.
        store: String,
        /// The record that was written.
        record: RecordKey,
        /// The token the writer presented.
        presented: FencingToken,
        /// The states the write required.
        expected: Vec<State>,
        /// The state found, `None` when the record has none.
        found: Option<State>,
    },

    /// The record does not exist and the write cannot create it.
    #[error("{store}: record {record:?} does not exist")]
    NotFound {
        /// The store that was written.
        store: String,
        /// The missing record.
        record: RecordKey,
    },

    /// The lease is held by another owner and the retry budget ran out.
    #[error("lease on {resource:?} is held by another owner ({attempts} attempts)")]
    LeaseBusy {
        /// The resource.
        resource: ResourceName,
        /// How many acquisitions were tried.
        attempts: u32,
    },

    /// The guard's owner no longer holds the lease (it expired, or another owner holds it):
    /// extend and release are refused and change nothing. Also what the helpers that start
    /// side effects ([`crate::Holder::run_effect`], the pipeline) return when the holder sees
    /// by itself that its lease may be over
    /// ([`crate::LeaseGuard::has_ended_locally`]): nothing new was started.
    #[error("lease on {resource:?} is no longer held by {owner}")]
    LeaseLost {
        /// The resource.
        resource: ResourceName,
        /// The owner named by the guard.
        owner: String,
    },

    /// The token source has issued `i64::MAX` for this resource and can issue no more.
    #[error("token source for {resource:?} is exhausted")]
    TokenExhausted {
        /// The resource.
        resource: ResourceName,
    },

    /// A batch stopped at its first rejection; later writes in it are refused unsent.
    #[error("batch aborted: {store} refused {record:?}")]
    BatchAborted {
        /// The store whose rejection aborted the batch.
        store: String,
        /// The record it refused.
        record: RecordKey,
        /// That rejection as it was returned: [`Error::Fenced`] (a newer holder),
        /// [`Error::TokenRegression`] (the counter went backwards), or a mismatch.
        #[source]
        cause: Box<Error>,
    },

    /// The side effect (e.g. a payment gateway call) failed.
    #[error("side effect for {record:?} failed: {source}")]
    Effect {
        /// The record whose effect failed.
        record: RecordKey,
        /// The effect's own error.
        source: BoxError,
    },

    /// The request may or may not have been applied (timeout, connection lost after sending).
    /// Retry the same write with the same token.
    #[error("{store}: outcome unknown: {source}")]
    Ambiguous {
        /// The store.
        store: String,
        /// The driver's error.
        source: BoxError,
    },

    /// The store could not serve the request and wrote nothing: it could not be reached, it
    /// refused the connection, it timed out a read, it is shutting down, failing over (a
    /// server that is no longer the primary) or overloaded. Try again later; an operator's
    /// alert is "the store is down".
    #[error("{store}: {source}")]
    Unavailable {
        /// The store.
        store: String,
        /// The driver's error, or what the adapter found.
        source: BoxError,
    },

    /// The store lacks what the request needs and wrote nothing: a table, column or index that
    /// is missing, a key that is not unique, a pooler that breaks the driver's statements.
    /// Retrying does not help; the message names the fix.
    #[error("{store}: {source}")]
    Misconfigured {
        /// The store.
        store: String,
        /// The driver's error, or what the adapter found.
        source: BoxError,
    },

    /// The store refused the credentials or the permission the request needs, and wrote
    /// nothing. Fix the credentials or the grants.
    #[error("{store}: {source}")]
    PermissionDenied {
        /// The store.
        store: String,
        /// The driver's error, or what the adapter found.
        source: BoxError,
    },

    /// A value the store holds breaks the library's format (a fence that is not a token, a
    /// state that is not a state, an object the codec cannot read). It is left as it is and
    /// never written over; nothing was written.
    #[error("{store}: {source}")]
    Corrupt {
        /// The store.
        store: String,
        /// The driver's error, or what the adapter found.
        source: BoxError,
    },

    /// The store or its server lacks a feature the library needs (a conditional write, a
    /// command a script must call, a server version), so nothing was written.
    #[error("{store}: {source}")]
    NotSupported {
        /// The store.
        store: String,
        /// The driver's error, or what the adapter found.
        source: BoxError,
    },

    /// The store failed in a way that is none of the above and wrote nothing: an answer the
    /// request cannot produce, or a driver failure of no known kind.
    #[error("{store}: {source}")]
    Backend {
        /// The store.
        store: String,
        /// The driver's error, or what the adapter found.
        source: BoxError,
    },
}

impl Error {
    /// True for the rejections: the store refused and changed nothing. Abort, don't retry.
    pub fn is_rejection(&self) -> bool {
        self.rejected_at().is_some()
    }

    /// The store and record of a rejection ([`Error::is_rejection`]); `None` for every other
    /// error.
    pub fn rejected_at(&self) -> Option<(&str, &RecordKey)> {
        match self {
            Error::Fenced { store, record, .. }
            | Error::TokenRegression { store, record, .. }
            | Error::StateMismatch { store, record, .. }
            | Error::NotFound { store, record } => Some((store, record)),
            _ => None,
        }
    }

    /// The state a [`Error::StateMismatch`] found the record in; `None` for every other
    /// error and for a record without a state.
    pub(crate) fn found_state(&self) -> Option<&State> {
        match self {
            Error::StateMismatch { found, .. } => found.as_ref(),
            _ => None,
        }
    }

    /// A copy of a rejection ([`Error::is_rejection`]), which carries only values; `None`
    /// for every other error.
    pub(crate) fn rejection_copy(&self) -> Option<Error> {
        Some(match self {
            Error::Fenced {
                store,
                record,
                presented,
                found,
            } => Error::Fenced {
                store: store.clone(),
                record: record.clone(),
                presented: *presented,
                found: *found,
            },
            Error::TokenRegression {
                store,
                record,
                presented,
                found,
                highest_issued,
            } => Error::TokenRegression {
                store: store.clone(),
                record: record.clone(),
                presented: *presented,
                found: *found,
                highest_issued: *highest_issued,
            },
            Error::StateMismatch {
                store,
                record,
                presented,
                expected,
                found,
            } => Error::StateMismatch {
                store: store.clone(),
                record: record.clone(),
                presented: *presented,
                expected: expected.clone(),
                found: found.clone(),
            },
            Error::NotFound { store, record } => Error::NotFound {
                store: store.clone(),
                record: record.clone(),
            },
            _ => return None,
        })
    }

    /// True for the rejections that are not a sign of a newer holder: a missing record
    /// ([`Error::NotFound`]) or one in a state the write does not start from
    /// ([`Error::StateMismatch`]). A batch built with [`crate::MismatchPolicy::Skip`] leaves
    /// these records alone and goes on.
    pub fn is_mismatch(&self) -> bool {
        matches!(self, Error::NotFound { .. } | Error::StateMismatch { .. })
    }

    /// True when the write may have been applied and should be retried with the same token.
    pub fn is_ambiguous(&self) -> bool {
        matches!(self, Error::Ambiguous { .. })
    }

    /// True for the failures of a store that wrote nothing ([`Error::Unavailable`],
    /// [`Error::Misconfigured`], [`Error::PermissionDenied`], [`Error::Corrupt`],
    /// [`Error::NotSupported`], [`Error::Backend`]), with [`Failure`] naming which.
    pub fn is_store_failure(&self) -> bool {
        self.failure().is_some()
    }

    /// Which failure of a store this is ([`Error::is_store_failure`]); `None` for every other
    /// error, [`Error::Ambiguous`] included (its request may have been applied).
    pub fn failure(&self) -> Option<Failure> {
        Some(match self {
            Error::Unavailable { .. } => Failure::Unavailable,
            Error::Misconfigured { .. } => Failure::Misconfigured,
            Error::PermissionDenied { .. } => Failure::PermissionDenied,
            Error::Corrupt { .. } => Failure::Corrupt,
            Error::NotSupported { .. } => Failure::NotSupported,
            Error::Backend { .. } => Failure::Unexpected,
            _ => return None,
        })
    }
}

/// Whether a request that failed could have changed the store: with the [`Failure`], the one
/// fact besides the driver's error that decides which error a failed request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestEffect {
    /// The request only reads (or was refused before it was sent): it changed nothing.
    ReadOnly,
    /// The request writes: if its answer was lost, it may have been applied.
    Writes,
}

/// What kind of failure a request to a store met: the one classification an adapter makes of
/// its driver's errors (in its own `error.rs`), given its meaning by [`Error::failed_request`].
/// [`Error::failure`] answers it back for a failure of a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Failure {
    /// The request may have reached the store and its answer was lost: the connection broke
    /// after it was sent, no answer came in time, the answer could not be read.
    AnswerLost,
    /// The store could not serve the request and never ran it: refused or unreachable
    /// connection, a server shutting down, failing over, overloaded or throttling.
    Unavailable,
    /// The store lacks what the request needs (schema, index, configuration).
    Misconfigured,
    /// The credentials or grants were refused.
    PermissionDenied,
    /// A stored value breaks the library's format.
    Corrupt,
    /// The server lacks a feature the library needs.
    NotSupported,
    /// None of the above.
    Unexpected,
}

impl Error {
    /// The error for a request to `store` that met `failure`, its cause kept as `source`: the
    /// one place the rule lives. A lost answer ([`Failure::AnswerLost`]) after a request that
    /// [`RequestEffect::Writes`] is [`Error::Ambiguous`]; after one that only reads it is
    /// [`Error::Unavailable`] (nothing was changed, try again). Every other failure is the
    /// variant of its name and wrote nothing. Adapters only classify their driver's errors.
    pub fn failed_request(
        store: &str,
        effect: RequestEffect,
        failure: Failure,
        source: BoxError,
    ) -> Error {
        let store = store.to_owned();
        match failure {
            Failure::AnswerLost if effect == RequestEffect::Writes => {
                Error::Ambiguous { store, source }
            }
            Failure::AnswerLost | Failure::Unavailable => Error::Unavailable { store, source },
            Failure::Misconfigured => Error::Misconfigured { store, source },
            Failure::PermissionDenied => Error::PermissionDenied { store, source },
            Failure::Corrupt => Error::Corrupt { store, source },
            Failure::NotSupported => Error::NotSupported { store, source },
            Failure::Unexpected => Error::Backend { store, source },
        }
    }
}

/// A driver's error with a message that says what it means for the request (how to fix a
/// missing table, what an SDK's answer was): the message is its `Display`, the driver's error
/// its `source`, so nothing the driver said is flattened to text.
#[derive(Debug)]
pub struct Explained {
    message: String,
    source: BoxError,
}

impl Explained {
    /// `source`, explained by `message`.
    pub fn new(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Explained {
            message: message.into(),
            source: source.into(),
        }
    }
}

impl fmt::Display for Explained {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Explained {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// The source of an [`Error::Ambiguous`] whose attempt was given up on: it had no answer
/// within the holder's request timeout ([`crate::Holder::with_request_timeout`]), so it was
/// dropped, and it may still reach the store and apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no answer within {waited:?}: the attempt was dropped and its outcome is unknown")]
pub struct NoAnswer {
    waited: Duration,
}

impl NoAnswer {
    pub(crate) fn within(waited: Duration) -> Self {
        NoAnswer { waited }
    }

    /// How long the attempt went unanswered.
    pub fn waited(&self) -> Duration {
        self.waited
    }
}

/// The fence a store found on a refused record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoundFence {
    /// The record carries this fence.
    Fence(FencingToken),
    /// The record carries no fence yet.
    NoFence,
    /// The store could not report it cheaply.
    Unknown,
}

impl FoundFence {
    /// The fence, where one was found.
    pub fn token(self) -> Option<FencingToken> {
        match self {
            FoundFence::Fence(token) => Some(token),
            FoundFence::NoFence | FoundFence::Unknown => None,
        }
    }
}

impl From<Option<FencingToken>> for FoundFence {
    fn from(fence: Option<FencingToken>) -> Self {
        fence.map_or(FoundFence::NoFence, FoundFence::Fence)
    }
}

impl fmt::Display for FoundFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FoundFence::Fence(token) => write!(f, "fence is {token}"),
            FoundFence::NoFence => f.write_str("record has no fence"),
            FoundFence::Unknown => f.write_str("fence not reported"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> RecordKey {
        RecordKey::new("r_815").unwrap()
    }

    #[test]
    fn only_a_missing_record_or_another_state_is_a_mismatch() {
        let missing = Error::NotFound {
            store: "refunds".into(),
            record: key(),
        };
        let fenced = Error::Fenced {
            store: "refunds".into(),
            record: key(),
            presented: FencingToken::MIN,
            found: FoundFence::Unknown,
        };
        let backend = Error::failed_request(
            "refunds",
            RequestEffect::ReadOnly,
            Failure::Unavailable,
            "down".into(),
        );
        assert!(missing.is_mismatch());
        assert!(!fenced.is_mismatch() && fenced.is_rejection());
        assert!(!backend.is_mismatch());
    }

    #[test]
    fn a_lost_answer_is_ambiguous_only_after_a_request_that_writes() {
        let failed = |effect, failure| {
            Error::failed_request("refunds", effect, failure, "connection reset".into())
        };
        let write = failed(RequestEffect::Writes, Failure::AnswerLost);
        assert!(
            write.is_ambiguous() && !write.is_store_failure(),
            "{write:?}"
        );
        let read = failed(RequestEffect::ReadOnly, Failure::AnswerLost);
        assert!(
            matches!(&read, Error::Unavailable { store, .. } if store == "refunds"),
            "{read:?}"
        );
    }

    #[test]
    fn every_other_failure_is_the_meaning_of_its_name_whatever_the_request() {
        for failure in [
            Failure::Unavailable,
            Failure::Misconfigured,
            Failure::PermissionDenied,
            Failure::Corrupt,
            Failure::NotSupported,
            Failure::Unexpected,
        ] {
            for effect in [RequestEffect::ReadOnly, RequestEffect::Writes] {
                let err = Error::failed_request("refunds", effect, failure, "said no".into());
                assert_eq!(err.failure(), Some(failure), "{effect:?}: {err:?}");
                assert!(!err.is_ambiguous() && !err.is_rejection());
                assert_eq!(err.to_string(), "refunds: said no");
            }
        }
    }

    #[test]
    fn an_explained_failure_keeps_the_drivers_error_as_its_source() {
        let driver = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let err = Error::failed_request(
            "refunds",
            RequestEffect::Writes,
            Failure::Unavailable,
            Box::new(Explained::new("the server refused the connection", driver)),
        );
        assert_eq!(
            err.to_string(),
            "refunds: the server refused the connection"
        );
        let explained = std::error::Error::source(&err).expect("the explanation");
        let beneath = explained.source().expect("the driver's error beneath");
        assert!(beneath.downcast_ref::<std::io::Error>().is_some());
    }
}
