//! A job written against 0.1's names still compiles and runs on 0.2: every name it uses that
//! moved is a deprecated alias whose warning names the replacement (allowed here, where the old
//! names are the point; `src/since_0_1.rs`'s doc tests show each one warns).

#![allow(deprecated)]

use fencing::prelude::*;

/// 0.1's worked example, as a job wrote it then: names from 0.1's prelude (`State`,
/// `FencedWrite`, `Written`, `RetryPolicy`, `acquire`, `Fence`) and 0.1's method names
/// (`guard.fence()`, `batch.fence()`, `batch.write(…)`, `lease.tokens()`).
#[tokio::test]
async fn a_job_written_against_0_1s_names_settles_and_a_stale_holder_is_still_refused()
-> fencing::Result<()> {
    let lease = MemoryLease::new();
    let refunds = MemoryStore::new("refunds");
    let r_815 = RecordKey::new("r_815")?;
    let pending: State = State::new("pending")?;
    refunds.insert_unfenced(r_815.clone(), Some(pending), Vec::new());
    let resource = ResourceName::new("settle:m_4471")?;
    let ttl = Ttl::from_millis(50)?;

    let stale = acquire(&lease, &resource, ttl, &RetryPolicy::default()).await?;
    let stale_fence: Fence = stale.fence();
    let claim: FencedWrite = Lifecycle::default().claim();
    let written: Written = stale_fence.write(&refunds, &r_815, &claim).await?;
    assert_eq!(written.previous_fence, None);

    tokio::time::sleep(std::time::Duration::from_millis(80)).await;
    let guard = acquire(&lease, &resource, ttl, &RetryPolicy::default()).await?;
    assert!(guard.token() > stale.token());
    assert_eq!(
        lease.tokens().current(&resource).await?,
        Some(guard.token()),
        "0.1's `tokens()` answers the lease's source"
    );
    let batch = FencedBatch::new(
        std::sync::Arc::new(lease.clone()),
        guard,
        [std::sync::Arc::new(refunds.clone()) as std::sync::Arc<dyn FencedStore>],
    )?;
    let fence: Fence = batch.fence();
    batch.write(&refunds, &r_815, &claim).await?;
    fence
        .write(&refunds, &r_815, &Lifecycle::default().confirm())
        .await?;

    let refused = stale_fence
        .write(&refunds, &r_815, &Lifecycle::default().confirm())
        .await;
    assert!(
        matches!(refused, Err(fencing::Error::Fenced { .. })),
        "{refused:?}"
    );
    batch.finish().await.map(drop)
}
