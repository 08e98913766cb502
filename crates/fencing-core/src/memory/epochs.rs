use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::lock;
use crate::contract::token_source::EpochSource;
use crate::value::error::{Error, Result};
use crate::value::name::ResourceName;
use crate::value::token::FencingToken;

/// Per-resource epochs in memory, each with the opening it was opened for. Clones share them.
///
/// Memory is never failed over, so it needs no rate bound: an opening never waits.
#[derive(Clone, Debug, Default)]
pub struct MemoryEpochSource {
    epochs: Arc<Mutex<HashMap<ResourceName, Opened>>>,
}

/// The highest epoch of a resource and the opening it was opened for (`None`: raised to a
/// floor, or not opened yet).
#[derive(Clone, Debug)]
struct Opened {
    epoch: FencingToken,
    for_opening: Option<String>,
}

impl MemoryEpochSource {
    /// A source with no epochs: the first opened is 1.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl EpochSource for MemoryEpochSource {
    async fn open(&self, resource: &ResourceName, opening: &str) -> Result<FencingToken> {
        let mut epochs = lock(&self.epochs);
        let epoch = match epochs.get(resource) {
            Some(last) if last.for_opening.as_deref() == Some(opening) => return Ok(last.epoch),
            Some(last) => last.epoch.next().ok_or_else(|| Error::TokenExhausted {
                resource: resource.clone(),
            })?,
            None => FencingToken::MIN,
        };
        let for_opening = Some(opening.to_owned());
        epochs.insert(resource.clone(), Opened { epoch, for_opening });
        Ok(epoch)
    }

    async fn current(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        Ok(lock(&self.epochs).get(resource).map(|opened| opened.epoch))
    }

    async fn advance_to(
        &self,
        resource: &ResourceName,
        floor: FencingToken,
    ) -> Result<FencingToken> {
        let mut epochs = lock(&self.epochs);
        let opened = epochs.entry(resource.clone()).or_insert(Opened {
            epoch: floor,
            for_opening: None,
        });
        opened.epoch = opened.epoch.max(floor);
        Ok(opened.epoch)
    }
}
