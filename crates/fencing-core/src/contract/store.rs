//! Fenced stores: records that carry a fence and check it on every write.

use std::collections::HashSet;
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use futures_util::future::join_all;

use crate::value::error::{Error, Result};
use crate::value::input::{InputKind, InvalidInput};
use crate::value::name::{RecordKey, State};
use crate::value::token::FencingToken;

/// One fenced record: a key, the fence of the last claim, a state and an opaque payload.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Record {
    /// The record's key.
    pub key: RecordKey,
    /// The token of the last accepted claim; `None` before the first.
    pub fence: Option<FencingToken>,
    /// The record's state, e.g. `pending`; `None` when it has none.
    pub state: Option<State>,
    /// Application data carried with the record.
    pub payload: Vec<u8>,
}

/// The two kinds of fenced write. There are no others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceCheck {
    /// Claim or take over: accepted iff the record has no fence or `fence <= token`, and sets
    /// `fence = token`. `<=` makes the holder's own retry of an ambiguous claim idempotent.
    Claim,
    /// Holder-only (e.g. confirm): accepted iff `fence == token`; the fence is left as is.
    HolderOnly,
}

/// A fenced write: its kind, the states it may start from, and what it changes.
///
/// ```
/// use fencing_core::{FencedWrite, State};
/// # fn main() -> Result<(), fencing_core::InvalidInput> {
/// let claim = FencedWrite::claim()
///     .when_state_in([State::new("pending")?, State::new("sending")?])
///     .set_state(State::new("sending")?);
/// let confirm = FencedWrite::holder_only()
///     .when_state_in([State::new("sending")?])
///     .set_state(State::new("sent")?);
/// # let _ = (claim, confirm);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FencedWrite {
    // Read by the rules (`rules.rs`), which decide and apply writes.
    pub(crate) check: FenceCheck,
    pub(crate) required_states: Option<Vec<State>>,
    pub(crate) new_state: Option<State>,
    pub(crate) new_payload: Option<Vec<u8>>,
    /// The state in which this write's work is already done, if it has one.
    done_state: Option<State>,
}

impl FencedWrite {
    /// A claim (see [`FenceCheck::Claim`]). Without a state condition it also creates a
    /// missing record, with the token as its first fence.
    ///
    /// A read-modify-write must claim *before* it reads: the claim returns the record
    /// ([`Written::record`]) and raises the fence at once, so a paused older holder's write is
    /// refused. A plain read registers nothing, and an older holder could still write between
    /// the read and this holder's first write.
    pub fn claim() -> Self {
        Self::of_kind(FenceCheck::Claim)
    }

    /// A holder-only write (see [`FenceCheck::HolderOnly`]).
    pub fn holder_only() -> Self {
        Self::of_kind(FenceCheck::HolderOnly)
    }

    fn of_kind(check: FenceCheck) -> Self {
        FencedWrite {
            check,
            required_states: None,
            new_state: None,
            new_payload: None,
            done_state: None,
        }
    }

    /// Requires the record to exist and be in one of `states`.
    pub fn when_state_in(mut self, states: impl IntoIterator<Item = State>) -> Self {
        self.required_states = Some(states.into_iter().collect());
        self
    }

    /// Sets the record's state.
    pub fn set_state(mut self, state: State) -> Self {
        self.new_state = Some(state);
        self
    }

    /// Replaces the record's payload.
    pub fn set_payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.new_payload = Some(payload.into());
        self
    }

    /// Names the state in which this write's work is already done (a lifecycle's done state:
    /// [`crate::Lifecycle::claim`] sets it). A record found there is still refused as
    /// [`Error::StateMismatch`], but that refusal means "already done", not "unexpected":
    /// a batch neither aborts nor skips on it, and a grouped write
    /// (`PgStore::write_together`) reports the record as already done, apart from its
    /// refusals, as [`crate::Holder::run_effect`] reports [`crate::EffectOutcome::AlreadyDone`].
    pub fn already_done_in(mut self, state: State) -> Self {
        self.done_state = Some(state);
        self
    }

    /// The state in which this write's work is already done, if it names one
    /// ([`Self::already_done_in`]).
    pub fn done_state(&self) -> Option<&State> {
        self.done_state.as_ref()
    }

    /// Whether `refusal` found the record in [`Self::done_state`]: the write's work is already
    /// done, not refused for an unexpected state.
    pub fn finds_done(&self, refusal: &Error) -> bool {
        self.done_state
            .as_ref()
            .is_some_and(|done| refusal.found_state() == Some(done))
    }

    /// The kind of fence check.
    pub fn check(&self) -> FenceCheck {
        self.check
    }

    /// The states the record must be in, `None` for any (including absent, for a claim).
    pub fn required_states(&self) -> Option<&[State]> {
        self.required_states.as_deref()
    }

    /// The state the write sets, if any.
    pub fn new_state(&self) -> Option<&State> {
        self.new_state.as_ref()
    }

    /// The payload the write sets, if any.
    pub fn new_payload(&self) -> Option<&[u8]> {
        self.new_payload.as_deref()
    }
}

