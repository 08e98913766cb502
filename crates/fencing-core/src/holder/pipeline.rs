//! A batch's records settled concurrently: claims grouped a bounded window ahead, effects in
//! flight side by side, confirms grouped, under the serial protocol's rules.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;
use tokio::time::Instant;

use crate::contract::store::{FencedStore, Written, check_distinct};
use crate::holder::effect::{EffectOutcome, Lifecycle, SideEffect};
use crate::holder::write::Holder;
use crate::value::error::{Error, Result};
use crate::value::input::{InputKind, InvalidInput};
use crate::value::name::RecordKey;
use crate::value::ttl::Ttl;

/// Settles many records of one store under one fence ([`Holder::pipeline`]): each record is
/// claimed, its side effect performed (or looked up) and confirmed, as [`Holder::run_effect`]
/// does one record, but with records side by side.
///
/// * **Claims** go out in groups ([`Self::group_size`], one [`StoreWrites::write_many`](crate::adapter::StoreWrites::write_many) per
///   group), never more than [`Self::window`] records claimed and not yet confirmed: the
///   window bounds what a takeover after this holder stalls must look up.
/// * **Effects** run [`Self::concurrency`] at a time, each keyed by its record. A record the
///   claim found in flight under an earlier claim is looked up before it is performed.
/// * **Confirms** go out in groups, when a group is full or [`Self::flush_after`] has passed
///   since the oldest unconfirmed effect finished, and whenever nothing else is left to do.
/// * **The first error stops it**: a fence refusal (or any rejection the batch's
///   [`crate::MismatchPolicy`] does not skip), a failed effect, a store error. No claim and
///   no effect starts after it; effects already under way finish and their confirms are
///   sent, still fenced; nothing is retried. A record already done is reported
///   [`EffectOutcome::AlreadyDone`] with nothing sent.
///
/// **What a take-over of a stalled pipeline costs** the next holder: a look-up for each record
/// this holder had claimed and not confirmed (at most [`Self::window`]; a serial job is the
/// window of 1), and a second call to the effect for each call this holder had started that
/// reached the outside world after the next holder's look-up (at most [`Self::concurrency`]:
/// an effect started finishes and ends in a fenced confirm, which the newer claim refuses;
/// its idempotency key makes the second call harmless). Neither can fall to the serial
/// figure with effects side by side: a record claimed ahead cannot be told from one whose
/// call went out without a write per call, so the look-ups are the window's price, and
/// `.window(n)` with `n` the concurrency brings them down to the calls under way, at the cost
/// of claims no longer running ahead of the effects.
///
/// A record claimed and never confirmed (a stop, a crash, a dropped future) stays in flight
/// under this holder's fence, exactly as in the serial protocol: the next holder's claim finds
/// it in flight and looks its effect up before performing it.
///
/// **Dropping the future** cancels every write and effect still under way at that moment:
/// each request was either sent or not, so each record is left pending, in flight under this
/// fence, or done — states the serial protocol produces — and the next holder (or this one
/// running the pipeline again) settles them.
#[must_use = "a pipeline does nothing until it is run"]
pub struct Pipeline<'b, E: SideEffect + ?Sized> {
    /// The fence every request is sent with; it notes nothing.
    holder: Holder,
    /// The holder the pipeline was made from, whose batch (for a batch's holder) notes what
    /// stops the pipeline.
    noting: Holder,
    store: Result<&'b dyn FencedStore>,
    lifecycle: &'b Lifecycle,
    effect: &'b E,
    /// `None`: the lifecycle's claims and confirms, grouped through the store.
    writes: Option<&'b dyn RecordWrites<E::Receipt>>,
    concurrency: usize,
    group_size: usize,
    /// `None`: twice the concurrency, and at least 64.
    window: Option<usize>,
    flush_after: Duration,
}

impl<E: SideEffect + ?Sized> std::fmt::Debug for Pipeline<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("token", &self.holder.token())
            .field("store", &self.store.as_ref().map(|s| s.name()))
            .field("concurrency", &self.concurrency)
            .field("group_size", &self.group_size)
            .field("window", &self.window_size())
            .field("flush_after", &self.flush_after)
            .field("own_writes", &self.writes.is_some())
            .finish_non_exhaustive()
    }
}

