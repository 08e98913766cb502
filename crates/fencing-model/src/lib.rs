//! The fencing protocol as a model, checked exhaustively for small sizes with `stateright`.
//!
//! Workers run the refund job — acquire a lease, then for every record claim it
//! (`pending|sending → sending`), look the effect up if the record was in flight, perform the
//! effect with the record key as idempotency key, and confirm (`sending → sent`) — while the
//! world does everything a real deployment can: leases expire under paused workers, a write's
//! answer or its request is lost, the token counter loses its state, and its store fails over
//! to a replica that did not receive the last acquisition; the durable source of the counter's
//! epochs fails over to a copy kept earlier (on a new history, behind on a resource it had, or
//! without the row of one first used after the copy) or crashes, and several workers find one
//! loss of the counter at once, each opening its epoch in steps others interleave with. A
//! pipelined worker
//! has several records in flight at once (one lane each), and its first refusal stops every
//! lane that has not yet performed its effect, while a lane whose effect is done still sends
//! its confirm, as `Pipeline` does. Every decision the
//! workers and the store make is the library's own code: [`FencedWrite::decide`] and
//! [`FencedWrite::apply`] in the store, the [`Lifecycle`] writes, the retry rules
//! [`FencedWrite::refusal_may_be_own`] and [`FencedWrite::is_reflected_in`] of `Holder::write`,
//! the regression rule [`is_regression`], the epoch rules [`must_open_epoch`],
//! [`open_epoch`] and [`advance_target`] for the counter, which also opens an epoch when it is
//! bound to another server history than the one serving it, and the history rules
//! [`binding_here`], [`next_token`] and [`epoch_step`] for the durable epochs.
//!
//! `docs/protocol.md` states the properties; [`Protocol::properties`] checks them, and each
//! [`Mutation`] breaks one rule to show the checker finds the damage.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use std::sync::Mutex;

use async_trait::async_trait;
use fencing_core::adapter::epoch::{advance_target, must_open_epoch, open_epoch};
use fencing_core::adapter::history::{
    BoundCounter, EpochStep, binding_here, epoch_step, next_token,
};
use fencing_core::adapter::is_regression;
use fencing_core::{
    EpochSource, Error, FenceCheck, FencedWrite, FencingToken, FoundFence, Lifecycle, RateBound,
    Record, RecordKey, ResourceName,
};
use stateright::{Model, Property};

/// A change to one rule of the protocol, to show that the checker catches what it breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// The protocol as shipped.
    None,
    /// The store checks the state but not the fence.
    NoFenceCheck,
    /// A claim needs `fence < token` instead of `fence <= token`.
    ClaimStrictlyBelow,
    /// A holder that takes over a record in flight performs the effect without looking it up.
    NoTakeoverLookup,
    /// A lost counter starts again at 1 (no durable epoch).
    UnseededCounterReset,
    /// A pipelined worker's refusal stops only the lane it struck: the worker's other lanes
    /// go on claiming and performing.
    RefusalDoesNotStopQueued,
    /// The counter issues from whatever it holds, without comparing the server history it is
    /// bound to with the history serving it: a failover to a lagging replica goes unseen.
    IgnoreServerHistory,
    /// The durable epochs have no table binding: an epoch row the new history lacks starts at
    /// 1 again, whatever the lost history opened.
    NoTableBinding,
    /// The durable epochs go on from a row found on another history as it is, without the
    /// raise by the rate bound.
    IgnoreEpochHistory,
    /// Every client that finds the counter lost opens an epoch of its own, as fast as it
    /// likes: no shared opening, no second between epochs.
    EpochsUnbounded,
    /// The durable epochs commit without waiting for the disk: a crash of their store loses
    /// the last epoch opened, on the same history.
    AsyncEpochCommits,
    /// The durable epochs open an epoch raised onto a new history in the same step as the
    /// raise instead of a second later: two histories within one second raise a lost row
    /// alike.
    RaisedEpochOpenedAtOnce,
}

/// The most records one worker has in flight at once.
pub const MAX_LANES: usize = 2;

/// The size of the world and what may go wrong in it.
#[derive(Clone, Copy, Debug)]
pub struct Protocol {
    /// Workers running the job.
    pub workers: u8,
    /// Records in the store.
    pub records: u8,
    /// Acquisitions each worker may make (a job redelivered after an abort).
    pub attempts: u8,
    /// Lease expiries under a live holder.
    pub expiries: u8,
    /// Writes whose answer is lost after the store applied them.
    pub lost_answers: u8,
    /// Writes whose request is lost before the store sees it.
    pub lost_requests: u8,
    /// Restarts of the counter's store that lose the counter and the lease.
    pub counter_losses: u8,
    /// Failovers of the counter's store to a replica that lags: the counter and the lease go
    /// back to what they were before the last acquisition, on a new server history.
    pub failovers: u8,
    /// Records each worker has in flight at once (1: one by one; at most [`MAX_LANES`]).
    /// Lane `l` settles records `l`, `l + lanes`, ….
    pub lanes: u8,
    /// Seconds that may pass (each a step of its own; epochs of a source that can fail over
    /// open at most one a second).
    pub seconds: u8,
    /// Failovers of the durable epochs' store to a copy of it kept earlier, each on a new
    /// history (one copy, restored as often as this).
    pub epoch_failovers: u8,
    /// Crashes of the durable epochs' store, recovered on the same history.
    pub epoch_crashes: u8,
    /// Whether a worker that finds the counter lost opens its epoch in steps of their own
    /// (name the loss, open, establish), which other workers interleave with; `false`: in one
    /// step with its acquisition (for sizes whose subject is not the epochs).
    pub stepwise_openings: bool,
    /// The rule changed, if any.
    pub mutation: Mutation,
}

