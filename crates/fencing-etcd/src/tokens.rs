//! Fencing tokens from etcd's revision, with a floor kept beside it.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Client, Compare, CompareOp, KeyValue, Txn, TxnOp, TxnOpResponse, TxnResponse};
use fencing_core::adapter::{RequestEffect, check_request_timeout};
use fencing_core::{Error, FencingToken, InvalidInput, ResourceName, Result, TokenSource};

use crate::error::{EtcdFailure, never_sent};
use crate::keys::EtcdKeys;

/// How often a request that never left (its member down) is sent again before its failure
/// is reported: enough for the client's balancer to find a live member of a small cluster.
const NEVER_SENT_ROUNDS: usize = 8;

/// How often a compare-and-swap on a token key (a token issued, a floor raised, a lock taken)
/// is tried again when another writer changed the key in between, before the contention is
/// reported.
pub(crate) const CONTENDED_ROUNDS: usize = 64;

/// How many resources' token keys a source remembers before it forgets them all: enough for
/// a process's working set, bounded for one that cycles through resources without end.
const REMEMBERED_KEYS: usize = 4096;

/// A token source on etcd: each token is the **revision** of the write that issued it, or the
/// key's floor plus one where a floor set by [`TokenSource::advance_to`] is higher.
///
/// etcd's revision rises with every write to the cluster, is never reissued by a healthy
/// cluster (a majority of members must agree on each one) and survives the loss of a
/// minority of members, so a token issued after another is greater, whichever resource or
/// process issued the other; deleting the token key loses nothing but the floor. What breaks
/// it is a cluster restored from a snapshot without raising its revisions past the old ones:
/// its next revisions repeat tokens already used, and the stores' fences report that as a
/// token regression ([`fencing_core::Error::TokenRegression`], docs/guide.md, "etcd").
///
/// The token key of a resource (`EtcdKeys::token_key`) holds the floor, a decimal number;
/// its `mod_revision` is the revision of the last token issued. While that revision is above
/// the floor, a token is issued by a write that only requires the floor to be as read: every
/// write takes a revision of its own, so concurrent issuers neither repeat a token nor make
/// each other try again. A floor raised above the revision is itself the next token (plus
/// one), and then each write requires the whole key as read, so two issuers never raise it to
/// the same number; issuers that keep meeting there wait a random moment of a few
/// milliseconds before trying again. That is the one place issuers contend: an issuer loses a
/// round only to another issuer's token, and one that loses 64 in a row fails with
/// [`fencing_core::Error::Unavailable`] (seen with 8 issuers of 25 tokens each on one key above a
/// raised floor), so keep the issuers of one resource few, or let a token above the floor
/// take the revision again before many of them meet.
///
/// Tokens are not consecutive: other writes to the cluster take revisions too.
///
/// A source remembers each token key as its last answer showed it (clones share the memory)
/// and starts the next compare-and-swap from there, so issuing a token takes one transaction,
/// not a read and a transaction. A key another process moved since costs one transaction that
/// does not apply and answers with the key as it is; nothing is ever decided without writing
/// on a remembered key alone (`advance_to` that keeps the floor reads it first).
#[derive(Clone)]
pub struct EtcdTokenSource {
    client: Client,
    keys: EtcdKeys,
    remembered: Arc<Mutex<HashMap<String, TokenKey>>>,
    request_timeout: Duration,
}

impl fmt::Debug for EtcdTokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdTokenSource")
            .field("keys", &self.keys)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

/// A token key as read: its revision and floor (both 0 when it does not exist).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TokenKey {
    pub(crate) mod_revision: i64,
    pub(crate) floor: i64,
}

impl TokenKey {
    /// The highest token issued or floor set, `None` for a key that does not exist.
    fn current(self) -> Result<Option<FencingToken>> {
        match self.mod_revision.max(self.floor) {
            0 => Ok(None),
            n => token(n).map(Some),
        }
    }

    /// The token a write of the floor plus one at revision `revision` issues.
    pub(crate) fn issued_at(self, revision: i64) -> Result<FencingToken> {
        token(revision.max(self.floor + 1))
    }

    /// The compare that holds while nobody else has written the key since it was read.
    pub(crate) fn unchanged(self, key: &str) -> Compare {
        Compare::mod_revision(key, CompareOp::Equal, self.mod_revision)
    }

    /// The compare and the floor of the write that issues the next token on this key, or
    /// `None` at the end of the range.
    ///
    /// Where the key's last revision is above its floor, the token is the revision of the
    /// write, which is above every revision before it whoever else issued one in between:
    /// only the floor must be as read, and concurrent issuers do not make each other try
    /// again. Where the floor is the higher, the token is the floor plus one, and the whole
    /// key must be as read so that two issuers never raise it to the same number.
    pub(crate) fn issuing(self, key: &str) -> Option<(Compare, i64)> {
        if self.mod_revision > self.floor {
            let floor_unchanged = Compare::value(key, CompareOp::Equal, self.floor.to_string());
            return Some((floor_unchanged, self.floor));
        }
        Some((self.unchanged(key), self.floor.checked_add(1)?))
    }
}

