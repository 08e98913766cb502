//! The payout worker: a payments team's own tables, their own pool, a Redis lease, and a
//! confirm that posts the ledger entry, either in the payouts' database (PostgreSQL, or
//! MySQL and MariaDB: [`crate::payouts`]) in the same transaction, or in DynamoDB with a
//! receipt in S3, each under the lease's token, before the payout's confirm.
//!
//! On AWS, the ledger is a DynamoDB table keyed by `merchant` and `payout_id` whose amount
//! and gateway reference are attributes of their own, and the receipt a JSON object any
//! reader can parse, the fence among its fields.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use fencing::prelude::*;
use fencing::{
    FencedWrite, LeaseRenewal, MismatchPolicy, RecordWrites, Result, RetryPolicy, State, Written,
};

use crate::payouts::{PayoutsDb, lifecycle};

/// Where a paid payout's ledger entry goes.
pub(crate) enum Ledger {
    /// The ledger table of the payouts' database, in the confirm's transaction: a refused
    /// confirm takes its entry with it.
    InDatabase,
    /// An item in DynamoDB and a receipt in S3, written under the lease's token after the
    /// transfer and before the payout's confirm, so that `paid` means all three exist. Each
    /// store checks the fence itself: a stale worker is refused by whichever it reaches first
    /// after a newer worker wrote there.
    Aws {
        /// The ledger: one item per payout, keyed `<merchant>|<payout id>`.
        entries: Arc<DynamoStore>,
        /// The receipts: `receipts/<merchant>/<payout id>`, JSON.
        receipts: Arc<S3Store>,
    },
}

impl Ledger {
    /// The AWS ledger in `table` (created if missing: partition key `merchant`, sort key
    /// `payout_id`, both strings) and `bucket` (created if missing), on the caller's clients.
    pub(crate) async fn on_aws(
        dynamodb: aws_sdk_dynamodb::Client,
        s3: aws_sdk_s3::Client,
        table: &str,
        bucket: &str,
    ) -> Result<Ledger, BoxError> {
        let table = DynamoTable::new(table)?
            .with_key_attribute("merchant")?
            .with_sort_key("payout_id", DynamoKeyType::String)?
            .with_state_attribute("status")?;
        table.create_if_missing(&dynamodb).await?;
        let receipts = S3Store::new(s3, S3Bucket::new(bucket, "receipts/")?)
            .named("receipts")?
            .with_codec(JsonCodec::new());
        if let Err(err) = receipts
            .client()
            .create_bucket()
            .bucket(bucket)
            .send()
            .await
        {
            let owned = err
                .as_service_error()
                .is_some_and(|e| e.is_bucket_already_owned_by_you());
            if !owned {
                return Err(err.into());
            }
        }
        Ok(Ledger::Aws {
            entries: Arc::new(DynamoStore::new(dynamodb, table).named("ledger")?),
            receipts: Arc::new(receipts),
        })
    }

    /// The ledger entry's key in DynamoDB (`<merchant>|<payout id>`), as
    /// [`DynamoTable::record_key`] spells it.
    pub(crate) fn entry_key(
        entries: &DynamoStore,
        merchant: &str,
        payout: &RecordKey,
    ) -> Result<RecordKey> {
        Ok(entries
            .table()
            .record_key(merchant, Some(payout.as_str()))?)
    }

    /// The receipt's key in S3 (`<merchant>/<payout id>`, under the store's `receipts/`).
    pub(crate) fn receipt_key(merchant: &str, payout: &RecordKey) -> Result<RecordKey> {
        Ok(RecordKey::new(format!("{merchant}/{payout}"))?)
    }
}

/// A payment gateway as the worker sees one: it creates a payout transfer once per
/// idempotency key and answers a lookup by key. This one is in memory, records every call,
/// and can stall the calling thread (the whole worker, renewal included, as a stopped
/// process) after it has created a transfer, before its answer returns.
#[derive(Debug, Default)]
pub(crate) struct Gateway {
    journal: Mutex<GatewayJournal>,
    woken: Condvar,
}

/// Every call the gateway saw.
#[derive(Debug, Default)]
pub(crate) struct GatewayJournal {
    /// Transfers by idempotency key: (reference, cents).
    pub(crate) transfers: HashMap<String, (String, i64)>,
    /// Calls that named a key already used.
    pub(crate) repeated_calls: u32,
    /// Lookups.
    pub(crate) lookups: u32,
    stall: Option<(usize, Duration)>,
    calls: usize,
    wake: bool,
}

impl Gateway {
    /// Stalls the calling thread for `pause` on its `nth` call (counting from 1).
    pub(crate) fn stall_on_call(&self, nth: usize, pause: Duration) {
        self.journal.lock().unwrap().stall = Some((nth, pause));
    }

