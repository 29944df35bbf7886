//! Client sessions: logging in ([`login`]), the cancel requests that arrive on connections of
//! their own ([`cancel`]), and the session itself ([`session`]): units of client messages
//! routed, relayed ([`relay`]) and tracked ([`state`]).

pub mod cancel;
pub mod client;
mod count;
pub mod login;
pub mod relay;
mod route;
pub mod session;
pub mod state;
pub mod unit;
