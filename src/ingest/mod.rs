//! Ingest edges: decode what transports carry into `model` events. Pure: no I/O, no clock
//! (`now` is passed in), so every transport shares one tested implementation.

pub mod records;
pub mod stripe;
