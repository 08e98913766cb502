//! Fenced writes for stores that can only swap on a version: object stores, which compare an
//! ETag or a generation, never a number.
//!
//! Such a store cannot check `fence <= token` itself. [`CasStore`] checks it in the client,
//! against what it has just read, and lets the store's compare-and-swap make the check stick:
//! read the object and its version → decode it ([`ObjectCodec`]) → [`FencedWrite::decide`] →
//! [`FencedWrite::apply`] → put the new body if the version is still the one read → on a
//! conflict read and decide again, a bounded number of rounds. A delete is one more such
//! put: of a tombstone that keeps the fence. An adapter only translates its read and its
//! conditional put of a body ([`VersionedStore`]).

use std::collections::HashMap;
use std::fmt::{self, Debug};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::cas::codec::{EnvelopeCodec, ObjectCodec, encode_checked};
use crate::cas::object::{Contents, WriteId};
use crate::contract::store::{FencedStore, FencedWrite, Record, StoreWrites, Written};
use crate::value::error::{Error, Explained, Failure, FoundFence, RequestEffect, Result};
use crate::value::name::{RecordKey, State};
use crate::value::token::FencingToken;

/// An object as a versioned store holds it: its body and the store's version of it (an
/// ETag, a generation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredObject<V> {
    /// The body.
    pub body: Vec<u8>,
    /// The store's version of it.
    pub version: V,
}

/// A body to put, with what the object holds, for a store that labels its objects (S3's
/// user metadata, say) so that people browsing them see the fence without decoding bodies.
/// Labels are never read back: the body is the truth.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewObject<'a> {
    /// The body, in the store's codec.
    pub body: Vec<u8>,
    /// The codec's `Content-Type`.
    pub content_type: &'a str,
    /// The fence the object holds (a tombstone's: the fence it keeps).
    pub fence: Option<FencingToken>,
    /// The record's state; `None` for a tombstone.
    pub state: Option<&'a State>,
    /// Whether this is a tombstone.
    pub tombstone: bool,
}

/// What an object holds as [`CasStore`] read it: its contents, the id of the write that left
/// them, and the store's version of the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Versioned<V> {
    /// A record or a tombstone.
    pub contents: Contents,
    /// The write that stored it.
    pub write_id: WriteId,
    /// The store's version of it.
    pub version: V,
}

/// What a conditional put answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PutOutcome<V> {
    /// The object was stored; this is its new version.
    Applied(V),
    /// The version was no longer the one expected (or the object appeared, or vanished):
    /// nothing was stored. Read again.
    Conflict,
}

/// A store that can replace an object only if its version is unchanged, or create it only
/// if absent: the two calls [`CasStore`] needs. It deals in bodies; what a body means (a
/// record, a tombstone, which write left it) is [`CasStore`]'s business, through its codec.
///
/// # Contract
///
/// * `get` returns the object's body and its current version, or `None` if there is none.
/// * `put(key, object, Some(version))` stores the object only if the stored version is
///   `version`; `put(.., None)` only if there is no object. Otherwise it stores nothing and
///   answers [`PutOutcome::Conflict`].
/// * A failure whose answer may have been lost after the store applied the put is
///   [`Error::Ambiguous`]; every other failure stored nothing.
#[async_trait]
pub trait VersionedStore: Send + Sync + Debug {
    /// The store's version of an object.
    type Version: Clone + Send + Sync + Debug;

    /// The store's name in errors and batches.
    fn name(&self) -> &str;

    /// Reads an object with its version.
    async fn get(&self, key: &RecordKey) -> Result<Option<StoredObject<Self::Version>>>;

    /// Stores `object` under `key` if its version is still `expected` (`None`: if absent).
    async fn put(
        &self,
        key: &RecordKey,
        object: NewObject<'_>,
        expected: Option<&Self::Version>,
    ) -> Result<PutOutcome<Self::Version>>;
}

/// How many conflicting rounds a write goes before it gives up with [`Error::Unavailable`].
const DEFAULT_ROUNDS: usize = 8;

/// The most records whose last version a [`CasStore`] remembers.
const REMEMBERED: usize = 1024;

