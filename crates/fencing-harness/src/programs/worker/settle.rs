//! One acquisition's work: every refund not yet filed, in id order, one at a time or
//! pipelined (several refunds in flight, [`fencing_core::Pipeline`]).

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use fencing_core::adapter::SqlValue;
use fencing_core::{
    EffectOutcome, EffectStart, FencedBatch, FencedWrite, Holder, Lifecycle, RecordKey,
    RecordWrites, Result, SkippedRecord, Written,
};
use fencing_harness::payments::GatewayCall;
use fencing_harness::stores::{JOB, MERCHANT, RunStores};
use fencing_harness::tables::UnfiledRefund;
use futures_util::TryStreamExt;

/// What a worker settles with.
pub(crate) struct Settlement {
    pub(crate) stores: RunStores,
    pub(crate) gateway: String,
    pub(crate) stop_after_call: Option<String>,
    /// How long a write may go unanswered (a store cut off by a partition) before its outcome
    /// is taken as unknown and it is sent again.
    pub(crate) request_timeout: Duration,
}

impl Settlement {
    /// Says the gateway made (or replayed) `key`'s refund, and stops here when told to.
    fn called(&self, key: &RecordKey) {
        println!("called {key}");
        if self.stop_after_call.as_deref() == Some(key.as_str()) {
            // The campaign kills it while stopped.
            fencing_harness::stop_this_process();
        }
    }

    /// The batch's holder, giving up on an attempt unanswered for the request timeout.
    fn holder(&self, batch: &FencedBatch) -> Holder {
        batch.holder().with_request_timeout(self.request_timeout)
    }

    /// Who finished the job, once someone has: read plainly, as the job's row holds it.
    pub(crate) async fn job_finished_by(&self) -> Result<Option<String>> {
        self.stores.job.finished_by(JOB).await
    }

    /// The job under `batch`: takes the job's row (from then on an earlier holder is refused
    /// there), settles every unfiled refund (`concurrency` in flight; 1 is one after
    /// another), and marks the job finished by `holder` when none is left. Returns how many
    /// refunds it filed once the job is finished, `None` when refunds are left (skipped
    /// ones); a refused write ends it.
    pub(crate) async fn run_job(
        &self,
        batch: &FencedBatch,
        holder: &str,
        concurrency: usize,
    ) -> Result<Option<usize>> {
        self.write_job(batch, "taken_by", holder).await?;
        let filed = match concurrency {
            1 => self.settle(batch, holder).await?,
            n => self.settle_pipelined(batch, holder, n).await?,
        };
        if self.unfiled().await? > 0 {
            return Ok(None);
        }
        self.write_job(batch, "finished_by", holder).await?;
        Ok(Some(filed))
    }

    async fn write_job(&self, batch: &FencedBatch, column: &str, holder: &str) -> Result<()> {
        let key = RecordKey::new(JOB)?;
        let columns = [(column, SqlValue::from(holder))];
        self.stores
            .job
            .write_with(&self.holder(batch), &key, FencedWrite::claim(), &columns)
            .await
            .map(drop)
    }

    /// How many refunds are not filed yet.
    async fn unfiled(&self) -> Result<i64> {
        self.stores.refunds.count_unfiled(MERCHANT).await
    }

    async fn list(&self) -> Result<Vec<UnfiledRefund>> {
        self.stores.refunds.unfiled(MERCHANT).await
    }

