//! A token in hand: fenced writes that tell a stale holder from a counter that went backwards.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::contract::guard::{LeaseGuard, LeaseGuardExt};
use crate::contract::store::{FenceCheck, FencedStore, FencedWrite, RecordOutcomes, Written};
use crate::contract::token_source::TokenSource;
use crate::holder::latch::Latch;
use crate::protocol::rules::is_regression;
use crate::telemetry;
use crate::value::error::{Error, Failure, FoundFence, NoAnswer, RequestEffect, Result};
use crate::value::name::{RecordKey, ResourceName};
use crate::value::token::FencingToken;

/// A holder's token for one resource, with the source that issued it.
///
/// Every write through a `Holder`:
/// * presents the token;
/// * sends a write whose outcome was ambiguous again, with the same token (safe: a claim
///   accepts `fence == token`), up to [`Holder::ambiguous_retries`] times;
/// * after such a retry, recognises a refusal caused by its own first attempt having landed
///   ([`FencedWrite::is_reflected_in`]) and reports the write as applied; so too a holder-only
///   write refused only because the record is already in the state it sets (the fence, checked
///   first, admitted this token, so only this holder can have set it);
/// * turns a refusal whose fence lies above anything the source has issued into
///   [`Error::TokenRegression`], and raises the source past that fence, so the next
///   acquisition makes progress without an operator.
///
/// A holder made from a guard ([`LeaseGuard::holder`]) also knows the lease's local deadline:
/// its helpers ([`Holder::run_effect`], the pipeline) start no side effect once the guard
/// [has ended locally](LeaseGuard::has_ended_locally). Its writes are sent regardless: the
/// store's fence, not the deadline, decides them.
///
/// A holder owns what it needs (a clone of the guard, the source, the batch's notes), so it
/// can be kept in a struct or moved into a spawned task: a worker settling several merchants
/// at once gives each task its merchant's holder. Clones are the same holder.
///
/// ```
/// # use std::sync::Arc;
/// # use fencing_core::*;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<()> {
/// let lease = MemoryLease::new();
/// let refunds = Arc::new(MemoryStore::new("refunds"));
/// let resource = ResourceName::new("settle:m_4471")?;
/// let guard = lease.try_acquire(&resource, Ttl::from_secs(30)?).await?.expect("free");
/// let holder = guard.holder();
/// let task = tokio::spawn({
///     let refunds = refunds.clone();
///     async move { holder.write(&*refunds, &RecordKey::new("r_1")?, &FencedWrite::claim()).await }
/// });
/// assert_eq!(task.await.expect("the task ran")?.record.fence, Some(guard.token()));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Holder {
    resource: ResourceName,
    token: FencingToken,
    source: Arc<dyn TokenSource>,
    guard: Option<LeaseGuard>,
    /// The batch that notes this holder's writes, for a batch's holder.
    latch: Option<Arc<Latch>>,
    ambiguous_retries: u32,
    request_timeout: Option<Duration>,
}

impl LeaseGuard {
    /// The holder of this acquisition, the handle its fenced writes go through: its token,
    /// checked against the source that issued it.
    /// Its helpers start no side effect once this guard [has ended
    /// locally](Self::has_ended_locally).
    pub fn holder(&self) -> Holder {
        Holder {
            guard: Some(self.clone()),
            ..Holder::from_source(self.resource(), self.token(), self.token_source().clone())
        }
    }

    /// [`Self::holder`], as 0.1 named it.
    #[deprecated(since = "0.2.0", note = "renamed `LeaseGuard::holder()`")]
    #[doc(hidden)]
    pub fn fence(&self) -> Holder {
        self.holder()
    }
}

impl Holder {
    /// How many times a write with an ambiguous outcome is sent again unless told otherwise.
    pub const DEFAULT_AMBIGUOUS_RETRIES: u32 = 2;

    fn from_source(
        resource: &ResourceName,
        token: FencingToken,
        source: Arc<dyn TokenSource>,
    ) -> Self {
        Holder {
            resource: resource.clone(),
            token,
            source,
            guard: None,
            latch: None,
            ambiguous_retries: Self::DEFAULT_AMBIGUOUS_RETRIES,
            request_timeout: None,
        }
    }

