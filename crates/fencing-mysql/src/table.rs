//! Which table holds the fenced records, and the SQL that makes one.

use fencing_core::{InvalidInput, Result};
use sqlx::MySqlPool;

use crate::ddl::run_ddl;
use crate::ident::{MySqlIdent, MySqlQualifiedName};
use crate::literal;

/// A table whose rows are fenced records: a unique key column, a `BIGINT` fence column (0
/// means no fence yet), a state column and, optionally, a `BLOB` payload column.
///
/// Names are checked when set ([`MySqlIdent`]). The key column may be text (`VARCHAR`,
/// `CHAR`, `TEXT` with a binary collation, `VARBINARY`), a uuid (`BINARY(16)`) or an integer
/// (`TINYINT` to `BIGINT`); the store reads which from `information_schema` before its first
/// request. An existing table gets its fence column from [`Self::migration_sql`].
#[derive(Clone, Debug)]
pub struct MySqlTable {
    name: MySqlQualifiedName,
    key: MySqlIdent,
    fence: MySqlIdent,
    state: MySqlIdent,
    payload: Option<MySqlIdent>,
}

impl MySqlTable {
    /// `database.table` with columns `id` (key), `fence`, `state` and no payload column.
    pub fn new(database: &str, table: &str) -> Result<Self, InvalidInput> {
        Ok(MySqlTable {
            name: MySqlQualifiedName::new(database, table)?,
            key: MySqlIdent::new("id")?,
            fence: MySqlIdent::new("fence")?,
            state: MySqlIdent::new("state")?,
            payload: None,
        })
    }

    /// Names the key column (unique: a primary key or a unique index on it alone).
    pub fn with_key_column(self, column: &str) -> Result<Self, InvalidInput> {
        Ok(MySqlTable {
            key: MySqlIdent::new(column)?,
            ..self
        })
    }

    /// Names the fence column.
    pub fn with_fence_column(self, column: &str) -> Result<Self, InvalidInput> {
        Ok(MySqlTable {
            fence: MySqlIdent::new(column)?,
            ..self
        })
    }

    /// Names the state column.
    pub fn with_state_column(self, column: &str) -> Result<Self, InvalidInput> {
        Ok(MySqlTable {
            state: MySqlIdent::new(column)?,
            ..self
        })
    }

    /// Names a `BLOB` column that carries each record's payload.
    pub fn with_payload_column(self, column: &str) -> Result<Self, InvalidInput> {
        Ok(MySqlTable {
            payload: Some(MySqlIdent::new(column)?),
            ..self
        })
    }

    /// The table's qualified name.
    pub fn name(&self) -> &MySqlQualifiedName {
        &self.name
    }

    /// The key column.
    pub fn key_column(&self) -> &MySqlIdent {
        &self.key
    }

    /// The fence column.
    pub fn fence_column(&self) -> &MySqlIdent {
        &self.fence
    }

    /// The state column.
    pub fn state_column(&self) -> &MySqlIdent {
        &self.state
    }

    /// The payload column, if the table has one.
    pub fn payload_column(&self) -> Option<&MySqlIdent> {
        self.payload.as_ref()
    }

    /// The SQL that creates a table of exactly these columns, if missing, for a migration
    /// tool or [`Self::create_if_missing`]: key `VARBINARY(1024) PRIMARY KEY` (keys compared
    /// byte for byte, as the library compares them), fence `BIGINT NOT NULL DEFAULT 0` checked
    /// non-negative, state `VARCHAR(64)` in `utf8mb4_bin`, payload `LONGBLOB`. Both MySQL 8
    /// and MariaDB take it.
    pub fn create_table_sql(&self) -> String {
        let payload = self
            .payload
            .as_ref()
            .map(|p| format!(", {p} LONGBLOB NULL"))
            .unwrap_or_default();
        format!(
            "CREATE TABLE IF NOT EXISTS {table} ({key} VARBINARY(1024) NOT NULL PRIMARY KEY, \
             {fence} BIGINT NOT NULL DEFAULT 0 CHECK ({fence} >= 0), \
             {state} VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL{payload}) \
             ENGINE = InnoDB",
            table = self.name,
            key = self.key,
            fence = self.fence,
            state = self.state,
        )
    }

    /// Creates the table as [`Self::create_table_sql`] says, if missing.
    pub async fn create_if_missing(&self, pool: &MySqlPool) -> Result<()> {
        run_ddl(pool, &self.store_name(), self.create_table_sql()).await
    }

