//! The protocol's rules, as pure decisions: whether a store admits a write, what the write
//! leaves, when a refusal may hide a holder's own earlier success, and when a refusal means
//! the counter went backwards. Every store that decides in the client, `Holder`, and the
//! protocol's model (`fencing-model`) run this same code; nothing here talks to a store.

use crate::contract::store::{FenceCheck, FencedWrite, Record};
use crate::value::error::{Error, FoundFence, Result};
use crate::value::name::{RecordKey, State};
use crate::value::token::FencingToken;

impl FencedWrite {
    /// Decides this write against the record as the store holds it, exactly as the contract
    /// says. Stores that cannot evaluate the condition server-side (an object store that only
    /// compares ETags, an in-memory map) decide with this, under their own atomicity.
    pub fn decide(
        &self,
        store: &str,
        key: &RecordKey,
        token: FencingToken,
        current: Option<&Record>,
    ) -> Result<()> {
        let Some(record) = current else {
            return match (self.check, &self.required_states) {
                (FenceCheck::Claim, None) => Ok(()),
                _ => Err(Error::NotFound {
                    store: store.to_owned(),
                    record: key.clone(),
                }),
            };
        };
        let fence_admits = match self.check {
            FenceCheck::Claim => record.fence.is_none_or(|fence| fence <= token),
            FenceCheck::HolderOnly => record.fence == Some(token),
        };
        if !fence_admits {
            return Err(Error::Fenced {
                store: store.to_owned(),
                record: key.clone(),
                presented: token,
                found: FoundFence::from(record.fence),
            });
        }
        self.decide_state(store, key, token, record.state.as_ref())
    }

    /// Checks only the state condition; for stores whose server checked the fence.
    pub fn decide_state(
        &self,
        store: &str,
        key: &RecordKey,
        token: FencingToken,
        state: Option<&State>,
    ) -> Result<()> {
        match &self.required_states {
            Some(required) if !state.is_some_and(|s| required.contains(s)) => {
                Err(Error::StateMismatch {
                    store: store.to_owned(),
                    record: key.clone(),
                    presented: token,
                    expected: required.clone(),
                    found: state.cloned(),
                })
            }
            _ => Ok(()),
        }
    }

    /// Whether `record` shows this write applied by the holder of `token`: the fence is
    /// `token` and the state and payload are what this write sets.
    ///
    /// After an ambiguous attempt, a retry can be refused because the first attempt landed
    /// (a confirm that finds its own `sent`). Tokens are unique per acquisition, so a record
    /// carrying this holder's fence and exactly this write's changes is this write's own
    /// success, not a rejection. [`crate::Holder::write`] applies this rule for every store.
    pub fn is_reflected_in(&self, token: FencingToken, record: &Record) -> bool {
        record.fence == Some(token)
            && self
                .new_state
                .as_ref()
                .is_none_or(|state| record.state.as_ref() == Some(state))
            && self
                .new_payload
                .as_ref()
                .is_none_or(|payload| &record.payload == payload)
    }

    /// Whether `refusal` of this write may hide this write's own earlier success, so that the
    /// record must be read and checked with [`Self::is_reflected_in`]: always after a retry of
    /// an ambiguous attempt (`after_retry`), and for a holder-only write refused only because
    /// the record is already in the state it sets (the fence, checked first, admitted the
    /// token, so only this holder can have set it).
    pub fn refusal_may_be_own(&self, refusal: &Error, after_retry: bool) -> bool {
        if !refusal.is_rejection() {
            return false;
        }
        after_retry
            || matches!(
                (self.check, refusal),
                (FenceCheck::HolderOnly, Error::StateMismatch { found: Some(found), .. })
                    if self.new_state.as_ref() == Some(found)
            )
    }

    /// The record after this (already decided) write is applied to `current`.
    pub fn apply(&self, key: &RecordKey, token: FencingToken, current: Option<&Record>) -> Record {
        let mut record = current.cloned().unwrap_or_else(|| Record {
            key: key.clone(),
            fence: None,
            state: None,
            payload: Vec::new(),
        });
        if self.check == FenceCheck::Claim {
            record.fence = Some(token);
        }
        if let Some(state) = &self.new_state {
            record.state = Some(state.clone());
        }
        if let Some(payload) = &self.new_payload {
            record.payload = payload.clone();
        }
        record
    }
}

/// The regression rule: a refusal that found `found` means the token source went backwards
/// (rather than that a newer holder exists) when `found` lies above the highest token the
/// source says it has issued.
pub fn is_regression(found: FencingToken, highest_issued: Option<FencingToken>) -> bool {
    highest_issued.is_none_or(|highest| found > highest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::name::ResourceName;

    fn key() -> RecordKey {
        RecordKey::new("r_815").unwrap()
    }

    fn token(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap()
    }

    #[test]
    fn a_write_is_reflected_only_where_its_payload_is_too() {
        let write = FencedWrite::claim().set_payload(b"70.25".to_vec());
        let applied = write.apply(&key(), token(34), None);
        assert!(write.is_reflected_in(token(34), &applied));
        let other = Record {
            payload: b"99.00".to_vec(),
            ..applied.clone()
        };
        assert!(!write.is_reflected_in(token(34), &other));
        assert!(!write.is_reflected_in(token(35), &applied));
    }

    #[test]
    fn only_a_rejection_after_a_retry_or_a_confirm_already_done_may_be_the_writers_own() {
        let sent = State::new("sent").unwrap();
        let fenced = Error::Fenced {
            store: "refunds".into(),
            record: key(),
            presented: token(33),
            found: FoundFence::Fence(token(34)),
        };
        let already_done = Error::StateMismatch {
            store: "refunds".into(),
            record: key(),
            presented: token(34),
            expected: vec![State::new("sending").unwrap()],
            found: Some(sent.clone()),
        };
        let lost = Error::LeaseLost {
            resource: ResourceName::new("settle:m_4471").unwrap(),
            owner: "worker-a".into(),
        };
        let claim = FencedWrite::claim();
        let confirm = FencedWrite::holder_only().set_state(sent);
        assert!(!claim.refusal_may_be_own(&fenced, false));
        assert!(claim.refusal_may_be_own(&fenced, true));
        assert!(!claim.refusal_may_be_own(&already_done, false));
        assert!(confirm.refusal_may_be_own(&already_done, false));
        assert!(!confirm.refusal_may_be_own(&lost, true), "not a rejection");
    }
}
