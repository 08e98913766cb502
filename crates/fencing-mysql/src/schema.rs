//! What the store reads of a table before its first request: that the columns it names
//! exist with types it can use, that the key is unique, and how keys are compared.

use fencing_core::adapter::{canonical_integer, canonical_uuid};
use fencing_core::{InputKind, InvalidInput, RecordKey};
use sqlx::mysql::MySqlRow;
use sqlx::{AssertSqlSafe, MySqlConnection, Row};

use crate::error::MySqlFailure;
use crate::ident::MySqlIdent;
use crate::literal;
use crate::table::MySqlTable;

/// How the table's keys are spelled in a statement, and which keys it can hold apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyType {
    /// Text compared byte for byte (a binary type or a `_bin` collation); `pads`: the column
    /// ignores trailing spaces (a `PAD SPACE` collation, or `CHAR`), so a key ending in one
    /// would name the row of the key without it.
    Text { pads: bool },
    /// A uuid in `BINARY(16)`: a key is its lower-case hyphenated spelling.
    Uuid,
    /// An integer column holding `min ..= max`: a key is its canonical decimal spelling.
    Integer { min: i64, max: i64 },
}

/// A key as a statement spells it.
#[derive(Clone)]
pub(crate) enum KeyValue<'k> {
    Text(&'k str),
    Bytes([u8; 16]),
    Integer(i64),
}

impl KeyValue<'_> {
    /// The key as its column compares it, written into a statement: a text key's bytes (in
    /// the column's binary collation), a uuid's 16 bytes, an integer key's digits.
    pub(crate) fn literal(&self) -> String {
        match self {
            KeyValue::Text(text) => literal::bytes(text.as_bytes()),
            KeyValue::Bytes(uuid) => literal::bytes(uuid),
            KeyValue::Integer(n) => n.to_string(),
        }
    }

    /// Whether the key in column `index` of `row`, read as the bytes the server spells it in
    /// (`CAST(… AS BINARY)`), is this one.
    pub(crate) fn is_in(&self, row: &MySqlRow, index: usize) -> bool {
        let Ok(stored) = row.try_get::<Vec<u8>, _>(index) else {
            return false;
        };
        match self {
            KeyValue::Text(text) => stored == text.as_bytes(),
            KeyValue::Bytes(uuid) => stored == uuid,
            KeyValue::Integer(n) => stored == n.to_string().as_bytes(),
        }
    }
}

impl KeyType {
    /// `key` as this column takes it, or why it cannot be one of its values (nothing sent):
    /// each key has one spelling, so two distinct keys never name one row.
    pub(crate) fn value<'k>(self, key: &'k RecordKey) -> Result<KeyValue<'k>, InvalidInput> {
        let text = key.as_str();
        let refused = |why: String| {
            Err(InvalidInput::new(
                InputKind::RecordKey,
                format!("{text:?} is not a key of this table: {why}"),
            ))
        };
        match self {
            KeyType::Text { pads: true } if text.ends_with(' ') => refused(format!(
                "it ends in a space, and the key column ignores trailing spaces (a PAD SPACE \
                 collation, or CHAR), so it would name the row of {:?}; give the column a NO \
                 PAD collation (utf8mb4_nopad_bin on MariaDB, utf8mb4_0900_bin on MySQL 8) \
                 or make it VARBINARY",
                text.trim_end_matches(' ')
            )),
            KeyType::Text { .. } => Ok(KeyValue::Text(text)),
            KeyType::Uuid => match canonical_uuid(text) {
                Some(bytes) => Ok(KeyValue::Bytes(bytes)),
                None => refused(
                    "its BINARY(16) key column holds uuids, spelled lower-case and hyphenated \
                     (8-4-4-4-12 hex digits)"
                        .to_owned(),
                ),
            },
            KeyType::Integer { min, max } => match canonical_integer(text) {
                Some(n) if (min..=max).contains(&n) => Ok(KeyValue::Integer(n)),
                _ => refused(format!(
                    "its key column holds integers from {min} to {max}, in canonical decimal \
                     (no sign +, no leading zeros)"
                )),
            },
        }
    }
}

/// What the store knows of a table once it has read it.
#[derive(Clone, Debug)]
pub(crate) struct Shape {
    /// How keys are spelled.
    pub(crate) key_type: KeyType,
    /// A unique index on the key alone, as the schema read found it.
    pub(crate) unique_index: MySqlIdent,
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
    let unique_index = unique_key_index(conn, table).await?;
    Ok(Shape {
        key_type,
        unique_index,
        columns: columns
            .columns
            .into_iter()
            .map(|column| column.name)
            .collect(),
    })
}

/// A column as `information_schema` lists it.
struct Column {
    /// Lower-cased (column names never differ by case).
    name: String,
    /// `DATA_TYPE`, lower-cased: `varchar`, `bigint`.
    data_type: String,
    /// `COLUMN_TYPE`, lower-cased: `varchar(64)`, `int(10) unsigned`.
    column_type: String,
    collation: Option<String>,
    /// The most bytes a value holds (text and binary types).
    octets: Option<i64>,
}

/// The table's columns as `information_schema` lists them.
struct Columns {
    name: String,
    columns: Vec<Column>,
}

