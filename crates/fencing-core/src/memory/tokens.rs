use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::lock;
use crate::contract::guard::OwnerId;
use crate::contract::token_source::{EpochSource, TokenSource};
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
    counters: Arc<Mutex<Counters>>,
    epochs: Option<Arc<dyn EpochSource>>,
}

/// The counters, and for each counter lost and not yet re-established the opening its epoch
/// is taken for: every caller that finds it lost before it is re-established names the same
/// loss, so one loss opens one epoch.
#[derive(Debug, Default)]
struct Counters {
    values: HashMap<ResourceName, FencingToken>,
    openings: HashMap<ResourceName, String>,
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
    pub fn with_epochs(epochs: Arc<dyn EpochSource>) -> Self {
        MemoryTokenSource {
            counters: Arc::default(),
            epochs: Some(epochs),
        }
    }

    /// Forgets every counter, as a Redis without persistence does when it restarts.
    pub fn forget_all(&self) {
        lock(&self.counters).values.clear();
    }

    /// Issues the next token, or the opening of the loss to open an epoch for first
    /// ([`Self::open_epoch`]).
    pub(crate) fn try_issue(
        &self,
        resource: &ResourceName,
    ) -> Result<std::result::Result<FencingToken, String>> {
        let mut counters = lock(&self.counters);
        let current = counters.values.get(resource).copied();
        if self.epochs.is_some() && epoch::must_open_epoch(current) {
            return Ok(Err(counters.opening(resource)));
        }
        let next = match current {
            None => FencingToken::MIN,
            Some(current) => current.next().ok_or_else(|| Error::TokenExhausted {
                resource: resource.clone(),
            })?,
        };
        counters.values.insert(resource.clone(), next);
        Ok(Ok(next))
    }

    /// Raises the counter to the start of the epoch of the loss `opening`, if it is still
    /// lost under that opening.
    pub(crate) async fn open_epoch(&self, resource: &ResourceName, opening: &str) -> Result<()> {
        if let Some(epochs) = &self.epochs {
            let start = epoch::open_epoch(&**epochs, resource, opening, None).await?;
            self.raise(resource, start, Some(opening));
        }
        Ok(())
    }

    /// Raises the counter to `floor` (never lowers it); with `opening`, only while the counter
    /// is still lost under it, and then it is re-established.
    fn raise(&self, resource: &ResourceName, floor: FencingToken, opening: Option<&str>) {
        let mut counters = lock(&self.counters);
        if let Some(opening) = opening {
            if counters.openings.get(resource).map(String::as_str) != Some(opening) {
                return;
            }
            counters.openings.remove(resource);
        }
        let counter = counters.values.entry(resource.clone()).or_insert(floor);
        *counter = (*counter).max(floor);
    }
}

impl Counters {
    /// The opening of the loss of `resource`'s counter: the one named first, until the
    /// counter is re-established.
    fn opening(&mut self, resource: &ResourceName) -> String {
        self.openings
            .entry(resource.clone())
            .or_insert_with(|| OwnerId::random().as_str().to_owned())
            .clone()
    }
}

#[async_trait]
impl TokenSource for MemoryTokenSource {
    async fn next(&self, resource: &ResourceName) -> Result<FencingToken> {
        loop {
            match self.try_issue(resource)? {
                Ok(token) => return Ok(token),
                Err(opening) => self.open_epoch(resource, &opening).await?,
            }
        }
    }

    async fn current(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        Ok(lock(&self.counters).values.get(resource).copied())
    }

    async fn advance_to(
        &self,
        resource: &ResourceName,
        floor: FencingToken,
    ) -> Result<FencingToken> {
        loop {
            let lost_under = {
                let mut counters = lock(&self.counters);
                let missing = !counters.values.contains_key(resource);
                (missing && self.epochs.is_some()).then(|| counters.opening(resource))
            };
            let epochs = self.epochs.as_deref();
            let target =
                epoch::advance_target(epochs, resource, floor, lost_under.as_deref()).await?;
            self.raise(resource, target, lost_under.as_deref());
            // Re-established by another caller in between, and maybe lost again: a lost counter
            // takes nothing but its epoch.
            let mut counters = lock(&self.counters);
            if epochs.is_none() || counters.values.contains_key(resource) {
                let counter = counters.values.entry(resource.clone()).or_insert(floor);
                *counter = (*counter).max(floor);
                return Ok(*counter);
            }
        }
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
        let with_epochs =
            MemoryTokenSource::with_epochs(Arc::new(crate::memory::MemoryEpochSource::new()));
        assert!(format!("{with_epochs:?}").contains("epochs: true"));
    }
}
