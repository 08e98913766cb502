//! The claim → side effect → confirm helper under lost answers, failed effects and takeovers.
//! `LosesAnswers` wraps a real in-memory store: it applies the write, then reports the
//! outcome as unknown, as a connection dropped after the commit would.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use fencing::{
    BoxError, EffectOutcome, Error, Fence, FenceCheck, FencedStore, FencedWrite, FencingToken,
    InputKind, Lifecycle, MemoryStore, MemoryTokenSource, Record, RecordKey, ResourceName, Result,
    SideEffect, State, TokenSource, Written, async_trait,
};

#[derive(Debug)]
struct LosesAnswers {
    inner: MemoryStore,
    lose_next: Mutex<Vec<FenceCheck>>,
}

#[async_trait]
impl FencedStore for LosesAnswers {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn read(&self, key: &RecordKey) -> Result<Option<Record>> {
        self.inner.read(key).await
    }
    async fn write(
        &self,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Written> {
        let written = self.inner.write(key, token, write).await?;
        let mut lose = self.lose_next.lock().unwrap();
        if let Some(i) = lose.iter().position(|c| *c == write.check()) {
            lose.remove(i);
            return Err(Error::Ambiguous {
                store: self.name().to_owned(),
                source: "connection reset after commit".into(),
            });
        }
        Ok(written)
    }
}

#[derive(Default)]
struct Gateway {
    performed: AtomicU32,
    fail_next: Mutex<bool>,
}

#[async_trait]
impl SideEffect for Gateway {
    type Receipt = u32;
    async fn lookup(&self, _: &RecordKey) -> Result<Option<u32>, BoxError> {
        let n = self.performed.load(Ordering::SeqCst);
        Ok((n > 0).then_some(n))
    }
    async fn perform(&self, _: &RecordKey, _: &Record) -> Result<u32, BoxError> {
        if std::mem::take(&mut *self.fail_next.lock().unwrap()) {
            return Err("gateway timeout".into());
        }
        Ok(self.performed.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

struct Case {
    store: LosesAnswers,
    source: MemoryTokenSource,
    resource: ResourceName,
    key: RecordKey,
    lifecycle: Lifecycle,
}

impl Case {
    fn new(lose: Vec<FenceCheck>) -> Self {
        let lifecycle = Lifecycle::default();
        let inner = MemoryStore::new("refunds");
        let key = RecordKey::new("r_815").unwrap();
        inner.insert_unfenced(
            key.clone(),
            Some(lifecycle.pending().clone()),
            b"7025".to_vec(),
        );
        Case {
            store: LosesAnswers {
                inner,
                lose_next: Mutex::new(lose),
            },
            source: MemoryTokenSource::new(),
            resource: ResourceName::new("settle:m_4471").unwrap(),
            key,
            lifecycle,
        }
    }

    async fn run(&self, gateway: &Gateway) -> Result<EffectOutcome<u32>> {
        let token = self.source.next(&self.resource).await.unwrap();
        Fence::new(&self.resource, token, &self.source)
            .run_effect(&self.store, &self.key, &self.lifecycle, gateway)
            .await
    }

    async fn state(&self) -> Option<State> {
        self.store.read(&self.key).await.unwrap().unwrap().state
    }
}

#[tokio::test]
async fn a_lost_answer_to_the_claim_is_retried_with_the_same_token() {
    let case = Case::new(vec![FenceCheck::Claim]);
    let gateway = Gateway::default();
    let outcome = case.run(&gateway).await.unwrap();
    // The retry found the row in flight under its own token and looked before paying.
    assert_eq!(outcome, EffectOutcome::Performed(1));
    assert_eq!(gateway.performed.load(Ordering::SeqCst), 1);
    assert_eq!(case.state().await.as_ref(), Some(case.lifecycle.done()));
}

#[tokio::test]
async fn a_lost_answer_to_the_confirm_is_recognised_as_our_own_confirm() {
    let case = Case::new(vec![FenceCheck::HolderOnly]);
    let gateway = Gateway::default();
    assert_eq!(
        case.run(&gateway).await.unwrap(),
        EffectOutcome::Performed(1)
    );
    assert_eq!(case.state().await.as_ref(), Some(case.lifecycle.done()));
}

#[tokio::test]
async fn a_failed_effect_leaves_the_row_in_flight_and_the_next_holder_looks_first() {
    let case = Case::new(Vec::new());
    let gateway = Gateway::default();
    *gateway.fail_next.lock().unwrap() = true;
    let err = case.run(&gateway).await.unwrap_err();
    assert!(matches!(err, Error::Effect { .. }), "{err:?}");
    assert_eq!(
        case.state().await.as_ref(),
        Some(case.lifecycle.in_flight())
    );

    let outcome = case.run(&gateway).await.unwrap();
    assert_eq!(outcome, EffectOutcome::Performed(1));

    // A row left in flight after the effect did happen is recovered, not paid again.
    let case = Case::new(Vec::new());
    let token = case.source.next(&case.resource).await.unwrap();
    Fence::new(&case.resource, token, &case.source)
        .write(&case.store, &case.key, &case.lifecycle.claim())
        .await
        .unwrap();
    let paid_elsewhere = Gateway::default();
    paid_elsewhere.performed.store(1, Ordering::SeqCst);
    assert_eq!(
        case.run(&paid_elsewhere).await.unwrap(),
        EffectOutcome::Recovered(1)
    );
    assert_eq!(paid_elsewhere.performed.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_refusal_is_never_retried() {
    let case = Case::new(Vec::new());
    case.source
        .advance_to(&case.resource, FencingToken::new(10).unwrap())
        .await
        .unwrap();
    case.run(&Gateway::default()).await.unwrap();
    let stale = FencingToken::new(5).unwrap();
    let err = Fence::new(&case.resource, stale, &case.source)
        .write(&case.store, &case.key, &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Fenced { .. }),
        "below the source's counter: stale, {err:?}"
    );

    case.source.forget_all();
    let err = Fence::new(&case.resource, stale, &case.source)
        .write(&case.store, &case.key, &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::TokenRegression {
                highest_issued: None,
                ..
            }
        ),
        "above anything issued: regression, {err:?}"
    );
}

#[test]
fn bad_input_is_typed_and_caught_before_any_write() {
    let state = |s| State::new(s).unwrap();
    let err = Lifecycle::new(state("pending"), state("pending"), state("sent")).unwrap_err();
    assert_eq!(err.kind(), InputKind::State);
    assert_eq!(FencingToken::new(0).unwrap_err().kind(), InputKind::Token);
    assert_eq!(
        FencingToken::from_i64(-34).unwrap_err().kind(),
        InputKind::Token
    );
    assert_eq!(
        FencingToken::new(i64::MAX as u64 + 1).unwrap_err().kind(),
        InputKind::Token
    );
    assert_eq!(
        ResourceName::new("").unwrap_err().kind(),
        InputKind::ResourceName
    );
    assert_eq!(
        ResourceName::new("x".repeat(201)).unwrap_err().kind(),
        InputKind::ResourceName
    );
    assert_eq!(
        fencing::Ttl::from_millis(0).unwrap_err().kind(),
        InputKind::Ttl
    );
    assert_eq!(
        RecordKey::new("r\u{0}815").unwrap_err().kind(),
        InputKind::RecordKey
    );
    let err: Error = FencingToken::new(0).unwrap_err().into();
    assert!(!err.is_rejection() && !err.is_ambiguous());
}
