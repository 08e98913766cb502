//! What only an `object_store` backend asks of the adapter: a backend that cannot update
//! conditionally, deletes as tombstones, objects it cannot read, keys as path segments, and
//! the byte-identical ABA trap, on the in-memory backend and the local file system.

use std::sync::Arc;

use fencing_core::adapter::envelope::{self, Contents};
use fencing_core::{Error, FencedStore, FencedWrite, FencingToken, FoundFence, RecordKey};
use fencing_object_store::FencedObjectStore;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutPayload, UpdateVersion};

fn key(text: &str) -> RecordKey {
    RecordKey::new(text).unwrap()
}

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

fn memory() -> Arc<dyn ObjectStore> {
    Arc::new(InMemory::new())
}

fn store_on(backend: &Arc<dyn ObjectStore>) -> FencedObjectStore {
    FencedObjectStore::new(backend.clone(), Path::from("m_4471"))
}

async fn raw(backend: &Arc<dyn ObjectStore>, location: &Path) -> (Vec<u8>, UpdateVersion) {
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
#[tokio::test]
async fn a_byte_identical_newer_write_changes_the_object_and_the_stale_update_fails() {
    let backend = memory();
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

/// A delete leaves a tombstone that keeps the fence: readers find nothing, a holder with a
/// lower token can neither delete again nor bring the record back, one with the tombstone's
/// token or higher can.
#[tokio::test]
async fn a_delete_leaves_a_tombstone_that_keeps_the_fence() {
    let backend = memory();
    let store = store_on(&backend);
    let k = key("r_815");
    store
        .write(&k, token(33), &FencedWrite::claim())
        .await
        .unwrap();
    store
        .write(&k, token(34), &FencedWrite::claim())
        .await
        .unwrap();
    let err = store.delete(&k, token(33)).await.unwrap_err();
    assert!(matches!(err, Error::Fenced { .. }), "{err:?}");
    let deleted = store.delete(&k, token(34)).await.unwrap();
    assert_eq!(deleted.fence, Some(token(34)));
    assert_eq!(store.read(&k).await.unwrap(), None);
    let (body, _) = raw(&backend, &store.location(&k)).await;
    assert!(matches!(
        envelope::decode_contents(&k, &body),
        Ok((Contents::Tombstone(Some(f)), _)) if f == token(34)
    ));
    let err = store.delete(&k, token(34)).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");

    let stale = store_on(&backend);
    let err = stale
        .write(&k, token(33), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Fenced { found: FoundFence::Fence(f), .. } if f == token(34)),
        "{err:?}"
    );
    assert_eq!(
        raw(&backend, &store.location(&k)).await.0,
        body,
        "unchanged"
    );
    let again = store
        .write(
            &k,
            token(35),
            &FencedWrite::claim().set_payload(b"again".to_vec()),
        )
        .await
        .unwrap();
    assert_eq!(again.record.fence, Some(token(35)));
    assert_eq!(store.read(&k).await.unwrap().unwrap().payload, b"again");
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
    let err = store
        .write(&k, token(33), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("cannot update objects conditionally"),
        "{err}"
    );
    assert_eq!(store.read(&k).await.unwrap(), None);
    let left: Vec<_> = walk(&dir);
    assert!(left.is_empty(), "files left behind: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// An object that is not an envelope (a team's own file at a record's path) is never written
/// over: the write fails naming it, and the bytes stay.
#[tokio::test]
async fn an_object_that_is_not_an_envelope_is_never_written_over() {
    let backend = memory();
    let store = store_on(&backend);
    let k = key("r_815");
    backend
        .put(
            &store.location(&k),
            PutPayload::from_static(b"{\"amount\": 70.25}"),
        )
        .await
        .unwrap();
    for err in [
        store.read(&k).await.unwrap_err(),
        store
            .write(&k, token(34), &FencedWrite::claim())
            .await
            .unwrap_err(),
    ] {
        assert!(matches!(err, Error::Backend { .. }), "{err:?}");
        assert!(err.to_string().contains("not written over"), "{err}");
    }
    assert_eq!(
        raw(&backend, &store.location(&k)).await.0,
        b"{\"amount\": 70.25}"
    );
}

/// A key is one path segment under the prefix: a `/` in it cannot reach another record's
/// object, and `.` / `..` cannot climb out of the prefix.
#[tokio::test]
async fn a_key_stays_one_path_segment_under_the_prefix() {
    let backend = memory();
    let store = store_on(&backend).named("receipts").unwrap();
    for text in ["a/b", "..", "."] {
        let location = store.location(&key(text));
        assert_eq!(location.parts().count(), 2, "{text:?} at {location}");
        assert!(location.prefix_matches(&Path::from("m_4471")), "{location}");
    }
    store
        .write(
            &key("a"),
            token(1),
            &FencedWrite::claim().set_payload(b"a".to_vec()),
        )
        .await
        .unwrap();
    store
        .write(
            &key("a/b"),
            token(1),
            &FencedWrite::claim().set_payload(b"ab".to_vec()),
        )
        .await
        .unwrap();
    assert_eq!(store.read(&key("a")).await.unwrap().unwrap().payload, b"a");
    assert_eq!(
        store.read(&key("a/b")).await.unwrap().unwrap().payload,
        b"ab"
    );
    assert_eq!(store.name(), "receipts");
    assert!(
        FencedObjectStore::new(memory(), Path::default())
            .named("bad\u{7}")
            .is_err()
    );
}
