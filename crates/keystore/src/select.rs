//! salt-key's glob selection and state changes (`salt/key.py:Key.glob_match`, `dict_match`,
//! `change_state`, `delete_key`, and `KeyCLI._update_opts`/`_filter_ret` for the source-state
//! rules of `--include-accepted`, `--include-rejected`, `--include-denied` and `--include-all`).
//!
//! [`Matches`] keeps Salt's dict insertion order, because salt-key prints its
//! "Key for minion X accepted." lines in that order.

use crate::fnmatch::fnmatch;
use crate::{sort_ignorecase, KeyStore, Result};
use halite_proto::auth::KeyState;
use halite_proto::rsa::PublicKey;

/// Order in which `Key.list_keys` builds its dict, and so the order of [`KeyStore::glob_match`].
const LIST_ORDER: [KeyState; 4] = [
    KeyState::Pending,
    KeyState::Rejected,
    KeyState::Accepted,
    KeyState::Denied,
];

/// Key ids grouped by state, in insertion order. A state is present only with at least one id;
/// an id may repeat when it matched several comma-separated globs (as in Salt).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Matches(Vec<(KeyState, Vec<String>)>);

impl Matches {
    /// Builds matches from `(state, ids)` pairs, keeping their order (empty groups are kept
    /// out, so [`Matches::is_empty`] means "nothing matched").
    pub fn from_groups(groups: impl IntoIterator<Item = (KeyState, Vec<String>)>) -> Self {
        let mut m = Matches::default();
        for (state, ids) in groups {
            for id in ids {
                m.push(state, id);
            }
        }
        m
    }

    /// True when no id matched.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The groups in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (KeyState, &[String])> {
        self.0.iter().map(|(s, ids)| (*s, ids.as_slice()))
    }

    /// The ids matched in `state`.
    pub fn get(&self, state: KeyState) -> &[String] {
        self.0
            .iter()
            .find(|(s, _)| *s == state)
            .map(|(_, ids)| ids.as_slice())
            .unwrap_or(&[])
    }

    fn push(&mut self, state: KeyState, id: String) {
        match self.0.iter_mut().find(|(s, _)| *s == state) {
            Some((_, ids)) => ids.push(id),
            None => self.0.push((state, vec![id])),
        }
    }
}

/// A salt-key state change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `-a`/`-A`: move keys to accepted.
    Accept,
    /// `-r`/`-R`: move keys to rejected.
    Reject,
    /// `-d`/`-D`: remove keys.
    Delete,
}

impl Action {
    /// Salt's past tense for "The following keys are going to be …ed" and "Key for minion X
    /// …ed." (`cmd.rstrip("e") + "ed"`).
    pub fn past_tense(self) -> &'static str {
        match self {
            Action::Accept => "accepted",
            Action::Reject => "rejected",
            Action::Delete => "deleted",
        }
    }
}

/// Which states besides pending an accept or reject may take keys from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Include {
    /// `--include-accepted` (reject only).
    pub accepted: bool,
    /// `--include-rejected` (accept only).
    pub rejected: bool,
    /// `--include-denied`.
    pub denied: bool,
}

impl Include {
    /// The effective flags for `action` (`KeyCLI._update_opts`): `--include-all` widens accept
    /// to rejected keys and reject to accepted keys, but never to denied keys; accept ignores
    /// `--include-accepted` and reject ignores `--include-rejected`. Delete keeps the flags
    /// as given (they only change its "does not match" wording).
    pub fn for_action(
        action: Action,
        accepted: bool,
        rejected: bool,
        denied: bool,
        all: bool,
    ) -> Include {
        match action {
            Action::Accept => Include {
                accepted: false,
                rejected: rejected || all,
                denied,
            },
            Action::Reject => Include {
                accepted: accepted || all,
                rejected: false,
                denied,
            },
            Action::Delete => Include {
                accepted,
                rejected,
                denied,
            },
        }
    }

    /// The statuses a glob was tried against, worded as in
    /// "The key glob 'x' does not match any unaccepted, rejected or denied keys."
    pub fn describe(self) -> String {
        let mut statuses = vec!["unaccepted"];
        if self.accepted {
            statuses.push("accepted");
        }
        if self.rejected {
            statuses.push("rejected");
        }
        if self.denied {
            statuses.push("denied");
        }
        match statuses.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => statuses.join(""),
        }
    }
}

/// The outcome of [`KeyStore::apply`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// What salt-key reports afterwards: for accept/reject the selected ids looked up again
    /// (`Key.dict_match`), for delete the selection itself.
    pub result: Matches,
    /// Ids whose stored key is not a valid RSA public key; they were left where they were.
    pub invalid: Vec<String>,
}

