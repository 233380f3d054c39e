//! Request routing: one table of clear commands, one table of encrypted commands.
//!
//! [`Master::handle_request`] takes the bytes of one request from the request port and
//! returns the bytes of the reply — or nothing, when a handler holds the reply to send it
//! later through the transport ([`ReplyTo`]: `pub_ret` waiting for a job to complete, a
//! peer runner). Everything a peer can send is checked here before a handler sees it:
//! size, msgpack, envelope, protocol version, and for encrypted commands the session key,
//! the inner id and the token. Nothing it sends can panic a worker — a bad request is
//! logged and answered with `"bad load"` (which makes a genuine minion re-authenticate),
//! and the worker moves on. Should a handler panic all the same (a bug), the panic is
//! caught here, logged with the command and the peer, counted, and answered with Salt's
//! [`EXCEPTION_REPLY`] (see [`crate::boundary`]).
//!
//! The handlers live by concern in [`crate::handlers`]: `auth`, `publish`, `minion`
//! (returns, events, pillar), `peer`, `runner`, `wheel`, `fileserver`.

use crate::boundary;
use crate::keys::AcceptedKey;
use crate::Master;
use halite_metrics::RequestRefusal;
use halite_proto::auth;
use halite_proto::crypticle::Crypticle;
use halite_proto::envelope::{self, Request, BAD_LOAD};
use halite_proto::rsa::{EncAlgo, SigAlgo};
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use halite_transport::{PeerId, ServerTransport};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// A clear-channel command handler.
type ClearHandler = fn(&Master, ClearCall<'_>) -> ClearReply;

/// What a clear-command handler sees.
pub struct ClearCall<'a> {
    /// The clear load.
    pub load: &'a Value,
    /// For a handler that answers later ([`ClearReply::Held`]).
    pub reply_to: ClearReplyTo,
}

/// How a clear command's result is sent back.
pub enum ClearReply {
    /// Sent as is.
    Send(Value),
    /// The handler kept [`ClearCall::reply_to`] and answers later (an `external_auth`
    /// login runs off the request workers).
    Held,
}

/// Where a held clear reply goes.
pub struct ClearReplyTo {
    peer: PeerId,
    transport: Arc<dyn ServerTransport>,
}

impl ClearReplyTo {
    /// Sends `ret` (from any thread).
    pub fn send(self, ret: &Value) {
        if let Err(e) = self.transport.reply(self.peer, value::encode(ret)) {
            tracing::warn!("A held reply could not be sent: {e}");
        }
    }
}

/// The clear commands this master answers (`ClearFuncs`, plus `_auth`). Test builds add
/// [`TEST_PANIC_COMMAND`], whose handler panics, to prove the panic boundary.
const CLEAR_HANDLERS: &[(&str, ClearHandler)] = &[
    ("_auth", |m, c| ClearReply::Send(m.handle_auth(c.load))),
    ("publish", Master::handle_publish),
    ("runner", Master::handle_runner),
    ("wheel", Master::handle_wheel),
    ("mk_token", Master::handle_mk_token),
    ("get_token", Master::handle_get_token),
    ("rm_token", Master::handle_rm_token),
    ("ping", |_, c| ClearReply::Send(c.load.clone())),
    #[cfg(test)]
    (TEST_PANIC_COMMAND, |_, _| {
        panic!("the test-only command panics")
    }),
];

/// A clear command that exists only in test builds: its handler panics.
#[cfg(test)]
pub(crate) const TEST_PANIC_COMMAND: &str = "_halite_test_panic";

/// Salt's reply to a request whose handling raised an exception
/// (`ReqServerChannel.handle_message`); the `salt` CLI prints it as the error.
pub const EXCEPTION_REPLY: &str = "Some exception handling minion payload";

/// How an encrypted command's result is sent back.
pub enum AesReply {
    /// `send`: encrypted with the minion's session key, bound to the request nonce.
    Send(Value),
    /// `send_private`: already a complete reply (the pillar envelope).
    Private(Value),
    /// The handler kept [`AesCall::reply_to`] and answers later.
    Held,
}

/// Where a held reply goes: the peer, and the session key and nonce to seal it with.
pub struct ReplyTo {
    peer: PeerId,
    session: Arc<Crypticle>,
    nonce: Option<String>,
    transport: Arc<dyn ServerTransport>,
}

impl ReplyTo {
    /// Seals `ret` as a `send` reply and sends it (from any thread).
    pub fn send(self, ret: &Value) {
        let body = match envelope::seal_reply(&self.session, ret, self.nonce.as_deref()) {
            Ok(v) => v,
            Err(e) => {
                tracing::error!("Could not encrypt a held reply: {e}");
                bad_load()
            }
        };
        if let Err(e) = self.transport.reply(self.peer, value::encode(&body)) {
            tracing::warn!("A held reply could not be sent: {e}");
        }
    }

