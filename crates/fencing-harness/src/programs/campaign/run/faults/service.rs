//! A server of the run struck whole: Redis restarted with nothing persisted (the lease and
//! the counter vanish; the epochs behind its tokens are durable elsewhere), every PostgreSQL
//! or MySQL connection of the run's workers terminated (a write in flight committed or not,
//! its worker unable to tell), or the etcd cluster's leader killed and restarted on its data
//! after the fault's pause (the other members elect a new one under the holder's renewals).

use std::time::Duration;

use fencing_harness::plan::{Fault, FaultKind};
use fencing_harness::stores::{Clients, RunNames};
use fencing_test_support::services::EtcdCluster;
use sqlx::AssertSqlSafe;

use super::super::{RunError, Watch};

impl Watch<'_> {
    /// Strikes the server `fault` names; whether it counts as injected (a connection found to
    /// terminate, or a server struck).
    pub(super) async fn strike_service(
        &mut self,
        fault: &Fault,
        at: Duration,
    ) -> Result<bool, RunError> {
        let services = &mut *self.spawner.services;
        Ok(match fault.kind {
            FaultKind::RedisRestart => {
                self.picture
                    .service_fault(at, "Redis restarted, nothing persisted");
                tokio::task::block_in_place(|| services.redis.restart());
                true
            }
            FaultKind::PgTerminate => {
                self.picture
                    .service_fault(at, "the workers' PostgreSQL connections terminated");
                terminate_backends(self.clients, self.names).await? > 0
            }
            FaultKind::MysqlKill => {
                self.picture
                    .service_fault(at, "the workers' MySQL connections killed");
                kill_mysql_connections(self.clients, self.names).await? > 0
            }
            FaultKind::EtcdLeaderKill => {
                self.picture.service_fault(
                    at,
                    &format!("etcd leader killed for {} ms", fault.pause.as_millis()),
                );
                kill_etcd_leader(&mut services.etcd, fault.pause).await?;
                true
            }
            other => unreachable!("{other:?} is not a fault of a service"),
        })
    }
}

/// SIGKILLs the etcd cluster's leader and restarts it on its data once `down` has passed:
/// the other two members elect a new leader meanwhile, with the holder's renewal and the
/// other worker's acquisitions in flight.
async fn kill_etcd_leader(etcd: &mut EtcdCluster, down: Duration) -> Result<(), RunError> {
    let leader = tokio::task::block_in_place(|| etcd.wait_for_leader(Duration::from_secs(10)))?;
    tokio::task::block_in_place(|| etcd.kill(leader));
    tokio::time::sleep(down).await;
    tokio::task::block_in_place(|| etcd.restart(leader));
    Ok(())
}

/// `KILL CONNECTION` of every MySQL connection whose database is the run's (a worker's
/// connections use it by default; the campaign's own do not); how many it killed. A
/// connection gone meanwhile is not counted.
async fn kill_mysql_connections(clients: &Clients, names: &RunNames) -> Result<usize, RunError> {
    let pool = clients.mysql()?;
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()",
    )
    .bind(names.mysql_database())
    .fetch_all(pool)
    .await?;
    let mut killed = 0;
    for id in ids {
        let kill = sqlx::raw_sql(AssertSqlSafe(format!("KILL CONNECTION {id}")));
        if kill.execute(pool).await.is_ok() {
            killed += 1;
        }
    }
    Ok(killed)
}

/// `pg_terminate_backend` of every PostgreSQL connection of the run's workers (their
/// application names start with the run's); how many it terminated.
async fn terminate_backends(clients: &Clients, names: &RunNames) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE application_name LIKE $1",
    )
    .bind(format!("harness_{}_%", names.id()))
    .fetch_one(&clients.pool)
    .await
}