impl KeyStore {
    /// `Key.glob_match`: the ids of every state matching `pattern`, where `a,b` is several
    /// globs. Groups come in `list_keys` order (pending, rejected, accepted, denied).
    pub fn glob_match(&self, pattern: &str) -> Result<Matches> {
        let lists = self.list_all()?;
        let patterns: Vec<&str> = pattern.split(',').collect();
        let mut m = Matches::default();
        for state in LIST_ORDER {
            let ids = lists.get(state);
            if patterns == ["*"] {
                for id in ids {
                    m.push(state, id.clone());
                }
                continue;
            }
            for id in ids {
                for p in &patterns {
                    if fnmatch(id, p) {
                        m.push(state, id.clone());
                    }
                }
            }
        }
        Ok(m)
    }

    /// The keys `action` would touch for `pattern` (`KeyCLI.run`: `glob_match` then
    /// `_filter_ret`): pending keys plus the states `include` allows; delete takes every state.
    /// Pass `include` through [`Include::for_action`] first.
    pub fn select(&self, action: Action, pattern: &str, include: Include) -> Result<Matches> {
        let all = self.glob_match(pattern)?;
        if action == Action::Delete {
            return Ok(all);
        }
        let mut order = vec![KeyState::Pending];
        if include.accepted {
            order.push(KeyState::Accepted);
        }
        if include.rejected {
            order.push(KeyState::Rejected);
        }
        if include.denied {
            order.push(KeyState::Denied);
        }
        Ok(Matches::from_groups(
            order.into_iter().map(|s| (s, all.get(s).to_vec())),
        ))
    }

    /// Carries out `action` on a selection from [`KeyStore::select`] (`Key.accept`,
    /// `Key.reject` through `change_state`, or `Key.delete_key`).
    ///
    /// Accept and reject move each selected key from its source state (pending, then the
    /// included states) to the target state; a denied key replaces the id's current key.
    /// Delete removes the id's key from the selected state (accepted, pending and rejected are
    /// one "keys" entry in Salt, so deleting one removes all three; denied is separate).
    ///
    /// Deviation from Salt, for safety: a denied key that is not a valid public key stays in
    /// `minions_denied` (Salt removes it before noticing it cannot be moved).
    pub fn apply(&self, action: Action, selected: &Matches, include: Include) -> Result<Applied> {
        let target = match action {
            Action::Accept => KeyState::Accepted,
            Action::Reject => KeyState::Rejected,
            Action::Delete => {
                for (state, ids) in selected.iter() {
                    for id in ids {
                        if state == KeyState::Denied {
                            self.delete_denied(id)?;
                        } else {
                            self.delete(id)?;
                        }
                    }
                }
                return Ok(Applied {
                    result: selected.clone(),
                    invalid: Vec::new(),
                });
            }
        };
        let mut sources = vec![KeyState::Pending];
        match action {
            Action::Accept => {
                if include.rejected {
                    sources.push(KeyState::Rejected);
                }
                if include.denied {
                    sources.push(KeyState::Denied);
                }
            }
            _ => {
                if include.denied {
                    sources.push(KeyState::Denied);
                }
                if include.accepted {
                    sources.push(KeyState::Accepted);
                }
            }
        }
        let mut invalid = Vec::new();
        for source in sources {
            for id in selected.get(source) {
                if !self.move_key(source, id, target)? {
                    invalid.push(id.clone());
                }
            }
        }
        Ok(Applied {
            result: self.dict_match(selected)?,
            invalid,
        })
    }

    /// `Key.dict_match`: for each selected id (used as a glob, as Salt does), the states that
    /// now hold a matching id.
    pub fn dict_match(&self, selected: &Matches) -> Result<Matches> {
        let lists = self.list_all()?;
        let mut m = Matches::default();
        for (_, ids) in selected.iter() {
            let mut ids = ids.to_vec();
            sort_ignorecase(&mut ids);
            for id in ids {
                for state in [
                    KeyState::Accepted,
                    KeyState::Pending,
                    KeyState::Rejected,
                    KeyState::Denied,
                ] {
                    if lists.get(state).iter().any(|name| fnmatch(name, &id)) {
                        m.push(state, id.clone());
                    }
                }
            }
        }
        Ok(m)
    }

