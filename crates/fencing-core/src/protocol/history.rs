//! Counters bound to server histories: how a durable source keeps a failover, a restore or a
//! crash from issuing a token twice, for a counter the new history holds behind as for one it
//! lacks.
//!
//! A durable source keeps each counter with the history that last wrote it (a PostgreSQL
//! timeline and postmaster start, a DynamoDB table's id) and when, and keeps the table itself
//! bound the same way: the binding holds the first token a counter new to the table starts at.
//! Every increment a lost history made happened after the last write the new history kept, at
//! most [`RateBound`] a second, so:
//!
//! * a counter found on another history goes on from its value raised by the bound for every
//!   second since it was written ([`next_token`]);
//! * a counter the new history lacks starts at the binding's start, itself raised the same way
//!   the first time the table is used on the new history ([`binding_here`]): every counter the
//!   lost history created started at the old start after the binding was written;
//! * an epoch counter opens at most one epoch a second per resource, which is what makes the
//!   bound of one a second true for it; and an epoch counter raised onto a history (its row
//!   found on another, or started from a binding raised onto this one) opens nothing until a
//!   second later ([`epoch_step`]). At one a second, two histories that raise the same lost
//!   row within the same second raise it alike (a primary restarted, then a backup of it
//!   restored): holding the raise for a second means a history hands a raised epoch out only
//!   if it outlived that second, so every history after it raises the row higher.
//!
//! The PostgreSQL source states the same rules in SQL; the MySQL and DynamoDB sources and
//! `fencing-model` run these.

use std::time::{Duration, Instant};

use crate::contract::token_source::RateBound;
use crate::value::error::{Error, Failure, RequestEffect, Result};
use crate::value::name::ResourceName;
use crate::value::token::FencingToken;

/// A counter as a durable source keeps it: the highest token issued (for a table's binding:
/// the first token of a counter new to the table), the history that last wrote it, and when
/// (milliseconds since the Unix epoch, on the writer's clock).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BoundCounter<H> {
    /// Its value.
    pub value: FencingToken,
    /// The history that last wrote it.
    pub history: H,
    /// When it was last written.
    pub written_ms: u64,
}

/// The table's `binding` as it stands on history `here` at `now_ms`: itself on its own
/// history; on another, bound to `here` with its start raised by `rate` for every second since
/// it was written, and one more. `None` past `i64::MAX`.
pub fn binding_here<H: PartialEq + Clone>(
    binding: &BoundCounter<H>,
    here: &H,
    now_ms: u64,
    rate: RateBound,
) -> Option<BoundCounter<H>> {
    if binding.history == *here {
        return Some(binding.clone());
    }
    Some(BoundCounter {
        value: rate.raise(binding.value, binding.written_ms, now_ms)?,
        history: here.clone(),
        written_ms: now_ms,
    })
}

/// The next token of a counter found as `counter` (`None`: the history here lacks it) on
/// history `here` at `now_ms`, with the table bound as `binding` ([`binding_here`]): one above
/// it; above it raised by `rate` where it is bound to another history; the binding's start
/// where it is missing. `None` past `i64::MAX`.
pub fn next_token<H: PartialEq>(
    counter: Option<&BoundCounter<H>>,
    binding: &BoundCounter<H>,
    here: &H,
    now_ms: u64,
    rate: RateBound,
) -> Option<FencingToken> {
    match counter {
        None => Some(binding.value),
        Some(counter) if counter.history == *here => counter.value.next(),
        Some(counter) => rate
            .raise(counter.value, counter.written_ms, now_ms)?
            .next(),
    }
}

/// What an epoch counter does for an opening not yet opened, on history `here` at `now_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EpochStep<H> {
    /// Write the counter and hand its value out: the epoch opened.
    Open(BoundCounter<H>),
    /// Write the counter, raised onto this history, and hand nothing out: ask again a second
    /// later (it then opens the next epoch).
    Hold(BoundCounter<H>),
    /// Write no counter: the last epoch was opened (or the row raised, or the binding a
    /// missing row starts from raised) less than a second ago; ask again in this many
    /// milliseconds (1 ..= 1000).
    Wait(u64),
}

