//! Client sessions: logging in ([`login`], the password exchanges: [`password`]), the cancel requests that arrive on connections of
//! their own ([`cancel`]), the way from a first packet to a session ([`serve`]), and the
//! session itself ([`session`]): units of client messages ([`mod@unit`]) routed, forwarded
//! ([`forward`]), relayed ([`relay`]) and tracked ([`state`], starting from what the startup
//! packet asks for: [`startup`]; [`sequences`]; settings the scanner cannot read under:
//! [`unreadable`]; what `set_config` set, read back: [`mod@read_back`]; functions called
//! by OID: [`calls`]), with what sluice
//! sends ahead of them
//! ([`ahead`]), what it answers in their place ([`refuse`]) and what a batch without its end
//! owes ([`owed`]), the
//! results of statements prepared again checked against what their clients were told
//! ([`shapes`]), and what logins alike were told ([`welcomes`]).

mod ahead;
mod begin;
mod calls;
pub mod cancel;
pub mod client;
mod count;
mod exps;
mod flushed;
mod forward;
mod lease;
pub mod login;
mod long_texts;
mod names;
mod open;
mod owed;
pub mod password;
mod plain;
mod read_back;
mod refuse;
pub mod relay;
mod reports;
mod route;
mod ryw;
mod sequences;
pub mod session;
mod shapes;
mod startup;
pub mod state;
mod track;
pub mod unit;
mod unreadable;
mod waiting;
pub mod welcomes;

pub use open::serve;
