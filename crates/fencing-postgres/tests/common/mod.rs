//! One isolated schema per test on the shared server, dropped when the test ends well.
// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

use fencing_postgres::{PgLease, PgQualifiedName, PgStore, PgTable, PgTokenSource};
use fencing_test_support::services;
use fencing_testkit::unique_name;
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgPool};

pub(crate) struct Schema {
    pub(crate) pool: PgPool,
    pub(crate) name: String,
    pub(crate) table: PgTable,
}

impl Schema {
    pub(crate) async fn new() -> Self {
        let url = services::postgres_url();
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect(&url)
            .await
            .unwrap_or_else(|e| panic!("connect to PostgreSQL at {url}: {e}"));
        let name = unique_name("fencing").replace('-', "_");
        let table = PgTable::new(&name, "records")
            .unwrap()
            .with_payload_column("payload")
            .unwrap();
        table.create_if_missing(&pool).await.unwrap();
        Schema { pool, name, table }
    }

    pub(crate) fn store(&self) -> PgStore {
        PgStore::new(self.pool.clone(), self.table.clone())
    }

    pub(crate) fn tokens(&self) -> PgTokenSource {
        PgTokenSource::new(
            self.pool.clone(),
            PgQualifiedName::new(&self.name, "tokens").unwrap(),
        )
    }

    pub(crate) async fn lease(&self) -> PgLease {
        let lease = PgLease::new(
            PgQualifiedName::new(&self.name, "leases").unwrap(),
            self.tokens(),
        );
        lease.create_if_missing().await.unwrap();
        lease
    }

    pub(crate) async fn execute(&self, sql: String) {
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(&self.pool)
            .await
            .unwrap();
    }

    pub(crate) async fn drop_schema(self) {
        let sql = format!("DROP SCHEMA \"{}\" CASCADE", self.name);
        self.execute(sql).await;
        self.pool.close().await;
    }
}