/// The step an epoch counter found as `counter` (`None`: the history here lacks it) takes on
/// history `here` at `now_ms`, with the table bound as `binding` ([`binding_here`], at the
/// rate bound [`RateBound::EPOCHS`]):
///
/// * on its own history, the next epoch a second or more after the last ([`EpochStep::Open`]),
///   or [`EpochStep::Wait`] for the rest of that second;
/// * on another history, the row raised by the bound for the time since it was written and
///   held ([`EpochStep::Hold`]);
/// * missing, the binding's start where the binding has been on this history for a second;
///   where it was raised onto it (or made) less than a second ago, [`EpochStep::Wait`] for the
///   rest of that second (the binding itself is written all the same where [`binding_here`]
///   moved it).
///
/// A history that hands out an epoch raised from a lost row (or a lost binding) has
/// outlived the second of that raise, so any later history raises the same row above it and
/// above every epoch opened since. `None` past `i64::MAX`.
pub fn epoch_step<H: PartialEq + Clone>(
    counter: Option<&BoundCounter<H>>,
    binding: &BoundCounter<H>,
    here: &H,
    now_ms: u64,
) -> Option<EpochStep<H>> {
    let written = |value| BoundCounter {
        value,
        history: here.clone(),
        written_ms: now_ms,
    };
    let a_second_after = |written_ms: u64| written_ms.saturating_add(1000);
    Some(match counter {
        Some(last) if last.history == *here => {
            if now_ms < a_second_after(last.written_ms) {
                EpochStep::Wait((a_second_after(last.written_ms) - now_ms).clamp(1, 1000))
            } else {
                EpochStep::Open(written(last.value.next()?))
            }
        }
        Some(lost) => EpochStep::Hold(written(RateBound::EPOCHS.raise(
            lost.value,
            lost.written_ms,
            now_ms,
        )?)),
        None if now_ms < a_second_after(binding.written_ms) => {
            EpochStep::Wait((a_second_after(binding.written_ms) - now_ms).clamp(1, 1000))
        }
        None => EpochStep::Open(written(binding.value)),
    })
}

/// What one try at opening an epoch found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpochTry {
    /// The epoch: opened now, or already opened for the same opening.
    Epoch(FencingToken),
    /// Nothing opened yet ([`EpochStep::Hold`], [`EpochStep::Wait`], or another opening
    /// recorded meanwhile): try again after this long.
    Wait(Duration),
    /// The counter is at the largest epoch.
    Exhausted,
}

/// How long [`open_patiently`] keeps trying: a clock that went back stops openings for as long
/// as it went back.
pub const OPENING_PATIENCE: Duration = Duration::from_secs(10);

