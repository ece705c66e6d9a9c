//! The outbound side, at the bottom of the house: everything that leaves the host toward
//! the client. The bounded outbox and the writer thread that alone owns the output
//! ([`transport`]), the bytes of a frame ([`frames`]), notifications (`Outbox::notify`), the answer to one request
//! ([`Responder`]), and deferred content, large images sent by reference ([`deferred`]).
//! It knows no session, engine or feature: they hand it frames. Spec `app-server.md` §1
//! (framing), §4 (errors), §5.8 (deferred content); DESIGN.md (threads).

pub mod deferred;
pub mod frames;
mod notify;
mod park;
pub mod responder;
pub mod transport;

pub use responder::Responder;
