//! Which table holds the fenced records, and the statements that read and write it.

use std::sync::Arc;

use fencing_core::{InvalidInput, State, refused_char_ranges};
use sqlx::PgPool;

use crate::ddl::run_ddl;
use crate::ident::{Ident, QualifiedName};

/// A table whose rows are fenced records: a unique key column, a `BIGINT` fence column
/// (0 means no fence yet), a text state column and, optionally, a `BYTEA` payload column.
///
/// Names are checked when set ([`Ident`]), and the statements are built once, here.
#[derive(Clone, Debug)]
pub struct PgTable {
    name: QualifiedName,
    key: Ident,
    fence: Ident,
    state: Ident,
    payload: Option<Ident>,
    sql: Arc<Statements>,
}

#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) read: Arc<str>,
    pub(crate) claim: Arc<str>,
    pub(crate) holder_only: Arc<str>,
    pub(crate) insert: Arc<str>,
    pub(crate) lock_many: Arc<str>,
    pub(crate) claim_many: Arc<str>,
    pub(crate) holder_only_many: Arc<str>,
    pub(crate) max_fence: Arc<str>,
    pub(crate) key_is_unique: Arc<str>,
}

impl PgTable {
    /// `schema.table` with columns `id` (key), `fence`, `state` and no payload column.
    pub fn new(schema: &str, table: &str) -> Result<Self, InvalidInput> {
        Self::build(
            QualifiedName::new(schema, table)?,
            Ident::new("id")?,
            Ident::new("fence")?,
            Ident::new("state")?,
            None,
        )
    }

    /// The worked example's refund table, `schema.refund`, with a `payload` column for the amount.
    pub fn refunds(schema: &str) -> Result<Self, InvalidInput> {
        Self::new(schema, "refund")?.with_payload_column("payload")
    }

    /// Names the key column (unique: a primary key or a unique index).
    pub fn with_key_column(self, column: &str) -> Result<Self, InvalidInput> {
        let key = Ident::new(column)?;
        Self::build(self.name, key, self.fence, self.state, self.payload)
    }

    /// Names the fence column.
    pub fn with_fence_column(self, column: &str) -> Result<Self, InvalidInput> {
        let fence = Ident::new(column)?;
        Self::build(self.name, self.key, fence, self.state, self.payload)
    }

    /// Names the state column.
    pub fn with_state_column(self, column: &str) -> Result<Self, InvalidInput> {
        let state = Ident::new(column)?;
        Self::build(self.name, self.key, self.fence, state, self.payload)
    }

    /// Names a `BYTEA` column that carries each record's payload.
    pub fn with_payload_column(self, column: &str) -> Result<Self, InvalidInput> {
        let payload = Some(Ident::new(column)?);
        Self::build(self.name, self.key, self.fence, self.state, payload)
    }

    /// The table's qualified name.
    pub fn name(&self) -> &QualifiedName {
        &self.name
    }

    /// The key column.
    pub fn key_column(&self) -> &Ident {
        &self.key
    }

    /// The fence column.
    pub fn fence_column(&self) -> &Ident {
        &self.fence
    }

    /// The state column.
    pub fn state_column(&self) -> &Ident {
        &self.state
    }

    /// The payload column, if the table has one.
    pub fn payload_column(&self) -> Option<&Ident> {
        self.payload.as_ref()
    }

    pub(crate) fn sql(&self) -> &Statements {
        &self.sql
    }

    /// Creates the schema and a table of exactly these columns, if missing: key `TEXT PRIMARY
    /// KEY`, fence `BIGINT NOT NULL DEFAULT 0 CHECK (fence >= 0)`, state `TEXT`, payload
    /// `BYTEA`.
    pub async fn create_if_missing(&self, pool: &PgPool) -> Result<(), fencing_core::Error> {
        let payload = self
            .payload
            .as_ref()
            .map(|p| format!(", {p} BYTEA NOT NULL DEFAULT '\\x'::bytea"))
            .unwrap_or_default();
        let ddl = format!(
            "CREATE SCHEMA IF NOT EXISTS {schema}; \
             CREATE TABLE IF NOT EXISTS {table} ({key} TEXT PRIMARY KEY, \
             {fence} BIGINT NOT NULL DEFAULT 0 CHECK ({fence} >= 0), {state} TEXT{payload})",
            schema = self.name.schema(),
            table = self.name,
            key = self.key,
            fence = self.fence,
            state = self.state,
        );
        run_ddl(pool, &self.store_name(), ddl).await
    }

    /// Adds the fence column (`BIGINT NOT NULL DEFAULT 0`) to an existing table, if missing,
    /// and the check that keeps it non-negative (`CHECK (fence >= 0)`), if missing. Existing
    /// rows start with no fence.
    pub async fn add_fence_column(&self, pool: &PgPool) -> Result<(), fencing_core::Error> {
        let (table, fence) = (&self.name, &self.fence);
        let check: String = format!("fencing_{}_nonnegative", fence.as_str())
            .chars()
            .take(Ident::MAX_BYTES)
            .collect();
        let ddl = format!(
            "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {fence} BIGINT NOT NULL DEFAULT 0; \
             DO $fencing$ BEGIN \
               IF NOT EXISTS (SELECT 1 FROM pg_constraint \
                 WHERE conrelid = '{table}'::regclass AND conname = '{check}') THEN \
                 ALTER TABLE {table} ADD CONSTRAINT \"{check}\" CHECK ({fence} >= 0); \
               END IF; \
             END $fencing$"
        );
        run_ddl(pool, &self.store_name(), ddl).await
    }

