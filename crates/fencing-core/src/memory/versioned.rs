use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::lock;
use crate::cas::engine::{PutOutcome, Versioned, VersionedStore, WriteId};
use crate::contract::store::Record;
use crate::value::error::Result;
use crate::value::name::RecordKey;

/// Records in memory that can only be swapped on a version, as an object store keeps them:
/// the reference [`VersionedStore`] behind [`crate::adapter::CasStore`]. Every put that applies gives
/// the record a new version number. Clones share the same records.
#[derive(Clone, Debug)]
pub struct MemoryVersionedStore {
    name: String,
    records: Arc<Mutex<VersionedRecords>>,
}

#[derive(Debug, Default)]
struct VersionedRecords {
    by_key: HashMap<RecordKey, Versioned<u64>>,
    last_version: u64,
}

impl MemoryVersionedStore {
    /// An empty store called `name` in errors and batches.
    pub fn new(name: impl Into<String>) -> Self {
        MemoryVersionedStore {
            name: name.into(),
            records: Arc::default(),
        }
    }
}

#[async_trait]
impl VersionedStore for MemoryVersionedStore {
    type Version = u64;

    fn name(&self) -> &str {
        &self.name
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<Versioned<u64>>> {
        Ok(lock(&self.records).by_key.get(key).cloned())
    }

    async fn put(
        &self,
        key: &RecordKey,
        record: &Record,
        write_id: WriteId,
        expected: Option<&u64>,
    ) -> Result<PutOutcome<u64>> {
        let mut records = lock(&self.records);
        let current = records.by_key.get(key).map(|v| v.version);
        if current.as_ref() != expected {
            return Ok(PutOutcome::Conflict);
        }
        records.last_version += 1;
        let version = records.last_version;
        let stored = Versioned {
            record: record.clone(),
            write_id,
            version,
        };
        records.by_key.insert(key.clone(), stored);
        Ok(PutOutcome::Applied(version))
    }

    async fn delete(&self, key: &RecordKey, current: &Versioned<u64>) -> Result<PutOutcome<()>> {
        let mut records = lock(&self.records);
        if records.by_key.get(key).map(|v| v.version) != Some(current.version) {
            return Ok(PutOutcome::Conflict);
        }
        records.by_key.remove(key);
        Ok(PutOutcome::Applied(()))
    }
}
