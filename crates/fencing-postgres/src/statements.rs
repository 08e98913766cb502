//! The statements a store sends, built from the table's names and its key column's type.

use std::borrow::Cow;

use fencing_core::adapter::refused_char_ranges;
use fencing_core::{FenceCheck, State};

use crate::columns::PgValue;
use crate::ident::{PgIdent, PgQualifiedName};
use crate::key::PgKeyType;
use crate::table::PgTable;

/// A column a write also sets: its name, its SQL type as the catalog spells it, its value.
pub(crate) type ExtraColumn<'a> = (&'a PgIdent, &'a str, &'a PgValue);

/// The parameters of every write: `$1` key (or keys) as text, `$2` token, `$3` new state (or
/// NULL), `$4` required states (or NULL for any), `$5` new payload (or NULL; bound even when
/// the table has no payload column), then one per extra column whose value is bound (every
/// value but `NULL` and `now()`, which are written into the statement), in order.
#[derive(Debug)]
pub(crate) struct Statements {
    sql: Sql,
    /// The statements of writes that set no other column, and of reads, built once.
    read: String,
    lock_many: String,
    claim_one: String,
    holder_only_one: String,
    claim_group: String,
    holder_only_group: String,
    insert: String,
    /// Where [`Sql::write_one`] answers only for a write it applied: what a record holds, in
    /// the layout of that answer, to explain a write the statement did not apply.
    explain_one: Option<String>,
}

/// The first release whose `RETURNING` can name the row as it was before an `UPDATE`.
pub(crate) const RETURNS_OLD_FROM: i32 = 180_000;

/// How one record's write is kept from changing several rows when the key column's unique
/// index, there when the schema was read, is dropped later and duplicates come back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OneRowGuard {
    /// The statement names the unique index as the arbiter of an `INSERT … ON CONFLICT` that
    /// inserts nothing: the server plans the statement again once the index is dropped, and
    /// then refuses it (SQLSTATE 42P10) before anything runs, so a statement that runs does so
    /// with the key unique. It costs an executor node, not a second probe of the index.
    Arbiter,
    /// The statement counts the key's rows and applies only where there is one: for a table
    /// where that insert could not go unnoticed or would be refused (a statement-level
    /// `INSERT` trigger or rule, no `INSERT` privilege, a deferrable unique index).
    CountRows,
}

/// The names and key type every statement is built from.
#[derive(Debug)]
struct Sql {
    table: PgQualifiedName,
    key: PgIdent,
    fence: PgIdent,
    state: PgIdent,
    payload: Option<PgIdent>,
    key_type: PgKeyType,
    /// The server's `RETURNING` names old values (PostgreSQL 18 and later).
    returns_old: bool,
    guard: OneRowGuard,
}

impl Statements {
    /// The statements for `table` on a server of `server_version` (`server_version_num`).
    pub(crate) fn new(
        table: &PgTable,
        key_type: PgKeyType,
        server_version: i32,
        guard: OneRowGuard,
    ) -> Self {
        let sql = Sql {
            table: table.name().clone(),
            key: table.key_column().clone(),
            fence: table.fence_column().clone(),
            state: table.state_column().clone(),
            payload: table.payload_column().cloned(),
            key_type,
            returns_old: server_version >= RETURNS_OLD_FROM,
            guard,
        };
        Statements {
            read: sql.read(),
            lock_many: sql.lock_many(),
            claim_one: sql.write_one(FenceCheck::Claim, &[]),
            holder_only_one: sql.write_one(FenceCheck::HolderOnly, &[]),
            claim_group: sql.write_group(FenceCheck::Claim),
            holder_only_group: sql.write_group(FenceCheck::HolderOnly),
            insert: sql.insert(&[]),
            explain_one: sql.answers_only_applied().then(|| sql.explain_one()),
            sql,
        }
    }

    /// See [`Sql::explain_one`]: present where [`Sql::write_one`] answers only for a write it
    /// applied.
    pub(crate) fn explain_one(&self) -> Option<&str> {
        self.explain_one.as_deref()
    }

