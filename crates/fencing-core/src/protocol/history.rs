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
//! * an epoch counter opens at most one epoch a second per resource ([`may_open_another`]),
//!   which is what makes the bound of one a second true for it.
//!
//! The PostgreSQL source states the same rules in SQL; the DynamoDB source and `fencing-model`
//! run these.

use crate::contract::token_source::RateBound;
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

/// Whether an epoch counter last written as `last` may open another epoch on history `here` at
/// `now_ms`: a second after the last, or on another history (whose raise covers the time).
pub fn may_open_another<H: PartialEq>(last: &BoundCounter<H>, here: &H, now_ms: u64) -> bool {
    last.history != *here || now_ms >= last.written_ms.saturating_add(1000)
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
    fn an_epoch_opens_a_second_after_the_last_or_on_another_history() {
        let last = counter(3, 0, 10_000);
        assert!(!may_open_another(&last, &0, 10_999));
        assert!(may_open_another(&last, &0, 11_000));
        assert!(may_open_another(&last, &1, 10_001));
    }
}
