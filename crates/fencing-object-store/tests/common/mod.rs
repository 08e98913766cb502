//! What every backend of the adapter must show beyond the conformance suite (the ABA trap,
//! tombstones, objects it cannot read, keys as path segments), each check run on a backend a
//! test file brings; and a backend double that answers as real services do where the
//! emulators never would.
// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fencing_core::adapter::{ConditionalPutDefect, StoreWrites};
use fencing_core::{Error, FencedStore, FencedWrite, FencingToken, FoundFence, RecordKey};
use fencing_object_store::ObjectStoreStore;
use fencing_testkit::conformance;
use futures_util::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, UpdateVersion,
};

/// The whole conformance suite on the store `$store` makes (a fresh one per test), as the
/// concrete type and as `Box`/`Arc<dyn …>`, with the suite's capabilities `caps()`, then a
/// paused holder and exact increments.
#[allow(unused_macros)]
macro_rules! conformance_suite {
    ($store:expr) => {
        mod concrete {
            use super::*;

            fencing_testkit::store_conformance! {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                subject: $store,
                caps: caps(),
            }
        }

        mod boxed {
            use super::*;

            fencing_testkit::store_conformance! {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                subject: Box::new($store) as Box<dyn fencing_core::FencedStore>,
                caps: caps(),
            }
        }

        mod shared {
            use super::*;

            fencing_testkit::store_conformance! {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                subject: std::sync::Arc::new($store) as std::sync::Arc<dyn fencing_core::FencedStore>,
                caps: caps(),
            }
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn paused_holder_is_fenced_by_the_object() {
            fencing_testkit::conformance::paused_holder_is_fenced(
                &fencing_core::MemoryLease::new(),
                &$store,
                caps(),
            )
            .await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn fenced_increments_are_exact() {
            let report = fencing_testkit::conformance::fenced_increments(
                std::sync::Arc::new(fencing_core::MemoryLease::new()),
                std::sync::Arc::new($store),
                caps(),
                3,
                4,
                fencing_testkit::Fencing::On,
                23,
            )
            .await;
            assert_eq!(report.total, report.expected, "{report:?}");
        }
    };
}
#[allow(unused_imports)]
pub(crate) use conformance_suite;

pub(crate) fn key(text: &str) -> RecordKey {
    RecordKey::new(text).unwrap()
}

pub(crate) fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

pub(crate) fn store_on(backend: &Arc<dyn ObjectStore>) -> ObjectStoreStore {
    ObjectStoreStore::new(backend.clone(), Path::from("m_4471"))
}

pub(crate) async fn raw(
    backend: &Arc<dyn ObjectStore>,
    location: &Path,
) -> (Vec<u8>, UpdateVersion) {
    let got = backend.get(location).await.unwrap();
    let version = UpdateVersion {
        e_tag: got.meta.e_tag.clone(),
        version: got.meta.version.clone(),
    };
    (got.bytes().await.unwrap().to_vec(), version)
}

/// A newer holder writes a byte-identical payload under a higher token: the object's bytes
/// change all the same, so an update on the version the stale holder saw is refused by the
/// backend itself, and the stale holder's own write is fenced.
pub(crate) async fn a_byte_identical_newer_write_changes_the_object(backend: Arc<dyn ObjectStore>) {
    let (a, b) = (store_on(&backend), store_on(&backend));
    let k = key("r_815");
    let payload = FencedWrite::claim().set_payload(b"70.25".to_vec());
    a.write(&k, token(33), &payload).await.unwrap();
    let (stale_bytes, stale_version) = raw(&backend, &a.location(&k)).await;
    b.write(&k, token(34), &payload).await.unwrap();
    let (newer_bytes, _) = raw(&backend, &a.location(&k)).await;
    assert_ne!(stale_bytes, newer_bytes, "same payload, different objects");
    let replay = backend
        .put_opts(
            &a.location(&k),
            PutPayload::from(stale_bytes),
            PutMode::Update(stale_version).into(),
        )
        .await;
    assert!(
        matches!(replay, Err(object_store::Error::Precondition { .. })),
        "{replay:?}"
    );
    let err = a.write(&k, token(33), &payload).await.unwrap_err();
    assert!(
        matches!(err, Error::Fenced { found: FoundFence::Fence(f), .. } if f == token(34)),
        "{err:?}"
    );
    assert_eq!(b.read(&k).await.unwrap().unwrap().fence, Some(token(34)));
}

/// The shared tombstone suite, on `backend`.
pub(crate) async fn a_delete_leaves_a_tombstone_that_keeps_the_fence(
    backend: Arc<dyn ObjectStore>,
) {
    let (store, stale) = (store_on(&backend), store_on(&backend));
    conformance::a_delete_leaves_a_tombstone_that_keeps_the_fence(
        &store,
        &stale,
        ObjectStoreStore::delete,
        async |k| raw(&backend, &store.location(k)).await.0,
    )
    .await;
}

/// An object that is not an envelope (a team's own file at a record's path) is never written
/// over: the write fails naming it, and the bytes stay.
pub(crate) async fn an_object_that_is_not_an_envelope_is_never_written_over(
    backend: Arc<dyn ObjectStore>,
) {
    let store = store_on(&backend);
    let k = key("r_815");
    let theirs = b"{\"amount\": 70.25}";
    backend
        .put(&store.location(&k), PutPayload::from_static(theirs))
        .await
        .unwrap();
    for err in [
        store.read(&k).await.unwrap_err(),
        store
            .write(&k, token(34), &FencedWrite::claim())
            .await
            .unwrap_err(),
    ] {
        assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
        assert!(err.to_string().contains("not written over"), "{err}");
    }
    assert_eq!(raw(&backend, &store.location(&k)).await.0, theirs);
}

/// A key is one path segment under the prefix: a `/` in it cannot reach another record's
/// object, and `.` / `..` cannot climb out of the prefix.
pub(crate) async fn a_key_stays_one_path_segment_under_the_prefix(backend: Arc<dyn ObjectStore>) {
    let store = store_on(&backend).named("receipts").unwrap();
    for text in ["a/b", "..", "."] {
        let location = store.location(&key(text));
        assert_eq!(location.parts().count(), 2, "{text:?} at {location}");
        assert!(location.prefix_matches(&Path::from("m_4471")), "{location}");
    }
    let claim = |payload: &[u8]| FencedWrite::claim().set_payload(payload.to_vec());
    store
        .write(&key("a"), token(1), &claim(b"a"))
        .await
        .unwrap();
    store
        .write(&key("a/b"), token(1), &claim(b"ab"))
        .await
        .unwrap();
    assert_eq!(store.read(&key("a")).await.unwrap().unwrap().payload, b"a");
    assert_eq!(
        store.read(&key("a/b")).await.unwrap().unwrap().payload,
        b"ab"
    );
    assert_eq!(store.name(), "receipts");
}

/// The backend refuses every conditional put it must (the store's check passes, and once
/// passed is not run again), and keeps none of the check's probes.
pub(crate) async fn the_backend_refuses_the_puts_it_must(backend: Arc<dyn ObjectStore>) {
    use futures_util::StreamExt;
    let store = store_on(&backend);
    store.check_conditional_writes().await.unwrap();
    store.check_conditional_writes().await.unwrap();
    let left: Vec<_> = backend.list(Some(store.prefix())).collect().await;
    assert!(left.is_empty(), "objects left behind: {left:?}");
}

/// What a [`Scripted`] backend does with one conditional put, beyond passing it on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// `409 ConditionalRequestConflict` (S3, when two conditional writes meet; Azurite's
    /// answer where Azure gives 412): nothing stored.
    Conflict409,
    /// `404` on an `If-Match` to an object deleted meanwhile: nothing stored.
    NotFoundOnUpdate,
    /// The put applies; its answer is lost and the client's resend meets `412`.
    AppliedThen412,
    /// The put applies; the answer is a `5xx` (or a dropped connection).
    AppliedThen5xx,
}

/// An in-memory backend whose next conditional puts answer as scripted, or which has one
/// of the defects a server can have (it takes one kind of conditional put as a plain put).
#[derive(Debug, Default)]
pub(crate) struct Scripted {
    inner: InMemory,
    answers: Mutex<VecDeque<Answer>>,
    applied: Mutex<u32>,
    ignores: Option<ConditionalPutDefect>,
}

impl Scripted {
    /// A backend with `defect`: every conditional put of the kind it names is stored as a
    /// plain put (as one S3-compatible server did with `If-Match` on a missing key).
    pub(crate) fn ignoring(defect: ConditionalPutDefect) -> Self {
        Scripted {
            ignores: Some(defect),
            ..Scripted::default()
        }
    }

    /// `opts` as a server with this backend's defect reads them.
    async fn as_the_defect_reads(&self, location: &Path, opts: PutOptions) -> PutOptions {
        let Some(defect) = self.ignores else {
            return opts;
        };
        let exists = self.inner.head(location).await.is_ok();
        let ignored = matches!(
            (defect, &opts.mode, exists),
            (
                ConditionalPutDefect::CreateOverExisting,
                PutMode::Create,
                true
            ) | (ConditionalPutDefect::StaleVersion, PutMode::Update(_), true)
                | (
                    ConditionalPutDefect::UpdateOfMissing,
                    PutMode::Update(_),
                    false
                )
        );
        if ignored {
            PutOptions {
                mode: PutMode::Overwrite,
                ..opts
            }
        } else {
            opts
        }
    }

    /// Plans the answer to the next conditional put (the store's probe excepted).
    pub(crate) fn then(&self, answer: Answer) {
        self.answers.lock().unwrap().push_back(answer);
    }

    /// How many conditional puts of records were stored.
    pub(crate) fn applied(&self) -> u32 {
        *self.applied.lock().unwrap()
    }
}

impl fmt::Display for Scripted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Scripted")
    }
}

