//! The protocol's pure rules: how a store decides a fenced write, when a refusal means the
//! counter went backwards, how epochs keep a counter that loses its state from reissuing a
//! token. `fencing-model` checks this same code.
//!
//! Laid out bottom-up: a module imports only those of its own group or one above it here.

pub(crate) mod epoch;
pub(crate) mod history;
pub(crate) mod rules;
