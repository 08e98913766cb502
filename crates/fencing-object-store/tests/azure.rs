//! Azure Blob Storage through `object_store`'s Azure backend, on Azurite (the emulator, a
//! server of the test binary's own unless `$FENCING_AZURITE_ENDPOINT` names one): the whole
//! conformance suite, as the concrete type and as `Box`/`Arc<dyn …>`, then the checks every
//! backend must pass (`common`), each test in a container of its own.

mod common;

use std::sync::Arc;

use fencing_object_store::ObjectStoreStore;
use fencing_test_support::object_stores;
use fencing_testkit::conformance::Capabilities;
use object_store::ObjectStore;
use object_store::path::Path;

fn backend() -> Arc<dyn ObjectStore> {
    object_stores::azurite_container()
}

fn store() -> ObjectStoreStore {
    ObjectStoreStore::new(backend(), Path::from("m_4471"))
}

/// Azurite checks a condition and stores the blob in one step: the suite's races run
/// concurrently.
fn caps() -> Capabilities {
    Capabilities::real_server()
}

common::conformance_suite!(store());

#[tokio::test]
async fn a_byte_identical_newer_write_changes_the_blob() {
    common::a_byte_identical_newer_write_changes_the_object(backend()).await;
}

#[tokio::test]
async fn a_delete_leaves_a_tombstone_that_keeps_the_fence() {
    common::a_delete_leaves_a_tombstone_that_keeps_the_fence(backend()).await;
}

#[tokio::test]
async fn a_blob_that_is_not_an_envelope_is_never_written_over() {
    common::an_object_that_is_not_an_envelope_is_never_written_over(backend()).await;
}

#[tokio::test]
async fn a_key_stays_one_path_segment_under_the_prefix() {
    common::a_key_stays_one_path_segment_under_the_prefix(backend()).await;
}

#[tokio::test]
async fn the_backend_refuses_the_puts_it_must() {
    common::the_backend_refuses_the_puts_it_must(backend()).await;
}
