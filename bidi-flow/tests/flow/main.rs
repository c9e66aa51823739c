//! bidi-flow: tracing (F1, F2), the registry and its descriptors (F3), JSON connections (F4) and
//! their halves, the transport seam (T1–T3).

#![allow(clippy::unwrap_used)]

mod halves;
mod json;
mod registry;
mod support;
mod tracing_spans;
