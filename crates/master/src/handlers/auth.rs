//! `_auth`: a minion's sign-in (`AuthFuncs._auth_impl`).
//!
//! The decision itself is pure (`halite_proto::auth::decide`); this module reads the stored
//! key, the `autosign_file`/`autoreject_file` lists, persists what the decision says, signs
//! the reply and fires `salt/auth`, with Salt's log lines.

use crate::dispatch::bad_load;
use crate::Master;
use halite_proto::auth::{self, Decision, KeyState, Policy, Store};
use halite_proto::envelope::{self, AcceptKeys, AuthRequest};
use halite_proto::value::s;
use halite_proto::Value;
use std::time::SystemTime;

impl Master {
    pub(crate) fn handle_auth(&self, load: &Value) -> Value {
        let req = match AuthRequest::parse(load) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = ?e, "Unusable _auth request");
                return e.reply();
            }
        };
        match self.auth(&req) {
            Ok(v) => v,
            Err(e) => {
                tracing::error!("Authentication of {} failed internally: {e}", req.id);
                bad_load()
            }
        }
    }

    fn auth(&self, req: &AuthRequest) -> halite_proto::Result<Value> {
        let id = req.id.as_str();
        if !auth::valid_id(id) {
            tracing::info!("Authentication request from invalid id {id}");
            return envelope::ret_reply(&self.key, req, Value::from(false));
        }
        tracing::info!("Authentication request from {id}");
        let policy = Policy {
            open_mode: self.cfg.open_mode,
            autosign: self.cfg.auto_accept || self.listed_in(self.cfg.autosign_file.as_deref(), id),
            autoreject: self.listed_in(self.cfg.autoreject_file.as_deref(), id),
            full: false,
        };
        let stored = match self.keys.store().get(id) {
            Ok(k) => k,
            Err(e) => {
                tracing::error!("Could not read the key of {id}: {e}");
                return envelope::ret_reply(&self.key, req, Value::from(false));
            }
        };
        let decision = auth::decide(
            stored.as_ref().map(|(st, pem)| (*st, pem.as_str())),
            &req.pub_pem,
            policy,
        );
        self.log_decision(id, stored.as_ref().map(|(st, _)| *st), decision);
        let persisted = match decision.store() {
            Store::Nothing => Ok(()),
            Store::Key(state) => self
                .keys
                .store()
                .put(id, state, &req.pub_pem)
                .map_err(|e| e.to_string()),
            Store::MoveStored(state) => match &stored {
                Some((_, pem)) => self
                    .keys
                    .store()
                    .put(id, state, pem)
                    .map_err(|e| e.to_string()),
                None => Ok(()),
            },
            Store::AddDenied => self
                .keys
                .store()
                .add_denied(id, &req.pub_pem)
                .map(drop)
                .map_err(|e| e.to_string()),
        };
        if let Err(e) = persisted {
            tracing::error!("Could not store the key of {id}: {e}");
        }
        let reply = match decision {
            Decision::Accept { .. } => self.accept(req)?,
            Decision::Pend { .. } => envelope::ret_reply(&self.key, req, Value::from(true))?,
            Decision::Reject { .. } | Decision::Deny => {
                envelope::ret_reply(&self.key, req, Value::from(false))?
            }
            Decision::Full => envelope::ret_reply(&self.key, req, s("full"))?,
        };
        if self.cfg.auth_events {
            let mut data = vec![
                (s("result"), Value::from(decision.result())),
                (s("act"), s(decision.act())),
                (s("id"), s(id)),
                (s("pub"), s(req.pub_pem.clone())),
            ];
            if let Some(g) = &req.autosign_grains {
                data.push((s("autosign_grains"), g.clone()));
            }
            self.events.fire("salt/auth", Value::Map(data));
        }
        Ok(reply)
    }

    fn accept(&self, req: &AuthRequest) -> halite_proto::Result<Value> {
        let id = req.id.as_str();
        let Some((_, public)) = self.keys.insert(id, &req.pub_pem) else {
            tracing::error!("Corrupt or missing public key \"{id}\"");
            return envelope::ret_reply(&self.key, req, Value::from(false));
        };
        let session = match self.sessions.get_or_create(id, SystemTime::now()) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("Could not write the session key of {id}: {e}");
                return envelope::ret_reply(&self.key, req, Value::from(false));
            }
        };
        let (aes, aes_sig) = self.publisher.auth_keys()?;
        let keys = AcceptKeys {
            master_pub: &self.pub_clean,
            publish_port: self.cfg.publish_port,
            aes: aes.key_string(),
            session: session.key_string(),
            aes_sig: &aes_sig,
        };
        envelope::accept_reply(&self.key, &public, req, &keys)
    }

    fn log_decision(&self, id: &str, stored: Option<KeyState>, decision: Decision) {
        match (decision, stored) {
            (Decision::Accept { .. }, _) => tracing::info!("Authentication accepted from {id}"),
            (Decision::Pend { .. }, None) => tracing::info!("New public key for {id} placed in pending"),
            (Decision::Pend { .. }, Some(_)) => tracing::info!(
                "Authentication failed from host {id}, the key is in pending and needs to be accepted with salt-key -a {id}"
            ),
            (Decision::Reject { .. }, Some(KeyState::Rejected)) => {
                tracing::info!("Public key rejected for {id}. Key is present in rejection key dir.")
            }
            (Decision::Reject { .. }, _) => tracing::info!("New public key for {id} rejected via autoreject_file"),
            (Decision::Deny, _) => tracing::error!(
                "Authentication attempt from {id} failed, the public keys did not match. This may be an attempt to compromise the Salt cluster."
            ),
            (Decision::Full, _) => tracing::info!("Too many minions connected. Rejecting connection from id {id}"),
        }
    }

    /// `check_signing_file`: a line of the autosign/autoreject file that equals the id,
    /// matches it as a glob, or as an anchored regex.
    fn listed_in(&self, file: Option<&std::path::Path>, id: &str) -> bool {
        let Some(path) = file else { return false };
        let Ok(text) = std::fs::read_to_string(path) else {
            return false;
        };
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .any(|line| {
                line == id
                    || halite_target::fnmatch::fnmatch(id, line)
                    || self.regex.re_fullmatch(line, id).unwrap_or(false)
            })
    }
}
