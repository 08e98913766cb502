//! The etcd lease: an etcd lease with the TTL, and a lock key bound to it, created only if
//! absent in the same transaction that issues the fencing token.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Client, Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse};
use fencing_core::adapter::{Clock, LeaseGuardExt, LeaseRequest, RequestEffect, TokioClock};
use fencing_core::{
    Error, InvalidInput, Lease, LeaseGuard, LeaseStatus, OwnerId, ResourceName, Result,
    TokenSource, Ttl,
};

use crate::error::EtcdFailure;
use crate::keys::EtcdKeys;
use crate::tokens::{CONTENDED_ROUNDS, EtcdTokenSource, TokenKey, put_floor, revision, token_key};

/// A lease on etcd, its tokens from [`EtcdTokenSource`].
///
/// * **Acquire** grants an etcd lease of the TTL (whole seconds, rounded up: etcd counts its
///   leases in seconds, and a server may grant more than asked, never less) and runs one
///   transaction: if the resource's lock key does not exist and the token key is as last seen,
///   create the lock key bound to that lease and issue the token; otherwise read both. The
///   token is the transaction's revision (or the token key's floor plus one, where a floor
///   is higher), so it is issued exactly when the lock is taken, and rises across
///   acquisitions whoever made them. A lease that did not get the lock is revoked at once.
/// * **Extend** checks that the lock key is still this owner's and keeps its etcd lease alive;
///   for another TTL (etcd cannot change a lease's TTL) it binds the key to a new etcd lease
///   of that TTL in a transaction that checks the owner again, keeping the key's create
///   revision and so the token.
/// * **Release** deletes the lock key in a transaction that compares its owner and lease,
///   then revokes the lease. A guard whose lock key is gone or another's changes nothing and
///   gets [`Error::LeaseLost`].
///
/// Expiry is the cluster's: the leader revokes a lease once its TTL has passed without a
/// keep-alive, and etcd deletes the keys bound to it. A new leader extends every lease by
/// its election timeout (liveness only: the fence is what is safe).
#[derive(Clone, Debug)]
pub struct EtcdLease {
    tokens: Arc<EtcdTokenSource>,
}

impl EtcdLease {
    /// A lease on the caller's client, under the default keys (`fencing/lock/…`,
    /// `fencing/token/…`).
    pub fn new(client: Client) -> Self {
        EtcdLease {
            tokens: Arc::new(EtcdTokenSource::new(client)),
        }
    }

    /// The same lease under other keys.
    pub fn with_keys(self, keys: EtcdKeys) -> Self {
        EtcdLease {
            tokens: Arc::new(Arc::unwrap_or_clone(self.tokens).with_keys(keys)),
        }
    }

    /// The same lease, giving up on each request after `limit`
    /// ([`EtcdTokenSource::with_request_timeout`]).
    pub fn with_request_timeout(self, limit: Duration) -> Result<Self, InvalidInput> {
        Ok(EtcdLease {
            tokens: Arc::new(Arc::unwrap_or_clone(self.tokens).with_request_timeout(limit)?),
        })
    }

    /// The token source the tokens come from, as its own type (with the methods of that
    /// store's source); [`Lease::token_source`] gives the same source as a `&dyn TokenSource`
    /// (and is what a `dyn Lease` or an `Arc` of this lease answers).
    pub fn token_source(&self) -> &EtcdTokenSource {
        &self.tokens
    }

    /// [`Self::token_source`], as 0.1 named it.
    #[deprecated(since = "0.2.0", note = "renamed `EtcdLease::token_source()`")]
    #[doc(hidden)]
    pub fn tokens(&self) -> &EtcdTokenSource {
        self.token_source()
    }

    fn keys(&self) -> &EtcdKeys {
        self.tokens.keys()
    }

    /// Grants an etcd lease of `ttl` and returns its id.
    async fn grant(&self, ttl: Ttl) -> Result<i64> {
        let granted = self
            .tokens
            .call(RequestEffect::ReadOnly, |mut c| async move {
                c.lease_grant(seconds(ttl), None).await
            })
            .await?;
        Ok(granted.id())
    }

    /// Revokes an etcd lease this process granted and no guard holds: its keys go with it.
    /// Should the revoke fail, the lease still ends at its TTL.
    async fn revoke(&self, lease_id: i64) {
        let _ = self
            .tokens
            .call(RequestEffect::Writes, async |mut c| {
                c.lease_revoke(lease_id).await
            })
            .await;
    }

