//! One acquisition's work: every refund not yet filed, in id order.

use std::collections::HashMap;

use async_trait::async_trait;
use fencing_core::{
    BoxError, EffectOutcome, EffectStart, FencedBatch, FencedWrite, Lifecycle, Record, RecordKey,
    Result, SideEffect, SkippedRecord,
};
use fencing_harness::http;
use fencing_harness::stores::{MERCHANT, RunStores};
use fencing_postgres::PgWrite;
use sqlx::{AssertSqlSafe, PgPool, Row};

/// What a worker settles with.
pub(crate) struct Settlement {
    pub(crate) pool: PgPool,
    pub(crate) stores: RunStores,
    pub(crate) gateway: String,
    pub(crate) stop_after_call: Option<String>,
}

/// A refund not yet filed, as a plain read found it.
struct Unfiled {
    key: RecordKey,
    amount_cents: i64,
    /// The gateway's reference, when an earlier holder confirmed it already.
    confirmed_reference: Option<String>,
}

impl Settlement {
    /// How many refunds are not filed yet.
    pub(crate) async fn unfiled(&self) -> Result<i64> {
        sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT count(*) FROM {} WHERE merchant = $1 AND NOT filed",
            self.stores.refunds.table().name()
        )))
        .bind(MERCHANT)
        .fetch_one(&self.pool)
        .await
        .map_err(|e| self.stores.refunds.sql_failure(e))
    }

    async fn list(&self) -> Result<Vec<Unfiled>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT id, amount_cents, CASE WHEN state = 'sent' THEN gateway_ref END \
             FROM {} WHERE merchant = $1 AND NOT filed ORDER BY id",
            self.stores.refunds.table().name()
        )))
        .bind(MERCHANT)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.stores.refunds.sql_failure(e))?;
        rows.iter()
            .map(|row| {
                Ok(Unfiled {
                    key: RecordKey::new(row.get::<String, _>(0))?,
                    amount_cents: row.get(1),
                    confirmed_reference: row.get(2),
                })
            })
            .collect()
    }

    /// Settles every unfiled refund under `batch`, `holder` naming this acquisition in the
    /// rows it claims and confirms. Returns how many it filed; a refused write ends it.
    pub(crate) async fn settle(&self, batch: &FencedBatch, holder: &str) -> Result<usize> {
        let lifecycle = Lifecycle::default();
        let refunds = &self.stores.refunds;
        let unfiled = self.list().await?;
        let amounts: HashMap<RecordKey, i64> = unfiled
            .iter()
            .map(|u| (u.key.clone(), u.amount_cents))
            .collect();
        let call = GatewayCall {
            settlement: self,
            holder,
            amounts: &amounts,
        };
        let mut filed = 0;
        for refund in &unfiled {
            let key = &refund.key;
            let reference = match &refund.confirmed_reference {
                Some(reference) => reference.clone(),
                None => {
                    let claim = PgWrite::new(lifecycle.claim()).set("claimed_by", holder)?;
                    let claimed = batch
                        .run_fenced(&**refunds, async |fence| {
                            refunds.write_in(&self.pool, fence, key, claim).await
                        })
                        .await;
                    let claimed = match claimed {
                        Err(err) if SkippedRecord::of(&err).is_some() => continue,
                        claimed => claimed?,
                    };
                    println!("claimed {key}");
                    let confirm = async |reference: &String| {
                        let confirm = PgWrite::new(lifecycle.confirm())
                            .set("confirmed_by", holder)?
                            .set("gateway_ref", reference.as_str())?;
                        refunds
                            .write_in(&self.pool, &batch.fence(), key, confirm)
                            .await
                            .map(drop)
                    };
                    match batch
                        .run_effect_then(
                            &**refunds,
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
            let entry = serde_json::json!({
                "refund": key.as_str(),
                "amount_cents": refund.amount_cents,
                "reference": reference,
                "by": holder,
            });
            batch
                .write(
                    &*self.stores.ledger,
                    key,
                    &FencedWrite::claim().set_payload(entry.to_string().into_bytes()),
                )
                .await?;
            let receipt = format!(
                "refund {key} of {}.{:02} EUR to merchant {MERCHANT}: gateway reference {reference}, filed by {holder}",
                refund.amount_cents / 100,
                refund.amount_cents % 100
            );
            batch
                .write(
                    &*self.stores.receipts,
                    key,
                    &FencedWrite::claim().set_payload(receipt.into_bytes()),
                )
                .await?;
            let mark_filed = PgWrite::new(FencedWrite::claim()).set("filed", true)?;
            batch
                .run_fenced(&**refunds, async |fence| {
                    refunds.write_in(&self.pool, fence, key, mark_filed).await
                })
                .await?;
            println!("filed {key}");
            filed += 1;
        }
        Ok(filed)
    }
}

/// The gateway as one acquisition calls it.
struct GatewayCall<'a> {
    settlement: &'a Settlement,
    holder: &'a str,
    amounts: &'a HashMap<RecordKey, i64>,
}

#[async_trait]
impl SideEffect for GatewayCall<'_> {
    type Receipt = String;

    async fn lookup(&self, key: &RecordKey) -> Result<Option<String>, BoxError> {
        let path = format!("/refunds/{key}");
        match http::call(&self.settlement.gateway, "GET", &path, "").await? {
            (200, reference) => Ok(Some(reference)),
            (404, _) => Ok(None),
            (status, body) => Err(format!("gateway lookup of {key}: {status} {body}").into()),
        }
    }

    async fn perform(&self, key: &RecordKey, _: &Record) -> Result<String, BoxError> {
        let cents = self
            .amounts
            .get(key)
            .ok_or_else(|| format!("no amount for {key}"))?;
        let body = format!("amount_cents={cents}&by={}", self.holder);
        let path = format!("/refunds/{key}");
        let reference = match http::call(&self.settlement.gateway, "POST", &path, &body).await? {
            (200 | 201, reference) => reference,
            (status, body) => {
                return Err(format!("gateway refund of {key}: {status} {body}").into());
            }
        };
        println!("called {key}");
        if self.settlement.stop_after_call.as_deref() == Some(key.as_str()) {
            stop_this_process();
        }
        Ok(reference)
    }
}

/// SIGSTOP to this very process, from a `kill` child: the campaign kills it while stopped.
fn stop_this_process() {
    let _ = std::process::Command::new("kill")
        .args(["-STOP", &std::process::id().to_string()])
        .status();
}
