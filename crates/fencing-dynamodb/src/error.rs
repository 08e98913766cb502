//! This adapter's failures, and how each maps onto the core's meaning-level error.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use fencing_core::{Error, RequestEffect};

/// What went wrong inside the adapter, before it is given a meaning for the caller.
#[derive(Debug)]
pub(crate) enum DynamoFailure {
    /// A stored value breaks the adapter's format (a fence that is not a token, a state that
    /// is not a `State`, a payload that is not Binary).
    Corrupt(String),
    /// The service answered something the request cannot produce.
    Inconsistent(&'static str),
}

impl DynamoFailure {
    /// The core error for this failure on `store`. Neither is a lost answer.
    pub(crate) fn into_error(self, store: &str, effect: RequestEffect) -> Error {
        let message = match self {
            DynamoFailure::Corrupt(what) => what,
            DynamoFailure::Inconsistent(what) => what.to_owned(),
        };
        Error::failed_request(store, effect, false, message.into())
    }
}

/// The core error for a request to `store` that the SDK failed.
///
/// A service error is a definite answer (the request was refused, nothing applied), except a
/// 5xx, after which a write may have applied. A timeout, a dispatch failure other than a
/// misconfigured client, and a response that could not be read may come after the request was
/// applied. A request that could not be built was never sent.
pub(crate) fn classify<E, R>(err: SdkError<E, R>, store: &str, effect: RequestEffect) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
    SdkError<E, R>: HasStatus,
{
    let answer_lost = match &err {
        SdkError::ConstructionFailure(_) => false,
        SdkError::DispatchFailure(failure) => !failure.is_user(),
        SdkError::ServiceError(_) => err.status().is_some_and(|s| s >= 500),
        _ => true,
    };
    if err.code() == Some("ResourceNotFoundException") {
        let detail = err.message().unwrap_or_default().to_owned();
        return Error::failed_request(
            store,
            effect,
            false,
            format!("{detail}: the table does not exist (DynamoTable::create creates it)").into(),
        );
    }
    Error::failed_request(store, effect, answer_lost, Box::new(err))
}

/// The HTTP status of a failed request's response, where there is one.
pub(crate) trait HasStatus {
    fn status(&self) -> Option<u16>;
}

impl<E> HasStatus for SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse> {
    fn status(&self) -> Option<u16> {
        self.raw_response().map(|r| r.status().as_u16())
    }
}