    /// The same holder, its writes noted by `latch` (a batch's holder).
    pub(crate) fn latched(self, latch: Arc<Latch>) -> Self {
        Holder {
            latch: Some(latch),
            ..self
        }
    }

    /// The holder to send a write to `store` with, or why it must not be sent: a batch's holder
    /// refuses every write once the batch has aborted, and a write to a store outside the
    /// batch. The holder returned notes nothing; what it met is noted once, by [`Self::noted`].
    pub(crate) fn admit<S: FencedStore + ?Sized>(&self, store: &S) -> Result<Holder> {
        if let Some(latch) = &self.latch {
            latch.admit(store.name(), &store.identity())?;
        }
        Ok(Holder {
            latch: None,
            ..self.clone()
        })
    }

    /// `result` noted by this holder's batch, if it has one: a rejection aborts the batch, a
    /// mismatch is skipped or aborts it as its policy says.
    pub(crate) fn noted<T: RecordOutcomes>(&self, result: Result<T>) -> Result<T> {
        self.noted_unless_done(result, |_| false)
    }

    /// [`Self::noted`] of what `write` came back with: a refusal that finds a record's work
    /// already done ([`FencedWrite::finds_done`]) is not the batch's to abort on or skip.
    fn noted_write<T: RecordOutcomes>(&self, write: &FencedWrite, result: Result<T>) -> Result<T> {
        self.noted_unless_done(result, |err| write.finds_done(err))
    }

    fn noted_unless_done<T: RecordOutcomes>(
        &self,
        result: Result<T>,
        already_done: impl Fn(&Error) -> bool,
    ) -> Result<T> {
        match &self.latch {
            Some(latch) => latch.note(&self.resource, self.token, result, already_done),
            None => result,
        }
    }

    /// Notes `err` in this holder's batch, and returns it unless the batch's policy leaves its
    /// record alone.
    pub(crate) fn note_error(&self, err: Error) -> Option<Error> {
        match &self.latch {
            Some(latch) => latch.note_error(&self.resource, self.token, err),
            None => Some(err),
        }
    }

    /// The same holder, sending a write with an ambiguous outcome again up to `retries` times
    /// (0: report the first ambiguous outcome as it is).
    pub fn with_ambiguous_retries(self, retries: u32) -> Self {
        Holder {
            ambiguous_retries: retries,
            ..self
        }
    }

    /// The same holder, giving up on an attempt that has not answered within `timeout`.
    ///
    /// A store cut off by the network drops packets rather than refusing them, and a driver
    /// then waits for an answer as long as TCP keeps resending (minutes). With a timeout, the
    /// attempt is dropped when it runs out and its outcome is unknown ([`Error::Ambiguous`],
    /// its source a [`NoAnswer`]): it may still reach the store and apply once the network
    /// heals. It is settled as every lost answer is: sent again with the same token up to
    /// [`Self::ambiguous_retries`] times, a refused retry read back (within the same
    /// timeout) and recognised as this holder's own earlier write. Every adapter's write
    /// future is safe to drop at any point, which is what makes this sound.
    ///
    /// Without one (the default), an attempt waits as long as the store's driver does.
    pub fn with_request_timeout(self, timeout: Duration) -> Self {
        Holder {
            request_timeout: Some(timeout),
            ..self
        }
    }

    /// How long an attempt may go unanswered before its outcome is taken as unknown, if set.
    pub fn request_timeout(&self) -> Option<Duration> {
        self.request_timeout
    }

    /// `attempt`'s answer, or, past the request timeout, the attempt dropped and its outcome
    /// unknown.
    async fn answered<T>(
        &self,
        store: &str,
        attempt: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let Some(limit) = self.request_timeout else {
            return attempt.await;
        };
        tokio::time::timeout(limit, attempt)
            .await
            .unwrap_or_else(|_| {
                Err(Error::Ambiguous {
                    store: store.to_owned(),
                    source: Box::new(NoAnswer::within(limit)),
                })
            })
    }

    /// The token presented on every write.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The resource the token was issued for.
    pub fn resource(&self) -> &ResourceName {
        &self.resource
    }

    /// How many times a write with an ambiguous outcome is sent again.
    pub fn ambiguous_retries(&self) -> u32 {
        self.ambiguous_retries
    }

