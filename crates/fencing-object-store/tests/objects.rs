//! What only an `object_store` backend asks of the adapter, on the in-memory backend: the
//! shared checks (`common`), the answers real services give that no emulator sends, and the
//! local file system, which cannot update conditionally.

mod common;

use std::sync::Arc;

use common::{Answer, Scripted, key, store_on, token};
use fencing_core::adapter::{ConditionalPutDefect, StoreWrites};
use fencing_core::{Error, FencedStore, FencedWrite, Lifecycle};
use fencing_object_store::ObjectStoreStore;
use futures_util::StreamExt;
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;

fn memory() -> Arc<dyn ObjectStore> {
    Arc::new(InMemory::new())
}

#[tokio::test]
async fn a_byte_identical_newer_write_changes_the_object() {
    common::a_byte_identical_newer_write_changes_the_object(memory()).await;
}

#[tokio::test]
async fn a_delete_leaves_a_tombstone_that_keeps_the_fence() {
    common::a_delete_leaves_a_tombstone_that_keeps_the_fence(memory()).await;
}

#[tokio::test]
async fn an_object_that_is_not_an_envelope_is_never_written_over() {
    common::an_object_that_is_not_an_envelope_is_never_written_over(memory()).await;
}

#[tokio::test]
async fn a_key_stays_one_path_segment_under_the_prefix() {
    common::a_key_stays_one_path_segment_under_the_prefix(memory()).await;
    assert_eq!(store_on(&memory()).prefix(), &Path::from("m_4471"));
    assert!(
        ObjectStoreStore::new(memory(), Path::default())
            .named("bad\u{7}")
            .is_err()
    );
}

/// A refund claimed in flight under 33, then confirmed done through a backend that answers
/// the confirm as scripted: whatever the answer, the confirm is applied exactly once and
/// reported as applied, from the record as the backend holds it.
async fn confirm_answered(answer: Answer) -> (Result<fencing_core::Written, Error>, u32) {
    let scripted = Arc::new(Scripted::default());
    let backend: Arc<dyn ObjectStore> = scripted.clone();
    let store = store_on(&backend);
    let lifecycle = Lifecycle::default();
    let k = key("r_815");
    store
        .write(
            &k,
            token(33),
            &FencedWrite::claim().set_state(lifecycle.pending().clone()),
        )
        .await
        .unwrap();
    store
        .write(&k, token(33), &lifecycle.claim())
        .await
        .unwrap();
    let before = scripted.applied();
    scripted.then(answer);
    let confirmed = store.write(&k, token(33), &lifecycle.confirm()).await;
    let record = store.read(&k).await.unwrap().unwrap();
    assert_eq!(record.state.as_ref(), Some(lifecycle.done()), "{answer:?}");
    assert_eq!(record.fence, Some(token(33)));
    (confirmed, scripted.applied() - before)
}

/// 409 (two conditional writes met) and 404 on `If-Match` store nothing: the write reads
/// again and goes through on the next round. A 412 to a resent put, or a 5xx, after the write
/// applied: the record read back carries this write's id, so it is reported applied and never
/// decided again (a confirm decided again would be refused: the refund is no longer in
/// flight). Either way the confirm is stored once and reported applied.
#[tokio::test]
async fn each_answer_no_emulator_sends_is_settled_as_applied_once() {
    let answers = [
        Answer::Conflict409,
        Answer::NotFoundOnUpdate,
        Answer::AppliedThen412,
        Answer::AppliedThen5xx,
    ];
    for answer in answers {
        let (confirmed, applied) = confirm_answered(answer).await;
        let written = confirmed.unwrap_or_else(|e| panic!("{answer:?}: {e:?}"));
        assert_eq!(
            written.previous_state.as_ref(),
            Some(Lifecycle::default().in_flight()),
            "{answer:?}"
        );
        assert_eq!(applied, 1, "{answer:?}");
    }
}

/// The local file system creates objects exclusively but cannot update them on a version:
/// the store refuses it at the first write, naming why, and leaves no record behind.
#[tokio::test]
async fn a_backend_that_cannot_update_conditionally_is_refused_before_anything_is_written() {
    let dir = std::env::temp_dir().join(fencing_testkit::unique_name("fencing-fs"));
    std::fs::create_dir_all(&dir).unwrap();
    let backend: Arc<dyn ObjectStore> = Arc::new(LocalFileSystem::new_with_prefix(&dir).unwrap());
    let store = store_on(&backend);
    let k = key("r_815");
    for _ in 0..2 {
        let err = store
            .write(&k, token(33), &FencedWrite::claim())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::NotSupported { .. }), "{err:?}");
        assert!(
            err.to_string()
                .contains("cannot update objects conditionally"),
            "{err}"
        );
    }
    assert_eq!(store.read(&k).await.unwrap(), None);
    let left = files_under(&dir);
    assert!(left.is_empty(), "files left behind: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A backend that takes one kind of conditional put it must refuse as a plain put (a create
/// over an object, a stale `If-Match`, an `If-Match` on a missing object) is refused by the
/// check and at the first write, naming the defect, and nothing is left of a record or of
/// the probes.
#[tokio::test]
async fn a_backend_that_accepts_a_put_it_must_refuse_is_refused_before_anything_is_written() {
    for defect in [
        ConditionalPutDefect::CreateOverExisting,
        ConditionalPutDefect::StaleVersion,
        ConditionalPutDefect::UpdateOfMissing,
    ] {
        let backend: Arc<dyn ObjectStore> = Arc::new(Scripted::ignoring(defect));
        let store = store_on(&backend).named("receipts").unwrap();
        let checked = store.check_conditional_writes().await.unwrap_err();
        assert_eq!(
            ConditionalPutDefect::of(&checked),
            Some(defect),
            "{checked:?}"
        );
        assert!(
            matches!(&checked, Error::NotSupported { store, .. } if store == "receipts"),
            "{checked:?}"
        );
        let k = key("r_815");
        let err = store
            .write(&k, token(33), &FencedWrite::claim())
            .await
            .unwrap_err();
        assert_eq!(ConditionalPutDefect::of(&err), Some(defect), "{err:?}");
        assert!(err.to_string().contains("If-"), "{err}");
        let left: Vec<_> = backend.list(None).collect().await;
        assert!(left.is_empty(), "{defect:?}: objects left behind: {left:?}");
    }
}

#[tokio::test]
async fn a_backend_that_keeps_the_contract_passes_the_check_and_keeps_no_probe() {
    common::the_backend_refuses_the_puts_it_must(memory()).await;
}

fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files
}
