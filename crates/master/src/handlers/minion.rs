//! What minions send about themselves: `_return`, `_minion_event`, `_pillar`,
//! `_master_opts`, `_register_resources`.

use crate::dispatch::{bad_load, AesCall, AesReply};
use crate::Master;
use halite_pillar::Answer;
use halite_proto::envelope;
use halite_proto::event::MINION_EVENT_BLACKLIST;
use halite_proto::rsa::{EncAlgo, PrivateKey, PublicKey, SigAlgo};
use halite_proto::value::{self, map, s};
use halite_proto::Value;

/// What the `send_private` pillar envelope of one request is built with.
struct PillarSeal {
    key: PrivateKey,
    public: PublicKey,
    enc_algo: EncAlgo,
    sig_algo: SigAlgo,
    nonce: String,
    id: String,
}

impl PillarSeal {
    /// The envelope carrying `pillar` (`"bad load"` if it cannot be built).
    fn reply(&self, pillar: &Value) -> Value {
        envelope::pillar_reply(
            &self.key,
            &self.public,
            self.enc_algo,
            self.sig_algo,
            pillar,
            &self.nonce,
        )
        .unwrap_or_else(|e| {
            tracing::error!(minion = self.id, "Could not build the pillar reply: {e}");
            bad_load()
        })
    }
}

impl Master {
    pub(crate) fn handle_return(&self, call: AesCall<'_>) -> AesReply {
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
            // The return itself is kept either way (the writer retries it).
            if let Err(e) = self.jobs.save_load(&jid, job, vec![call.id.to_owned()]) {
                tracing::warn!("The job of {}'s return {jid} is not stored: {e}", call.id);
            }
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
        self.watch.on_return(&jid, call.id, &load);
        self.events
            .fire(&format!("salt/job/{jid}/ret/{}", call.id), load);
        // Acknowledged once written (`jobs`): a return the minion was answered for survives
        // a crash of the master.
        let reply_to = call.reply_to;
        self.jobs.add_return(
            jid,
            call.id.to_owned(),
            packed,
            Box::new(move || reply_to.send(&Value::Nil)),
        );
        self.metrics.count_return();
        AesReply::Held
    }

    /// `_pillar`: the grains are kept for targeting, and the pillar comes from
    /// `halite-pillar` — at once when nothing needs compiling, else from a worker process
    /// running Salt's pillar code, whose answer is sent from the pool's thread (the reply
    /// is held, so no request worker waits for Python).
    pub(crate) fn handle_pillar(&self, call: AesCall<'_>) -> AesReply {
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
        let seal = PillarSeal {
            key: self.key.clone(),
            public,
            enc_algo: call.enc_algo,
            sig_algo: call.sig_algo,
            nonce: nonce.to_owned(),
            id: call.id.to_owned(),
        };
        // Kept for `-I`/`-J` targeting, as stock's `_sync_pillar` stores it in the minion
        // data cache (with `minion_data_cache`, the default).
        let keep = self.cfg.minion_data_cache.then(|| self.pillars.clone());
        let id = call.id.to_owned();
        let kept = move |pillar: &Value| {
            if let (Some(pillars), Value::Map(_)) = (&keep, pillar) {
                pillars
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(id, pillar.clone());
            }
        };
        match self.pillar.answer(call.id, call.load) {
            Answer::Ready(pillar) => {
                kept(&pillar);
                AesReply::Private(seal.reply(&pillar))
            }
            Answer::Pending(pending) => {
                let reply_to = call.reply_to;
                pending.then(move |pillar| {
                    kept(&pillar);
                    reply_to.send_private(&seal.reply(&pillar));
                });
                AesReply::Held
            }
        }
    }

    pub(crate) fn handle_minion_event(&self, call: AesCall<'_>) -> AesReply {
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

    pub(crate) fn handle_register_resources(&self, _call: AesCall<'_>) -> AesReply {
        AesReply::Send(Value::from(true))
    }

    pub(crate) fn handle_master_opts(&self, call: AesCall<'_>) -> AesReply {
        let mut opts = vec![
            (s("file_roots"), self.file_roots_for_minions()),
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
