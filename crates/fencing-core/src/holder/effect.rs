//! Claim, then the side effect, then confirm: the one safe order for work outside the store.

use async_trait::async_trait;

use crate::contract::store::{FencedStore, FencedWrite, Record, RecordOutcomes, Written};
use crate::holder::write::Holder;
use crate::telemetry;
use crate::value::error::{BoxError, Error, Result};
use crate::value::input::{InputKind, InvalidInput};
use crate::value::name::{RecordKey, State};

/// Something outside every fenced store, made safe by an idempotency key: a payment
/// gateway, an email sender, a webhook.
///
/// The fence cannot see this call, so it must deduplicate on its own: `perform` twice with the
/// same key must not do the thing twice, and `lookup` must find what `perform` did.
#[async_trait]
pub trait SideEffect: Send + Sync {
    /// What the effect returns, e.g. the gateway's refund id.
    type Receipt: Send;

    /// The receipt of an effect already performed under `idempotency_key`, if any.
    async fn lookup(&self, idempotency_key: &RecordKey) -> Result<Option<Self::Receipt>, BoxError>;

    /// Performs the effect for `record` under `idempotency_key`.
    async fn perform(
        &self,
        idempotency_key: &RecordKey,
        record: &Record,
    ) -> Result<Self::Receipt, BoxError>;
}

/// The three states a record moves through: waiting, effect in flight, done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lifecycle {
    pending: State,
    in_flight: State,
    done: State,
}

impl Lifecycle {
    /// A lifecycle with these three state names (they must differ).
    pub fn new(pending: State, in_flight: State, done: State) -> Result<Self, InvalidInput> {
        if pending == in_flight || in_flight == done || pending == done {
            return Err(InvalidInput::new(
                InputKind::State,
                format!("lifecycle states must differ: {pending}, {in_flight}, {done}"),
            ));
        }
        Ok(Lifecycle {
            pending,
            in_flight,
            done,
        })
    }

    /// The refund lifecycle: `pending`, `sending`, `sent`.
    pub fn pending_sending_sent() -> Self {
        let state = |name: &str| State::new(name).expect("a valid state name");
        Lifecycle {
            pending: state("pending"),
            in_flight: state("sending"),
            done: state("sent"),
        }
    }

    /// The state of a record waiting for its effect.
    pub fn pending(&self) -> &State {
        &self.pending
    }

    /// The state of a record whose effect may be under way.
    pub fn in_flight(&self) -> &State {
        &self.in_flight
    }

    /// The state of a record whose effect is recorded.
    pub fn done(&self) -> &State {
        &self.done
    }

    /// The claim: `pending` or `in_flight` (a takeover) to `in_flight`; a record found `done`
    /// is already done ([`FencedWrite::already_done_in`]), not a mismatch.
    pub fn claim(&self) -> FencedWrite {
        FencedWrite::claim()
            .when_state_in([self.pending.clone(), self.in_flight.clone()])
            .set_state(self.in_flight.clone())
            .already_done_in(self.done.clone())
    }

    /// The confirm: `in_flight` to `done`, only by the claimer.
    pub fn confirm(&self) -> FencedWrite {
        FencedWrite::holder_only()
            .when_state_in([self.in_flight.clone()])
            .set_state(self.done.clone())
    }

    pub(crate) fn is_done(&self, err: &Error) -> bool {
        err.found_state() == Some(&self.done)
    }
}

impl Default for Lifecycle {
    fn default() -> Self {
        Self::pending_sending_sent()
    }
}

/// How one record's effect ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EffectOutcome<R> {
    /// This holder performed the effect and confirmed it.
    Performed(R),
    /// The record was in flight under an earlier claim and the effect had already happened:
    /// this holder found it by idempotency key and only confirmed it.
    Recovered(R),
    /// The record was already done; nothing was sent and nothing written.
    AlreadyDone,
}

impl<R> RecordOutcomes for EffectOutcome<R> {}