fn failure(path: &Path, what: &str) -> Box<dyn std::error::Error + Send + Sync> {
    format!("{what} for {path} (injected)").into()
}

#[async_trait]
impl ObjectStore for Scripted {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let opts = self.as_the_defect_reads(location, opts).await;
        let probe = location.as_ref().contains(".fencing-probe");
        let answer = if probe || matches!(opts.mode, PutMode::Overwrite) {
            None
        } else {
            self.answers.lock().unwrap().pop_front()
        };
        let path = location.to_string();
        match answer {
            None => {}
            Some(Answer::Conflict409) => {
                return Err(object_store::Error::AlreadyExists {
                    path,
                    source: failure(location, "409 ConditionalRequestConflict"),
                });
            }
            Some(Answer::NotFoundOnUpdate) => {
                return Err(object_store::Error::NotFound {
                    path,
                    source: failure(location, "404 on If-Match"),
                });
            }
            Some(Answer::AppliedThen412) => {
                self.inner.put_opts(location, payload, opts).await?;
                *self.applied.lock().unwrap() += 1;
                return Err(object_store::Error::Precondition {
                    path,
                    source: failure(location, "412 to a resent put"),
                });
            }
            Some(Answer::AppliedThen5xx) => {
                self.inner.put_opts(location, payload, opts).await?;
                *self.applied.lock().unwrap() += 1;
                return Err(object_store::Error::Generic {
                    store: "Scripted",
                    source: failure(location, "503 after the write applied"),
                });
            }
        }
        let put = self.inner.put_opts(location, payload, opts).await?;
        if !probe {
            *self.applied.lock().unwrap() += 1;
        }
        Ok(put)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
