//! Not scenarios but the workspace's shape, read from its source: no import circle in any
//! crate, no function outside tests past the length a reader can hold, a prelude that stays
//! small.

mod long_functions;
mod module_graph;
mod prelude;
mod sources;
