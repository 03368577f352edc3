//! The audit core, tested as data: scenarios of events, a contract, `now`, and the verdict the
//! notes in shared/seeds expect. No I/O, no sleeps: time is an input.

mod adversarial;
mod attribution;
mod edges;
mod escalation;
mod properties;
mod seed_matrix;
mod settling;
mod support;
mod tidy;
