//! The router and the channels, end to end.

mod router;
mod telegram;
mod terminal;
#[cfg(feature = "web")]
mod web;
