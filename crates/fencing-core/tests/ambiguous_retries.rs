//! How a fence sends again a write whose outcome was lost, in `Holder::write`,
//! `Holder::write_many` and `Holder::run_write`: up to the holder's retries and no further, never
//! after an outright failure; a refusal met on a retry is read back and recognised as the
//! write's own earlier success, a refusal on a first attempt never is. For many records, a
//! request whose answer was lost is sent again whole and a record whose answer was lost alone;
//! an adapter that answers for the wrong number of records is a failure, not a guess.
//! With a request timeout, an attempt that never answers (a store cut off by the network) is
//! dropped and settled the same way; without one, the holder waits for the answer.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use fencing_core::adapter::{HolderExt, StoreWrites};
use fencing_core::{
    Error, FencedStore, FencedWrite, FencingToken, Holder, MemoryStore, MemoryTokenSource,
    NoAnswer, Record, RecordKey, ResourceName, Result, State, TokenSource, Written, async_trait,
};

/// What goes wrong with one `write_many` request.
#[derive(Clone, Debug)]
enum Mishap {
    /// The request is lost before the store sees it.
    RequestLost,
    /// The request fails outright: nothing applied, nothing ambiguous.
    Refused,
    /// The store applies every record, and the answers of the records at these places are lost.
    RecordsLost(Vec<usize>),
    /// The store applies every record and answers for one record fewer.
    OneShort,
    /// The store applies the write (every record of it), and the whole answer is lost.
    AnswerLost,
    /// The request never reaches the store, and no answer ever comes: the connection stays
    /// open while the network drops every packet.
    Silent,
    /// The store applies the write, and no answer ever comes.
    AppliedThenSilent,
    /// The store applies the write and answers after this long.
    Slow(Duration),
}

/// The in-memory store, its `write_many` requests answered as planned, in order.
#[derive(Debug)]
struct Planned {
    inner: MemoryStore,
    plan: Mutex<VecDeque<Mishap>>,
    requests: AtomicU32,
}

impl Planned {
    fn new(plan: impl IntoIterator<Item = Mishap>) -> Self {
        Planned {
            inner: MemoryStore::new("refunds"),
            plan: Mutex::new(plan.into_iter().collect()),
            requests: AtomicU32::new(0),
        }
    }

    fn requests(&self) -> u32 {
        self.requests.load(Ordering::SeqCst)
    }

    fn lost(&self) -> Error {
        Error::Ambiguous {
            store: "refunds".into(),
            source: "answer lost".into(),
        }
    }

    fn refused(&self) -> Error {
        Error::Unavailable {
            store: "refunds".into(),
            source: "connection refused".into(),
        }
    }
}

#[async_trait]
impl FencedStore for Planned {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn read(&self, key: &RecordKey) -> Result<Option<Record>> {
        self.inner.read(key).await
    }
}

#[async_trait]
impl StoreWrites for Planned {
    async fn write(
        &self,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Written> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let planned = self.plan.lock().unwrap().pop_front();
        match planned {
            Some(Mishap::RequestLost) => Err(self.lost()),
            Some(Mishap::Refused) => Err(self.refused()),
            Some(Mishap::AnswerLost) => {
                let _ = self.inner.write(key, token, write).await;
                Err(self.lost())
            }
            Some(Mishap::Silent) => std::future::pending().await,
            Some(Mishap::AppliedThenSilent) => {
                let _ = self.inner.write(key, token, write).await;
                std::future::pending().await
            }
            Some(Mishap::Slow(delay)) => {
                let written = self.inner.write(key, token, write).await;
                tokio::time::sleep(delay).await;
                written
            }
            Some(other) => panic!("{other:?} is for a write of many records"),
            None => self.inner.write(key, token, write).await,
        }
    }

    async fn write_many(
        &self,
        keys: &[RecordKey],
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Vec<Result<Written>>> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let planned = self.plan.lock().unwrap().pop_front();
        match planned {
            Some(Mishap::RequestLost) => Err(self.lost()),
            Some(Mishap::Refused) => Err(self.refused()),
            Some(Mishap::AnswerLost) => {
                let _ = self.inner.write_many(keys, token, write).await;
                Err(self.lost())
            }
            Some(Mishap::RecordsLost(places)) => {
                let mut answers = self.inner.write_many(keys, token, write).await?;
                for place in places {
                    answers[place] = Err(self.lost());
                }
                Ok(answers)
            }
            Some(Mishap::OneShort) => {
                let mut answers = self.inner.write_many(keys, token, write).await?;
                answers.pop();
                Ok(answers)
            }
            Some(Mishap::Silent) => std::future::pending().await,
            Some(other) => panic!("{other:?} is for a write of one record"),
            None => self.inner.write_many(keys, token, write).await,
        }
    }
}

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

