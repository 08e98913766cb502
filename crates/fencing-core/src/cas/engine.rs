//! Fenced writes for stores that can only swap on a version: object stores, which compare an
//! ETag or a generation, never a number.
//!
//! Such a store cannot check `fence <= token` itself. [`CasStore`] checks it in the client,
//! against what it has just read, and lets the store's compare-and-swap make the check stick:
//! read the record and its version → [`FencedWrite::decide`] → [`FencedWrite::apply`] → put if
//! the version is still the one read → on a conflict read and decide again, a bounded number
//! of rounds. An adapter only translates its read and its conditional put
//! ([`VersionedStore`]).

use std::collections::HashMap;
use std::fmt::{self, Debug};
use std::sync::Mutex;

use async_trait::async_trait;

use crate::contract::store::{FencedStore, FencedWrite, Record, Written};
use crate::value::error::{Error, RequestEffect, Result};
use crate::value::name::RecordKey;
use crate::value::random::random_u128;
use crate::value::token::FencingToken;

/// Identifies one write, so that a writer that lost the answer to its put recognises its own
/// write when it reads the record back (a byte-identical write of its own from before would
/// not be told apart by the record alone).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct WriteId(pub u128);

impl WriteId {
    /// A fresh random id.
    pub fn random() -> Self {
        WriteId(random_u128())
    }
}

impl Debug for WriteId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WriteId({:032x})", self.0)
    }
}

/// A record as a versioned store holds it: the record, the id of the write that left it, and
/// the store's version of it (an ETag, a generation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Versioned<V> {
    /// The record.
    pub record: Record,
    /// The write that stored it.
    pub write_id: WriteId,
    /// The store's version of it.
    pub version: V,
}

/// What a conditional put answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PutOutcome<V> {
    /// The record was stored; this is its new version.
    Applied(V),
    /// The version was no longer the one expected (or the record appeared, or vanished):
    /// nothing was stored. Read again.
    Conflict,
}

/// A store that can replace a record only if its version is unchanged, or create it only if
/// absent: the two calls [`CasStore`] needs.
///
/// # Contract
///
/// * `get` returns the record, the write id stored with it, and its current version.
/// * `put(key, record, write_id, Some(version))` stores the record only if the stored version
///   is `version`; `put(.., None)` only if there is no record. Otherwise it stores nothing and
///   answers [`PutOutcome::Conflict`]. `delete(key, current)` likewise, on `current.version`;
///   once deleted, `get` returns `None`.
/// * A failure whose answer may have been lost after the store applied the put is
///   [`Error::Ambiguous`]; every other failure stored nothing.
#[async_trait]
pub trait VersionedStore: Send + Sync + Debug {
    /// The store's version of a record.
    type Version: Clone + Send + Sync + Debug;

    /// The store's name in errors and batches.
    fn name(&self) -> &str;

    /// Reads a record with its version.
    async fn get(&self, key: &RecordKey) -> Result<Option<Versioned<Self::Version>>>;

    /// Stores `record` under `key` if its version is still `expected` (`None`: if absent).
    async fn put(
        &self,
        key: &RecordKey,
        record: &Record,
        write_id: WriteId,
        expected: Option<&Self::Version>,
    ) -> Result<PutOutcome<Self::Version>>;

    /// Deletes `key` if its version is still the version of `current`, the record as read
    /// (whose fence a store that keeps tombstones keeps).
    async fn delete(
        &self,
        key: &RecordKey,
        current: &Versioned<Self::Version>,
    ) -> Result<PutOutcome<()>>;
}

/// How many conflicting rounds a write goes before it gives up with [`Error::Backend`].
const DEFAULT_ROUNDS: usize = 8;

/// The most records whose last version a [`CasStore`] remembers.
const REMEMBERED: usize = 1024;