    /// [`Error::LeaseLost`] once the guard this holder was made from has ended locally: no
    /// new side effect may start. Always `Ok` for a holder made without a guard.
    pub(crate) fn may_start_effects(&self) -> Result<()> {
        match &self.guard {
            Some(guard) if guard.has_ended_locally() => Err(guard.lost()),
            _ => Ok(()),
        }
    }

    /// Writes `key` in `store` with this holder's token.
    pub async fn write<S: FencedStore + ?Sized>(
        &self,
        store: &S,
        key: &RecordKey,
        write: &FencedWrite,
    ) -> Result<Written> {
        HolderExt::write_by(self, store, key, write, || {
            store.write(key, self.token, write)
        })
        .await
    }

    /// Writes each of `keys` in `store` with this holder's token, in one request where the
    /// store can ([`StoreWrites::write_many`](crate::adapter::StoreWrites::write_many)), with the rules [`Self::write`] applies to
    /// each record: a record whose outcome was ambiguous is sent again (the ambiguous ones
    /// together) with the same token, up to [`Self::ambiguous_retries`] times; a refusal that
    /// may hide that record's own earlier success is read back and recognised; a refusal is
    /// explained (a fence above everything issued is [`Error::TokenRegression`]); each
    /// record's outcome is reported.
    ///
    /// Returns each record's outcome in the order given, as [`Self::write`] of it alone
    /// would. `Err` is a request that failed as a whole (after its retries, if it was
    /// ambiguous): records of that request may or may not have been written, those of an
    /// earlier answered round were.
    pub async fn write_many<S: FencedStore + ?Sized>(
        &self,
        store: &S,
        keys: &[RecordKey],
        write: &FencedWrite,
    ) -> Result<Vec<Result<Written>>> {
        let holder = self.admit(store)?;
        let outcomes = holder.write_many_unnoted(store, keys, write).await;
        if let Some(latch) = &self.latch {
            let errors: Vec<&Error> = match &outcomes {
                Ok(each) => each.iter().filter_map(|o| o.as_ref().err()).collect(),
                Err(err) => vec![err],
            };
            for err in errors.into_iter().filter(|err| !write.finds_done(err)) {
                latch.note_one(&self.resource, self.token, err);
            }
        }
        outcomes
    }

    async fn write_many_unnoted<S: FencedStore + ?Sized>(
        &self,
        store: &S,
        keys: &[RecordKey],
        write: &FencedWrite,
    ) -> Result<Vec<Result<Written>>> {
        let started = Instant::now();
        let mut outcomes: Vec<Option<Result<Written>>> = keys.iter().map(|_| None).collect();
        let mut pending: Vec<usize> = (0..keys.len()).collect();
        let mut retries = 0;
        while !pending.is_empty() {
            let sent: Vec<RecordKey> = pending.iter().map(|&i| keys[i].clone()).collect();
            let answers = match self
                .answered(store.name(), store.write_many(&sent, self.token, write))
                .await
            {
                Err(err) if err.is_ambiguous() && retries < self.ambiguous_retries => {
                    retries += 1;
                    telemetry::ambiguous_retry(store.name(), &sent[0], self.token, retries);
                    continue;
                }
                Err(err) => {
                    let records: Vec<&RecordKey> = sent.iter().collect();
                    let failed = Err(self.explain_and_repair(err).await);
                    self.observe::<()>(store.name(), &records, write.check(), started, &failed);
                    return failed.map(|()| Vec::new());
                }
                Ok(answers) if answers.len() == sent.len() => answers,
                Ok(answers) => return Err(miscounted(store.name(), answers.len(), sent.len())),
            };
            let mut ambiguous = Vec::new();
            let mut refused = Vec::new();
            for (i, answer) in pending.into_iter().zip(answers) {
                let key = &keys[i];
                let outcome = match answer {
                    Err(err) if err.is_ambiguous() && retries < self.ambiguous_retries => {
                        ambiguous.push(i);
                        continue;
                    }
                    Err(err) if write.refusal_may_be_own(&err, retries > 0) => {
                        self.own_earlier_attempt(store, key, write, err).await
                    }
                    Err(err) => {
                        refused.push((i, err));
                        continue;
                    }
                    done => done,
                };
                self.observe(store.name(), &[key], write.check(), started, &outcome);
                outcomes[i] = Some(outcome);
            }
            let (places, errs): (Vec<usize>, Vec<Error>) = refused.into_iter().unzip();
            for (i, err) in places
                .into_iter()
                .zip(self.explain_all(errs, Patience::Wait).await)
            {
                let outcome = Err(err);
                self.observe(store.name(), &[&keys[i]], write.check(), started, &outcome);
                outcomes[i] = Some(outcome);
            }
            if !ambiguous.is_empty() {
                retries += 1;
                telemetry::ambiguous_retry(store.name(), &keys[ambiguous[0]], self.token, retries);
            }
            pending = ambiguous;
        }
        Ok(outcomes
            .into_iter()
            .map(|outcome| outcome.expect("every record answered"))
            .collect())
    }