fn state(name: &str) -> State {
    State::new(name).unwrap()
}

fn keys() -> Vec<RecordKey> {
    ["r_815", "r_816", "r_817"]
        .iter()
        .map(|k| RecordKey::new(*k).unwrap())
        .collect()
}

/// A claim that only a pending record admits: sent again after it applied, it is refused by
/// the state it left.
fn claim_of_pending() -> FencedWrite {
    FencedWrite::claim()
        .when_state_in([state("pending")])
        .set_state(state("sending"))
}

async fn pending(store: &Planned) {
    for key in keys() {
        let pending = FencedWrite::claim().set_state(state("pending"));
        store.inner.write(&key, token(1), &pending).await.unwrap();
    }
}

async fn source() -> (MemoryTokenSource, ResourceName) {
    let source = MemoryTokenSource::new();
    let resource = ResourceName::new("settle:m_4471").unwrap();
    source.advance_to(&resource, token(34)).await.unwrap();
    (source, resource)
}

#[tokio::test]
async fn a_fence_keeps_the_retries_it_was_given() {
    let (source, resource) = source().await;
    let holder = Holder::new(&resource, token(34), &source);
    assert_eq!(
        holder.ambiguous_retries(),
        Holder::DEFAULT_AMBIGUOUS_RETRIES
    );
    assert_eq!(holder.with_ambiguous_retries(5).ambiguous_retries(), 5);
}

#[tokio::test]
async fn a_lost_request_is_sent_again_whole_up_to_the_retries() {
    let (source, resource) = source().await;
    let holder = Holder::new(&resource, token(34), &source).with_ambiguous_retries(2);

    let store = Planned::new([Mishap::RequestLost, Mishap::RequestLost]);
    pending(&store).await;
    let outcomes = holder
        .write_many(&store, &keys(), &claim_of_pending())
        .await
        .unwrap();
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    assert_eq!(store.requests(), 3);

    let store = Planned::new([
        Mishap::RequestLost,
        Mishap::RequestLost,
        Mishap::RequestLost,
    ]);
    pending(&store).await;
    let err = holder
        .write_many(&store, &keys(), &claim_of_pending())
        .await
        .unwrap_err();
    assert!(err.is_ambiguous(), "{err:?}");
    assert_eq!(store.requests(), 3, "the first try and two retries");
}

#[tokio::test]
async fn a_request_that_fails_outright_is_not_sent_again() {
    let (source, resource) = source().await;
    let holder = Holder::new(&resource, token(34), &source);
    let store = Planned::new([Mishap::Refused]);
    pending(&store).await;
    let err = holder
        .write_many(&store, &keys(), &claim_of_pending())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert_eq!(store.requests(), 1);
}

#[tokio::test]
async fn a_record_whose_answer_was_lost_is_sent_again_and_recognised_as_applied() {
    let (source, resource) = source().await;
    let holder = Holder::new(&resource, token(34), &source).with_ambiguous_retries(1);
    let store = Planned::new([Mishap::RecordsLost(vec![1])]);
    pending(&store).await;
    let outcomes = holder
        .write_many(&store, &keys(), &claim_of_pending())
        .await
        .unwrap();
    // The resend of r_816 is refused by the state the first attempt left: read back, it is
    // this write's own.
    for outcome in &outcomes {
        let written = outcome.as_ref().unwrap();
        assert_eq!(written.record.fence, Some(token(34)));
        assert_eq!(written.record.state, Some(state("sending")));
    }
    assert_eq!(store.requests(), 2, "r_816 alone, once more");
}

#[tokio::test]
async fn a_record_still_lost_after_the_retries_is_reported_ambiguous_alone() {
    let (source, resource) = source().await;
    let holder = Holder::new(&resource, token(34), &source).with_ambiguous_retries(1);
    let store = Planned::new([Mishap::RecordsLost(vec![2]), Mishap::RecordsLost(vec![0])]);
    pending(&store).await;
    let outcomes = holder
        .write_many(&store, &keys(), &claim_of_pending())
        .await
        .unwrap();
    assert!(outcomes[0].is_ok() && outcomes[1].is_ok(), "{outcomes:?}");
    assert!(
        outcomes[2].as_ref().is_err_and(Error::is_ambiguous),
        "{outcomes:?}"
    );
    assert_eq!(store.requests(), 2);

    let never = Holder::new(&resource, token(34), &source).with_ambiguous_retries(0);
    let store = Planned::new([Mishap::RecordsLost(vec![0])]);
    pending(&store).await;
    let outcomes = never
        .write_many(&store, &keys(), &claim_of_pending())
        .await
        .unwrap();
    assert!(outcomes[0].as_ref().is_err_and(Error::is_ambiguous));
    assert_eq!(store.requests(), 1);
}