impl Protocol {
    /// Two workers, two records, two attempts each, and one of every fault.
    pub fn small(mutation: Mutation) -> Self {
        Protocol {
            workers: 2,
            records: 2,
            attempts: 2,
            expiries: 1,
            lost_answers: 1,
            lost_requests: 1,
            counter_losses: 1,
            failovers: 1,
            lanes: 1,
            seconds: 0,
            epoch_failovers: 0,
            epoch_crashes: 0,
            stepwise_openings: true,
            mutation,
        }
    }

    /// Three workers acquiring once each, nothing to write, while the counter and its durable
    /// epochs go through every loss a new history brings: the counter lost twice, the epochs'
    /// store failed over twice to one older copy (a restart, then a backup restored, within a
    /// second or not) and crashed, two seconds passing. (The counter's own failover is checked
    /// at the small size.)
    pub fn histories(mutation: Mutation) -> Self {
        Protocol {
            workers: 3,
            records: 0,
            attempts: 1,
            expiries: 0,
            lost_answers: 0,
            lost_requests: 0,
            counter_losses: 2,
            failovers: 0,
            seconds: 2,
            epoch_failovers: 2,
            epoch_crashes: 1,
            ..Protocol::small(mutation)
        }
    }

    /// Whether workers that find one loss name it alike.
    fn shared_openings(&self) -> bool {
        self.mutation != Mutation::EpochsUnbounded
    }

    /// Whether the durable epochs' store can be failed over or crash: it then opens at most
    /// one epoch a second per resource, which its failovers' raise counts on.
    fn epochs_can_move(&self) -> bool {
        self.epoch_failovers > 0 || self.epoch_crashes > 0
    }

    /// Two pipelined workers, each with both records in flight at once, and one expiry and
    /// one lost answer.
    pub fn pipelined(mutation: Mutation) -> Self {
        Protocol {
            lanes: 2,
            lost_requests: 0,
            counter_losses: 0,
            failovers: 0,
            ..Protocol::small(mutation)
        }
    }
}

/// Where one lane of a worker is in its job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Waiting for the worker to acquire the lease.
    Idle,
    /// About to claim record `n`.
    Claim(u8),
    /// About to look up the effect of record `n`, found in flight.
    Lookup(u8),
    /// About to perform the effect of record `n`.
    Perform(u8),
    /// About to confirm record `n`.
    Confirm(u8),
    /// Done with this acquisition: nothing left, or stopped.
    Done,
    /// The job is over for this worker.
    Finished,
}

/// One record in flight of a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lane {
    step: Step,
    /// The current write was sent again after an ambiguous outcome.
    retried: bool,
    /// An earlier attempt of the current write was applied by the store.
    earlier_applied: bool,
    /// When this lane's claim of its current record was applied.
    claimed_at: u8,
}

/// One worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Worker {
    attempts_left: u8,
    token: Option<FencingToken>,
    /// The counter was found lost: the opening of the loss and, once opened, its epoch.
    opening: Option<(u8, Option<FencingToken>)>,
    lanes: [Lane; MAX_LANES],
    /// One of this acquisition's writes was refused.
    refused: bool,
}

impl Worker {
    /// Whether `lane` may take its next step: a refusal stops every lane that has not
    /// performed its effect (unless mutated); a confirm is still sent.
    fn may_step(&self, lane: usize, mutation: Mutation) -> bool {
        let stopped = self.refused && mutation != Mutation::RefusalDoesNotStopQueued;
        !stopped || matches!(self.lanes[lane].step, Step::Confirm(_))
    }

    /// Whether this acquisition is over: every lane done, or stopped where it stood.
    fn ready_to_release(&self, lanes: u8, mutation: Mutation) -> bool {
        self.token.is_some()
            && self.lanes[..usize::from(lanes)]
                .iter()
                .enumerate()
                .all(|(l, lane)| {
                    lane.step == Step::Done
                        || (lane.step != Step::Idle && !self.may_step(l, mutation))
                })
    }
}

/// What a write's request and answer went through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Delivery {
    /// Request and answer arrived.
    Normal,
    /// The store applied the write; the answer was lost.
    AnswerLost,
    /// The request was lost; the store saw nothing.
    RequestLost,
}