    /// See [`Sql::write_one`]; built once for a write that sets no other column.
    pub(crate) fn write_one(&self, check: FenceCheck, extras: &[ExtraColumn<'_>]) -> Cow<'_, str> {
        match (check, extras.is_empty()) {
            (FenceCheck::Claim, true) => Cow::Borrowed(&self.claim_one),
            (FenceCheck::HolderOnly, true) => Cow::Borrowed(&self.holder_only_one),
            (_, false) => Cow::Owned(self.sql.write_one(check, extras)),
        }
    }

    /// See [`Sql::insert`]; built once for a write that sets no other column.
    pub(crate) fn insert(&self, extras: &[ExtraColumn<'_>]) -> Cow<'_, str> {
        if extras.is_empty() {
            Cow::Borrowed(&self.insert)
        } else {
            Cow::Owned(self.sql.insert(extras))
        }
    }

    /// See [`Sql::write_together`] (one per batch, so built each time).
    pub(crate) fn write_together(&self, check: FenceCheck, extras: &[ExtraColumn<'_>]) -> String {
        self.sql.write_together(check, extras)
    }

    /// See [`Sql::write_group`]; built once per kind of write.
    pub(crate) fn write_group(&self, check: FenceCheck) -> &str {
        match check {
            FenceCheck::Claim => &self.claim_group,
            FenceCheck::HolderOnly => &self.holder_only_group,
        }
    }

    /// See [`Sql::lock_many`].
    pub(crate) fn lock_many(&self) -> &str {
        &self.lock_many
    }

    /// See [`Sql::read`].
    pub(crate) fn read(&self) -> &str {
        &self.read
    }
}

impl Sql {
    fn fence_value(&self) -> String {
        format!("COALESCE({}, 0)", self.fence)
    }

    fn payload_read(&self) -> String {
        self.payload
            .as_ref()
            .map_or("NULL::bytea".to_owned(), |p| p.to_string())
    }

    /// `SET` items for the extra columns, numbering bound values from `$6`.
    fn extra_values(extras: &[ExtraColumn<'_>]) -> Vec<String> {
        let mut next = 6;
        extras
            .iter()
            .map(|(_, ty, value)| {
                let mut bound = |cast: &str| {
                    let n = next;
                    next += 1;
                    format!("CAST(${n}::{cast} AS {ty})")
                };
                match value {
                    PgValue::Null => "NULL".to_owned(),
                    PgValue::Now => format!("CAST(now() AS {ty})"),
                    PgValue::Text(_) => bound("text"),
                    PgValue::Int(_) => bound("int8"),
                    PgValue::Bool(_) => bound("bool"),
                    PgValue::Bytes(_) => bound("bytea"),
                }
            })
            .collect()
    }

    /// `column` of the table being updated, qualified: a statement that joins the table to a
    /// sub-select of its own must not leave a name to resolve.
    fn target(&self, column: &PgIdent) -> String {
        format!("{}.{column}", self.table)
    }

    fn update(&self, check: FenceCheck, keys: &str, extras: &[ExtraColumn<'_>]) -> String {
        let (head, conditions) = self.update_parts(check, keys, extras);
        format!("{head} WHERE {conditions}")
    }

    /// The fenced `UPDATE` of the rows whose key is `keys` (`= $1::text`, `IN (…)`), as its
    /// `UPDATE … SET …` and its `WHERE` conditions.
    fn update_parts(
        &self,
        check: FenceCheck,
        keys: &str,
        extras: &[ExtraColumn<'_>],
    ) -> (String, String) {
        let (table, fence) = (&self.table, &self.fence);
        let (key, state) = (self.target(&self.key), self.target(&self.state));
        let fence_value = format!("COALESCE({}, 0)", self.target(fence));
        let (set_fence, fence_ok) = match check {
            FenceCheck::Claim => (format!("{fence} = $2, "), format!("{fence_value} <= $2")),
            FenceCheck::HolderOnly => (String::new(), format!("{fence_value} = $2")),
        };
        let payload_set = self
            .payload
            .as_ref()
            .map(|p| format!(", {p} = COALESCE($5, {})", self.target(p)))
            .unwrap_or_default();
        let extra_set: String = extras
            .iter()
            .zip(Self::extra_values(extras))
            .map(|((column, _, _), value)| format!(", {column} = {value}"))
            .collect();
        // A row whose fence or state this crate could not read back is refused inside the
        // statement, so nothing is written over it (the caller gets an `Error::Corrupt` naming it).
        let row_readable = format!(
            "{fence_value} >= 0 AND ({state} IS NULL OR ({state} <> '' AND octet_length({state}) \
             <= {max_state} AND {state} !~ '{refused}'))",
            max_state = State::MAX_BYTES,
            refused = refused_chars_class(),
        );
        (
            format!(
                "UPDATE {table} SET {set_fence}{state_column} = COALESCE($3, {state})\
                 {payload_set}{extra_set}",
                state_column = self.state,
            ),
            format!(
                "{key} {keys} AND {fence_ok} AND ($4::text[] IS NULL OR {state} = ANY($4::text[])) \
                 AND {row_readable}"
            ),
        )
    }

    /// Whether [`Self::write_one`] answers only for a write it applied, leaving a refusal to
    /// [`Self::explain_one`].
    fn answers_only_applied(&self) -> bool {
        self.returns_old || self.guard == OneRowGuard::Arbiter
    }

    /// One record, answered as one row: the old fence and state, whether the update applied,
    /// the new state and payload, and how many rows have the key. The update never changes
    /// several rows, whatever became of the key's unique index ([`OneRowGuard`]).
    ///
    /// Where `RETURNING` names old values, one plain `UPDATE` that answers only when it
    /// applied ([`Self::explain_one`] then says why not). Before that release, with the
    /// [`OneRowGuard::Arbiter`], the `UPDATE` joins the row as the statement's snapshot saw
    /// it and applies only to that version (`xmin`): a row changed meanwhile by a transaction
    /// the write waited for is left alone, and the store, seeing no answer, asks again with a
    /// new snapshot, so old values are never a version older than the one replaced. With
    /// [`OneRowGuard::CountRows`], the row is locked and remembered by a sub-select first,
    /// so a refusal names the fence it met without a second round trip.
    fn write_one(&self, check: FenceCheck, extras: &[ExtraColumn<'_>]) -> String {
        let (table, key, fence, state) = (&self.table, &self.key, &self.fence, &self.state);
        let key_param = format!("= $1::{}", self.key_type.sql());
        let (head, conditions) = self.update_parts(check, &key_param, extras);
        let new_payload = |row: &str| {
            self.payload
                .as_ref()
                .map_or("NULL::bytea".to_owned(), |p| format!("{row}.{p}"))
        };
        let (arbiter, count_rows) = match self.guard {
            OneRowGuard::Arbiter => (
                format!(
                    "WITH fencing_unique AS (INSERT INTO {table} ({key}) SELECT $1::{key_type} \
                     WHERE FALSE ON CONFLICT ({key}) DO NOTHING) ",
                    key_type = self.key_type.sql(),
                ),
                String::new(),
            ),
            OneRowGuard::CountRows => (
                String::new(),
                format!(" AND (SELECT count(*) FROM {table} WHERE {key} {key_param}) = 1"),
            ),
        };
        if self.returns_old {
            // Named, so a table or column called `old` or `new` cannot be mistaken for them.
            return format!(
                "{arbiter}{head} WHERE {conditions}{count_rows} \
                 RETURNING WITH (OLD AS fencing_old, NEW AS fencing_new) \
                 COALESCE(fencing_old.{fence}, 0), fencing_old.{state}, TRUE, \
                 fencing_new.{state}, {new_payload}, 1::int8",
                new_payload = new_payload("fencing_new"),
            );
        }
        if self.guard == OneRowGuard::Arbiter {
            return format!(
                "{arbiter}{head} FROM (SELECT ctid AS fencing_ctid, xmin AS fencing_xmin, \
                 {fence_value} AS fencing_fence, {state} AS fencing_state FROM {table} \
                 WHERE {key} {key_param}) AS fencing_old \
                 WHERE {table}.ctid = fencing_old.fencing_ctid \
                 AND {table}.xmin = fencing_old.fencing_xmin AND {conditions} \
                 RETURNING fencing_old.fencing_fence, fencing_old.fencing_state, TRUE, \
                 {new_state}, {new_payload}, 1::int8",
                fence_value = self.fence_value(),
                new_state = self.target(state),
                new_payload = new_payload(&table.to_string()),
            );
        }
        let update = format!("{head} WHERE {conditions}");
        let payload_read = self.payload_read();
        format!(
            "WITH old AS (SELECT {fence_value} AS fence, {state} AS state FROM {table} \
             WHERE {key} {key_param} FOR UPDATE), \
             upd AS ({update} AND (SELECT count(*) FROM old) = 1 \
             RETURNING {state} AS state, {payload_read} AS payload) \
             SELECT old.fence, old.state, EXISTS (SELECT 1 FROM upd) AS applied, \
             upd.state AS new_state, upd.payload AS new_payload, \
             (SELECT count(*) FROM old) AS matched \
             FROM old LEFT JOIN upd ON TRUE LIMIT 1",
            fence_value = self.fence_value(),
        )
    }

    /// What the record of `$1` holds, in [`Self::write_one`]'s layout, as not applied: for a
    /// write whose plain `UPDATE` answered nothing (refused, or no such row).
    fn explain_one(&self) -> String {
        let (table, key, state) = (&self.table, &self.key, &self.state);
        let key_param = format!("= $1::{}", self.key_type.sql());
        format!(
            "SELECT {fence_value}, {state}, FALSE, NULL::text, NULL::bytea, \
             (SELECT count(*) FROM {table} WHERE {key} {key_param}) \
             FROM {table} WHERE {key} {key_param} LIMIT 1",
            fence_value = self.fence_value(),
        )
    }

    /// Creates a missing record (a claim without a state condition only: `$4` is NULL).
    fn insert(&self, extras: &[ExtraColumn<'_>]) -> String {
        let (table, key, fence, state) = (&self.table, &self.key, &self.fence, &self.state);
        let (payload_col, payload_val) =
            self.payload
                .as_ref()
                .map_or((String::new(), String::new()), |p| {
                    (
                        format!(", {p}"),
                        ", COALESCE($5::bytea, '\\x'::bytea)".to_owned(),
                    )
                });
        let extra_cols: String = extras.iter().map(|(c, _, _)| format!(", {c}")).collect();
        let extra_vals: String = Self::extra_values(extras)
            .iter()
            .map(|v| format!(", {v}"))
            .collect();
        format!(
            "INSERT INTO {table} ({key}, {fence}, {state}{payload_col}{extra_cols}) \
             SELECT $1::{key_type}, $2::bigint, $3::text{payload_val}{extra_vals} \
             WHERE $4::text[] IS NULL \
             ON CONFLICT ({key}) DO NOTHING RETURNING {state}, {payload_read}",
            key_type = self.key_type.sql(),
            payload_read = self.payload_read(),
        )
    }

    /// Locks the rows of `$1` (keys as text) in key order, returning each with the key as
    /// given, its fence, state and payload.
    fn lock_many(&self) -> String {
        let (table, key, state) = (&self.table, &self.key, &self.state);
        let payload = self
            .payload
            .as_ref()
            .map_or("NULL::bytea".to_owned(), |p| format!("t.{p}"));
        format!(
            "SELECT k.given, COALESCE(t.{fence}, 0), t.{state}, {payload} FROM {table} t \
             JOIN unnest($1::text[]) AS k(given) ON t.{key} = k.given::{key_type} \
             ORDER BY t.{key} FOR UPDATE OF t",
            fence = self.fence,
            key_type = self.key_type.sql(),
        )
    }

    /// Many records in one statement, each decided on its own: lock the rows of `$1` (keys
    /// as text) in key order, apply the fenced update to each row whose key matched exactly
    /// one row, and return one row per row found with the columns of [`Self::write_one`]
    /// (old fence and state, applied, new state and payload, rows matching the key) and the
    /// key as given. Keys with no row return nothing.
    fn write_group(&self, check: FenceCheck) -> String {
        let (table, key, state) = (&self.table, &self.key, &self.state);
        let unique = "IN (SELECT fencing_key FROM locked WHERE fencing_given IN \
                      (SELECT fencing_given FROM locked GROUP BY fencing_given HAVING count(*) = 1))";
        let update = self.update(check, unique, &[]);
        format!(
            "WITH locked AS (SELECT k.given AS fencing_given, t.{key} AS fencing_key, \
             COALESCE(t.{fence}, 0) AS fencing_fence, t.{state} AS fencing_state FROM {table} t \
             JOIN unnest($1::text[]) AS k(given) ON t.{key} = k.given::{key_type} \
             ORDER BY t.{key} FOR UPDATE OF t), \
             upd AS ({update} RETURNING {key} AS fencing_key, {state} AS fencing_state, \
             {payload_read} AS fencing_payload) \
             SELECT l.fencing_fence, l.fencing_state, u.fencing_key IS NOT NULL, \
             u.fencing_state, u.fencing_payload, \
             (SELECT count(*) FROM locked m WHERE m.fencing_given = l.fencing_given), \
             l.fencing_given FROM locked l LEFT JOIN upd u ON u.fencing_key = l.fencing_key",
            fence = self.fence,
            key_type = self.key_type.sql(),
            payload_read = self.payload_read(),
        )
    }

    /// The fenced update of every row of `$1` (keys as text), returning one row per change.
    fn write_together(&self, check: FenceCheck, extras: &[ExtraColumn<'_>]) -> String {
        let keys = format!("= ANY($1::{}[])", self.key_type.sql());
        format!("{} RETURNING 1", self.update(check, &keys, extras))
    }

    /// The record of `$1`: its fence, state and payload.
    fn read(&self) -> String {
        format!(
            "SELECT {fence_value}, {state}, {payload_read} FROM {table} WHERE {key} = $1::{key_type}",
            fence_value = self.fence_value(),
            state = self.state,
            payload_read = self.payload_read(),
            table = self.table,
            key = self.key,
            key_type = self.key_type.sql(),
        )
    }
}

/// A regular-expression bracket of every character no state may contain (control and format
/// characters, as the core refuses them), for the SQL check on stored states.
fn refused_chars_class() -> String {
    let escape = |c: char| format!("\\U{:08X}", (c as u32).max(1));
    let mut class = String::from("[");
    for &(low, high) in refused_char_ranges() {
        class.push_str(&escape(low));
        if high != low {
            class.push('-');
            class.push_str(&escape(high));
        }
    }
    class.push(']');
    class
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statements(server_version: i32, guard: OneRowGuard) -> Statements {
        let table = PgTable::new("public", "refunds").unwrap();
        Statements::new(&table, PgKeyType::Text, server_version, guard)
    }

    #[test]
    fn one_write_locks_nothing_first_and_leaves_a_refusal_to_be_explained_apart() {
        for check in [FenceCheck::Claim, FenceCheck::HolderOnly] {
            for (release, guard) in [
                (RETURNS_OLD_FROM, OneRowGuard::Arbiter),
                (RETURNS_OLD_FROM, OneRowGuard::CountRows),
                (RETURNS_OLD_FROM - 1, OneRowGuard::Arbiter),
            ] {
                let statements = statements(release, guard);
                let sql = statements.write_one(check, &[]);
                assert!(!sql.contains("FOR UPDATE"), "{sql}");
                assert_eq!(
                    sql.contains("RETURNING WITH (OLD AS fencing_old"),
                    release >= RETURNS_OLD_FROM,
                    "{sql}"
                );
                assert_eq!(
                    sql.contains("ON CONFLICT (\"id\") DO NOTHING"),
                    guard == OneRowGuard::Arbiter,
                    "{sql}"
                );
                assert_eq!(
                    sql.contains("SELECT count(*)"),
                    guard == OneRowGuard::CountRows,
                    "{sql}"
                );
                assert!(statements.explain_one().is_some());
            }
        }
    }

    #[test]
    fn before_postgresql_18_a_counted_write_locks_its_row_and_explains_itself() {
        for check in [FenceCheck::Claim, FenceCheck::HolderOnly] {
            let statements = statements(RETURNS_OLD_FROM - 1, OneRowGuard::CountRows);
            let sql = statements.write_one(check, &[]);
            assert!(sql.starts_with("WITH old AS (SELECT"), "{sql}");
            assert!(sql.contains("FOR UPDATE"), "{sql}");
            assert!(statements.explain_one().is_none());
        }
    }
}
