//! What the AWS SDK's errors mean for a fenced write, shared by every adapter on an AWS SDK
//! client (`fencing-dynamodb`, `fencing-s3`).
//!
//! The core's rule (`fencing_core::Error::failed_request`) needs one fact from the driver:
//! what kind of failure the request met ([`meaning`]), above all whether its answer may have
//! been lost after the service applied it ([`answer_lost`]). [`request_failed`] makes the
//! core's error with a message that says what happened: the service's error code and message,
//! the HTTP status and the request id, or why the request never reached the service.

use std::error::Error as StdError;
use std::io;

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use fencing_core::adapter::{Explained, RequestEffect};
use fencing_core::{Error, Failure};

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

/// What a request that failed with `err` means: a lost answer where [`answer_lost`] says the
/// service may have applied it; otherwise the service's error code (or its HTTP status) says
/// whether the credentials, the configuration, the service's capacity or its features are
/// why; a request never sent is a configuration that could not build or send it, or a
/// service that could not be reached.
pub fn meaning<E>(err: &SdkError<E, HttpResponse>) -> Failure
where
    E: ProvideErrorMetadata + StdError + 'static,
{
    if let SdkError::ServiceError(service) = err {
        let status = service.raw().status().as_u16();
        match err.code() {
            Some(
                "AccessDeniedException"
                | "AccessDenied"
                | "UnrecognizedClientException"
                | "InvalidSignatureException"
                | "SignatureDoesNotMatch"
                | "InvalidAccessKeyId"
                | "MissingAuthenticationToken"
                | "MissingAuthenticationTokenException"
                | "ExpiredToken"
                | "ExpiredTokenException"
                | "InvalidClientTokenId",
            ) => return Failure::PermissionDenied,
            Some("ResourceNotFoundException" | "NoSuchBucket" | "ValidationException") => {
                return Failure::Misconfigured;
            }
            Some("NotImplemented" | "UnknownOperationException") => return Failure::NotSupported,
            Some(
                "ProvisionedThroughputExceededException"
                | "ThrottlingException"
                | "Throttling"
                | "RequestLimitExceeded"
                | "LimitExceededException"
                | "SlowDown",
            ) => return Failure::Unavailable,
            _ if status == 401 || status == 403 => return Failure::PermissionDenied,
            _ if status == 429 => return Failure::Unavailable,
            _ => {}
        }
    }
    if answer_lost(err) {
        return Failure::AnswerLost;
    }
    match err {
        SdkError::ConstructionFailure(_) => Failure::Misconfigured,
        SdkError::DispatchFailure(failure) if failure.is_user() => Failure::Misconfigured,
        SdkError::DispatchFailure(_) => Failure::Unavailable,
        _ => Failure::Unexpected,
    }
}

/// The core's error for a request to `store` that failed with `err`: [`Error::Ambiguous`]
/// when the answer may have been lost after a write ([`answer_lost`]), otherwise the failure
/// [`meaning`] names, with [`describe`]'s message (the SDK's error stays its source).
pub fn request_failed<E>(
    store: &str,
    effect: RequestEffect,
    err: SdkError<E, HttpResponse>,
) -> Error
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    let failure = meaning(&err);
    let explained = Explained::new(describe(&err), err);
    Error::failed_request(store, effect, failure, Box::new(explained))
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

#[cfg(test)]
mod tests {
    use std::fmt;

    use aws_smithy_runtime_api::client::result::ConnectorError;
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;
    use aws_smithy_types::error::metadata::ErrorMetadata;

    use super::*;

    /// A service's error as the SDK gives it: a code and a message in its metadata.
    #[derive(Debug)]
    struct ServiceFault(ErrorMetadata);

