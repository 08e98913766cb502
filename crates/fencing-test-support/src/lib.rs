//! Test support for this repository only (not published): where the tests find their
//! servers, and the refund settlement as a deterministic simulation.
//!
//! * [`aws`]: the pieces every test of an AWS adapter builds its client from.
//! * [`bench`](mod@bench): timing variants against a baseline in one run, for the `benches/` targets.
//! * [`services`]: PostgreSQL, Redis and the AWS emulator, found in the environment, on their
//!   standard local ports, started from local binaries, or in containers.
//! * [`settlement`]: merchant `m_4471`'s 1,200 refunds, workers that pause, a payment gateway
//!   with or without idempotency keys, and a checker that counts what went wrong.
//!
//! The conformance suite an adapter author needs lives in `fencing-testkit`, which depends on
//! none of this.

pub mod aws;
pub mod bench;
pub mod services;
pub mod settlement;
