//! What the catalog says about a store's table, read once before the first write: that the
//! table and its columns exist (and, when not, whether Postgres folded a name), their types,
//! and that the key column is unique.

use std::collections::HashMap;

use fencing_core::{InputKind, InvalidInput};
use sqlx::Row;
use sqlx::postgres::PgRow;

use crate::columns::PgWrite;
use crate::error::PgFailure;
use crate::ident::PgIdent;
use crate::key::PgKeyType;
use crate::statements::{ExtraColumn, OneRowGuard, Statements};
use crate::table::PgTable;

/// `$1`: the table as `"schema"."name"`; `$2` and `$4`: its schema and name as given; `$3`:
/// the key column. Whether the table exists, the tables whose names differ from it in case
/// only (a table created with quotes, or named here without the case it was created with), its columns
/// with their type OIDs and SQL types, and whether a unique index (or primary key) of exactly
/// the key column, valid, without predicate or expression, covers it; the server's release
/// (`server_version_num`), which decides the statements; and whether a write may name that
/// index as the arbiter of an insert that inserts nothing ([`OneRowGuard::Arbiter`]): the
/// index is not deferrable, the session may insert into the table, and no statement-level
/// `INSERT` trigger or `INSERT` rule would see such an insert.
pub(crate) const INSPECT: &str = "WITH cols AS (SELECT a.attname::text AS name, \
     a.atttypid::int8 AS oid, format_type(a.atttypid, a.atttypmod) AS sql_type, a.attnum \
     FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 \
     AND NOT a.attisdropped), \
     key_indexes AS (SELECT i.indimmediate AS immediate FROM pg_index i \
     JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] \
     WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indisvalid \
     AND i.indnkeyatts = 1 AND i.indpred IS NULL AND i.indexprs IS NULL AND a.attname = $3) \
     SELECT to_regclass($1) IS NOT NULL, \
     ARRAY(SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c \
     JOIN pg_namespace n ON n.oid = c.relnamespace WHERE lower(n.nspname) = lower($2) \
     AND lower(c.relname) = lower($4) AND c.relkind IN ('r', 'p', 'v', 'm', 'f') \
     ORDER BY 1), \
     ARRAY(SELECT name FROM cols ORDER BY attnum), ARRAY(SELECT oid FROM cols ORDER BY attnum), \
     ARRAY(SELECT sql_type FROM cols ORDER BY attnum), \
     EXISTS (SELECT 1 FROM key_indexes), \
     current_setting('server_version_num')::int4, \
     EXISTS (SELECT 1 FROM key_indexes WHERE immediate) \
     AND COALESCE(has_table_privilege(to_regclass($1), 'INSERT'), FALSE) \
     AND NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass($1) \
     AND NOT tgisinternal AND tgtype & 1 = 0 AND tgtype & 4 <> 0) \
     AND NOT EXISTS (SELECT 1 FROM pg_rewrite WHERE ev_class = to_regclass($1) \
     AND ev_type = '3')";

const TEXT_OIDS: [i64; 2] = [25, 1043];
const BIGINT_OID: i64 = 20;
const BYTEA_OID: i64 = 17;

/// A table checked fit for fencing.
#[derive(Debug)]
pub(crate) struct Schema {
    pub(crate) key_type: PgKeyType,
    pub(crate) statements: Statements,
    /// Every column's SQL type, by name.
    column_types: HashMap<String, String>,
    table: PgTable,
}

/// Why a table is not fit: bad input (the caller can fix the call) or a schema to change.
pub(crate) enum Unfit {
    Input(InvalidInput),
    Schema(PgFailure),
}

/// The answer to [`INSPECT`], column by column.
struct Inspected {
    exists: bool,
    /// Tables whose names differ from the one asked for only in case.
    differ_in_case: Vec<String>,
    /// The table's columns, with their type OIDs and SQL types in the same order.
    names: Vec<String>,
    oids: Vec<i64>,
    sql_types: Vec<String>,
    key_unique: bool,
    server_version: i32,
    arbiter_usable: bool,
}

impl Inspected {
    fn from_row(row: &PgRow) -> Result<Self, sqlx::Error> {
        Ok(Inspected {
            exists: row.try_get(0)?,
            differ_in_case: row.try_get(1)?,
            names: row.try_get(2)?,
            oids: row.try_get(3)?,
            sql_types: row.try_get(4)?,
            key_unique: row.try_get(5)?,
            server_version: row.try_get(6)?,
            arbiter_usable: row.try_get(7)?,
        })
    }
}

/// `table` does not exist; `differ_in_case` are the tables whose names differ only in case.
fn missing_table(table: &PgTable, differ_in_case: &[String]) -> Unfit {
    let name = table.name();
    // Never suggest creating a table when one differing in case exists: that would make a
    // second table beside the one the team's other code writes.
    let hint = if differ_in_case.is_empty() {
        " (PgTable::create_if_missing creates it)".to_owned()
    } else {
        format!(
            ", but {} does, differing only in case: name the table exactly as it was created \
             (Postgres folds names written without quotes to lower case, so a table created as \
             {} is named {})",
            differ_in_case.join(" and "),
            name.to_string().replace('"', ""),
            name.folded().unwrap_or_else(|| name.clone()),
        )
    };
    Unfit::Schema(PgFailure::Schema(format!(
        "table {name} does not exist{hint}"
    )))
}