/// A [`FencedStore`] over any [`VersionedStore`]: the fence is checked in the client against
/// a fresh read, and the store's compare-and-swap makes sure nothing changed in between.
///
/// * A refusal ([`Error::Fenced`], [`Error::StateMismatch`], [`Error::NotFound`]) is only ever
///   reported from an object read from the store, never from a remembered one.
/// * A put whose answer was lost is settled by reading back: the body carries the write's
///   [`WriteId`], so the write is reported applied exactly when it was. So is a conflict, which
///   a client's resent put meets when its first attempt applied.
/// * After a write, the object and its new version are remembered, so the same holder's next
///   write to that record skips the read; a stale memory only costs a conflict and a read.
/// * A delete ([`CasStore::delete`]) leaves a **tombstone** that keeps the record's fence:
///   readers find no record, a write from a token below the kept fence is refused as
///   [`Error::Fenced`], and any other write sees the record absent (a claim may create it
///   again, a write that needs the record is [`Error::NotFound`]). No store here deletes an
///   object outright: a stale holder could then create the record again under its old token.
/// * Bodies are in the codec's format ([`EnvelopeCodec`] unless [`CasStore::with_codec`]);
///   an object the codec cannot read is refused and never written over.
/// * After [`CasStore::with_rounds`] conflicting rounds (8 by default) it gives up with
///   [`Error::Unavailable`], never a guess.
pub struct CasStore<S: VersionedStore> {
    inner: S,
    codec: Arc<dyn ObjectCodec>,
    rounds: usize,
    remembered: Mutex<HashMap<RecordKey, Versioned<S::Version>>>,
}

impl<S: VersionedStore> Debug for CasStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CasStore")
            .field("inner", &self.inner)
            .field("codec", &self.codec)
            .field("rounds", &self.rounds)
            .finish_non_exhaustive()
    }
}

