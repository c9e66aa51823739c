//! The bidi-core contract, rule by rule (C1–C15, in the Contract section of the crate docs).
//! Each test runs on a multi-thread runtime and on a current-thread runtime unless it needs a
//! paused clock.

#![allow(clippy::unwrap_used)]

#[macro_use]
mod support;

mod cancel;
mod driver;
mod errors;
mod grace;
mod in_place;
mod lifecycle;
mod rendezvous;
mod stress;
mod turns;
