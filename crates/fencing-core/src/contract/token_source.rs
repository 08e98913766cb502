//! Token sources: per-resource counters that issue fencing tokens, and how to keep them from
//! going backwards.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;

use crate::value::error::Result;
use crate::value::input::{InputKind, InvalidInput};
use crate::value::name::ResourceName;
use crate::value::token::FencingToken;

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
/// restart. [`crate::Holder`] reports that as [`crate::Error::TokenRegression`] when a store
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

    /// [`Self::current`] if it can be asked without waiting for something the caller may be
    /// holding, `None` if not. A refusal of a write in the caller's own transaction is
    /// explained through this: a source on the pool that transaction took its connection from
    /// must not wait for that very connection. The default asks [`Self::current`], right for
    /// a source that shares nothing with its callers' transactions.
    async fn current_at_once(
        &self,
        resource: &ResourceName,
    ) -> Option<Result<Option<FencingToken>>> {
        Some(self.current(resource).await)
    }
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
            async fn current_at_once(
                &self,
                resource: &ResourceName,
            ) -> Option<Result<Option<FencingToken>>> {
                (**self).current_at_once(resource).await
            }
        }
    )*};
}
forward_token_source!(Arc, Box);

/// A durable counter of epochs, behind a fast counter that can lose its state (the default
/// Redis lease's): a token is `epoch · 2^32 + n` ([`crate::adapter::epoch`]), and an epoch is
/// opened each time the fast counter is found lost (missing, bound to another server history,
/// or its epoch used up). A lease asks for this type, not for any [`TokenSource`]: an epoch
/// counter must be opened once per loss and at a rate its own failovers can bound, which a
/// counter of tokens is not.
///
/// # Contract
///
/// * `open(resource, opening)` returns an epoch above every epoch it returned before for
///   `resource`, unless `opening` is the opening the last epoch was opened for: then that same
///   epoch. Every client that finds one loss names it with the same `opening` (the fast
///   counter hands them one), so a loss opens one epoch however many clients find it at once.
/// * A source that can itself be failed over or restored opens at most one new epoch per
///   second for a resource (`open` waits out the rest of the second), which is the rate its
///   counters are raised by on another history ([`RateBound::EPOCHS`]); it hands out an
///   epoch raised onto a new history (a row found on another, or a missing row started from
///   a binding raised onto this one) only a second after that raise, so a history after it
///   raises the same row higher ([`crate::adapter::history::epoch_step`]). A failover or
///   restore of it never hands out an epoch twice, for a resource whose row it kept as for one
///   it lost, however quickly failovers follow each other.
/// * `advance_to(floor)` raises the epoch of `resource` to at least `floor` and returns it;
///   it never lowers it. `current` returns the highest epoch opened or floor set.
/// * Past the largest epoch, `open` fails with [`crate::Error::TokenExhausted`].
#[async_trait]
pub trait EpochSource: Send + Sync + Debug {
    /// The epoch for the loss named `opening` of `resource`'s fast counter.
    async fn open(&self, resource: &ResourceName, opening: &str) -> Result<FencingToken>;

    /// The highest epoch opened (or floor set) for `resource`, if any.
    async fn current(&self, resource: &ResourceName) -> Result<Option<FencingToken>>;

    /// Raises the epoch of `resource` to at least `floor`; returns the resulting epoch.
    async fn advance_to(
        &self,
        resource: &ResourceName,
        floor: FencingToken,
    ) -> Result<FencingToken>;
}