    /// Ends a stall now rather than when its pause runs out (a stopped process continued).
    #[allow(
        dead_code,
        reason = "the tests end a stall early; the binary's runs out"
    )]
    pub(crate) fn wake(&self) {
        self.journal.lock().unwrap().wake = true;
        self.woken.notify_all();
    }

    /// What the gateway did.
    pub(crate) fn journal(&self) -> std::sync::MutexGuard<'_, GatewayJournal> {
        self.journal.lock().unwrap()
    }

    fn transfer(&self, key: &str, cents: i64) -> String {
        let mut journal = self.journal.lock().unwrap();
        journal.calls += 1;
        let count = journal.transfers.len();
        let reference = match journal.transfers.get(key) {
            Some((reference, _)) => {
                let reference = reference.clone();
                journal.repeated_calls += 1;
                reference
            }
            None => {
                let reference = format!("po_{:05}", count + 1);
                journal
                    .transfers
                    .insert(key.to_owned(), (reference.clone(), cents));
                reference
            }
        };
        if let Some((nth, pause)) = journal.stall
            && nth == journal.calls
        {
            // Waiting gives the journal up, so other workers go on calling the gateway.
            drop(
                self.woken
                    .wait_timeout_while(journal, pause, |journal| !journal.wake)
                    .unwrap(),
            );
        }
        reference
    }
}

/// One worker's call to the gateway: the payout's amount, by key.
struct PayoutCall<'a> {
    gateway: &'a Gateway,
    amounts: &'a HashMap<RecordKey, i64>,
}

#[async_trait]
impl SideEffect for PayoutCall<'_> {
    type Receipt = String;

    async fn lookup(&self, key: &RecordKey) -> Result<Option<String>, BoxError> {
        let mut journal = self.gateway.journal();
        journal.lookups += 1;
        Ok(journal.transfers.get(key.as_str()).map(|(r, _)| r.clone()))
    }

    async fn perform(&self, key: &RecordKey, _: &Record) -> Result<String, BoxError> {
        let cents = *self.amounts.get(key).ok_or("a payout without an amount")?;
        Ok(self.gateway.transfer(key.as_str(), cents))
    }
}

/// What one worker's run did.
#[derive(Debug, Default)]
pub(crate) struct Run {
    /// The token its writes presented.
    pub(crate) token: Option<FencingToken>,
    /// Payouts it sent and confirmed.
    pub(crate) paid: u32,
    /// Payouts in flight under an earlier holder whose transfer it found and confirmed.
    pub(crate) recovered: u32,
    /// Payouts it left alone (cancelled while the run went).
    pub(crate) skipped: u32,
    /// Payouts its claim found paid already (by another run, between its read and its claim).
    pub(crate) already_paid: u32,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "token {}: {} paid, {} recovered from an earlier run, {} found paid already, {} left \
             alone",
            self.token.map_or("-".to_owned(), |t| t.to_string()),
            self.paid,
            self.recovered,
            self.already_paid,
            self.skipped
        )
    }
}

/// The resource a merchant's payout runs hold the lease on.
pub(crate) fn resource(merchant: &str) -> Result<ResourceName> {
    Ok(ResourceName::new(format!("payouts:{merchant}"))?)
}

/// One run of the payout worker for `merchant`: acquire the lease, claim every queued (or
/// stuck) payout in one round trip, and for each, call the gateway by payout id, post its
/// ledger entry (by `ledger`) and confirm it. Every write carries the lease's token, so a run
/// that paused past its TTL is refused at its first write after a newer run's claim: in the
/// payouts' database its transaction (ledger entry included) rolls back; on AWS the ledger
/// item or the receipt a newer run wrote refuses it, and the payout is never marked paid by
/// it.
pub(crate) async fn run(
    payouts: &dyn PayoutsDb,
    lease: Arc<dyn Lease>,
    merchant: &str,
    ttl: Ttl,
    gateway: &Gateway,
    ledger: &Ledger,
) -> Result<Run> {
    let store = payouts.store();
    let resource = resource(merchant)?;
    let mut stores: Vec<Arc<dyn FencedStore>> = vec![store.clone()];
    if let Ledger::Aws { entries, receipts } = ledger {
        stores.push(entries.clone());
        stores.push(receipts.clone());
    }
    let retry = RetryPolicy::new(20, Duration::from_millis(100), Duration::from_secs(1))?;
    let renewing = lease.clone();
    // Skip: a payout cancelled meanwhile is not this run's to pay, and no sign of a newer run
    // (the fence is checked before the state), so the others are still paid. Without it, the
    // first cancelled payout would abort the whole run. A payout found paid already is not a
    // mismatch under any policy: the lifecycle's claim names its done state.
    FencedBatch::scope(lease, &resource, ttl, stores)
        .retry(retry)
        .mismatch_policy(MismatchPolicy::Skip)
        .run(async |batch| {
            let renewal = LeaseRenewal::start(renewing, batch.guard().clone(), ttl.duration() / 3);
            let mut run = Run {
                token: Some(batch.token()),
                ..Run::default()
            };
            let lifecycle = lifecycle();
            // A plain read lists the candidates; the claim, fenced and conditional on the state,
            // decides which are this run's (a payout cancelled meanwhile is skipped there).
            let amounts = payouts.unpaid_amounts(merchant).await?;
            let keys: Vec<RecordKey> = amounts.keys().cloned().collect();
            let claimed = payouts
                .claim_all(&batch.holder(), &keys, &lifecycle.claim())
                .await?;
            run.already_paid = claimed.already_paid as u32;
            let call = PayoutCall {
                gateway,
                amounts: &amounts,
            };
            let paid_with_entry = PaidWithLedgerEntry {
                payouts,
                store: &*store,
                ledger,
                merchant,
                amounts: &amounts,
                lifecycle: &lifecycle,
            };
            // Eight transfers side by side, each confirmed with its ledger entry; a renewal
            // that gives up stops new transfers (the guard is the renewal's too).
            let settled = batch
                .holder()
                .pipeline(&*store, &lifecycle, &call)
                .concurrency(8)
                .writes(&paid_with_entry)
                .run_claimed(claimed.written)
                .await;
            for (_, outcome) in &settled.outcomes {
                match outcome {
                    EffectOutcome::Performed(_) => run.paid += 1,
                    EffectOutcome::Recovered(_) => run.recovered += 1,
                    EffectOutcome::AlreadyDone => run.already_paid += 1,
                }
            }
            // A payout cancelled meanwhile: left alone under the skip policy, and listed by the
            // batch whichever write met it (the grouped claim, or a confirm).
            run.skipped += batch.skipped().len() as u32;
            renewal.stop();
            settled.error.map_or(Ok(run), Err)
        })
        .await
}

