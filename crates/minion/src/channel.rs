//! The encrypted request channel (`salt/channel/client.py:AsyncReqChannel`): v3 requests
//! with the session key, `tries` attempts of `timeout` each, and one re-authentication plus
//! retry when the master does not accept the session (`"bad load"`, a restarted master).
//!
//! One REQ socket serves the whole process; requests from concurrent job threads take
//! turns on it, as Salt serialises them on its channel lock. A request that may take long
//! (a `pub_ret` the master holds, a runner it runs) goes apart instead
//! ([`Channel::send_apart`]): on a REQ socket of its own, with the same session, so it
//! holds up nothing else. Those sockets are kept for reuse, at most [`SPARE_SOCKETS`] idle.

use crate::auth::{Auth, Session};
use crate::transport::ReqSocket;
use crate::Error;
use halite_proto::crypticle::{Crypticle, PICKLE_PREFIX};
use halite_proto::minion::{self as proto, PrivateReplyKeys, ReplyError, Requester};
use halite_proto::value::{bin, s};
use halite_proto::{value, Value};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How many idle sockets of [`Channel::send_apart`] are kept for the next request.
pub const SPARE_SOCKETS: usize = 2;

/// A request load encoded ahead of time: the entries of a msgpack map, `id` among them,
/// and none of `nonce`, `ts` and `tok` (each attempt adds those). A sender of many small
/// events builds it straight from their bytes, without a `Value` tree per event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EncodedLoad {
    /// How many key/value pairs `entries` holds.
    pub len: u32,
    /// The pairs, msgpack-encoded back to back.
    pub entries: Vec<u8>,
}

