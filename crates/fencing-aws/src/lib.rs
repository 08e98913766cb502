//! What the AWS SDK's errors mean for a fenced write, shared by every adapter on an AWS SDK
//! client (`fencing-dynamodb`, `fencing-s3`).
//!
//! The core's rule (`fencing_core::Error::failed_request`) needs one fact from the driver:
//! whether the request's answer may have been lost after the service applied it.
//! [`answer_lost`] reads it off an SDK error, and [`request_failed`] makes the core's error
//! with a message that says what happened: the service's error code and message, the HTTP
//! status and the request id, or why the request never reached the service.

use std::error::Error as StdError;
use std::fmt;
use std::io;

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use fencing_core::Error;
use fencing_core::adapter::RequestEffect;

/// Whether a request that failed with `err` may have been applied by the service:
///
/// * a request that could not be built was never sent: **no**;
/// * a dispatch failure caused by the caller's configuration, or one that never opened a
///   connection (refused, no route, a name that does not resolve), was never sent: **no**;
///   any other (a connection reset or closed after the request went out) may have reached the
///   service: **yes**;
/// * a timeout, or a response that could not be read: **yes**;
/// * a service error is the service's definite answer — **no** — except a 5xx, after which
///   the request may or may not have applied: **yes**.
pub fn answer_lost<E: StdError + 'static>(err: &SdkError<E, HttpResponse>) -> bool {
    match err {
        SdkError::ConstructionFailure(_) => false,
        SdkError::DispatchFailure(failure) => !failure.is_user() && !never_connected(err),
        SdkError::ServiceError(service) => service.raw().status().is_server_error(),
        _ => true,
    }
}

/// The core's error for a request to `store` that failed with `err`: [`Error::Ambiguous`]
/// when the answer may have been lost after a write ([`answer_lost`]), [`Error::Backend`]
/// otherwise, with [`describe`]'s message (the SDK's error stays its source).
pub fn request_failed<E>(
    store: &str,
    effect: RequestEffect,
    err: SdkError<E, HttpResponse>,
) -> Error
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    let answer_lost = answer_lost(&err);
    let failed = RequestFailed {
        description: describe(&err),
        source: Box::new(err),
    };
    Error::failed_request(store, effect, answer_lost, Box::new(failed))
}

/// What happened to a request, in one line: the service's error code and message, the HTTP
/// status and the request id of a service error; whether a request that failed to go out was
/// sent at all, with the cause the HTTP client gave.
pub fn describe<E>(err: &SdkError<E, HttpResponse>) -> String
where
    E: ProvideErrorMetadata + StdError + 'static,
{
    let causes = causes(err);
    match err {
        SdkError::ServiceError(service) => {
            let raw = service.raw();
            let status = raw.status().as_u16();
            let request_id = ["x-amzn-requestid", "x-amz-request-id"]
                .iter()
                .find_map(|name| raw.headers().get(*name));
            let what = match (err.code(), err.message()) {
                (Some(code), Some(message)) => format!("{code}: {message}"),
                (Some(code), None) => code.to_owned(),
                (None, _) => service.err().to_string(),
            };
            match request_id {
                Some(id) => format!("{what} (HTTP {status}, request id {id})"),
                None => format!("{what} (HTTP {status})"),
            }
        }
        SdkError::DispatchFailure(failure) if failure.is_user() || never_connected(err) => {
            format!("the request was not sent, so nothing was applied: {causes}")
        }
        SdkError::DispatchFailure(_) => {
            format!("the connection failed after the request may have gone out: {causes}")
        }
        SdkError::TimeoutError(_) => format!("no answer in time: {causes}"),
        SdkError::ResponseError(response) => format!(
            "the answer could not be read (HTTP {}): {causes}",
            response.raw().status().as_u16()
        ),
        SdkError::ConstructionFailure(_) => {
            format!("the request could not be built, nothing was sent: {causes}")
        }
        _ => causes,
    }
}

/// Whether a dispatch failure happened before any connection was open: refused, no route, a
/// host name that does not resolve. The HTTP client reports these as connect errors; the
/// operating system's error kind says which, where one is in the chain.
fn never_connected(err: &(dyn StdError + 'static)) -> bool {
    let mut cause: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(current) = cause {
        if let Some(io) = current.downcast_ref::<io::Error>()
            && matches!(
                io.kind(),
                io::ErrorKind::ConnectionRefused
                    | io::ErrorKind::AddrNotAvailable
                    | io::ErrorKind::HostUnreachable
                    | io::ErrorKind::NetworkUnreachable
            )
        {
            return true;
        }
        let text = current.to_string();
        if text.starts_with("dns error") || text.starts_with("tcp connect error") {
            return true;
        }
        cause = current.source();
    }
    false
}

/// Every cause under `err`, joined by `: `, each said once.
fn causes(err: &(dyn StdError + 'static)) -> String {
    let mut said: Vec<String> = Vec::new();
    let mut cause = err.source();
    while let Some(current) = cause {
        let text = current.to_string();
        if !said.iter().any(|s| s.contains(&text)) {
            said.push(text);
        }
        cause = current.source();
    }
    if said.is_empty() {
        err.to_string()
    } else {
        said.join(": ")
    }
}

/// An SDK error with a message that says what happened ([`describe`]).
#[derive(Debug)]
struct RequestFailed {
    description: String,
    source: Box<dyn StdError + Send + Sync + 'static>,
}

impl fmt::Display for RequestFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.description)
    }
}

impl StdError for RequestFailed {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}