    /// The SQL that fits an existing table for fencing, for a migration tool (sqlx migrations,
    /// refinery, Flyway) or [`Self::add_fence_column`]: the fence column (`BIGINT NOT NULL
    /// DEFAULT 0`, so existing rows start with no fence), the check that keeps it non-negative,
    /// and a unique index on the key column where no unique index covers it alone. Each step
    /// reads `information_schema` and is skipped where already done, so it can run again; it
    /// uses no `IF NOT EXISTS` that only MariaDB has, so MySQL 8 takes it too. The state column
    /// is the table's own (name it with [`Self::with_state_column`]).
    pub fn migration_sql(&self) -> String {
        let (table, key, fence) = (&self.name, &self.key, &self.fence);
        let check = derived_name(fence, "nonnegative");
        let index = derived_name(key, "key");
        let (database, name) = (
            sql_string(table.database().as_str()),
            sql_string(table.name().as_str()),
        );
        let of_this_table = format!("TABLE_SCHEMA = {database} AND TABLE_NAME = {name}");
        let steps = [
            (
                format!(
                    "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE {of_this_table} \
                     AND COLUMN_NAME = {}",
                    sql_string(fence.as_str())
                ),
                format!("ALTER TABLE {table} ADD COLUMN {fence} BIGINT NOT NULL DEFAULT 0"),
            ),
            (
                format!(
                    "SELECT COUNT(*) FROM information_schema.TABLE_CONSTRAINTS WHERE \
                     CONSTRAINT_SCHEMA = {database} AND {of_this_table} \
                     AND CONSTRAINT_TYPE = 'CHECK' AND CONSTRAINT_NAME = {}",
                    sql_string(check.as_str())
                ),
                format!("ALTER TABLE {table} ADD CONSTRAINT {check} CHECK ({fence} >= 0)"),
            ),
            (
                format!(
                    "SELECT COUNT(*) FROM (SELECT INDEX_NAME FROM information_schema.STATISTICS \
                     WHERE {of_this_table} AND NON_UNIQUE = 0 GROUP BY INDEX_NAME \
                     HAVING COUNT(*) = 1 AND LOWER(MAX(COLUMN_NAME)) = LOWER({})) unique_key",
                    sql_string(key.as_str())
                ),
                format!("ALTER TABLE {table} ADD UNIQUE INDEX {index} ({key})"),
            ),
        ];
        steps
            .iter()
            .map(|(done, step)| {
                format!(
                    "SET @fencing_step = IF(({done}) = 0, {step}, 'DO 0');\n\
                     PREPARE fencing_step FROM @fencing_step;\n\
                     EXECUTE fencing_step;\n\
                     DEALLOCATE PREPARE fencing_step;\n",
                    step = sql_string(step)
                )
            })
            .collect()
    }

    /// Runs [`Self::migration_sql`] from the application.
    pub async fn add_fence_column(&self, pool: &MySqlPool) -> Result<()> {
        run_ddl(pool, &self.store_name(), self.migration_sql()).await
    }

    /// The name the store goes by in errors and batches: `mysql:database.table`.
    pub fn store_name(&self) -> String {
        self.name.store_name()
    }
}

/// `fencing_<column>_<what>`, cut to the longest name the server takes.
fn derived_name(column: &MySqlIdent, what: &str) -> MySqlIdent {
    let name: String = format!("fencing_{}_{what}", column.as_str())
        .chars()
        .take(MySqlIdent::MAX_CHARS)
        .collect();
    MySqlIdent::new(name.trim_end_matches(' ')).expect("a name built of checked names")
}

/// `text` as a string literal a reader can read in a migration file, quotes doubled; as its
/// bytes in hex where it holds a backslash (which `NO_BACKSLASH_ESCAPES` reads otherwise).
fn sql_string(text: &str) -> String {
    match text.contains('\\') {
        true => literal::text(text),
        false => format!("'{}'", text.replace('\'', "''")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_migration_names_everything_as_written_and_quotes_strings_safely() {
        let table = MySqlTable::new("billing", "pay'outs")
            .unwrap()
            .with_key_column("Payout ID")
            .unwrap();
        let sql = table.migration_sql();
        assert!(
            sql.contains(
                "ALTER TABLE `billing`.`pay''outs` ADD COLUMN `fence` BIGINT NOT NULL DEFAULT 0"
            ),
            "{sql}"
        );
        assert!(sql.contains("TABLE_NAME = 'pay''outs'"), "{sql}");
        assert!(
            sql.contains("ADD UNIQUE INDEX `fencing_Payout ID_key` (`Payout ID`)"),
            "{sql}"
        );
        assert_eq!(sql.matches("EXECUTE fencing_step;").count(), 3);
        assert_eq!(sql_string("a\\b"), "CONVERT(X'615c62' USING utf8mb4)");
        let long = MySqlIdent::new("f".repeat(64)).unwrap();
        assert_eq!(
            derived_name(&long, "nonnegative").as_str().chars().count(),
            64
        );
    }
}