/// An accepted write: what the record held before, and the record as the write left it.
///
/// When a retry after an ambiguous attempt finds that attempt applied
/// ([`FencedWrite::is_reflected_in`]), what the record held before the first attempt is no
/// longer known: `previous_fence` and `previous_state` then describe the record as that
/// attempt left it, which makes [`crate::Holder::run_effect`] look an effect up before
/// performing it — the safe side.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Written {
    /// The record did not exist and the claim created it.
    pub created: bool,
    /// The fence before the write.
    pub previous_fence: Option<FencingToken>,
    /// The state before the write.
    pub previous_state: Option<State>,
    /// The record after the write.
    pub record: Record,
}

impl Written {
    /// A write that found `previous` (`None`: it created the record) and left `record`.
    pub fn new(previous: Option<&Record>, record: Record) -> Self {
        Written {
            created: previous.is_none(),
            previous_fence: previous.and_then(|r| r.fence),
            previous_state: previous.and_then(|r| r.state.clone()),
            record,
        }
    }

    /// A write to an existing record that found this fence and state and left `record`.
    pub fn over(
        previous_fence: Option<FencingToken>,
        previous_state: Option<State>,
        record: Record,
    ) -> Self {
        Written {
            created: false,
            previous_fence,
            previous_state,
            record,
        }
    }
}

/// A store of fenced records: every write carries a token and the store checks it.
///
/// A job writes through a [`crate::Holder`] (`holder.write(&store, key, write)`), which
/// presents its token and applies the holder's rules (ambiguous outcomes sent again, a refusal
/// explained, a batch's notes); the writes under a bare token the store applies are its
/// [`StoreWrites`], the adapter's side of the contract, out of a job's reach unless it brings
/// in `fencing_core::adapter::StoreWrites`.
///
/// # Contract
///
/// * **Claim** ([`FenceCheck::Claim`]) is accepted iff the record has no fence or
///   `fence <= token`, and leaves `fence = token`. Presenting the same token again is accepted
///   (an ambiguous write can be retried); a lower one is refused.
/// * **Holder-only** ([`FenceCheck::HolderOnly`]) is accepted iff `fence == token` and leaves
///   the fence unchanged.
/// * A state condition ([`FencedWrite::when_state_in`]) is checked in the same atomic step as
///   the fence; a record outside those states is refused with [`Error::StateMismatch`].
/// * A missing record is created only by a claim without a state condition; every other write
///   to it is refused with [`Error::NotFound`].
/// * A refused write changes nothing and returns a rejection ([`Error::is_rejection`]) naming
///   the store, the record and the presented token, and the fence found where the store can
///   report it. The fence is checked before the state, so a stale writer is told it is stale.
/// * Concurrent writes to one record are serialised: of two claims with different tokens
///   racing on one record, the result is as if they ran one after the other.
/// * An accepted write returns [`Written`]: what the record held before.
/// * [`StoreWrites::write_many`] applies one write to many records: each record's outcome is
///   what a single [`StoreWrites::write`] of it would have been, in the order the keys were
///   given.
#[async_trait]
pub trait FencedStore: StoreWrites {
    /// The store's name in errors and batches, e.g. `postgres:public.refund`.
    fn name(&self) -> &str;

    /// Which store this is, for a [`FencedBatch`](crate::FencedBatch) to tell the stores it
    /// was built with from another of the same name: equal for clones of one store (they
    /// reach the same records through the same client), different for two stores made apart.
    ///
    /// The default is this value's address: it tells every two stores apart, and every two
    /// clones too. A store whose clones share their state (a pool, a table, a map behind an
    /// `Arc`) makes a [`StoreIdentity::new`] when it is built and returns it from every clone.
    fn identity(&self) -> StoreIdentity {
        StoreIdentity::at(self)
    }

    /// Reads one record.
    async fn read(&self, key: &RecordKey) -> Result<Option<Record>>;
}