    /// Moves `id`'s key from `source` to `target`. Returns false when the key is not a valid
    /// RSA public key (nothing is changed). A key that vanished meanwhile is skipped.
    fn move_key(&self, source: KeyState, id: &str, target: KeyState) -> Result<bool> {
        let pem = if source == KeyState::Denied {
            self.get_denied(id)?
        } else {
            self.get(id)?.map(|(_, pem)| pem)
        };
        let Some(pem) = pem else { return Ok(true) };
        if PublicKey::from_pem(pem.as_bytes()).is_err() {
            tracing::error!("Invalid RSA public key: {id}");
            return Ok(false);
        }
        if source == KeyState::Denied {
            self.delete_denied(id)?;
        }
        self.put(id, target, &pem)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{pubkey, store_with};
    use KeyState::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn glob_match_groups_in_list_keys_order_and_splits_commas() {
        let (_d, s) = store_with(&[
            (Accepted, "web1"),
            (Pending, "web2"),
            (Rejected, "db"),
            (Denied, "web1"),
        ]);
        let m = s.glob_match("web*,db").unwrap();
        assert_eq!(
            m,
            Matches::from_groups([
                (Pending, ids(&["web2"])),
                (Rejected, ids(&["db"])),
                (Accepted, ids(&["web1"])),
                (Denied, ids(&["web1"]))
            ])
        );
    }

    #[test]
    fn id_matching_two_globs_is_listed_twice_like_salt() {
        let (_d, s) = store_with(&[(Pending, "web1")]);
        assert_eq!(
            s.glob_match("web1,w*").unwrap().get(Pending),
            ids(&["web1", "web1"])
        );
    }

    #[test]
    fn accept_selects_only_pending_unless_included() {
        let (_d, s) = store_with(&[
            (Pending, "a1"),
            (Rejected, "a2"),
            (Denied, "a3"),
            (Accepted, "a4"),
        ]);
        let plain = Include::for_action(Action::Accept, true, false, false, false);
        assert_eq!(
            s.select(Action::Accept, "a*", plain).unwrap(),
            Matches::from_groups([(Pending, ids(&["a1"]))])
        );
        let all = Include::for_action(Action::Accept, false, false, false, true);
        assert_eq!(
            s.select(Action::Accept, "a*", all).unwrap(),
            Matches::from_groups([(Pending, ids(&["a1"])), (Rejected, ids(&["a2"]))]),
            "--include-all does not include denied keys"
        );
    }

    #[test]
    fn reject_with_include_all_takes_accepted_keys() {
        let (_d, s) = store_with(&[(Accepted, "a4"), (Rejected, "a2")]);
        let inc = Include::for_action(Action::Reject, false, true, false, true);
        let sel = s.select(Action::Reject, "*", inc).unwrap();
        assert_eq!(sel, Matches::from_groups([(Accepted, ids(&["a4"]))]));
        let done = s.apply(Action::Reject, &sel, inc).unwrap();
        assert_eq!(
            done.result,
            Matches::from_groups([(Rejected, ids(&["a4"]))])
        );
        assert_eq!(s.list(Rejected).unwrap(), ids(&["a2", "a4"]));
    }

    #[test]
    fn accepting_a_denied_key_replaces_the_current_key() {
        let (_d, s) = store_with(&[(Accepted, "m")]);
        let impostor = pubkey(7);
        s.add_denied("m", &impostor).unwrap();
        let inc = Include::for_action(Action::Accept, false, false, true, false);
        let sel = s.select(Action::Accept, "m", inc).unwrap();
        assert_eq!(sel, Matches::from_groups([(Denied, ids(&["m"]))]));
        s.apply(Action::Accept, &sel, inc).unwrap();
        assert_eq!(
            s.get("m").unwrap(),
            Some((Accepted, halite_proto::pem::clean_key(&impostor)))
        );
        assert_eq!(s.get_denied("m").unwrap(), None);
    }

    #[test]
    fn invalid_key_is_reported_and_left_in_place() {
        let (_d, s) = store_with(&[]);
        s.put(
            "bad",
            Pending,
            "-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----",
        )
        .unwrap();
        let inc = Include::default();
        let sel = s.select(Action::Accept, "bad", inc).unwrap();
        let done = s.apply(Action::Accept, &sel, inc).unwrap();
        assert_eq!(done.invalid, ids(&["bad"]));
        assert_eq!(s.get("bad").unwrap().map(|(st, _)| st), Some(Pending));
    }

    #[test]
    fn delete_removes_the_selected_states() {
        let (_d, s) = store_with(&[(Accepted, "m"), (Denied, "m"), (Pending, "n")]);
        let sel = s.select(Action::Delete, "m", Include::default()).unwrap();
        assert_eq!(
            sel,
            Matches::from_groups([(Accepted, ids(&["m"])), (Denied, ids(&["m"]))])
        );
        let done = s.apply(Action::Delete, &sel, Include::default()).unwrap();
        assert_eq!(done.result, sel);
        assert_eq!(s.get("m").unwrap(), None);
        assert_eq!(s.get_denied("m").unwrap(), None);
        assert_eq!(s.list(Pending).unwrap(), ids(&["n"]));
    }

    #[test]
    fn no_match_wording_lists_the_included_states() {
        let cases = [
            (Include::default(), "unaccepted"),
            (
                Include {
                    rejected: true,
                    ..Include::default()
                },
                "unaccepted or rejected",
            ),
            (
                Include {
                    accepted: true,
                    rejected: false,
                    denied: true,
                },
                "unaccepted, accepted or denied",
            ),
            (
                Include {
                    accepted: true,
                    rejected: true,
                    denied: true,
                },
                "unaccepted, accepted, rejected or denied",
            ),
        ];
        for (inc, want) in cases {
            assert_eq!(inc.describe(), want);
        }
    }
}