/// One step of the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Worker `w` acquires the lease and a token, or finds the counter lost and names the loss.
    Acquire(u8),
    /// Worker `w` opens the epoch of the loss it found, in the durable epochs.
    OpenEpoch(u8),
    /// Worker `w` re-establishes the counter with its epoch (if it is still lost under the
    /// same opening) and acquires.
    Establish(u8),
    /// Worker `w`'s lane `l` sends its claim or confirm.
    Write(u8, u8, Delivery),
    /// Worker `w`'s lane `l` looks its record's effect up by idempotency key.
    Lookup(u8, u8),
    /// Worker `w`'s lane `l` performs its record's effect.
    Perform(u8, u8),
    /// Worker `w` releases the lease (owner-only).
    Release(u8),
    /// The lease expires under its holder, who does not know.
    Expire,
    /// The counter's store restarts, losing the counter and the lease.
    LoseCounter,
    /// The counter's store fails over to a replica that did not receive the last
    /// acquisition: counter, its binding and lease as they were before it, on a new history.
    FailOver,
    /// A second passes.
    Tick,
    /// A copy of the durable epochs is kept: a standby stops receiving, a backup is taken.
    KeepEpochCopy,
    /// The durable epochs' store fails over to the copy kept, on a new history (the copy
    /// stays: a backup can be restored again).
    FailOverEpochs,
    /// The durable epochs' store crashes and recovers on the same history, with what it had
    /// made durable.
    CrashEpochs,
}

/// What the properties watch for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Violations {
    /// A confirm was accepted from a worker other than the record's last claimer.
    pub confirmed_by_non_claimer: bool,
    /// An effect was performed by a holder whose claim came after the effect was done.
    pub effect_repeated: bool,
    /// A record's fence went down.
    pub fence_went_down: bool,
    /// A claim retried after its first attempt applied, on a record still showing that
    /// attempt, was refused by the store itself.
    pub retried_claim_refused: bool,
    /// A worker sent a claim or performed an effect after one of its writes under the same
    /// token was refused.
    pub worked_after_refusal: bool,
    /// An acquisition was issued a token not above every token issued before it.
    pub token_reissued: bool,
}

/// What a replica that lags one acquisition behind holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Replica {
    counter: Option<u64>,
    bound: Option<u8>,
    lease: Option<(u8, bool)>,
    opening: Option<(u8, u8)>,
}

/// The durable epochs of the one resource, as a table of them holds them: the resource's row
/// (its epoch counter and the opening it was last opened for), the table's binding, and the
/// history serving them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Durable {
    row: Option<(BoundCounter<u8>, Option<u8>)>,
    binding: BoundCounter<u8>,
    history: u8,
}

/// What one opening in the durable epochs found.
enum Opening {
    Epoch(FencingToken),
    /// Another epoch was opened (or the row raised onto this history) less than a second
    /// ago: wait.
    TooSoon,
}

impl Durable {
    /// The epoch for `opening` at `now_ms` under `protocol`'s rules (or its mutation), and
    /// whether this wrote to the table.
    fn open(&mut self, protocol: &Protocol, opening: u8, now_ms: u64) -> (Opening, bool) {
        let rate = RateBound::EPOCHS;
        let shared = protocol.mutation != Mutation::EpochsUnbounded;
        if let Some((last, opened_for)) = &self.row
            && shared
            && *opened_for == Some(opening)
        {
            return (Opening::Epoch(last.value), false);
        }
        let binding = match protocol.mutation {
            Mutation::NoTableBinding => self.binding.clone(),
            _ => binding_here(&self.binding, &self.history, now_ms, rate).expect("small epochs"),
        };
        let row = self.row.as_ref().map(|(row, _)| match protocol.mutation {
            Mutation::IgnoreEpochHistory => BoundCounter {
                history: self.history,
                ..row.clone()
            },
            _ => row.clone(),
        });
        let at_once = || {
            let epoch = next_token(row.as_ref(), &binding, &self.history, now_ms, rate);
            EpochStep::Open(BoundCounter {
                value: epoch.expect("small epochs"),
                history: self.history,
                written_ms: now_ms,
            })
        };
        let step = match shared && protocol.epochs_can_move() {
            true => {
                epoch_step(row.as_ref(), &binding, &self.history, now_ms).expect("small epochs")
            }
            false => at_once(),
        };
        let step = match step {
            EpochStep::Hold(_) if protocol.mutation == Mutation::RaisedEpochOpenedAtOnce => {
                at_once()
            }
            step => step,
        };
        match step {
            EpochStep::Wait(_) => {
                let moved = binding != self.binding;
                self.binding = binding;
                (Opening::TooSoon, moved)
            }
            EpochStep::Hold(held) => {
                self.binding = binding;
                self.row = Some((held, None));
                (Opening::TooSoon, true)
            }
            EpochStep::Open(opened) => {
                self.binding = binding;
                let epoch = opened.value;
                self.row = Some((opened, Some(opening)));
                (Opening::Epoch(epoch), true)
            }
        }
    }

