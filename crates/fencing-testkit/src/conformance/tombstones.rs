//! What every object store's fenced delete must do: leave a tombstone that keeps the fence, so
//! that a stale holder can neither delete the record again nor bring it back.

use fencing_core::adapter::HolderExt;
use fencing_core::{
    Error, FencedStore, FencedWrite, FencingToken, FoundFence, Holder, Lifecycle, Record,
    RecordKey, Result,
};

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

fn is_fenced_by(err: &Error, kept: u64) -> bool {
    matches!(err, Error::Fenced { found: FoundFence::Fence(f), .. } if *f == token(kept))
}

/// A delete leaves a tombstone that keeps the fence: readers find nothing; a holder with a
/// lower token can neither delete again nor write the record back (every kind of write is
/// refused as stale, and the object's bytes stay as they are); the deleter's own token finds
/// the record absent (a confirm is `NotFound`, a claim creates it again), and so does a newer
/// one.
///
/// `store` is the holder's; `stale` another handle on the same objects (a second worker, with
/// nothing of its own remembered). `delete` is the store's fenced delete
/// (`S3Store::delete`, `ObjectStoreStore::delete`), and `body` reads an object's raw bytes
/// past the store. Tokens 33 to 35 are issued for the fences it deletes with.
pub async fn a_delete_leaves_a_tombstone_that_keeps_the_fence<S, D, B>(
    store: &S,
    stale: &S,
    delete: D,
    body: B,
) where
    S: FencedStore + ?Sized,
    D: AsyncFn(&S, &Holder, &RecordKey) -> Result<Record>,
    B: AsyncFn(&RecordKey) -> Vec<u8>,
{
    let (source, resource) = crate::issued_up_to(35).await;
    let holder = |n: u64| Holder::new(&resource, token(n), &source);
    let k = RecordKey::new("r_815").unwrap();
    let claim = FencedWrite::claim();
    stale.write(&k, token(33), &claim).await.unwrap();
    store.write(&k, token(34), &claim).await.unwrap();
    let err = delete(stale, &holder(33), &k).await.unwrap_err();
    assert!(is_fenced_by(&err, 34), "{err:?}");
    let deleted = delete(store, &holder(34), &k).await.unwrap();
    assert_eq!(deleted.fence, Some(token(34)));
    assert_eq!(store.read(&k).await.unwrap(), None);
    assert_eq!(stale.read(&k).await.unwrap(), None);
    let tombstone = body(&k).await;
    let err = delete(store, &holder(34), &k).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");

    // Writes that need the record check the fence first too: a stale holder is told it is
    // stale, the deleter that the record is gone.
    let lifecycle = Lifecycle::default();
    for write in [
        claim.clone(),
        lifecycle.claim(),
        lifecycle.confirm(),
        FencedWrite::holder_only(),
    ] {
        let err = stale.write(&k, token(33), &write).await.unwrap_err();
        assert!(
            is_fenced_by(&err, 34),
            "{write:?} by a stale holder: {err:?}"
        );
    }
    let err = delete(stale, &holder(33), &k).await.unwrap_err();
    assert!(is_fenced_by(&err, 34), "{err:?}");
    for newer in [34, 35] {
        let err = stale
            .write(&k, token(newer), &lifecycle.confirm())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    }
    assert_eq!(
        body(&k).await,
        tombstone,
        "nothing written over the tombstone"
    );

    // The holder that deleted it may write it again: its fence is the tombstone's.
    let rewritten = store.write(&k, token(34), &claim).await.unwrap();
    assert_eq!(
        (rewritten.previous_fence, rewritten.record.fence),
        (None, Some(token(34)))
    );
    let again = claim.clone().set_payload(b"{\"again\":1}".to_vec());
    stale.write(&k, token(35), &again).await.unwrap();
    assert_eq!(
        store.read(&k).await.unwrap().unwrap().payload,
        b"{\"again\":1}"
    );
}
