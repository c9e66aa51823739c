//! Cross-crate integration and conformance tests of the bidi workspace.
//!
//! The tests live in `tests/`; this library only makes the README's code a doctest, so the
//! example users see first is compiled and run with the suite.

#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