    /// Raises the resource's epoch to at least `floor`.
    fn advance_to(&mut self, floor: FencingToken, now_ms: u64) -> FencingToken {
        match &mut self.row {
            Some((row, _)) => {
                row.value = row.value.max(floor);
                row.value
            }
            None => {
                let counter = BoundCounter {
                    value: floor,
                    history: self.history,
                    written_ms: now_ms,
                };
                self.row = Some((counter, None));
                floor
            }
        }
    }
}

/// The durable epochs as the library's epoch rules ask them, for the regression repair.
#[derive(Debug)]
struct Epochs<'a> {
    durable: Mutex<&'a mut Durable>,
    protocol: &'a Protocol,
    now_ms: u64,
}

#[async_trait]
impl EpochSource for Epochs<'_> {
    async fn open(&self, _: &ResourceName, opening: &str) -> fencing_core::Result<FencingToken> {
        let opening = opening.parse().expect("an opening the model named");
        let mut durable = self.durable.lock().expect("one step at a time");
        match durable.open(self.protocol, opening, self.now_ms).0 {
            Opening::Epoch(epoch) => Ok(epoch),
            Opening::TooSoon => unreachable!("a repair opens no epoch while epochs can move"),
        }
    }

    async fn current(&self, _: &ResourceName) -> fencing_core::Result<Option<FencingToken>> {
        let durable = self.durable.lock().expect("one step at a time");
        Ok(durable.row.as_ref().map(|(row, _)| row.value))
    }

    async fn advance_to(
        &self,
        _: &ResourceName,
        floor: FencingToken,
    ) -> fencing_core::Result<FencingToken> {
        let mut durable = self.durable.lock().expect("one step at a time");
        Ok(durable.advance_to(floor, self.now_ms))
    }
}

/// The world: the store, the lease, the counter, the gateway and the workers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct World {
    records: Vec<Record>,
    last_claimer: Vec<Option<u8>>,
    performed_at: Vec<Option<u8>>,
    lease: Option<(u8, bool)>,
    counter: Option<u64>,
    /// The opening of the counter's loss, named by the first worker that found it lost and
    /// handed to every other until the counter is re-established, with the server history it
    /// was named on (a server on another history names its own: the script compares).
    opening: Option<(u8, u8)>,
    /// How many openings have been named.
    openings: u8,
    durable: Durable,
    /// A copy of the durable epochs kept earlier, which a failover of their store brings
    /// back.
    durable_copy: Option<Durable>,
    /// The durable epochs before their last write, which a crash brings back if that write
    /// was not durable.
    durable_unflushed: Option<Durable>,
    /// Seconds passed, and seconds that may still pass.
    now: u8,
    seconds: u8,
    epoch_failovers: u8,
    epoch_crashes: u8,
    /// The server history serving the counter (a new one at every failover) and the history
    /// the counter is bound to.
    history: u8,
    bound: Option<u8>,
    /// What the lagging replica holds: as things were just before the last acquisition.
    replica: Option<Replica>,
    /// The highest token issued so far.
    highest_issued: u64,
    workers: Vec<Worker>,
    expiries: u8,
    lost_answers: u8,
    lost_requests: u8,
    counter_losses: u8,
    failovers: u8,
    clock: u8,
    /// What went wrong so far.
    pub violations: Violations,
}

impl World {
    /// Now, in milliseconds.
    fn now_ms(&self) -> u64 {
        // The epochs' table was made (its binding written at 0 ms) a second before the world
        // starts: a missing row opens at once rather than being held.
        (u64::from(self.now) + 1) * 1000
    }

    /// The opening of the counter's loss: the one named already, or a new one.
    fn opening(&mut self, shared: bool) -> u8 {
        match self.opening {
            Some((opening, named_on)) if shared && named_on == self.history => opening,
            _ => {
                self.openings += 1;
                self.opening = Some((self.openings, self.history));
                self.openings
            }
        }
    }

    /// Whether every record is done.
    pub fn all_done(&self) -> bool {
        let done = Lifecycle::default().done().clone();
        self.records.iter().all(|r| r.state.as_ref() == Some(&done))
    }

    fn tick(&mut self) -> u8 {
        self.clock = self.clock.saturating_add(1);
        self.clock
    }
}

fn resource() -> ResourceName {
    ResourceName::new("settle:m_4471").expect("a valid resource")
}

/// Runs a future of the in-memory epoch source to its end: it never waits, so one poll does.
fn settled<F: Future>(future: F) -> F::Output {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => unreachable!("an in-memory token source never waits"),
    }
}

fn key(n: u8) -> RecordKey {
    RecordKey::new(format!("r_{n}")).expect("a valid key")
}

const STORE: &str = "refunds";

