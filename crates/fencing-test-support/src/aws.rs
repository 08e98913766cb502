//! What every test of an AWS adapter builds its client from: the emulator's endpoint, dummy
//! credentials, an HTTP stack, and interceptors that lose answers or tamper with requests.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use aws_credential_types::Credentials;
use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::http::SharedHttpClient;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextMut,
};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use aws_types::region::Region;

/// The HTTP stack a user might choose: rustls with ring (it speaks plain HTTP to the emulator
/// too).
pub fn http_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

/// Credentials the emulator accepts.
pub fn credentials() -> Credentials {
    Credentials::new("test", "test", None, None, "fencing-tests")
}

/// The region the tests name.
pub fn region() -> Region {
    Region::new("us-east-1")
}

/// A DynamoDB client on the tests' DynamoDB ([`crate::services::dynamodb_endpoint`]) as a
/// user builds one (their endpoint, credentials and HTTP stack), from `config`, which may add
/// interceptors.
pub fn dynamodb_client(config: aws_sdk_dynamodb::config::Builder) -> aws_sdk_dynamodb::Client {
    dynamodb_client_at(&crate::services::dynamodb_endpoint(), config)
}

/// [`dynamodb_client`] on the emulator at `endpoint` (a process told where it is).
pub fn dynamodb_client_at(
    endpoint: &str,
    config: aws_sdk_dynamodb::config::Builder,
) -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::from_conf(
        config
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .endpoint_url(endpoint)
            .region(region())
            .credentials_provider(credentials())
            .http_client(http_client())
            .build(),
    )
}

/// An S3 client on the emulator, path-style (the emulator has no virtual hosts), from
/// `config`, which may add interceptors.
pub fn s3_client(config: aws_sdk_s3::config::Builder) -> aws_sdk_s3::Client {
    s3_client_at(&crate::services::aws_endpoint(), config)
}

/// [`s3_client`] on the emulator at `endpoint` (a process told where it is).
pub fn s3_client_at(endpoint: &str, config: aws_sdk_s3::config::Builder) -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(
        config
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .endpoint_url(endpoint)
            .region(region())
            .credentials_provider(credentials())
            .http_client(http_client())
            .force_path_style(true)
            .build(),
    )
}

/// An interceptor that loses the answer of the next requests it is armed for, after the
/// service handled them, through the SDK's own hook: what a connection reset after the server
/// applied the request looks like to the caller. Clones share their counters.
#[derive(Clone, Debug, Default)]
pub struct LoseAnswers {
    counters: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    armed: AtomicU32,
    lost: AtomicU32,
}

impl LoseAnswers {
    /// Loses the answers of the next `requests` requests.
    pub fn arm(&self, requests: u32) {
        self.counters.armed.store(requests, Ordering::SeqCst);
    }

    /// How many answers were lost so far.
    pub fn lost(&self) -> u32 {
        self.counters.lost.load(Ordering::SeqCst)
    }
}

impl Intercept for LoseAnswers {
    fn name(&self) -> &'static str {
        "LoseAnswers"
    }

    fn read_after_transmit(
        &self,
        _: &BeforeDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let armed = &self.counters.armed;
        if armed
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            self.counters.lost.fetch_add(1, Ordering::SeqCst);
            return Err("injected fault: the answer was lost after the service handled it".into());
        }
        Ok(())
    }
}

/// An interceptor that tampers with S3 requests before they leave, through the SDK's own hook:
/// it sends the next requests of a method it is armed for to a bucket that does not exist
/// (path-style addressing), so the service refuses them definitely (`NoSuchBucket`) and
/// applies nothing, makes the next ones' `If-Match` name an ETag
/// no object has (the object changed in between, as another writer's put would make it), or
/// strips every request's `If-Match` (a server that ignores the condition). It counts the
/// requests of each method it saw. Clones share their state.
#[derive(Clone, Debug, Default)]
pub struct TamperRequests {
    state: Arc<Tampering>,
}

