//! PostgreSQL for `fencing`: fenced claims and confirms on any table, batch claims, a durable
//! token source and a lease judged by the database's clock, on sqlx.
//!
//! * [`PgTable`] names the table and its key, fence, state and payload columns; every
//!   name is checked and quoted here ([`PgIdent`]), since sqlx quotes none.
//! * [`PgStore`] implements [`fencing_core::FencedStore`]: each write is one statement
//!   `UPDATE … WHERE key = $1 AND fence <= $token AND state = ANY(…)` that also returns the
//!   fence and state it met, so a refusal says which fence refused it. Its `*_in` methods
//!   join the caller's own connection or transaction, its `*_with` methods set columns of
//!   the caller's own with the fence, and [`PgStore::write_together`] claims a whole batch in
//!   one statement (docs/adapters.md, "Verbs").
//! * [`PgTokenSource`] and [`PgLease`] keep counters and leases in tables: durable tokens, and
//!   expiry judged by `now()` on the server. [`PgEpochSource`] keeps the epochs of a Redis
//!   lease's tokens.
//! * [`PgFenceFloor`] reports `MAX(fence)` to seed any token source.
//! * [`push_fence_condition`] puts a holder's fence into a statement of your own, and
//!   [`PgStore::explain_unapplied`] says what such a statement met when it changed no row.

mod columns;
mod ddl;
mod decode;
mod epochs;
mod error;
mod floor;
mod ident;
mod key;
mod lease;
mod query;
mod schema;
mod session;
mod statements;
mod store;
mod table;
mod tokens;

pub use columns::{PgColumns, PgValue, PgWrite};
pub use epochs::PgEpochSource;
pub use floor::PgFenceFloor;
pub use ident::{PgIdent, PgQualifiedName};
pub use key::PgKeyType;
pub use lease::PgLease;
#[allow(deprecated)]
pub use query::{push_fence_condition, rows_affected_to_result};
pub use store::{PgStore, PgWrittenTogether};
pub use table::PgTable;
pub use tokens::PgTokenSource;
