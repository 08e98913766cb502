//! The highest fence under a prefix: the floor a token source must stay above.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use fencing_core::adapter::RequestEffect;
use fencing_core::{FenceFloor, FencedStore, FencingToken, RecordKey, ResourceName, Result};

use crate::error::{S3Failure, request_failed};
use crate::store::S3Store;

/// The key prefix (below the store's own) of the records one resource's lease protects.
type PrefixOf = Arc<dyn Fn(&ResourceName) -> String + Send + Sync>;

/// Reports the highest fence among a store's objects (the fences deleted records' tombstones
/// keep included), or among those under a further prefix derived from the resource (e.g.
/// `m_4471/` for `settle:m_4471`).
///
/// **Cost**: one `ListObjectsV2` per 1,000 objects under the prefix, and one `GetObject` per
/// object (the fence is in the body). Run it when seeding a token source after a loss of
/// state, not on a hot path.
#[derive(Clone)]
pub struct S3FenceFloor {
    store: Arc<S3Store>,
    prefix_of: Option<PrefixOf>,
}

impl fmt::Debug for S3FenceFloor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3FenceFloor")
            .field("store", &self.store)
            .field("per_resource", &self.prefix_of.is_some())
            .finish()
    }
}

impl S3FenceFloor {
    /// The highest fence among every record of `store`.
    pub fn new(store: Arc<S3Store>) -> Self {
        S3FenceFloor {
            store,
            prefix_of: None,
        }
    }

    /// The highest fence among the records whose key begins with `prefix_of(resource)`.
    pub fn per_resource(
        store: Arc<S3Store>,
        prefix_of: impl Fn(&ResourceName) -> String + Send + Sync + 'static,
    ) -> Self {
        S3FenceFloor {
            store,
            prefix_of: Some(Arc::new(prefix_of)),
        }
    }
}

#[async_trait]
impl FenceFloor for S3FenceFloor {
    async fn max_fence(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        let bucket = self.store.bucket();
        let name = self.store.name().to_owned();
        let below = self
            .prefix_of
            .as_ref()
            .map_or_else(String::new, |p| p(resource));
        let prefix = format!("{}{below}", bucket.prefix());
        let mut highest = None;
        let mut pages = self
            .store
            .client()
            .list_objects_v2()
            .bucket(bucket.bucket())
            .prefix(&prefix)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| request_failed(&name, RequestEffect::ReadOnly, e))?;
            for object in page.contents() {
                let Some(text) = object.key().and_then(|k| k.strip_prefix(bucket.prefix())) else {
                    continue;
                };
                let key = RecordKey::new(text).map_err(|e| {
                    S3Failure::ForeignKey(text.to_owned(), e)
                        .into_error(&name, RequestEffect::ReadOnly)
                })?;
                highest = highest.max(self.store.fence_of(&key).await?);
            }
        }
        Ok(highest)
    }
}