impl Protocol {
    /// The store's atomic check of `write` on `record`: the library's own, or the mutated rule.
    fn decide(
        &self,
        write: &FencedWrite,
        token: FencingToken,
        record: &Record,
    ) -> Result<(), Error> {
        match self.mutation {
            Mutation::NoFenceCheck => {
                write.decide_state(STORE, &record.key, token, record.state.as_ref())
            }
            Mutation::ClaimStrictlyBelow
                if write.check() == FenceCheck::Claim && record.fence == Some(token) =>
            {
                Err(Error::Fenced {
                    store: STORE.into(),
                    record: record.key.clone(),
                    presented: token,
                    found: FoundFence::Fence(token),
                })
            }
            _ => write.decide(STORE, &record.key, token, Some(record)),
        }
    }

    /// Whether the counter must be re-established before it issues: missing (unless mutated
    /// to start again at 1), its epoch used up, or bound to another server history than the
    /// one serving it (unless mutated to ignore it).
    fn counter_lost(&self, world: &World) -> bool {
        let current = world.counter.and_then(|c| FencingToken::new(c).ok());
        let moved = world.counter.is_some()
            && world.bound != Some(world.history)
            && self.mutation != Mutation::IgnoreServerHistory;
        match world.counter {
            None if self.mutation == Mutation::UnseededCounterReset => false,
            _ => moved || must_open_epoch(current),
        }
    }

    /// Issues the token above `counter`, binding the counter to the history serving it.
    fn issue_from(world: &mut World, counter: u64) -> FencingToken {
        world.bound = Some(world.history);
        let token = FencingToken::new(counter + 1).expect("small tokens");
        world.counter = Some(token.get());
        if token.get() <= world.highest_issued {
            world.violations.token_reissued = true;
        }
        world.highest_issued = world.highest_issued.max(token.get());
        token
    }

    /// The durable epochs as the library's epoch rules ask them, on a copy of `world`'s: the
    /// epoch `open_epoch` takes for `opening` (none: too soon, or the row raised and held),
    /// and the epochs after.
    fn open_in(&self, world: &World, opening: u8) -> (Option<FencingToken>, Durable) {
        let mut durable = world.durable.clone();
        if let (Opening::TooSoon, _) = durable.open(self, opening, world.now_ms()) {
            return (None, durable);
        }
        let mut durable = world.durable.clone();
        let epochs = Epochs {
            durable: Mutex::new(&mut durable),
            protocol: self,
            now_ms: world.now_ms(),
        };
        let start = settled(open_epoch(&epochs, &resource(), &opening.to_string(), None));
        (Some(start.expect("an epoch")), durable)
    }

    /// Keeps the durable epochs a step left, and the ones before it for a crash that loses
    /// the step's write.
    fn durable_step(world: &mut World, after: Durable) {
        if after != world.durable {
            world.durable_unflushed = Some(std::mem::replace(&mut world.durable, after));
        }
    }

    /// The library's repair after a regression: `advance_to` the fence found.
    fn repair(&self, world: &mut World, refusal: &Error) {
        let Error::Fenced {
            found: FoundFence::Fence(found),
            ..
        } = refusal
        else {
            return;
        };
        let highest = world.counter.and_then(|c| FencingToken::new(c).ok());
        if !is_regression(*found, highest) {
            return;
        }
        let durable = self.mutation != Mutation::UnseededCounterReset;
        let lost_under = (durable && world.counter.is_none())
            .then(|| world.opening(self.shared_openings()).to_string());
        let mut epochs_after = world.durable.clone();
        let epochs = Epochs {
            durable: Mutex::new(&mut epochs_after),
            protocol: self,
            now_ms: world.now_ms(),
        };
        let source = durable.then_some(&epochs as &dyn EpochSource);
        let target = settled(advance_target(
            source,
            &resource(),
            *found,
            lost_under.as_deref(),
        ))
        .expect("a target");
        Self::durable_step(world, epochs_after);
        if lost_under.is_some() {
            // Re-established: the loss is over, as the script deletes its opening.
            world.opening = None;
        }
        world.counter = Some(world.counter.unwrap_or(0).max(target.get()));
    }

    /// The lane's first record, or nothing for a lane beyond the records.
    fn first_record(&self, lane: u8) -> Step {
        if lane < self.records {
            Step::Claim(lane)
        } else {
            Step::Done
        }
    }

    fn next_record(&self, n: u8) -> Step {
        if n + self.lanes < self.records {
            Step::Claim(n + self.lanes)
        } else {
            Step::Done
        }
    }

    /// Worker `w` acquires the lease with the next token, and its lanes start again; or finds
    /// the counter lost and names the loss, to open its epoch next.
    fn acquire(&self, world: &mut World, w: u8) {
        if self.counter_lost(world) {
            let opening = world.opening(self.shared_openings());
            world.workers[usize::from(w)].opening = Some((opening, None));
            if !self.stepwise_openings {
                let (start, after) = self.open_in(world, opening);
                Self::durable_step(world, after);
                world.workers[usize::from(w)].opening = Some((opening, start));
                self.establish(world, w);
            }
            return;
        }
        let counter = world.counter.unwrap_or(0);
        self.acquired(world, w, counter);
    }