impl<S: VersionedStore> CasStore<S> {
    /// Fenced writes over `inner`, bodies in the envelope.
    pub fn new(inner: S) -> Self {
        CasStore {
            inner,
            codec: Arc::new(EnvelopeCodec),
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

    /// The same, bodies in `codec`'s format (whatever is remembered is forgotten).
    pub fn with_codec(self, codec: impl ObjectCodec + 'static) -> Self {
        CasStore {
            codec: Arc::new(codec),
            remembered: Mutex::default(),
            ..self
        }
    }

    /// The same settings over the versioned store `change` makes of this one (whatever is
    /// remembered is forgotten).
    pub fn map_inner(self, change: impl FnOnce(S) -> S) -> Self {
        CasStore {
            inner: change(self.inner),
            codec: self.codec,
            rounds: self.rounds,
            remembered: Mutex::default(),
        }
    }

    /// The versioned store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Reads `key` from the store, a tombstone included, with its version (and remembers it).
    /// An object the codec cannot read is an [`Error::Corrupt`] that says it is not written
    /// over.
    pub async fn get(&self, key: &RecordKey) -> Result<Option<Versioned<S::Version>>> {
        let current = match self.inner.get(key).await? {
            None => None,
            Some(object) => {
                let (contents, write_id) = self.codec.decode(key, &object.body).map_err(|e| {
                    let why = format!(
                        "{key:?} in {} cannot be read as a fenced record ({e}); it is left as \
                         it is and not written over",
                        self.inner.name()
                    );
                    Error::failed_request(
                        self.inner.name(),
                        RequestEffect::ReadOnly,
                        Failure::Corrupt,
                        Box::new(Explained::new(why, e)),
                    )
                })?;
                Some(Versioned {
                    contents,
                    write_id,
                    version: object.version,
                })
            }
        };
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
    /// by putting a tombstone that keeps the fence over the version read, under the same
    /// compare-and-swap rounds as a write. Returns the record deleted; a missing (or already
    /// deleted) record is [`Error::NotFound`], or [`Error::Fenced`] for a token below the
    /// fence a tombstone keeps.
    pub async fn delete(&self, key: &RecordKey, token: FencingToken) -> Result<Record> {
        let holder_only = FencedWrite::holder_only();
        self.change(key, |found| {
            let record = self.decide(&holder_only, key, token, found)?;
            // Holder-only: a write it admits needs the record, so one is there.
            let record = record.cloned().ok_or_else(|| self.not_found(key))?;
            Ok((Contents::Tombstone(record.fence), record))
        })
        .await
    }

    /// The compare-and-swap loop every change goes through: `step` decides on what the
    /// object holds (`None`: nothing) and gives what it is to hold, and what to answer once
    /// that is stored.
    async fn change<T>(
        &self,
        key: &RecordKey,
        step: impl Fn(Option<&Contents>) -> Result<(Contents, T)>,
    ) -> Result<T> {
        let write_id = WriteId::random();
        // What was seen of the object, and whether it was read for this change.
        let (mut current, mut fresh) = match self.remembered(key) {
            Some(seen) => (Some(seen), false),
            None => (self.get(key).await?, true),
        };
        for _ in 0..self.rounds {
            let (contents, answer) = match step(current.as_ref().map(|c| &c.contents)) {
                Ok(next) => next,
                Err(refusal) if fresh => return Err(refusal),
                Err(_) => {
                    // Decided on memory: refuse only on what the store holds now.
                    (current, fresh) = (self.get(key).await?, true);
                    continue;
                }
            };
            let body = encode_checked(&*self.codec, key, &contents, write_id)?;
            let object = NewObject {
                body,
                content_type: self.codec.content_type(),
                fence: contents.fence(),
                state: contents.record().and_then(|r| r.state.as_ref()),
                tombstone: contents.record().is_none(),
            };
            let expected = current.as_ref().map(|c| &c.version);
            match self.inner.put(key, object, expected).await {
                Ok(PutOutcome::Applied(version)) => {
                    let stored = Versioned {
                        contents,
                        write_id,
                        version,
                    };
                    self.remember(key, Some(stored));
                    return Ok(answer);
                }
                Ok(PutOutcome::Conflict) => {}
                Err(err) if err.is_ambiguous() => {}
                Err(err) => {
                    self.forget(key);
                    return Err(err);
                }
            }
            // A conflict, or a lost answer: the write id in the object read back tells whether
            // this change applied. A conflict can be this change's own, too: a client that
            // resent a put whose answer it lost (as `object_store`'s retries do) has its
            // condition refused by its own first attempt.
            let now = self.get(key).await?;
            if now.as_ref().is_some_and(|n| n.write_id == write_id) {
                return Ok(answer);
            }
            (current, fresh) = (now, true);
        }
        self.forget(key);
        Err(self.gave_up(key))
    }

    /// Decides `write` on what the object holds, and returns the record it holds, if any. A
    /// tombstone is an absent record whose kept fence still refuses every lower token.
    fn decide<'c>(
        &self,
        write: &FencedWrite,
        key: &RecordKey,
        token: FencingToken,
        found: Option<&'c Contents>,
    ) -> Result<Option<&'c Record>> {
        let name = self.inner.name();
        match found {
            Some(Contents::Tombstone(Some(kept))) if token < *kept => Err(Error::Fenced {
                store: name.to_owned(),
                record: key.clone(),
                presented: token,
                found: FoundFence::Fence(*kept),
            }),
            found => {
                let record = found.and_then(Contents::record);
                write.decide(name, key, token, record)?;
                Ok(record)
            }
        }
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

    fn not_found(&self, key: &RecordKey) -> Error {
        Error::NotFound {
            store: self.inner.name().to_owned(),
            record: key.clone(),
        }
    }

    fn gave_up(&self, key: &RecordKey) -> Error {
        Error::failed_request(
            self.inner.name(),
            RequestEffect::Writes,
            Failure::Unavailable,
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
        Ok(self
            .get(key)
            .await?
            .and_then(|current| match current.contents {
                Contents::Record(record) => Some(record),
                Contents::Tombstone(_) => None,
            }))
    }
}

#[async_trait]
impl<S: VersionedStore> StoreWrites for CasStore<S> {
    async fn write(
        &self,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Written> {
        self.change(key, |found| {
            let record = self.decide(write, key, token, found)?;
            let updated = write.apply(key, token, record);
            Ok((
                Contents::Record(updated.clone()),
                Written::new(record, updated),
            ))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::cas::codec::JsonCodec;
    use crate::cas::envelope;
    use crate::memory::MemoryVersionedStore;

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

        async fn get(&self, key: &RecordKey) -> Result<Option<StoredObject<u64>>> {
            self.inner.get(key).await
        }

        async fn put(
            &self,
            key: &RecordKey,
            object: NewObject<'_>,
            expected: Option<&u64>,
        ) -> Result<PutOutcome<u64>> {
            let step = self.steps.lock().unwrap().pop_front();
            match step {
                Some(Step::Interloper(theirs)) => {
                    let now = self.inner.get(key).await?.map(|v| v.version);
                    self.inner
                        .put(key, enveloped(&theirs), now.as_ref())
                        .await?;
                }
                Some(Step::LoseRequest) => return Err(self.lost()),
                Some(Step::ApplyThenConflict) => {
                    *self.puts.lock().unwrap() += 1;
                    self.inner.put(key, object.clone(), expected).await?;
                    return self.inner.put(key, object, expected).await;
                }
                Some(Step::LoseAnswer) => {
                    *self.puts.lock().unwrap() += 1;
                    self.inner.put(key, object, expected).await?;
                    return Err(self.lost());
                }
                Some(Step::Fail) => return Err(self.refused()),
                None => {}
            }
            let outcome = self.inner.put(key, object, expected).await?;
            if matches!(outcome, PutOutcome::Applied(_)) {
                *self.puts.lock().unwrap() += 1;
            }
            Ok(outcome)
        }
    }

    /// `record` as another writer puts it, in the envelope.
    fn enveloped(record: &Record) -> NewObject<'static> {
        NewObject {
            body: envelope::encode(record, WriteId::random()),
            content_type: EnvelopeCodec.content_type(),
            fence: record.fence,
            state: None,
            tombstone: false,
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
    async fn a_delete_whose_answer_is_lost_is_recognised_by_its_tombstone() {
        let store = seeded(34).await;
        store.inner().then(Step::LoseAnswer);
        let deleted = store.delete(&key(), token(34)).await.unwrap();
        assert_eq!(deleted.fence, Some(token(34)));
        assert_eq!(store.read(&key()).await.unwrap(), None);
        assert_eq!(
            *store.inner().puts.lock().unwrap(),
            2,
            "seed and one delete"
        );
        assert_eq!(
            store.remembered(&key()).map(|seen| seen.contents),
            Some(Contents::Tombstone(Some(token(34))))
        );
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
    async fn endless_conflicts_end_in_an_unavailable_store_with_nothing_written() {
        let store = seeded(1).await.with_rounds(3);
        for fence in 1..=3 {
            let theirs = Record {
                payload: vec![fence],
                ..record(1, "pending")
            };
            store.inner().then(Step::Interloper(theirs));
        }
        let err = store.write(&key(), token(5), &sending()).await.unwrap_err();
        assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
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
            .put(&key(), enveloped(&record(7, "sending")), Some(&now))
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

    /// The stale holder's case a plain delete would let through: with the record gone, its
    /// claim would create it again under the lower token. The tombstone keeps the fence.
    #[tokio::test]
    async fn a_tombstone_keeps_the_fence_against_a_stale_holder_and_yields_to_the_rest() {
        let store = seeded(5).await;
        store.write(&key(), token(6), &sending()).await.unwrap();
        store.delete(&key(), token(6)).await.unwrap();
        let before = store.inner().inner.get(&key()).await.unwrap();
        let confirm = FencedWrite::holder_only().set_state(state("sent"));
        for write in [sending(), confirm.clone(), FencedWrite::claim()] {
            let err = store.write(&key(), token(5), &write).await.unwrap_err();
            assert!(
                matches!(err, Error::Fenced { found: FoundFence::Fence(f), .. } if f == token(6)),
                "{err:?}"
            );
        }
        let err = store.delete(&key(), token(5)).await.unwrap_err();
        assert!(matches!(err, Error::Fenced { .. }), "{err:?}");
        for token in [token(6), token(7)] {
            let err = store.write(&key(), token, &confirm).await.unwrap_err();
            assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
        }
        assert_eq!(
            store.inner().inner.get(&key()).await.unwrap(),
            before,
            "nothing written over the tombstone"
        );
        let again = store.write(&key(), token(6), &sending()).await.unwrap();
        assert_eq!(
            (again.previous_fence, again.record.fence),
            (None, Some(token(6)))
        );
        assert_eq!(store.read(&key()).await.unwrap(), Some(again.record));
    }

    #[tokio::test]
    async fn an_object_the_codec_cannot_read_is_neither_read_nor_written_over_nor_deleted() {
        let store = CasStore::new(MemoryVersionedStore::new("receipts"));
        let stray = NewObject {
            body: b"70.25".to_vec(),
            ..enveloped(&record(1, "pending"))
        };
        store.inner().put(&key(), stray, None).await.unwrap();
        let err = store.read(&key()).await.unwrap_err();
        assert!(err.to_string().contains("not written over"), "{err}");
        for write in [FencedWrite::claim(), FencedWrite::holder_only()] {
            let err = store.write(&key(), token(9), &write).await.unwrap_err();
            assert!(err.to_string().contains("not written over"), "{err}");
        }
        assert!(store.delete(&key(), token(9)).await.is_err());
        let body = store.inner().get(&key()).await.unwrap().unwrap().body;
        assert_eq!(body, b"70.25");
    }

    #[tokio::test]
    async fn a_store_in_json_keeps_its_tombstones_in_json() {
        let store =
            CasStore::new(MemoryVersionedStore::new("receipts")).with_codec(JsonCodec::new());
        store.write(&key(), token(6), &sending()).await.unwrap();
        store.delete(&key(), token(6)).await.unwrap();
        let body = store.inner().get(&key()).await.unwrap().unwrap().body;
        let plain: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            (plain["_fence"].as_u64(), plain["_deleted"].as_bool()),
            (Some(6), Some(true))
        );
        let err = store.write(&key(), token(5), &sending()).await.unwrap_err();
        assert!(matches!(err, Error::Fenced { .. }), "{err:?}");
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
            .put(&key(), enveloped(&record(5, "sending")), Some(&now))
            .await
            .unwrap();
        let confirm = FencedWrite::holder_only()
            .when_state_in([state("sending")])
            .set_state(state("sent"));
        store.write(&key(), token(5), &confirm).await.unwrap();
    }
}