/// A [`FencedStore`] over any [`VersionedStore`]: the fence is checked in the client against
/// a fresh read, and the store's compare-and-swap makes sure nothing changed in between.
///
/// * A refusal ([`Error::Fenced`], [`Error::StateMismatch`], [`Error::NotFound`]) is only ever
///   reported from a record read from the store, never from a remembered one.
/// * A put whose answer was lost is settled by reading back: the record carries the write's
///   [`WriteId`], so the write is reported applied exactly when it was. So is a conflict, which
///   a client's resent put meets when its first attempt applied.
/// * After a write, the record and its new version are remembered, so the same holder's next
///   write to that record skips the read; a stale memory only costs a conflict and a read.
/// * After [`CasStore::with_rounds`] conflicting rounds (8 by default) it gives up with
///   [`Error::Backend`], never a guess.
pub struct CasStore<S: VersionedStore> {
    inner: S,
    rounds: usize,
    remembered: Mutex<HashMap<RecordKey, Versioned<S::Version>>>,
}

impl<S: VersionedStore> Debug for CasStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CasStore")
            .field("inner", &self.inner)
            .field("rounds", &self.rounds)
            .finish_non_exhaustive()
    }
}

impl<S: VersionedStore> CasStore<S> {
    /// Fenced writes over `inner`.
    pub fn new(inner: S) -> Self {
        CasStore {
            inner,
            rounds: DEFAULT_ROUNDS,
            remembered: Mutex::default(),
        }
    }

    /// The same, giving up after `rounds` conflicting rounds (at least 1).
    pub fn with_rounds(self, rounds: usize) -> Self {
        CasStore {
            rounds: rounds.max(1),
            ..self
        }
    }

    /// The versioned store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The underlying store, forgetting the versions remembered.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// Reads `key` with its version, from the store (and remembers it).
    pub async fn get(&self, key: &RecordKey) -> Result<Option<Versioned<S::Version>>> {
        let current = self.inner.get(key).await?;
        self.remember(key, current.clone());
        Ok(current)
    }

    /// What was last seen of `key`, if anything: the store's answer need not be read again.
    pub fn remembered(&self, key: &RecordKey) -> Option<Versioned<S::Version>> {
        self.memory().get(key).cloned()
    }

    /// Forgets what was seen of `key` (after a write to it outside this store).
    pub fn forget(&self, key: &RecordKey) {
        self.memory().remove(key);
    }

    /// Deletes `key` as its holder: only with the token of its fence (a holder-only write),
    /// on the record as the store holds it, under the same compare-and-swap rounds as a
    /// write. Returns the record deleted; a missing record is [`Error::NotFound`].
    pub async fn delete(&self, key: &RecordKey, token: FencingToken) -> Result<Record> {
        let name = self.inner.name();
        let holder_only = FencedWrite::holder_only();
        let mut current = self.get(key).await?;
        for _ in 0..self.rounds {
            let Some(found) = current else {
                return Err(Error::NotFound {
                    store: name.to_owned(),
                    record: key.clone(),
                });
            };
            holder_only.decide(name, key, token, Some(&found.record))?;
            match self.inner.delete(key, &found).await {
                Ok(PutOutcome::Applied(())) => {
                    self.forget(key);
                    return Ok(found.record);
                }
                Ok(PutOutcome::Conflict) => current = self.get(key).await?,
                // Gone after a lost answer: only a holder of this fence deletes through here.
                Err(err) if err.is_ambiguous() => match self.get(key).await? {
                    None => return Ok(found.record),
                    now => current = now,
                },
                Err(err) => return Err(err),
            }
        }
        self.forget(key);
        Err(self.gave_up(key))
    }

