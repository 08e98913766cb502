//! Token sources: per-resource counters that issue fencing tokens, and how to keep them from
//! going backwards.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::Result;
use crate::name::ResourceName;
use crate::token::FencingToken;

/// A per-resource counter that issues fencing tokens.
///
/// # Contract
///
/// * `next` returns a token strictly greater than every token it returned before for the same
///   resource, and greater than any floor set by `advance_to`; it never returns one twice.
/// * `current` returns the highest token issued (or floor set) for the resource, `None` when
///   there is none. It is what a rejected claim is compared with to detect regression.
/// * `advance_to(floor)` raises the counter to at least `floor`, atomically, and returns the
///   resulting current value; it never lowers it.
/// * When the counter would pass `i64::MAX`, `next` fails with
///   [`crate::Error::TokenExhausted`] and changes nothing.
///
/// A source that can lose state (Redis without persistence) may break the first rule after a
/// restart. [`crate::Fence`] reports that as [`crate::Error::TokenRegression`] when a store
/// refuses a claim, and [`seed_from_floors`] repairs it.
#[async_trait]
pub trait TokenSource: Send + Sync + Debug {
    /// Issues the next token for `resource`.
    async fn next(&self, resource: &ResourceName) -> Result<FencingToken>;

    /// The highest token issued for `resource`, if any.
    async fn current(&self, resource: &ResourceName) -> Result<Option<FencingToken>>;

    /// Raises the counter for `resource` to at least `floor`; returns the resulting value.
    async fn advance_to(
        &self,
        resource: &ResourceName,
        floor: FencingToken,
    ) -> Result<FencingToken>;
}

macro_rules! forward_token_source {
    ($($wrapper:ident),*) => {$(
        #[async_trait]
        impl<S: TokenSource + ?Sized> TokenSource for $wrapper<S> {
            async fn next(&self, resource: &ResourceName) -> Result<FencingToken> {
                (**self).next(resource).await
            }
            async fn current(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
                (**self).current(resource).await
            }
            async fn advance_to(
                &self,
                resource: &ResourceName,
                floor: FencingToken,
            ) -> Result<FencingToken> {
                (**self).advance_to(resource, floor).await
            }
        }
    )*};
}
forward_token_source!(Arc, Box);

/// Reports the highest fence a protected store holds for a resource: `MAX(fence)` over the
/// records that resource's lease protects (or over more, which is merely conservative). A
/// token source seeded above it cannot go backwards.
#[async_trait]
pub trait FenceFloor: Send + Sync + Debug {
    /// The highest fence stored for `resource`, `None` when no record carries one.
    async fn max_fence(&self, resource: &ResourceName) -> Result<Option<FencingToken>>;
}

/// Raises `source`'s counter for `resource` to the highest fence any of `floors` reports.
///
/// Run it at start-up, or after [`crate::Error::TokenRegression`]: the next token is then
/// above every fence stored. Returns the highest floor found, `None` when no store had a fence.
pub async fn seed_from_floors(
    source: &dyn TokenSource,
    resource: &ResourceName,
    floors: &[&dyn FenceFloor],
) -> Result<Option<FencingToken>> {
    let mut highest = None;
    for floor in floors {
        highest = highest.max(floor.max_fence(resource).await?);
    }
    if let Some(floor) = highest {
        source.advance_to(resource, floor).await?;
    }
    Ok(highest)
}

/// Where a counter stands against the server it is read on, for an operator: the server
/// history the counter is bound to (the one that last established it) and the history of the
/// server answering now. Sources that bind their counters (Redis with epochs, PostgreSQL)
/// report it; a counter on another history is raised past anything that history could have
/// issued before its next token, so it needs no repair by hand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterHistory {
    /// The history the counter is bound to; `None` for a counter not bound yet (missing, or
    /// written by a version that did not bind).
    pub bound: Option<String>,
    /// The history of the server answering.
    pub serving: String,
}

impl CounterHistory {
    /// True when the counter is bound to another history than the one serving it: its next
    /// token will be raised first.
    pub fn moved(&self) -> bool {
        self.bound
            .as_ref()
            .is_some_and(|bound| *bound != self.serving)
    }
}
