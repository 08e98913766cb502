use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::lock;
use crate::error::{Error, Result};
use crate::name::ResourceName;
use crate::token::FencingToken;
use crate::token_source::TokenSource;

/// Per-resource counters in memory. Clones share the same counters.
#[derive(Clone, Debug, Default)]
pub struct MemoryTokenSource {
    counters: Arc<Mutex<HashMap<ResourceName, FencingToken>>>,
}

impl MemoryTokenSource {
    /// A source with no counters: the first token of every resource is 1.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets every counter, as a Redis without persistence does when it restarts. The next
    /// token of every resource is 1 again, which stores already fenced higher will refuse.
    pub fn forget_all(&self) {
        lock(&self.counters).clear();
    }

    pub(crate) fn issue(&self, resource: &ResourceName) -> Result<FencingToken> {
        let mut counters = lock(&self.counters);
        let next = match counters.get(resource) {
            None => FencingToken::MIN,
            Some(current) => current.next().ok_or_else(|| Error::TokenExhausted {
                resource: resource.clone(),
            })?,
        };
        counters.insert(resource.clone(), next);
        Ok(next)
    }
}

#[async_trait]
impl TokenSource for MemoryTokenSource {
    async fn next(&self, resource: &ResourceName) -> Result<FencingToken> {
        self.issue(resource)
    }

    async fn current(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        Ok(lock(&self.counters).get(resource).copied())
    }

    async fn advance_to(
        &self,
        resource: &ResourceName,
        floor: FencingToken,
    ) -> Result<FencingToken> {
        let mut counters = lock(&self.counters);
        let counter = counters.entry(resource.clone()).or_insert(floor);
        *counter = (*counter).max(floor);
        Ok(*counter)
    }
}
