//! etcd for `fencing`: a lease and a token source on a consensus cluster, whose fencing
//! tokens come from etcd's revision.
//!
//! * [`EtcdLease`] takes a resource with an etcd lease of the TTL and one transaction that
//!   creates the resource's lock key (bound to that lease) only if it does not exist and
//!   issues the token in the same commit. Extend keeps the lease alive; release deletes the
//!   key only if it is still this owner's, then revokes the lease.
//! * [`EtcdTokenSource`] issues tokens for a job that takes its lease elsewhere: each token is
//!   the revision of the write that issued it (or a floor plus one, where a floor set by
//!   `advance_to` is higher).
//! * [`EtcdKeys`] lays out a resource's two keys.
//!
//! Both take the caller's `etcd_client::Client` (connected to every member, so a member's
//! loss moves requests to the others).
//!
//! Why a revision is a fencing token, and what it needs: etcd's revision rises with every
//! write to the cluster and a majority of members must agree on each, so no healthy cluster
//! issues one twice, and the loss of a minority of members loses none. Unlike a counter key, a
//! revision cannot be deleted. What breaks it is a restore from a snapshot that does not raise
//! the revisions past those already issued (etcd 3.5's `etcdutl snapshot restore
//! --bump-revision`; etcd 3.4 has no such flag): the stores' fences then refuse the repeated
//! tokens as a regression, and [`fencing_core::seed_from_floors`] raises this source's floor
//! past them.
//!
//! A lease alone is not safe, however it is kept alive: a paused process cannot renew, and
//! when it resumes it does not know time passed. Present the guard's token on every protected
//! write; the store's fence is what refuses the paused holder.

mod error;
mod keys;
mod lease;
mod tokens;

pub use keys::EtcdKeys;
pub use lease::EtcdLease;
pub use tokens::EtcdTokenSource;
