//! Epoch-prefixed tokens: how a counter that can lose its state (Redis without persistence)
//! still never issues a token twice.
//!
//! A token is `epoch · 2^32 + n`. The fast counter holds the whole number and increments it,
//! one round trip per token. The epoch comes from a durable [`EpochSource`] (a PostgreSQL table
//! of epochs) and is taken only when the fast counter is found lost (missing, or bound to
//! another server history) or has used up its epoch's `2^32 − 1` numbers: once per loss, however
//! many clients find it (they name it with one opening). Every epoch taken after a loss is above every
//! epoch in use before it, so every token issued after the loss is above every token issued
//! before it — including tokens whose holders have not written anything yet, which no store's
//! `MAX(fence)` could reveal.
//!
//! The price: one durable write per loss of state (and per `2^32 − 1` tokens), and tokens that
//! are large numbers from the first acquisition on (epoch 1 starts at `2^32 + 1`).

use crate::contract::token_source::EpochSource;
use crate::value::error::{Error, Result};
use crate::value::name::ResourceName;
use crate::value::token::FencingToken;

/// How many low bits of a token count acquisitions within an epoch.
pub const EPOCH_BITS: u32 = 32;

/// The low bits of the last token an epoch may issue: at this value the counter opens a new
/// epoch instead of incrementing into the next epoch's numbers.
const LAST_IN_EPOCH: u64 = (1 << EPOCH_BITS) - 1;

/// The highest epoch whose tokens still fit in `1 ..= i64::MAX`.
pub const MAX_EPOCH: u64 = (i64::MAX as u64) >> EPOCH_BITS;

/// The epoch a counter value or token belongs to (0 for values below `2^32`, e.g. a counter
/// raised to a small floor before any epoch was opened).
pub fn epoch_of(value: FencingToken) -> u64 {
    value.get() >> EPOCH_BITS
}

/// Whether a fast counter at `counter` (`None`: missing) must open a new epoch before it issues
/// its next token.
pub fn must_open_epoch(counter: Option<FencingToken>) -> bool {
    counter.is_none_or(|value| value.get() & LAST_IN_EPOCH == LAST_IN_EPOCH)
}

/// Takes the epoch for the loss `opening` of `resource`'s fast counter from the durable
/// `epochs` (the same epoch for every client that names the same loss), above the epoch of
/// `floor` (the highest fence the protected stores hold, if known), and returns the value to
/// raise the fast counter to: `epoch · 2^32`, whose next token is the epoch's first.
///
/// The fast counter must take that value only while it is still lost under the same
/// `opening`: a client that comes late, after the counter was re-established and lost again,
/// holds an epoch that may have issued tokens since.
pub async fn open_epoch(
    epochs: &dyn EpochSource,
    resource: &ResourceName,
    opening: &str,
    floor: Option<FencingToken>,
) -> Result<FencingToken> {
    let mut epoch = epochs.open(resource, opening).await?;
    if let Some(floor_epoch) = floor.map(epoch_of)
        && epoch.get() <= floor_epoch
    {
        let above = FencingToken::new(floor_epoch + 1).map_err(|_| exhausted(resource))?;
        epoch = epochs.advance_to(resource, above).await?;
    }
    if epoch.get() > MAX_EPOCH {
        return Err(exhausted(resource));
    }
    FencingToken::new(epoch.get() << EPOCH_BITS).map_err(|_| exhausted(resource))
}

/// Before a fast counter is raised to `floor`, raises the durable `epochs` (if the counter
/// has any) to `floor`'s epoch, so that the epoch opened after a later loss lies above every
/// token issued from the floor on. Costs a durable write only for floors at or above `2^32`.
pub async fn cover_floor(
    epochs: Option<&dyn EpochSource>,
    resource: &ResourceName,
    floor: FencingToken,
) -> Result<()> {
    if let (Some(epochs), Ok(epoch)) = (epochs, FencingToken::new(epoch_of(floor))) {
        epochs.advance_to(resource, epoch).await?;
    }
    Ok(())
}

/// The value `advance_to(floor)` raises a fast counter to: `floor`, or — when the counter is
/// lost under `opening` and it holds epoch-prefixed tokens — the start of the loss's epoch,
/// above `floor`'s.
///
/// A lost counter is only ever re-established in a new epoch: `floor` alone (a fence found
/// in a store) may lie below a token issued before the loss whose holder has not written yet,
/// and raising the counter to it would issue that token again. Also covers the floor in the
/// durable epochs ([`cover_floor`]).
pub async fn advance_target(
    epochs: Option<&dyn EpochSource>,
    resource: &ResourceName,
    floor: FencingToken,
    lost_under: Option<&str>,
) -> Result<FencingToken> {
    cover_floor(epochs, resource, floor).await?;
    match (epochs, lost_under) {
        (Some(epochs), Some(opening)) => Ok(open_epoch(epochs, resource, opening, Some(floor))
            .await?
            .max(floor)),
        _ => Ok(floor),
    }
}

