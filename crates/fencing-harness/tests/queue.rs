//! The job queue on the emulator, as the workers use it: a received message is hidden from
//! every other receiver while it is extended, comes back once it is not, and is gone once
//! deleted.

use std::time::Duration;

use fencing_harness::queue::{self, JobQueue, QueueDepth};
use fencing_test_support::services;

async fn fresh_queue() -> JobQueue {
    let name = fencing_testkit::unique_name("jobs");
    JobQueue::create(
        queue::client(&services::aws_endpoint()),
        &name,
        "settle m_4471",
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn a_message_not_extended_comes_back_and_a_deleted_one_does_not() {
    // Hidden for 3 s: the two looks at it "in flight" fall inside that however slow the
    // machine, and the wait past it is what a stalled worker's would be.
    const HIDDEN_SECS: i32 = 3;
    let queue = fresh_queue().await;
    let first = queue.receive(HIDDEN_SECS).await.unwrap().expect("the job");
    assert_eq!(first.receives, 1);
    assert_eq!(
        queue.receive(1).await.unwrap(),
        None,
        "hidden while in flight"
    );
    assert_eq!(
        queue.depth().await.unwrap(),
        QueueDepth {
            visible: 0,
            in_flight: 1
        }
    );

    // The worker that received it stalls: nothing extends it.
    tokio::time::sleep(Duration::from_secs(HIDDEN_SECS as u64) + Duration::from_millis(500)).await;
    let again = queue.receive(1).await.unwrap().expect("redelivered");
    assert_eq!(again.id, first.id);
    assert_eq!(again.receives, 2);
    assert_ne!(again.receipt_handle, first.receipt_handle);

    queue.delete(&again).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(queue.receive(1).await.unwrap(), None);
    assert_eq!(
        queue.depth().await.unwrap(),
        QueueDepth {
            visible: 0,
            in_flight: 0
        }
    );
}

#[tokio::test]
async fn a_message_kept_invisible_is_not_redelivered_while_its_worker_lives() {
    // Hidden for 3 s at a time, extended every 300 ms: a keeper must stall for 2.7 s (a busy
    // machine, the emulator slow to answer) before the message shows, so "still hidden"
    // does not depend on how quick the machine is.
    const HIDDEN_SECS: i32 = 3;
    let queue = fresh_queue().await;
    let message = queue.receive(HIDDEN_SECS).await.unwrap().expect("the job");
    let keeper = queue::VisibilityKeeper::start(
        queue.clone(),
        message.clone(),
        HIDDEN_SECS,
        Duration::from_millis(300),
    );
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            queue.receive(1).await.unwrap(),
            None,
            "extended: still hidden"
        );
    }
    drop(keeper);
    // Past the last extension, and one the emulator may still have been answering.
    tokio::time::sleep(Duration::from_secs(HIDDEN_SECS as u64 + 1)).await;
    let again = queue
        .receive(1)
        .await
        .unwrap()
        .expect("redelivered once not extended");
    assert_eq!((again.id, again.receives), (message.id, 2));
}
