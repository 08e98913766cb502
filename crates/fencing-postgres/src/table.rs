//! Which table holds the fenced records, and the SQL that makes one fit for fencing.

use fencing_core::InvalidInput;
use sqlx::PgPool;

use crate::ddl::run_ddl;
use crate::ident::{PgIdent, PgQualifiedName, literal};

/// A table whose rows are fenced records: a unique key column, a `BIGINT` fence column
/// (0 means no fence yet), a text state column and, optionally, a `BYTEA` payload column.
///
/// Names are checked when set ([`PgIdent`]). The key column may be `text`, `varchar`, `uuid`,
/// `smallint`, `integer` or `bigint` ([`crate::PgKeyType`]); the store reads which from the
/// catalog before its first write.
#[derive(Clone, Debug)]
pub struct PgTable {
    name: PgQualifiedName,
    key: PgIdent,
    fence: PgIdent,
    state: PgIdent,
    payload: Option<PgIdent>,
}

impl PgTable {
    /// `schema.table` with columns `id` (key), `fence`, `state` and no payload column.
    pub fn new(schema: &str, table: &str) -> Result<Self, InvalidInput> {
        Self::build(
            PgQualifiedName::new(schema, table)?,
            PgIdent::new("id")?,
            PgIdent::new("fence")?,
            PgIdent::new("state")?,
            None,
        )
    }

    /// The worked example's refund table, `schema.refund`, with a `payload` column for the amount.
    #[deprecated(
        since = "0.2.0",
        note = "the worked example's table is no part of the API: use \
                PgTable::new(schema, \"refund\")?.with_payload_column(\"payload\")"
    )]
    #[doc(hidden)]
    pub fn refunds(schema: &str) -> Result<Self, InvalidInput> {
        Self::new(schema, "refund")?.with_payload_column("payload")
    }

    /// Names the key column (unique: a primary key or a unique index).
    pub fn with_key_column(self, column: &str) -> Result<Self, InvalidInput> {
        let key = PgIdent::new(column)?;
        Self::build(self.name, key, self.fence, self.state, self.payload)
    }

    /// Names the fence column.
    pub fn with_fence_column(self, column: &str) -> Result<Self, InvalidInput> {
        let fence = PgIdent::new(column)?;
        Self::build(self.name, self.key, fence, self.state, self.payload)
    }

    /// Names the state column.
    pub fn with_state_column(self, column: &str) -> Result<Self, InvalidInput> {
        let state = PgIdent::new(column)?;
        Self::build(self.name, self.key, self.fence, state, self.payload)
    }

    /// Names a `BYTEA` column that carries each record's payload.
    pub fn with_payload_column(self, column: &str) -> Result<Self, InvalidInput> {
        let payload = Some(PgIdent::new(column)?);
        Self::build(self.name, self.key, self.fence, self.state, payload)
    }

    /// The table's qualified name.
    pub fn name(&self) -> &PgQualifiedName {
        &self.name
    }

    /// The key column.
    pub fn key_column(&self) -> &PgIdent {
        &self.key
    }

    /// The fence column.
    pub fn fence_column(&self) -> &PgIdent {
        &self.fence
    }

    /// The state column.
    pub fn state_column(&self) -> &PgIdent {
        &self.state
    }

    /// The payload column, if the table has one.
    pub fn payload_column(&self) -> Option<&PgIdent> {
        self.payload.as_ref()
    }

    /// The SQL that creates the schema and a table of exactly these columns, if missing: key
    /// `TEXT PRIMARY KEY`, fence `BIGINT NOT NULL DEFAULT 0` with its check, state `TEXT`,
    /// payload `BYTEA`. For a migration tool, or [`Self::create_if_missing`].
    pub fn create_table_sql(&self) -> String {
        let payload = self
            .payload
            .as_ref()
            .map(|p| format!(", {p} BYTEA NOT NULL DEFAULT '\\x'::bytea"))
            .unwrap_or_default();
        format!(
            "CREATE SCHEMA IF NOT EXISTS {schema};\n\
             CREATE TABLE IF NOT EXISTS {table} ({key} TEXT PRIMARY KEY, \
             {fence} BIGINT NOT NULL DEFAULT 0 CONSTRAINT {check} CHECK ({fence} >= 0), \
             {state} TEXT{payload});\n",
            schema = self.name.schema(),
            table = self.name,
            key = self.key,
            fence = self.fence,
            state = self.state,
            check = self.fence_check_name(),
        )
    }

    /// Creates the table as [`Self::create_table_sql`] says, if missing.
    pub async fn create_if_missing(&self, pool: &PgPool) -> Result<(), fencing_core::Error> {
        run_ddl(pool, &self.store_name(), self.create_table_sql()).await
    }

    /// The SQL that fits an existing table for fencing, for a migration tool (sqlx migrations,
    /// refinery, Flyway) or [`Self::add_fence_column`]: the fence column (`BIGINT NOT NULL
    /// DEFAULT 0`, so existing rows start with no fence), the check that keeps it
    /// non-negative, and a unique index on the key column where no primary key or unique index
    /// covers it alone. Each step is skipped where already done, so it can run again. The unique index is built without `CONCURRENTLY`, which a
    /// migration's transaction forbids; on a large, busy table, create it concurrently first
    /// by hand under the same name and this step will find it.
    pub fn migration_sql(&self) -> String {
        let (table, fence, key) = (&self.name, &self.fence, &self.key);
        let check = self.fence_check_name();
        let index = derived_name(key, "key");
        let table_literal = literal(&table.to_string());
        let add_check = do_block(&format!(
            "IF NOT EXISTS (SELECT 1 FROM pg_constraint\n\
             \x20   WHERE conrelid = {table_literal}::regclass AND conname = {check_literal}) THEN\n\
             \x20   ALTER TABLE {table} ADD CONSTRAINT {check} CHECK ({fence} >= 0);\n\
             \x20 END IF;",
            check_literal = literal(check.as_str()),
        ));
        let add_index = do_block(&format!(
            "IF NOT EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a\n\
             \x20   ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]\n\
             \x20   WHERE i.indrelid = {table_literal}::regclass AND i.indisunique\n\
             \x20   AND i.indnkeyatts = 1 AND i.indpred IS NULL AND i.indexprs IS NULL\n\
             \x20   AND a.attname = {key_literal}) THEN\n\
             \x20   CREATE UNIQUE INDEX {index} ON {table} ({key});\n\
             \x20 END IF;",
            key_literal = literal(key.as_str()),
        ));
        format!(
            "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {fence} BIGINT NOT NULL DEFAULT 0;\n\
             {add_check}\n{add_index}\n"
        )
    }

    /// Runs [`Self::migration_sql`] from the application.
    pub async fn add_fence_column(&self, pool: &PgPool) -> Result<(), fencing_core::Error> {
        run_ddl(pool, &self.store_name(), self.migration_sql()).await
    }

    /// The name of the fence column's check: `fencing_<fence>_nonnegative`.
    fn fence_check_name(&self) -> PgIdent {
        derived_name(&self.fence, "nonnegative")
    }

    /// The name the store goes by in errors and batches: `postgres:schema.table`.
    pub fn store_name(&self) -> String {
        self.name.store_name()
    }

    fn build(
        name: PgQualifiedName,
        key: PgIdent,
        fence: PgIdent,
        state: PgIdent,
        payload: Option<PgIdent>,
    ) -> Result<Self, InvalidInput> {
        Ok(PgTable {
            name,
            key,
            fence,
            state,
            payload,
        })
    }
}

