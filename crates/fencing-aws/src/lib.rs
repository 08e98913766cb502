//! What the AWS SDK's errors mean for a fenced write, shared by every adapter on an AWS SDK
//! client (`fencing-dynamodb`, `fencing-s3`).
//!
//! The core's rule (`fencing_core::Error::failed_request`) needs one fact from the driver:
//! whether the request's answer may have been lost after the service applied it.
//! [`answer_lost`] reads it off an SDK error.

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;

/// Whether a request that failed with `err` may have been applied by the service:
///
/// * a request that could not be built was never sent: **no**;
/// * a dispatch failure caused by the caller's configuration was never sent: **no**; any other
///   (connection reset, refused, I/O) may have reached the service: **yes**;
/// * a timeout, or a response that could not be read: **yes**;
/// * a service error is the service's definite answer — **no** — except a 5xx, after which
///   the request may or may not have applied: **yes**.
pub fn answer_lost<E>(err: &SdkError<E, HttpResponse>) -> bool {
    match err {
        SdkError::ConstructionFailure(_) => false,
        SdkError::DispatchFailure(failure) => !failure.is_user(),
        SdkError::ServiceError(service) => service.raw().status().is_server_error(),
        _ => true,
    }
}
