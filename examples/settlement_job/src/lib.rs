//! The settlement job, written as a team writes it with the library: take the lease on
//! `settle:<merchant>`, then for every refund claim its row with the holder's token, call
//! the gateway, confirm the row; release. The simulation around it ([`Delivery`]) supplies
//! the lease, the rows, the gateway and the queue's redeliveries, and watches each of them.
//!
//! A package of its own so that what runs it sees it as Cargo does: `cargo run --example
//! settlement` and the scenario tests that run the settlement (the worked example, the torture
//! schedules, the timeline's pictures, PostgreSQL and Redis under faults) depend on it, so
//! every run they check is this job's.

use fencing::{Error, Holder, Result, acquire, async_trait};
use fencing_simulation::settlement::{Delivery, Job};

/// The job: one merchant's refunds, settled under a lease.
pub struct Settle;

#[async_trait]
impl Job for Settle {
    async fn run(&self, delivery: &Delivery) -> Result<()> {
        let lease = delivery.lease();
        let guard = acquire(lease, delivery.resource(), delivery.ttl(), delivery.retry()).await?;
        let settled = match delivery.concurrency() {
            1 => one_by_one(&guard.holder(), delivery).await,
            n => pipelined(&guard.holder(), delivery, n).await,
        };
        match (settled, lease.release(guard).await) {
            (Err(err), _) => Err(err),
            // The lease ended before the release: the fences kept every write of the batch
            // to its own tenure, so the work stands.
            (Ok(()), Ok(()) | Err(Error::LeaseLost { .. })) => Ok(()),
            (Ok(()), Err(err)) => Err(err),
        }
    }
}

/// Each refund claimed, sent and confirmed before the next; the first refusal stops the
/// batch (a newer holder has the rows).
async fn one_by_one(holder: &Holder, delivery: &Delivery) -> Result<()> {
    let (store, lifecycle, gateway) = (delivery.store(), delivery.lifecycle(), delivery.gateway());
    for refund in delivery.refunds() {
        let outcome = holder.run_effect(store, refund, lifecycle, gateway).await?;
        delivery.settled(refund, &outcome);
    }
    Ok(())
}

/// `n` gateway calls in flight, claims and confirms written `n` rows at a time.
async fn pipelined(holder: &Holder, delivery: &Delivery, n: usize) -> Result<()> {
    let settled = holder
        .pipeline(delivery.store(), delivery.lifecycle(), delivery.gateway())
        .concurrency(n)
        .group_size(n)
        .window(2 * n)
        .run(delivery.refunds().iter().cloned())
        .await;
    for (refund, outcome) in &settled.outcomes {
        delivery.settled(refund, outcome);
    }
    settled.error.map_or(Ok(()), Err)
}
