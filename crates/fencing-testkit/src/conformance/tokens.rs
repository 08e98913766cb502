use std::collections::BTreeSet;
use std::sync::Arc;

use fencing_core::{Error, FencingToken, TokenSource};

use super::{Capabilities, OneAtATime, resource};

/// `next` strictly increases and `current` reports the last token issued.
pub async fn tokens_strictly_increase<T: TokenSource + ?Sized>(source: &T) {
    let r = resource("tokens-increase");
    assert_eq!(source.current(&r).await.unwrap(), None, "fresh resource");
    let mut last = None;
    for _ in 0..20 {
        let token = source.next(&r).await.unwrap();
        assert!(Some(token) > last, "{token} after {last:?}");
        assert_eq!(source.current(&r).await.unwrap(), Some(token));
        last = Some(token);
    }
}

/// `advance_to` raises the counter to at least the floor and never lowers it. (A counter that
/// opens epochs may answer more than the floor when it had no counter yet: "at least".)
pub async fn advance_to_raises_and_never_lowers<T: TokenSource + ?Sized>(
    source: &T,
    caps: Capabilities,
) {
    let r = resource("tokens-advance");
    let t = |n| FencingToken::new(n).unwrap();
    let raised = source.advance_to(&r, t(100)).await.unwrap();
    assert!(raised >= t(100), "{raised}");
    assert_eq!(source.current(&r).await.unwrap(), Some(raised));
    let next = source.next(&r).await.unwrap();
    if caps.consecutive_tokens {
        assert_eq!(next, raised.next().unwrap());
    } else {
        assert!(next > raised, "{next} after {raised}");
    }
    assert_eq!(
        source.advance_to(&r, t(50)).await.unwrap(),
        next,
        "never lowered"
    );
    assert_eq!(source.current(&r).await.unwrap(), Some(next));
    let far = t(next.get() + 1_000_000);
    assert_eq!(
        source.advance_to(&r, far).await.unwrap(),
        far,
        "an existing counter is raised to the floor"
    );
    assert_eq!(source.next(&r).await.unwrap(), far.next().unwrap());
}

/// Counters of different resources do not affect each other: a floor raised on one leaves
/// the other's tokens below it.
pub async fn resources_have_independent_counters<T: TokenSource + ?Sized>(
    source: &T,
    caps: Capabilities,
) {
    let (a, b) = (resource("tokens-a"), resource("tokens-b"));
    let t = |n| FencingToken::new(n).unwrap();
    let at_a = source.advance_to(&a, t(40)).await.unwrap();
    let at_b = source.advance_to(&b, t(7)).await.unwrap();
    let next_b = source.next(&b).await.unwrap();
    let next_a = source.next(&a).await.unwrap();
    if caps.consecutive_tokens {
        assert_eq!(next_b, at_b.next().unwrap());
        assert_eq!(next_a, at_a.next().unwrap());
    } else {
        assert!(next_b > at_b && next_a > at_a);
    }
    assert_eq!(source.current(&b).await.unwrap(), Some(next_b));
    let far = t(next_a.max(next_b).get() + 1_000_000);
    source.advance_to(&a, far).await.unwrap();
    let after = source.next(&b).await.unwrap();
    assert!(after < far, "raising {a:?} to {far} moved {b:?} to {after}");
    assert!(source.next(&a).await.unwrap() > far);
}

/// At `i64::MAX` the source refuses to issue and stays where it was.
pub async fn exhaustion_is_an_error<T: TokenSource + ?Sized>(source: &T) {
    let r = resource("tokens-exhausted");
    source.next(&r).await.unwrap();
    source.advance_to(&r, FencingToken::MAX).await.unwrap();
    let err = source.next(&r).await.unwrap_err();
    assert!(matches!(err, Error::TokenExhausted { .. }), "{err:?}");
    assert_eq!(source.current(&r).await.unwrap(), Some(FencingToken::MAX));
}

/// Tokens issued concurrently to many tasks are all distinct.
pub async fn concurrent_next_never_repeats<T: TokenSource + 'static>(
    source: Arc<T>,
    caps: Capabilities,
) {
    if caps.serialises_concurrent_writes {
        race_for_tokens(source).await;
    } else {
        race_for_tokens(Arc::new(OneAtATime::new(source))).await;
    }
}

async fn race_for_tokens<T: TokenSource + 'static>(source: Arc<T>) {
    let r = resource("tokens-concurrent");
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (source, r) = (source.clone(), r.clone());
        tasks.spawn(async move {
            let mut mine = Vec::new();
            for _ in 0..25 {
                mine.push(source.next(&r).await.unwrap());
            }
            mine
        });
    }
    let mut all = BTreeSet::new();
    for mine in tasks.join_all().await {
        for token in mine {
            assert!(all.insert(token), "token {token} issued twice");
        }
    }
    assert_eq!(all.len(), 200);
    assert_eq!(source.current(&r).await.unwrap(), all.last().copied());
}
