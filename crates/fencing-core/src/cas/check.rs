//! Whether a versioned store refuses the conditional puts its contract says it must: checked
//! on probe records of its own before anything of a job is trusted to it.
//!
//! A server that takes `If-Match` on a missing object as a plain put, or ignores a stale
//! `If-Match`, still answers every ordinary write as a fenced store should, so only puts that
//! must be refused show the defect. [`CasStore`](crate::adapter::CasStore) decides on what it
//! read and puts on that version: on such a server a stale holder's put, sent between a newer
//! holder's read and write, lands.

use std::fmt;

use crate::cas::engine::{NewObject, PutOutcome, VersionedStore};
use crate::cas::object::WriteId;
use crate::value::error::{Error, Result};
use crate::value::name::RecordKey;

/// A conditional put a store applied where [`VersionedStore`]'s contract says it must store
/// nothing: the store cannot fence, and nothing of a record may be written to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConditionalPutDefect {
    /// A create over a record that exists (`If-None-Match: *` ignored).
    CreateOverExisting,
    /// A replace on a version the record no longer had (a stale `If-Match` accepted).
    StaleVersion,
    /// A replace of a record that does not exist (`If-Match` on a missing key accepted).
    UpdateOfMissing,
}

impl ConditionalPutDefect {
    /// The defect [`check_conditional_writes`] found, if `err` is its refusal.
    pub fn of(err: &Error) -> Option<Self> {
        match err {
            Error::NotSupported { source, .. } => source.downcast_ref::<Self>().copied(),
            _ => None,
        }
    }
}

impl fmt::Display for ConditionalPutDefect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self {
            ConditionalPutDefect::CreateOverExisting => {
                "it created an object over one that exists (If-None-Match ignored)"
            }
            ConditionalPutDefect::StaleVersion => {
                "it replaced an object on a version the object no longer had (a stale If-Match \
                 accepted)"
            }
            ConditionalPutDefect::UpdateOfMissing => {
                "it stored an object where none existed on a conditional replace (If-Match on a \
                 missing key accepted)"
            }
        };
        write!(
            f,
            "{what}: its conditional writes cannot keep a stale holder out, so no record is \
             written to it"
        )
    }
}

impl std::error::Error for ConditionalPutDefect {}

/// Checks that `store` refuses the puts its contract refuses, on two probe records of this
/// check's own (`.fencing-probe-<random>` and the same with `-missing`, which no record of a
/// job shares by chance):
///
/// 1. create the probe; 2. create it again, which must conflict; 3. replace it on its
///    version; 4. replace it on the version it had before, which must conflict; 5. replace the
///    missing probe on a version, which must conflict.
///
/// `remove` is then called on both keys, whatever the outcome, to take away what the check
/// left (a store's own delete may leave a tombstone; the probes are nobody's records).
///
/// Returns [`Error::NotSupported`] whose source is the [`ConditionalPutDefect`] found (see
/// [`ConditionalPutDefect::of`]); a store that cannot replace at all fails at step 3 with
/// its own error.
pub async fn check_conditional_writes<S, F, Removed>(store: &S, remove: F) -> Result<()>
where
    S: VersionedStore + ?Sized,
    F: Fn(RecordKey) -> Removed,
    Removed: Future<Output = ()>,
{
    let probe = RecordKey::new(format!(".fencing-probe-{:032x}", WriteId::random().0))?;
    let missing = RecordKey::new(format!("{}-missing", probe.as_str()))?;
    let checked = check_on(store, &probe, &missing).await;
    remove(probe).await;
    remove(missing).await;
    checked
}

