use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::lock;
use crate::cas::engine::{NewObject, PutOutcome, StoredObject, VersionedStore};
use crate::value::error::Result;
use crate::value::name::RecordKey;

/// Objects in memory that can only be swapped on a version, as an object store keeps them:
/// the reference [`VersionedStore`] behind [`crate::adapter::CasStore`]. Every put that
/// applies gives the object a new version number. Clones share the same objects.
#[derive(Clone, Debug)]
pub struct MemoryVersionedStore {
    name: String,
    objects: Arc<Mutex<VersionedObjects>>,
}

#[derive(Debug, Default)]
struct VersionedObjects {
    by_key: HashMap<RecordKey, StoredObject<u64>>,
    last_version: u64,
}

impl MemoryVersionedStore {
    /// An empty store called `name` in errors and batches.
    pub fn new(name: impl Into<String>) -> Self {
        MemoryVersionedStore {
            name: name.into(),
            objects: Arc::default(),
        }
    }

    /// Removes `key`'s object outright, as an operator (or a check's clean-up of its own
    /// probes) would: no version compared, no fence kept.
    pub fn remove(&self, key: &RecordKey) {
        lock(&self.objects).by_key.remove(key);
    }
}

#[async_trait]
impl VersionedStore for MemoryVersionedStore {
    type Version = u64;

    fn name(&self) -> &str {
        &self.name
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<StoredObject<u64>>> {
        Ok(lock(&self.objects).by_key.get(key).cloned())
    }

    async fn put(
        &self,
        key: &RecordKey,
        object: NewObject<'_>,
        expected: Option<&u64>,
    ) -> Result<PutOutcome<u64>> {
        let mut objects = lock(&self.objects);
        let current = objects.by_key.get(key).map(|stored| stored.version);
        if current.as_ref() != expected {
            return Ok(PutOutcome::Conflict);
        }
        objects.last_version += 1;
        let version = objects.last_version;
        let stored = StoredObject {
            body: object.body,
            version,
        };
        objects.by_key.insert(key.clone(), stored);
        Ok(PutOutcome::Applied(version))
    }
}