/// Waits a random moment of up to a few milliseconds, longer after each lost compare-and-swap
/// in a row, so that issuers who keep meeting on one key spread apart instead of meeting
/// again.
async fn spread_after(lost_rounds: usize) {
    use std::hash::{BuildHasher, Hasher};
    // Each `RandomState` is keyed afresh: randomness enough to spread, without a dependency.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let most_micros = 1000u64 << lost_rounds.min(5);
    tokio::time::sleep(std::time::Duration::from_micros(random % (most_micros + 1))).await;
}

/// The write that sets the floor of token key `key`.
pub(crate) fn put_floor(key: &str, floor: i64) -> TxnOp {
    TxnOp::put(key, floor.to_string(), None)
}

impl EtcdTokenSource {
    /// A token source on the caller's client, under the default keys (`fencing/token/…`).
    pub fn new(client: Client) -> Self {
        EtcdTokenSource {
            client,
            keys: EtcdKeys::default(),
            remembered: Arc::default(),
            request_timeout: Self::DEFAULT_REQUEST_TIMEOUT,
        }
    }

    /// How long one request waits for its answer unless told otherwise.
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

    /// The same source, giving up on a request after `limit` (at least 1 ms): a write then
    /// reports [`fencing_core::Error::Ambiguous`] (it may still be applied once a leader is
    /// back), a read [`fencing_core::Error::Unavailable`]. A client's own timeout
    /// (`ConnectOptions::with_timeout`) applies too, whichever is shorter; without one, a
    /// cluster that lost its quorum would hold a request for as long as the quorum is gone.
    pub fn with_request_timeout(self, limit: Duration) -> Result<Self, InvalidInput> {
        check_request_timeout(limit)?;
        Ok(EtcdTokenSource {
            request_timeout: limit,
            ..self
        })
    }

    /// The same source under other keys.
    pub fn with_keys(self, keys: EtcdKeys) -> Self {
        EtcdTokenSource {
            keys,
            remembered: Arc::default(),
            ..self
        }
    }

    /// The key layout.
    pub fn keys(&self) -> &EtcdKeys {
        &self.keys
    }

    /// Runs one request, `op` on a client of the cluster; its failure classified as `effect`
    /// says. A request that never left (its member is down) goes again, and the client's
    /// balancer sends it to another member.
    pub(crate) async fn call<T, F>(
        &self,
        effect: RequestEffect,
        mut op: impl FnMut(Client) -> F,
    ) -> Result<T>
    where
        F: Future<Output = Result<T, etcd_client::Error>>,
    {
        let mut tries = 0;
        loop {
            let answer = tokio::time::timeout(self.request_timeout, op(self.client.clone()))
                .await
                .map_err(|_| EtcdFailure::TimedOut(self.request_timeout).into_error(effect))?;
            match answer {
                Err(err) if never_sent(&err) && tries < NEVER_SENT_ROUNDS => tries += 1,
                answer => return answer.map_err(|e| EtcdFailure::from(e).into_error(effect)),
            }
        }
    }

    /// Reads the token key of `resource`.
    pub(crate) async fn read(&self, resource: &ResourceName) -> Result<TokenKey> {
        let key = self.keys.token_key(resource);
        let found = self
            .call(RequestEffect::ReadOnly, async |mut c| {
                c.get(key.as_str(), None).await
            })
            .await?;
        let seen = token_key(found.kvs().first())?;
        self.saw(&key, seen);
        Ok(seen)
    }

    /// Token key `key` as this source last saw it; a key it never saw as absent, which a
    /// compare-and-swap finds out in its first transaction if it is not.
    pub(crate) fn last_seen(&self, key: &str) -> TokenKey {
        let remembered = self.remembered.lock().unwrap_or_else(|p| p.into_inner());
        remembered.get(key).copied().unwrap_or(TokenKey {
            mod_revision: 0,
            floor: 0,
        })
    }

    /// Remembers token key `key` as an answer showed it.
    pub(crate) fn saw(&self, key: &str, seen: TokenKey) {
        let mut remembered = self.remembered.lock().unwrap_or_else(|p| p.into_inner());
        if remembered.len() >= REMEMBERED_KEYS && !remembered.contains_key(key) {
            remembered.clear();
        }
        remembered.insert(key.to_owned(), seen);
    }

    /// Runs `txn`, its answer classified as a write's.
    pub(crate) async fn send(&self, txn: Txn) -> Result<TxnResponse> {
        self.call(RequestEffect::Writes, async |mut c| {
            c.txn(txn.clone()).await
        })
        .await
    }