/// Each payout's confirm with its ledger entry: in one transaction of the payouts' database,
/// or (on AWS) after the ledger item and the receipt, each under the same fence.
struct PaidWithLedgerEntry<'a> {
    payouts: &'a dyn PayoutsDb,
    store: &'a dyn FencedStore,
    ledger: &'a Ledger,
    merchant: &'a str,
    amounts: &'a HashMap<RecordKey, i64>,
    lifecycle: &'a Lifecycle,
}

#[async_trait]
impl RecordWrites<String> for PaidWithLedgerEntry<'_> {
    async fn claim(&self, holder: &Holder, key: &RecordKey) -> Result<Written> {
        holder.write(self.store, key, &self.lifecycle.claim()).await
    }

    async fn confirm(
        &self,
        holder: &Holder,
        key: &RecordKey,
        reference: &String,
    ) -> Result<Written> {
        match self.ledger {
            Ledger::InDatabase => {
                self.payouts
                    .confirm_with_ledger_entry(holder, key, reference)
                    .await
            }
            Ledger::Aws { entries, receipts } => {
                let payout = Payout {
                    merchant: self.merchant,
                    key,
                    cents: self.amounts[key],
                    reference,
                };
                post_to_aws(entries, receipts, holder, &payout).await?;
                self.payouts.confirm(holder, key, reference).await
            }
        }
    }
}

/// A transferred payout, as its ledger entry and receipt record it.
pub(crate) struct Payout<'a> {
    /// Whose payout it is.
    pub(crate) merchant: &'a str,
    /// Its id (the payouts row's key).
    pub(crate) key: &'a RecordKey,
    /// Its amount.
    pub(crate) cents: i64,
    /// The gateway's reference for its transfer.
    pub(crate) reference: &'a str,
}

/// Writes the payout's ledger item in DynamoDB (state `posted`, its amount and reference as
/// attributes of their own) and then its JSON receipt in S3, each under `fence`. Both are
/// claims, so a newer holder that finishes a payout an older one left in flight writes them
/// again under its own token, and the older holder's late copy is refused in each store.
pub(crate) async fn post_to_aws(
    entries: &DynamoStore,
    receipts: &S3Store,
    holder: &Holder,
    payout: &Payout<'_>,
) -> Result<()> {
    let state = |s: &str| State::new(s).expect("a state name");
    let entry = DynamoWrite::new(FencedWrite::claim().set_state(state("posted")))
        .set("amount_cents", AttributeValue::N(payout.cents.to_string()))?
        .set(
            "gateway_ref",
            AttributeValue::S(payout.reference.to_owned()),
        )?;
    let entry_key = Ledger::entry_key(entries, payout.merchant, payout.key)?;
    entries.write_with(holder, &entry_key, entry).await?;
    let receipt = serde_json::json!({
        "payout_id": payout.key.as_str(),
        "merchant": payout.merchant,
        "amount_cents": payout.cents,
        "gateway_ref": payout.reference,
    });
    let receipt = FencedWrite::claim()
        .set_state(state("issued"))
        .set_payload(receipt.to_string());
    let receipt_key = Ledger::receipt_key(payout.merchant, payout.key)?;
    holder.write(receipts, &receipt_key, &receipt).await?;
    Ok(())
}