/// The writes a [`FencedStore`] applies under a bare token, by its `# Contract`: what an
/// adapter implements and a [`crate::Holder`] sends. A job does not call them: a token
/// presented here is seen by no regression check, no retry rule and no batch.
#[async_trait]
pub trait StoreWrites: Send + Sync + Debug {
    /// Applies one fenced write.
    async fn write(
        &self,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Written>;

    /// Applies `write` to each of `keys` under `token`, in one request where the store can,
    /// and returns each record's outcome in the order given: exactly what [`Self::write`] of
    /// that record alone would have returned (applied, or refused with the fence or state it
    /// met; a refused record is unchanged). The records are not written all or nothing: a
    /// record refused by its fence does not stop the others.
    ///
    /// `Err` is the request failing as a whole: [`Error::InvalidInput`] for keys that are not
    /// distinct (nothing sent), or the error a single write would have for a store that could
    /// not be reached or lost the answer ([`Error::Ambiguous`]: any of the records may have
    /// been written; sending the same write again under the same token is safe).
    ///
    /// The default sends the single writes concurrently.
    async fn write_many(
        &self,
        keys: &[RecordKey],
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Vec<Result<Written>>> {
        check_distinct(keys)?;
        Ok(join_all(keys.iter().map(|key| self.write(key, token, write))).await)
    }
}

/// Where a SQL adapter's request takes its connection (`C`, the driver's connection type): a
/// checkout of the store's own pool, or the caller's connection or transaction (its `…_in`
/// forms).
#[derive(Debug)]
pub enum Via<'a, C> {
    /// A connection of the store's own pool.
    Pool,
    /// The caller's connection or transaction.
    Caller(&'a mut C),
}

impl<C> Via<'_, C> {
    /// The same connection, for one request before the next.
    pub fn reborrow(&mut self) -> Via<'_, C> {
        match self {
            Via::Pool => Via::Pool,
            Via::Caller(conn) => Via::Caller(conn),
        }
    }
}

/// Which store a [`FencedStore`] is ([`FencedStore::identity`]): a batch admits a write only
/// to a store whose identity and name are those of one it was built with.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StoreIdentity(Identity);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Identity {
    Made(u64),
    At(usize),
}

impl StoreIdentity {
    /// An identity equal to no other made in this process: a store makes one when it is
    /// built, and its clones keep it.
    pub fn new() -> Self {
        static MADE: AtomicU64 = AtomicU64::new(0);
        StoreIdentity(Identity::Made(MADE.fetch_add(1, Ordering::Relaxed)))
    }

    /// The identity of the value at `store`'s address, while it lives there.
    pub fn at<S: ?Sized>(store: &S) -> Self {
        StoreIdentity(Identity::At(std::ptr::from_ref(store).cast::<()>() as usize))
    }
}

impl Default for StoreIdentity {
    /// [`StoreIdentity::new`].
    fn default() -> Self {
        Self::new()
    }
}

/// Refuses a key given twice to one [`StoreWrites::write_many`].
pub fn check_distinct(keys: &[RecordKey]) -> Result<(), InvalidInput> {
    let mut seen = HashSet::with_capacity(keys.len());
    match keys.iter().find(|key| !seen.insert(*key)) {
        Some(twice) => Err(InvalidInput::new(
            InputKind::RecordKey,
            format!("{twice:?} appears twice in one write of many records"),
        )),
        None => Ok(()),
    }
}

/// What an accepted fenced write says about each record it was sent for, for the events and
/// metrics of [`crate::adapter::HolderExt::run_write`]: the records the store refused while it applied the
/// others (a write of many rows that skips the ones in another state). Empty for a write of
/// one record, or of several applied all or nothing.
pub trait RecordOutcomes {
    /// The refusals among the records, each naming its record ([`Error::rejected_at`]).
    fn refusals(&self) -> Vec<&Error> {
        Vec::new()
    }
}

impl RecordOutcomes for () {}

impl RecordOutcomes for Written {}

impl RecordOutcomes for Record {}

impl RecordOutcomes for Vec<Written> {}

macro_rules! forward_store {
    ($($target:ty),*) => {$(
        #[async_trait]
        impl<S: FencedStore + ?Sized> FencedStore for $target {
            fn name(&self) -> &str {
                (**self).name()
            }
            fn identity(&self) -> StoreIdentity {
                (**self).identity()
            }
            async fn read(&self, key: &RecordKey) -> Result<Option<Record>> {
                (**self).read(key).await
            }
        }

        #[async_trait]
        impl<S: StoreWrites + ?Sized> StoreWrites for $target {
            async fn write(
                &self,
                key: &RecordKey,
                token: FencingToken,
                write: &FencedWrite,
            ) -> Result<Written> {
                (**self).write(key, token, write).await
            }
            async fn write_many(
                &self,
                keys: &[RecordKey],
                token: FencingToken,
                write: &FencedWrite,
            ) -> Result<Vec<Result<Written>>> {
                (**self).write_many(keys, token, write).await
            }
        }
    )*};
}
forward_store!(Arc<S>, Box<S>, &S);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_reports_what_it_was_built_with() {
        let pending = State::new("pending").unwrap();
        let bare = FencedWrite::claim();
        assert_eq!(bare.required_states(), None);
        assert_eq!(bare.new_payload(), None);
        let built = FencedWrite::holder_only()
            .when_state_in([pending.clone()])
            .set_payload(b"70.25".to_vec());
        assert_eq!(built.required_states(), Some(&[pending][..]));
        assert_eq!(built.new_payload(), Some(&b"70.25"[..]));
        assert_eq!(built.check(), FenceCheck::HolderOnly);
    }
}