    /// Worker `w` re-establishes the counter at the start of its epoch, if it is still lost
    /// under the opening the epoch was opened for, and acquires; or, the lease taken meanwhile,
    /// stops; or, the counter lost again since, names the new loss.
    fn establish(&self, world: &mut World, w: u8) {
        let Some((opening, Some(start))) = world.workers[usize::from(w)].opening else {
            return;
        };
        let worker = &mut world.workers[usize::from(w)];
        worker.opening = None;
        if world.lease.is_some_and(|(_, live)| live) {
            // Held by another by now: this acquisition gives up (`LeaseBusy`).
            worker.attempts_left -= 1;
            if worker.attempts_left == 0 {
                for lane in &mut worker.lanes {
                    lane.step = Step::Finished;
                }
            }
            return;
        }
        if !self.counter_lost(world) {
            let counter = world.counter.unwrap_or(0);
            return self.acquired(world, w, counter);
        }
        if self.shared_openings() && world.opening != Some((opening, world.history)) {
            let opening = world.opening(true);
            world.workers[usize::from(w)].opening = Some((opening, None));
            return;
        }
        world.opening = None;
        let counter = world.counter.unwrap_or(0).max(start.get());
        self.acquired(world, w, counter);
    }

    /// Worker `w` takes the lease with the token above `counter`.
    fn acquired(&self, world: &mut World, w: u8, counter: u64) {
        if world.failovers > 0 {
            world.replica = Some(Replica {
                counter: world.counter,
                bound: world.bound,
                lease: world.lease,
                opening: world.opening,
            });
        }
        let token = Self::issue_from(world, counter);
        world.lease = Some((w, true));
        let worker = &mut world.workers[usize::from(w)];
        worker.attempts_left -= 1;
        worker.token = Some(token);
        worker.refused = false;
        for (l, lane) in (0u8..self.lanes).zip(&mut worker.lanes) {
            lane.step = self.first_record(l);
        }
    }

    /// Worker `w`'s lane `l` performs the effect of its record: a second effect of a record
    /// already performed before this lane's claim is a violation.
    fn perform(world: &mut World, w: u8, l: u8) {
        let worker = world.workers[usize::from(w)];
        let lane = worker.lanes[usize::from(l)];
        let Step::Perform(n) = lane.step else {
            return;
        };
        if worker.refused {
            world.violations.worked_after_refusal = true;
        }
        let i = usize::from(n);
        match world.performed_at[i] {
            Some(at) if at < lane.claimed_at => world.violations.effect_repeated = true,
            Some(_) => {}
            None => world.performed_at[i] = Some(world.tick()),
        }
        world.workers[usize::from(w)].lanes[usize::from(l)].step = Step::Confirm(n);
    }

    /// Worker `w` releases the lease (only its own, still live) and stops, or waits to acquire
    /// again after a refusal while it has attempts left.
    fn release(world: &mut World, w: u8) {
        if world.lease == Some((w, true)) {
            world.lease = None;
        }
        let worker = &mut world.workers[usize::from(w)];
        let step = if worker.refused && worker.attempts_left > 0 {
            Step::Idle
        } else {
            Step::Finished
        };
        for lane in &mut worker.lanes {
            lane.step = step;
            lane.retried = false;
            lane.earlier_applied = false;
        }
        worker.token = None;
    }

    /// What a write the store applied changes: the record, and the checks that watch it (a
    /// fence that went down, a confirm by a worker whose claim is not the last).
    fn applied(
        world: &mut World,
        (w, l): (u8, u8),
        i: usize,
        write: &FencedWrite,
        token: FencingToken,
        before: &Record,
    ) {
        let after = write.apply(&before.key, token, Some(before));
        if after.fence < before.fence {
            world.violations.fence_went_down = true;
        }
        world.records[i] = after;
        match write.check() {
            FenceCheck::Claim => {
                world.last_claimer[i] = Some(w);
                let lane = &world.workers[usize::from(w)].lanes[usize::from(l)];
                if !lane.earlier_applied {
                    let at = world.tick();
                    world.workers[usize::from(w)].lanes[usize::from(l)].claimed_at = at;
                }
            }
            FenceCheck::HolderOnly => {
                if world.last_claimer[i] != Some(w) {
                    world.violations.confirmed_by_non_claimer = true;
                }
            }
        }
    }

