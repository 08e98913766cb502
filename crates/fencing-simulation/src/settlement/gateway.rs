use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use fencing_core::RecordKey;

/// How the payment gateway treats a second refund call with the same idempotency key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GatewayMode {
    /// Returns the refund already created for that key: a duplicate call is harmless.
    Idempotent,
    /// Ignores the key and pays again.
    IgnoresKeys,
}

/// What one refund call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallResult {
    /// A new refund was created.
    Created,
    /// A refund for this key already existed and was returned; nothing was paid.
    ReturnedExisting,
    /// A refund for this key already existed and another was paid.
    PaidTwice,
}

#[derive(Debug, Default)]
struct Ledger {
    refunds: HashMap<RecordKey, Vec<u64>>,
    calls: u64,
    lookups: u64,
}

/// A payment gateway in memory: every call takes `latency` of (virtual) time.
#[derive(Debug)]
pub struct Gateway {
    mode: GatewayMode,
    latency: Duration,
    ledger: Mutex<Ledger>,
}

/// What the gateway saw, at the end of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GatewayTally {
    /// Refund calls made.
    pub calls: u64,
    /// Lookups by idempotency key.
    pub lookups: u64,
    /// Refunds created (money sent).
    pub refunds_created: u64,
    /// Cents paid out in all.
    pub cents_paid: u64,
    /// Keys with more than one refund created.
    pub keys_paid_twice: u64,
    /// Keys with at least one refund.
    pub keys_refunded: u64,
}

impl Gateway {
    /// A gateway in `mode` whose calls take `latency`.
    pub fn new(mode: GatewayMode, latency: Duration) -> Self {
        Gateway {
            mode,
            latency,
            ledger: Mutex::default(),
        }
    }

    /// Refunds `cents` under idempotency key `key`.
    pub async fn refund(&self, key: &RecordKey, cents: u64) -> CallResult {
        tokio::time::sleep(self.latency).await;
        let mut ledger = self.ledger.lock().unwrap();
        ledger.calls += 1;
        let paid = ledger.refunds.entry(key.clone()).or_default();
        match (paid.is_empty(), self.mode) {
            (true, _) => {
                paid.push(cents);
                CallResult::Created
            }
            (false, GatewayMode::Idempotent) => CallResult::ReturnedExisting,
            (false, GatewayMode::IgnoresKeys) => {
                paid.push(cents);
                CallResult::PaidTwice
            }
        }
    }

    /// Whether a refund exists for `key`.
    pub async fn find(&self, key: &RecordKey) -> bool {
        tokio::time::sleep(self.latency).await;
        let mut ledger = self.ledger.lock().unwrap();
        ledger.lookups += 1;
        ledger.refunds.get(key).is_some_and(|paid| !paid.is_empty())
    }

    /// Refunds created for `key`.
    pub fn refunds_for(&self, key: &RecordKey) -> usize {
        self.ledger
            .lock()
            .unwrap()
            .refunds
            .get(key)
            .map_or(0, Vec::len)
    }

    /// Totals so far.
    pub fn tally(&self) -> GatewayTally {
        let ledger = self.ledger.lock().unwrap();
        let mut tally = GatewayTally {
            calls: ledger.calls,
            lookups: ledger.lookups,
            ..GatewayTally::default()
        };
        for paid in ledger.refunds.values() {
            tally.refunds_created += paid.len() as u64;
            tally.cents_paid += paid.iter().sum::<u64>();
            tally.keys_paid_twice += u64::from(paid.len() > 1);
            tally.keys_refunded += u64::from(!paid.is_empty());
        }
        tally
    }
}