/// The claim and confirm of each record of a [`Pipeline`], written by the caller: for writes
/// that carry more than the lifecycle's states (a PostgreSQL row's other columns, the
/// effect's receipt, a ledger entry and a receipt object written before the confirm).
/// [`Pipeline::writes`] sends them one record at a time, side by side, in place of the
/// store's grouped [`StoreWrites::write_many`](crate::adapter::StoreWrites::write_many).
///
/// # Contract
///
/// * `claim` makes [`Lifecycle::claim`]'s write of `key` under `holder`'s token (it may set
///   more with it). What it returns is the store's answer for `key`: on success, the record
///   in flight under that token, or the pipeline stops with [`Error::InvalidInput`] before
///   any effect of it.
/// * `confirm` runs once the effect of `key` happened (or was found), with its receipt, and
///   ends with [`Lifecycle::confirm`]'s holder-only write under `holder`'s token; whatever
///   else it writes goes under the same fence. It returns that confirm's answer.
/// * Both return refusals as the adapters' fence-taking methods do (a fence above everything
///   issued explained as a regression); any error stops the pipeline as a grouped write's
///   would.
#[async_trait]
pub trait RecordWrites<R>: Send + Sync {
    /// Claims `key` under `holder`'s token.
    async fn claim(&self, holder: &Holder, key: &RecordKey) -> Result<Written>;

    /// Makes `key` done under `holder`'s token, its effect's `receipt` in hand.
    async fn confirm(&self, holder: &Holder, key: &RecordKey, receipt: &R) -> Result<Written>;
}

/// What a [`Pipeline`] did: every record it settled, and the error that stopped it, if one
/// did.
#[derive(Debug)]
#[non_exhaustive]
pub struct Settled<R> {
    /// Each record settled, in the order its confirm was answered (records already done in
    /// the order their claims were answered).
    pub outcomes: Vec<(RecordKey, EffectOutcome<R>)>,
    /// The first error, after which nothing new was started. Records claimed and not
    /// settled are in flight under the batch's holder.
    pub error: Option<Error>,
}

impl<R> Settled<R> {
    /// The outcomes if nothing stopped the pipeline, or the error that did.
    pub fn into_result(self) -> Result<Vec<(RecordKey, EffectOutcome<R>)>> {
        match self.error {
            Some(err) => Err(err),
            None => Ok(self.outcomes),
        }
    }
}

impl Holder {
    /// A [`Pipeline`] settling records of `store` through `lifecycle` and `effect`, under
    /// this holder's token. Defaults: 16 effects under way, groups of 32, a window of twice
    /// the concurrency (at least 64 records), confirms flushed 5 ms after the oldest finished
    /// effect.
    ///
    /// Run on a batch's holder ([`crate::FencedBatch::holder`]), its refusals are the batch's:
    /// the first aborts the batch (a mismatch is skipped under
    /// [`crate::MismatchPolicy::Skip`]), and a batch already aborted, or a store outside it,
    /// starts nothing. On any other fence, a record in an unexpected state stops it.
    pub fn pipeline<'p, E: SideEffect + ?Sized>(
        &self,
        store: &'p dyn FencedStore,
        lifecycle: &'p Lifecycle,
        effect: &'p E,
    ) -> Pipeline<'p, E> {
        Pipeline::new(self.clone(), store, lifecycle, effect)
    }
}

/// What one of the pipeline's requests came back with.
enum Answer<R> {
    Claimed(Vec<RecordKey>, Result<Vec<Result<Written>>>),
    Performed(Result<(RecordKey, R, bool)>),
    Confirmed(Vec<(R, bool)>, Vec<RecordKey>, Result<Vec<Result<Written>>>),
}

type UnderWay<'a, R> = FuturesUnordered<Pin<Box<dyn Future<Output = Answer<R>> + Send + 'a>>>;

impl<'b, E: SideEffect + ?Sized> Pipeline<'b, E> {
    /// The longest [`Self::flush_after`] a pipeline accepts: the longest TTL.
    pub const LONGEST_FLUSH_AFTER: Duration = Ttl::MAX.duration();

    fn new(
        noting: Holder,
        store: &'b dyn FencedStore,
        lifecycle: &'b Lifecycle,
        effect: &'b E,
    ) -> Self {
        let admitted = noting.admit(store);
        Pipeline {
            holder: admitted
                .as_ref()
                .map_or_else(|_| noting.clone(), Holder::clone),
            noting,
            store: admitted.map(|_| store),
            lifecycle,
            effect,
            writes: None,
            concurrency: 16,
            group_size: 32,
            window: None,
            flush_after: Duration::from_millis(5),
        }
    }

    /// At most `n` side effects under way at once (1: one after another).
    pub fn concurrency(self, n: usize) -> Self {
        Pipeline {
            concurrency: n,
            ..self
        }
    }

