//! The encrypted request channel (`salt/channel/client.py:AsyncReqChannel`): v3 requests
//! with the session key, `tries` attempts of `timeout` each, and one re-authentication plus
//! retry when the master does not accept the session (`"bad load"`, a restarted master).
//!
//! One REQ socket serves the whole process; requests from concurrent job threads take
//! turns on it, as Salt serialises them on its channel lock.

use crate::auth::{Auth, Session};
use crate::transport::ReqSocket;
use crate::Error;
use halite_proto::minion::{self as proto, PrivateReplyKeys, ReplyError, Requester};
use halite_proto::{value, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Sends encrypted requests to the master.
pub struct Channel {
    auth: Arc<Auth>,
    req: Mutex<ReqSocket>,
}

impl Channel {
    /// A channel on `req` (usually a fresh [`ReqSocket`] for the master's request port).
    pub fn new(auth: Arc<Auth>, req: ReqSocket) -> Channel {
        Channel {
            auth,
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
        let mut attempt = 1;
        loop {
            match self.crypted_transfer(load, timeout) {
                Ok(v) => return Ok(v),
                Err(e @ (Error::Stopped | Error::Rejected)) => return Err(e),
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
    fn crypted_transfer(&self, load: &Value, timeout: Duration) -> Result<Value, Error> {
        let session = self.auth.session()?;
        match self.transfer(&session, load, timeout) {
            Err(Error::Reply(ReplyError::Reauth(why))) => {
                tracing::debug!("Re-authenticating: {why}");
                let session = self.auth.reauthenticate(session.generation)?;
                self.transfer(&session, load, timeout)
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

    /// Encrypts and sends one request; returns the undecoded reply and the nonce.
    fn exchange(
        &self,
        session: &Session,
        load: &Value,
        timeout: Duration,
    ) -> Result<(Value, String), Error> {
        let settings = self.auth.settings();
        let nonce = proto::new_nonce();
        let ts = chrono::Utc::now().timestamp();
        let body = proto::aes_request(
            &session.session,
            &self.requester(settings),
            load.clone(),
            &nonce,
            ts,
        )
        .map_err(|e| Error::Reply(ReplyError::Invalid(e)))?;
        let reply = self
            .req
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .request(&value::encode(&body), timeout)?;
        let reply = value::decode(&reply).map_err(|e| Error::Reply(ReplyError::Invalid(e)))?;
        Ok((reply, nonce))
    }

    fn transfer(&self, session: &Session, load: &Value, timeout: Duration) -> Result<Value, Error> {
        let (reply, nonce) = self.exchange(session, load, timeout)?;
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
                match self.exchange(&session, load, timeout) {
                    Ok(r) => break r,
                    Err(e @ (Error::Stopped | Error::Rejected)) => return Err(e),
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
