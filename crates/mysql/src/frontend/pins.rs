//! Why a session is pinned to its backend connection.

use std::fmt;

/// A set of pin reasons.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pins(pub u32);

macro_rules! pins {
    ($($(#[$m:meta])* $name:ident = $bit:expr, $label:expr, $full:expr;)*) => {
        impl Pins {
            $($(#[$m])* pub const $name: Pins = Pins(1 << $bit);)*
            const LABELS: &'static [(Pins, &'static str)] = &[$((Pins::$name, $label)),*];
            /// Reasons that keep every statement on the pinned connection.
            pub const FULL: Pins = Pins(0 $(| if $full { 1 << $bit } else { 0 })*);
        }
    };
}

pins! {
    /// An open transaction (explicit, or implicit with autocommit=0).
    TRANSACTION = 0, "transaction", true;
    /// LOCK TABLES or FLUSH TABLES WITH READ LOCK.
    LOCK_TABLES = 1, "lock_tables", true;
    /// Temporary tables exist.
    TEMP_TABLES = 2, "temporary_tables", true;
    /// User variables were assigned (statements that use them run here).
    USER_VARIABLES = 3, "user_variables", false;
    /// GET_LOCK was called (lock functions run here).
    USER_LOCKS = 4, "user_locks", false;
    /// Text-protocol prepared statements exist (EXECUTE/DEALLOCATE run here).
    TEXT_PREPARE = 5, "text_prepare", false;
    /// A binary-protocol cursor is open.
    CURSOR = 6, "cursor", true;
    /// Long data was sent for a prepared statement that has not been executed yet.
    LONG_DATA = 7, "long_data", true;
    /// SET TRANSACTION applies to the next transaction.
    NEXT_TRANSACTION = 8, "next_transaction_characteristics", true;
    /// The previous statement's warnings or found rows may be asked for next.
    PREVIOUS_STATEMENT = 9, "previous_statement", false;
    /// An XA transaction.
    XA = 10, "xa_transaction", true;
    /// State the server does not report (HANDLER, SET ROLE, ...).
    UNTRACKED = 11, "untracked_state", true;
}

impl Pins {
    /// No reason.
    pub const NONE: Pins = Pins(0);

    /// True if no reason is set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// True if any reason of `other` is set.
    pub fn has(self, other: Pins) -> bool {
        self.0 & other.0 != 0
    }
    /// Sets or clears `other`.
    pub fn set(&mut self, other: Pins, on: bool) {
        if on {
            self.0 |= other.0;
        } else {
            self.0 &= !other.0;
        }
    }
    /// True if every statement must use the pinned connection.
    pub fn is_full(self) -> bool {
        self.has(Pins::FULL)
    }
    /// Reasons that survive the end of a session only through a connection reset.
    pub fn needs_reset(self) -> bool {
        self.has(Pins(
            Pins::LOCK_TABLES.0
                | Pins::TEMP_TABLES.0
                | Pins::USER_VARIABLES.0
                | Pins::USER_LOCKS.0
                | Pins::TEXT_PREPARE.0
                | Pins::CURSOR.0
                | Pins::LONG_DATA.0
                | Pins::NEXT_TRANSACTION.0
                | Pins::XA.0
                | Pins::UNTRACKED.0
                | Pins::TRANSACTION.0,
        ))
    }
    /// The reasons' names.
    pub fn labels(self) -> Vec<&'static str> {
        Pins::LABELS
            .iter()
            .filter(|(p, _)| self.has(*p))
            .map(|(_, l)| *l)
            .collect()
    }

    /// Names the reasons in `bits` (what the session registry shows).
    pub fn labels_of(bits: u32) -> Vec<&'static str> {
        Pins(bits).labels()
    }
}

impl fmt::Display for Pins {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&self.labels().join(","))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_fullness() {
        let mut p = Pins::NONE;
        p.set(Pins::USER_VARIABLES, true);
        assert!(!p.is_full());
        p.set(Pins::TRANSACTION, true);
        assert!(p.is_full());
        assert_eq!(p.to_string(), "transaction,user_variables");
        p.set(Pins::TRANSACTION, false);
        assert_eq!(p.labels(), vec!["user_variables"]);
    }
}
