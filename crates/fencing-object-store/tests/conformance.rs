//! The shared conformance suite against `object_store`'s in-memory backend (atomic, so the
//! suite's races run concurrently), as the concrete type and as `Box`/`Arc<dyn …>`.

use std::sync::Arc;

use fencing_core::{FencedStore, MemoryLease};
use fencing_object_store::FencedObjectStore;
use fencing_testkit::Fencing;
use fencing_testkit::conformance::*;
use object_store::memory::InMemory;
use object_store::path::Path;

fn store() -> FencedObjectStore {
    FencedObjectStore::new(Arc::new(InMemory::new()), Path::from("m_4471"))
}

fn caps() -> Capabilities {
    Capabilities::real_server()
}

mod concrete {
    use super::*;

    fencing_testkit::store_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: store(),
        caps: caps(),
    }
}

mod boxed {
    use super::*;

    fencing_testkit::store_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: Box::new(store()) as Box<dyn FencedStore>,
        caps: caps(),
    }
}

mod shared {
    use super::*;

    fencing_testkit::store_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: Arc::new(store()) as Arc<dyn FencedStore>,
        caps: caps(),
    }
}

#[tokio::test]
async fn paused_holder_is_fenced_by_the_object() {
    paused_holder_is_fenced(&MemoryLease::new(), &store(), caps()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_increments_are_exact() {
    let report = fenced_increments(
        Arc::new(MemoryLease::new()),
        Arc::new(store()),
        caps(),
        3,
        4,
        Fencing::On,
        23,
    )
    .await;
    assert_eq!(report.total, report.expected, "{report:?}");
}
