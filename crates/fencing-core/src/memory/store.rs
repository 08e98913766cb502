use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::lock;
use crate::contract::store::{
    FencedStore, FencedWrite, Record, StoreIdentity, StoreWrites, Written,
};
use crate::contract::token_source::FenceFloor;
use crate::value::error::Result;
use crate::value::name::{RecordKey, ResourceName, State};
use crate::value::token::FencingToken;

/// Fenced records in memory, checked by [`FencedWrite::decide`] under one lock per write.
/// Clones share the same records.
#[derive(Clone, Debug)]
pub struct MemoryStore {
    name: String,
    records: Arc<Mutex<BTreeMap<RecordKey, Record>>>,
    identity: StoreIdentity,
}

impl MemoryStore {
    /// An empty store called `name` in errors and batches.
    pub fn new(name: impl Into<String>) -> Self {
        MemoryStore {
            name: name.into(),
            records: Arc::default(),
            identity: StoreIdentity::new(),
        }
    }

    /// Puts a record with no fence, as the producer of a job does before any lease exists;
    /// replaces a record already there.
    pub fn insert_unfenced(&self, key: RecordKey, state: Option<State>, payload: Vec<u8>) {
        let record = Record {
            key: key.clone(),
            fence: None,
            state,
            payload,
        };
        lock(&self.records).insert(key, record);
    }

    /// Every record, in key order.
    pub fn records(&self) -> Vec<Record> {
        lock(&self.records).values().cloned().collect()
    }
}

#[async_trait]
impl FencedStore for MemoryStore {
    fn name(&self) -> &str {
        &self.name
    }

    fn identity(&self) -> StoreIdentity {
        self.identity.clone()
    }

    async fn read(&self, key: &RecordKey) -> Result<Option<Record>> {
        Ok(lock(&self.records).get(key).cloned())
    }
}

#[async_trait]
impl StoreWrites for MemoryStore {
    async fn write(
        &self,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Written> {
        let mut records = lock(&self.records);
        let current = records.get(key);
        write.decide(&self.name, key, token, current)?;
        let updated = write.apply(key, token, current);
        let written = Written::new(current, updated.clone());
        records.insert(key.clone(), updated);
        Ok(written)
    }
}

/// The highest fence of every record in the store, whatever the resource.
#[async_trait]
impl FenceFloor for MemoryStore {
    async fn max_fence(&self, _: &ResourceName) -> Result<Option<FencingToken>> {
        Ok(lock(&self.records).values().filter_map(|r| r.fence).max())
    }
}
