//! A fenced write that also sets values of the store's own kind (a row's other columns, an
//! item's other attributes) in the one request that checks the fence.

use std::fmt::{self, Debug, Display};

use crate::contract::store::FencedWrite;
use crate::value::input::{InputKind, InvalidInput};

/// What a store can set beside the fence in the same atomic request, named once by its
/// adapter: how it names one (a checked column identifier, an attribute name) and what a
/// value is (a column value, a typed attribute value). An adapter author's trait; a job uses
/// the adapter's alias (`PgWrite`, `DynamoWrite`).
pub trait Extras {
    /// What one is called in messages: `"column"`, `"attribute"`.
    const KIND: &'static str;
    /// How the store names one, once checked.
    type Name: Clone + PartialEq + Debug + Display;
    /// A value of the store's own type.
    type Value: Clone + PartialEq + Debug;

    /// Checks `name` and `value` as the store will take them, before they are set; the table
    /// itself (does it have the column, is it none of the fence's own) is checked later, before
    /// anything is sent.
    fn check(name: &str, value: &Self::Value) -> Result<Self::Name, InvalidInput>;
}

/// A value for a column of a SQL table that a fenced write also sets: what the SQL adapters'
/// writes carry (`PgValue` and `MySqlValue` are this type), each spelling it in its own SQL
/// and converting it to the column's type on the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SqlValue {
    /// SQL `NULL`.
    Null,
    /// The server's current time (PostgreSQL's `now()`, the transaction's start; MySQL's
    /// `NOW(6)`, the statement's).
    Now,
    /// Text, converted to the column's type (so it reaches a uuid, decimal, timestamp, enum or
    /// JSON column in its usual text form).
    Text(String),
    /// A 64-bit integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// Bytes, for a binary column.
    Bytes(Vec<u8>),
}

impl From<&str> for SqlValue {
    fn from(text: &str) -> Self {
        SqlValue::Text(text.to_owned())
    }
}

impl From<String> for SqlValue {
    fn from(text: String) -> Self {
        SqlValue::Text(text)
    }
}

impl From<i64> for SqlValue {
    fn from(n: i64) -> Self {
        SqlValue::Int(n)
    }
}

impl From<bool> for SqlValue {
    fn from(b: bool) -> Self {
        SqlValue::Bool(b)
    }
}

impl From<Vec<u8>> for SqlValue {
    fn from(bytes: Vec<u8>) -> Self {
        SqlValue::Bytes(bytes)
    }
}

/// A [`FencedWrite`] that also sets extras of the store's own kind ([`Extras`]), in the one
/// request that checks the fence: the fence and the change stay one atomic step. Each
/// adapter names it for its store (`PgWrite`, `DynamoWrite`) and takes it in its `write_with`.
pub struct WriteWith<X: Extras> {
    write: FencedWrite,
    extras: Vec<(X::Name, X::Value)>,
}

impl<X: Extras> WriteWith<X> {
    /// `write`, setting nothing else yet.
    pub fn new(write: FencedWrite) -> Self {
        WriteWith {
            write,
            extras: Vec::new(),
        }
    }

    /// Also sets `name` to `value`. A name the store cannot take, a value it cannot hold, or a
    /// name set twice is refused ([`InputKind::Write`] or the store's own kind of input).
    pub fn set(mut self, name: &str, value: impl Into<X::Value>) -> Result<Self, InvalidInput> {
        let value = value.into();
        let name = X::check(name, &value)?;
        if self.extras.iter().any(|(set, _)| *set == name) {
            return Err(InvalidInput::new(
                InputKind::Write,
                format!("{} {name} is set twice in one write", X::KIND),
            ));
        }
        self.extras.push((name, value));
        Ok(self)
    }

    /// The fenced write.
    pub fn write(&self) -> &FencedWrite {
        &self.write
    }

    /// The extras set, in the order given.
    pub fn extras(&self) -> &[(X::Name, X::Value)] {
        &self.extras
    }
}

impl<X: Extras> Clone for WriteWith<X> {
    fn clone(&self) -> Self {
        WriteWith {
            write: self.write.clone(),
            extras: self.extras.clone(),
        }
    }
}

impl<X: Extras> Debug for WriteWith<X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteWith")
            .field("write", &self.write)
            .field(X::KIND, &self.extras)
            .finish()
    }
}

impl<X: Extras> PartialEq for WriteWith<X> {
    fn eq(&self, other: &Self) -> bool {
        self.write == other.write && self.extras == other.extras
    }
}

impl<X: Extras> From<FencedWrite> for WriteWith<X> {
    fn from(write: FencedWrite) -> Self {
        WriteWith::new(write)
    }
}

impl<X: Extras> From<&FencedWrite> for WriteWith<X> {
    fn from(write: &FencedWrite) -> Self {
        WriteWith::new(write.clone())
    }
}

impl<X: Extras> From<&WriteWith<X>> for WriteWith<X> {
    fn from(write: &WriteWith<X>) -> Self {
        write.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upper-case names only, and no empty value.
    enum Shouted {}

    impl Extras for Shouted {
        const KIND: &'static str = "field";
        type Name = String;
        type Value = String;

        fn check(name: &str, value: &String) -> Result<String, InvalidInput> {
            if name.is_empty() || name.chars().any(|c| c.is_lowercase()) || value.is_empty() {
                return Err(InvalidInput::new(InputKind::Write, format!("bad {name:?}")));
            }
            Ok(name.to_owned())
        }
    }

    #[test]
    fn extras_are_checked_and_kept_in_order_and_none_is_set_twice() {
        let write = WriteWith::<Shouted>::new(FencedWrite::claim())
            .set("B", "1")
            .unwrap()
            .set("A", "2")
            .unwrap();
        assert_eq!(
            write.extras(),
            [
                ("B".to_owned(), "1".to_owned()),
                ("A".to_owned(), "2".to_owned())
            ]
        );
        assert!(write.clone().set("lower", "3").is_err());
        assert!(write.clone().set("C", "").is_err());
        let twice = write.clone().set("B", "4").unwrap_err();
        assert!(
            twice.to_string().contains("field B is set twice"),
            "{twice}"
        );
        assert_eq!(WriteWith::from(&write), write);
        assert!(format!("{write:?}").contains("field"));
    }
}