/// No primary key or unique index covers `table`'s key column alone.
fn key_not_unique(table: &PgTable) -> Unfit {
    let (name, key) = (table.name(), table.key_column());
    Unfit::Input(InvalidInput::new(
        InputKind::Identifier,
        format!(
            "key column {key} of {name} is not unique: no primary key or unique index covers it \
             alone, so one record's write could change several rows. Add one: CREATE UNIQUE \
             INDEX ON {name} ({key})"
        ),
    ))
}

impl Schema {
    /// Checks `table` against the answer to [`INSPECT`].
    pub(crate) fn from_row(table: &PgTable, row: &PgRow) -> Result<Schema, Unfit> {
        let Inspected {
            exists,
            differ_in_case,
            names,
            oids,
            sql_types,
            key_unique,
            server_version,
            arbiter_usable,
        } = Inspected::from_row(row).map_err(|e| Unfit::Schema(e.into()))?;
        let name = table.name();
        if !exists {
            return Err(missing_table(table, &differ_in_case));
        }
        let oid_of: HashMap<&str, i64> = names.iter().map(String::as_str).zip(oids).collect();
        let column = |role: &str, column: &PgIdent, fix: &str| -> Result<i64, Unfit> {
            oid_of.get(column.as_str()).copied().ok_or_else(|| {
                let folded = column
                    .folded()
                    .filter(|f| oid_of.contains_key(f.as_str()))
                    .map(|f| {
                        format!(
                            ", but {f} does: Postgres folds names written without quotes to \
                             lower case"
                        )
                    })
                    .unwrap_or_default();
                Unfit::Schema(PgFailure::Schema(format!(
                    "{name} has no {role} column {column}{folded}{fix}"
                )))
            })
        };
        let key_oid = column("key", table.key_column(), "")?;
        let fence_oid = column(
            "fence",
            table.fence_column(),
            " (PgTable::migration_sql adds it; PgTable::add_fence_column runs that)",
        )?;
        let state_oid = column("state", table.state_column(), "")?;
        let key_type = PgKeyType::from_oid(key_oid).ok_or_else(|| {
            Unfit::Input(InvalidInput::new(
                InputKind::Identifier,
                format!(
                    "key column {} of {name} has type {}; a store's key column must be text, \
                     varchar, uuid, smallint, integer or bigint",
                    table.key_column(),
                    type_of(&names, &sql_types, table.key_column())
                ),
            ))
        })?;
        let wrong_type = |role: &str, column: &PgIdent, wanted: &str| {
            Unfit::Schema(PgFailure::Schema(format!(
                "the {role} column {column} of {name} has type {}; it must be {wanted}",
                type_of(&names, &sql_types, column)
            )))
        };
        if fence_oid != BIGINT_OID {
            return Err(wrong_type("fence", table.fence_column(), "bigint"));
        }
        if !TEXT_OIDS.contains(&state_oid) {
            return Err(wrong_type("state", table.state_column(), "text or varchar"));
        }
        if let Some(payload) = table.payload_column()
            && column("payload", payload, "")? != BYTEA_OID
        {
            return Err(wrong_type("payload", payload, "bytea"));
        }
        if !key_unique {
            return Err(key_not_unique(table));
        }
        Ok(Schema {
            key_type,
            statements: Statements::new(table, key_type, server_version, guard(arbiter_usable)),
            column_types: names.into_iter().zip(sql_types).collect(),
            table: table.clone(),
        })
    }

    /// The extra columns of `write` with their SQL types, each checked to be a column of the
    /// table that the store does not manage itself.
    pub(crate) fn extra_columns<'w>(
        &'w self,
        write: &'w PgWrite,
    ) -> Result<Vec<ExtraColumn<'w>>, InvalidInput> {
        let table = &self.table;
        let managed = [
            Some(table.key_column()),
            Some(table.fence_column()),
            Some(table.state_column()),
            table.payload_column(),
        ];
        write
            .extras()
            .iter()
            .map(|(column, value)| {
                if managed.contains(&Some(column)) {
                    return Err(InvalidInput::new(
                        InputKind::Write,
                        format!(
                            "{column} is the store's own key, fence, state or payload column; \
                             set it through the fenced write, not as another column"
                        ),
                    ));
                }
                match self.column_types.get(column.as_str()) {
                    Some(sql_type) => Ok((column, sql_type.as_str(), value)),
                    None => Err(InvalidInput::new(
                        InputKind::Write,
                        format!("{} has no column {column}", table.name()),
                    )),
                }
            })
            .collect()
    }
}

/// The one-row guard a table takes: the arbiter where a write may name it.
fn guard(arbiter_usable: bool) -> OneRowGuard {
    if arbiter_usable {
        OneRowGuard::Arbiter
    } else {
        OneRowGuard::CountRows
    }
}

fn type_of<'a>(names: &[String], sql_types: &'a [String], column: &PgIdent) -> &'a str {
    names
        .iter()
        .position(|n| n == column.as_str())
        .map_or("unknown", |i| sql_types[i].as_str())
}