    impl fmt::Display for ServiceFault {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("the service said no")
        }
    }

    impl StdError for ServiceFault {}

    impl ProvideErrorMetadata for ServiceFault {
        fn meta(&self) -> &ErrorMetadata {
            &self.0
        }
    }

    type Failed = SdkError<ServiceFault, HttpResponse>;

    fn answer(status: u16, request_id: Option<(&'static str, &'static str)>) -> HttpResponse {
        let mut raw = HttpResponse::new(StatusCode::try_from(status).unwrap(), SdkBody::empty());
        if let Some((name, id)) = request_id {
            raw.headers_mut().insert(name, id);
        }
        raw
    }

    fn service(
        status: u16,
        code: Option<&str>,
        message: Option<&str>,
        request_id: Option<(&'static str, &'static str)>,
    ) -> Failed {
        let mut meta = ErrorMetadata::builder();
        if let Some(code) = code {
            meta = meta.code(code);
        }
        if let Some(message) = message {
            meta = meta.message(message);
        }
        SdkError::service_error(ServiceFault(meta.build()), answer(status, request_id))
    }

    fn io_failure(kind: io::ErrorKind) -> Failed {
        SdkError::dispatch_failure(ConnectorError::io(Box::new(io::Error::new(
            kind,
            "the socket said so",
        ))))
    }

    /// An error that says only what it is and what caused it.
    #[derive(Debug)]
    struct Caused(&'static str, Option<Box<Caused>>);

    impl fmt::Display for Caused {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl StdError for Caused {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            self.1.as_deref().map(|c| c as &(dyn StdError + 'static))
        }
    }

    #[test]
    fn a_request_that_never_left_was_not_applied() {
        let unbuilt: Failed = SdkError::construction_failure("no table name");
        assert!(!answer_lost(&unbuilt));
        assert_eq!(
            describe(&unbuilt),
            "the request could not be built, nothing was sent: no table name"
        );
        let misconfigured: Failed =
            SdkError::dispatch_failure(ConnectorError::user("no HTTP client".into()));
        assert!(!answer_lost(&misconfigured));
        assert_eq!(
            describe(&misconfigured),
            "the request was not sent, so nothing was applied: user error: no HTTP client"
        );
        for kind in [
            io::ErrorKind::ConnectionRefused,
            io::ErrorKind::AddrNotAvailable,
            io::ErrorKind::HostUnreachable,
            io::ErrorKind::NetworkUnreachable,
        ] {
            let refused = io_failure(kind);
            assert!(!answer_lost(&refused), "{kind:?}");
            assert!(
                describe(&refused).starts_with("the request was not sent"),
                "{kind:?}"
            );
        }
        for text in ["dns error: no such host", "tcp connect error: refused"] {
            let unresolved: Failed =
                SdkError::dispatch_failure(ConnectorError::io(Box::new(Caused(text, None))));
            assert!(!answer_lost(&unresolved), "{text}");
        }
    }

    #[test]
    fn a_request_whose_answer_went_missing_may_have_been_applied() {
        let reset = io_failure(io::ErrorKind::ConnectionReset);
        assert!(answer_lost(&reset));
        assert_eq!(
            describe(&reset),
            "the connection failed after the request may have gone out: io error: the socket said so"
        );
        let late: Failed = SdkError::timeout_error("no answer in 2 s");
        assert!(answer_lost(&late));
        assert_eq!(describe(&late), "no answer in time: no answer in 2 s");
        let garbled: Failed = SdkError::response_error("truncated body", answer(200, None));
        assert!(answer_lost(&garbled));
        assert_eq!(
            describe(&garbled),
            "the answer could not be read (HTTP 200): truncated body"
        );
        let server = service(503, Some("ServiceUnavailable"), None, None);
        assert!(answer_lost(&server));
    }

    #[test]
    fn a_services_answer_is_definite_and_named_by_its_code() {
        let refused = service(
            400,
            Some("ConditionalCheckFailedException"),
            Some("The conditional request failed"),
            Some(("x-amzn-requestid", "R1")),
        );
        assert!(!answer_lost(&refused));
        assert_eq!(
            describe(&refused),
            "ConditionalCheckFailedException: The conditional request failed (HTTP 400, request id R1)"
        );
        let s3 = service(
            412,
            Some("PreconditionFailed"),
            None,
            Some(("x-amz-request-id", "S3")),
        );
        assert_eq!(
            describe(&s3),
            "PreconditionFailed (HTTP 412, request id S3)"
        );
        let bare = service(409, None, Some("ignored without a code"), None);
        assert_eq!(describe(&bare), "the service said no (HTTP 409)");
        assert!(!answer_lost(&service(499, Some("X"), None, None)));
        assert!(answer_lost(&service(500, Some("X"), None, None)));
    }

    #[test]
    fn a_failed_write_is_ambiguous_only_when_its_answer_may_be_lost() {
        let lost = request_failed(
            "ledger",
            RequestEffect::Writes,
            SdkError::<ServiceFault, HttpResponse>::timeout_error("slow"),
        );
        assert!(lost.is_ambiguous(), "{lost:?}");
        assert_eq!(
            lost.to_string(),
            "ledger: outcome unknown: no answer in time: slow"
        );
        let definite = request_failed(
            "ledger",
            RequestEffect::Writes,
            service(400, Some("ValidationException"), Some("bad key"), None),
        );
        assert!(
            matches!(definite, Error::Misconfigured { .. }),
            "{definite:?}"
        );
        assert_eq!(
            definite.to_string(),
            "ledger: ValidationException: bad key (HTTP 400)"
        );
        let source = StdError::source(&definite).expect("the SDK's error beneath");
        assert!(source.source().is_some(), "the SDK error stays the source");
        let read = request_failed(
            "ledger",
            RequestEffect::ReadOnly,
            SdkError::<ServiceFault, HttpResponse>::timeout_error("slow"),
        );
        assert!(!read.is_ambiguous(), "a read changes nothing: {read:?}");
        assert!(matches!(read, Error::Unavailable { .. }), "{read:?}");
    }

    #[test]
    fn each_kind_of_failure_has_its_meaning() {
        for (code, status, expected) in [
            ("AccessDeniedException", 400, Failure::PermissionDenied),
            (
                "UnrecognizedClientException",
                400,
                Failure::PermissionDenied,
            ),
            ("AccessDenied", 403, Failure::PermissionDenied),
            ("SignatureDoesNotMatch", 403, Failure::PermissionDenied),
            ("SomethingNew", 403, Failure::PermissionDenied),
            ("ResourceNotFoundException", 400, Failure::Misconfigured),
            ("NoSuchBucket", 404, Failure::Misconfigured),
            (
                "ProvisionedThroughputExceededException",
                400,
                Failure::Unavailable,
            ),
            ("ThrottlingException", 400, Failure::Unavailable),
            ("SlowDown", 503, Failure::Unavailable),
            ("SomethingNew", 429, Failure::Unavailable),
            ("NotImplemented", 501, Failure::NotSupported),
            ("InternalServerError", 500, Failure::AnswerLost),
            ("SomethingNew", 400, Failure::Unexpected),
        ] {
            let err = service(status, Some(code), None, None);
            assert_eq!(meaning(&err), expected, "{code} (HTTP {status})");
        }
        let unbuilt: Failed = SdkError::construction_failure("no region");
        assert_eq!(meaning(&unbuilt), Failure::Misconfigured);
        let refused = io_failure(io::ErrorKind::ConnectionRefused);
        assert_eq!(meaning(&refused), Failure::Unavailable);
        let reset = io_failure(io::ErrorKind::ConnectionReset);
        assert_eq!(meaning(&reset), Failure::AnswerLost);
    }

    #[test]
    fn each_cause_is_said_once() {
        let chain = Caused(
            "outer",
            Some(Box::new(Caused(
                "middle: inner",
                Some(Box::new(Caused("inner", None))),
            ))),
        );
        assert_eq!(causes(&chain), "middle: inner");
        assert_eq!(causes(&Caused("alone", None)), "alone");
        assert!(!never_connected(&chain));
    }
}
