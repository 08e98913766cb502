//! Test support for this repository only (not published): where the tests find their
//! servers.
//!
//! * [`aws`]: the pieces every test of an AWS adapter builds its client from.
//! * [`bench`](mod@bench): timing variants against a baseline in one run, for the `benches/` targets.
//! * [`object_stores`]: `object_store` backends on the emulators (Azure on Azurite, S3 on
//!   moto), each in a fresh container or bucket.
//! * [`relay`]: a TCP relay in front of one server that a test partitions (every packet held,
//!   nothing refused) and heals, or moves to another server.
//! * [`services`]: PostgreSQL, Redis, the AWS emulator, etcd and Azurite, found in the
//!   environment, on their standard local ports, started from local binaries, or in
//!   containers.
//!
//! The conformance suite an adapter author needs lives in `fencing-testkit`, and the
//! settlement simulation the example and the scenarios run in `fencing-simulation`; neither
//! depends on this.

pub mod aws;
pub mod bench;
pub mod object_stores;
pub mod relay;
pub mod services;
