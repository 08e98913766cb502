//! Every trait is object safe, and `Box<dyn …>` / `Arc<dyn …>` satisfy the same generic
//! bounds as the concrete types, so a batch can hold different stores side by side.

use std::sync::Arc;

use fencing::{FenceFloor, FencedStore, Lease, MemoryLease, MemoryStore, TokenSource};
use fencing_core::adapter::{Clock, TokioClock};

fn lease<L: Lease>(_: &L) {}
fn tokens<T: TokenSource>(_: &T) {}
fn store<S: FencedStore>(_: &S) {}
fn floor<F: FenceFloor + ?Sized>(_: &F) {}
fn clock<C: Clock + ?Sized>(_: &C) {}

#[test]
fn boxed_and_shared_trait_objects_meet_generic_bounds() {
    let memory_lease = MemoryLease::new();
    lease(&memory_lease);
    lease(&(Box::new(memory_lease.clone()) as Box<dyn Lease>));
    lease(&(Arc::new(memory_lease.clone()) as Arc<dyn Lease>));

    let source = memory_lease.token_source().clone();
    tokens(&source);
    tokens(&(Box::new(source.clone()) as Box<dyn TokenSource>));
    tokens(&(Arc::new(source) as Arc<dyn TokenSource>));

    let memory_store = MemoryStore::new("refunds");
    store(&memory_store);
    store(&(Box::new(memory_store.clone()) as Box<dyn FencedStore>));
    store(&(Arc::new(memory_store.clone()) as Arc<dyn FencedStore>));

    floor(&memory_store as &dyn FenceFloor);
    clock(&TokioClock as &dyn Clock);
}