#[tokio::test]
async fn a_first_refusal_is_not_taken_for_the_writes_own_success() {
    let (source, resource) = source().await;
    let holder = Holder::new(&resource, token(34), &source);
    let store = Planned::new([]);
    pending(&store).await;
    holder
        .write_many(&store, &keys(), &claim_of_pending())
        .await
        .unwrap();
    // The same write sent afresh, not as a retry: the records already look as it would leave
    // them, but nothing says this request wrote them, so the refusal stands.
    let outcomes = holder
        .write_many(&store, &keys(), &claim_of_pending())
        .await
        .unwrap();
    for outcome in outcomes {
        assert!(
            matches!(outcome, Err(Error::StateMismatch { .. })),
            "{outcome:?}"
        );
    }
}

#[tokio::test]
async fn answers_for_the_wrong_number_of_records_are_a_failure() {
    let (source, resource) = source().await;
    let holder = Holder::new(&resource, token(34), &source);
    let store = Planned::new([Mishap::OneShort]);
    pending(&store).await;
    let err = holder
        .write_many(&store, &keys(), &claim_of_pending())
        .await
        .unwrap_err();
    assert!(err.is_ambiguous(), "applied or not, unknown: {err:?}");
}

#[tokio::test]
async fn a_single_write_is_sent_again_up_to_the_retries_and_no_further() {
    let (source, resource) = source().await;
    let holder = Holder::new(&resource, token(34), &source).with_ambiguous_retries(2);
    let key = &keys()[0];

    let store = Planned::new([Mishap::RequestLost, Mishap::RequestLost]);
    pending(&store).await;
    holder
        .write(&store, key, &claim_of_pending())
        .await
        .unwrap();
    assert_eq!(store.requests(), 3);

    let store = Planned::new([
        Mishap::RequestLost,
        Mishap::RequestLost,
        Mishap::RequestLost,
    ]);
    pending(&store).await;
    let err = holder
        .write(&store, key, &claim_of_pending())
        .await
        .unwrap_err();
    assert!(err.is_ambiguous(), "{err:?}");
    assert_eq!(store.requests(), 3);

    let store = Planned::new([Mishap::Refused]);
    pending(&store).await;
    let err = holder
        .write(&store, key, &claim_of_pending())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert_eq!(store.requests(), 1);
}

#[tokio::test]
async fn a_single_write_refused_on_its_retry_is_read_back_but_not_on_its_first_try() {
    let (source, resource) = source().await;
    let holder = Holder::new(&resource, token(34), &source);
    let key = &keys()[0];
    let store = Planned::new([Mishap::AnswerLost]);
    pending(&store).await;
    let written = holder
        .write(&store, key, &claim_of_pending())
        .await
        .unwrap();
    assert_eq!(written.record.state, Some(state("sending")));
    assert_eq!(store.requests(), 2);

    let err = holder
        .write(&store, key, &claim_of_pending())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::StateMismatch { .. }), "{err:?}");
}