/// `fencing_<column>_<what>`, cut to the longest name Postgres keeps.
fn derived_name(column: &PgIdent, what: &str) -> PgIdent {
    let mut name = format!("fencing_{}_{what}", column.as_str());
    while name.len() > PgIdent::MAX_BYTES {
        name.pop();
    }
    PgIdent::new(name).expect("fencing_ and a checked name, cut to the limit, is a name")
}

/// `DO $tag$ BEGIN <body> END $tag$;` with a dollar-quote tag that occurs nowhere in `body`
/// (a quoted name may contain any tag, and would otherwise end the block early).
fn do_block(body: &str) -> String {
    let tag = (0..)
        .map(|n| format!("$fencing{n}$"))
        .find(|tag| !body.contains(tag.as_str()))
        .expect("a finite body leaves some tag unused");
    format!("DO {tag} BEGIN\n\x20 {body}\nEND {tag};")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_derived_name_is_cut_to_the_longest_postgres_keeps() {
        let short = PgIdent::new("fence").unwrap();
        assert_eq!(
            derived_name(&short, "nonnegative").as_str(),
            "fencing_fence_nonnegative"
        );
        let long = PgIdent::new("f".repeat(60)).unwrap();
        let cut = derived_name(&long, "nonnegative");
        assert_eq!(cut.as_str().len(), PgIdent::MAX_BYTES);
        assert_eq!(
            cut.as_str(),
            &format!("fencing_{}_nonnegative", "f".repeat(60))[..PgIdent::MAX_BYTES]
        );
    }
}