    /// Settles every unfiled refund under `batch`, `holder` naming this acquisition in the
    /// rows it claims and confirms. Returns how many it filed; a refused write ends it.
    async fn settle(&self, batch: &FencedBatch, holder: &str) -> Result<usize> {
        let lifecycle = Lifecycle::default();
        let refunds = &self.stores.refunds;
        let unfiled = self.list().await?;
        let amounts: HashMap<RecordKey, i64> = unfiled
            .iter()
            .map(|u| (u.key.clone(), u.amount_cents))
            .collect();
        let after_perform = |key: &RecordKey| self.called(key);
        let call = GatewayCall {
            addr: &self.gateway,
            by: holder,
            amounts: &amounts,
            after_perform: &after_perform,
        };
        let mut filed = 0;
        for refund in &unfiled {
            let key = &refund.key;
            let reference = match &refund.confirmed_reference {
                Some(reference) => {
                    if !self.take_over(batch, key).await? {
                        continue;
                    }
                    reference.clone()
                }
                None => {
                    let claimed = refunds
                        .write_with(
                            &self.holder(batch),
                            key,
                            lifecycle.claim(),
                            &[("claimed_by", holder.into())],
                        )
                        .await;
                    let claimed = match claimed {
                        Err(err) if SkippedRecord::of(&err).is_some() => continue,
                        claimed => claimed?,
                    };
                    println!("claimed {key}");
                    let confirm = async |reference: &String| {
                        refunds
                            .write_with(
                                &self.holder(batch),
                                key,
                                lifecycle.confirm(),
                                &confirmed_by(holder, reference),
                            )
                            .await
                            .map(drop)
                    };
                    match self
                        .holder(batch)
                        .run_effect_then(
                            &*refunds.store(),
                            EffectStart::Claimed(&claimed),
                            &lifecycle,
                            &call,
                            confirm,
                        )
                        .await
                    {
                        Ok(EffectOutcome::Performed(reference))
                        | Ok(EffectOutcome::Recovered(reference)) => reference,
                        Ok(EffectOutcome::AlreadyDone) => continue,
                        // Left alone under the skip policy and listed in `batch.skipped()`.
                        Err(err) if err.is_mismatch() => continue,
                        Err(err) => return Err(err),
                    }
                }
            };
            self.file(batch, holder, key, refund.amount_cents, &reference)
                .await?;
            filed += 1;
        }
        Ok(filed)
    }

    /// Settles every unfiled refund under `batch` as [`Self::settle`] does, `concurrency`
    /// of them in flight at once: those an earlier holder confirmed are filed side by side,
    /// the rest go through a pipeline whose claims and confirms carry this holder's name and
    /// the gateway's reference, each confirm followed by the refund's filing.
    async fn settle_pipelined(
        &self,
        batch: &FencedBatch,
        holder: &str,
        concurrency: usize,
    ) -> Result<usize> {
        let lifecycle = Lifecycle::default();
        let unfiled = self.list().await?;
        let (confirmed, unsent): (Vec<UnfiledRefund>, Vec<UnfiledRefund>) = unfiled
            .into_iter()
            .partition(|u| u.confirmed_reference.is_some());
        let earlier = std::sync::atomic::AtomicUsize::new(0);
        futures_util::stream::iter(confirmed.iter().map(Ok::<_, fencing_core::Error>))
            .try_for_each_concurrent(concurrency, async |refund| {
                let reference = refund.confirmed_reference.as_deref().unwrap_or_default();
                if !self.take_over(batch, &refund.key).await? {
                    return Ok(());
                }
                self.file(batch, holder, &refund.key, refund.amount_cents, reference)
                    .await?;
                earlier.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok(())
            })
            .await?;
        let earlier = earlier.into_inner();
        let amounts: HashMap<RecordKey, i64> = unsent
            .iter()
            .map(|u| (u.key.clone(), u.amount_cents))
            .collect();
        let after_perform = |key: &RecordKey| self.called(key);
        let call = GatewayCall {
            addr: &self.gateway,
            by: holder,
            amounts: &amounts,
            after_perform: &after_perform,
        };
        let writes = RefundWrites {
            settlement: self,
            batch,
            holder,
            lifecycle: &lifecycle,
            amounts: &amounts,
        };
        let refunds = self.stores.refunds.store();
        let settled = self
            .holder(batch)
            .pipeline(&*refunds, &lifecycle, &call)
            .concurrency(concurrency)
            .writes(&writes)
            .run(unsent.into_iter().map(|u| u.key))
            .await;
        let outcomes = settled.into_result()?;
        let sent_here = outcomes
            .iter()
            .filter(|(_, o)| !matches!(o, EffectOutcome::AlreadyDone))
            .count();
        Ok(earlier + sent_here)
    }