#[tokio::test]
async fn an_adapters_write_is_run_again_up_to_the_retries_and_no_further() {
    let (source, resource) = source().await;
    let holder = Holder::new(&resource, token(34), &source).with_ambiguous_retries(2);
    let key = keys()[0].clone();
    let store = Planned::new([]);
    for (losses, ends_ambiguous) in [(2, false), (3, true)] {
        let attempts = AtomicU32::new(0);
        let result = holder
            .run_write(&store, &[&key], &FencedWrite::claim(), async || {
                if attempts.fetch_add(1, Ordering::SeqCst) < losses {
                    Err(store.lost())
                } else {
                    Ok(())
                }
            })
            .await;
        assert_eq!(result.is_err_and(|e| e.is_ambiguous()), ends_ambiguous);
        assert_eq!(attempts.load(Ordering::SeqCst), 3);
    }
    let attempts = AtomicU32::new(0);
    let result = holder
        .run_write(&store, &[&key], &FencedWrite::claim(), async || {
            attempts.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(store.refused())
        })
        .await;
    assert!(
        matches!(result, Err(Error::Unavailable { .. })),
        "{result:?}"
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
}

const TIMEOUT: Duration = Duration::from_secs(2);

/// The outcome is unknown because the attempt went unanswered for `TIMEOUT`, and says so.
fn unanswered(err: &Error) -> bool {
    match err {
        Error::Ambiguous { source, .. } => source
            .downcast_ref::<NoAnswer>()
            .is_some_and(|no_answer| no_answer.waited() == TIMEOUT),
        _ => false,
    }
}

#[tokio::test(start_paused = true)]
async fn an_attempt_without_an_answer_is_dropped_at_the_timeout_and_sent_again() {
    let (source, resource) = source().await;
    let holder = Holder::new(&resource, token(34), &source).with_request_timeout(TIMEOUT);
    assert_eq!(holder.request_timeout(), Some(TIMEOUT));
    let store = Planned::new([Mishap::Silent]);
    pending(&store).await;
    let started = tokio::time::Instant::now();
    let written = holder.write(&store, &keys()[0], &claim_of_pending()).await;
    assert!(written.is_ok(), "{written:?}");
    assert_eq!(store.requests(), 2);
    assert_eq!(
        started.elapsed(),
        TIMEOUT,
        "one timeout, then the answered retry"
    );
    let record = store.inner.read(&keys()[0]).await.unwrap().unwrap();
    assert_eq!(record.fence, Some(token(34)));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_attempt_that_applied_is_recognised_when_its_retry_is_refused() {
    let (source, resource) = source().await;
    let holder = Holder::new(&resource, token(34), &source).with_request_timeout(TIMEOUT);
    let store = Planned::new([Mishap::AppliedThenSilent]);
    pending(&store).await;
    // The first attempt left the record in `sending`, so the retry is refused by its state and
    // the holder reads the record back: its own token, its own state.
    let written = holder.write(&store, &keys()[0], &claim_of_pending()).await;
    let written = written.expect("recognised as applied");
    assert_eq!(written.record.state, Some(state("sending")));
    assert_eq!(store.requests(), 2);
}

#[tokio::test(start_paused = true)]
async fn with_no_retries_left_an_unanswered_attempt_is_ambiguous_and_says_why() {
    let (source, resource) = source().await;
    let holder = Holder::new(&resource, token(34), &source)
        .with_request_timeout(TIMEOUT)
        .with_ambiguous_retries(1);
    let store = Planned::new([Mishap::Silent, Mishap::Silent]);
    pending(&store).await;
    let err = holder
        .write(&store, &keys()[0], &claim_of_pending())
        .await
        .unwrap_err();
    assert!(unanswered(&err), "{err:?}");
    assert!(err.to_string().contains("no answer within 2s"), "{err}");
    assert_eq!(store.requests(), 2);

    let store = Planned::new([Mishap::Silent, Mishap::Silent]);
    pending(&store).await;
    let err = holder
        .write_many(&store, &keys(), &claim_of_pending())
        .await
        .unwrap_err();
    assert!(unanswered(&err), "{err:?}");
    assert_eq!(store.requests(), 2);
    let attempts = AtomicU32::new(0);
    let err = holder
        .run_write(&store, &[&keys()[0]], &FencedWrite::claim(), async || {
            attempts.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<Result<()>>().await
        })
        .await
        .unwrap_err();
    assert!(unanswered(&err), "{err:?}");
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    let err = holder
        .run_write_once(&store, &[&keys()[0]], &FencedWrite::claim(), async {
            std::future::pending::<Result<()>>().await
        })
        .await
        .unwrap_err();
    assert!(unanswered(&err), "{err:?}");
}

#[tokio::test(start_paused = true)]
async fn a_request_of_many_records_without_an_answer_is_sent_again_whole() {
    let (source, resource) = source().await;
    let holder = Holder::new(&resource, token(34), &source).with_request_timeout(TIMEOUT);
    let store = Planned::new([Mishap::Silent]);
    pending(&store).await;
    let answers = holder
        .write_many(&store, &keys(), &claim_of_pending())
        .await
        .unwrap();
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    assert_eq!(store.requests(), 2);
}

#[tokio::test(start_paused = true)]
async fn without_a_timeout_the_holder_waits_for_a_slow_answer() {
    let (source, resource) = source().await;
    let slow = Duration::from_secs(600);
    let store = Planned::new([Mishap::Slow(slow)]);
    pending(&store).await;
    let holder = Holder::new(&resource, token(34), &source);
    assert_eq!(holder.request_timeout(), None);
    let started = tokio::time::Instant::now();
    let written = holder.write(&store, &keys()[0], &claim_of_pending()).await;
    assert!(written.is_ok(), "{written:?}");
    assert_eq!((store.requests(), started.elapsed()), (1, slow));

    // The same slow answer within a longer timeout is simply waited for.
    let store = Planned::new([Mishap::Slow(TIMEOUT / 2)]);
    pending(&store).await;
    let holder = holder.with_request_timeout(TIMEOUT);
    let written = holder.write(&store, &keys()[0], &claim_of_pending()).await;
    assert!(written.is_ok(), "{written:?}");
    assert_eq!(store.requests(), 1);
}
