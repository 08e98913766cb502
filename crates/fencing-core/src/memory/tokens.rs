use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::lock;
use crate::contract::token_source::TokenSource;
use crate::protocol::epoch;
use crate::value::error::{Error, Result};
use crate::value::name::ResourceName;
use crate::value::token::FencingToken;

/// Per-resource counters in memory. Clones share the same counters.
///
/// Memory loses nothing unless told to: [`Self::forget_all`] plays a Redis restart without
/// persistence. Built with [`Self::new`] the counters then start again at 1 and reissue tokens,
/// as a Redis source without a durable epoch source does; built with [`Self::with_epochs`]
/// they open a new epoch ([`crate::adapter::epoch`]), as the default Redis source does, and never
/// reissue one.
#[derive(Clone, Default)]
pub struct MemoryTokenSource {
    counters: Arc<Mutex<HashMap<ResourceName, FencingToken>>>,
    epochs: Option<Arc<dyn TokenSource>>,
}

impl fmt::Debug for MemoryTokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryTokenSource")
            .field("counters", &self.counters)
            .field("epochs", &self.epochs.is_some())
            .finish()
    }
}

impl MemoryTokenSource {
    /// A source with no counters: the first token of every resource is 1. After
    /// [`Self::forget_all`] it starts again at 1.
    pub fn new() -> Self {
        Self::default()
    }

    /// A source whose counters hold epoch-prefixed tokens ([`crate::adapter::epoch`]): a missing
    /// counter opens a new epoch from `epochs`, so [`Self::forget_all`] never leads to a token
    /// being issued twice.
    pub fn with_epochs(epochs: Arc<dyn TokenSource>) -> Self {
        MemoryTokenSource {
            counters: Arc::default(),
            epochs: Some(epochs),
        }
    }

    /// Forgets every counter, as a Redis without persistence does when it restarts.
    pub fn forget_all(&self) {
        lock(&self.counters).clear();
    }

    /// Issues the next token, or `None` when the counter must first open an epoch
    /// ([`Self::open_epoch`]).
    pub(crate) fn try_issue(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        let mut counters = lock(&self.counters);
        let current = counters.get(resource).copied();
        if self.epochs.is_some() && epoch::must_open_epoch(current) {
            return Ok(None);
        }
        let next = match current {
            None => FencingToken::MIN,
            Some(current) => current.next().ok_or_else(|| Error::TokenExhausted {
                resource: resource.clone(),
            })?,
        };
        counters.insert(resource.clone(), next);
        Ok(Some(next))
    }

    /// Raises the counter to the start of a new epoch.
    pub(crate) async fn open_epoch(&self, resource: &ResourceName) -> Result<()> {
        if let Some(epochs) = &self.epochs {
            let start = epoch::open_epoch(&**epochs, resource, None).await?;
            self.raise(resource, start);
        }
        Ok(())
    }

    fn raise(&self, resource: &ResourceName, floor: FencingToken) -> FencingToken {
        let mut counters = lock(&self.counters);
        let counter = counters.entry(resource.clone()).or_insert(floor);
        *counter = (*counter).max(floor);
        *counter
    }
}

#[async_trait]
impl TokenSource for MemoryTokenSource {
    async fn next(&self, resource: &ResourceName) -> Result<FencingToken> {
        loop {
            if let Some(token) = self.try_issue(resource)? {
                return Ok(token);
            }
            self.open_epoch(resource).await?;
        }
    }

    async fn current(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        Ok(lock(&self.counters).get(resource).copied())
    }

    async fn advance_to(
        &self,
        resource: &ResourceName,
        floor: FencingToken,
    ) -> Result<FencingToken> {
        let missing = !lock(&self.counters).contains_key(resource);
        let target =
            epoch::advance_target(self.epochs.as_deref(), resource, floor, missing).await?;
        Ok(self.raise(resource, target))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a source prints: its counters, and whether epochs stand behind them (not the
    /// epoch source itself, which may be a connection).
    #[tokio::test]
    async fn a_source_shows_its_counters_and_whether_it_has_epochs() {
        let plain = MemoryTokenSource::new();
        let resource = ResourceName::new("settle:m_4471").unwrap();
        plain.next(&resource).await.unwrap();
        let shown = format!("{plain:?}");
        assert!(shown.starts_with("MemoryTokenSource {"), "{shown}");
        assert!(shown.contains("settle:m_4471"), "{shown}");
        assert!(shown.contains("epochs: false"), "{shown}");
        let with_epochs = MemoryTokenSource::with_epochs(Arc::new(MemoryTokenSource::new()));
        assert!(format!("{with_epochs:?}").contains("epochs: true"));
    }
}