/// Opens the epoch of `resource` by `try_open`, waiting as each try asks, for at most
/// [`OPENING_PATIENCE`]: the [`crate::EpochSource::open`] of a source of `store` that answers
/// one try at a time. Past the largest epoch, [`Error::TokenExhausted`].
pub async fn open_patiently<Try: Future<Output = Result<EpochTry>>>(
    resource: &ResourceName,
    store: &str,
    mut try_open: impl FnMut() -> Try,
) -> Result<FencingToken> {
    let started = Instant::now();
    loop {
        match try_open().await? {
            EpochTry::Epoch(epoch) => return Ok(epoch),
            EpochTry::Exhausted => {
                return Err(Error::TokenExhausted {
                    resource: resource.clone(),
                });
            }
            EpochTry::Wait(_) if started.elapsed() > OPENING_PATIENCE => {
                return Err(Error::failed_request(
                    store,
                    RequestEffect::Writes,
                    Failure::Unexpected,
                    "no epoch could be opened for 10 s: each try found one opened (or raised \
                     onto this server history) less than a second before by the database's \
                     clock; has its clock gone back?"
                        .into(),
                ));
            }
            EpochTry::Wait(pause) => tokio::time::sleep(pause).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap()
    }

    fn counter(value: u64, history: u8, written_ms: u64) -> BoundCounter<u8> {
        BoundCounter {
            value: token(value),
            history,
            written_ms,
        }
    }

    #[test]
    fn a_counter_missing_on_a_new_history_starts_above_what_the_lost_one_issued() {
        let rate = RateBound::new(10).unwrap();
        let binding = counter(1, 0, 1_000);
        // On its own history the binding holds; a counter it lacks starts at 1.
        let same = binding_here(&binding, &0, 5_000, rate).unwrap();
        assert_eq!(next_token(None, &same, &0, 5_000, rate), Some(token(1)));
        // On another, 4.5 s later: every counter the lost history created started at 1 after
        // the binding was written and rose at most 10 a second: 1 + 10 · (4.5 + 1).
        let moved = binding_here(&binding, &1, 5_500, rate).unwrap();
        assert_eq!(moved, counter(56, 1, 5_500));
        assert_eq!(next_token(None, &moved, &1, 5_500, rate), Some(token(56)));
    }

    #[test]
    fn a_counter_behind_on_a_new_history_is_raised_and_one_on_its_own_goes_on_by_one() {
        let rate = RateBound::new(10).unwrap();
        let binding = counter(1, 1, 0);
        let kept = counter(7, 0, 2_000);
        assert_eq!(
            next_token(Some(&kept), &binding, &1, 3_000, rate),
            Some(token(28))
        );
        assert_eq!(
            next_token(Some(&kept), &binding, &0, 3_000, rate),
            Some(token(8))
        );
        let top = counter(i64::MAX as u64, 0, 0);
        assert_eq!(next_token(Some(&top), &binding, &0, 0, rate), None);
    }

    #[test]
    fn an_epoch_opens_a_second_after_the_last_on_its_own_history() {
        let binding = counter(1, 0, 0);
        let last = counter(3, 0, 10_000);
        assert_eq!(
            epoch_step(Some(&last), &binding, &0, 10_250),
            Some(EpochStep::Wait(750))
        );
        assert_eq!(
            epoch_step(Some(&last), &binding, &0, 11_000),
            Some(EpochStep::Open(counter(4, 0, 11_000)))
        );
        let top = counter(i64::MAX as u64, 0, 0);
        assert_eq!(epoch_step(Some(&top), &binding, &0, 5_000), None);
    }

    #[test]
    fn an_epoch_raised_onto_a_history_is_held_for_a_second_then_opened_above_the_raise() {
        let lost = counter(3, 0, 10_000);
        let binding = binding_here(&counter(1, 0, 0), &1, 10_400, RateBound::EPOCHS).unwrap();
        // 0.4 s and one second since the row was written: 3 + 2, written, not handed out.
        let held = counter(5, 1, 10_400);
        assert_eq!(
            epoch_step(Some(&lost), &binding, &1, 10_400),
            Some(EpochStep::Hold(held.clone()))
        );
        assert_eq!(
            epoch_step(Some(&held), &binding, &1, 10_900),
            Some(EpochStep::Wait(500))
        );
        assert_eq!(
            epoch_step(Some(&held), &binding, &1, 11_400),
            Some(EpochStep::Open(counter(6, 1, 11_400)))
        );
    }

    #[test]
    fn a_missing_epoch_counter_waits_out_the_first_second_of_its_binding_here() {
        let binding = binding_here(&counter(1, 0, 0), &1, 2_500, RateBound::EPOCHS).unwrap();
        assert_eq!(binding, counter(5, 1, 2_500));
        assert_eq!(
            epoch_step(None, &binding, &1, 2_500),
            Some(EpochStep::Wait(1000))
        );
        assert_eq!(
            epoch_step(None, &binding, &1, 3_200),
            Some(EpochStep::Wait(300))
        );
        assert_eq!(
            epoch_step(None, &binding, &1, 3_500),
            Some(EpochStep::Open(counter(5, 1, 3_500)))
        );
    }

    /// A primary restarted (history 1) raises a lost row and, a second later, opens; a backup
    /// of the lost history restored after that (history 2) raises the same row higher. Had
    /// history 1 opened in the second of its raise, history 2 could raise the row within that
    /// second to the epoch history 1 handed out.
    #[test]
    fn two_histories_that_raise_one_lost_row_never_open_the_same_epoch() {
        let lost = counter(3, 0, 10_000);
        let binding = counter(1, 0, 0);
        for raised_at in [10_000, 10_001, 10_500, 10_999, 14_321] {
            let here = binding_here(&binding, &1, raised_at, RateBound::EPOCHS).unwrap();
            let Some(EpochStep::Hold(held)) = epoch_step(Some(&lost), &here, &1, raised_at) else {
                panic!("a lost row is held");
            };
            let opened_at = raised_at + 1000;
            let Some(EpochStep::Open(first)) = epoch_step(Some(&held), &here, &1, opened_at) else {
                panic!("held rows open a second later");
            };
            // The restore comes after the epoch was handed out: a millisecond is enough.
            let restored_at = opened_at + 1;
            let there = binding_here(&binding, &2, restored_at, RateBound::EPOCHS).unwrap();
            let Some(EpochStep::Hold(raised_again)) =
                epoch_step(Some(&lost), &there, &2, restored_at)
            else {
                panic!("a lost row is held");
            };
            let Some(EpochStep::Open(second)) =
                epoch_step(Some(&raised_again), &there, &2, restored_at + 1000)
            else {
                panic!("held rows open a second later");
            };
            assert!(
                second.value > first.value,
                "raised at {raised_at}: {first:?} then {second:?}"
            );
            // Handed out in the second of the raise, as `next_token` would: a restore a
            // millisecond later (within the same whole second since the row was written)
            // raises the row to the same epoch.
            let at_once = next_token(Some(&lost), &here, &1, raised_at, RateBound::EPOCHS);
            let again = next_token(Some(&lost), &there, &2, raised_at + 1, RateBound::EPOCHS);
            if !(raised_at - lost.written_ms).is_multiple_of(1000) {
                assert_eq!(at_once, again, "raised at {raised_at}");
            }
        }
    }
}
