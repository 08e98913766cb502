//! Which table holds the fenced records, and the SQL that makes one.

use fencing_core::{InvalidInput, Result};
use sqlx::MySqlPool;

use crate::ddl::run_ddl;
use crate::ident::{MySqlIdent, MySqlQualifiedName};

/// A table whose rows are fenced records: a unique key column, a `BIGINT` fence column (0
/// means no fence yet), a state column and, optionally, a `BLOB` payload column.
///
/// Names are checked when set ([`MySqlIdent`]). The key column may be text (`VARCHAR`,
/// `CHAR`, `TEXT` with a binary collation, `VARBINARY`, `BINARY`) or an integer (`TINYINT` to
/// `BIGINT`); the store reads which from `information_schema` before its first request.
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

    /// The name the store goes by in errors and batches: `mysql:database.table`.
    pub fn store_name(&self) -> String {
        self.name.store_name()
    }
}