    /// Compare-and-swaps the token key of `resource` with the write `decide` makes of the key
    /// as last seen, until a write applies or `decide`, on the key as it is, keeps it (or
    /// fails). Returns the value `decide` gave, with the revision of the write when one was
    /// made.
    async fn swap<T>(
        &self,
        resource: &ResourceName,
        mut decide: impl FnMut(&str, TokenKey) -> Result<Swap<T>>,
    ) -> Result<(T, Option<i64>)> {
        let key = self.keys.token_key(resource);
        let (mut seen, mut fresh) = (self.last_seen(&key), false);
        for round in 0..CONTENDED_ROUNDS {
            let (when, floor, value) = match decide(&key, seen) {
                Ok(Swap::Write(when, floor, value)) => (when, floor, value),
                // A remembered key may be out of date: only the key as it is decides that
                // nothing is written.
                _ if !fresh => {
                    (seen, fresh) = (self.read(resource).await?, true);
                    continue;
                }
                Ok(Swap::Keep(value)) => return Ok((value, None)),
                Err(err) => return Err(err),
            };
            let txn = Txn::new()
                .when([when])
                .and_then([put_floor(&key, floor)])
                .or_else([TxnOp::get(key.as_str(), None)]);
            let answer = self.send(txn).await?;
            if answer.succeeded() {
                let revision = revision(&answer)?;
                self.saw(
                    &key,
                    TokenKey {
                        mod_revision: revision,
                        floor,
                    },
                );
                return Ok((value, Some(revision)));
            }
            (seen, fresh) = (token_key(first_kv(&answer).as_ref())?, true);
            self.saw(&key, seen);
            if round > 0 {
                spread_after(round).await;
            }
        }
        Err(EtcdFailure::Contended(format!(
            "the token key of {resource:?} changed under {CONTENDED_ROUNDS} compare-and-swaps in a row"
        ))
        .into_error(RequestEffect::ReadOnly))
    }
}

/// What a compare-and-swap does with the key it read.
enum Swap<T> {
    /// Write this floor where the compare holds, then return the value.
    Write(Compare, i64, T),
    /// Write nothing and return the value.
    Keep(T),
}

#[async_trait]
impl TokenSource for EtcdTokenSource {
    async fn next(&self, resource: &ResourceName) -> Result<FencingToken> {
        let (seen, revision) = self
            .swap(resource, |key, seen| match seen.issuing(key) {
                Some((when, floor)) => Ok(Swap::Write(when, floor, seen)),
                None => Err(Error::TokenExhausted {
                    resource: resource.clone(),
                }),
            })
            .await?;
        seen.issued_at(revision.unwrap_or_default())
    }

    async fn current(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        self.read(resource).await?.current()
    }

    async fn advance_to(
        &self,
        resource: &ResourceName,
        floor: FencingToken,
    ) -> Result<FencingToken> {
        let (kept, revision) = self
            .swap(resource, |key, seen| match seen.current()? {
                Some(current) if current >= floor => Ok(Swap::Keep(Some(current))),
                _ => Ok(Swap::Write(seen.unchanged(key), floor.as_i64(), None)),
            })
            .await?;
        match (kept, revision) {
            (Some(current), _) => Ok(current),
            (None, revision) => token(revision.unwrap_or_default().max(floor.as_i64())),
        }
    }
}

/// A token key as the cluster returned it (`None`: no such key).
pub(crate) fn token_key(kv: Option<&KeyValue>) -> Result<TokenKey> {
    let Some(kv) = kv else {
        return Ok(TokenKey {
            mod_revision: 0,
            floor: 0,
        });
    };
    let floor = std::str::from_utf8(kv.value())
        .ok()
        .and_then(|text| text.parse::<i64>().ok())
        .filter(|floor| *floor >= 0 && floor.to_string().as_bytes() == kv.value());
    match floor {
        Some(floor) => Ok(TokenKey {
            mod_revision: kv.mod_revision(),
            floor,
        }),
        None => Err(EtcdFailure::Corrupt(format!(
            "token key {:?} holds {:?}, not a floor (a whole number in decimal): nothing was \
             written over it",
            String::from_utf8_lossy(kv.key()),
            String::from_utf8_lossy(kv.value())
        ))
        .into_error(RequestEffect::ReadOnly)),
    }
}

/// The first key a transaction's `get` returned.
pub(crate) fn first_kv(answer: &TxnResponse) -> Option<KeyValue> {
    answer.op_responses().into_iter().find_map(|op| match op {
        TxnOpResponse::Get(got) => got.kvs().first().cloned(),
        _ => None,
    })
}

/// The revision the transaction committed at.
pub(crate) fn revision(answer: &TxnResponse) -> Result<i64> {
    answer
        .header()
        .map(|h| h.revision())
        .filter(|r| *r > 0)
        .ok_or_else(|| {
            EtcdFailure::Unexpected("a transaction answered without a revision".to_owned())
                .into_error(RequestEffect::Writes)
        })
}

fn token(n: i64) -> Result<FencingToken> {
    u64::try_from(n)
        .ok()
        .and_then(|n| FencingToken::new(n).ok())
        .ok_or_else(|| {
            EtcdFailure::Corrupt(format!("{n} is not a fencing token"))
                .into_error(RequestEffect::ReadOnly)
        })
}