    /// At most `n` records per claim and per confirm request.
    pub fn group_size(self, n: usize) -> Self {
        Pipeline {
            group_size: n,
            ..self
        }
    }

    /// At most `n` records claimed and not yet confirmed at any moment.
    /// (Unless set: twice the concurrency, and at least 64.)
    pub fn window(self, n: usize) -> Self {
        Pipeline {
            window: Some(n),
            ..self
        }
    }

    /// How long a finished effect waits for its group of confirms to fill (at most
    /// [`Self::LONGEST_FLUSH_AFTER`]).
    pub fn flush_after(self, wait: Duration) -> Self {
        Pipeline {
            flush_after: wait,
            ..self
        }
    }

    /// Claims and confirms each record through `writes` rather than the lifecycle's writes
    /// grouped through the store: one request per record, side by side.
    pub fn writes(self, writes: &'b dyn RecordWrites<E::Receipt>) -> Self {
        Pipeline {
            writes: Some(writes),
            ..self
        }
    }

    fn window_size(&self) -> usize {
        self.window
            .unwrap_or_else(|| self.concurrency.saturating_mul(2).max(64))
    }

    fn check(&self, keys: &[RecordKey]) -> Result<(), InvalidInput> {
        let bad = |what: String| Err(InvalidInput::new(InputKind::Write, what));
        if self.concurrency == 0 || self.group_size == 0 {
            return bad("a pipeline needs a concurrency and a group size of at least 1".into());
        }
        if self.window_size() < self.concurrency {
            return bad("a pipeline's window must hold at least its concurrency in records".into());
        }
        if self.flush_after > Self::LONGEST_FLUSH_AFTER {
            return bad(format!(
                "a pipeline's flush_after of {:?} is longer than the longest, {:?} (the longest \
                 TTL: a confirm never waits longer than a lease can last)",
                self.flush_after,
                Self::LONGEST_FLUSH_AFTER
            ));
        }
        check_distinct(keys)
    }

    /// Settles every record of `keys`, in that order of claiming, and returns what it did.
    /// Bad settings or a key given twice are refused before anything is sent
    /// ([`Error::InvalidInput`]).
    ///
    /// Run through a batch or a holder made from a guard, it stops as at a refusal
    /// ([`Error::LeaseLost`]) once the guard [has ended locally](crate::LeaseGuard::has_ended_locally)
    /// with records left to claim or to start: a process stopped past its deadline starts no
    /// new side effect on waking, before any store has refused it. Effects already started
    /// finish and their confirms are sent, fenced as ever.
    ///
    /// It holds every key it is given and returns an outcome for each, so its memory grows
    /// with `keys`, not only with the window: give a job of unbounded size a page at a time,
    /// one `run` per page under the same holder (the harness's scale worker gives pages of
    /// 1,000, and its peak memory is the same for 12,000 refunds as for 1,200,000).
    pub async fn run(self, keys: impl IntoIterator<Item = RecordKey>) -> Settled<E::Receipt> {
        let keys: Vec<RecordKey> = keys.into_iter().collect();
        let checked = self.check(&keys);
        self.settle_checked(checked, keys.into(), VecDeque::new())
            .await
    }

    /// Settles records this holder already claimed, in that order (say, a whole batch
    /// claimed in one statement with `PgStore::write_together`): no claim is sent, and
    /// each effect is looked up first only where its record was in flight *before* that
    /// claim, as [`Holder::run_effect_then`] does with [`crate::EffectStart::Claimed`].
    ///
    /// Each answer must show its record in flight under this pipeline's token, and no
    /// record may come twice; otherwise nothing is started ([`Error::InvalidInput`]). The
    /// window does not apply: every record is claimed already.
    pub async fn run_claimed(
        self,
        claimed: impl IntoIterator<Item = Written>,
    ) -> Settled<E::Receipt> {
        let claimed: VecDeque<Written> = claimed.into_iter().collect();
        let keys: Vec<RecordKey> = claimed.iter().map(|w| w.record.key.clone()).collect();
        let checked = self.check(&keys).and_then(|()| {
            claimed
                .iter()
                .try_for_each(|w| self.holder.check_claimed(&w.record.key, w, self.lifecycle))
        });
        self.settle_checked(checked, VecDeque::new(), claimed).await
    }

