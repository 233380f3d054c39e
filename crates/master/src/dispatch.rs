//! Request handling: one table of clear commands, one table of encrypted commands.
//!
//! [`Master::handle_request`] takes the bytes of one request from the request port and
//! returns the bytes of the reply. Everything a peer can send is checked here; nothing it
//! sends can panic a worker — a bad request is logged and answered with `"bad load"`
//! (which makes a genuine minion re-authenticate), and the worker moves on.

use crate::jobs::JobOp;
use crate::keys::AcceptedKey;
use crate::Master;
use halite_proto::auth::{self, Decision, KeyState, Policy, Store};
use halite_proto::envelope::{self, AcceptKeys, AuthRequest, Request, BAD_LOAD};
use halite_proto::rsa::{EncAlgo, SigAlgo};
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use std::time::SystemTime;

/// Requests larger than this are refused with a log line (libzmq's own cap is higher).
pub const MAX_REQUEST_SIZE: usize = 64 << 20;

/// A clear-channel command handler: the clear load in, the reply (sent as is) out.
type ClearHandler = fn(&Master, &Value) -> Value;

/// The clear commands this master answers (`ClearFuncs`, plus `_auth`).
const CLEAR_HANDLERS: &[(&str, ClearHandler)] = &[
    ("_auth", Master::handle_auth),
    ("publish", Master::handle_publish),
    ("ping", Master::handle_ping),
];

/// How an encrypted command's result is sent back.
pub enum AesReply {
    /// `send`: encrypted with the minion's session key, bound to the request nonce.
    Send(Value),
    /// `send_private`: already a complete reply (the pillar envelope).
    Private(Value),
}

/// What an encrypted-command handler sees.
pub struct AesCall<'a> {
    /// The minion id (verified: session key, inner id and token all match).
    pub id: &'a str,
    /// The decrypted load without `nonce` and `tok`, the handler's to keep.
    pub load: Value,
    /// The request nonce.
    pub nonce: Option<&'a str>,
    /// The minion's accepted key.
    pub key: &'a AcceptedKey,
    /// Outer `enc_algo`.
    pub enc_algo: EncAlgo,
    /// Outer `sig_algo`.
    pub sig_algo: SigAlgo,
}