impl Columns {
    async fn read(conn: &mut MySqlConnection, table: &MySqlTable) -> Result<Self, MySqlFailure> {
        let name = table.name();
        let rows = sqlx::query(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, COLLATION_NAME, \
             CAST(CHARACTER_OCTET_LENGTH AS SIGNED) FROM information_schema.COLUMNS \
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
                Ok(Column {
                    name: row.try_get::<String, _>(0)?.to_lowercase(),
                    data_type: row.try_get::<String, _>(1)?.to_lowercase(),
                    column_type: row.try_get::<String, _>(2)?.to_lowercase(),
                    collation: row.try_get(3)?,
                    octets: row.try_get(4)?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()?;
        Ok(Columns {
            name: name.to_string(),
            columns,
        })
    }

    /// The `what` column `column` (column names never differ by case), or the failure that
    /// names it missing.
    fn get(&self, what: &str, column: &str) -> Result<&Column, MySqlFailure> {
        let wanted = column.to_lowercase();
        self.columns
            .iter()
            .find(|found| found.name == wanted)
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
        let key = self.get("key", table.key_column().as_str())?;
        let fence = self.get("fence", table.fence_column().as_str())?;
        self.get("state", table.state_column().as_str())?;
        if let Some(payload) = table.payload_column() {
            let payload_type = &self.get("payload", payload.as_str())?.data_type;
            if !payload_type.ends_with("blob") && !payload_type.ends_with("binary") {
                return Err(MySqlFailure::Schema(format!(
                    "the payload column {payload} of {name} is {payload_type}: a payload is \
                     bytes, kept in a BLOB or VARBINARY column"
                )));
            }
        }
        if fence.data_type != "bigint" {
            return Err(MySqlFailure::Schema(format!(
                "the fence column {} of {name} is {}: a fence is a BIGINT",
                table.fence_column(),
                fence.data_type
            )));
        }
        let refused = |why: String| {
            Err(MySqlFailure::Schema(format!(
                "the key column {} of {name} is {}: {why}",
                table.key_column(),
                key.column_type
            )))
        };
        let unsigned = key.column_type.contains("unsigned");
        let integer = |bits: u32| {
            let (min, max): (i128, i128) = match unsigned {
                true => (0, (1 << bits) - 1),
                false => (-(1 << (bits - 1)), (1 << (bits - 1)) - 1),
            };
            let clamp = |n: i128| n.clamp(i64::MIN.into(), i64::MAX.into()) as i64;
            Ok(KeyType::Integer {
                min: clamp(min),
                max: clamp(max),
            })
        };
        match key.data_type.as_str() {
            "tinyint" => integer(8),
            "smallint" => integer(16),
            "mediumint" => integer(24),
            "int" => integer(32),
            "bigint" => integer(64),
            "varbinary" | "tinyblob" | "blob" => Ok(KeyType::Text { pads: false }),
            "binary" if key.octets == Some(16) => Ok(KeyType::Uuid),
            "binary" => refused(
                "BINARY pads a shorter key with zero bytes, so its row would never be found \
                 again: make it VARBINARY, or BINARY(16) for uuids"
                    .to_owned(),
            ),
            "char" | "varchar" | "tinytext" | "text" => match key.collation.as_deref() {
                Some(collation) if collation.ends_with("_bin") => Ok(KeyType::Text {
                    pads: key.data_type == "char" || !is_no_pad(collation),
                }),
                collation => refused(format!(
                    "it compares keys with the collation {collation:?}, under which keys that \
                     differ in case are one row, so one record's write could change another's: \
                     give it a binary collation (ALTER TABLE {name} MODIFY {} {}(…) CHARACTER \
                     SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL on MariaDB, \
                     utf8mb4_0900_bin on MySQL 8) or make it VARBINARY",
                    table.key_column(),
                    key.data_type,
                    collation = collation.unwrap_or_default(),
                )),
            },
            _ => refused("a key is text, a uuid in BINARY(16) or an integer".to_owned()),
        }
    }
}

/// Whether `collation` compares trailing spaces as characters (`NO PAD`): MariaDB names such
/// collations `…_nopad_…`; MySQL 8's `…_0900_…` collations are all of them. Any other is taken
/// to ignore trailing spaces (`PAD SPACE`), which only refuses keys that end in one.
fn is_no_pad(collation: &str) -> bool {
    collation.contains("_nopad_") || collation.contains("_0900_")
}

/// The name of a unique index that covers the key column alone, or the failure that says
/// the key must be unique.
async fn unique_key_index(
    conn: &mut MySqlConnection,
    table: &MySqlTable,
) -> Result<MySqlIdent, MySqlFailure> {
    let name = table.name();
    let unique: Option<String> = sqlx::query_scalar(
        "SELECT MIN(INDEX_NAME) FROM (SELECT INDEX_NAME FROM information_schema.STATISTICS \
         WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0 \
         GROUP BY INDEX_NAME HAVING COUNT(*) = 1 AND LOWER(MAX(COLUMN_NAME)) = LOWER(?)) u",
    )
    .bind(name.database().as_str())
    .bind(name.name().as_str())
    .bind(table.key_column().as_str())
    .fetch_one(&mut *conn)
    .await?;
    let Some(index) = unique else {
        return Err(MySqlFailure::Schema(format!(
            "the key column {key} of {name} has no unique index of its own, so one write could \
             change several rows and nothing was written: the key column must be unique \
             (ALTER TABLE {name} ADD UNIQUE ({key}))",
            key = table.key_column()
        )));
    };
    MySqlIdent::new(index).map_err(|e| MySqlFailure::Corrupt("the key's index name".into(), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_written_as_hex_bytes_or_digits() {
        assert_eq!(KeyValue::Text("r_815").literal(), "X'725f383135'");
        assert_eq!(
            KeyValue::Bytes([0xab; 16]).literal(),
            format!("X'{}'", "ab".repeat(16))
        );
        assert_eq!(KeyValue::Integer(-7).literal(), "-7");
    }
}
