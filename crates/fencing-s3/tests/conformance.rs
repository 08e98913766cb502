//! The shared conformance suite against S3 (the moto emulator), each test in a bucket of its
//! own, as the concrete type and as `Box`/`Arc<dyn …>`.

mod common;

use std::sync::Arc;

use fencing_core::{FencedStore, MemoryLease};
use fencing_testkit::Fencing;
use fencing_testkit::conformance::*;

/// One test per guarantee and form, each in a bucket of its own.
mod concrete {
    use super::*;

    fencing_testkit::store_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: common::store().await,
        caps: common::caps(),
    }
}

/// The store guarantees with each object the team's own JSON, fence and state as its fields.
mod json_codec {
    use super::*;

    fencing_testkit::store_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: common::json_store().await,
        caps: common::json_caps(),
    }
}

mod boxed {
    use super::*;

    fencing_testkit::store_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: Box::new(common::store().await) as Box<dyn FencedStore>,
        caps: common::caps(),
    }
}

mod shared {
    use super::*;

    fencing_testkit::store_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: Arc::new(common::store().await) as Arc<dyn FencedStore>,
        caps: common::caps(),
    }
}

#[tokio::test]
async fn paused_holder_is_fenced_by_the_object() {
    paused_holder_is_fenced(&MemoryLease::new(), &common::store().await, common::caps()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_increments_are_exact() {
    let report = fenced_increments(
        Arc::new(MemoryLease::new()),
        Arc::new(common::store().await),
        common::caps(),
        3,
        4,
        Fencing::On,
        23,
    )
    .await;
    assert_eq!(report.total, report.expected, "{report:?}");
}