/// An encrypted-command handler.
type AesHandler = fn(&Master, AesCall<'_>) -> AesReply;

/// The encrypted commands this master answers (`AESFuncs`). Any other command gets `{}`,
/// as Salt answers unknown commands.
const AES_HANDLERS: &[(&str, AesHandler)] = &[
    ("_return", Master::handle_return),
    ("_pillar", Master::handle_pillar),
    ("_minion_event", Master::handle_minion_event),
    ("_register_resources", Master::handle_register_resources),
    ("_master_opts", Master::handle_master_opts),
];

/// Tags a minion may not fire on the master bus (`MINION_EVENT_BLACKLIST`).
const MINION_EVENT_BLACKLIST: &[&str] = &[
    "salt/job/*/publish",
    "salt/job/*/new",
    "salt/job/*/return",
    "salt/key",
    "salt/cloud/*",
    "salt/run/*",
    "salt/cluster/*",
    "salt/wheel/*/new",
    "salt/wheel/*/return",
];

fn bad_load() -> Value {
    s(BAD_LOAD)
}

impl Master {
    /// Handles one request body and returns the reply body.
    pub fn handle_request(&self, body: &[u8]) -> Vec<u8> {
        value::encode(&self.dispatch(body))
    }

    fn dispatch(&self, body: &[u8]) -> Value {
        if body.len() > MAX_REQUEST_SIZE {
            tracing::warn!(
                size = body.len(),
                limit = MAX_REQUEST_SIZE,
                "Request larger than the limit refused"
            );
            return bad_load();
        }
        let decoded = match value::decode(body) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "Undecodable request on the request port");
                return map([("msg", bad_load())]);
            }
        };
        let request = match Request::parse(&decoded) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "Malformed request on the request port");
                return bad_load();
            }
        };
        let version = match &request {
            Request::Clear { version, .. } | Request::Aes { version, .. } => *version,
        };
        if version < i64::from(self.cfg.minimum_auth_version) {
            tracing::warn!(
                version,
                minimum = self.cfg.minimum_auth_version,
                "Request with a protocol version below minimum_auth_version refused"
            );
            return bad_load();
        }
        match request {
            Request::Clear { load, .. } => {
                let cmd = value::get_str(&load, "cmd").unwrap_or("");
                match CLEAR_HANDLERS.iter().find(|(name, _)| *name == cmd) {
                    Some((_, handler)) => handler(self, &load),
                    None => {
                        tracing::debug!(cmd, "Unknown clear command answered with {{}}");
                        Value::Map(vec![])
                    }
                }
            }
            Request::Aes {
                id,
                blob,
                enc_algo,
                sig_algo,
                ..
            } => self.dispatch_aes(&id, &blob, enc_algo, sig_algo),
        }
    }

    fn dispatch_aes(&self, id: &str, blob: &[u8], enc_algo: EncAlgo, sig_algo: SigAlgo) -> Value {
        if !auth::valid_id(id) {
            tracing::warn!(id, "Encrypted request from an invalid id refused");
            return bad_load();
        }
        let Some(session) = self.sessions.get(id, SystemTime::now()) else {
            tracing::info!("Encrypted request from {id} without a current session key; asking it to re-authenticate");
            return bad_load();
        };
        let req = match envelope::open_aes_request(&session, id, blob) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(
                    "Failed to decrypt a request from {id}: {e}; asking it to re-authenticate"
                );
                return bad_load();
            }
        };
        let Some(key) = self.keys.accepted(id) else {
            tracing::warn!("Encrypted request from {id}, which has no accepted key, refused");
            return bad_load();
        };
        if !req.tok.as_deref().is_some_and(|t| key.verify_tok(t)) {
            tracing::warn!("Minion token of {id} did not verify; request refused");
            return bad_load();
        }
        let cmd = value::get_str(&req.load, "cmd").unwrap_or("");
        let reply = match AES_HANDLERS.iter().find(|(name, _)| *name == cmd) {
            Some((_, handler)) => handler(
                self,
                AesCall {
                    id,
                    load: req.load,
                    nonce: req.nonce.as_deref(),
                    key: &key,
                    enc_algo,
                    sig_algo,
                },
            ),
            None => {
                tracing::debug!(
                    cmd,
                    minion = id,
                    "Unknown encrypted command answered with {{}}"
                );
                AesReply::Send(Value::Map(vec![]))
            }
        };
        match reply {
            AesReply::Send(v) => match envelope::seal_reply(&session, &v, req.nonce.as_deref()) {
                Ok(v) => v,
                Err(e) => {
                    tracing::error!("Could not encrypt the reply to {id}: {e}");
                    bad_load()
                }
            },
            AesReply::Private(v) => v,
        }
    }

    // ---- clear commands -------------------------------------------------------------

    fn handle_ping(&self, load: &Value) -> Value {
        load.clone()
    }

    fn handle_auth(&self, load: &Value) -> Value {
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

    fn handle_publish(&self, load: &Value) -> Value {
        let mut load = load.clone();
        let key = value::remove(&mut load, "key");
        let user = value::get_str(&load, "user").unwrap_or("root").to_owned();
        let authed = key
            .as_ref()
            .and_then(value::str_of)
            .is_some_and(|k| self.client_keys.iter().any(|(_, v)| v == k));
        if !authed {
            tracing::warn!("Authentication failure of type \"user\" occurred.");
            return map([(
                "error",
                map([
                    ("name", s("AuthenticationError")),
                    ("message", s("Authentication error occurred.")),
                ]),
            )]);
        }
        match self.publish_job(load, &user) {
            Ok(v) => v,
            Err(e) => {
                tracing::error!("Publish failed: {e}");
                map([("error", s(e))])
            }
        }
    }

    fn publish_job(&self, load: Value, user: &str) -> Result<Value, String> {
        let tgt = value::get(&load, "tgt").cloned().unwrap_or(s(""));
        let tgt_type = value::get_str(&load, "tgt_type")
            .unwrap_or("glob")
            .to_owned();
        let fun = value::get(&load, "fun")
            .cloned()
            .ok_or("publish without fun")?;
        let arg = value::get(&load, "arg")
            .cloned()
            .unwrap_or(Value::Array(vec![]));
        let kwargs = value::get(&load, "kwargs")
            .cloned()
            .unwrap_or(Value::Map(vec![]));
        let delimiter = value::get_str(&kwargs, "delimiter")
            .unwrap_or(":")
            .to_owned();
        let (minions, missing) = self.expected_minions(&tgt, &tgt_type, &delimiter);
        if minions.is_empty() {
            let shown = value::str_of(&tgt)
                .map(str::to_owned)
                .unwrap_or_else(|| format!("{tgt}"));
            return Ok(map([
                ("enc", s("clear")),
                (
                    "load",
                    map([
                        ("jid", Value::Nil),
                        ("minions", Value::Array(vec![])),
                        (
                            "error",
                            s(format!(
                                "Master could not resolve minions for target {shown}"
                            )),
                        ),
                    ]),
                ),
            ]));
        }
        let jid = match value::get_str(&load, "jid") {
            Some(j) if halite_proto::jid::is_jid(j) => j.to_owned(),
            _ => self.next_jid(),
        };
        let names = |v: &[String]| Value::Array(v.iter().map(|m| s(m.clone())).collect());
        self.events.fire(
            &format!("salt/job/{jid}/new"),
            map([
                ("jid", s(jid.clone())),
                ("tgt_type", s(tgt_type.clone())),
                ("tgt", tgt.clone()),
                ("user", s(user)),
                ("fun", fun.clone()),
                ("arg", arg.clone()),
                ("minions", names(&minions)),
                ("missing", names(&missing)),
            ]),
        );

        // The publish load, built as `ClearFuncs._prep_pub` builds it.
        let mut pub_load = vec![
            (s("fun"), fun.clone()),
            (s("arg"), arg.clone()),
            (s("tgt"), tgt.clone()),
            (s("jid"), s(jid.clone())),
            (s("ret"), value::get(&load, "ret").cloned().unwrap_or(s(""))),
        ];
        if delimiter != ":" {
            pub_load.push((s("delimiter"), s(delimiter)));
        }
        pub_load.push((s("tgt_type"), s(tgt_type)));
        if let Some(to) = value::get(&load, "to") {
            pub_load.push((s("to"), to.clone()));
        }
        for field in [
            "ret_config",
            "metadata",
            "module_executors",
            "executor_opts",
            "ret_kwargs",
        ] {
            if let Some(v) = value::get(&kwargs, field) {
                pub_load.push((s(field), v.clone()));
            }
        }
        pub_load.push((s("user"), s(user)));
        let pub_load = Value::Map(pub_load);

        // The stock `salt` CLI reads `.load.p` right after this reply, so that file is
        // written before replying; the master's own store is updated by the writer thread.
        let mut saved = load.clone();
        value::set(&mut saved, "jid", s(jid.clone()));
        if let Err(e) = self.local_cache.write_load(&jid, &saved, &minions) {
            tracing::warn!(%jid, "Could not write the job load to local_cache: {e}");
        }
        self.jobs.send(JobOp::Load {
            jid: jid.clone(),
            load: saved,
            minions: minions.clone(),
        });
        tracing::info!(
            "User {user} Published command {} with jid {jid}",
            value::str_of(&fun).unwrap_or("?")
        );
        self.events
            .fire(&format!("salt/job/{jid}/publish"), pub_load.clone());
        self.publisher.publish(pub_load)?;
        Ok(map([
            ("enc", s("clear")),
            (
                "load",
                map([
                    ("jid", s(jid)),
                    ("minions", names(&minions)),
                    ("missing", names(&missing)),
                ]),
            ),
        ]))
    }

    // ---- encrypted commands ---------------------------------------------------------

    fn handle_return(&self, call: AesCall<'_>) -> AesReply {
        let mut load = call.load;
        let (Some(jid), true) = (
            value::get_str(&load, "jid").map(str::to_owned),
            value::get(&load, "return").is_some(),
        ) else {
            tracing::warn!(
                minion = call.id,
                "Return without jid or return field dropped"
            );
            return AesReply::Send(Value::Nil);
        };
        let jid = if jid == "req" {
            let jid = self.next_jid();
            value::set(&mut load, "jid", s(jid.clone()));
            let job = map([
                (
                    "fun",
                    value::get(&load, "fun").cloned().unwrap_or(Value::Nil),
                ),
                (
                    "arg",
                    value::get(&load, "fun_args")
                        .cloned()
                        .unwrap_or(Value::Array(vec![])),
                ),
                ("tgt", s(call.id)),
                ("tgt_type", s("glob")),
                ("jid", s(jid.clone())),
            ]);
            self.jobs.send(JobOp::Load {
                jid: jid.clone(),
                load: job,
                minions: vec![call.id.to_owned()],
            });
            jid
        } else if halite_proto::jid::is_jid(&jid) {
            jid
        } else {
            tracing::warn!(
                minion = call.id,
                "Return with an invalid jid {jid:?} dropped"
            );
            return AesReply::Send(Value::Nil);
        };
        value::remove(&mut load, "sig");
        let packed = value::encode(&load);
        self.events
            .fire(&format!("salt/job/{jid}/ret/{}", call.id), load);
        self.jobs.send(JobOp::Return {
            jid,
            id: call.id.to_owned(),
            packed,
        });
        AesReply::Send(Value::Nil)
    }

    fn handle_pillar(&self, call: AesCall<'_>) -> AesReply {
        if let Some(grains) = value::get(&call.load, "grains") {
            self.grains
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(call.id.to_owned(), grains.clone());
        }
        let Some(nonce) = call.nonce else {
            return AesReply::Private(map([("error", s("Nonce not included in request"))]));
        };
        let Some(public) = call.key.public() else {
            tracing::error!("Corrupt or missing public key \"{}\"", call.id);
            return AesReply::Private(bad_load());
        };
        let pillar = Value::Map(vec![]);
        match envelope::pillar_reply(
            &self.key,
            &public,
            call.enc_algo,
            call.sig_algo,
            &pillar,
            nonce,
        ) {
            Ok(v) => AesReply::Private(v),
            Err(e) => {
                tracing::error!(minion = call.id, "Could not build the pillar reply: {e}");
                AesReply::Private(bad_load())
            }
        }
    }

    fn handle_minion_event(&self, call: AesCall<'_>) -> AesReply {
        let load = call.load;
        if let Some(Value::Array(events)) = value::get(&load, "events") {
            let pretag = value::get_str(&load, "pretag");
            for ev in events {
                let Some(tag) = value::get_str(ev, "tag") else {
                    continue;
                };
                let data = value::get(ev, "data").unwrap_or(ev).clone();
                if !matches!(data, Value::Map(_)) {
                    tracing::warn!(
                        minion = call.id,
                        tag,
                        "Event whose data is not a map dropped"
                    );
                    continue;
                }
                if let Some(pre) = pretag {
                    self.events.fire(&format!("{pre}/{tag}"), data.clone());
                }
                // Every blacklisted pattern starts with `salt/`: other tags skip the globs.
                if tag.starts_with("salt/")
                    && MINION_EVENT_BLACKLIST
                        .iter()
                        .any(|b| halite_target::fnmatch::fnmatch(tag, b))
                {
                    tracing::warn!("Filtering blacklisted event tag {tag}");
                    continue;
                }
                self.events.fire(tag, data);
            }
            return AesReply::Send(Value::from(true));
        }
        match (value::get_str(&load, "tag"), value::get(&load, "data")) {
            (Some(tag), Some(_)) => {
                let tag = tag.to_owned();
                self.events.fire(&tag, load);
                AesReply::Send(Value::from(true))
            }
            _ => AesReply::Send(Value::from(false)),
        }
    }

    fn handle_register_resources(&self, _call: AesCall<'_>) -> AesReply {
        AesReply::Send(Value::from(true))
    }

    fn handle_master_opts(&self, call: AesCall<'_>) -> AesReply {
        let mut opts = vec![
            (s("file_roots"), map([("base", Value::Array(vec![]))])),
            (s("top_file_merging_strategy"), s("merge")),
            (s("env_order"), Value::Array(vec![])),
            (s("default_top"), s("base")),
        ];
        if !value::get(&call.load, "env_only").is_some_and(value::truthy) {
            opts.extend([
                (s("renderer"), s("jinja|yaml")),
                (s("failhard"), Value::from(false)),
                (s("state_top"), s("top.sls")),
                (s("state_top_saltenv"), Value::Nil),
                (s("nodegroups"), Value::Map(vec![])),
                (s("state_auto_order"), Value::from(true)),
                (s("state_events"), Value::from(false)),
                (s("state_aggregate"), Value::from(false)),
                (s("jinja_env"), Value::Map(vec![])),
                (s("jinja_sls_env"), Value::Map(vec![])),
                (s("jinja_lstrip_blocks"), Value::from(false)),
                (s("jinja_trim_blocks"), Value::from(false)),
            ]);
        }
        AesReply::Send(Value::Map(opts))
    }
}