    /// Reports how a write of `records` ended, once per record.
    fn observe<T: RecordOutcomes>(
        &self,
        store: &str,
        records: &[&RecordKey],
        check: FenceCheck,
        started: Instant,
        result: &Result<T>,
    ) {
        let elapsed = started.elapsed();
        let end = |record: &RecordKey, outcome| {
            telemetry::write_ended(store, record, self.token, check, outcome, elapsed);
        };
        match result {
            Ok(done) => {
                let refusals = done.refusals();
                for record in records {
                    let refused = refusals
                        .iter()
                        .find(|e| e.rejected_at().is_some_and(|(_, r)| r == *record));
                    end(record, refused.map_or(Ok(()), |err| Err(*err)));
                }
            }
            Err(err) => match err.rejected_at() {
                Some((_, refused)) => end(refused, Err(err)),
                None => records.iter().for_each(|record| end(record, Err(err))),
            },
        }
    }

    async fn write_unobserved<S, F>(
        &self,
        store: &S,
        key: &RecordKey,
        write: &FencedWrite,
        mut send: impl FnMut() -> F,
    ) -> Result<Written>
    where
        S: FencedStore + ?Sized,
        F: Future<Output = Result<Written>>,
    {
        let mut retries = 0;
        loop {
            match self.answered(store.name(), send()).await {
                Ok(written) => return Ok(written),
                Err(err) if err.is_ambiguous() && retries < self.ambiguous_retries => {
                    retries += 1;
                    telemetry::ambiguous_retry(store.name(), key, self.token, retries);
                }
                Err(err) if write.refusal_may_be_own(&err, retries > 0) => {
                    return self.own_earlier_attempt(store, key, write, err).await;
                }
                Err(err) => return Err(self.explain_and_repair(err).await),
            }
        }
    }

    /// A retry after an ambiguous attempt was refused: the first attempt may have landed.
    async fn own_earlier_attempt<S: FencedStore + ?Sized>(
        &self,
        store: &S,
        key: &RecordKey,
        write: &FencedWrite,
        refusal: Error,
    ) -> Result<Written> {
        match self.answered(store.name(), store.read(key)).await? {
            Some(record) if write.is_reflected_in(self.token, &record) => {
                Ok(Written::over(record.fence, record.state.clone(), record))
            }
            _ => Err(self.explain_and_repair(refusal).await),
        }
    }

    /// Turns a fence refusal into [`Error::TokenRegression`] when the fence found is above the
    /// highest token the source has issued, and raises the source past that fence (advancing
    /// never hurts safety; should it fail, the next refusal tries again). Every other error is
    /// returned as it is.
    ///
    /// The extra read of the source happens only here, on the rejection path.
    pub(crate) async fn explain_and_repair(&self, err: Error) -> Error {
        self.explain_one(err, Patience::Wait).await
    }

    async fn explain_one(&self, err: Error, patience: Patience) -> Error {
        let mut explained = self.explain_all(vec![err], patience).await;
        explained.pop().expect("one error in, one out")
    }

