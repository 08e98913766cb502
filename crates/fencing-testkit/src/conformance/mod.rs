//! The conformance suite: every guarantee of [`Lease`], [`TokenSource`] and [`FencedStore`]
//! as a function that panics with a message when an implementation breaks it, and the macros
//! ([`store_conformance!`](crate::store_conformance), [`lease_conformance!`](crate::lease_conformance),
//! [`token_source_conformance!`](crate::token_source_conformance)) that make each one a test of
//! its own for an adapter.
//!
//! Functions take the implementation as a generic (so `Box<dyn …>` and `Arc<dyn …>` are tested
//! as themselves) and a [`Capabilities`] the harness declares for the backend. Each function
//! isolates itself with random resource names and record keys, so a shared server is fine.
//! Time passes through tokio: a harness on the in-memory stores runs paused (virtual time);
//! one on a real server runs in real time with TTLs short enough to wait out.
//!
//! [`Lease`]: fencing_core::Lease
//! [`TokenSource`]: fencing_core::TokenSource
//! [`FencedStore`]: fencing_core::FencedStore

mod behind;
mod dropped;
mod holders;
mod lease;
mod macros;
mod one_at_a_time;
mod store;
mod tokens;
mod tombstones;

pub use behind::*;
pub use dropped::*;
pub use holders::*;
pub use lease::*;
pub use one_at_a_time::OneAtATime;
pub use store::*;
pub use tokens::*;
pub use tombstones::*;

use std::time::Duration;

use fencing_core::{
    FencedStore, FencedWrite, FencingToken, Lease, LeaseGuard, Lifecycle, RecordKey, ResourceName,
    Ttl,
};

/// What the harness declares about a backend, which decides what the suite may expect.
#[derive(Clone, Copy, Debug)]
pub struct Capabilities {
    /// A short TTL the suite waits out to test expiry.
    pub short_ttl: Ttl,
    /// Extra wait beyond a TTL before the server is sure to have expired the lease (its own
    /// timer resolution and the round trip).
    pub expiry_slack: Duration,
    /// Concurrent requests are serialised by the server, each atomic. False for emulators that
    /// are not (moto): the suite's races then send their requests through [`OneAtATime`], so
    /// they still interleave freely between requests but never inside one, as on the real
    /// service, and no race passes or fails by the emulator's luck.
    pub serialises_concurrent_writes: bool,
    /// Resource names may contain `{` and `}`. False for Redis, whose hash tags they would
    /// break: such names must then be refused as invalid input, before anything is sent.
    pub braces_in_resource_names: bool,
    /// Each token is the one before plus one, unless a floor intervenes. False for a source
    /// whose tokens are a revision that every other write to the server advances too (etcd):
    /// the suite then checks that tokens rise and floors hold, not that they are consecutive.
    pub consecutive_tokens: bool,
    /// How the suite's record keys are spelled for this store: the suite's own key text in,
    /// a key the store can hold out. The text itself, unless the store's keys have a shape
    /// of their own (a DynamoDB table with a Number sort key takes `<partition>|<number>`).
    pub record_key: fn(&str) -> String,
    /// How the suite's payloads are spelled for this store: the suite's bytes in, a payload
    /// the store can hold out (the same bytes back for none). The bytes themselves, unless
    /// the store's payloads have a shape of their own (an S3 store with the JSON codec takes
    /// JSON objects).
    pub record_payload: fn(&[u8]) -> Vec<u8>,
}

impl Capabilities {
    /// For the in-memory implementations under a paused runtime: time is free.
    pub fn in_memory() -> Self {
        Capabilities {
            short_ttl: Ttl::from_secs(30).expect("valid TTL"),
            expiry_slack: Duration::from_millis(1),
            serialises_concurrent_writes: true,
            braces_in_resource_names: true,
            consecutive_tokens: true,
            record_key: str::to_owned,
            record_payload: <[u8]>::to_vec,
        }
    }

