//! What the store reads of a table before its first request: that the columns it names
//! exist with types it can use, that the key is unique, and how keys are compared.

use fencing_core::{InputKind, InvalidInput, RecordKey};
use sqlx::{AssertSqlSafe, MySqlConnection, Row};

use crate::error::MySqlFailure;
use crate::ident::MySqlIdent;
use crate::table::MySqlTable;

/// How the table's keys are spelled in a statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyType {
    /// Text compared byte for byte (a binary type or a `_bin` collation).
    Text,
    /// An integer column: a key is its decimal spelling.
    Integer,
}

/// A key as a statement binds it.
pub(crate) enum KeyValue<'k> {
    Text(&'k str),
    Integer(i64),
}

impl KeyType {
    /// `key` as this column takes it, or why it cannot be one of its values (nothing sent).
    pub(crate) fn value<'k>(self, key: &'k RecordKey) -> Result<KeyValue<'k>, InvalidInput> {
        match self {
            KeyType::Text => Ok(KeyValue::Text(key.as_str())),
            KeyType::Integer => key.as_str().parse().map(KeyValue::Integer).map_err(|_| {
                InvalidInput::new(
                    InputKind::RecordKey,
                    format!("{key:?} is not an integer, and the table's key column is one"),
                )
            }),
        }
    }
}

/// What the store knows of a table once it has read it.
#[derive(Clone, Debug)]
pub(crate) struct Shape {
    /// How keys are spelled.
    pub(crate) key_type: KeyType,
    /// Every column's name, lower-cased (column names never differ by case).
    columns: Vec<String>,
}

impl Shape {
    /// Checks the columns a write sets beyond the fence's own: each a column of the table
    /// that the store does not manage itself, and named once.
    pub(crate) fn check_extras<'a>(
        &self,
        table: &MySqlTable,
        columns: impl IntoIterator<Item = &'a MySqlIdent>,
    ) -> Result<(), InvalidInput> {
        let managed = [
            Some(table.key_column()),
            Some(table.fence_column()),
            Some(table.state_column()),
            table.payload_column(),
        ];
        let same = |a: &MySqlIdent, b: &MySqlIdent| a.as_str().eq_ignore_ascii_case(b.as_str());
        let columns: Vec<&MySqlIdent> = columns.into_iter().collect();
        for (i, column) in columns.iter().copied().enumerate() {
            let refused = |why: String| Err(InvalidInput::new(InputKind::Write, why));
            if managed.iter().flatten().any(|own| same(own, column)) {
                return refused(format!(
                    "{column} is the store's own key, fence, state or payload column; set it \
                     through the fenced write, not as another column"
                ));
            }
            if columns[..i].iter().any(|earlier| same(earlier, column)) {
                return refused(format!(
                    "column {column} is set twice in one write (column names do not differ \
                     by case)"
                ));
            }
            if !self.columns.contains(&column.as_str().to_lowercase()) {
                return refused(format!("{} has no column {column}", table.name()));
            }
        }
        Ok(())
    }
}

/// Reads the table's shape: the key's type and the columns, or what is wrong with the table
/// and how to fix it.
pub(crate) async fn read(
    conn: &mut MySqlConnection,
    table: &MySqlTable,
) -> Result<Shape, MySqlFailure> {
    let columns = Columns::read(conn, table).await?;
    let key_type = columns.key_type(table)?;
    check_unique_key(conn, table).await?;
    Ok(Shape {
        key_type,
        columns: columns.columns.into_iter().map(|(name, ..)| name).collect(),
    })
}

/// The table's columns as `information_schema` lists them: name, type, collation.
struct Columns {
    name: String,
    columns: Vec<(String, String, Option<String>)>,
}

impl Columns {
    async fn read(conn: &mut MySqlConnection, table: &MySqlTable) -> Result<Self, MySqlFailure> {
        let name = table.name();
        let rows = sqlx::query(
            "SELECT COLUMN_NAME, DATA_TYPE, COLLATION_NAME FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
        )
        .bind(name.database().as_str())
        .bind(name.name().as_str())
        .fetch_all(&mut *conn)
        .await?;
        if rows.is_empty() {
            // The catalog shows only what the user may see: the table itself says whether it
            // is missing or refused to this user, with the server's own error.
            sqlx::query(AssertSqlSafe(format!("SELECT 1 FROM {name} LIMIT 0")))
                .execute(&mut *conn)
                .await?;
            return Err(MySqlFailure::Schema(format!(
                "the table {name} does not exist: create it (MySqlTable::create_table_sql gives \
                 the SQL)"
            )));
        }
        let columns = rows
            .iter()
            .map(|row| {
                Ok((
                    row.try_get::<String, _>(0)?.to_lowercase(),
                    row.try_get::<String, _>(1)?.to_lowercase(),
                    row.try_get(2)?,
                ))
            })
            .collect::<Result<_, sqlx::Error>>()?;
        Ok(Columns {
            name: name.to_string(),
            columns,
        })
    }

