//! Shared test support: the fake provider server.
pub mod fake_provider;