/// How [`Holder::run_effect_then`] starts: by claiming the record now, or from a claim this
/// holder already made.
#[derive(Clone, Copy, Debug)]
pub enum EffectStart<'a> {
    /// Claim this record now, with the lifecycle's claim.
    Claim(&'a RecordKey),
    /// This holder already claimed the record (say, a whole batch at once) and the store
    /// answered this. The effect is looked up first only if the record was in flight before
    /// that claim.
    Claimed(&'a Written),
}

impl Holder {
    /// Claims `key`, performs `effect` with the record key as idempotency key, and confirms.
    ///
    /// * A record already done returns [`EffectOutcome::AlreadyDone`] without any call.
    /// * A record found in flight (claimed under a lower fence by a holder whose lease ended,
    ///   or by this holder before an ambiguous failure) is taken over, and the effect is first
    ///   looked up by its idempotency key; it is performed only if it did not happen.
    /// * Any rejection is returned as it is; a batch's holder ([`crate::FencedBatch::holder`])
    ///   notes it, and the batch aborts. An effect error is returned as
    ///   [`Error::Effect`] and leaves the record in flight under this holder's token.
    /// * A fence made from a guard that [has ended locally](crate::LeaseGuard::has_ended_locally)
    ///   by the time the effect would start (its deadline passed while the claim was out, or
    ///   its renewal gave up) starts nothing: [`Error::LeaseLost`], the record left in flight
    ///   under this holder's token for the next holder to look up.
    pub async fn run_effect<S, E>(
        &self,
        store: &S,
        key: &RecordKey,
        lifecycle: &Lifecycle,
        effect: &E,
    ) -> Result<EffectOutcome<E::Receipt>>
    where
        S: FencedStore + ?Sized,
        E: SideEffect + ?Sized,
    {
        let holder = self.admit(store)?;
        let confirm = async |_: &E::Receipt| {
            // A confirm whose answer was lost and whose retry finds the record done is
            // recognised as this holder's own by `Holder::write`.
            holder
                .write(store, key, &lifecycle.confirm())
                .await
                .map(drop)
        };
        let outcome = holder
            .run_effect_then(store, EffectStart::Claim(key), lifecycle, effect, confirm)
            .await;
        self.noted(outcome)
    }

    /// [`Self::run_effect`] with a confirm of the caller's own (say, the confirm and a ledger
    /// entry in one transaction of the caller's), and optionally a claim already made.
    ///
    /// `confirm` runs only after the effect happened (or was found), with its receipt; it must
    /// make the record done with a holder-only write under this holder's token
    /// ([`Lifecycle::confirm`]). A record claimed through [`EffectStart::Claimed`] must carry this
    /// fence's token and be in flight, or nothing is called and [`Error::InvalidInput`] says
    /// why.
    pub async fn run_effect_then<S, E, C>(
        &self,
        store: &S,
        claim: EffectStart<'_>,
        lifecycle: &Lifecycle,
        effect: &E,
        confirm: C,
    ) -> Result<EffectOutcome<E::Receipt>>
    where
        S: FencedStore + ?Sized,
        E: SideEffect + ?Sized,
        C: AsyncFnOnce(&E::Receipt) -> Result<()>,
    {
        let holder = self.admit(store)?;
        let outcome = async {
            let claimed_now;
            let claimed = match claim {
                EffectStart::Claim(key) => {
                    match holder.write(store, key, &lifecycle.claim()).await {
                        Err(err) if lifecycle.is_done(&err) => {
                            return Ok(EffectOutcome::AlreadyDone);
                        }
                        other => {
                            claimed_now = other?;
                            &claimed_now
                        }
                    }
                }
                EffectStart::Claimed(written) => {
                    holder.check_claimed(&written.record.key, written, lifecycle)?;
                    written
                }
            };
            let (receipt, was_recovered) = holder
                .perform_claimed(store.name(), claimed, lifecycle, effect)
                .await?;
            confirm(&receipt).await?;
            Ok(if was_recovered {
                EffectOutcome::Recovered(receipt)
            } else {
                EffectOutcome::Performed(receipt)
            })
        }
        .await;
        self.noted(outcome)
    }

    /// Refuses a claim's answer that does not leave `key` in flight under this holder's token.
    pub(crate) fn check_claimed(
        &self,
        key: &RecordKey,
        written: &Written,
        lifecycle: &Lifecycle,
    ) -> Result<(), InvalidInput> {
        let record = &written.record;
        if record.key == *key
            && record.fence == Some(self.token())
            && record.state.as_ref() == Some(lifecycle.in_flight())
        {
            return Ok(());
        }
        Err(InvalidInput::new(
            InputKind::State,
            format!(
                "{:?} is not claimed by token {}: the claim answered {:?} with fence {:?} and \
                 state {:?}, expected {} in flight",
                key.as_str(),
                self.token(),
                record.key.as_str(),
                record.fence.map(|f| f.get()),
                record.state.as_ref().map(State::as_str),
                lifecycle.in_flight()
            ),
        ))
    }

    /// The effect of a record this holder claimed: looked up first if the claim found it in
    /// flight (an earlier claim's effect may have happened), performed if not found. Returns
    /// the receipt and whether it was found rather than performed. Nothing starts once the
    /// fence's guard has ended locally, asked again right before the effect: a slow look-up
    /// may outlast the lease.
    pub(crate) async fn perform_claimed<E: SideEffect + ?Sized>(
        &self,
        store: &str,
        claimed: &Written,
        lifecycle: &Lifecycle,
        effect: &E,
    ) -> Result<(E::Receipt, bool)> {
        self.may_start_effects()?;
        let key = &claimed.record.key;
        let effect_err = |source| Error::Effect {
            record: key.clone(),
            source,
        };
        if claimed.previous_state.as_ref() == Some(lifecycle.in_flight()) {
            telemetry::takeover(store, key, self.token(), claimed.previous_fence);
            let found = effect.lookup(key).await.map_err(effect_err)?;
            telemetry::effect_looked_up(key, found.is_some());
            if let Some(receipt) = found {
                return Ok((receipt, true));
            }
            self.may_start_effects()?;
        }
        let performed = effect.perform(key, &claimed.record).await;
        telemetry::effect_performed(key, performed.as_ref().map(drop));
        Ok((performed.map_err(effect_err)?, false))
    }
}
