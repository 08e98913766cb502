//! PostgreSQL names on any text: they never panic, a name accepted is written as one quoted
//! identifier that reads back as exactly that text (nothing of it can end the identifier),
//! and a table of such names gives its migration SQL.
#![no_main]

use fencing_postgres::{PgIdent, PgTable};
use libfuzzer_sys::fuzz_target;

/// The text of one double-quoted SQL identifier, if `quoted` is exactly one.
fn unquote(quoted: &str) -> Option<String> {
    let inner = quoted.strip_prefix('"')?.strip_suffix('"')?;
    let mut text = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '"' && chars.next()? != '"' {
            return None;
        }
        text.push(c);
    }
    Some(text)
}

fuzz_target!(|names: (&str, &str, &str)| {
    let (schema, table, column) = names;
    for text in [schema, table, column] {
        if let Ok(ident) = PgIdent::new(text) {
            assert_eq!(unquote(&ident.to_string()).as_deref(), Some(text));
            assert!(!text.contains('\0'));
        }
    }
    if let Ok(table) = PgTable::new(schema, table).and_then(|t| t.with_state_column(column)) {
        assert!(!table.migration_sql().is_empty());
    }
});