fn exhausted(resource: &ResourceName) -> Error {
    Error::TokenExhausted {
        resource: resource.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryEpochSource;

    fn token(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap()
    }

    /// A loss no other call names.
    fn opening() -> String {
        crate::contract::guard::OwnerId::random()
            .as_str()
            .to_owned()
    }

    #[tokio::test]
    async fn clients_that_name_one_loss_open_one_epoch() {
        let epochs = MemoryEpochSource::new();
        let r = ResourceName::new("settle:m_4471").unwrap();
        let first = open_epoch(&epochs, &r, "loss-a", None).await.unwrap();
        let again = open_epoch(&epochs, &r, "loss-a", None).await.unwrap();
        assert_eq!(first, again, "the same loss, the same epoch");
        let next = open_epoch(&epochs, &r, "loss-b", None).await.unwrap();
        assert_eq!(epoch_of(next), epoch_of(first) + 1);
        let back = open_epoch(&epochs, &r, "loss-a", None).await.unwrap();
        assert_eq!(
            epoch_of(back),
            epoch_of(first) + 2,
            "a loss named again after another is a new epoch"
        );
    }

    #[test]
    fn a_counter_opens_an_epoch_when_missing_or_used_up() {
        assert!(must_open_epoch(None));
        assert!(!must_open_epoch(Some(token(1 << EPOCH_BITS))));
        assert!(!must_open_epoch(Some(token((1 << EPOCH_BITS) + 7))));
        assert!(!must_open_epoch(Some(token(LAST_IN_EPOCH - 1))));
        assert!(must_open_epoch(Some(token(LAST_IN_EPOCH))));
        assert!(must_open_epoch(Some(token(
            (3 << EPOCH_BITS) | LAST_IN_EPOCH
        ))));
        assert!(must_open_epoch(Some(FencingToken::MAX)));
    }

    #[tokio::test]
    async fn every_epoch_opened_lies_above_the_last_and_above_the_floor() {
        let epochs = MemoryEpochSource::new();
        let r = ResourceName::new("settle:m_4471").unwrap();
        let first = open_epoch(&epochs, &r, &opening(), None).await.unwrap();
        assert_eq!(first.get(), 1 << EPOCH_BITS);
        let second = open_epoch(&epochs, &r, &opening(), Some(token(5)))
            .await
            .unwrap();
        assert_eq!(second.get(), 2 << EPOCH_BITS);
        let floor = token((9 << EPOCH_BITS) + 12);
        let third = open_epoch(&epochs, &r, &opening(), Some(floor))
            .await
            .unwrap();
        assert_eq!(third.get(), 10 << EPOCH_BITS);
        assert!(third > floor);
    }

    #[tokio::test]
    async fn covering_a_floor_raises_the_durable_epoch() {
        let epochs = MemoryEpochSource::new();
        let r = ResourceName::new("settle:m_4471").unwrap();
        cover_floor(Some(&epochs), &r, token(40)).await.unwrap();
        assert_eq!(
            epochs.current(&r).await.unwrap(),
            None,
            "epoch 0 costs nothing"
        );
        cover_floor(Some(&epochs), &r, token((6 << EPOCH_BITS) + 1))
            .await
            .unwrap();
        assert_eq!(epochs.current(&r).await.unwrap(), Some(token(6)));
        let next = open_epoch(&epochs, &r, &opening(), None).await.unwrap();
        assert_eq!(next.get(), 7 << EPOCH_BITS);
    }

    #[tokio::test]
    async fn the_last_epoch_is_exhausted() {
        let epochs = MemoryEpochSource::new();
        let r = ResourceName::new("settle:m_4471").unwrap();
        epochs.advance_to(&r, token(MAX_EPOCH - 1)).await.unwrap();
        let last = open_epoch(&epochs, &r, &opening(), None).await.unwrap();
        assert_eq!(epoch_of(last), MAX_EPOCH);
        let err = open_epoch(&epochs, &r, &opening(), None).await.unwrap_err();
        assert!(matches!(err, Error::TokenExhausted { .. }), "{err:?}");
        let err = open_epoch(
            &MemoryEpochSource::new(),
            &r,
            &opening(),
            Some(FencingToken::MAX),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, Error::TokenExhausted { .. }), "{err:?}");
    }
}
