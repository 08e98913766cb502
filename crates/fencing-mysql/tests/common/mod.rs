//! One database per test on the shared server, dropped when the test ends well.
// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

use fencing_mysql::{
    MySqlEpochSource, MySqlLease, MySqlQualifiedName, MySqlStore, MySqlTable, MySqlTokenSource,
};
use fencing_test_support::services;
use fencing_testkit::unique_name;
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::{AssertSqlSafe, MySqlPool};

pub(crate) struct Database {
    pub(crate) pool: MySqlPool,
    pub(crate) name: String,
    pub(crate) table: MySqlTable,
}

impl Database {
    pub(crate) async fn new() -> Self {
        let url = services::mysql_url();
        let options: MySqlConnectOptions = url.parse().unwrap();
        let name = unique_name("fencing").replace('-', "_");
        let admin = MySqlPoolOptions::new()
            .max_connections(1)
            .connect_with(options.clone())
            .await
            .unwrap_or_else(|e| panic!("connect to MySQL at {url}: {e}"));
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE `{name}`")))
            .execute(&admin)
            .await
            .unwrap();
        admin.close().await;
        let pool = MySqlPoolOptions::new()
            .max_connections(8)
            .connect_with(options.database(&name))
            .await
            .unwrap();
        let table = MySqlTable::new(&name, "records")
            .unwrap()
            .with_payload_column("payload")
            .unwrap();
        table.create_if_missing(&pool).await.unwrap();
        Database { pool, name, table }
    }

    pub(crate) fn store(&self) -> MySqlStore {
        MySqlStore::new(self.pool.clone(), self.table.clone())
    }

    pub(crate) fn tokens(&self) -> MySqlTokenSource {
        MySqlTokenSource::new(
            self.pool.clone(),
            MySqlQualifiedName::new(&self.name, "tokens").unwrap(),
        )
    }

    pub(crate) async fn epochs(&self) -> MySqlEpochSource {
        let epochs = MySqlEpochSource::new(
            self.pool.clone(),
            MySqlQualifiedName::new(&self.name, "epochs").unwrap(),
        );
        epochs.create_if_missing().await.unwrap();
        epochs
    }

    pub(crate) async fn lease(&self) -> MySqlLease {
        let lease = MySqlLease::new(
            MySqlQualifiedName::new(&self.name, "leases").unwrap(),
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

    pub(crate) async fn drop_database(self) {
        let sql = format!("DROP DATABASE `{}`", self.name);
        self.execute(sql).await;
        self.pool.close().await;
    }
}