    async fn settle_checked(
        self,
        checked: Result<(), InvalidInput>,
        queue: VecDeque<RecordKey>,
        claimed: VecDeque<Written>,
    ) -> Settled<E::Receipt> {
        let mut settled = Settled {
            outcomes: Vec::new(),
            error: None,
        };
        match (&self.store, checked) {
            (Ok(store), Ok(())) => self.settle(*store, queue, claimed, &mut settled).await,
            (_, Err(err)) => settled.error = Some(err.into()),
            (Err(_), Ok(())) => settled.error = self.store.err(),
        }
        settled
    }

    async fn settle(
        &self,
        store: &dyn FencedStore,
        queue: VecDeque<RecordKey>,
        claimed: VecDeque<Written>,
        settled: &mut Settled<E::Receipt>,
    ) {
        let holder = &self.holder;
        let (claim, confirm) = (self.lifecycle.claim(), self.lifecycle.confirm());
        let mut progress = Progress::new(queue, claimed);
        let mut in_flight: UnderWay<'_, E::Receipt> = FuturesUnordered::new();
        loop {
            if settled.error.is_none()
                && !(progress.queue.is_empty() && progress.claimed.is_empty())
                && let Err(ended) = holder.may_start_effects()
            {
                self.stop(settled, ended);
            }
            let stopped = settled.error.is_some();
            if !stopped
                && let Some(group) = progress.next_claims(self.group_size, self.window_size())
            {
                let claim = &claim;
                in_flight.push(Box::pin(async move {
                    let answer = match self.writes {
                        Some(writes) => Ok(self.own_claims(writes, holder, &group).await),
                        None => holder.write_many(store, &group, claim).await,
                    };
                    Answer::Claimed(group, answer)
                }));
            }
            while !stopped && progress.effects < self.concurrency {
                let Some(written) = progress.claimed.pop_front() else {
                    break;
                };
                progress.effects += 1;
                in_flight.push(Box::pin(async move {
                    let done = holder
                        .perform_claimed(store.name(), &written, self.lifecycle, self.effect)
                        .await;
                    let key = written.record.key;
                    Answer::Performed(done.map(|(receipt, found)| (key, receipt, found)))
                }));
            }
            if let Some(group) = progress.next_confirms(self.group_size, self.flush_after, stopped)
            {
                let confirm = &confirm;
                in_flight.push(Box::pin(async move {
                    let keys: Vec<RecordKey> = group.iter().map(|(k, _, _)| k.clone()).collect();
                    let answer = match self.writes {
                        Some(writes) => {
                            let confirms =
                                group.iter().map(|(k, r, _)| writes.confirm(holder, k, r));
                            Ok(join_all(confirms).await)
                        }
                        None => holder.write_many(store, &keys, confirm).await,
                    };
                    let receipts = group.into_iter().map(|(_, r, found)| (r, found)).collect();
                    Answer::Confirmed(receipts, keys, answer)
                }));
            }
            if in_flight.is_empty() {
                // Nothing under way: either everything is settled, or the stop left records
                // claimed and unstarted (in flight under this holder's token, as the protocol allows).
                break;
            }
            let flush_at = progress
                .oldest_performed
                .and_then(|t| t.checked_add(self.flush_after));
            let answer = tokio::select! {
                answer = in_flight.next() => answer.expect("something is under way"),
                () = sleep_until(flush_at), if flush_at.is_some() && !progress.confirming => continue,
            };
            self.take_answer(answer, &mut progress, settled);
        }
    }

    /// Takes one answer into `progress` and its outcomes into `settled`, stopping at an error.
    fn take_answer(
        &self,
        answer: Answer<E::Receipt>,
        progress: &mut Progress<E::Receipt>,
        settled: &mut Settled<E::Receipt>,
    ) {
        match answer {
            Answer::Claimed(group, Err(err)) => {
                progress.open -= group.len();
                progress.claiming = false;
                self.stop(settled, err);
            }
            Answer::Claimed(group, Ok(answers)) => {
                progress.claiming = false;
                for (key, answer) in group.into_iter().zip(answers) {
                    match answer {
                        Ok(written) => progress.claimed.push_back(written),
                        Err(err) if self.lifecycle.is_done(&err) => {
                            progress.open -= 1;
                            settled.outcomes.push((key, EffectOutcome::AlreadyDone));
                        }
                        Err(err) => {
                            progress.open -= 1;
                            self.stop(settled, err);
                        }
                    }
                }
            }
            Answer::Performed(done) => {
                progress.effects -= 1;
                match done {
                    Ok(performed) => {
                        progress.oldest_performed.get_or_insert_with(Instant::now);
                        progress.performed.push(performed);
                    }
                    Err(err) => {
                        progress.open -= 1;
                        self.stop(settled, err);
                    }
                }
            }
            Answer::Confirmed(receipts, keys, answer) => {
                progress.confirming = false;
                progress.open -= keys.len();
                let answers = match answer {
                    Err(err) => return self.stop(settled, err),
                    Ok(answers) => answers,
                };
                for ((key, (receipt, found)), answer) in keys.into_iter().zip(receipts).zip(answers)
                {
                    match answer {
                        Ok(_) if found => settled
                            .outcomes
                            .push((key, EffectOutcome::Recovered(receipt))),
                        Ok(_) => settled
                            .outcomes
                            .push((key, EffectOutcome::Performed(receipt))),
                        Err(err) => self.stop(settled, err),
                    }
                }
            }
        }
    }

