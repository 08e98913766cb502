//! The pipelined batch in virtual time: records side by side under the serial protocol's
//! rules — a stale holder stopped at its first refusal, no refund sent twice, a takeover that
//! looks up no more than the stalled holder's window, grouped requests.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencing_core::adapter::StoreWrites;
use fencing_core::{
    BoxError, EffectOutcome, Error, FenceCheck, FencedBatch, FencedStore, FencedWrite,
    FencingToken, Holder, Lease, Lifecycle, MemoryLease, MemoryStore, MismatchPolicy, Record,
    RecordKey, RecordWrites, ResourceName, Result, SideEffect, State, Ttl, Written, async_trait,
};

fn key(n: usize) -> RecordKey {
    RecordKey::new(format!("r_{n:04}")).unwrap()
}

fn keys(count: usize) -> Vec<RecordKey> {
    (1..=count).map(key).collect()
}

/// A payment gateway with idempotency keys: a refund is sent once per key however often it
/// is asked for, and every call is counted.
#[derive(Default)]
struct Gateway {
    latency: Duration,
    /// A record whose perform fails.
    fail: Option<RecordKey>,
    calls: Mutex<Calls>,
}

#[derive(Default)]
struct Calls {
    sent: HashMap<RecordKey, u32>,
    performs: HashMap<RecordKey, u32>,
    lookups: Vec<RecordKey>,
    in_flight: usize,
    most_in_flight: usize,
}

impl Gateway {
    fn with_latency(latency: Duration) -> Self {
        Gateway {
            latency,
            ..Gateway::default()
        }
    }

    fn calls(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.calls.lock().unwrap()
    }
}

#[async_trait]
impl SideEffect for Gateway {
    type Receipt = u32;

    async fn lookup(&self, key: &RecordKey) -> Result<Option<u32>, BoxError> {
        let mut calls = self.calls();
        calls.lookups.push(key.clone());
        Ok(calls.sent.get(key).copied())
    }

    async fn perform(&self, key: &RecordKey, _: &Record) -> Result<u32, BoxError> {
        {
            let mut calls = self.calls();
            *calls.performs.entry(key.clone()).or_default() += 1;
            calls.in_flight += 1;
            calls.most_in_flight = calls.most_in_flight.max(calls.in_flight);
        }
        tokio::time::sleep(self.latency).await;
        let mut calls = self.calls();
        calls.in_flight -= 1;
        if self.fail.as_ref() == Some(key) {
            return Err("gateway timeout".into());
        }
        let next = u32::try_from(calls.sent.len()).unwrap() + 1;
        Ok(*calls.sent.entry(key.clone()).or_insert(next))
    }
}

/// One worker's calls to the shared gateway. The worker's process pauses (a GC pause, a
/// frozen VM) when it starts the refund of `pause_at`: from then on none of its calls goes
/// out until the pause is over.
struct Worker<'g> {
    gateway: &'g Gateway,
    pause_at: Option<(RecordKey, Duration)>,
    paused_until: Mutex<Option<tokio::time::Instant>>,
}

impl<'g> Worker<'g> {
    fn new(gateway: &'g Gateway, pause_at: Option<(RecordKey, Duration)>) -> Self {
        Worker {
            gateway,
            pause_at,
            paused_until: Mutex::new(None),
        }
    }

    async fn wait_out_the_pause(&self, key: &RecordKey) {
        let until = {
            let mut paused = self.paused_until.lock().unwrap();
            if let Some((at, pause)) = &self.pause_at
                && at == key
                && paused.is_none()
            {
                *paused = Some(tokio::time::Instant::now() + *pause);
            }
            *paused
        };
        if let Some(until) = until {
            tokio::time::sleep_until(until).await;
        }
    }
}

#[async_trait]
impl SideEffect for Worker<'_> {
    type Receipt = u32;

    async fn lookup(&self, key: &RecordKey) -> Result<Option<u32>, BoxError> {
        self.wait_out_the_pause(key).await;
        self.gateway.lookup(key).await
    }

    async fn perform(&self, key: &RecordKey, record: &Record) -> Result<u32, BoxError> {
        self.wait_out_the_pause(key).await;
        self.gateway.perform(key, record).await
    }
}

/// A store that counts the requests it is sent.
#[derive(Debug)]
struct Counted {
    inner: MemoryStore,
    singles: AtomicUsize,
    groups: AtomicUsize,
    /// Each grouped request's check and number of records, in order.
    sizes: Mutex<Vec<(FenceCheck, usize)>>,
    /// How long each request takes to be answered (it applies at once).
    latency: Duration,
    /// Refuse the first grouped claim as a whole, the records in it missing.
    refuse_first_claims: std::sync::atomic::AtomicBool,
    /// The most records in flight at once, as seen after each grouped request.
    most_in_flight: AtomicUsize,
}

impl Counted {
    fn new(records: &[RecordKey]) -> Arc<Self> {
        let inner = MemoryStore::new("refunds");
        for key in records {
            inner.insert_unfenced(
                key.clone(),
                Some(Lifecycle::default().pending().clone()),
                Vec::new(),
            );
        }
        Arc::new(Counted {
            inner,
            singles: AtomicUsize::new(0),
            groups: AtomicUsize::new(0),
            sizes: Mutex::new(Vec::new()),
            latency: Duration::ZERO,
            refuse_first_claims: std::sync::atomic::AtomicBool::new(false),
            most_in_flight: AtomicUsize::new(0),
        })
    }

    /// How many grouped requests of `check` there were, and their largest size.
    fn requests(&self, check: FenceCheck) -> (usize, usize) {
        let sizes = self.sizes.lock().unwrap();
        let of: Vec<usize> = sizes
            .iter()
            .filter(|(c, _)| *c == check)
            .map(|(_, n)| *n)
            .collect();
        (of.len(), of.iter().copied().max().unwrap_or(0))
    }

    /// The records in flight (claimed, not confirmed), in no order.
    fn in_flight(&self) -> Vec<RecordKey> {
        let sending = Lifecycle::default().in_flight().clone();
        self.states()
            .into_iter()
            .filter(|(_, (_, state))| state.as_ref() == Some(&sending))
            .map(|(key, _)| key)
            .collect()
    }

    fn states(&self) -> HashMap<RecordKey, (Option<FencingToken>, Option<State>)> {
        self.inner
            .records()
            .into_iter()
            .map(|r| (r.key, (r.fence, r.state)))
            .collect()
    }
}

#[async_trait]
impl FencedStore for Counted {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn read(&self, key: &RecordKey) -> Result<Option<Record>> {
        self.inner.read(key).await
    }
}

