//! The payout worker: a payments team's own tables, their own pool, a Redis lease, and a
//! confirm that posts the ledger entry, either in PostgreSQL in the same transaction, or in
//! DynamoDB with a receipt in S3, each under the lease's token, before the PostgreSQL confirm.
//!
//! The tables are the team's, as they were before fencing: `payouts` keyed by `uuid` with a
//! `status` column, and `"Billing"."LedgerEntries"` with a `bigserial` key. The only change
//! fencing asks for is the one `PgTable::migration_sql` prints (a `fence` column and its
//! check), which a migration tool would run. On AWS, the ledger is a DynamoDB table keyed by
//! `merchant` and `payout_id` whose amount and gateway reference are attributes of their own,
//! and the receipt a JSON object any reader can parse, the fence among its fields.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use fencing::postgres::PgValue;
use fencing::prelude::*;
use fencing::{
    FencedWrite, LeaseRenewal, MismatchPolicy, RecordWrites, Result, RetryPolicy, State, Written,
};
use sqlx::{AssertSqlSafe, PgPool, Row};

/// The team's schema, as it was before fencing, in `schema` (the ledger in `"Billing"`-like
/// `"<schema>_Billing"`, so runs do not share it), with a few payouts for `merchant`.
pub(crate) async fn create_tables(pool: &PgPool, schema: &str) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE SCHEMA IF NOT EXISTS \"{schema}\"; \
         CREATE TABLE IF NOT EXISTS \"{schema}\".payouts (id uuid PRIMARY KEY, merchant text NOT NULL, \
           amount_cents bigint NOT NULL, status text NOT NULL DEFAULT 'queued', \
           created_at timestamptz NOT NULL DEFAULT clock_timestamp(), paid_at timestamptz, gateway_ref text); \
         CREATE SCHEMA IF NOT EXISTS \"{schema}_Billing\"; \
         CREATE TABLE IF NOT EXISTS \"{schema}_Billing\".\"LedgerEntries\" (id bigserial PRIMARY KEY, \
           payout_id uuid NOT NULL UNIQUE, amount_cents bigint NOT NULL, \
           posted_at timestamptz NOT NULL DEFAULT now())"
    )))
    .execute(pool)
    .await
    .map(drop)
}

/// Queues `count` payouts of `cents` each for `merchant`.
pub(crate) async fn queue_payouts(
    pool: &PgPool,
    schema: &str,
    merchant: &str,
    count: i64,
    cents: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO \"{schema}\".payouts (id, merchant, amount_cents) \
         SELECT gen_random_uuid(), $1, $2 FROM generate_series(1, $3)"
    )))
    .bind(merchant)
    .bind(cents)
    .bind(count)
    .execute(pool)
    .await
    .map(drop)
}

/// The payouts table as fencing sees it: key `id` (uuid), state `status`, fence `fence`.
pub(crate) fn payouts_table(schema: &str) -> Result<PgTable> {
    Ok(PgTable::new(schema, "payouts")?.with_state_column("status")?)
}