    /// For a real server in real time.
    pub fn real_server() -> Self {
        Capabilities {
            short_ttl: Ttl::from_millis(300).expect("valid TTL"),
            expiry_slack: Duration::from_millis(150),
            serialises_concurrent_writes: true,
            braces_in_resource_names: true,
            consecutive_tokens: true,
            record_key: str::to_owned,
            record_payload: <[u8]>::to_vec,
        }
    }

    /// The same, for a backend whose tokens are revisions shared with every other write.
    pub fn with_revision_tokens(self) -> Self {
        Capabilities {
            consecutive_tokens: false,
            ..self
        }
    }

    /// The same, for a backend that refuses braces in resource names.
    pub fn without_braces(self) -> Self {
        Capabilities {
            braces_in_resource_names: false,
            ..self
        }
    }

    /// The same, for a store whose record keys are spelled by `record_key`.
    pub fn with_record_keys(self, record_key: fn(&str) -> String) -> Self {
        Capabilities { record_key, ..self }
    }

    /// The same, for a store whose payloads are spelled by `record_payload`.
    pub fn with_record_payloads(self, record_payload: fn(&[u8]) -> Vec<u8>) -> Self {
        Capabilities {
            record_payload,
            ..self
        }
    }

    /// The payload `bytes` stand for, in this store's spelling.
    pub fn payload(&self, bytes: &[u8]) -> Vec<u8> {
        (self.record_payload)(bytes)
    }

    /// A fresh record key, unique to this run, spelled for the store.
    pub fn key(&self, prefix: &str) -> RecordKey {
        self.key_spelled(&crate::unique_name(prefix))
    }

    /// The record key `text` names in this store's spelling.
    pub fn key_spelled(&self, text: &str) -> RecordKey {
        RecordKey::new((self.record_key)(text)).expect("valid record key")
    }

    /// The TTL of a lease a test needs held until it releases it: no test outlives it,
    /// however busy the machine. `short_ttl` is for the leases a test waits out.
    pub fn held_ttl(&self) -> Ttl {
        Ttl::new(self.short_ttl.duration() * 200).expect("a valid TTL")
    }

    /// How long to wait for a lease taken with `short_ttl` to be expired everywhere.
    pub fn past_expiry(&self) -> Duration {
        self.short_ttl.duration() + self.expiry_slack
    }
}

/// Names that are valid for the core but hostile to naive adapters: quotes, SQL, braces
/// (Redis hash tags), glob characters, path separators, unicode, and look-alikes that
/// differ by one character. Each gets a random prefix so tests do not collide.
pub fn hostile_names() -> Vec<String> {
    let base = crate::unique_name("hostile");
    [
        "plain",
        "plain ",
        "it's",
        "a\"b",
        "x'; DROP TABLE refund; --",
        "/*comment*/",
        "{tag}",
        "}{",
        "*?[]",
        "../../etc/passwd",
        "%s%n",
        "ünï-cødé-✓",
        "ends-with-backslash\\",
    ]
    .iter()
    .map(|suffix| format!("{base}:{suffix}"))
    .collect()
}

pub(crate) fn resource(prefix: &str) -> ResourceName {
    ResourceName::new(crate::unique_name(prefix)).expect("valid resource name")
}

/// Acquires `r`, which must be free.
pub(crate) async fn must_acquire<L: Lease + ?Sized>(
    lease: &L,
    r: &ResourceName,
    ttl: Ttl,
) -> LeaseGuard {
    lease
        .try_acquire(r, ttl)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{r:?} should be free"))
}

/// Puts `k` in the `pending` state under the lowest fence, as a job's producer does.
pub async fn make_pending<S: FencedStore + ?Sized>(store: &S, k: &RecordKey) {
    let pending = FencedWrite::claim().set_state(Lifecycle::default().pending().clone());
    store.write(k, FencingToken::MIN, &pending).await.unwrap();
}
