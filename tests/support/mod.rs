//! Shared test support: the app-server client and the fake provider.
#![allow(dead_code)]

pub mod app;
pub mod fake_provider;
