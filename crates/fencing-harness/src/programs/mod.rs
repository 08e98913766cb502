//! The programs of the executable, one module each.

pub(crate) mod campaign;
pub(crate) mod gateway;
pub(crate) mod scale;
pub(crate) mod scale_worker;
pub(crate) mod worker;