    fn remember(&self, key: &RecordKey, current: Option<Versioned<S::Version>>) {
        let mut memory = self.memory();
        match current {
            Some(current) => {
                if memory.len() >= REMEMBERED && !memory.contains_key(key) {
                    memory.clear();
                }
                memory.insert(key.clone(), current);
            }
            None => {
                memory.remove(key);
            }
        }
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, HashMap<RecordKey, Versioned<S::Version>>> {
        self.remembered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn gave_up(&self, key: &RecordKey) -> Error {
        Error::failed_request(
            self.inner.name(),
            RequestEffect::Writes,
            false,
            format!(
                "{key:?} changed under the write in each of {} rounds; nothing was written",
                self.rounds
            )
            .into(),
        )
    }
}

#[async_trait]
impl<S: VersionedStore> FencedStore for CasStore<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn read(&self, key: &RecordKey) -> Result<Option<Record>> {
        Ok(self.get(key).await?.map(|current| current.record))
    }

    async fn write(
        &self,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Written> {
        let write_id = WriteId::random();
        let name = self.inner.name();
        // What was seen of the record, and whether it was read for this write.
        let (mut current, mut fresh) = match self.remembered(key) {
            Some(seen) => (Some(seen), false),
            None => (self.get(key).await?, true),
        };
        for _ in 0..self.rounds {
            let found = current.as_ref().map(|c| &c.record);
            if let Err(refusal) = write.decide(name, key, token, found) {
                if fresh {
                    return Err(refusal);
                }
                // Decided on memory: refuse only on what the store holds now.
                (current, fresh) = (self.get(key).await?, true);
                continue;
            }
            let updated = write.apply(key, token, found);
            let expected = current.as_ref().map(|c| &c.version);
            match self.inner.put(key, &updated, write_id, expected).await {
                Ok(PutOutcome::Applied(version)) => {
                    let written = Written::new(found, updated.clone());
                    self.remember(
                        key,
                        Some(Versioned {
                            record: updated,
                            write_id,
                            version,
                        }),
                    );
                    return Ok(written);
                }
                Ok(PutOutcome::Conflict) => {}
                Err(err) if err.is_ambiguous() => {}
                Err(err) => {
                    self.forget(key);
                    return Err(err);
                }
            }
            // A conflict, or a lost answer: the write id in the record read back tells whether
            // this write applied. A conflict can be this write's own, too: a client that resent
            // a put whose answer it lost (as `object_store`'s retries do) has its condition
            // refused by its own first attempt.
            let previous = current.take();
            let now = self.get(key).await?;
            if let Some(own) = now.as_ref().filter(|n| n.write_id == write_id) {
                let previous = previous.as_ref().map(|p| &p.record);
                return Ok(Written::new(previous, own.record.clone()));
            }
            (current, fresh) = (now, true);
        }
        self.forget(key);
        Err(self.gave_up(key))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::memory::MemoryVersionedStore;
    use crate::value::error::FoundFence;
    use crate::value::name::State;

    #[test]
    fn a_write_id_and_a_store_show_what_they_hold() {
        assert_eq!(
            format!("{:?}", WriteId(0xab)),
            "WriteId(000000000000000000000000000000ab)"
        );
        let store = CasStore::new(MemoryVersionedStore::new("receipts"));
        let shown = format!("{store:?}");
        assert!(
            shown.starts_with("CasStore") && shown.contains("receipts") && shown.contains("rounds"),
            "{shown}"
        );
    }

    /// What happens to one put, in order.
    #[derive(Debug)]
    enum Step {
        /// Another writer stores this record (against the version it finds) just before the
        /// put: a conflict between this writer's read and its put.
        Interloper(Record),
        /// The put applies and its answer is lost.
        LoseAnswer,
        /// The put is lost before it reaches the store.
        LoseRequest,
        /// The put applies, its answer is lost, and the client's resent put is refused on its
        /// condition: the answer is a conflict.
        ApplyThenConflict,
        /// The request fails before it is sent (a connection refused): nothing changes.
        Fail,
    }

    #[derive(Debug)]
    struct Scripted {
        inner: MemoryVersionedStore,
        steps: Mutex<VecDeque<Step>>,
        puts: Mutex<u32>,
    }

    impl Scripted {
        fn new() -> Self {
            Scripted {
                inner: MemoryVersionedStore::new("objects"),
                steps: Mutex::default(),
                puts: Mutex::new(0),
            }
        }

        /// Plans what happens to the next put.
        fn then(&self, step: Step) {
            self.steps.lock().unwrap().push_back(step);
        }

        fn lost(&self) -> Error {
            Error::Ambiguous {
                store: "objects".into(),
                source: "injected fault".into(),
            }
        }

        fn refused(&self) -> Error {
            Error::Backend {
                store: "objects".into(),
                source: "connection refused".into(),
            }
        }
    }

    #[async_trait]
    impl VersionedStore for Scripted {
        type Version = u64;

        fn name(&self) -> &str {
            self.inner.name()
        }

        async fn get(&self, key: &RecordKey) -> Result<Option<Versioned<u64>>> {
            self.inner.get(key).await
        }

        async fn put(
            &self,
            key: &RecordKey,
            record: &Record,
            write_id: WriteId,
            expected: Option<&u64>,
        ) -> Result<PutOutcome<u64>> {
            let step = self.steps.lock().unwrap().pop_front();
            match step {
                Some(Step::Interloper(theirs)) => {
                    let now = self.inner.get(key).await?.map(|v| v.version);
                    self.inner
                        .put(key, &theirs, WriteId::random(), now.as_ref())
                        .await?;
                }
                Some(Step::LoseRequest) => return Err(self.lost()),
                Some(Step::ApplyThenConflict) => {
                    *self.puts.lock().unwrap() += 1;
                    self.inner.put(key, record, write_id, expected).await?;
                    return self.inner.put(key, record, write_id, expected).await;
                }
                Some(Step::LoseAnswer) => {
                    *self.puts.lock().unwrap() += 1;
                    self.inner.put(key, record, write_id, expected).await?;
                    return Err(self.lost());
                }
                Some(Step::Fail) => return Err(self.refused()),
                None => {}
            }
            let outcome = self.inner.put(key, record, write_id, expected).await?;
            if matches!(outcome, PutOutcome::Applied(_)) {
                *self.puts.lock().unwrap() += 1;
            }
            Ok(outcome)
        }

        /// Honours the steps that need no record of its own: a lost request, a lost answer,
        /// a failure.
        async fn delete(
            &self,
            key: &RecordKey,
            current: &Versioned<u64>,
        ) -> Result<PutOutcome<()>> {
            let step = self.steps.lock().unwrap().pop_front();
            match step {
                Some(Step::LoseRequest) => Err(self.lost()),
                Some(Step::LoseAnswer) => {
                    self.inner.delete(key, current).await?;
                    Err(self.lost())
                }
                Some(Step::Fail) => Err(self.refused()),
                Some(other) => panic!("{other:?} is not planned for a delete"),
                None => self.inner.delete(key, current).await,
            }
        }
    }

    fn key() -> RecordKey {
        RecordKey::new("r_815").unwrap()
    }

    fn token(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap()
    }

    fn state(name: &str) -> State {
        State::new(name).unwrap()
    }

    fn record(fence: u64, state_name: &str) -> Record {
        Record {
            key: key(),
            fence: Some(token(fence)),
            state: Some(state(state_name)),
            payload: b"7025".to_vec(),
        }
    }

    fn sending() -> FencedWrite {
        FencedWrite::claim().set_state(state("sending"))
    }

    /// A store holding `r_815` pending under `fence`.
    async fn seeded(fence: u64) -> CasStore<Scripted> {
        let store = CasStore::new(Scripted::new());
        store
            .write(
                &key(),
                token(fence),
                &FencedWrite::claim().set_state(state("pending")),
            )
            .await
            .unwrap();
        store
    }

    /// The confirm applied and the answer the writer got is a conflict (its own resent put met
    /// its first attempt): deciding again would refuse it (the record is no longer `sending`);
    /// the write id says it is the writer's own.
    #[tokio::test]
    async fn a_conflict_with_the_writes_own_first_attempt_is_its_success() {
        let store = seeded(1).await;
        store.write(&key(), token(33), &sending()).await.unwrap();
        store.inner().then(Step::ApplyThenConflict);
        let confirm = FencedWrite::holder_only()
            .when_state_in([state("sending")])
            .set_state(state("done"));
        let written = store.write(&key(), token(33), &confirm).await.unwrap();
        assert_eq!(written.previous_state, Some(state("sending")));
        assert_eq!(written.record.state, Some(state("done")));
        assert_eq!(*store.inner().puts.lock().unwrap(), 3, "applied once");
        let stored = store.read(&key()).await.unwrap().unwrap();
        assert_eq!(
            (stored.fence, stored.state),
            (Some(token(33)), Some(state("done")))
        );
    }

    #[tokio::test]
    async fn a_delete_whose_answer_is_lost_is_recognised_by_the_record_gone() {
        let store = seeded(34).await;
        store.inner().then(Step::LoseAnswer);
        let deleted = store.delete(&key(), token(34)).await.unwrap();
        assert_eq!(deleted.fence, Some(token(34)));
        assert_eq!(store.read(&key()).await.unwrap(), None);
        assert_eq!(store.remembered(&key()), None);
    }

    #[tokio::test]
    async fn a_delete_whose_request_is_lost_is_sent_again() {
        let store = seeded(34).await;
        store.inner().then(Step::LoseRequest);
        store.delete(&key(), token(34)).await.unwrap();
        assert_eq!(store.read(&key()).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_delete_that_fails_outright_is_reported_and_the_record_stays() {
        let store = seeded(34).await;
        store.inner().then(Step::Fail);
        let err = store.delete(&key(), token(34)).await.unwrap_err();
        assert!(matches!(err, Error::Backend { .. }), "{err:?}");
        assert!(store.read(&key()).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_write_that_fails_outright_is_reported_not_retried() {
        let store = seeded(1).await;
        store.inner().then(Step::Fail);
        let err = store
            .write(&key(), token(33), &sending())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Backend { .. }), "{err:?}");
        assert_eq!(
            store.read(&key()).await.unwrap().unwrap().fence,
            Some(token(1))
        );
    }

    #[tokio::test]
    async fn what_was_seen_is_kept_for_many_records_and_bounded() {
        let store = CasStore::new(MemoryVersionedStore::new("receipts"));
        let keys: Vec<RecordKey> = (0..=REMEMBERED)
            .map(|i| RecordKey::new(format!("r_{i}")).unwrap())
            .collect();
        for key in &keys[..2] {
            store.write(key, token(34), &sending()).await.unwrap();
        }
        assert!(
            store.remembered(&keys[0]).is_some() && store.remembered(&keys[1]).is_some(),
            "a second record does not push the first out"
        );
        for key in &keys[2..] {
            store.write(key, token(34), &sending()).await.unwrap();
        }
        let kept = keys
            .iter()
            .filter(|k| store.remembered(k).is_some())
            .count();
        assert!(kept <= REMEMBERED, "{kept} remembered");
        assert!(
            store.remembered(&keys[REMEMBERED]).is_some(),
            "the latest is kept"
        );
    }

    #[tokio::test]
    async fn a_record_forgotten_is_read_from_the_store_again() {
        let store = seeded(34).await;
        assert!(
            store.remembered(&key()).is_some(),
            "remembered after its write"
        );
        store.forget(&key());
        assert_eq!(store.remembered(&key()), None);
    }

    #[tokio::test]
    async fn a_newer_holder_between_read_and_put_is_met_on_the_read_again() {
        let store = seeded(1).await;
        store.forget(&key());
        store.inner().then(Step::Interloper(record(34, "sending")));
        let err = store
            .write(&key(), token(33), &sending())
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::Fenced { found: FoundFence::Fence(f), .. } if f == token(34)),
            "{err:?}"
        );
        assert_eq!(
            store.read(&key()).await.unwrap(),
            Some(record(34, "sending"))
        );
    }

    #[tokio::test]
    async fn an_unrelated_change_between_read_and_put_costs_one_more_round() {
        let store = seeded(1).await;
        store.inner().then(Step::Interloper(record(2, "pending")));
        let written = store.write(&key(), token(3), &sending()).await.unwrap();
        assert_eq!(
            written.previous_fence,
            Some(token(2)),
            "decided on the re-read"
        );
        assert_eq!(written.record.fence, Some(token(3)));
        assert_eq!(
            store.read(&key()).await.unwrap(),
            Some(Record {
                state: Some(state("sending")),
                ..record(3, "sending")
            }),
            "the store holds this writer's claim over the interloper's record"
        );
    }

    #[tokio::test]
    async fn a_lost_answer_is_settled_by_the_write_id() {
        let store = seeded(1).await;
        store.inner().then(Step::LoseAnswer);
        let written = store.write(&key(), token(3), &sending()).await.unwrap();
        assert_eq!(written.previous_fence, Some(token(1)));
        assert_eq!(written.record.state, Some(state("sending")));
        assert_eq!(
            *store.inner().puts.lock().unwrap(),
            2,
            "seed and one write, not two"
        );
        assert_eq!(
            store.read(&key()).await.unwrap(),
            Some(Record {
                payload: Vec::new(),
                ..record(3, "sending")
            }),
            "the write that landed is the one read back"
        );
    }

    #[tokio::test]
    async fn a_lost_request_is_decided_and_sent_again() {
        let store = seeded(1).await;
        store.inner().then(Step::LoseRequest);
        let written = store.write(&key(), token(3), &sending()).await.unwrap();
        assert_eq!(written.record.fence, Some(token(3)));
        assert_eq!(*store.inner().puts.lock().unwrap(), 2);
        assert_eq!(
            store.read(&key()).await.unwrap(),
            Some(Record {
                payload: Vec::new(),
                ..record(3, "sending")
            }),
            "the write sent again is the one read back"
        );
    }

    #[tokio::test]
    async fn endless_conflicts_end_in_a_backend_error_with_nothing_written() {
        let store = seeded(1).await.with_rounds(3);
        for fence in 1..=3 {
            let theirs = Record {
                payload: vec![fence],
                ..record(1, "pending")
            };
            store.inner().then(Step::Interloper(theirs));
        }
        let err = store.write(&key(), token(5), &sending()).await.unwrap_err();
        assert!(matches!(err, Error::Backend { .. }), "{err:?}");
        let now = store.read(&key()).await.unwrap().unwrap();
        assert_eq!(
            now.fence,
            Some(token(1)),
            "none of this writer's puts applied"
        );
    }

    #[tokio::test]
    async fn a_remembered_version_saves_the_read_and_a_stale_one_costs_a_conflict() {
        let store = seeded(5).await;
        store.write(&key(), token(5), &sending()).await.unwrap();
        assert!(store.remembered(&key()).is_some());
        // Someone else claims with 7; this writer still remembers fence 5.
        let outside = store.inner().inner.clone();
        let now = outside.get(&key()).await.unwrap().unwrap().version;
        outside
            .put(&key(), &record(7, "sending"), WriteId::random(), Some(&now))
            .await
            .unwrap();
        let confirm = FencedWrite::holder_only().set_state(state("sent"));
        let err = store.write(&key(), token(5), &confirm).await.unwrap_err();
        assert!(
            matches!(err, Error::Fenced { found: FoundFence::Fence(f), .. } if f == token(7)),
            "refused on the store's record, not on memory: {err:?}"
        );
    }

    #[tokio::test]
    async fn only_the_holder_deletes_and_a_stale_holder_changes_nothing() {
        let store = seeded(5).await;
        store.write(&key(), token(6), &sending()).await.unwrap();
        for stale in [5, 7] {
            let err = store.delete(&key(), token(stale)).await.unwrap_err();
            assert!(matches!(err, Error::Fenced { .. }), "{err:?}");
        }
        let deleted = store.delete(&key(), token(6)).await.unwrap();
        assert_eq!(deleted.fence, Some(token(6)));
        assert_eq!(store.read(&key()).await.unwrap(), None);
        let err = store.delete(&key(), token(6)).await.unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    }

    #[tokio::test]
    async fn a_refusal_decided_on_memory_is_checked_against_the_store() {
        let store = seeded(5).await;
        store
            .write(
                &key(),
                token(5),
                &FencedWrite::holder_only().set_state(state("sent")),
            )
            .await
            .unwrap();
        // Outside this writer the record goes back to `sending` under the same fence.
        let outside = store.inner().inner.clone();
        let now = outside.get(&key()).await.unwrap().unwrap().version;
        outside
            .put(&key(), &record(5, "sending"), WriteId::random(), Some(&now))
            .await
            .unwrap();
        let confirm = FencedWrite::holder_only()
            .when_state_in([state("sending")])
            .set_state(state("sent"));
        store.write(&key(), token(5), &confirm).await.unwrap();
    }
}