    /// Worker `w`'s lane `l` sends the write of its step.
    fn write(&self, world: &mut World, w: u8, l: u8, delivery: Delivery) {
        let lifecycle = Lifecycle::default();
        let (wi, li) = (usize::from(w), usize::from(l));
        let worker = world.workers[wi];
        let lane = worker.lanes[li];
        let (n, write) = match lane.step {
            Step::Claim(n) => (n, lifecycle.claim()),
            Step::Confirm(n) => (n, lifecycle.confirm()),
            _ => return,
        };
        let i = usize::from(n);
        let token = worker.token.expect("a worker writes under a token");
        if write.check() == FenceCheck::Claim && worker.refused {
            world.violations.worked_after_refusal = true;
        }
        let before = world.records[i].clone();
        let decided = self.decide(&write, token, &before);
        let applied = delivery != Delivery::RequestLost && decided.is_ok();
        if applied {
            Self::applied(world, (w, l), i, &write, token, &before);
        }
        let lane = &mut world.workers[wi].lanes[li];
        if delivery != Delivery::Normal {
            // Ambiguous: `Holder::write` sends the same write again.
            lane.retried = true;
            lane.earlier_applied |= applied;
            return;
        }
        let (retried, earlier_applied) = (lane.retried, lane.earlier_applied);
        lane.retried = false;
        lane.earlier_applied = false;
        let previous_state = match decided {
            Ok(()) => before.state.clone(),
            Err(refusal) => {
                // The record still shows this claim's first attempt, and the store refused the
                // same claim again: the retry was not idempotent.
                if write.check() == FenceCheck::Claim
                    && retried
                    && earlier_applied
                    && write.is_reflected_in(token, &before)
                {
                    world.violations.retried_claim_refused = true;
                }
                let now = &world.records[i];
                if write.refusal_may_be_own(&refusal, retried) && write.is_reflected_in(token, now)
                {
                    // This write's own earlier attempt: reported applied, as the record is now.
                    now.state.clone()
                } else if matches!(&refusal, Error::StateMismatch { found: Some(s), .. }
                    if write.check() == FenceCheck::Claim && s == lifecycle.done())
                {
                    // Already done: `run_effect` moves on without a call.
                    world.workers[wi].lanes[li].step = self.next_record(n);
                    return;
                } else {
                    self.repair(world, &refusal);
                    let worker = &mut world.workers[wi];
                    worker.refused = true;
                    worker.lanes[li].step = Step::Done;
                    return;
                }
            }
        };
        world.workers[wi].lanes[li].step = match write.check() {
            FenceCheck::Claim
                if previous_state.as_ref() == Some(lifecycle.in_flight())
                    && self.mutation != Mutation::NoTakeoverLookup =>
            {
                Step::Lookup(n)
            }
            FenceCheck::Claim => Step::Perform(n),
            FenceCheck::HolderOnly => self.next_record(n),
        };
    }
}

impl Model for Protocol {
    type State = World;
    type Action = Action;

    fn init_states(&self) -> Vec<World> {
        let pending = Lifecycle::default().pending().clone();
        let records = (0..self.records)
            .map(|n| Record {
                key: key(n),
                fence: None,
                state: Some(pending.clone()),
                payload: Vec::new(),
            })
            .collect();
        assert!(
            (1..=MAX_LANES).contains(&usize::from(self.lanes)),
            "1 to {MAX_LANES} lanes"
        );
        let lane = Lane {
            step: Step::Idle,
            retried: false,
            earlier_applied: false,
            claimed_at: 0,
        };
        let worker = Worker {
            attempts_left: self.attempts,
            token: None,
            opening: None,
            lanes: [lane; MAX_LANES],
            refused: false,
        };
        vec![World {
            records,
            last_claimer: vec![None; usize::from(self.records)],
            performed_at: vec![None; usize::from(self.records)],
            lease: None,
            counter: None,
            opening: None,
            openings: 0,
            durable: Durable {
                row: None,
                binding: BoundCounter {
                    value: FencingToken::MIN,
                    history: 0,
                    written_ms: 0,
                },
                history: 0,
            },
            durable_copy: None,
            durable_unflushed: None,
            now: 0,
            seconds: self.seconds,
            epoch_failovers: self.epoch_failovers,
            epoch_crashes: self.epoch_crashes,
            history: 0,
            bound: None,
            replica: None,
            highest_issued: 0,
            workers: vec![worker; usize::from(self.workers)],
            expiries: self.expiries,
            lost_answers: self.lost_answers,
            lost_requests: self.lost_requests,
            counter_losses: self.counter_losses,
            failovers: self.failovers,
            clock: 0,
            violations: Violations::default(),
        }]
    }

