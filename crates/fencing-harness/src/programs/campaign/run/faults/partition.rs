//! A worker cut off from one server past the TTL: in a run with such a fault each worker
//! reaches that server through a TCP relay of its own, and the holder's relay is partitioned
//! for the fault's pause, then healed. A partition holds every byte both ways (nothing
//! refused, nothing answered), so what the worker sent meanwhile has an unknown outcome to it
//! and reaches the server at the heal, after the other worker may have taken over and written.

use std::time::Duration;

use fencing_harness::plan::{Fault, FaultKind};

use super::super::Watch;

/// A server a worker reaches through a relay of its own, in a run that cuts a worker off from
/// it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::programs::campaign::run) enum Link {
    /// Refunds, the job row, and the leases, counters or epochs kept there.
    Postgres,
    /// The Redis lease and its counters.
    Redis,
    /// The AWS emulator: the queue, the ledger, the receipts, the DynamoDB lease.
    Aws,
    /// The first member of the etcd cluster (the others reached directly).
    Etcd,
    /// MySQL: the MySQL lease and its counters.
    Mysql,
}

impl Link {
    pub(in crate::programs::campaign::run) const ALL: [Link; 5] = [
        Link::Postgres,
        Link::Redis,
        Link::Aws,
        Link::Etcd,
        Link::Mysql,
    ];

    /// The fault that cuts a worker off from this server.
    pub(in crate::programs::campaign::run) fn fault(self) -> FaultKind {
        match self {
            Link::Postgres => FaultKind::PgPartition,
            Link::Redis => FaultKind::RedisPartition,
            Link::Aws => FaultKind::AwsPartition,
            Link::Etcd => FaultKind::EtcdPartition,
            Link::Mysql => FaultKind::MysqlPartition,
        }
    }

    /// The server a fault cuts a worker off from, if it is a partition.
    fn cut_by(kind: FaultKind) -> Option<Link> {
        Link::ALL.into_iter().find(|link| link.fault() == kind)
    }

    /// Its name in the picture.
    fn server(self) -> &'static str {
        match self {
            Link::Postgres => "PostgreSQL",
            Link::Redis => "Redis",
            Link::Aws => "the AWS emulator",
            Link::Etcd => "one etcd member",
            Link::Mysql => "MySQL",
        }
    }
}

impl Watch<'_> {
    /// Cuts `holder` off from the server the fault names for the fault's pause, through its
    /// relay, then heals it; whether it struck (a holder known, reaching that server through
    /// a relay).
    pub(super) fn cut_off(
        &mut self,
        fault: &Fault,
        holder: Option<(String, u32)>,
        at: Duration,
    ) -> bool {
        let Some(link) = Link::cut_by(fault.kind) else {
            return false;
        };
        let cut = holder.and_then(|(name, _)| {
            let worker = self.workers.get(&name)?;
            let (_, relay) = worker.relays.iter().find(|(l, _)| *l == link)?;
            Some((name, relay.clone()))
        });
        let Some((name, relay)) = cut else {
            return false;
        };
        self.picture
            .partitioned(at, &name, link.server(), fault.pause);
        relay.partition();
        let pause = fault.pause;
        tokio::spawn(async move {
            tokio::time::sleep(pause).await;
            relay.heal();
        });
        true
    }
}
