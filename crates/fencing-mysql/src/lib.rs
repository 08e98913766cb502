//! MySQL and MariaDB for `fencing`: fenced claims and confirms on any table, a durable token
//! source bound to the server's history and a lease judged by the database's clock, on sqlx.
//!
//! * [`MySqlTable`] names the table and its key, fence, state and payload columns; every
//!   name is checked and quoted here ([`MySqlIdent`]), since sqlx quotes none.
//! * [`MySqlStore`] implements [`fencing_core::FencedStore`]: each write is one transaction
//!   that locks the record's row, decides by the core's rules (so a refusal names the fence
//!   or state that refused it and changes nothing) and applies; a [`MySqlWrite`] also sets
//!   columns of the caller's own in the same statement.
//! * [`MySqlTokenSource`] and [`MySqlLease`] keep counters and leases in tables: durable
//!   tokens bound to the server history that issued them (a promoted replica or a restored
//!   backup never issues a token twice), and expiry judged by the server's clock.
//!   [`MySqlEpochSource`] keeps the epochs of a Redis lease's tokens.
//! * [`MySqlFenceFloor`] reports `MAX(fence)` to seed any token source.
//!
//! MariaDB 10.11 is what the tests run on; the SQL is what MySQL 8 takes too.

mod checkout;
mod columns;
mod ddl;
mod epochs;
mod error;
mod floor;
mod ident;
mod lease;
mod literal;
mod schema;
mod store;
mod table;
mod tokens;

pub use columns::{MySqlColumns, MySqlValue, MySqlWrite};
pub use epochs::MySqlEpochSource;
pub use floor::MySqlFenceFloor;
pub use ident::{MySqlIdent, MySqlQualifiedName};
pub use lease::MySqlLease;
pub use store::MySqlStore;
pub use table::MySqlTable;
pub use tokens::MySqlTokenSource;