#[derive(Debug, Default)]
struct Tampering {
    /// The method to send to a missing bucket, and how many more of its requests.
    misrouting: Mutex<Option<(String, u32)>>,
    /// The method whose `If-Match` to make stale, and how many more of its requests.
    staling: Mutex<Option<(String, u32)>>,
    drops_if_match: AtomicBool,
    seen: Mutex<Vec<String>>,
}

impl TamperRequests {
    /// Sends the next `requests` requests whose HTTP method is `method` (`PUT`, `DELETE`, …)
    /// to a bucket that does not exist.
    pub fn misroute(&self, method: &str, requests: u32) {
        *self.state.misrouting.lock().unwrap() = Some((method.to_owned(), requests));
    }

    /// Makes the `If-Match` of the next `requests` requests of `method` name an ETag no object
    /// has.
    pub fn stale_if_match(&self, method: &str, requests: u32) {
        *self.state.staling.lock().unwrap() = Some((method.to_owned(), requests));
    }

    /// Strips the `If-Match` header of every request from now on.
    pub fn drop_if_match(&self) {
        self.state.drops_if_match.store(true, Ordering::SeqCst);
    }

    /// How many requests of `method` it saw, failed ones included.
    pub fn seen(&self, method: &str) -> usize {
        let seen = self.state.seen.lock().unwrap();
        seen.iter().filter(|m| *m == method).count()
    }
}

impl Intercept for TamperRequests {
    fn name(&self) -> &'static str {
        "TamperRequests"
    }

    fn modify_before_transmit(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request_mut();
        let method = request.method().to_owned();
        self.state.seen.lock().unwrap().push(method.clone());
        if self.state.drops_if_match.load(Ordering::SeqCst) {
            request.headers_mut().remove("if-match");
        }
        if takes_one(&self.state.staling, &method) && request.headers().contains_key("if-match") {
            request
                .headers_mut()
                .insert("if-match", "\"00000000000000000000000000000000\"");
        }
        if takes_one(&self.state.misrouting, &method) {
            let uri = request.uri().to_owned();
            let (origin, path) = uri
                .split_once("://")
                .and_then(|(scheme, rest)| {
                    let (host, path) = rest.split_once('/')?;
                    Some((format!("{scheme}://{host}"), path.to_owned()))
                })
                .ok_or_else(|| format!("{uri} has no path"))?;
            let key = path.split_once('/').map_or("", |(_, key)| key);
            request.set_uri(format!("{origin}/fencing-no-such-bucket/{key}"))?;
        }
        Ok(())
    }
}

/// Whether `armed` is set for `method` with requests left, taking one if so.
fn takes_one(armed: &Mutex<Option<(String, u32)>>, method: &str) -> bool {
    let mut armed = armed.lock().unwrap();
    match armed.as_mut() {
        Some((armed, left)) if armed == method && *left > 0 => {
            *left -= 1;
            true
        }
        _ => false,
    }
}

/// What the suite may expect of the AWS emulator, for every adapter tested against it: it
/// does not serialise concurrent requests (the suite's races go through
/// `fencing_testkit::conformance::OneAtATime`), and it answers in milliseconds rather than
/// microseconds, so leases last long enough for a dozen requests.
pub fn emulator_capabilities() -> fencing_testkit::conformance::Capabilities {
    fencing_testkit::conformance::Capabilities {
        serialises_concurrent_writes: false,
        short_ttl: fencing_core::Ttl::from_millis(1500).expect("a valid TTL"),
        expiry_slack: std::time::Duration::from_millis(200),
        ..fencing_testkit::conformance::Capabilities::real_server()
    }
}

/// What the suite may expect of the tests' DynamoDB: moto's as [`emulator_capabilities`];
/// Amazon's DynamoDB Local serialises concurrent conditional writes as the service does, so
/// the suite's races run concurrently there.
pub fn dynamodb_capabilities() -> fencing_testkit::conformance::Capabilities {
    use crate::services::DynamoServer;
    match DynamoServer::from_env() {
        DynamoServer::Moto => emulator_capabilities(),
        DynamoServer::DynamoDbLocal => fencing_testkit::conformance::Capabilities {
            serialises_concurrent_writes: true,
            ..emulator_capabilities()
        },
    }
}