    /// The name the store goes by in errors and batches: `postgres:schema.table`.
    pub fn store_name(&self) -> String {
        self.name.store_name()
    }

    fn build(
        name: QualifiedName,
        key: Ident,
        fence: Ident,
        state: Ident,
        payload: Option<Ident>,
    ) -> Result<Self, InvalidInput> {
        let sql = Arc::new(Statements::new(
            &name,
            &key,
            &fence,
            &state,
            payload.as_ref(),
        ));
        Ok(PgTable {
            name,
            key,
            fence,
            state,
            payload,
            sql,
        })
    }
}

impl Statements {
    /// Parameters of every write: `$1` key (or keys), `$2` token, `$3` new state (or NULL),
    /// `$4` required states (or NULL for any), `$5` new payload (or NULL), when the table has
    /// a payload column.
    fn new(
        table: &QualifiedName,
        key: &Ident,
        fence: &Ident,
        state: &Ident,
        payload: Option<&Ident>,
    ) -> Self {
        let fence_value = format!("COALESCE({fence}, 0)");
        // A row whose fence or state this crate could not read back is refused inside the
        // statement, so nothing is written over it (the caller gets a Backend error naming it).
        let row_readable = format!(
            "{fence_value} >= 0 AND ({state} IS NULL OR ({state} <> '' AND octet_length({state}) \
             <= {max_state} AND {state} !~ '{refused}'))",
            max_state = State::MAX_BYTES,
            refused = refused_chars_class(),
        );
        let payload_read = payload.map_or("NULL::bytea".to_owned(), |p| p.to_string());
        let payload_set = payload
            .map(|p| format!(", {p} = COALESCE($5, {p})"))
            .unwrap_or_default();
        let states_ok = format!("($4::text[] IS NULL OR {state} = ANY($4::text[]))");
        let update = |set_fence: &str, fence_ok: &str, keys: &str, only_one: &str| {
            format!(
                "UPDATE {table} SET {set_fence}{state} = COALESCE($3, {state}){payload_set} \
                 WHERE {key} {keys} AND {fence_ok} AND {states_ok} AND {row_readable}{only_one}"
            )
        };
        let claim_set = format!("{fence} = $2, ");
        let claim_ok = format!("{fence_value} <= $2");
        let holder_ok = format!("{fence_value} = $2");
        // One statement: lock the row, remember what it held, apply the fenced update, and
        // return the old fence and state whether or not the update applied, so a refusal
        // names the fence it met without a second round trip. The update applies only when
        // exactly one row has the key, so a key column whose unique index was dropped can
        // never let one write change several rows; the count comes back to say so.
        let only_one = " AND (SELECT count(*) FROM old) = 1";
        let single = |update: String| {
            format!(
                "WITH old AS (SELECT {fence_value} AS fence, {state} AS state FROM {table} \
                 WHERE {key} = $1 FOR UPDATE), \
                 upd AS ({update} RETURNING {state} AS state, {payload_read} AS payload) \
                 SELECT old.fence, old.state, EXISTS (SELECT 1 FROM upd) AS applied, \
                 upd.state AS new_state, upd.payload AS new_payload, \
                 (SELECT count(*) FROM old) AS matched \
                 FROM old LEFT JOIN upd ON TRUE LIMIT 1"
            )
        };
        let (insert_payload_col, insert_payload_val) =
            payload.map_or((String::new(), String::new()), |p| {
                (
                    format!(", {p}"),
                    ", COALESCE($5::bytea, '\\x'::bytea)".to_owned(),
                )
            });
        Statements {
            read: format!(
                "SELECT {fence_value}, {state}, {payload_read} FROM {table} WHERE {key} = $1"
            )
            .into(),
            claim: single(update(&claim_set, &claim_ok, "= $1", only_one)).into(),
            holder_only: single(update("", &holder_ok, "= $1", only_one)).into(),
            insert: format!(
                "INSERT INTO {table} ({key}, {fence}, {state}{insert_payload_col}) \
                 SELECT $1::text, $2::bigint, $3::text{insert_payload_val} WHERE $4::text[] IS NULL \
                 ON CONFLICT ({key}) DO NOTHING RETURNING {state}, {payload_read}"
            )
            .into(),
            lock_many: format!(
                "SELECT {key}, {fence_value}, {state} FROM {table} \
                 WHERE {key} = ANY($1) ORDER BY {key} FOR UPDATE"
            )
            .into(),
            claim_many: format!(
                "{} RETURNING {key}",
                update(&claim_set, &claim_ok, "= ANY($1)", "")
            )
            .into(),
            holder_only_many: format!(
                "{} RETURNING {key}",
                update("", &holder_ok, "= ANY($1)", "")
            )
            .into(),
            max_fence: format!("SELECT MAX({fence_value}) FROM {table}").into(),
            // $1: the table as `"schema"."name"`; $2: the key column. Whether the table exists,
            // and whether a unique index (or primary key) of exactly that one column, valid,
            // without predicate or expression, covers it.
            key_is_unique: "SELECT to_regclass($1) IS NOT NULL, EXISTS (SELECT 1 FROM pg_index i \
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] \
                 WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indisvalid \
                 AND i.indnkeyatts = 1 AND i.indpred IS NULL AND i.indexprs IS NULL \
                 AND a.attname = $2)"
                .into(),
        }
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
