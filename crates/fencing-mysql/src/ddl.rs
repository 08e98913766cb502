//! Schema changes, run the one way this crate runs them.

use fencing_core::Result;
use fencing_core::adapter::RequestEffect;
use sqlx::{AssertSqlSafe, MySqlPool};

use crate::error::MySqlFailure;

/// Runs `ddl` (one idempotent statement) on `pool`; failures name `store`.
pub(crate) async fn run_ddl(pool: &MySqlPool, store: &str, ddl: String) -> Result<()> {
    sqlx::raw_sql(AssertSqlSafe(ddl))
        .execute(pool)
        .await
        .map(drop)
        .map_err(|e| MySqlFailure::from(e).into_error(store, RequestEffect::ReadOnly))
}
