//! The master's `_auth` decision (`salt/master.py:AuthFuncs._auth_impl_sync`), as a pure
//! function of the stored key, the presented key and the acceptance policy.
//!
//! Invariants (Salt 3008 behaviour):
//! - A key presented for an id whose accepted (or pending) key differs is **denied**: the new
//!   key is recorded in `minions_denied` and the minion gets `ret: False`. The stored key is
//!   never replaced (except in `open_mode`).
//! - A rejected id is refused whatever key it presents.
//! - Only [`Decision::Accept`] leads to an encrypted reply carrying the AES and session keys.

use crate::pem::clean_key;

/// The state of a key in the master's pki directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyState {
    /// `minions/`.
    Accepted,
    /// `minions_pre/`.
    Pending,
    /// `minions_rejected/`.
    Rejected,
    /// `minions_denied/`.
    Denied,
}

impl KeyState {
    /// The pki sub-directory holding keys in this state.
    pub fn dir_name(self) -> &'static str {
        match self {
            Self::Accepted => "minions",
            Self::Pending => "minions_pre",
            Self::Rejected => "minions_rejected",
            Self::Denied => "minions_denied",
        }
    }
}

/// What the master knows about acceptance for this request (computed by the caller from
/// `open_mode`, `auto_accept`, `autosign_file`, `autoreject_file`, `max_minions`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Policy {
    /// `open_mode: True`: accept anything.
    pub open_mode: bool,
    /// The id is auto-signed (`auto_accept`, autosign file or grains).
    pub autosign: bool,
    /// The id matches `autoreject_file`.
    pub autoreject: bool,
    /// `max_minions` is reached and this id is not connected.
    pub full: bool,
}

/// Where a key must be written as a consequence of a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// Nothing changes on disk.
    Nothing,
    /// Write the presented key with this state (moving it from any other state).
    Key(KeyState),
    /// Move the id's stored key, content unchanged, to this state (autoreject of a
    /// pending key: Salt rejects what it has, not what was presented).
    MoveStored(KeyState),
    /// Add the presented key to the denied keys of the id.
    AddDenied,
}

/// The outcome of an `_auth` request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Accept: reply with the keys. `store` says whether the key must be persisted first.
    Accept {
        /// Persistence needed before replying.
        store: Store,
    },
    /// Still pending (`ret: True`).
    Pend {
        /// Persistence needed (a new key is stored as pending).
        store: Store,
    },
    /// Refused because the id or its key is rejected (`ret: False`, event act `reject`).
    Reject {
        /// Persistence needed (autoreject stores the key as rejected).
        store: Store,
    },
    /// Refused because the key differs from the stored one (`ret: False`, act `denied`).
    Deny,
    /// `max_minions` reached (`ret: "full"`).
    Full,
}

impl Decision {
    /// The `act` field of the `salt/auth` event.
    pub fn act(self) -> &'static str {
        match self {
            Self::Accept { .. } => "accept",
            Self::Pend { .. } => "pend",
            Self::Reject { .. } => "reject",
            Self::Deny => "denied",
            Self::Full => "full",
        }
    }

    /// The `result` field of the `salt/auth` event.
    pub fn result(self) -> bool {
        matches!(self, Self::Accept { .. } | Self::Pend { .. })
    }

    /// What must be written to disk.
    pub fn store(self) -> Store {
        match self {
            Self::Accept { store } | Self::Pend { store } | Self::Reject { store } => store,
            Self::Deny => Store::AddDenied,
            Self::Full => Store::Nothing,
        }
    }
}

/// Decides an `_auth` request. `stored` is the id's key in the keys bank (accepted, pending
/// or rejected — denied keys are not "the" key of an id) with its PEM text.
pub fn decide(stored: Option<(KeyState, &str)>, presented_pub: &str, policy: Policy) -> Decision {
    if policy.full {
        return Decision::Full;
    }
    let same = |k: &str| clean_key(k) == clean_key(presented_pub);
    if policy.open_mode {
        // Salt rewrites the key only when the stripped text differs, whatever its state.
        let store = match stored {
            Some((_, k)) if k.trim() == presented_pub.trim() => Store::Nothing,
            _ => Store::Key(KeyState::Accepted),
        };
        return Decision::Accept { store };
    }
    match stored {
        Some((KeyState::Rejected, _)) => Decision::Reject {
            store: Store::Nothing,
        },
        Some((KeyState::Accepted, k)) => {
            if same(k) {
                Decision::Accept {
                    store: Store::Nothing,
                }
            } else {
                Decision::Deny
            }
        }
        None | Some((KeyState::Denied, _)) => {
            if policy.autoreject {
                Decision::Reject {
                    store: Store::Key(KeyState::Rejected),
                }
            } else if !policy.autosign {
                Decision::Pend {
                    store: Store::Key(KeyState::Pending),
                }
            } else {
                Decision::Accept {
                    store: Store::Key(KeyState::Accepted),
                }
            }
        }
        Some((KeyState::Pending, k)) => {
            if policy.autoreject {
                Decision::Reject {
                    store: Store::MoveStored(KeyState::Rejected),
                }
            } else if !same(k) {
                Decision::Deny
            } else if !policy.autosign {
                Decision::Pend {
                    store: Store::Nothing,
                }
            } else {
                Decision::Accept {
                    store: Store::Key(KeyState::Accepted),
                }
            }
        }
    }
}