/// What a request carries.
#[derive(Clone, Copy)]
enum Load<'a> {
    Value(&'a Value),
    Encoded(&'a EncodedLoad),
}

/// `halite_proto::minion::aes_request` for an [`EncodedLoad`]: the same envelope and the
/// same plaintext (the entries, then `nonce`, `ts` and `tok`).
fn encoded_request(
    session: &Crypticle,
    who: &Requester<'_>,
    load: &EncodedLoad,
    nonce: &str,
    ts: i64,
) -> Result<Value, halite_proto::Error> {
    let mut pt = Vec::with_capacity(PICKLE_PREFIX.len() + load.entries.len() + 400);
    pt.extend_from_slice(PICKLE_PREFIX);
    // Writing to a Vec cannot fail.
    let _ = rmp::encode::write_map_len(&mut pt, load.len.saturating_add(3));
    pt.extend_from_slice(&load.entries);
    let _ = rmp::encode::write_str(&mut pt, "nonce");
    let _ = rmp::encode::write_str(&mut pt, nonce);
    let _ = rmp::encode::write_str(&mut pt, "ts");
    let _ = rmp::encode::write_sint(&mut pt, ts);
    let _ = rmp::encode::write_str(&mut pt, "tok");
    let _ = rmp::encode::write_bin(&mut pt, who.tok);
    Ok(Value::Map(vec![
        (s("enc"), s("aes")),
        (s("load"), bin(session.encrypt(&pt)?)),
        (s("version"), Value::from(3)),
        (s("id"), s(who.id)),
        (s("enc_algo"), s(who.enc_algo.name())),
        (s("sig_algo"), s(who.sig_algo.name())),
    ]))
}

/// Sockets for requests sent apart: the idle ones, and a model for new ones.
struct Spares {
    model: ReqSocket,
    idle: Vec<ReqSocket>,
}

/// Sends encrypted requests to the master.
pub struct Channel {
    auth: Arc<Auth>,
    req: Mutex<ReqSocket>,
    spares: Mutex<Spares>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Channel {
    /// A channel on `req` (usually a fresh [`ReqSocket`] for the master's request port);
    /// requests sent apart use new sockets to the same address.
    pub fn new(auth: Arc<Auth>, req: ReqSocket) -> Channel {
        Channel {
            auth,
            spares: Mutex::new(Spares {
                model: req.sibling(),
                idle: Vec::new(),
            }),
            req: Mutex::new(req),
        }
    }

    /// The authentication this channel uses.
    pub fn auth(&self) -> &Arc<Auth> {
        &self.auth
    }

    /// `AsyncReqChannel.send`: up to `tries` attempts of `timeout` each; returns the
    /// decrypted reply.
    pub fn send(&self, load: &Value, timeout: Duration, tries: u32) -> Result<Value, Error> {
        self.send_until(load, timeout, tries, &|| false)
    }

    /// [`send`](Self::send), abandoned with [`Error::Interrupted`] as soon as `abort`
    /// returns true while waiting for a reply.
    pub fn send_until(
        &self,
        load: &Value,
        timeout: Duration,
        tries: u32,
        abort: &dyn Fn() -> bool,
    ) -> Result<Value, Error> {
        self.send_load(&self.req, Load::Value(load), timeout, tries, abort)
    }

    /// [`send_until`](Self::send_until) for a load encoded ahead of time.
    pub fn send_encoded_until(
        &self,
        load: &EncodedLoad,
        timeout: Duration,
        tries: u32,
        abort: &dyn Fn() -> bool,
    ) -> Result<Value, Error> {
        self.send_load(&self.req, Load::Encoded(load), timeout, tries, abort)
    }

    /// [`send_until`](Self::send_until) on a socket of its own instead of the shared one,
    /// so that however long the master takes to reply, the process's other requests do
    /// not wait behind this one.
    pub fn send_apart(
        &self,
        load: &Value,
        timeout: Duration,
        tries: u32,
        abort: &dyn Fn() -> bool,
    ) -> Result<Value, Error> {
        let sock = {
            let mut spares = lock(&self.spares);
            match spares.idle.pop() {
                Some(sock) => sock,
                None => spares.model.sibling(),
            }
        };
        let req = Mutex::new(sock);
        let result = self.send_load(&req, Load::Value(load), timeout, tries, abort);
        let mut spares = lock(&self.spares);
        if spares.idle.len() < SPARE_SOCKETS {
            spares
                .idle
                .push(req.into_inner().unwrap_or_else(|e| e.into_inner()));
        }
        result
    }

    fn send_load(
        &self,
        req: &Mutex<ReqSocket>,
        load: Load<'_>,
        timeout: Duration,
        tries: u32,
        abort: &dyn Fn() -> bool,
    ) -> Result<Value, Error> {
        let mut attempt = 1;
        loop {
            match self.crypted_transfer(req, load, timeout, abort) {
                Ok(v) => return Ok(v),
                Err(
                    e @ (Error::Stopped
                    | Error::Rejected
                    | Error::MasterFinger
                    | Error::Interrupted),
                ) => return Err(e),
                Err(e) if attempt >= tries => return Err(e),
                Err(e) => {
                    tracing::debug!("Failed to send msg {e}");
                    attempt += 1;
                }
            }
        }
    }

    /// `_crypted_transfer`: one attempt, re-authenticating and retrying once when the
    /// reply does not authenticate.
    fn crypted_transfer(
        &self,
        req: &Mutex<ReqSocket>,
        load: Load<'_>,
        timeout: Duration,
        abort: &dyn Fn() -> bool,
    ) -> Result<Value, Error> {
        let session = self.auth.session()?;
        match self.transfer(req, &session, load, timeout, abort) {
            Err(Error::Reply(ReplyError::Reauth(why))) => {
                tracing::debug!("Re-authenticating: {why}");
                let session = self.auth.reauthenticate(session.generation)?;
                self.transfer(req, &session, load, timeout, abort)
            }
            other => other,
        }
    }

    fn requester<'a>(&'a self, who: &'a crate::settings::Settings) -> Requester<'a> {
        Requester {
            id: &who.id,
            tok: &self.auth.keys().tok,
            enc_algo: who.enc_algo,
            sig_algo: who.sig_algo,
        }
    }

    /// Encrypts and sends one request on `req`; returns the undecoded reply and the nonce.
    fn exchange(
        &self,
        req: &Mutex<ReqSocket>,
        session: &Session,
        load: Load<'_>,
        timeout: Duration,
        abort: &dyn Fn() -> bool,
    ) -> Result<(Value, String), Error> {
        let settings = self.auth.settings();
        let nonce = proto::new_nonce();
        let ts = chrono::Utc::now().timestamp();
        let who = self.requester(settings);
        let body = match load {
            Load::Value(v) => proto::aes_request(&session.session, &who, v.clone(), &nonce, ts),
            Load::Encoded(e) => encoded_request(&session.session, &who, e, &nonce, ts),
        }
        .map_err(|e| Error::Reply(ReplyError::Invalid(e)))?;
        let reply = lock(req).request_until(&value::encode(&body), timeout, abort)?;
        let reply = value::decode(&reply).map_err(|e| Error::Reply(ReplyError::Invalid(e)))?;
        Ok((reply, nonce))
    }

    fn transfer(
        &self,
        req: &Mutex<ReqSocket>,
        session: &Session,
        load: Load<'_>,
        timeout: Duration,
        abort: &dyn Fn() -> bool,
    ) -> Result<Value, Error> {
        let (reply, nonce) = self.exchange(req, session, load, timeout, abort)?;
        proto::open_reply(&session.session, &reply, &nonce).map_err(Error::Reply)
    }

    /// `crypted_transfer_decode_dictentry(dictkey="pillar")`: a `_pillar` request whose
    /// reply is the master-signed `send_private` envelope; returns the pillar (a map).
    pub fn pillar(&self, load: &Value, timeout: Duration, tries: u32) -> Result<Value, Error> {
        let mut session = self.auth.session()?;
        let mut reauthed = false;
        loop {
            let mut attempt = 1;
            let (reply, nonce) = loop {
                match self.exchange(&self.req, &session, Load::Value(load), timeout, &|| false) {
                    Ok(r) => break r,
                    Err(e @ (Error::Stopped | Error::Rejected | Error::MasterFinger)) => {
                        return Err(e)
                    }
                    Err(e) if attempt >= tries => return Err(e),
                    Err(e) => {
                        tracing::debug!("Failed to send msg {e}");
                        attempt += 1;
                    }
                }
            };
            let settings = self.auth.settings();
            let keys = PrivateReplyKeys {
                key: &self.auth.keys().key,
                master: &session.master,
                enc_algo: settings.enc_algo,
                sig_algo: settings.sig_algo,
            };
            match proto::open_pillar_reply(&reply, &keys, &nonce) {
                Err(ReplyError::Reauth(why)) if !reauthed => {
                    tracing::debug!("Re-authenticating for the pillar: {why}");
                    session = self.auth.reauthenticate(session.generation)?;
                    reauthed = true;
                }
                other => return other.map_err(Error::Reply),
            }
        }
    }
}

impl halite_exec::MasterChannel for Channel {
    /// One request with `request_channel_timeout` and `request_channel_tries`, as Salt's
    /// `ReqChannel.send` defaults.
    fn request(&self, load: Value) -> Result<Value, String> {
        let settings = self.auth.settings();
        self.send(&load, settings.request_timeout, settings.request_tries)
            .map_err(|e| e.to_string())
    }

    /// [`Channel::send_apart`] with `request_channel_tries` tries of
    /// `request_channel_timeout` plus `hold` each.
    fn request_apart(
        &self,
        load: Value,
        hold: Duration,
        abort: &dyn Fn() -> bool,
    ) -> Result<Value, halite_exec::ExecError> {
        let settings = self.auth.settings();
        let timeout = settings.request_timeout.saturating_add(hold);
        self.send_apart(&load, timeout, settings.request_tries, abort)
            .map_err(exec_error)
    }

    /// [`Channel::pillar`] with `request_channel_timeout` and `request_channel_tries`.
    fn pillar(&self, load: Value) -> Result<Value, halite_exec::ExecError> {
        let settings = self.auth.settings();
        Channel::pillar(
            self,
            &load,
            settings.request_timeout,
            settings.request_tries,
        )
        .map_err(exec_error)
    }

    fn master_uri(&self) -> Option<String> {
        Some(self.auth.master_uri().to_owned())
    }
}

/// A failed request as the exception Salt's `ReqChannel.send` raises: a timeout is
/// `SaltReqTimeoutError("Message timed out")`, anything else a `SaltClientError`.
fn exec_error(e: Error) -> halite_exec::ExecError {
    match e {
        Error::Timeout { .. } => halite_exec::ExecError::Exception {
            kind: halite_exec::SALT_REQ_TIMEOUT_ERROR,
            message: "Message timed out".to_owned(),
        },
        other => halite_exec::ExecError::Exception {
            kind: "salt.exceptions.SaltClientError",
            message: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::rsa::{EncAlgo, SigAlgo};
    use halite_proto::value::map;

    #[test]
    fn an_encoded_load_makes_the_request_aes_request_makes() {
        let session = Crypticle::generate();
        let who = Requester {
            id: "m1",
            tok: b"token",
            enc_algo: EncAlgo::OaepSha1,
            sig_algo: SigAlgo::Pkcs1v15Sha1,
        };
        let load = map([
            ("id", s("m1")),
            ("cmd", s("_minion_event")),
            ("events", Value::Array(vec![map([("tag", s("t"))])])),
        ]);
        let mut entries = Vec::new();
        for (k, v) in load.as_map().unwrap() {
            entries.extend(value::encode(k));
            entries.extend(value::encode(v));
        }
        let encoded = EncodedLoad { len: 3, entries };
        let a = proto::aes_request(&session, &who, load, "n0", 1700).unwrap();
        let b = encoded_request(&session, &who, &encoded, "n0", 1700).unwrap();
        let plain = |env: &Value| {
            session
                .decrypt(value::get_bytes(env, "load").unwrap())
                .unwrap()
        };
        assert_eq!(plain(&a), plain(&b));
        let strip = |env: &Value| {
            let mut env = env.clone();
            value::remove(&mut env, "load");
            env
        };
        assert_eq!(strip(&a), strip(&b));
    }
}