    /// Takes the lock of `resource` under the granted `lease_id` as `owner`, or finds it
    /// held. Returns the token and the lock key's create revision when taken.
    async fn take(
        &self,
        resource: &ResourceName,
        owner: &OwnerId,
        lease_id: i64,
    ) -> Result<Option<fencing_core::FencingToken>> {
        let (lock_key, token_key_name) = (
            self.keys().lock_key(resource),
            self.keys().token_key(resource),
        );
        let (mut seen, mut fresh) = (self.tokens.last_seen(&token_key_name), false);
        for _ in 0..CONTENDED_ROUNDS {
            let Some((token_key_as_read, floor)) = seen.issuing(&token_key_name) else {
                // A remembered key may be out of date: only the key as it is says the range
                // is used up.
                if !fresh {
                    (seen, fresh) = (self.tokens.read(resource).await?, true);
                    continue;
                }
                return Err(Error::TokenExhausted {
                    resource: resource.clone(),
                });
            };
            let txn = Txn::new()
                .when([
                    Compare::create_revision(lock_key.as_str(), CompareOp::Equal, 0),
                    token_key_as_read,
                ])
                .and_then([
                    TxnOp::put(
                        lock_key.as_str(),
                        owner.as_str(),
                        Some(PutOptions::new().with_lease(lease_id)),
                    ),
                    put_floor(&token_key_name, floor),
                ])
                .or_else([
                    TxnOp::get(lock_key.as_str(), None),
                    TxnOp::get(token_key_name.as_str(), None),
                ]);
            let answer = match self.tokens.send(txn).await {
                Ok(answer) => answer,
                Err(err) if err.is_ambiguous() => {
                    match self.settle_lost_answer(resource, owner, seen, err).await? {
                        Some(settled) => return Ok(settled),
                        // It did not apply and nobody holds the lock: try again.
                        None => {
                            (seen, fresh) = (self.tokens.read(resource).await?, true);
                            continue;
                        }
                    }
                }
                Err(err) => return Err(err),
            };
            if answer.succeeded() {
                let revision = revision(&answer)?;
                let issued = seen.issued_at(revision)?;
                self.tokens.saw(
                    &token_key_name,
                    TokenKey {
                        mod_revision: revision,
                        floor,
                    },
                );
                return Ok(Some(issued));
            }
            let got = gets(&answer);
            (seen, fresh) = (token_key(got.get(1).and_then(Option::as_ref))?, true);
            self.tokens.saw(&token_key_name, seen);
            if got.first().and_then(Option::as_ref).is_some() {
                return Ok(None);
            }
        }
        Err(EtcdFailure::Contended(format!(
            "the token key of {resource:?} changed under {CONTENDED_ROUNDS} acquisitions in a row"
        ))
        .into_error(RequestEffect::ReadOnly))
    }

    /// After an acquisition whose answer was lost, the lock key says whether it applied: it
    /// names this owner (taken, the token from its create revision), another (held), or
    /// nobody (`None`: it did not apply, and the lock is free).
    async fn settle_lost_answer(
        &self,
        resource: &ResourceName,
        owner: &OwnerId,
        seen: TokenKey,
        lost: Error,
    ) -> Result<Option<Option<fencing_core::FencingToken>>> {
        // The request after a lost answer often meets the broken connection first: the read
        // is sent again, which a read may always be.
        let mut found = self.lock(resource).await;
        for _ in 1..SETTLING_READS {
            if found.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            found = self.lock(resource).await;
        }
        match found {
            Ok(Some(lock)) if lock.value() == owner.as_str().as_bytes() => seen
                .issued_at(lock.create_revision())
                .map(|t| Some(Some(t))),
            Ok(Some(_)) => Ok(Some(None)),
            Ok(None) => Ok(None),
            Err(_) => Err(lost),
        }
    }

    /// The lock key of `resource`, if it exists.
    async fn lock(&self, resource: &ResourceName) -> Result<Option<KeyValue>> {
        let lock_key = self.keys().lock_key(resource);
        let found = self
            .tokens
            .call(RequestEffect::ReadOnly, async |mut c| {
                c.get(lock_key.as_str(), None).await
            })
            .await?;
        Ok(found.kvs().first().cloned())
    }

    /// The lock key of the guard's resource, if it is the guard's: it names the guard's owner
    /// and is bound to a live etcd lease. Otherwise [`Error::LeaseLost`].
    async fn owned(&self, guard: &LeaseGuard) -> Result<KeyValue> {
        match self.lock(guard.resource()).await? {
            Some(lock)
                if lock.value() == guard.owner().as_str().as_bytes() && lock.lease() != 0 =>
            {
                Ok(lock)
            }
            _ => Err(guard.lost()),
        }
    }

    /// Moves the guard's lock key from etcd lease `old` to a new one of `ttl` (etcd cannot
    /// change a lease's TTL), in a transaction that checks the key is still the guard's. The
    /// key keeps its create revision, and so the token.
    async fn rebind(&self, guard: &LeaseGuard, old: i64, ttl: Ttl) -> Result<()> {
        let granted = self.grant(ttl).await?;
        let lock_key = self.keys().lock_key(guard.resource());
        let owner = guard.owner().as_str();
        let txn = Txn::new()
            .when(still_owned(&lock_key, owner, old))
            .and_then([TxnOp::put(
                lock_key.as_str(),
                owner,
                Some(PutOptions::new().with_lease(granted)),
            )]);
        match self.tokens.send(txn).await {
            Ok(answer) if answer.succeeded() => {
                self.revoke(old).await;
                Ok(())
            }
            Ok(_) => {
                self.revoke(granted).await;
                Err(guard.lost())
            }
            Err(err) => Err(err),
        }
    }

