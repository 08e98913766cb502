//! Schema changes, run the one way this crate runs them.

use fencing_core::Result;
use fencing_core::adapter::RequestEffect;
use sqlx::{AssertSqlSafe, PgPool};

use crate::error::PgFailure;

/// Runs `ddl` (one or more statements, each idempotent) on `pool`; failures name `store`.
pub(crate) async fn run_ddl(pool: &PgPool, store: &str, ddl: String) -> Result<()> {
    sqlx::raw_sql(AssertSqlSafe(ddl))
        .execute(pool)
        .await
        .map(drop)
        .map_err(|e| PgFailure::from(e).into_error(store, RequestEffect::ReadOnly))
}
