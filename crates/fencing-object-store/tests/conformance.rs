//! The shared conformance suite against `object_store`'s in-memory backend (atomic, so the
//! suite's races run concurrently).

mod common;

use std::sync::Arc;

use fencing_object_store::ObjectStoreStore;
use fencing_testkit::conformance::Capabilities;
use object_store::memory::InMemory;
use object_store::path::Path;

fn store() -> ObjectStoreStore {
    ObjectStoreStore::new(Arc::new(InMemory::new()), Path::from("m_4471"))
}

fn caps() -> Capabilities {
    Capabilities::real_server()
}

common::conformance_suite!(store());
