//! The low-level pieces, for statements of your own: the fence condition appended to your
//! `QueryBuilder`, and what `rows_affected` means afterwards.

use fencing_core::{Error, FenceCheck, FencingToken, FoundFence, RecordKey, Result};
use sqlx::{Postgres, QueryBuilder};

use crate::ident::PgIdent;

/// Appends the fence check for `check` to a `WHERE` clause already begun in `query`, binding
/// `token`: ` AND COALESCE(fence, 0) <= $n` for a claim, ` = $n` for a holder-only write.
/// A claim must also set the fence: append `fence = $n` to your `SET` list with
/// [`QueryBuilder::push_bind`] of [`FencingToken::as_i64`].
///
/// ```
/// use fencing_core::{FenceCheck, FencingToken};
/// use fencing_postgres::{PgIdent, push_fence_condition};
/// use sqlx::{Postgres, QueryBuilder};
///
/// let token = FencingToken::new(34).unwrap();
/// let fence = PgIdent::new("fence").unwrap();
/// let mut update: QueryBuilder<Postgres> =
///     QueryBuilder::new("UPDATE refund SET state = 'sending', fence = ");
/// update.push_bind(token.as_i64());
/// update.push(" WHERE id = ").push_bind("r_815");
/// push_fence_condition(&mut update, &fence, FenceCheck::Claim, token);
/// assert_eq!(
///     update.sql().as_str(),
///     "UPDATE refund SET state = 'sending', fence = $1 WHERE id = $2 AND COALESCE(\"fence\", 0) <= $3"
/// );
/// ```
pub fn push_fence_condition(
    query: &mut QueryBuilder<Postgres>,
    fence_column: &PgIdent,
    check: FenceCheck,
    token: FencingToken,
) {
    let comparison = match check {
        FenceCheck::Claim => "<=",
        FenceCheck::HolderOnly => "=",
    };
    query
        .push(format_args!(
            " AND COALESCE({fence_column}, 0) {comparison} "
        ))
        .push_bind(token.as_i64());
}

/// Interprets `rows_affected` of a fenced statement on one record: none means the fence (or
/// your own condition) refused it, which is reported as [`Error::Fenced`] with the fence not
/// known; read the row if you need it.
pub fn rows_affected_to_result(
    rows_affected: u64,
    store: &str,
    record: &RecordKey,
    token: FencingToken,
) -> Result<()> {
    if rows_affected == 0 {
        return Err(Error::Fenced {
            store: store.to_owned(),
            record: record.clone(),
            presented: token,
            found: FoundFence::Unknown,
        });
    }
    Ok(())
}
