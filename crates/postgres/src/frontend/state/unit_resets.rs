//! Which of a session's startup parameters a unit's `RESET`s left at the server's defaults,
//! statement by statement (see [`UnitResets`]).

use super::Change;
use crate::backend::conn::StartupSettings;

/// The startup parameters a unit's `RESET`s (`RESET ALL`, `DISCARD ALL`, `SET … TO DEFAULT`)
/// returned to the server's defaults so far, as its statements run in order. Pooled
/// connections start without the client's startup parameters, and PostgreSQL offers no
/// statement that sets what `RESET` returns to: the statements after such a `RESET` in the
/// same unit would run with the server's default where directly they have the startup value
/// (sluice sets it again only between units).
pub struct UnitResets<'a> {
    startup: &'a StartupSettings,
    /// A flag per entry of `startup` (empty until a `RESET` of one).
    reset: Vec<bool>,
}

/// The startup parameter a `RESET` of which may stand before statements that do not read it
/// by name (see [`crate::classify::reads_application_name`]): no other answer depends on
/// it, and clients (psql, libpq's and JDBC's) give it at every startup.
const APPLICATION_NAME: &str = "application_name";

impl<'a> UnitResets<'a> {
    /// None reset yet, of `startup`.
    pub(super) fn new(startup: &'a StartupSettings) -> Self {
        UnitResets {
            startup,
            reset: Vec::new(),
        }
    }

    /// The startup parameter `name` (lower case) is reset, if it is one.
    pub(super) fn reset(&mut self, name: &str) {
        if let Some(i) = self.startup.iter().position(|(s, _)| **s == *name) {
            self.reset.resize(self.startup.len(), false);
            self.reset[i] = true;
        }
    }

    /// Follows one change.
    pub fn apply(&mut self, change: &Change) {
        match change {
            Change::Reset(name) => self.reset(name),
            Change::ResetAll | Change::DiscardAll => self.reset = vec![true; self.startup.len()],
            Change::Set(name, _) | Change::SetLocal(name, _) => {
                if let Some(i) = self.startup.iter().position(|(s, _)| **s == **name) {
                    if let Some(flag) = self.reset.get_mut(i) {
                        *flag = false;
                    }
                }
            }
        }
    }

    /// A startup parameter the changes so far left at the server's default that a statement
    /// may read, if any: any of them but `application_name`, which only a statement that
    /// `names_it` reads (see [`crate::classify::reads_application_name`]).
    pub fn in_force(&self, names_it: impl FnOnce() -> bool) -> Option<&str> {
        let mut names_it = Some(names_it);
        self.reset
            .iter()
            .zip(self.startup.iter())
            .find(|(reset, (name, _))| {
                **reset && (**name != *APPLICATION_NAME || names_it.take().is_some_and(|f| f()))
            })
            .map(|(_, (name, _))| &**name)
    }
}
