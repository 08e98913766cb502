//! DynamoDB for `fencing`: fenced item writes by condition expression, fenced transactions,
//! an atomic-counter token source and a lease that issues its token in the same `UpdateItem`.
//!
//! Every type takes an `aws_sdk_dynamodb::Client` built by the caller, so this crate forces
//! no TLS stack, credentials provider or `aws-config` on anyone.
//!
//! * [`DynamoTable`] names the table, its key (a partition key, optionally a sort key, each a
//!   String, Number or Binary: [`DynamoKeyType`]) and its fence, state and payload attributes.
//! * [`DynamoStore`] implements [`fencing_core::FencedStore`]: each write is one `UpdateItem`
//!   whose condition checks the fence (`attribute_not_exists(#fence) OR #fence <= :token` for a
//!   claim, `#fence = :token` for a holder-only write) and the state, and whose `ALL_OLD`
//!   answer — on success or refusal — names what the item held. [`DynamoStore::transact`]
//!   applies up to 100 fenced writes all or nothing.
//! * [`DynamoTokenSource`] counts with `ADD`, stopping at `i64::MAX`; [`DynamoLease`] takes the
//!   lease and its token in one request, judging expiry on the writers' clocks.
//! * [`DynamoWrite`] sets attributes of your own in the same fenced `UpdateItem`
//!   ([`DynamoStore::write_with`]); [`DynamoStore::read_with`] reads them back.
//! * [`DynamoFenceFloor`] scans for the highest fence, to seed another token source.
//! * [`DynamoFenceCondition`] merges the fence into an `UpdateItem` of your own.

mod attributes;
mod error;
mod expression;
mod floor;
mod item;
mod key;
mod lease;
mod store;
mod table;
mod tokens;

pub use attributes::{DynamoAttributes, DynamoWrite};
pub use expression::{DynamoFenceCondition, MAX_ITEM_BYTES, MAX_STATES};
pub use floor::DynamoFenceFloor;
pub use key::DynamoKeyType;
pub use lease::DynamoLease;
pub use store::{DynamoStore, MAX_TRANSACTION_ITEMS};
pub use table::DynamoTable;
pub use tokens::DynamoTokenSource;