#[async_trait]
impl StoreWrites for Counted {
    async fn write(
        &self,
        key: &RecordKey,
        token: FencingToken,
        w: &FencedWrite,
    ) -> Result<Written> {
        self.singles.fetch_add(1, Ordering::SeqCst);
        self.inner.write(key, token, w).await
    }

    async fn write_many(
        &self,
        keys: &[RecordKey],
        token: FencingToken,
        w: &FencedWrite,
    ) -> Result<Vec<Result<Written>>> {
        self.groups.fetch_add(1, Ordering::SeqCst);
        self.sizes.lock().unwrap().push((w.check(), keys.len()));
        if w.check() == FenceCheck::Claim && self.refuse_first_claims.swap(false, Ordering::SeqCst)
        {
            return Err(Error::NotFound {
                store: self.name().to_owned(),
                record: keys[0].clone(),
            });
        }
        let answer = self.inner.write_many(keys, token, w).await;
        let sending = Lifecycle::default().in_flight().clone();
        let in_flight = self
            .states()
            .values()
            .filter(|(_, state)| state.as_ref() == Some(&sending))
            .count();
        self.most_in_flight.fetch_max(in_flight, Ordering::SeqCst);
        tokio::time::sleep(self.latency).await;
        answer
    }
}

fn resource() -> ResourceName {
    ResourceName::new("settle:m_4471").unwrap()
}

fn ttl() -> Ttl {
    Ttl::from_secs(30).unwrap()
}

async fn batch(lease: &Arc<MemoryLease>, store: &Arc<Counted>) -> FencedBatch {
    let guard = lease
        .try_acquire(&resource(), ttl())
        .await
        .unwrap()
        .unwrap();
    FencedBatch::new(
        lease.clone(),
        guard,
        [store.clone() as Arc<dyn FencedStore>],
    )
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn every_record_is_settled_once_with_effects_side_by_side_and_writes_grouped() {
    let records = keys(1200);
    let store = Counted::new(&records);
    let lease = Arc::new(MemoryLease::new());
    let gateway = Gateway::with_latency(Duration::from_millis(5));
    let lifecycle = Lifecycle::default();
    let batch = batch(&lease, &store).await;
    let started = tokio::time::Instant::now();
    let pipeline = batch
        .holder()
        .pipeline(&*store, &lifecycle, &gateway)
        .concurrency(32)
        .group_size(32)
        .window(96)
        .flush_after(Duration::from_millis(7));
    let shown = format!("{pipeline:?}");
    for setting in [
        "concurrency: 32",
        "group_size: 32",
        "window: 96",
        "flush_after: 7ms",
    ] {
        assert!(shown.contains(setting), "{setting} not in {shown}");
    }
    let settled = pipeline.run(records.clone()).await;
    let elapsed = started.elapsed();
    let outcomes = settled.into_result().unwrap();
    assert_eq!(outcomes.len(), 1200);
    assert!(
        outcomes
            .iter()
            .all(|(_, o)| matches!(o, EffectOutcome::Performed(_)))
    );
    {
        let calls = gateway.calls();
        assert_eq!(calls.sent.len(), 1200);
        assert!(
            calls.performs.values().all(|&n| n == 1),
            "a refund asked twice"
        );
        assert!(calls.lookups.is_empty(), "nothing was in flight before");
        assert_eq!(calls.most_in_flight, 32, "32 effects side by side");
    }
    // 1,200 effects of 5 ms, 32 at a time: about 190 ms of virtual time, not 6 s.
    assert!(elapsed < Duration::from_secs(1), "{elapsed:?}");
    assert_eq!(store.singles.load(Ordering::SeqCst), 0);
    let groups = store.groups.load(Ordering::SeqCst);
    assert!(
        groups <= 2 * 1200 / 16,
        "{groups} requests for 2,400 writes"
    );
    let token = batch.token();
    assert!(
        store
            .states()
            .values()
            .all(|(fence, state)| *fence == Some(token) && state.as_ref() == Some(lifecycle.done()))
    );
    batch.finish().await.unwrap();
}

/// The worked example, pipelined: A's process pauses as it starts the refund of r_0815, past
/// its TTL; B takes over, finds A's window in flight, looks those up (never more than A's
/// window) and settles everything; A wakes, its refunds in flight go out (the gateway's
/// idempotency keys answer with B's), it sees by its own clock that its lease is over and
/// starts nothing more, and its confirms are refused.
#[tokio::test(start_paused = true)]
async fn a_paused_pipeline_is_stopped_by_its_first_refusal_and_no_refund_is_sent_twice() {
    let records = keys(1200);
    let store = Counted::new(&records);
    let lease = Arc::new(MemoryLease::new());
    let lifecycle = Lifecycle::default();
    let gateway = Arc::new(Gateway::with_latency(Duration::from_millis(5)));
    let paused_at = key(815);
    let a = batch(&lease, &store).await;
    let a_token = a.token();
    let a_run = {
        let (store, records, gateway, lifecycle) = (
            store.clone(),
            records.clone(),
            gateway.clone(),
            lifecycle.clone(),
        );
        let paused_at = paused_at.clone();
        tokio::spawn(async move {
            let worker = Worker::new(&gateway, Some((paused_at, Duration::from_secs(40))));
            let settled = a
                .holder()
                .pipeline(&*store, &lifecycle, &worker)
                .concurrency(8)
                .group_size(16)
                .window(32)
                .run(records)
                .await;
            let aborted = a.aborted_by();
            let _ = a.finish().await;
            (settled, aborted)
        })
    };
    tokio::time::sleep(Duration::from_secs(31)).await;
    let in_flight_at_takeover = store.in_flight();
    assert!(
        in_flight_at_takeover.len() <= 32,
        "A's window bounds what it left in flight"
    );
    assert!(in_flight_at_takeover.contains(&paused_at));

    let b = batch(&lease, &store).await;
    let b_token = b.token();
    assert!(b_token > a_token);
    let b_worker = Worker::new(&gateway, None);
    let b_settled = b
        .holder()
        .pipeline(&*store, &lifecycle, &b_worker)
        .concurrency(8)
        .group_size(16)
        .window(32)
        .run(records.clone())
        .await;
    let b_outcomes = b_settled.into_result().unwrap();
    b.finish().await.unwrap();
    let lookups_by_b = gateway.calls().lookups.clone();

    let (a_settled, a_aborted) = a_run.await.unwrap();
    let err = a_settled.error.expect("A is stopped");
    assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");
    assert!(a_aborted.is_some(), "its confirms were refused");
    let a_done: Vec<&RecordKey> = a_settled.outcomes.iter().map(|(k, _)| k).collect();
    assert!(!a_done.contains(&&paused_at));

    // B looked up exactly what A left in flight: the window, not the batch.
    let mut looked_up = lookups_by_b.clone();
    looked_up.sort();
    let mut expected = in_flight_at_takeover.clone();
    expected.sort();
    assert_eq!(looked_up, expected);
    assert_eq!(b_outcomes.len(), 1200);
    let already_done = b_outcomes
        .iter()
        .filter(|(_, o)| matches!(o, EffectOutcome::AlreadyDone))
        .count();
    assert_eq!(
        already_done,
        a_done.len(),
        "B skips exactly what A confirmed"
    );

    // No refund sent twice: one send per key. Only the refunds A had in flight when it paused
    // were asked for twice (B, finding them unsent, and A on waking), and the idempotency key
    // answered A's with B's.
    let calls = gateway.calls();
    assert_eq!(calls.sent.len(), 1200);
    for record in &records {
        let asked = calls.performs.get(record).copied().unwrap_or(0);
        assert!((1..=2).contains(&asked), "{record:?} asked {asked} times");
        if asked == 2 {
            assert!(in_flight_at_takeover.contains(record), "{record:?}");
        }
    }
    // Every record is done, under A's fence only where A confirmed it before pausing.
    for (record, (fence, state)) in store.states() {
        assert_eq!(state.as_ref(), Some(lifecycle.done()), "{record:?}");
        let expected = if a_done.contains(&&record) {
            a_token
        } else {
            b_token
        };
        assert_eq!(fence, Some(expected), "{record:?}");
    }
}

/// What a take-over found after A, with `concurrency` calls side by side and `window`
/// records claimed ahead, paused past its TTL at its refund of r_0100: the records A left in
/// flight, the ones B looked up, and the refunds asked for twice (A's calls parked by its
/// pause go out on waking, after B's look-up and send).
struct TakeOver {
    left_in_flight: Vec<RecordKey>,
    looked_up: Vec<RecordKey>,
    asked_twice: Vec<RecordKey>,
}

async fn take_over_after_a_pause(concurrency: usize, window: usize) -> TakeOver {
    let records = keys(400);
    let store = Counted::new(&records);
    let lease = Arc::new(MemoryLease::new());
    let lifecycle = Lifecycle::default();
    let gateway = Gateway::with_latency(Duration::from_millis(5));
    let a = batch(&lease, &store).await;
    let a_worker = Worker::new(&gateway, Some((key(100), Duration::from_secs(40))));
    let a_run = async {
        let settled = a
            .holder()
            .pipeline(&*store, &lifecycle, &a_worker)
            .concurrency(concurrency)
            .group_size(8)
            .window(window)
            .run(records.clone())
            .await;
        let _ = a.finish().await;
        settled
    };
    let b_run = async {
        tokio::time::sleep(Duration::from_secs(31)).await;
        let left_in_flight = store.in_flight();
        let b = batch(&lease, &store).await;
        let b_worker = Worker::new(&gateway, None);
        let settled = b
            .holder()
            .pipeline(&*store, &lifecycle, &b_worker)
            .run(records.clone())
            .await;
        b.finish().await.unwrap();
        (left_in_flight, settled)
    };
    let (_, (left_in_flight, b_settled)) = tokio::join!(a_run, b_run);
    assert_eq!(b_settled.into_result().unwrap().len(), 400);
    let calls = gateway.calls();
    assert_eq!(calls.sent.len(), 400, "one refund per key");
    TakeOver {
        left_in_flight,
        looked_up: calls.lookups.clone(),
        asked_twice: calls
            .performs
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(key, _)| key.clone())
            .collect(),
    }
}