    /// [`Self::explain_and_repair`] for the refusals of one request of many records, judged
    /// together: against one reading of the source taken before any repair, with one repair
    /// to the highest fence found. Judged one by one, the repair made for the first would
    /// make the next (a lower fence, still above every token issued) look like a newer
    /// holder's. A holder made from a guard also remembers the repairs of every write under
    /// that guard, so refusals answered side by side (a pipeline's own writes) are judged
    /// alike whatever order their explanations run in.
    async fn explain_all(&self, errs: Vec<Error>, patience: Patience) -> Vec<Error> {
        let found_fences = errs.iter().filter_map(|err| match err {
            Error::Fenced { found, .. } => found.token(),
            _ => None,
        });
        let Some(highest_found) = found_fences.max() else {
            return errs;
        };
        let asked = match patience {
            Patience::Wait => Some(self.source.current(&self.resource).await),
            Patience::AtOnce => self.source.current_at_once(&self.resource).await,
        };
        let Some(Ok(highest_issued)) = asked else {
            // The source cannot say (now): every refusal stays a plain refusal.
            return errs;
        };
        let repaired = self.guard.as_ref().and_then(LeaseGuard::repaired_to);
        let regressed = |found: FencingToken| {
            is_regression(found, highest_issued)
                || repaired.is_some_and(|r| found > self.token && found <= r)
        };
        if is_regression(highest_found, highest_issued) {
            // Noted before the source moves, so that a refusal judged side by side that reads
            // the raised source already finds the note.
            if let Some(guard) = &self.guard {
                guard.repaired(highest_found);
            }
            let advanced = self.source.advance_to(&self.resource, highest_found).await;
            telemetry::token_advanced(&self.resource, highest_found, advanced.as_ref().map(drop));
        }
        errs.into_iter()
            .map(|err| match err {
                Error::Fenced {
                    store,
                    record,
                    presented,
                    found: FoundFence::Fence(found),
                } if regressed(found) => Error::TokenRegression {
                    store,
                    record,
                    presented,
                    found,
                    highest_issued,
                },
                other => other,
            })
            .collect()
    }
}

/// How long a refusal's explanation may wait for the token source.
#[derive(Clone, Copy)]
enum Patience {
    /// As long as the source takes.
    Wait,
    /// Only for what it can say without waiting for something the caller may hold (a write
    /// in the caller's transaction: the connection it holds).
    AtOnce,
}

/// A broken adapter's answer to a write of `sent` records with `answered` outcomes: which
/// records its answers belong to is unknown, so the whole request's outcome is.
fn miscounted(store: &str, answered: usize, sent: usize) -> Error {
    let source = format!("write_many answered {answered} outcomes for {sent} records");
    Error::failed_request(
        store,
        RequestEffect::Writes,
        Failure::AnswerLost,
        source.into(),
    )
}