    /// Sends `body`, already a complete reply (as [`AesReply::Private`]: the pillar
    /// envelope), from any thread.
    pub fn send_private(self, body: &Value) {
        if let Err(e) = self.transport.reply(self.peer, value::encode(body)) {
            tracing::warn!("A held reply could not be sent: {e}");
        }
    }
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
    /// For a handler that answers later ([`AesReply::Held`]).
    pub reply_to: ReplyTo,
}

/// An encrypted-command handler.
type AesHandler = fn(&Master, AesCall<'_>) -> AesReply;

/// The encrypted commands this master answers (`AESFuncs`), besides the fileserver's
/// ([`aes_handler`]). Any other command gets `{}`, as Salt answers unknown commands.
const AES_HANDLERS: &[(&str, AesHandler)] = &[
    ("_return", Master::handle_return),
    ("_pillar", Master::handle_pillar),
    ("_minion_event", Master::handle_minion_event),
    ("_register_resources", Master::handle_register_resources),
    ("_master_opts", Master::handle_master_opts),
    ("minion_pub", Master::handle_minion_pub),
    ("minion_publish", Master::handle_minion_publish),
    ("pub_ret", Master::handle_pub_ret),
    ("minion_runner", Master::handle_minion_runner),
];

/// The fileserver's commands (`halite_fileserver::Command::ALL`), all answered by
/// [`Master::handle_fileserver`].
fn fileserver_commands() -> impl Iterator<Item = &'static str> {
    halite_fileserver::Command::ALL
        .iter()
        .map(|(name, _)| *name)
}

/// The handler of encrypted command `cmd`, with the command's static name.
fn aes_handler(cmd: &str) -> Option<(&'static str, AesHandler)> {
    AES_HANDLERS
        .iter()
        .copied()
        .find(|(name, _)| *name == cmd)
        .or_else(|| {
            fileserver_commands()
                .find(|name| *name == cmd)
                .map(|name| (name, Master::handle_fileserver as AesHandler))
        })
}

/// Every command this master answers: the `cmd` values the request-latency histogram
/// knows.
pub(crate) fn command_names() -> impl Iterator<Item = &'static str> {
    let clear = CLEAR_HANDLERS.iter().map(|(name, _)| *name);
    let aes = AES_HANDLERS.iter().map(|(name, _)| *name);
    clear.chain(aes).chain(fileserver_commands())
}

pub(crate) fn bad_load() -> Value {
    s(BAD_LOAD)
}

impl Master {
    /// Handles one request body from `peer` and returns the reply body, or `None` when a
    /// handler holds the reply and sends it later.
    ///
    /// The panic boundary of the request path: a panic anywhere in handling the request is
    /// caught, logged at `error` with what the request was (the command once it is known)
    /// and the peer, counted ([`crate::boundary::Stats::request_panics`]), and answered with
    /// [`EXCEPTION_REPLY`], as Salt answers a request whose handler raised. The worker goes
    /// on with the next request.
    pub fn handle_request(&self, body: &[u8], peer: &PeerId) -> Option<Vec<u8>> {
        let reply = self
            .isolate_request(
                peer,
                || "a request".to_owned(),
                || self.dispatch(body, peer),
            )
            .unwrap_or_else(|| Some(s(EXCEPTION_REPLY)));
        reply.map(|v| value::encode(&v))
    }