    /// The type and collation of the `what` column `column` (column names never differ by
    /// case), or the failure that names it missing.
    fn get(&self, what: &str, column: &str) -> Result<(&str, Option<&str>), MySqlFailure> {
        let wanted = column.to_lowercase();
        self.columns
            .iter()
            .find(|(name, _, _)| *name == wanted)
            .map(|(_, data_type, collation)| (data_type.as_str(), collation.as_deref()))
            .ok_or_else(|| {
                MySqlFailure::Schema(format!(
                    "the table {} has no {what} column {column:?}: name the column the table \
                     has (MySqlTable::with_{what}_column) or add it",
                    self.name
                ))
            })
    }

    /// Checks the fence, state and payload columns, and reads how the key is spelled.
    fn key_type(&self, table: &MySqlTable) -> Result<KeyType, MySqlFailure> {
        let name = &self.name;
        let (key_type, collation) = self.get("key", table.key_column().as_str())?;
        let (fence_type, _) = self.get("fence", table.fence_column().as_str())?;
        self.get("state", table.state_column().as_str())?;
        if let Some(payload) = table.payload_column() {
            let (payload_type, _) = self.get("payload", payload.as_str())?;
            if !payload_type.ends_with("blob") && !payload_type.ends_with("binary") {
                return Err(MySqlFailure::Schema(format!(
                    "the payload column {payload} of {name} is {payload_type}: a payload is \
                     bytes, kept in a BLOB or VARBINARY column"
                )));
            }
        }
        if fence_type != "bigint" {
            return Err(MySqlFailure::Schema(format!(
                "the fence column {} of {name} is {fence_type}: a fence is a BIGINT",
                table.fence_column()
            )));
        }
        match key_type {
            "tinyint" | "smallint" | "mediumint" | "int" | "bigint" => Ok(KeyType::Integer),
            "binary" | "varbinary" | "tinyblob" | "blob" => Ok(KeyType::Text),
            "char" | "varchar" | "tinytext" | "text" => match collation {
                Some(collation) if collation.ends_with("_bin") => Ok(KeyType::Text),
                collation => Err(MySqlFailure::Schema(format!(
                    "the key column {key} of {name} compares keys with the collation \
                     {collation:?}, under which keys that differ in case or trailing spaces \
                     are one row, so one record's write could change another's: give it a \
                     binary collation (ALTER TABLE {name} MODIFY {key} {key_type}(…) \
                     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL) or make it VARBINARY",
                    key = table.key_column(),
                    collation = collation.unwrap_or_default(),
                ))),
            },
            other => Err(MySqlFailure::Schema(format!(
                "the key column {} of {name} is {other}: a key is text or an integer",
                table.key_column()
            ))),
        }
    }
}

/// Checks that a unique index covers the key column alone.
async fn check_unique_key(
    conn: &mut MySqlConnection,
    table: &MySqlTable,
) -> Result<(), MySqlFailure> {
    let name = table.name();
    let unique: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM (SELECT INDEX_NAME FROM information_schema.STATISTICS \
         WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0 \
         GROUP BY INDEX_NAME HAVING COUNT(*) = 1 AND LOWER(MAX(COLUMN_NAME)) = LOWER(?)) u",
    )
    .bind(name.database().as_str())
    .bind(name.name().as_str())
    .bind(table.key_column().as_str())
    .fetch_one(&mut *conn)
    .await?;
    if unique == 0 {
        return Err(MySqlFailure::Schema(format!(
            "the key column {key} of {name} has no unique index of its own, so one write could \
             change several rows and nothing was written: the key column must be unique \
             (ALTER TABLE {name} ADD UNIQUE ({key}))",
            key = table.key_column()
        )));
    }
    Ok(())
}
