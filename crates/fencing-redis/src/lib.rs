//! Redis for `fencing`: a lease whose acquisition and fencing token take one round trip, and a
//! token source with a floor, seeding and regression detection.
//!
//! * [`RedisLease`] runs `SET lock:{r} <owner> NX PX <ttl>` and `INCR fence:{r}` in one script,
//!   sent by its SHA1 (with the source only when the server's script cache is empty). Extend
//!   and release compare the owner inside a script.
//! * [`RedisTokenSource`] is the counter behind it. By default its tokens are epoch-prefixed:
//!   when Redis loses the counter, the next token opens a new epoch taken from a durable
//!   token source, so no token is ever issued twice (one durable write per loss of state).
//!   [`RedisTokenSource::may_reissue_tokens`] opts out, and says what it gives up.
//! * [`RedisKeys`] lays the two keys of a resource under one hash tag, so everything works on
//!   Redis Cluster; resource names with braces are refused.
//!
//! Both work over a multiplexed connection, a `ConnectionManager` (which reconnects), an
//! async cluster connection (which follows the cluster's failovers), or, with the feature
//! `sentinel`, a [`RedisSentinelConnection`] (which follows Sentinel's).
//!
//! A lease alone is not safe, however it is renewed: a paused process cannot renew, and when
//! it resumes it does not know time passed. Present the guard's token on every protected
//! write; the store's fence is what refuses the paused holder.

mod client;
mod error;
mod keys;
mod lease;
mod scripts;
#[cfg(feature = "sentinel")]
mod sentinel;
mod tokens;

pub use keys::RedisKeys;
pub use lease::RedisLease;
#[cfg(feature = "sentinel")]
pub use sentinel::RedisSentinelConnection;
pub use tokens::RedisTokenSource;

/// The name [`RedisSentinelConnection`] had before every type of an adapter carried its
/// prefix.
#[cfg(feature = "sentinel")]
#[deprecated(since = "0.2.0", note = "renamed `RedisSentinelConnection`")]
pub type SentinelConnection = RedisSentinelConnection;