    /// Runs one step of handling a request from `peer`; a panic is logged with `what()`,
    /// counted and answered as `None`.
    fn isolate_request<T>(
        &self,
        peer: &PeerId,
        what: impl FnOnce() -> String,
        f: impl FnOnce() -> T,
    ) -> Option<T> {
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(v) => Some(v),
            Err(payload) => {
                let n = self.stats.request_panicked();
                tracing::error!(
                    ?peer,
                    panics = n,
                    "Panic while handling {}: {}; answered with an error, the worker goes on",
                    what(),
                    boundary::panic_message(payload.as_ref())
                );
                None
            }
        }
    }

    /// The size and decode front: `max_request_size` (also libzmq's `maxmsgsize` on the
    /// request port, so a larger body normally never gets here), then the envelope read
    /// without decoding it (`Request::parse`: a body that is not a map is refused from its
    /// first byte, an encrypted load is borrowed, not copied), `max_clear_request_size`
    /// for clear requests, and a clear load decoded within a budget proportional to its
    /// length.
    fn dispatch(&self, body: &[u8], peer: &PeerId) -> Option<Value> {
        let started = Instant::now();
        let limit = usize::try_from(self.cfg.max_request_size).unwrap_or(usize::MAX);
        if body.len() > limit {
            tracing::warn!(
                size = body.len(),
                limit,
                "Request larger than the limit refused"
            );
            return Some(bad_load());
        }
        let max_clear = usize::try_from(self.cfg.max_clear_request_size).unwrap_or(usize::MAX);
        let request = match Request::parse(body, max_clear) {
            Ok(r) => r,
            Err(halite_proto::Error::Msgpack(e)) => {
                tracing::warn!(error = %e, "Undecodable request on the request port");
                return Some(map([("msg", bad_load())]));
            }
            Err(halite_proto::Error::TooLarge { size, limit }) => {
                tracing::warn!(
                    size,
                    limit,
                    "Unencrypted request larger than max_clear_request_size refused"
                );
                return Some(s(format!(
                    "{BAD_LOAD}: {size} bytes is over this master's max_clear_request_size \
                     ({limit} bytes) for a request that is not encrypted"
                )));
            }
            Err(e) => {
                tracing::warn!(error = %e, "Malformed request on the request port");
                return Some(bad_load());
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
            return Some(bad_load());
        }
        match request {
            Request::Clear { load, .. } => {
                let cmd = value::get_str(&load, "cmd").unwrap_or("");
                let Some((_, handler)) = CLEAR_HANDLERS.iter().find(|(name, _)| *name == cmd)
                else {
                    tracing::debug!(cmd, "Unknown clear command answered with {{}}");
                    return Some(Value::Map(vec![]));
                };
                let call = ClearCall {
                    load: &load,
                    reply_to: ClearReplyTo {
                        peer: peer.clone(),
                        transport: self.transport.clone(),
                    },
                };
                let what = || format!("the clear command {cmd:?}");
                let outcome = self.isolate_request(peer, what, || handler(self, call));
                self.metrics.observe_request(cmd, started.elapsed());
                match outcome {
                    Some(ClearReply::Send(v)) => Some(v),
                    Some(ClearReply::Held) => None,
                    None => Some(s(EXCEPTION_REPLY)),
                }
            }
            Request::Aes {
                id,
                blob,
                enc_algo,
                sig_algo,
                ..
            } => self.dispatch_aes(id, blob, enc_algo, sig_algo, peer, started),
        }
    }

    /// An encrypted request, checked (session key, ttl, accepted key, token) and handed to
    /// its handler; `started` is when its handling began (the latency histogram).
    fn dispatch_aes(
        &self,
        id: &str,
        blob: &[u8],
        enc_algo: EncAlgo,
        sig_algo: SigAlgo,
        peer: &PeerId,
        started: Instant,
    ) -> Option<Value> {
        let refused = |reason| {
            self.metrics.count_refusal(reason);
            Some(bad_load())
        };
        if !auth::valid_id(id) {
            tracing::warn!(id, "Encrypted request from an invalid id refused");
            return refused(RequestRefusal::InvalidId);
        }
        let Some(session) = self.sessions.get(id, SystemTime::now()) else {
            tracing::info!("Encrypted request from {id} without a current session key; asking it to re-authenticate");
            return refused(RequestRefusal::NoSession);
        };
        let req = match envelope::open_aes_request(&session, id, blob) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(
                    "Failed to decrypt a request from {id}: {e}; asking it to re-authenticate"
                );
                return refused(RequestRefusal::Undecryptable);
            }
        };
        if self.request_expired(id, &req.load) {
            return refused(RequestRefusal::Expired);
        }
        let Some(key) = self.keys.accepted(id) else {
            tracing::warn!("Encrypted request from {id}, which has no accepted key, refused");
            return refused(RequestRefusal::NotAccepted);
        };
        if !req.tok.as_deref().is_some_and(|t| key.verify_tok(t)) {
            tracing::warn!("Minion token of {id} did not verify; request refused");
            return refused(RequestRefusal::BadToken);
        }
        let cmd = value::get_str(&req.load, "cmd").unwrap_or("");
        let mut timed = None;
        let reply = match aes_handler(cmd) {
            Some((name, handler)) => {
                timed = Some(name);
                let call = AesCall {
                    id,
                    load: req.load,
                    nonce: req.nonce.as_deref(),
                    key: &key,
                    enc_algo,
                    sig_algo,
                    reply_to: ReplyTo {
                        peer: peer.clone(),
                        session: session.clone(),
                        nonce: req.nonce.clone(),
                        transport: self.transport.clone(),
                    },
                };
                let what = || format!("the encrypted command {name:?} from {id}");
                match self.isolate_request(peer, what, || handler(self, call)) {
                    Some(reply) => reply,
                    None => return Some(s(EXCEPTION_REPLY)),
                }
            }
            None => {
                tracing::debug!(
                    cmd,
                    minion = id,
                    "Unknown encrypted command answered with {{}}"
                );
                AesReply::Send(Value::Map(vec![]))
            }
        };
        let out = match reply {
            AesReply::Send(v) => Some(
                match envelope::seal_reply(&session, &v, req.nonce.as_deref()) {
                    Ok(v) => v,
                    Err(e) => {
                        tracing::error!("Could not encrypt the reply to {id}: {e}");
                        bad_load()
                    }
                },
            ),
            AesReply::Private(v) => Some(v),
            AesReply::Held => None,
        };
        if let Some(name) = timed {
            self.metrics.observe_request(name, started.elapsed());
        }
        out
    }
}