    /// Sends one keep-alive for `lease_id` and returns whether the lease was alive (and so
    /// renewed for its TTL). Waits at most `patience` for the answer.
    async fn keep_alive(&self, lease_id: i64, patience: Duration) -> Result<bool> {
        // Opening the stream sends one keep-alive and reads its answer; the client's words
        // for an answer whose TTL is 0 (the lease is gone) are "lease not found".
        let exchange = self.tokens.call(RequestEffect::Writes, |mut c| async move {
            match c.lease_keep_alive(lease_id).await {
                Ok(_) => Ok(true),
                Err(etcd_client::Error::LeaseKeepAliveError(why)) if why == "lease not found" => {
                    Ok(false)
                }
                Err(err) => Err(err),
            }
        });
        match tokio::time::timeout(patience, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(EtcdFailure::TimedOut(patience).into_error(RequestEffect::Writes)),
        }
    }
}

/// The compares that hold while `lock_key` names `owner` and is bound to etcd lease `lease`.
fn still_owned(lock_key: &str, owner: &str, lease: i64) -> [Compare; 2] {
    [
        Compare::value(lock_key, CompareOp::Equal, owner),
        Compare::lease(lock_key, CompareOp::Equal, lease),
    ]
}

/// `ttl` in etcd's whole seconds, rounded up.
fn seconds(ttl: Ttl) -> i64 {
    i64::try_from(ttl.duration().as_millis().div_ceil(1000)).unwrap_or(i64::MAX)
}

/// What each `get` of a transaction's failure branch found, in order.
fn gets(answer: &etcd_client::TxnResponse) -> Vec<Option<KeyValue>> {
    answer
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(got) => Some(got.kvs().first().cloned()),
            _ => None,
        })
        .collect()
}

/// How many times the read that settles an acquisition's lost answer is sent before the
/// acquisition is reported ambiguous.
const SETTLING_READS: usize = 3;

#[async_trait]
impl Lease for EtcdLease {
    async fn try_acquire(&self, resource: &ResourceName, ttl: Ttl) -> Result<Option<LeaseGuard>> {
        let request = LeaseRequest::new(resource, ttl);
        let lease_id = self.grant(ttl).await?;
        match self.take(resource, request.owner(), lease_id).await {
            Ok(Some(token)) => Ok(Some(request.granted(token, self.tokens.clone()))),
            other => {
                self.revoke(lease_id).await;
                other.map(|_| None)
            }
        }
    }

    async fn extend(&self, guard: &mut LeaseGuard, ttl: Ttl) -> Result<()> {
        let requested_at = TokioClock.now();
        let lease_id = self.owned(guard).await?.lease();
        if seconds(ttl) == seconds(guard.ttl()) {
            if !self.keep_alive(lease_id, ttl.duration()).await? {
                return Err(guard.lost());
            }
            // The lease lives; the key bound to it must still be this owner's.
            self.owned(guard).await?;
        } else {
            self.rebind(guard, lease_id, ttl).await?;
        }
        guard.extended(ttl, requested_at);
        Ok(())
    }

    async fn release(&self, guard: LeaseGuard) -> Result<()> {
        let lease_id = self.owned(&guard).await?.lease();
        let lock_key = self.keys().lock_key(guard.resource());
        let txn = Txn::new()
            .when(still_owned(&lock_key, guard.owner().as_str(), lease_id))
            .and_then([TxnOp::delete(lock_key.as_str(), None)]);
        let released = self.tokens.send(txn).await?.succeeded();
        if !released {
            return Err(guard.lost());
        }
        self.revoke(lease_id).await;
        Ok(())
    }

    async fn status(&self, resource: &ResourceName) -> Result<Option<LeaseStatus>> {
        let Some(lock) = self.lock(resource).await? else {
            return Ok(None);
        };
        let owner = String::from_utf8_lossy(lock.value()).into_owned();
        if lock.lease() == 0 {
            // A lock key written by hand, bound to no lease: it never expires.
            return Ok(Some(LeaseStatus {
                owner,
                token: self.tokens.current(resource).await?,
                time_left: Duration::MAX,
            }));
        }
        let lived = self
            .tokens
            .call(RequestEffect::ReadOnly, |mut c| {
                let lease = lock.lease();
                async move { c.lease_time_to_live(lease, None).await }
            })
            .await?;
        // etcd answers whole seconds left, rounded down, and -1 for a lease that is gone.
        let Ok(whole_seconds) = u64::try_from(lived.ttl()) else {
            return Ok(None);
        };
        let granted = u64::try_from(lived.granted_ttl()).unwrap_or(u64::MAX);
        Ok(Some(LeaseStatus {
            owner,
            token: self.tokens.current(resource).await?,
            time_left: Duration::from_secs((whole_seconds + 1).min(granted)),
        }))
    }

    fn token_source(&self) -> Arc<dyn TokenSource> {
        self.tokens.clone()
    }
}