async fn check_on<S: VersionedStore + ?Sized>(
    store: &S,
    probe: &RecordKey,
    missing: &RecordKey,
) -> Result<()> {
    let put = async |key: &RecordKey, expected: Option<&S::Version>| {
        // A body of its own each time: an ETag is a digest of the body, and a replace with the
        // same bytes would leave the version the check then calls stale.
        let body = format!(
            r#"{{"fencing":"probe","put":"{:032x}"}}"#,
            WriteId::random().0
        );
        let probe = NewObject {
            body: body.into_bytes(),
            content_type: "application/json",
            fence: None,
            state: None,
            tombstone: false,
        };
        store.put(key, probe, expected).await
    };
    let defect = |defect: ConditionalPutDefect| Error::NotSupported {
        store: store.name().to_owned(),
        source: Box::new(defect),
    };
    let unexpected = |what: &str| Error::Backend {
        store: store.name().to_owned(),
        source: format!("{what}; nothing of a record was written").into(),
    };
    let PutOutcome::Applied(first) = put(probe, None).await? else {
        return Err(unexpected("the probe object already existed"));
    };
    if let PutOutcome::Applied(_) = put(probe, None).await? {
        return Err(defect(ConditionalPutDefect::CreateOverExisting));
    }
    let PutOutcome::Applied(second) = put(probe, Some(&first)).await? else {
        return Err(unexpected(
            "it refused to replace the probe object on the version it had just answered",
        ));
    };
    if let PutOutcome::Applied(_) = put(probe, Some(&first)).await? {
        return Err(defect(ConditionalPutDefect::StaleVersion));
    }
    if let PutOutcome::Applied(_) = put(missing, Some(&second)).await? {
        return Err(defect(ConditionalPutDefect::UpdateOfMissing));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use crate::cas::engine::StoredObject;
    use crate::memory::MemoryVersionedStore;

    #[test]
    fn a_defect_says_which_condition_was_ignored_and_what_follows() {
        let shown = ConditionalPutDefect::StaleVersion.to_string();
        assert!(
            shown.contains("stale If-Match accepted")
                && shown.ends_with("no record is written to it"),
            "{shown}"
        );
    }

    /// A server with one of the defects: the in-memory store with one condition ignored.
    #[derive(Debug)]
    struct Defective {
        inner: MemoryVersionedStore,
        ignores: ConditionalPutDefect,
    }

    #[async_trait]
    impl VersionedStore for Defective {
        type Version = u64;

        fn name(&self) -> &str {
            self.inner.name()
        }

        async fn get(&self, key: &RecordKey) -> Result<Option<StoredObject<u64>>> {
            self.inner.get(key).await
        }

        async fn put(
            &self,
            key: &RecordKey,
            object: NewObject<'_>,
            expected: Option<&u64>,
        ) -> Result<PutOutcome<u64>> {
            let current = self.inner.get(key).await?.map(|c| c.version);
            let as_unconditional = matches!(
                (self.ignores, expected, current),
                (ConditionalPutDefect::CreateOverExisting, None, Some(_))
                    | (ConditionalPutDefect::StaleVersion, Some(_), Some(_))
                    | (ConditionalPutDefect::UpdateOfMissing, Some(_), None)
            );
            let expected = if as_unconditional {
                current.as_ref()
            } else {
                expected
            };
            self.inner.put(key, object, expected).await
        }
    }

    /// Runs the check on `store` (whose objects live in `objects`) with a `remove` that
    /// removes the object, and returns its answer with the keys it was told to remove.
    async fn check<S: VersionedStore<Version = u64>>(
        store: &S,
        objects: &MemoryVersionedStore,
    ) -> (Result<()>, Vec<RecordKey>) {
        let removed = Mutex::new(Vec::new());
        let checked = check_conditional_writes(store, |key: RecordKey| async {
            objects.remove(&key);
            removed.lock().unwrap().push(key);
        })
        .await;
        (checked, removed.into_inner().unwrap())
    }

    #[tokio::test]
    async fn a_store_that_keeps_its_contract_passes_and_keeps_nothing_of_the_probes() {
        let store = MemoryVersionedStore::new("objects");
        let (checked, removed) = check(&store, &store).await;
        checked.unwrap();
        assert_eq!(removed.len(), 2);
        for key in &removed {
            assert!(key.as_str().starts_with(".fencing-probe-"), "{key:?}");
            assert_eq!(store.get(key).await.unwrap(), None);
        }
    }

    #[tokio::test]
    async fn each_defect_is_named_and_its_probes_removed() {
        for ignores in [
            ConditionalPutDefect::CreateOverExisting,
            ConditionalPutDefect::StaleVersion,
            ConditionalPutDefect::UpdateOfMissing,
        ] {
            let store = Defective {
                inner: MemoryVersionedStore::new("objects"),
                ignores,
            };
            let (checked, removed) = check(&store, &store.inner).await;
            let err = checked.unwrap_err();
            assert_eq!(ConditionalPutDefect::of(&err), Some(ignores), "{err:?}");
            assert!(err.to_string().contains("objects"), "{err}");
            assert!(!err.is_ambiguous());
            for key in &removed {
                assert_eq!(store.get(key).await.unwrap(), None, "{ignores:?}");
            }
        }
    }

    /// A store whose version is the body itself, as an ETag is a digest of it.
    #[derive(Debug, Default)]
    struct ContentAddressed(Mutex<std::collections::HashMap<RecordKey, Vec<u8>>>);

    #[async_trait]
    impl VersionedStore for ContentAddressed {
        type Version = Vec<u8>;

        fn name(&self) -> &str {
            "etags"
        }

        async fn get(&self, key: &RecordKey) -> Result<Option<StoredObject<Vec<u8>>>> {
            let objects = self.0.lock().unwrap();
            Ok(objects.get(key).map(|body| StoredObject {
                body: body.clone(),
                version: body.clone(),
            }))
        }

        async fn put(
            &self,
            key: &RecordKey,
            object: NewObject<'_>,
            expected: Option<&Vec<u8>>,
        ) -> Result<PutOutcome<Vec<u8>>> {
            let mut objects = self.0.lock().unwrap();
            if objects.get(key) != expected {
                return Ok(PutOutcome::Conflict);
            }
            objects.insert(key.clone(), object.body.clone());
            Ok(PutOutcome::Applied(object.body))
        }
    }

    #[tokio::test]
    async fn a_store_whose_version_is_a_digest_of_the_body_passes() {
        let store = ContentAddressed::default();
        check_conditional_writes(&store, |_| async {})
            .await
            .unwrap();
    }

    #[test]
    fn only_a_checks_refusal_names_a_defect() {
        let other = Error::Unavailable {
            store: "objects".into(),
            source: "connection refused".into(),
        };
        assert_eq!(ConditionalPutDefect::of(&other), None);
    }
}
