//! The faults a run strikes, one room per family: `process` (a worker stopped or killed),
//! `partition` (a worker cut off from one server), `clock` (wall clocks set wrong), `service`
//! (a server restarted, its connections killed, its leader killed), `container` (a store's
//! container paused) and `failover` (a lagging follower promoted). Each room says when a
//! plan has its faults (`fencing_harness::plan`, `Deployment::suffers`), how it strikes, and
//! what a run then shows; the audit and the history check judge every run alike.

mod clock;
mod container;
mod failover;
mod partition;
mod process;
mod service;

use fencing_harness::plan::{Fault, FaultKind};

pub(super) use clock::FakedClock;
pub(super) use failover::{Failover, LONGEST_LAG, start_failover};
pub(super) use partition::Link;
pub(super) use process::wait_until_stopped;

use super::{RunError, Watch};

impl Watch<'_> {
    /// Strikes every pending fault whose time has come (by refunds filed).
    pub(in crate::programs::campaign::run) async fn strike_due_faults(
        &mut self,
    ) -> Result<(), RunError> {
        while let Some(fault) = self.pending.first().filter(|f| self.filed >= f.at).cloned() {
            let holder = self
                .last_writer
                .as_ref()
                .and_then(|name| Some((name, self.workers.get(name)?)))
                .filter(|(_, w)| !w.killed)
                .map(|(name, w)| (name.clone(), w.pid));
            // Stalling (or killing) a worker that only waits for the lease proves nothing: the
            // fault waits until the campaign knows the holder again.
            if matches!(
                fault.kind,
                FaultKind::Stall
                    | FaultKind::RedisFailover
                    | FaultKind::PgFailover
                    | FaultKind::PgPartition
                    | FaultKind::RedisPartition
                    | FaultKind::AwsPartition
                    | FaultKind::EtcdPartition
                    | FaultKind::ClockBehind
                    | FaultKind::ClockAhead
            ) && holder.is_none()
            {
                break;
            }
            self.pending.remove(0);
            if self.strike(&fault, holder).await? {
                *self.injected.entry(fault.kind).or_default() += 1;
            }
        }
        Ok(())
    }

    /// Strikes `fault` (on `holder`, for the faults that strike the holder); whether it
    /// counts as injected now.
    async fn strike(
        &mut self,
        fault: &Fault,
        holder: Option<(String, u32)>,
    ) -> Result<bool, RunError> {
        let at = self.started.elapsed();
        Ok(match fault.kind {
            FaultKind::Stall => self.stall(fault, holder, at),
            FaultKind::PgPartition
            | FaultKind::RedisPartition
            | FaultKind::AwsPartition
            | FaultKind::EtcdPartition
            | FaultKind::MysqlPartition => self.cut_off(fault, holder, at),
            FaultKind::ClockBehind | FaultKind::ClockAhead => {
                self.jump_clocks(fault, holder, at)?
            }
            FaultKind::RedisRestart
            | FaultKind::PgTerminate
            | FaultKind::MysqlKill
            | FaultKind::EtcdLeaderKill => self.strike_service(fault, at).await?,
            FaultKind::ContainerPause => self.pause_container(fault, at).await,
            FaultKind::RedisFailover | FaultKind::PgFailover => {
                self.start_lag(holder, at)?;
                false
            }
            // Struck by the worker itself, stopped after its call (`on_line`).
            FaultKind::KillAfterCall => false,
        })
    }
}