    fn actions(&self, world: &World, actions: &mut Vec<Action>) {
        let lease_free = world.lease.is_none_or(|(_, live)| !live);
        for (w, worker) in (0u8..).zip(&world.workers) {
            let idle = worker.lanes[0].step == Step::Idle;
            match worker.opening {
                None if idle && worker.attempts_left > 0 && lease_free => {
                    actions.push(Action::Acquire(w));
                }
                Some((opening, None)) => {
                    let (start, after) = self.open_in(world, opening);
                    if start.is_some() || after != world.durable {
                        actions.push(Action::OpenEpoch(w));
                    }
                }
                Some((_, Some(_))) => actions.push(Action::Establish(w)),
                _ => {}
            }
            if worker.ready_to_release(self.lanes, self.mutation) {
                actions.push(Action::Release(w));
                continue;
            }
            for (l, lane) in (0u8..self.lanes).zip(&worker.lanes) {
                if !worker.may_step(usize::from(l), self.mutation) {
                    continue;
                }
                match lane.step {
                    Step::Claim(_) | Step::Confirm(_) => {
                        actions.push(Action::Write(w, l, Delivery::Normal));
                        if world.lost_answers > 0 {
                            actions.push(Action::Write(w, l, Delivery::AnswerLost));
                        }
                        if world.lost_requests > 0 {
                            actions.push(Action::Write(w, l, Delivery::RequestLost));
                        }
                    }
                    Step::Lookup(_) => actions.push(Action::Lookup(w, l)),
                    Step::Perform(_) => actions.push(Action::Perform(w, l)),
                    Step::Idle | Step::Done | Step::Finished => {}
                }
            }
        }
        if world.expiries > 0 && world.lease.is_some_and(|(_, live)| live) {
            actions.push(Action::Expire);
        }
        if world.counter_losses > 0 && world.counter.is_some() {
            actions.push(Action::LoseCounter);
        }
        if world.failovers > 0 && world.replica.is_some() {
            actions.push(Action::FailOver);
        }
        if world.seconds > 0 {
            actions.push(Action::Tick);
        }
        if world.epoch_failovers > 0 {
            actions.push(match world.durable_copy {
                None => Action::KeepEpochCopy,
                Some(_) => Action::FailOverEpochs,
            });
        }
        if world.epoch_crashes > 0 && world.durable_unflushed.is_some() {
            actions.push(Action::CrashEpochs);
        }
    }

    fn next_state(&self, world: &World, action: Action) -> Option<World> {
        let mut next = world.clone();
        match action {
            Action::Acquire(w) => self.acquire(&mut next, w),
            Action::OpenEpoch(w) => {
                let worker = &next.workers[usize::from(w)];
                let Some((opening, None)) = worker.opening else {
                    return None;
                };
                let (start, after) = self.open_in(&next, opening);
                if start.is_none() && after == next.durable {
                    return None;
                }
                Self::durable_step(&mut next, after);
                if let Some(start) = start {
                    next.workers[usize::from(w)].opening = Some((opening, Some(start)));
                }
            }
            Action::Establish(w) => self.establish(&mut next, w),
            Action::Tick => {
                next.seconds -= 1;
                next.now += 1;
            }
            Action::KeepEpochCopy => next.durable_copy = Some(next.durable.clone()),
            Action::FailOverEpochs => {
                let mut copy = next.durable_copy.clone()?;
                next.epoch_failovers -= 1;
                copy.history = next.durable.history + 1;
                next.durable = copy;
                next.durable_unflushed = None;
            }
            Action::CrashEpochs => {
                next.epoch_crashes -= 1;
                let before = next.durable_unflushed.take()?;
                if self.mutation == Mutation::AsyncEpochCommits {
                    next.durable = before;
                }
            }
            Action::Write(w, l, delivery) => {
                match delivery {
                    Delivery::AnswerLost => next.lost_answers -= 1,
                    Delivery::RequestLost => next.lost_requests -= 1,
                    Delivery::Normal => {}
                }
                self.write(&mut next, w, l, delivery);
            }
            Action::Lookup(w, l) => {
                let lane = &mut next.workers[usize::from(w)].lanes[usize::from(l)];
                if let Step::Lookup(n) = lane.step {
                    lane.step = if next.performed_at[usize::from(n)].is_some() {
                        Step::Confirm(n)
                    } else {
                        Step::Perform(n)
                    };
                }
            }
            Action::Perform(w, l) => Self::perform(&mut next, w, l),
            Action::Release(w) => Self::release(&mut next, w),
            Action::Expire => {
                next.expiries -= 1;
                next.lease = next.lease.map(|(owner, _)| (owner, false));
            }
            Action::LoseCounter => {
                next.counter_losses -= 1;
                next.counter = None;
                next.opening = None;
                next.lease = None;
            }
            Action::FailOver => {
                let replica = next.replica.take()?;
                next.failovers -= 1;
                next.counter = replica.counter;
                next.bound = replica.bound;
                next.lease = replica.lease;
                next.opening = replica.opening;
                next.history += 1;
            }
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "no record confirmed by a worker other than its claimer",
                |_, w: &World| !w.violations.confirmed_by_non_claimer,
            ),
            Property::always(
                "no effect performed by a holder that claimed after it was done",
                |_, w: &World| !w.violations.effect_repeated,
            ),
            Property::always("a fence never goes down", |_, w: &World| {
                !w.violations.fence_went_down
            }),
            Property::always(
                "a claim retried after its first attempt applied is accepted by the store",
                |_, w: &World| !w.violations.retried_claim_refused,
            ),
            Property::always(
                "no claim and no effect after a refusal under the same token",
                |_, w: &World| !w.violations.worked_after_refusal,
            ),
            Property::always(
                "every token issued is above every token issued before it",
                |_, w: &World| !w.violations.token_reissued,
            ),
            Property::eventually("every record ends done", |_, w: &World| w.all_done()),
        ]
    }
}