/// `salt.utils.verify.valid_id`: no `/`, `\`, NUL, and not `.`/`..`/empty.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && id != "." && id != ".." && !id.contains(['/', '\\', '\0'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use KeyState::*;

    const A: &str = "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----";
    const B: &str = "-----BEGIN PUBLIC KEY-----\nBBBB\n-----END PUBLIC KEY-----";
    const MANUAL: Policy = Policy {
        open_mode: false,
        autosign: false,
        autoreject: false,
        full: false,
    };
    const AUTO: Policy = Policy {
        open_mode: false,
        autosign: true,
        autoreject: false,
        full: false,
    };
    const REJECTING: Policy = Policy {
        open_mode: false,
        autosign: false,
        autoreject: true,
        full: false,
    };
    const OPEN: Policy = Policy {
        open_mode: true,
        autosign: false,
        autoreject: false,
        full: false,
    };

    macro_rules! case {
        ($name:ident: $stored:expr, $presented:expr, $policy:expr => $want:expr) => {
            #[test]
            fn $name() {
                assert_eq!(decide($stored, $presented, $policy), $want);
            }
        };
    }

    case!(new_key_goes_to_pending: None, A, MANUAL => Decision::Pend { store: Store::Key(Pending) });
    case!(new_key_is_accepted_with_auto_accept: None, A, AUTO => Decision::Accept { store: Store::Key(Accepted) });
    case!(new_key_matching_autoreject_is_rejected: None, A, REJECTING => Decision::Reject { store: Store::Key(Rejected) });
    case!(accepted_same_key_is_accepted: Some((Accepted, A)), A, MANUAL => Decision::Accept { store: Store::Nothing });
    case!(accepted_key_with_trailing_newline_still_matches: Some((Accepted, "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")), A, MANUAL => Decision::Accept { store: Store::Nothing });
    case!(changed_key_for_known_id_is_denied: Some((Accepted, A)), B, AUTO => Decision::Deny);
    case!(rejected_id_is_refused_even_with_auto_accept: Some((Rejected, A)), A, AUTO => Decision::Reject { store: Store::Nothing });
    case!(pending_same_key_stays_pending: Some((Pending, A)), A, MANUAL => Decision::Pend { store: Store::Nothing });
    case!(pending_changed_key_is_denied: Some((Pending, A)), B, MANUAL => Decision::Deny);
    case!(pending_key_is_accepted_once_autosigned: Some((Pending, A)), A, AUTO => Decision::Accept { store: Store::Key(Accepted) });
    case!(pending_key_matching_autoreject_is_rejected: Some((Pending, A)), B, REJECTING => Decision::Reject { store: Store::MoveStored(Rejected) });
    case!(open_mode_keeps_a_pending_key_that_did_not_change: Some((Pending, A)), A, OPEN => Decision::Accept { store: Store::Nothing });
    case!(open_mode_accepts_a_changed_key_and_stores_it: Some((Accepted, A)), B, OPEN => Decision::Accept { store: Store::Key(Accepted) });
    case!(full_master_refuses: None, A, Policy { full: true, ..AUTO } => Decision::Full);

    #[test]
    fn ids_are_validated_like_salt() {
        for ok in ["m1", "web.example.com", "a b"] {
            assert!(valid_id(ok), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "a\\b", "a\0b"] {
            assert!(!valid_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn event_fields_follow_salt() {
        assert_eq!(Decision::Deny.act(), "denied");
        assert!(!Decision::Deny.result());
        assert!(Decision::Pend {
            store: Store::Nothing
        }
        .result());
        assert_eq!(Decision::Deny.store(), Store::AddDenied);
    }
}
