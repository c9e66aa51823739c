//! Turn-aware agents: a [`BidiFlow`] whose function gets a [`Session`] from a pluggable store
//! and a [`Responder`] whose [`end_turn`](Responder::end_turn) ends the caller's
//! [`responses()`](bidi_core::Connection::responses).
//!
//! ```
//! use bidi_agent::{Agent, AgentInit, AgentResult, Responder};
//! use bidi_core::{ActionContext, BoxError, Inbound};
//! use bidi_session::Session;
//! use futures_util::StreamExt;
//!
//! /// Remembers every line it was told.
//! async fn notes(
//!     _ctx: ActionContext,
//!     session: Session<Vec<String>>,
//!     mut inbound: Inbound<String>,
//!     out: Responder<String>,
//! ) -> Result<AgentResult<usize>, BoxError> {
//!     while let Some(line) = inbound.recv().await {
//!         let count = session.update(|lines| { lines.push(line.clone()); lines.len() }).await?;
//!         out.send(format!("noted ({count} so far)")).await?;
//!         out.end_turn().await?;
//!     }
//!     Ok(AgentResult::new(session.state().len()))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let agent = Agent::builder("notes").build(notes); // no store given: bounded, in memory
//!
//! let mut conn = agent.connect(AgentInit::new().session_id("s-1"));
//! conn.send("buy milk".into()).await?;
//! while let Some(chunk) = conn.responses().next().await {
//!     println!("{}", chunk?);
//! }
//! conn.close();
//! let out = conn.output().await?;
//! assert_eq!((out.session_id.as_str(), out.output), ("s-1", 1));
//!
//! // A later connection with the same id resumes the session.
//! let mut conn = agent.connect(AgentInit::new().session_id("s-1"));
//! conn.send("call mum".into()).await?;
//! assert_eq!(conn.responses().next().await.unwrap()?, "noted (2 so far)");
//! # Ok(())
//! # }
//! ```
//!
//! # Sessions
//!
//! [`AgentInit`] picks the connection's session. [`AgentInit::session_id`] names it: if it
//! exists it is resumed (the init state is ignored), if not it is created from
//! [`AgentInit::init`] (or `State::default()`). [`AgentInit::resume`] names a session that must
//! exist: a missing one fails the connection with
//! [`StoreError::NotFound`](bidi_session::StoreError::NotFound). Without an id a new session
//! gets a fresh UUID. The session is opened before the connection takes any input, so a store
//! that fails fails the first `send` with the store's error. The output, [`AgentOutput`],
//! carries the session id, the function's output, the final state and the artifacts.
//!
//! Sessions live in the store given to [`AgentBuilder::store`]. Without one, they live in a
//! bounded memory store of the agent's own: the latest version of at most 1024 sessions, the
//! least recently used dropped first, nothing kept past the process. Give a
//! `bidi_session::SqliteStore` (bidi-session's feature `sqlite`, on by default) to keep them.
//!
//! A connection whose options carry a [`Scope`]
//! (`ConnectOptions::new().extension(Scope::new("alice"))`) has its session opened within that
//! scope and the agent, in [`Scope::sessions`]: its session ids name sessions of that scope and
//! agent only, so a connection of another scope (or of none) can neither read nor resume them,
//! another agent sharing the store never takes them for its own, and the same id in two scopes
//! is two sessions. The output's session id is the id the
//! connection used, without the scope. A transport that knows who its peer is attaches the
//! peer's identity as each connection's scope.
//!
//! # Tokio
//!
//! Agents run on a tokio runtime with its time driver (`#[tokio::main]`, or a runtime built
//! with `enable_all()`): each connection is a task, a cancelled one gets a grace period, and
//! [`Session::update`] waits between retries. For `#[tokio::main]` as in the examples, your
//! `Cargo.toml` needs:
//!
//! ```toml
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! # Feature flags
//!
//! `bidi-agent` has no optional features.
//!
//! `bidi-agent` depends on `bidi-session` without its default feature `sqlite`: a program that
//! keeps sessions in `bidi_session::SqliteStore` depends on `bidi-session` itself (default
//! features), and one that does not compiles no SQLite.
//!
//! # Contract
//!
//! The rules this crate keeps, for the crates built on it (`bidi-llm`, the protocol crates)
//! and for anyone extending it. They are numbered so that reviews and other crates' docs can
//! point at them; a change to the crate keeps every one, or says here which it changes. The
//! rules of the sessions themselves (S1–S5) are `bidi-session`'s.
//!
//! - **A1** [`Agent<State, In, Out, Stream>`](Agent) is a [`BidiFlow`] whose function (a
//!   `bidi_core::ActionFn` over a [`Session<State>`](Session) and a [`Responder<Stream>`])
//!   returns [`AgentResult`] `{output, artifacts}`.
//! - **A2** [`AgentInit`] opens the connection's session as [Sessions](#sessions) says, before
//!   any input is taken: [`session_id`](AgentInit::session_id) resumes or creates,
//!   [`resume`](AgentInit::resume) requires the session (JSON `{"sessionId": .., "resume":
//!   true}`), no id creates one under a fresh id (`bidi_session::new_id`); a store that fails
//!   makes the first `send` fail with `SendError::Failed` carrying the store's error. The
//!   output is [`AgentOutput`] `{sessionId, snapshotId, output, state, artifacts}` (camelCase
//!   in JSON), `snapshotId` being the session's head when the function returned.
//!   - Without a store, an agent keeps at most 1,024 sessions in memory, and the latest 256
//!     snapshots of each (past them a session keeps its head alone, written whole), the least
//!     recently used dropped first; [`AgentBuilder::store`] is the one way to give one.
//!   - A connection whose `ActionContext` carries a [`Scope`] (an identity) opens its session
//!     in `bidi_session::Scoped`: the store seen through length-prefixed keys of the scope and
//!     the agent's name ([`Scope::sessions`]), so a session id names a session of that scope
//!     and agent only, and two agents sharing a store never adopt each other's sessions.
//!     Transports give every untrusted caller a scope.
//!   - Session ids are at most [`MAX_SESSION_ID_BYTES`] (256) bytes, without control
//!     characters ([`InitError`]), and `AgentInit` refuses unknown fields.
//!   - [`snapshot`](AgentInit::snapshot) (JSON `snapshotId`) opens the session at that
//!     snapshot, within the caller's scope: the connection's first write branches from it.
//!     With a session id too, the snapshot must be one of that session's
//!     ([`InitError::SnapshotOfAnotherSession`] otherwise); a snapshot outside the caller's
//!     scope is a `NotFound` of kind `snapshot`.
//!   - [`AgentBuilder::client_managed`] makes an agent that keeps no sessions (Genkit's
//!     client-managed state): each connection starts from its init's state, under its session
//!     id or a fresh one, in a memory store of the connection's own that goes with it, and the
//!     client takes the state back from [`AgentOutput`]. An init that names a session to
//!     `resume`, or a `snapshot`, is refused ([`InitError::ClientManaged`]).
//!   - A stored state that does not decode into the agent's `State` is
//!     `StoreError::InvalidState` (HTTP 409 on the HTTP wires), never overwritten.
//! - **A3** [`Responder::send`], [`send_batch`](Responder::send_batch) and
//!   [`end_turn`](Responder::end_turn): the consumer's `responses()` ends at `end_turn`.
//! - **A4** Agents register as `/agent/{name}` (`ActionType::AGENT`), with their state's
//!   schema in the descriptor's metadata (`agent.stateSchema`).

#![doc(test(attr(deny(warnings))))]

mod agent;
mod refusal;
mod responder;
mod scope;

pub use agent::{
    Agent, AgentBuilder, AgentInit, AgentOutput, AgentResult, InitError, MAX_SESSION_ID_BYTES,
};
pub use refusal::Refusal;
pub use responder::{Artifact, Responder};
pub use scope::Scope;

pub use bidi_flow::BidiFlow;
pub use bidi_session::Session;