macro_rules! forward_epoch_source {
    ($($wrapper:ident),*) => {$(
        #[async_trait]
        impl<S: EpochSource + ?Sized> EpochSource for $wrapper<S> {
            async fn open(&self, resource: &ResourceName, opening: &str) -> Result<FencingToken> {
                (**self).open(resource, opening).await
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
forward_epoch_source!(Arc, Box);

/// Reports the highest fence a protected store holds for a resource: `MAX(fence)` over the
/// records that resource's lease protects (or over more, which is merely conservative). A
/// token source seeded above it cannot go backwards.
#[async_trait]
pub trait FenceFloor: Send + Sync + Debug {
    /// The highest fence stored for `resource`, `None` when no record carries one.
    async fn max_fence(&self, resource: &ResourceName) -> Result<Option<FencingToken>>;
}

/// Which rows a SQL [`FenceFloor`] reads `MAX(fence)` over when a table holds the records of
/// many resources: those whose column holds one value, fixed or derived from the resource's
/// name (e.g. the merchant id of `settle:m_4471`).
#[derive(Clone)]
pub enum FloorFilter {
    /// Rows whose column holds this value, whatever the resource.
    Fixed(String),
    /// Rows whose column holds the value this derives from the resource.
    PerResource(Arc<dyn Fn(&ResourceName) -> String + Send + Sync>),
}

impl FloorFilter {
    /// The value the column must hold for `resource`'s rows.
    pub fn value_for(&self, resource: &ResourceName) -> String {
        match self {
            FloorFilter::Fixed(value) => value.clone(),
            FloorFilter::PerResource(value_of) => value_of(resource),
        }
    }
}

impl Debug for FloorFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FloorFilter::Fixed(value) => f.debug_tuple("Fixed").field(value).finish(),
            FloorFilter::PerResource(_) => f.write_str("PerResource(..)"),
        }
    }
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

/// The most tokens a counter is taken to issue per second for one resource: what a source
/// that binds its counters to a server history raises a counter found on another history by,
/// for the time since the counter was last written (plus one second for clocks a little
/// apart), so that the next token passes every token the lost history could have issued after
/// that write.
///
/// The time is counted to the millisecond, so two histories that each find the same lost
/// counter (a replica promoted, lost, then an older backup restored) raise it to different
/// values whenever they do so a millisecond or more apart at a bound of 1,000 a second or
/// more: the later one passes the earlier one's raise and everything issued since, at most
/// the bound a second. (At a bound below 1,000 a second, as for epochs, two such raises
/// within the same `1000 / bound` milliseconds give the same value: an epoch source holds a
/// raised epoch for a second before it hands it out,
/// [`crate::adapter::history::epoch_step`].)
///
/// It rests on the clocks of the servers (or writers) that stamp the counter agreeing to within
/// the seconds a failover or restore takes, and on no counter outrunning the bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RateBound(u64);

impl RateBound {
    /// 2^20 tokens a second: far above what one resource's counter can be raised by (each
    /// raise is a write that serialises on the counter).
    pub const DEFAULT: RateBound = RateBound(1 << 20);

    /// One a second: for counters of epochs, each opened at most once a second
    /// ([`EpochSource`]).
    pub const EPOCHS: RateBound = RateBound(1);

    /// The bound of `per_second` tokens a second (1 ..= 2^32).
    pub fn new(per_second: u64) -> std::result::Result<Self, InvalidInput> {
        if !(1..=1 << 32).contains(&per_second) {
            return Err(InvalidInput::new(
                InputKind::Token,
                format!("a counter's rate bound of {per_second} a second is not in 1 ..= 2^32"),
            ));
        }
        Ok(RateBound(per_second))
    }

    /// Tokens a second.
    pub const fn per_second(self) -> u64 {
        self.0
    }

    /// Where a counter at `counter`, last written at `written_ms` and found on another history
    /// at `now_ms` (milliseconds since the Unix epoch), goes on from: raised by the bound for
    /// the time since, to the millisecond, and one second more, rounded up to a whole token.
    /// `None` past `i64::MAX`.
    pub fn raise(
        self,
        counter: FencingToken,
        written_ms: u64,
        now_ms: u64,
    ) -> Option<FencingToken> {
        let millis = u128::from(now_ms.saturating_sub(written_ms)) + 1000;
        let raised = u128::from(counter.get()) + (u128::from(self.0) * millis).div_ceil(1000);
        u64::try_from(raised)
            .ok()
            .and_then(|raised| FencingToken::new(raised).ok())
    }
}

impl Default for RateBound {
    fn default() -> Self {
        RateBound::DEFAULT
    }
}

#[cfg(test)]
mod rate_bound_tests {
    use super::*;

    fn token(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap()
    }

    #[test]
    fn a_counter_on_another_history_is_raised_by_the_bound_for_the_time_since_and_one_second_more()
    {
        let bound = RateBound::new(10).unwrap();
        assert_eq!(bound.raise(token(5), 1_000, 1_000), Some(token(15)));
        // 1.001 s at 10 a second: 10.01, a whole token more.
        assert_eq!(bound.raise(token(5), 1_000, 1_001), Some(token(16)));
        assert_eq!(bound.raise(token(5), 1_000, 1_350), Some(token(19)));
        assert_eq!(bound.raise(token(5), 1_000, 3_000), Some(token(35)));
        // A writer's clock ahead of this one's: still one second.
        assert_eq!(bound.raise(token(5), 9_000, 1_000), Some(token(15)));
        assert_eq!(RateBound::EPOCHS.raise(token(7), 0, 2_500), Some(token(11)));
        assert_eq!(RateBound::default(), RateBound::DEFAULT);
    }

    #[test]
    fn two_histories_raising_one_lost_counter_a_millisecond_apart_raise_it_apart() {
        // A counter at 2 written at 0 ms; one history raises it at 600 ms and issues as fast
        // as the bound allows; another raises it from the same row at 601 ms: above all that.
        let bound = RateBound::DEFAULT;
        let first = bound.raise(token(2), 0, 600).unwrap();
        let second = bound.raise(token(2), 0, 601).unwrap();
        let issued_in_a_millisecond = bound.per_second() / 1000;
        assert!(
            second.get() >= first.get() + issued_in_a_millisecond,
            "{first} then {second}"
        );
    }

    #[test]
    fn a_raise_past_the_largest_token_is_none_and_bounds_outside_the_range_are_refused() {
        let top = FencingToken::new(i64::MAX as u64 - 3).unwrap();
        assert_eq!(
            RateBound::EPOCHS.raise(top, 0, 0),
            Some(token(i64::MAX as u64 - 2))
        );
        assert_eq!(RateBound::DEFAULT.raise(top, 0, 0), None);
        assert_eq!(
            RateBound::new(1 << 32)
                .unwrap()
                .raise(token(1), 0, u64::MAX),
            None
        );
        for bad in [0, (1 << 32) + 1, u64::MAX] {
            let err = RateBound::new(bad).unwrap_err();
            assert_eq!(err.kind(), InputKind::Token);
            assert!(err.detail().contains("rate bound"), "{err}");
        }
    }
}