/// Where a paid payout's ledger entry goes.
pub(crate) enum Ledger {
    /// `"<schema>_Billing"."LedgerEntries"`, in the confirm's transaction: a refused confirm
    /// takes its entry with it.
    Postgres,
    /// An item in DynamoDB and a receipt in S3, written under the lease's token after the
    /// transfer and before the PostgreSQL confirm, so that `paid` means all three exist. Each
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

/// `queued → sending → paid`.
pub(crate) fn lifecycle() -> Lifecycle {
    let state = |s: &str| State::new(s).expect("a state name");
    Lifecycle::new(state("queued"), state("sending"), state("paid")).expect("three states")
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

/// The amount of each payout of `merchant` not yet paid, by payout id: a plain read, which
/// claims nothing.
async fn unpaid_amounts(
    pool: &PgPool,
    schema: &str,
    merchant: &str,
    payouts: &PgStore,
) -> Result<HashMap<RecordKey, i64>> {
    let rows = sqlx::query(AssertSqlSafe(format!(
        "SELECT id::text, amount_cents FROM \"{schema}\".payouts \
         WHERE merchant = $1 AND status <> 'paid' ORDER BY created_at, id"
    )))
    .bind(merchant)
    .fetch_all(pool)
    .await
    .map_err(|e| payouts.sql_failure(e))?;
    let mut amounts = HashMap::new();
    for row in &rows {
        amounts.insert(
            RecordKey::new(row.get::<String, _>(0))?,
            row.get::<i64, _>(1),
        );
    }
    Ok(amounts)
}

/// One run of the payout worker for `merchant`: acquire the lease, claim every queued (or
/// stuck) payout in one statement, and for each, call the gateway by payout id, post its
/// ledger entry (by `ledger`) and confirm it. Every write carries the lease's token, so a run
/// that paused past its TTL is refused at its first write after a newer run's claim: in
/// PostgreSQL its transaction (ledger entry included) rolls back; on AWS the ledger item or
/// the receipt a newer run wrote refuses it, and the payout is never marked paid by it.
pub(crate) async fn run(
    pool: &PgPool,
    schema: &str,
    lease: Arc<dyn Lease>,
    merchant: &str,
    ttl: Ttl,
    gateway: &Gateway,
    ledger: &Ledger,
) -> Result<Run> {
    let payouts = Arc::new(PgStore::new(pool.clone(), payouts_table(schema)?).named("payouts")?);
    let resource = resource(merchant)?;
    let mut stores: Vec<Arc<dyn FencedStore>> = vec![payouts.clone()];
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
            let amounts = unpaid_amounts(pool, schema, merchant, &payouts).await?;
            let keys: Vec<RecordKey> = amounts.keys().cloned().collect();
            let claimed = payouts
                .write_together(&batch.holder(), &keys, &lifecycle.claim())
                .await?;
            run.already_paid = claimed.already_done.len() as u32;
            let call = PayoutCall {
                gateway,
                amounts: &amounts,
            };
            let paid_with_entry = PaidWithLedgerEntry {
                pool,
                schema,
                payouts: &payouts,
                ledger,
                merchant,
                amounts: &amounts,
                lifecycle: &lifecycle,
            };
            // Eight transfers side by side, each confirmed with its ledger entry; a renewal
            // that gives up stops new transfers (the guard is the renewal's too).
            let settled = batch
                .holder()
                .pipeline(&payouts, &lifecycle, &call)
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

/// Each payout's confirm with its ledger entry: in one PostgreSQL transaction, or (on AWS)
/// after the ledger item and the receipt, each under the same fence.
struct PaidWithLedgerEntry<'a> {
    pool: &'a PgPool,
    schema: &'a str,
    payouts: &'a PgStore,
    ledger: &'a Ledger,
    merchant: &'a str,
    amounts: &'a HashMap<RecordKey, i64>,
    lifecycle: &'a Lifecycle,
}

#[async_trait]
impl RecordWrites<String> for PaidWithLedgerEntry<'_> {
    async fn claim(&self, holder: &Holder, key: &RecordKey) -> Result<Written> {
        holder
            .write(self.payouts, key, &self.lifecycle.claim())
            .await
    }

    async fn confirm(
        &self,
        holder: &Holder,
        key: &RecordKey,
        reference: &String,
    ) -> Result<Written> {
        match self.ledger {
            Ledger::Postgres => {
                confirm_with_ledger_entry(
                    self.pool,
                    self.schema,
                    self.payouts,
                    holder,
                    key,
                    reference,
                )
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
                self.payouts.write_with(holder, key, paid(reference)?).await
            }
        }
    }
}

/// Marks the payout paid (with its time and the gateway's reference) and posts its ledger
/// entry, in one transaction: a confirm the fence refuses takes the ledger entry with it.
async fn confirm_with_ledger_entry(
    pool: &PgPool,
    schema: &str,
    payouts: &PgStore,
    holder: &Holder,
    key: &RecordKey,
    reference: &str,
) -> Result<Written> {
    let mut tx = pool.begin().await.map_err(|e| payouts.sql_failure(e))?;
    let written = payouts
        .write_in(&mut tx, holder, key, paid(reference)?)
        .await?;
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO \"{schema}_Billing\".\"LedgerEntries\" (payout_id, amount_cents) \
         SELECT id, amount_cents FROM \"{schema}\".payouts WHERE id = $1::uuid"
    )))
    .bind(key.as_str())
    .execute(&mut *tx)
    .await
    .map_err(|e| payouts.sql_failure(e))?;
    tx.commit().await.map_err(|e| payouts.sql_failure(e))?;
    Ok(written)
}

/// The confirm: `paid`, with its time and the gateway's reference.
fn paid(reference: &str) -> Result<PgWrite> {
    Ok(PgWrite::new(lifecycle().confirm())
        .set("paid_at", PgValue::Now)?
        .set("gateway_ref", reference)?)
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
