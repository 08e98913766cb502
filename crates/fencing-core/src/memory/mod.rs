//! In-memory reference implementations of every contract: thread-safe, real, and always
//! compiled. They back the settlement example's default and the fast deterministic tests.

mod epochs;
mod lease;
mod store;
mod tokens;
mod versioned;

pub use epochs::MemoryEpochSource;
pub use lease::MemoryLease;
pub use store::MemoryStore;
pub use tokens::MemoryTokenSource;
pub use versioned::MemoryVersionedStore;

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, carrying on past poisoning: every critical section here leaves its map
/// consistent before anything that could panic.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