    /// Raises the fence of a refund an earlier holder confirmed and did not file, before
    /// anything else of it is written: from then on that holder, should it wake, is refused
    /// on the refund itself, and cannot mark it filed beside this holder's ledger entry and
    /// receipt (each store checks its own fence; only this order makes the three agree).
    ///
    /// Only while the refund is still unfiled, checked under its row lock in the claim's own
    /// transaction: the listing is a snapshot, and the earlier holder may have filed it since
    /// (a stalled holder's last writes land until the next claim). Raising the fence of a
    /// refund filed under an older token would leave the refund's fence above the ledger
    /// entry's and the receipt's, and nothing would ever write them again. Returns whether it
    /// took the refund over.
    async fn take_over(&self, batch: &FencedBatch, key: &RecordKey) -> Result<bool> {
        let holder = self.holder(batch);
        self.stores.refunds.claim_unless_filed(&holder, key).await
    }

    /// Files a confirmed refund: its ledger entry, its receipt, then `filed` on its row, each
    /// under the batch's holder.
    async fn file(
        &self,
        batch: &FencedBatch,
        holder: &str,
        key: &RecordKey,
        amount_cents: i64,
        reference: &str,
    ) -> Result<()> {
        let refunds = &self.stores.refunds;
        let entry = serde_json::json!({
            "refund": key.as_str(),
            "amount_cents": amount_cents,
            "reference": reference,
            "by": holder,
        });
        self.holder(batch)
            .write(
                &*self.stores.ledger,
                key,
                &FencedWrite::claim().set_payload(entry.to_string().into_bytes()),
            )
            .await?;
        let receipt = format!(
            "refund {key} of {}.{:02} EUR to merchant {MERCHANT}: gateway reference {reference}, filed by {holder}",
            amount_cents / 100,
            amount_cents % 100
        );
        self.holder(batch)
            .write(
                &*self.stores.receipts,
                key,
                &FencedWrite::claim().set_payload(receipt.into_bytes()),
            )
            .await?;
        let filed = [("filed", SqlValue::Bool(true))];
        refunds
            .write_with(&self.holder(batch), key, FencedWrite::claim(), &filed)
            .await?;
        println!("filed {key}");
        Ok(())
    }
}

/// The pipeline's claims and confirms of one acquisition: the refund row names the holder
/// that claimed and confirmed it and the gateway's reference, and each confirm is followed by
/// the refund's filing (ledger entry, receipt, `filed`), as one record at a time does.
struct RefundWrites<'a> {
    settlement: &'a Settlement,
    batch: &'a FencedBatch,
    holder: &'a str,
    lifecycle: &'a Lifecycle,
    amounts: &'a HashMap<RecordKey, i64>,
}

#[async_trait]
impl RecordWrites<String> for RefundWrites<'_> {
    async fn claim(&self, holder: &Holder, key: &RecordKey) -> Result<Written> {
        let s = self.settlement;
        let claimed_by = [("claimed_by", self.holder.into())];
        let claim = self.lifecycle.claim();
        let claimed = s
            .stores
            .refunds
            .write_with(holder, key, claim, &claimed_by)
            .await?;
        println!("claimed {key}");
        Ok(claimed)
    }

    async fn confirm(
        &self,
        holder: &Holder,
        key: &RecordKey,
        reference: &String,
    ) -> Result<Written> {
        let s = self.settlement;
        let columns = confirmed_by(self.holder, reference);
        let confirm = self.lifecycle.confirm();
        let confirmed = s
            .stores
            .refunds
            .write_with(holder, key, confirm, &columns)
            .await?;
        let amount_cents = self.amounts[key];
        s.file(self.batch, self.holder, key, amount_cents, reference)
            .await?;
        Ok(confirmed)
    }
}

/// The columns a confirm sets beside the fence: who confirmed, and the gateway's reference.
fn confirmed_by<'a>(holder: &str, reference: &str) -> [(&'a str, SqlValue); 2] {
    [
        ("confirmed_by", holder.into()),
        ("gateway_ref", reference.into()),
    ]
}
