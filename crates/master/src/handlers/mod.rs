//! The request handlers, by concern. Each is an `impl Master` block whose functions the
//! tables in [`crate::dispatch`] name.

pub mod auth;
pub mod fileserver;
pub mod minion;
pub mod peer;
pub mod publish;
pub mod runner;
pub mod wheel;
