//! S3 through `object_store`'s S3 backend with ETag matching (`S3ConditionalPut::ETagMatch`),
//! on the moto emulator: the whole conformance suite, then the checks every backend must pass
//! (`common`), each test in a bucket of its own. Moto checks a condition and stores the object
//! in separate steps, so the suite's races send their requests one at a time (`OneAtATime`).

mod common;

use std::sync::Arc;

use fencing_object_store::ObjectStoreStore;
use fencing_test_support::{aws, object_stores};
use fencing_testkit::conformance::Capabilities;
use object_store::ObjectStore;
use object_store::path::Path;

async fn backend() -> Arc<dyn ObjectStore> {
    object_stores::s3_bucket().await
}

async fn store() -> ObjectStoreStore {
    ObjectStoreStore::new(backend().await, Path::from("m_4471"))
}

fn caps() -> Capabilities {
    aws::emulator_capabilities()
}

common::conformance_suite!(store().await);

#[tokio::test]
async fn a_byte_identical_newer_write_changes_the_object() {
    common::a_byte_identical_newer_write_changes_the_object(backend().await).await;
}

#[tokio::test]
async fn a_delete_leaves_a_tombstone_that_keeps_the_fence() {
    common::a_delete_leaves_a_tombstone_that_keeps_the_fence(backend().await).await;
}

#[tokio::test]
async fn an_object_that_is_not_an_envelope_is_never_written_over() {
    common::an_object_that_is_not_an_envelope_is_never_written_over(backend().await).await;
}

#[tokio::test]
async fn a_key_stays_one_path_segment_under_the_prefix() {
    common::a_key_stays_one_path_segment_under_the_prefix(backend().await).await;
}

#[tokio::test]
async fn the_backend_refuses_the_puts_it_must() {
    common::the_backend_refuses_the_puts_it_must(backend().await).await;
}
