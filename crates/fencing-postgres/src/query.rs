//! The low-level piece for statements of your own: the fence condition, under a holder's
//! token, appended to your `QueryBuilder`. What a statement that changed no row met is
//! `PgStore::explain_unapplied`'s to say.

use fencing_core::{Error, FenceCheck, FencingToken, FoundFence, Holder, RecordKey, Result};
use sqlx::{Postgres, QueryBuilder};

use crate::ident::PgIdent;

/// Appends the fence check for `check` to a `WHERE` clause already begun in `query`, binding
/// the holder's token: ` AND COALESCE(fence, 0) <= $n` for a claim, ` = $n` for a holder-only
/// write. A claim must also set the fence: append `fence = $n` to your `SET` list with
/// [`QueryBuilder::push_bind`] of the holder's [`fencing_core::FencingToken::as_i64`]. A
/// statement that changed no row is explained by [`crate::PgStore::explain_unapplied`].
///
/// ```
/// # use fencing_core::adapter::HolderExt;
/// use fencing_core::{FenceCheck, FencingToken, Holder, MemoryTokenSource, ResourceName};
/// use fencing_postgres::{PgIdent, push_fence_condition};
/// use sqlx::{Postgres, QueryBuilder};
///
/// # let resource = ResourceName::new("settle:m_4471").unwrap();
/// # let holder = Holder::new(&resource, FencingToken::new(34).unwrap(), &MemoryTokenSource::new());
/// // `holder`: the guard's, `guard.holder()`.
/// let fence = PgIdent::new("fence").unwrap();
/// let mut update: QueryBuilder<Postgres> =
///     QueryBuilder::new("UPDATE refund SET state = 'sending', fence = ");
/// update.push_bind(holder.token().as_i64());
/// update.push(" WHERE id = ").push_bind("r_815");
/// push_fence_condition(&mut update, &fence, FenceCheck::Claim, &holder);
/// assert_eq!(
///     update.sql().as_str(),
///     "UPDATE refund SET state = 'sending', fence = $1 WHERE id = $2 AND COALESCE(\"fence\", 0) <= $3"
/// );
/// ```
pub fn push_fence_condition(
    query: &mut QueryBuilder<Postgres>,
    fence_column: &PgIdent,
    check: FenceCheck,
    holder: &Holder,
) {
    let comparison = match check {
        FenceCheck::Claim => "<=",
        FenceCheck::HolderOnly => "=",
    };
    query
        .push(format_args!(
            " AND COALESCE({fence_column}, 0) {comparison} "
        ))
        .push_bind(holder.token().as_i64());
}

/// What `rows_affected` of a fenced statement on one record meant, as 0.1 read it: none was
/// called [`Error::Fenced`] with the fence unknown, a missing row included, and no regression
/// check was made.
#[doc(hidden)]
#[deprecated(
    since = "0.2.0",
    note = "use PgStore::explain_unapplied(&holder, key, &write) when your statement changed no \
            row: it reads the row and answers the refusal a holder's write would have had"
)]
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
