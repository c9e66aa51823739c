//! Cross-crate integration and conformance tests of the bidi workspace.
//!
//! The tests live in `tests/`. This library holds what they share: [`browser`] loads pages in a headless Chromium, [`node`] installs and runs the
//! Node peer clients of `tests/node` and `tests/acp`, [`python`] makes the virtual environments of
//! the Python peers of `tests/acp` and `tests/a2a`, [`flood`] writes to a process that does not read, [`genkit`] runs Genkit's own CLI (`tests/genkit-cli`) and the programs it drives, [`http`] serves a `bidi_http::Server` on a free port, [`rng`] seeds the property tests, [`tools`] has the tools of the front-end tests, [`webhook`] receives A2A's push notifications. It also makes the README's code a doctest, so the example
//! users see first is compiled and run with the suite.

pub mod browser;
pub mod flood;
pub mod genkit;
pub mod http;
pub mod node;
pub mod python;
pub mod rng;
pub mod tools;
pub mod webhook;

#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
