//! bidi-flow: tracing (F1, F2), the registry and its descriptors (F3), JSON connections (F4).

#![allow(clippy::unwrap_used)]

mod json;
mod registry;
mod support;
mod tracing_spans;