    /// Stops the pipeline at `err`, unless its batch leaves the record alone and goes on (a
    /// mismatch under [`crate::MismatchPolicy::Skip`]); the first error stopping it is kept.
    fn stop(&self, settled: &mut Settled<E::Receipt>, err: Error) {
        if let Some(err) = self.noting.note_error(err) {
            settled.error.get_or_insert(err);
        }
    }
}

/// Where a settlement stands between two answers.
struct Progress<R> {
    /// Records not claimed yet.
    queue: VecDeque<RecordKey>,
    /// Records claimed whose effect has not started.
    claimed: VecDeque<Written>,
    /// Effects done and not yet confirmed: the record, the receipt, and whether the effect
    /// was found done already (looked up) rather than performed.
    performed: Vec<(RecordKey, R, bool)>,
    /// When the oldest of `performed` was done.
    oldest_performed: Option<Instant>,
    /// Whether a group of claims is under way.
    claiming: bool,
    /// How many effects are running.
    effects: usize,
    /// Whether a group of confirms is under way.
    confirming: bool,
    /// Records claimed (or being claimed) whose confirm has not been answered.
    open: usize,
}

impl<R> Progress<R> {
    fn new(queue: VecDeque<RecordKey>, claimed: VecDeque<Written>) -> Self {
        Progress {
            open: claimed.len(),
            queue,
            claimed,
            performed: Vec::new(),
            oldest_performed: None,
            claiming: false,
            effects: 0,
            confirming: false,
        }
    }

    /// The next group to claim, if one may go now: none is under way, records are left, and
    /// the window has room (the group is at most `group_size`, within that room).
    fn next_claims(&mut self, group_size: usize, window: usize) -> Option<Vec<RecordKey>> {
        if self.claiming || self.queue.is_empty() || self.open >= window {
            return None;
        }
        let n = group_size.min(window - self.open).min(self.queue.len());
        self.open += n;
        self.claiming = true;
        Some(self.queue.drain(..n).collect())
    }

    /// The next group to confirm, if one should go now: none is under way, and a full group
    /// waits, or the oldest has waited `flush_after`, or the pipeline `stopped`, or nothing
    /// else can come.
    fn next_confirms(
        &mut self,
        group_size: usize,
        flush_after: Duration,
        stopped: bool,
    ) -> Option<Vec<(RecordKey, R, bool)>> {
        // Nothing can add to the finished effects: no claim could start (none left, the
        // pipeline stopped, or the window is full of records waiting for these very
        // confirms) and no effect is running. Waiting for a fuller group would wait forever.
        let idle = !self.claiming && self.effects == 0;
        let due = self
            .oldest_performed
            .is_some_and(|t| t.elapsed() >= flush_after);
        if self.confirming
            || self.performed.is_empty()
            || !(self.performed.len() >= group_size || idle || stopped || due)
        {
            return None;
        }
        let n = group_size.min(self.performed.len());
        let group = self.performed.drain(..n).collect();
        self.oldest_performed = (!self.performed.is_empty()).then(Instant::now);
        self.confirming = true;
        Some(group)
    }
}

impl<E: SideEffect + ?Sized> Pipeline<'_, E> {
    /// Each of `keys` claimed through the caller's `writes`, side by side; an answer that
    /// does not leave its record in flight under this holder's token is refused as the serial
    /// protocol refuses such a claim ([`EffectStart::Claimed`](crate::EffectStart)).
    async fn own_claims(
        &self,
        writes: &dyn RecordWrites<E::Receipt>,
        holder: &Holder,
        keys: &[RecordKey],
    ) -> Vec<Result<Written>> {
        let claims = keys.iter().map(async |key| {
            let written = writes.claim(holder, key).await?;
            holder.check_claimed(key, &written, self.lifecycle)?;
            Ok(written)
        });
        join_all(claims).await
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
