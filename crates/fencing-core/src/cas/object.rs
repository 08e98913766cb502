//! What an object of a compare-and-swap store holds: a record or a tombstone, and the id of
//! the write that left it.

use std::fmt::{self, Debug};

use crate::contract::store::Record;
use crate::value::random::random_u128;
use crate::value::token::FencingToken;

/// Identifies one write, so that a writer that lost the answer to its put recognises its own
/// write when it reads the object back (a byte-identical write of its own from before would
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

/// What an object holds: a record, or the tombstone a fenced delete leaves (the record is
/// gone, its fence stays, so a stale holder cannot bring it back).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Contents {
    /// A record.
    Record(Record),
    /// A deleted record, and the fence it had.
    Tombstone(Option<FencingToken>),
}

impl Contents {
    /// The record, unless this is a tombstone.
    pub fn record(&self) -> Option<&Record> {
        match self {
            Contents::Record(record) => Some(record),
            Contents::Tombstone(_) => None,
        }
    }

    /// The fence: the record's, or the one the tombstone keeps.
    pub fn fence(&self) -> Option<FencingToken> {
        match self {
            Contents::Record(record) => record.fence,
            Contents::Tombstone(kept) => *kept,
        }
    }
}
