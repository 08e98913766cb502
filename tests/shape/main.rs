//! Not scenarios but the workspace's shape, read from its source: no import circle in any
//! crate, no function outside tests past the length a reader can hold, a prelude that stays
//! small, a facade that re-exports the core's job-facing names and not its adapter surface.

mod changelog;
mod facade;
mod first_steps;
mod long_functions;
mod module_graph;
mod names;
mod prelude;
mod sources;