/// What an adapter does with a [`Holder`] and a job does not: send requests of its own under
/// the holder's token, with every rule of [`Holder::write`]. Bring it in with
/// `use fencing_core::adapter::HolderExt`.
// Implemented for `Holder` alone and called on it, so each future is exactly as `Send` as its
// arguments make it: the lint's concern (a caller that cannot require `Send`) does not arise.
#[allow(async_fn_in_trait)]
pub trait HolderExt {
    /// The holder of `token` for `resource`, issued by `source`, for a token this library's
    /// leases did not hand out (a lease of your own, a test): a job gets its holder from its
    /// guard ([`LeaseGuard::holder`]) or its batch. The holder keeps a clone of `source`
    /// (every source is a handle whose clones share one counter), against which its refusals
    /// are explained; nothing checks that `source` issued `token`.
    fn new<S: TokenSource + Clone + 'static>(
        resource: &ResourceName,
        token: FencingToken,
        source: &S,
    ) -> Self
    where
        Self: Sized;

    /// [`Holder::write`] of a request the adapter sends itself: `send` makes `write` of `key`
    /// under [`Holder::token`] with more besides (a row's other columns, an item's own
    /// attributes) and maps the answer as [`StoreWrites::write`](crate::adapter::StoreWrites::write) would. It gets every rule of
    /// [`Holder::write`]: an ambiguous outcome sent again, a refused retry read back from
    /// `store` and recognised by `write`'s own effect, a refusal explained, the outcome
    /// reported.
    async fn write_by<S, F>(
        &self,
        store: &S,
        key: &RecordKey,
        write: &FencedWrite,
        send: impl FnMut() -> F,
    ) -> Result<Written>
    where
        S: FencedStore + ?Sized,
        F: Future<Output = Result<Written>>;

    /// Runs a fenced write under the holder's token that an adapter makes outside
    /// [`Holder::write`] (several records in one request, say), with the rules
    /// [`Holder::write`] applies to every write:
    ///
    /// * an ambiguous outcome is sent again with the same token, up to
    ///   [`Holder::ambiguous_retries`] times;
    /// * a refusal is explained: a counter that went backwards is a
    ///   [`Error::TokenRegression`] (and the source raised past it), not a newer holder;
    /// * the outcome is reported for each of `records`: a `tracing` event, and the `metrics`
    ///   counters and latency when that feature is on;
    /// * a batch's holder notes its refusals, except those finding a record where `write`'s
    ///   work is already done ([`FencedWrite::already_done_in`]).
    ///
    /// `write` is what `attempt` writes (for a request of several writes, the one standing for
    /// all: a claim if any of them claims). `attempt` sends the write once with [`Holder::token`] and maps its answer to the core's
    /// errors. Sending it again must be safe by itself (a claim accepts its own token; a
    /// transaction carries a request token): unlike [`Holder::write`], a refused retry is not
    /// read back to be recognised as an earlier success.
    async fn run_write<S: FencedStore + ?Sized, T: RecordOutcomes>(
        &self,
        store: &S,
        records: &[&RecordKey],
        write: &FencedWrite,
        attempt: impl AsyncFnMut() -> Result<T>,
    ) -> Result<T>;

    /// [`Self::run_write`] for a write that cannot be sent again: one made in the caller's
    /// transaction, which is gone with a lost answer. An ambiguous outcome is returned as it
    /// is; the outcome is reported as [`Self::run_write`] does. A refusal is explained only as
    /// far as the source can say at once ([`TokenSource::current_at_once`]): the caller's
    /// transaction may hold the connection the source would wait for, and then the refusal
    /// stays [`Error::Fenced`].
    async fn run_write_once<S: FencedStore + ?Sized, T: RecordOutcomes>(
        &self,
        store: &S,
        records: &[&RecordKey],
        write: &FencedWrite,
        attempt: impl Future<Output = Result<T>>,
    ) -> Result<T>;
}

impl HolderExt for Holder {
    fn new<S: TokenSource + Clone + 'static>(
        resource: &ResourceName,
        token: FencingToken,
        source: &S,
    ) -> Self {
        Self::from_source(resource, token, Arc::new(source.clone()))
    }

    async fn write_by<S, F>(
        &self,
        store: &S,
        key: &RecordKey,
        write: &FencedWrite,
        send: impl FnMut() -> F,
    ) -> Result<Written>
    where
        S: FencedStore + ?Sized,
        F: Future<Output = Result<Written>>,
    {
        let holder = self.admit(store)?;
        let started = Instant::now();
        let result = holder.write_unobserved(store, key, write, send).await;
        holder.observe(store.name(), &[key], write.check(), started, &result);
        self.noted_write(write, result)
    }

    async fn run_write<S: FencedStore + ?Sized, T: RecordOutcomes>(
        &self,
        store: &S,
        records: &[&RecordKey],
        write: &FencedWrite,
        mut attempt: impl AsyncFnMut() -> Result<T>,
    ) -> Result<T> {
        let holder = self.admit(store)?;
        let store = store.name();
        let started = Instant::now();
        let mut retries = 0;
        let result = loop {
            match holder.answered(store, attempt()).await {
                Err(err) if err.is_ambiguous() && retries < holder.ambiguous_retries => {
                    retries += 1;
                    if let Some(first) = records.first() {
                        telemetry::ambiguous_retry(store, first, holder.token, retries);
                    }
                }
                Err(err) => break Err(holder.explain_and_repair(err).await),
                done => break done,
            }
        };
        holder.observe(store, records, write.check(), started, &result);
        self.noted_write(write, result)
    }

    async fn run_write_once<S: FencedStore + ?Sized, T: RecordOutcomes>(
        &self,
        store: &S,
        records: &[&RecordKey],
        write: &FencedWrite,
        attempt: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let holder = self.admit(store)?;
        let store = store.name();
        let started = Instant::now();
        let result = match holder.answered(store, attempt).await {
            Err(err) => Err(holder.explain_one(err, Patience::AtOnce).await),
            done => done,
        };
        holder.observe(store, records, write.check(), started, &result);
        self.noted_write(write, result)
    }
}
