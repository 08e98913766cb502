//! This adapter's failures, and how each maps onto the core's meaning-level error.

use fencing_core::adapter::{Explained, RequestEffect};
use fencing_core::{BoxError, Error, Failure};

/// What went wrong inside the adapter, before it is given a meaning for the caller.
#[derive(Debug)]
pub(crate) enum ObjectFailure {
    /// `object_store` failed; the text names the backend, for the message of a backend that
    /// cannot update conditionally.
    Client(object_store::Error, String),
    /// The backend answers without what a conditional update needs (an ETag or a version).
    NoVersion(String),
}

impl ObjectFailure {
    /// The core error for a failed request to `store` with this `effect`.
    pub(crate) fn into_error(self, store: &str, effect: RequestEffect) -> Error {
        let (failure, source): (Failure, BoxError) = match self {
            ObjectFailure::NoVersion(what) => (Failure::NotSupported, what.into()),
            ObjectFailure::Client(err, backend) => match meaning(&err) {
                Failure::NotSupported => {
                    let why = format!(
                        "{backend} cannot update objects conditionally ({err}); fenced writes \
                         need PutMode::Update (for S3, ETag matching: AWS_CONDITIONAL_PUT=etag), \
                         and nothing was written"
                    );
                    (Failure::NotSupported, Box::new(Explained::new(why, err)))
                }
                failure => (failure, Box::new(err)),
            },
        };
        Error::failed_request(store, effect, failure, source)
    }
}

/// What an `object_store` error means for the request.
fn meaning(err: &object_store::Error) -> Failure {
    use object_store::Error as E;
    match err {
        E::NotImplemented { .. } | E::NotSupported { .. } => Failure::NotSupported,
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => Failure::PermissionDenied,
        E::InvalidPath { .. } | E::UnknownConfigurationKey { .. } => Failure::Misconfigured,
        // `Generic` covers the transport: a request whose answer never came may have been
        // applied.
        E::Generic { .. } => Failure::AnswerLost,
        _ => Failure::Unexpected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(err: object_store::Error, effect: RequestEffect) -> Error {
        ObjectFailure::Client(err, "LocalFileSystem".into()).into_error("objects", effect)
    }

    #[test]
    fn each_kind_of_failure_has_its_meaning_and_keeps_its_cause() {
        let source = || -> BoxError { "said no".into() };
        for (err, expected) in [
            (
                object_store::Error::PermissionDenied {
                    path: "r_815".into(),
                    source: source(),
                },
                Failure::PermissionDenied,
            ),
            (
                object_store::Error::Unauthenticated {
                    path: "r_815".into(),
                    source: source(),
                },
                Failure::PermissionDenied,
            ),
            (
                object_store::Error::UnknownConfigurationKey {
                    store: "S3",
                    key: "aws_nonsense".into(),
                },
                Failure::Misconfigured,
            ),
            (
                object_store::Error::NotImplemented {
                    operation: "put_opts".into(),
                    implementer: "LocalFileSystem".into(),
                },
                Failure::NotSupported,
            ),
            (
                object_store::Error::AlreadyExists {
                    path: "r_815".into(),
                    source: source(),
                },
                Failure::Unexpected,
            ),
        ] {
            let err = failed(err, RequestEffect::Writes);
            assert_eq!(err.failure(), Some(expected), "{err:?}");
            assert!(std::error::Error::source(&err).is_some(), "{err:?}");
        }
    }

    #[test]
    fn a_backend_without_conditional_updates_is_named_and_its_error_kept() {
        let err = failed(
            object_store::Error::NotImplemented {
                operation: "put_opts".into(),
                implementer: "LocalFileSystem".into(),
            },
            RequestEffect::Writes,
        );
        assert!(matches!(err, Error::NotSupported { .. }), "{err:?}");
        assert!(
            err.to_string().contains("LocalFileSystem cannot update"),
            "{err}"
        );
        let explained = std::error::Error::source(&err).unwrap();
        assert!(explained.source().unwrap().is::<object_store::Error>());
    }

    #[test]
    fn a_transport_failure_after_a_write_is_ambiguous_and_after_a_read_unavailable() {
        let generic = || object_store::Error::Generic {
            store: "S3",
            source: "connection reset".into(),
        };
        assert!(failed(generic(), RequestEffect::Writes).is_ambiguous());
        let read = failed(generic(), RequestEffect::ReadOnly);
        assert!(matches!(read, Error::Unavailable { .. }), "{read:?}");
    }
}