/// A pipelined take-over's extra calls have two bounds, the stalled holder's window (look-ups)
/// and its concurrency (second calls), and the window is the knob: with a window of the
/// concurrency, the look-ups fall to the calls that were under way.
#[tokio::test(start_paused = true)]
async fn a_take_over_looks_up_no_more_than_the_window_and_calls_twice_no_more_than_were_under_way()
{
    for (concurrency, window) in [(8, 64), (8, 8)] {
        let found = take_over_after_a_pause(concurrency, window).await;
        eprintln!(
            "concurrency {concurrency}, window {window}: {} left in flight and looked up, {} \
             asked for twice",
            found.left_in_flight.len(),
            found.asked_twice.len()
        );
        let mut looked_up = found.looked_up.clone();
        looked_up.sort();
        let mut left = found.left_in_flight.clone();
        left.sort();
        assert_eq!(looked_up, left, "B looks up exactly what A left in flight");
        assert!(left.len() <= window, "{} > window {window}", left.len());
        assert!(
            found.asked_twice.len() <= concurrency,
            "{} asked twice",
            found.asked_twice.len()
        );
        assert!(found.asked_twice.iter().all(|key| left.contains(key)));
        if window > concurrency {
            assert!(
                left.len() > concurrency,
                "claimed ahead: {} left in flight",
                left.len()
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_effect_stops_new_work_and_confirms_what_finished() {
    let records = keys(200);
    let store = Counted::new(&records);
    let lease = Arc::new(MemoryLease::new());
    let lifecycle = Lifecycle::default();
    let gateway = Gateway {
        latency: Duration::from_millis(5),
        fail: Some(key(40)),
        ..Gateway::default()
    };
    let batch = batch(&lease, &store).await;
    let settled = batch
        .holder()
        .pipeline(&*store, &lifecycle, &gateway)
        .concurrency(4)
        .group_size(8)
        .window(16)
        .run(records.clone())
        .await;
    assert!(
        matches!(&settled.error, Some(Error::Effect { record, .. }) if *record == key(40)),
        "{:?}",
        settled.error
    );
    let states = store.states();
    let in_state = |s: &State| {
        states
            .values()
            .filter(|(_, st)| st.as_ref() == Some(s))
            .count()
    };
    // Every effect that finished is confirmed; what was claimed and not performed stays in
    // flight (at most the window); nothing beyond the window was claimed.
    assert_eq!(in_state(lifecycle.done()), settled.outcomes.len());
    assert_eq!(in_state(lifecycle.done()), gateway.calls().sent.len());
    assert!(in_state(lifecycle.in_flight()) <= 16);
    assert!(in_state(lifecycle.pending()) >= 200 - 40 - 16);
    // A failed effect is not a rejection: the batch is not aborted, the lease released.
    assert_eq!(batch.aborted_by(), None);
    batch.finish().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn done_records_are_reported_and_mismatches_skipped_or_stopping_by_policy() {
    let records = keys(20);
    let lifecycle = Lifecycle::default();
    let cancelled = State::new("cancelled").unwrap();
    for policy in [MismatchPolicy::Skip, MismatchPolicy::Abort] {
        let store = Counted::new(&records);
        store
            .inner
            .insert_unfenced(key(3), Some(lifecycle.done().clone()), Vec::new());
        store
            .inner
            .insert_unfenced(key(7), Some(cancelled.clone()), Vec::new());
        let lease = Arc::new(MemoryLease::new());
        let gateway = Gateway::default();
        let batch = batch(&lease, &store).await.with_mismatch_policy(policy);
        let settled = batch
            .holder()
            .pipeline(&*store, &lifecycle, &gateway)
            .concurrency(2)
            .group_size(4)
            .window(4)
            .run(records.clone())
            .await;
        let done = settled
            .outcomes
            .iter()
            .find(|(k, _)| *k == key(3))
            .map(|(_, o)| o);
        assert_eq!(done, Some(&EffectOutcome::AlreadyDone), "{policy:?}");
        assert!(!gateway.calls().performs.contains_key(&key(7)));
        match policy {
            MismatchPolicy::Skip => {
                assert!(settled.error.is_none(), "{:?}", settled.error);
                assert_eq!(settled.outcomes.len(), 19);
                assert_eq!(batch.skipped().len(), 1);
            }
            MismatchPolicy::Abort => {
                let err = settled.error.expect("a mismatch aborts");
                assert!(err.is_mismatch(), "{err:?}");
                assert!(settled.outcomes.len() < 19);
                assert_eq!(batch.aborted_by().map(|(_, r)| r), Some(key(7)));
            }
        }
        let _ = batch.finish().await;
    }
}

/// Confirms wait for a full group: with every effect as fast as the next and no wait for a
/// late one, 64 records in groups of 8 are 8 requests of claims and 8 of confirms, none
/// larger than 8.
#[tokio::test(start_paused = true)]
async fn confirms_go_in_full_groups_when_effects_keep_pace() {
    let records = keys(64);
    let store = Counted::new(&records);
    let lease = Arc::new(MemoryLease::new());
    let gateway = Gateway::with_latency(Duration::from_millis(5));
    let lifecycle = Lifecycle::default();
    let batch = batch(&lease, &store).await;
    let settled = batch
        .holder()
        .pipeline(&*store, &lifecycle, &gateway)
        .concurrency(8)
        .group_size(8)
        .window(64)
        .flush_after(Duration::from_secs(3600))
        .run(records)
        .await;
    assert_eq!(settled.into_result().unwrap().len(), 64);
    assert_eq!(store.requests(FenceCheck::Claim), (8, 8));
    assert_eq!(store.requests(FenceCheck::HolderOnly), (8, 8));
    batch.finish().await.unwrap();
}

/// A record whose effect ended waits at most `flush_after` for its group to fill: one slow
/// effect behind a fast one does not hold the fast one's confirm back.
#[tokio::test(start_paused = true)]
async fn a_finished_effect_is_confirmed_after_flush_after_without_a_full_group() {
    struct Slow(Gateway);
    #[async_trait]
    impl SideEffect for Slow {
        type Receipt = u32;
        async fn lookup(&self, key: &RecordKey) -> Result<Option<u32>, BoxError> {
            self.0.lookup(key).await
        }
        async fn perform(&self, key: &RecordKey, record: &Record) -> Result<u32, BoxError> {
            if *key == self::key(2) {
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
            self.0.perform(key, record).await
        }
    }
    let records = keys(2);
    let store = Counted::new(&records);
    let lease = Arc::new(MemoryLease::new());
    let gateway = Slow(Gateway::with_latency(Duration::from_millis(5)));
    let lifecycle = Lifecycle::default();
    let batch = batch(&lease, &store).await;
    let pipeline = batch
        .holder()
        .pipeline(&*store, &lifecycle, &gateway)
        .concurrency(2)
        .group_size(8)
        .flush_after(Duration::from_millis(100))
        .run(records);
    let store_ref = &store;
    let first_confirmed = async {
        loop {
            let states = store_ref.states();
            if states[&key(1)].1.as_ref() == Some(lifecycle.done()) {
                return tokio::time::Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    let started = tokio::time::Instant::now();
    let (settled, confirmed_at) = tokio::join!(pipeline, first_confirmed);
    settled.into_result().unwrap();
    let waited = confirmed_at - started;
    assert!(
        waited >= Duration::from_millis(100) && waited < Duration::from_millis(200),
        "r_0001 confirmed after {waited:?}"
    );
    assert_eq!(store.requests(FenceCheck::HolderOnly), (2, 1));
    batch.finish().await.unwrap();
}

/// Unless set, the window is twice the concurrency (at least 64): with 40 effects stuck, 80
/// records are claimed ahead and no more.
#[tokio::test(start_paused = true)]
async fn the_window_is_twice_the_concurrency_unless_set() {
    let records = keys(200);
    let store = Counted::new(&records);
    let lease = Arc::new(MemoryLease::new());
    let gateway = Gateway::with_latency(Duration::from_secs(3600));
    let lifecycle = Lifecycle::default();
    let batch = batch(&lease, &store).await;
    let pipeline = batch
        .holder()
        .pipeline(&*store, &lifecycle, &gateway)
        .concurrency(40)
        .group_size(8)
        .run(records);
    tokio::select! {
        _ = pipeline => panic!("the effects take an hour"),
        () = tokio::time::sleep(Duration::from_secs(60)) => {}
    }
    assert_eq!(store.in_flight().len(), 80);
    assert_eq!(gateway.calls().in_flight, 40);
}

/// A record an earlier holder left in flight whose effect the look-up finds made is confirmed
/// without a second effect, and reported as recovered, with the receipt the look-up found.
#[tokio::test(start_paused = true)]
async fn a_record_whose_effect_was_made_elsewhere_is_reported_recovered() {
    let records = keys(4);
    let store = Counted::new(&records);
    let lease = Arc::new(MemoryLease::new());
    let lifecycle = Lifecycle::default();
    let earlier = lease
        .try_acquire(&resource(), ttl())
        .await
        .unwrap()
        .unwrap();
    store
        .inner
        .write(&key(2), earlier.token(), &lifecycle.claim())
        .await
        .unwrap();
    lease.release(earlier).await.unwrap();
    let gateway = Gateway::default();
    gateway.calls().sent.insert(key(2), 7);
    let batch = batch(&lease, &store).await;
    let outcomes = batch
        .holder()
        .pipeline(&*store, &lifecycle, &gateway)
        .concurrency(2)
        .run(records)
        .await
        .into_result()
        .unwrap();
    let of = |k: RecordKey| outcomes.iter().find(|(key, _)| *key == k).map(|(_, o)| o);
    assert_eq!(of(key(2)), Some(&EffectOutcome::Recovered(7)));
    assert!(matches!(of(key(1)), Some(EffectOutcome::Performed(_))));
    assert_eq!(gateway.calls().lookups, [key(2)]);
    assert!(!gateway.calls().performs.contains_key(&key(2)));
    batch.finish().await.unwrap();
}

/// A window exactly as large as the concurrency is enough, even when it is smaller than a
/// group of confirms (32 by default): once the window is full of finished effects, they are
/// confirmed at once. (The pipeline used to wait for a fuller group that could never come,
/// found nothing in flight, and ended with 4 records in flight, 8 never claimed and no error.)
#[tokio::test(start_paused = true)]
async fn a_window_of_the_concurrency_smaller_than_a_group_settles_every_record() {
    let records = keys(12);
    let store = Counted::new(&records);
    let lease = Arc::new(MemoryLease::new());
    let gateway = Gateway::default();
    let lifecycle = Lifecycle::default();
    let batch = batch(&lease, &store).await;
    let settled = batch
        .holder()
        .pipeline(&*store, &lifecycle, &gateway)
        .concurrency(4)
        .window(4)
        .run(records)
        .await;
    assert_eq!(settled.into_result().unwrap().len(), 12);
    batch.finish().await.unwrap();
}

/// A group of claims refused as a whole for a mismatch the batch skips frees its place in
/// the window: the records after it are all settled, the window filled to the full while
/// the effects are slow.
#[tokio::test(start_paused = true)]
async fn a_skipped_group_of_claims_frees_its_place_in_the_window() {
    let records = keys(40);
    let store = Counted::new(&records);
    store.refuse_first_claims.store(true, Ordering::SeqCst);
    let lease = Arc::new(MemoryLease::new());
    let gateway = Gateway::with_latency(Duration::from_secs(1));
    let lifecycle = Lifecycle::default();
    let batch = batch(&lease, &store)
        .await
        .with_mismatch_policy(MismatchPolicy::Skip);
    let settled = batch
        .holder()
        .pipeline(&*store, &lifecycle, &gateway)
        .concurrency(4)
        .group_size(8)
        .window(16)
        .run(records)
        .await;
    assert!(settled.error.is_none(), "{:?}", settled.error);
    assert_eq!(
        settled.outcomes.len(),
        32,
        "the 8 of the first group are skipped"
    );
    assert_eq!(gateway.calls().sent.len(), 32);
    assert_eq!(store.most_in_flight.load(Ordering::SeqCst), 16);
    let _ = batch.finish().await;
}

/// Records skipped one by one (in a state the claim does not start from) free their places
/// too: half the records skipped, every other one settled through a window of 8.
#[tokio::test(start_paused = true)]
async fn records_skipped_one_by_one_free_their_places_in_the_window() {
    let records = keys(40);
    let store = Counted::new(&records);
    let cancelled = State::new("cancelled").unwrap();
    for key in &records[..20] {
        store
            .inner
            .insert_unfenced(key.clone(), Some(cancelled.clone()), Vec::new());
    }
    let lease = Arc::new(MemoryLease::new());
    let gateway = Gateway::default();
    let lifecycle = Lifecycle::default();
    let batch = batch(&lease, &store)
        .await
        .with_mismatch_policy(MismatchPolicy::Skip);
    let settled = batch
        .holder()
        .pipeline(&*store, &lifecycle, &gateway)
        .concurrency(2)
        .group_size(4)
        .window(8)
        .run(records)
        .await;
    assert!(settled.error.is_none(), "{:?}", settled.error);
    assert_eq!(settled.outcomes.len(), 20);
    assert_eq!(batch.skipped().len(), 20);
    let _ = batch.finish().await;
}

#[tokio::test(start_paused = true)]
async fn bad_settings_and_repeated_keys_are_refused_with_nothing_written() {
    let records = keys(4);
    let store = Counted::new(&records);
    let lease = Arc::new(MemoryLease::new());
    let lifecycle = Lifecycle::default();
    let gateway = Gateway::default();
    let batch = batch(&lease, &store).await;
    let before = store.states();
    let refused = |settled: fencing_core::Settled<u32>| {
        assert!(settled.outcomes.is_empty());
        matches!(settled.error, Some(Error::InvalidInput(_)))
    };
    let pipeline = || batch.holder().pipeline(&*store, &lifecycle, &gateway);
    assert!(refused(
        pipeline().concurrency(0).run(records.clone()).await
    ));
    assert!(refused(pipeline().group_size(0).run(records.clone()).await));
    assert!(refused(
        pipeline()
            .concurrency(8)
            .window(4)
            .run(records.clone())
            .await
    ));
    let twice = vec![key(1), key(2), key(1)];
    assert!(refused(pipeline().run(twice).await));
    // Settings at the ends of their types: refused (or harmless) before anything is sent,
    // never a panic after the first claims went out.
    assert!(refused(
        pipeline()
            .flush_after(Duration::MAX)
            .run(records.clone())
            .await
    ));
    assert!(refused(
        pipeline()
            .flush_after(
                fencing_core::Pipeline::<Gateway>::LONGEST_FLUSH_AFTER + Duration::from_nanos(1)
            )
            .run(records.clone())
            .await
    ));
    let widest = pipeline().concurrency(usize::MAX);
    assert!(format!("{widest:?}").contains(&format!("window: {}", usize::MAX)));
    assert!(refused(widest.window(64).run(records.clone()).await));
    let elsewhere = MemoryStore::new("not-in-the-batch");
    assert!(refused(
        batch
            .holder()
            .pipeline(&elsewhere, &lifecycle, &gateway)
            .run(records.clone())
            .await
    ));
    assert_eq!(store.states(), before);
    assert_eq!(store.groups.load(Ordering::SeqCst), 0);
    assert!(gateway.calls().performs.is_empty());
    assert!(
        pipeline()
            .run(Vec::new())
            .await
            .into_result()
            .unwrap()
            .is_empty()
    );
    // The widest settings that are valid run to the end.
    let settled = pipeline()
        .concurrency(usize::MAX)
        .group_size(usize::MAX)
        .flush_after(fencing_core::Pipeline::<Gateway>::LONGEST_FLUSH_AFTER)
        .run(records.clone())
        .await;
    assert_eq!(settled.into_result().unwrap().len(), 4);
    batch.finish().await.unwrap();
}

/// A pipeline dropped at every moment of its run (every millisecond of virtual time, with
/// store answers taking 1 ms and calls 3 ms) leaves each record pending, in flight under its
/// fence, or done; the next holder settles them all, looking up only what was in flight, and
/// no refund is sent twice.
#[tokio::test(start_paused = true)]
async fn a_pipeline_dropped_at_any_moment_leaves_states_the_protocol_produces() {
    let lifecycle = Lifecycle::default();
    let records = keys(40);
    let mut dropped_with_work_in_flight = 0;
    for drop_at in 0..=60 {
        let store = {
            let counted = Counted::new(&records);
            let mut counted = Arc::into_inner(counted).unwrap();
            counted.latency = Duration::from_millis(1);
            Arc::new(counted)
        };
        let lease = Arc::new(MemoryLease::new());
        let gateway = Gateway::with_latency(Duration::from_millis(3));
        let first = batch(&lease, &store).await;
        let run = first
            .holder()
            .pipeline(&*store, &lifecycle, &gateway)
            .concurrency(4)
            .group_size(4)
            .window(8)
            .flush_after(Duration::from_millis(2))
            .run(records.clone());
        let finished = tokio::time::timeout(Duration::from_millis(drop_at), run).await;
        let first_token = first.token();
        let in_flight: Vec<RecordKey> = store
            .states()
            .into_iter()
            .filter_map(|(key, (fence, state))| {
                let state = state.expect("every record has a state");
                if state == *lifecycle.in_flight() {
                    assert_eq!(
                        fence,
                        Some(first_token),
                        "{key:?} in flight under another fence"
                    );
                    Some(key)
                } else {
                    assert!(
                        state == *lifecycle.pending() || state == *lifecycle.done(),
                        "dropped at {drop_at} ms: {key:?} is {state}"
                    );
                    None
                }
            })
            .collect();
        if finished.is_err() && !in_flight.is_empty() {
            dropped_with_work_in_flight += 1;
        }
        assert!(
            in_flight.len() <= 8,
            "the window bounds what is left in flight"
        );
        drop(first); // released in the background, as a dropped batch is
        tokio::time::sleep(Duration::from_millis(1)).await;

        let next = batch(&lease, &store).await;
        let lookups_before = gateway.calls().lookups.len();
        let outcomes = next
            .holder()
            .pipeline(&*store, &lifecycle, &gateway)
            .run(records.clone())
            .await
            .into_result()
            .unwrap();
        assert_eq!(outcomes.len(), 40);
        next.finish().await.unwrap();
        let calls = gateway.calls();
        assert_eq!(
            calls.lookups.len() - lookups_before,
            in_flight.len(),
            "dropped at {drop_at} ms"
        );
        assert_eq!(calls.sent.len(), 40, "every refund sent");
        for record in &records {
            let asked = calls.performs.get(record).copied().unwrap_or(0);
            assert!(
                asked == 1 || (asked == 2 && in_flight.contains(record)),
                "{record:?}: {asked}"
            );
        }
        assert!(
            store
                .states()
                .values()
                .all(|(_, s)| s.as_ref() == Some(lifecycle.done()))
        );
    }
    assert!(
        dropped_with_work_in_flight > 10,
        "{dropped_with_work_in_flight}"
    );
}

/// Claims and confirms of the caller's own: each confirm records its own receipt beside the
/// state (what a gateway reference column or a ledger entry needs), one request per record.
struct ReceiptWrites<'s> {
    store: &'s Counted,
    lifecycle: &'s Lifecycle,
    /// Claims that leave the record as it was (a broken caller), to be refused.
    claims_nothing: bool,
}

#[async_trait]
impl RecordWrites<u32> for ReceiptWrites<'_> {
    async fn claim(&self, holder: &Holder, key: &RecordKey) -> Result<Written> {
        let claim = if self.claims_nothing {
            FencedWrite::claim()
        } else {
            self.lifecycle.claim()
        };
        holder.write(self.store, key, &claim).await
    }

    async fn confirm(&self, holder: &Holder, key: &RecordKey, receipt: &u32) -> Result<Written> {
        let confirm = self
            .lifecycle
            .confirm()
            .set_payload(receipt.to_string().into_bytes());
        holder.write(self.store, key, &confirm).await
    }
}

#[tokio::test(start_paused = true)]
async fn own_writes_carry_each_records_receipt_one_request_per_record() {
    let records = keys(200);
    let store = Counted::new(&records);
    let lease = Arc::new(MemoryLease::new());
    let gateway = Gateway::with_latency(Duration::from_millis(5));
    let lifecycle = Lifecycle::default();
    let batch = batch(&lease, &store).await;
    let writes = ReceiptWrites {
        store: &store,
        lifecycle: &lifecycle,
        claims_nothing: false,
    };
    let outcomes = batch
        .holder()
        .pipeline(&*store, &lifecycle, &gateway)
        .concurrency(16)
        .writes(&writes)
        .run(records.clone())
        .await
        .into_result()
        .unwrap();
    assert_eq!(outcomes.len(), 200);
    assert_eq!(gateway.calls().most_in_flight, 16);
    assert_eq!(store.singles.load(Ordering::SeqCst), 400);
    assert_eq!(store.groups.load(Ordering::SeqCst), 0);
    for (key, outcome) in outcomes {
        let EffectOutcome::Performed(receipt) = outcome else {
            panic!("{key:?}: {outcome:?}");
        };
        let record = store.inner.read(&key).await.unwrap().unwrap();
        assert_eq!(record.state.as_ref(), Some(lifecycle.done()));
        assert_eq!(record.fence, Some(batch.token()));
        assert_eq!(record.payload, receipt.to_string().into_bytes(), "{key:?}");
    }
    batch.finish().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn own_writes_of_a_stale_holder_are_refused_before_any_effect() {
    let records = keys(40);
    let store = Counted::new(&records);
    let lease = Arc::new(MemoryLease::new());
    let gateway = Gateway::default();
    let lifecycle = Lifecycle::default();
    let a = batch(&lease, &store).await;
    // A's lease ends without A's knowing (its deadline is far off).
    lease.release(a.guard().clone()).await.unwrap();
    let b = batch(&lease, &store).await;
    b.holder()
        .write(&*store, &key(3), &lifecycle.claim())
        .await
        .unwrap();
    let writes = ReceiptWrites {
        store: &store,
        lifecycle: &lifecycle,
        claims_nothing: false,
    };
    let settled = a
        .holder()
        .pipeline(&*store, &lifecycle, &gateway)
        .concurrency(4)
        .group_size(8)
        .writes(&writes)
        .run(records.clone())
        .await;
    let err = settled.error.expect("A is refused");
    assert!(err.is_rejection(), "{err:?}");
    assert_eq!(a.aborted_by().map(|(_, r)| r), Some(key(3)));
    assert!(settled.outcomes.is_empty());
    assert!(
        gateway.calls().performs.is_empty(),
        "no effect after the refusal"
    );
    let b_record = store.inner.read(&key(3)).await.unwrap().unwrap();
    assert_eq!(b_record.fence, Some(b.token()));
    assert_eq!(b_record.state.as_ref(), Some(lifecycle.in_flight()));
}

#[tokio::test(start_paused = true)]
async fn an_own_claim_that_does_not_claim_stops_the_pipeline_before_its_effect() {
    let records = keys(8);
    let store = Counted::new(&records);
    let lease = Arc::new(MemoryLease::new());
    let gateway = Gateway::default();
    let lifecycle = Lifecycle::default();
    let batch = batch(&lease, &store).await;
    let writes = ReceiptWrites {
        store: &store,
        lifecycle: &lifecycle,
        claims_nothing: true,
    };
    let settled = batch
        .holder()
        .pipeline(&*store, &lifecycle, &gateway)
        .writes(&writes)
        .run(records)
        .await;
    assert!(
        matches!(settled.error, Some(Error::InvalidInput(_))),
        "{:?}",
        settled.error
    );
    assert!(gateway.calls().performs.is_empty());
    assert!(settled.outcomes.is_empty());
}

/// A future run as a process that is stopped (SIGSTOP) once `stop_when` says so: from then on
/// nothing of it runs for `length`, while time and every other task go on; then it goes on
/// where it was. Returns the instant it was stopped at with its output.
async fn stopped_once<F: Future>(
    work: F,
    stop_when: impl Fn() -> bool,
    length: Duration,
) -> (F::Output, Option<tokio::time::Instant>) {
    let mut work = std::pin::pin!(work);
    let mut stopped_at = None;
    let mut asleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    let output = std::future::poll_fn(|cx| {
        if let Some(sleep) = asleep.as_mut() {
            std::task::ready!(sleep.as_mut().poll(cx));
            asleep = None;
        }
        let polled = work.as_mut().poll(cx);
        if polled.is_pending() && stopped_at.is_none() && stop_when() {
            stopped_at = Some(tokio::time::Instant::now());
            let mut sleep = Box::pin(tokio::time::sleep(length));
            assert!(sleep.as_mut().poll(cx).is_pending());
            asleep = Some(sleep);
        }
        polled
    })
    .await;
    (output, stopped_at)
}

/// A worker's calls to the gateway, each noted with the instant it started.
struct Timed<'g> {
    gateway: &'g Gateway,
    started: Mutex<Vec<(RecordKey, tokio::time::Instant)>>,
}

impl<'g> Timed<'g> {
    fn new(gateway: &'g Gateway) -> Self {
        Timed {
            gateway,
            started: Mutex::new(Vec::new()),
        }
    }

    fn started(&self) -> Vec<(RecordKey, tokio::time::Instant)> {
        self.started.lock().unwrap().clone()
    }
}

#[async_trait]
impl SideEffect for Timed<'_> {
    type Receipt = u32;

    async fn lookup(&self, key: &RecordKey) -> Result<Option<u32>, BoxError> {
        self.gateway.lookup(key).await
    }

    async fn perform(&self, key: &RecordKey, record: &Record) -> Result<u32, BoxError> {
        let now = tokio::time::Instant::now();
        self.started.lock().unwrap().push((key.clone(), now));
        self.gateway.perform(key, record).await
    }
}

/// The worked example with A's whole process stopped (not one call of it): 32 refunds in
/// flight and a window claimed ahead when it stops, past its TTL; B takes over. On waking A
/// sees by its own clock that its lease is over: the calls it had started finish, their
/// confirms are refused, and it starts none of the refunds it had claimed and not begun.
#[tokio::test(start_paused = true)]
async fn a_worker_stopped_past_its_deadline_starts_no_effect_on_waking() {
    let records = keys(1200);
    let store = Counted::new(&records);
    let lease = Arc::new(MemoryLease::new());
    let lifecycle = Lifecycle::default();
    let gateway = Gateway::with_latency(Duration::from_secs(1));
    let a = batch(&lease, &store).await;
    let a_gateway = Timed::new(&gateway);
    let a_run = async {
        let settled = a
            .holder()
            .pipeline(&*store, &lifecycle, &a_gateway)
            .concurrency(32)
            .group_size(32)
            .window(64)
            .run(records.clone())
            .await;
        let _ = a.finish().await;
        settled
    };
    // A stops after starting 800 refunds, about 25 s in, for 20 s.
    let a_stopped = stopped_once(
        a_run,
        || a_gateway.started.lock().unwrap().len() >= 800,
        Duration::from_secs(20),
    );
    let b_gateway = Timed::new(&gateway);
    let b_run = async {
        tokio::time::sleep(Duration::from_secs(31)).await;
        let b = batch(&lease, &store).await;
        let settled = b
            .holder()
            .pipeline(&*store, &lifecycle, &b_gateway)
            .concurrency(32)
            .run(records.clone())
            .await;
        b.finish().await.unwrap();
        settled
    };
    let ((a_settled, stopped_at), b_settled) = tokio::join!(a_stopped, b_run);
    let stopped_at = stopped_at.expect("A was stopped");

    let started_after: Vec<RecordKey> = a_gateway
        .started()
        .into_iter()
        .filter(|(_, at)| *at > stopped_at)
        .map(|(key, _)| key)
        .collect();
    assert_eq!(
        started_after,
        Vec::<RecordKey>::new(),
        "A started these on waking"
    );
    assert!(a_gateway.started().len() >= 800);
    let err = a_settled.error.expect("A is stopped");
    assert!(
        matches!(err, Error::LeaseLost { .. }),
        "A stops by its own deadline before any refusal: {err:?}"
    );
    assert_eq!(b_settled.into_result().unwrap().len(), 1200);
    let calls = gateway.calls();
    assert_eq!(calls.sent.len(), 1200);
    assert!(calls.performs.values().all(|&n| n <= 2));
}

/// A take-over whose look-ups outlast the lease: the performs that would follow them do not
/// start, since the deadline passed while the look-ups were out.
#[tokio::test(start_paused = true)]
async fn a_take_over_whose_look_ups_outlast_the_lease_performs_nothing() {
    let records = keys(8);
    let store = Counted::new(&records);
    let lease = Arc::new(MemoryLease::new());
    let lifecycle = Lifecycle::default();
    let gateway = Gateway::default();
    let a = batch(&lease, &store).await;
    a.holder()
        .write_many(&*store, &records, &lifecycle.claim())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(31)).await;
    let b = batch(&lease, &store).await;
    // The first look-up holds every call of B's for longer than B's TTL.
    let slow = Worker::new(&gateway, Some((key(1), Duration::from_secs(31))));
    let settled = b
        .holder()
        .pipeline(&*store, &lifecycle, &slow)
        .concurrency(8)
        .run(records.clone())
        .await;
    assert!(
        matches!(settled.error, Some(Error::LeaseLost { .. })),
        "{:?}",
        settled.error
    );
    let calls = gateway.calls();
    assert!(!calls.lookups.is_empty());
    assert!(
        calls.performs.is_empty(),
        "performed after the deadline: {:?}",
        calls.performs
    );
}

/// A batch longer than its TTL under a [`fencing_core::LeaseRenewal`] of a clone of its
/// guard: each extension moves the batch's deadline too, so the pipeline runs to the end.
/// When the renewal gives up (the lease was taken away), the pipeline starts nothing more.
#[tokio::test(start_paused = true)]
async fn a_renewed_lease_keeps_a_long_pipeline_going_and_a_lost_renewal_stops_it() {
    let records = keys(200);
    let store = Counted::new(&records);
    let lease = Arc::new(MemoryLease::new());
    let lifecycle = Lifecycle::default();
    let gateway = Gateway::with_latency(Duration::from_secs(1));
    let a = batch(&lease, &store).await;
    let renewal = fencing_core::LeaseRenewal::start(
        lease.clone(),
        a.guard().clone(),
        Duration::from_secs(10),
    );
    // 200 calls of 1 s, 4 at a time: 50 s, beyond the 30 s TTL.
    let settled = a
        .holder()
        .pipeline(&*store, &lifecycle, &gateway)
        .concurrency(4)
        .run(records.clone())
        .await;
    assert_eq!(settled.into_result().unwrap().len(), 200);
    assert!(!renewal.is_lost());
    drop(renewal);
    a.finish().await.unwrap();

    let more = keys(400);
    let store = Counted::new(&more);
    let b = batch(&lease, &store).await;
    let renewal = fencing_core::LeaseRenewal::start(
        lease.clone(),
        b.guard().clone(),
        Duration::from_secs(10),
    );
    let stolen = async {
        tokio::time::sleep(Duration::from_secs(15)).await;
        // The lease is taken from B behind its back: its next extension is refused.
        lease.release(b.guard().clone()).await.unwrap();
        let _c = lease
            .try_acquire(&resource(), ttl())
            .await
            .unwrap()
            .unwrap();
        tokio::time::sleep(Duration::from_secs(100)).await;
    };
    let run = b
        .holder()
        .pipeline(&*store, &lifecycle, &gateway)
        .concurrency(4)
        .run(more.clone());
    let settled = tokio::select! {
        settled = run => settled,
        () = stolen => unreachable!("the pipeline stops on its own"),
    };
    assert!(renewal.is_lost());
    assert!(
        matches!(settled.error, Some(Error::LeaseLost { .. })),
        "{:?}",
        settled.error
    );
    // Lost at the 20 s beat: about 80 records settled, far from 400, none started after.
    let started = gateway.calls().performs.len() - 200;
    assert!(started < 100, "{started} effects started");
}

/// The whole batch claimed up front (one request), then settled by the pipeline without
/// claiming again: only what was in flight before that claim is looked up.
#[tokio::test(start_paused = true)]
async fn records_claimed_up_front_are_settled_without_another_claim() {
    let records = keys(100);
    let store = Counted::new(&records);
    let lease = Arc::new(MemoryLease::new());
    let lifecycle = Lifecycle::default();
    let gateway = Gateway::with_latency(Duration::from_millis(5));
    // An earlier holder left r_0007 in flight, its refund made.
    let earlier = batch(&lease, &store).await;
    earlier
        .holder()
        .write(&*store, &key(7), &lifecycle.claim())
        .await
        .unwrap();
    gateway
        .perform(&key(7), &store.inner.read(&key(7)).await.unwrap().unwrap())
        .await
        .unwrap();
    lease.release(earlier.guard().clone()).await.unwrap();
    drop(earlier);

    let batch = batch(&lease, &store).await;
    let holder = batch.holder();
    let claimed: Vec<Written> = holder
        .write_many(&*store, &records, &lifecycle.claim())
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let claims_before = store.requests(FenceCheck::Claim).0;

    // Answers that are not this holder's claims are refused before anything starts.
    let mut foreign = claimed[0].clone();
    foreign.record.fence = FencingToken::new(1).ok();
    let twice = vec![claimed[1].clone(), claimed[1].clone()];
    for bad in [vec![foreign], twice] {
        let settled = batch
            .holder()
            .pipeline(&*store, &lifecycle, &gateway)
            .run_claimed(bad)
            .await;
        assert!(
            matches!(settled.error, Some(Error::InvalidInput(_))),
            "{:?}",
            settled.error
        );
    }
    assert_eq!(
        gateway.calls().performs.len(),
        1,
        "only the earlier holder's"
    );

    let outcomes = batch
        .holder()
        .pipeline(&*store, &lifecycle, &gateway)
        .concurrency(8)
        .run_claimed(claimed)
        .await
        .into_result()
        .unwrap();
    assert_eq!(outcomes.len(), 100);
    assert_eq!(
        store.requests(FenceCheck::Claim).0,
        claims_before,
        "no claim sent"
    );
    let recovered: Vec<&RecordKey> = outcomes
        .iter()
        .filter(|(_, o)| matches!(o, EffectOutcome::Recovered(_)))
        .map(|(k, _)| k)
        .collect();
    assert_eq!(recovered, vec![&key(7)]);
    assert_eq!(gateway.calls().lookups, vec![key(7)]);
    assert!(gateway.calls().performs.values().all(|&n| n == 1));
    batch.finish().await.unwrap();
}
