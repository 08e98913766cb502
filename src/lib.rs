#![doc = include_str!("../README.md")]
//!
//! This facade re-exports [`fencing_core`]; store adapters join it behind cargo features.

pub use fencing_core::*;
