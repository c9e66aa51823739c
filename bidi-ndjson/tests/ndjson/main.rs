//! NDJSON agents as real subprocesses (bash and Python): rounds with handlers, failures and
//! limits, the agent as a flow.

#![allow(clippy::unwrap_used)]

mod concerto;
mod failures;
mod flow;
mod recovery;
mod rounds;
mod support;
