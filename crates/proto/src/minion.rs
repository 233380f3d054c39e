//! The minion side of the request and publish channels (salt-protocol.md §3.3–§3.11, §5.3):
//! the counterparts of [`crate::envelope`]'s master-side functions.
//!
//! - [`auth_request`] builds the clear `_auth` body (`AsyncAuth.minion_sign_in_payload`);
//!   [`open_auth_reply`] checks the master's signed reply the way
//!   `AsyncAuth.handle_signin_response` does and returns an [`AuthOutcome`].
//! - [`aes_request`] wraps a load in a v3 request (`AsyncReqChannel._package_load`);
//!   [`open_reply`] opens the nonce-bound `send` reply and [`open_pillar_reply`] the
//!   `send_private` one used for `_pillar`.
//! - [`PublishFrame::parse`], [`PublishFrame::verify`] and [`PublishKey::open`] take a frame
//!   from the publish port apart, check its signature and decrypt it with replay protection.
//!
//! Everything is pure: the caller reads `minion_master.pub`, writes it when
//! [`Creds::pin`] says so, owns the sockets and the clock, and decides what to log.
//!
//! Deviations from Salt, both fail closed:
//! - Salt writes `minion_master.pub` on first contact *before* it checks the reply's
//!   signature and nonce; here the key is only handed back for pinning once every check
//!   passed, so a reply that fails a check never pins a key.
//! - Salt verifies a pending reply only when a master key is pinned (there is nothing to
//!   verify it with otherwise); so does this module, and a pending reply never pins a key.

use crate::crypticle::{self, Crypticle};
use crate::envelope::sha256_hex;
use crate::pem::clean_key;
use crate::rsa::{EncAlgo, PrivateKey, PublicKey, SigAlgo};
use crate::value::{self, bin, s};
use crate::{Error, Result, Value};

/// A fresh request nonce: 32 lowercase hex characters, like `uuid.uuid4().hex`.
pub fn new_nonce() -> String {
    let mut raw = [0u8; 16];
    openssl::rand::rand_bytes(&mut raw).expect("the OpenSSL RNG does not fail once seeded");
    hex::encode(raw)
}

/// A fresh sign-in token (`AsyncAuth.token`): the ASCII of a random Crypticle key string.
/// The master decrypts it and sends it back encrypted to the minion, proving it holds the
/// master key the minion pinned.
pub fn new_token() -> Vec<u8> {
    crypticle::generate_key_string().into_bytes()
}

/// What a minion puts in every `_auth` request.
#[derive(Debug, Clone, Copy)]
pub struct SignIn<'a> {
    /// The minion id.
    pub id: &'a str,
    /// The minion public key, `clean_key` form.
    pub pub_clean: &'a str,
    /// The request nonce the reply must echo.
    pub nonce: &'a str,
    /// `encryption_algorithm`.
    pub enc_algo: EncAlgo,
    /// `signing_algorithm`.
    pub sig_algo: SigAlgo,
    /// `autosign_grains`, when configured.
    pub autosign_grains: Option<&'a Value>,
    /// The pinned master key and the plaintext token, when a master key is pinned (Salt
    /// sends a token exactly when `minion_master.pub` exists).
    pub token: Option<(&'a PublicKey, &'a [u8])>,
}

/// The `_auth` request body: `{"enc": "clear", "load": {cmd, id, nonce, enc_algo, sig_algo,
/// [autosign_grains], [token], pub}, "version": 3}`, keys in Salt's order.
pub fn auth_request(sign_in: &SignIn<'_>) -> Result<Value> {
    let mut load = vec![
        (s("cmd"), s("_auth")),
        (s("id"), s(sign_in.id)),
        (s("nonce"), s(sign_in.nonce)),
        (s("enc_algo"), s(sign_in.enc_algo.name())),
        (s("sig_algo"), s(sign_in.sig_algo.name())),
    ];
    if let Some(grains) = sign_in.autosign_grains {
        load.push((s("autosign_grains"), grains.clone()));
    }
    if let Some((master, token)) = sign_in.token {
        load.push((s("token"), bin(master.encrypt(token, sign_in.enc_algo)?)));
    }
    load.push((s("pub"), s(sign_in.pub_clean)));
    Ok(Value::Map(vec![
        (s("enc"), s("clear")),
        (s("load"), Value::Map(load)),
        (s("version"), Value::from(3)),
    ]))
}

/// Keys and port handed over by an accepting master.
#[derive(Clone)]
pub struct Creds {
    /// The global publish AES key string.
    pub aes: String,
    /// This minion's session key string (requests and replies).
    pub session: String,
    /// Where the master publishes.
    pub publish_port: u16,
    /// The master public key, `clean_key` form.
    pub master_pub: String,
    /// True on first contact: the caller must write `master_pub` to `minion_master.pub`.
    pub pin: bool,
}

impl std::fmt::Debug for Creds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Creds")
            .field("publish_port", &self.publish_port)
            .field("pin", &self.pin)
            .finish_non_exhaustive()
    }
}

/// What the master said to a sign-in that passed every check.
#[derive(Debug, Clone)]
pub enum AuthOutcome {
    /// The key is accepted.
    Accepted(Creds),
    /// The key waits in `minions_pre` (`ret` truthy): wait `acceptance_wait_time`, retry.
    Pending,
    /// `ret` is falsy: the key is rejected or denied.
    Rejected,
    /// `ret: "full"`: the master reached `max_minions`.
    Full,
    /// The master does not support the minion's `encryption_algorithm`.
    BadEncAlgo,
    /// The master does not support the minion's `signing_algorithm`.
    BadSigAlgo,
}

/// Why a sign-in reply was refused.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The reply is not a signed clear envelope (e.g. the string `"bad load"`).
    #[error("Sign-in attempt failed: {0}")]
    NotSigned(String),
    /// The master sent a public key different from the pinned `minion_master.pub`.
    #[error("The master key has changed, the salt master could have been subverted, verify salt master's public key")]
    MasterKeyChanged,
    /// The master sent `pub_sig`, which needs `verify_master_pubkey_sign` (not supported).
    #[error("The masters sent its public-key signature, but signature verification is not enabled on the minion. Either enable it, or disable signing on the master.")]
    UnexpectedPubSig,
    /// The master did not prove it holds the pinned key: the token it returned is not ours.
    #[error("The master failed to decrypt the random minion token")]
    BadToken,
    /// The X9.31 signature over the AES key digest does not verify.
    #[error("The AES key signature from the master did not validate")]
    BadAesSig,
    /// The PKCS#1 v1.5 signature over the reply load does not verify.
    #[error("The payload signature did not validate.")]
    BadSignature,
    /// The reply echoes another nonce (a replayed or misrouted reply).
    #[error("The payload nonce did not validate.")]
    BadNonce,
    /// A field is missing, mistyped or does not decrypt.
    #[error("malformed sign-in reply: {0}")]
    Malformed(#[from] Error),
}

/// What the minion knows when it reads a sign-in reply.
#[derive(Debug, Clone, Copy)]
pub struct SignInState<'a> {
    /// The minion's private key.
    pub key: &'a PrivateKey,
    /// The nonce sent in the request.
    pub nonce: &'a str,
    /// The pinned master key (`minion_master.pub`, any PEM form), if any.
    pub pinned: Option<&'a str>,
    /// The plaintext token sent in the request (present exactly when a key is pinned).
    pub token: Option<&'a [u8]>,
    /// `encryption_algorithm`.
    pub enc_algo: EncAlgo,
    /// `signing_algorithm`.
    pub sig_algo: SigAlgo,
}

fn malformed(what: &str) -> AuthError {
    AuthError::Malformed(Error::Malformed(what.to_owned()))
}

/// `AsyncAuth.handle_signin_response`: checks a reply to [`auth_request`].
///
/// Checks, in Salt's order: a signed clear envelope; on acceptance the master key against
/// the pin (refusing a changed key), the X9.31 signature of the AES key, the returned token;
/// then the signature over the load bytes (with the pinned key, or on first contact with the
/// key the reply carries) and the nonce. A pending or rejected reply without a pinned key
/// cannot be verified, as in Salt.
pub fn open_auth_reply(
    reply: &Value,
    st: &SignInState<'_>,
) -> std::result::Result<AuthOutcome, AuthError> {
    let Some(load) = value::get(reply, "load") else {
        return Err(AuthError::NotSigned(describe(reply)));
    };
    if matches!(load, Value::Map(_)) {
        return match value::get_str(load, "ret") {
            Some("bad enc algo") => Ok(AuthOutcome::BadEncAlgo),
            Some("bad sig algo") => Ok(AuthOutcome::BadSigAlgo),
            _ => Err(AuthError::NotSigned(describe(reply))),
        };
    }
    let signed = value::bytes_of(load).ok_or_else(|| malformed("load is not bytes"))?;
    let sig = value::get_bytes(reply, "sig").ok_or_else(|| malformed("reply has no sig"))?;
    let inner = value::decode(signed)?;
    let pinned = st.pinned.map(clean_key);

    let mut creds = None;
    let verify_key = if let Some(pub_key) = value::get_str(&inner, "pub_key") {
        let offered = clean_key(pub_key);
        if let Some(pinned) = &pinned {
            if *pinned != offered && st.token.is_some() {
                return Err(AuthError::MasterKeyChanged);
            }
        }
        if value::get(&inner, "pub_sig").is_some() {
            return Err(AuthError::UnexpectedPubSig);
        }
        let master = PublicKey::from_pem(offered.as_bytes())?;
        let c = extract_keys(&inner, st, &master, &offered, pinned.is_none())?;
        creds = Some(c);
        Some(master)
    } else {
        match &pinned {
            Some(p) => Some(PublicKey::from_pem(p.as_bytes())?),
            None => None,
        }
    };
    if let Some(master) = &verify_key {
        if !master.verify(signed, sig, st.sig_algo) {
            return Err(AuthError::BadSignature);
        }
    }
    if value::get_str(&inner, "nonce") != Some(st.nonce) {
        return Err(AuthError::BadNonce);
    }
    if let Some(ret) = value::get(&inner, "ret") {
        return Ok(if !value::truthy(ret) {
            AuthOutcome::Rejected
        } else if value::str_of(ret) == Some("full") {
            AuthOutcome::Full
        } else {
            AuthOutcome::Pending
        });
    }
    creds
        .map(AuthOutcome::Accepted)
        .ok_or_else(|| malformed("reply holds neither keys nor ret"))
}

/// `decrypt_aes` + `extract_aes` + the session key of `handle_signin_response`.
fn extract_keys(
    inner: &Value,
    st: &SignInState<'_>,
    master: &PublicKey,
    master_clean: &str,
    pin: bool,
) -> std::result::Result<Creds, AuthError> {
    let field = |k: &str| value::get_bytes(inner, k).ok_or_else(|| malformed(k));
    let aes_raw = st.key.decrypt(field("aes")?, st.enc_algo)?;
    let aes_str =
        String::from_utf8(aes_raw).map_err(|_| malformed("AES key string is not text"))?;
    if !master.x931_verify(field("sig")?, sha256_hex(aes_str.as_bytes()).as_bytes()) {
        return Err(AuthError::BadAesSig);
    }
    let (aes, echoed) = match aes_str.split_once("_|-") {
        Some((aes, token)) => (aes.to_owned(), Some(token.as_bytes().to_vec())),
        None => match value::get_bytes(inner, "token") {
            Some(t) => (aes_str.clone(), Some(st.key.decrypt(t, st.enc_algo)?)),
            None => (aes_str.clone(), None),
        },
    };
    if let Some(sent) = st.token {
        if echoed.as_deref() != Some(sent) {
            return Err(AuthError::BadToken);
        }
    }
    let session_raw = st.key.decrypt(field("session")?, st.enc_algo)?;
    let session =
        String::from_utf8(session_raw).map_err(|_| malformed("session key is not text"))?;
    Crypticle::new(&aes)?;
    Crypticle::new(&session)?;
    let publish_port = value::get_i64(inner, "publish_port")
        .and_then(|p| u16::try_from(p).ok())
        .ok_or_else(|| malformed("publish_port"))?;
    Ok(Creds {
        aes,
        session,
        publish_port,
        master_pub: master_clean.to_owned(),
        pin,
    })
}

/// A short rendering of an unexpected reply for the log (Salt logs the whole payload).
fn describe(v: &Value) -> String {
    let text = match value::str_of(v) {
        Some(t) => t.to_owned(),
        None => v.to_string(),
    };
    text.chars().take(200).collect()
}

/// Who sends a v3 request.
#[derive(Debug, Clone, Copy)]
pub struct Requester<'a> {
    /// The minion id (outer and inner `id`).
    pub id: &'a str,
    /// X9.31 signature of `b"salt"` with the minion key (`AsyncAuth.gen_token`).
    pub tok: &'a [u8],
    /// `encryption_algorithm`.
    pub enc_algo: EncAlgo,
    /// `signing_algorithm`.
    pub sig_algo: SigAlgo,
}

/// A v3 encrypted request body (`AsyncReqChannel._package_load`): the load (a map) gets
/// `nonce`, `ts`, `tok` and `id` (replaced in place when present) and is encrypted with the
/// session key; the outer map is `{enc, load, version, id, enc_algo, sig_algo}`.
pub fn aes_request(
    session: &Crypticle,
    who: &Requester<'_>,
    mut load: Value,
    nonce: &str,
    ts: i64,
) -> Result<Value> {
    if !matches!(load, Value::Map(_)) {
        return Err(Error::Malformed("request load is not a map".into()));
    }
    value::set(&mut load, "nonce", s(nonce));
    value::set(&mut load, "ts", Value::from(ts));
    value::set(&mut load, "tok", bin(who.tok.to_vec()));
    value::set(&mut load, "id", s(who.id));
    Ok(Value::Map(vec![
        (s("enc"), s("aes")),
        (s("load"), bin(session.dumps(&load, None)?)),
        (s("version"), Value::from(3)),
        (s("id"), s(who.id)),
        (s("enc_algo"), s(who.enc_algo.name())),
        (s("sig_algo"), s(who.sig_algo.name())),
    ]))
}

/// Why a reply to an encrypted request could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ReplyError {
    /// The reply does not authenticate with the session key (the master answered
    /// `"bad load"`, restarted, or forgot the session): re-authenticate and retry once, as
    /// Salt does on `AuthenticationError`.
    #[error("the master did not accept the request or the reply does not authenticate ({0}); re-authentication needed")]
    Reauth(String),
    /// The reply authenticates but is unusable (wrong nonce, bad signature, not a map...).
    #[error("invalid reply: {0}")]
    Invalid(#[from] Error),
}

/// Opens a `send` reply: `Crypticle(session).loads(reply, nonce)`. An empty reply is `Nil`,
/// as Salt passes falsy replies through.
pub fn open_reply(
    session: &Crypticle,
    reply: &Value,
    nonce: &str,
) -> std::result::Result<Value, ReplyError> {
    if !value::truthy(reply) {
        return Ok(Value::Nil);
    }
    let Some(blob) = value::bytes_of(reply) else {
        return Err(ReplyError::Reauth(describe(reply)));
    };
    match session.loads(blob, Some(nonce)) {
        Ok(v) => Ok(v),
        Err(Error::BadHmac) => Err(ReplyError::Reauth(describe(reply))),
        Err(e) => Err(ReplyError::Invalid(e)),
    }
}

/// What a minion needs to open a `send_private` (`_pillar`) reply.
#[derive(Debug, Clone, Copy)]
pub struct PrivateReplyKeys<'a> {
    /// The minion's private key (decrypts the per-reply key).
    pub key: &'a PrivateKey,
    /// The pinned master key (checks the signature).
    pub master: &'a PublicKey,
    /// `encryption_algorithm`.
    pub enc_algo: EncAlgo,
    /// `signing_algorithm`.
    pub sig_algo: SigAlgo,
}

/// `AsyncReqChannel.crypted_transfer_decode_dictentry(dictkey="pillar")` +
/// `RemotePillarMixin.validate_return`: decrypts the per-reply key, opens the signed
/// envelope, checks the master's signature, the embedded key and the nonce; the pillar must
/// be a map.
pub fn open_pillar_reply(
    reply: &Value,
    keys: &PrivateReplyKeys<'_>,
    nonce: &str,
) -> std::result::Result<Value, ReplyError> {
    let Some(enc_key) = value::get_bytes(reply, "key") else {
        return Err(ReplyError::Reauth(describe(reply)));
    };
    let k = keys.key.decrypt(enc_key, keys.enc_algo)?;
    let k =
        std::str::from_utf8(&k).map_err(|_| Error::Malformed("pillar key is not text".into()))?;
    let blob = value::require_bytes(reply, "pillar")?;
    let signed = Crypticle::new(k)?.loads(blob, None)?;
    let data = value::require_bytes(&signed, "data")?;
    let sig = value::require_bytes(&signed, "sig")?;
    if !keys.master.verify(data, sig, keys.sig_algo) {
        return Err(ReplyError::Reauth(
            "Pillar payload signature failed to validate.".into(),
        ));
    }
    let data = value::decode(data)?;
    if value::get_bytes(&data, "key") != Some(enc_key) {
        return Err(Error::Malformed("Key verification failed.".into()).into());
    }
    if value::get_str(&data, "nonce") != Some(nonce) {
        return Err(Error::BadPayload("Pillar nonce verification failed.".into()).into());
    }
    match value::get(&data, "pillar") {
        Some(p @ Value::Map(_)) => Ok(p.clone()),
        _ => Err(Error::Malformed("the pillar is not a map".into()).into()),
    }
}

/// One frame from the publish port, taken apart but not yet trusted.
#[derive(Debug, Clone)]
pub struct PublishFrame {
    /// The outer `enc` (`"aes"` for every job; Salt ignores anything else).
    pub enc: String,
    /// The encrypted load.
    pub blob: Vec<u8>,
    /// The master's signature over `blob`, with its algorithm, when the master signs.
    pub sig: Option<(Vec<u8>, String)>,
}

/// Why a publish was dropped.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The frame is not a msgpack map with `enc` and a bytes `load`.
    #[error("malformed publish frame: {0}")]
    Malformed(String),
    /// `enc` is not `"aes"`: Salt only handles encrypted publishes.
    #[error("publish with unsupported enc {0:?} ignored")]
    NotAes(String),
    /// `sign_pub_messages` is on and the frame carries no signature.
    #[error("Message signing is enabled but the payload has no signature.")]
    Unsigned,
    /// The signature does not verify with the pinned master key (or names an unknown
    /// algorithm).
    #[error("Message signature failed to validate.")]
    BadSignature,
    /// The load does not decrypt with the current AES key: re-authenticate (the master may
    /// have rotated it) and retry once.
    #[error("publish does not decrypt with the current AES key")]
    Decrypt,
    /// The load decrypts but is not a Salt payload (no `pickle::` prefix, not a map).
    #[error("Discarding load from master because it could not be decrypted: {0}")]
    NotAPayload(String),
    /// The serial is not above the last one seen with this key: a replay.
    #[error("A message with an invalid serial was received. this serial: {serial} last serial: {last} The minion will not honor this request.")]
    Replay {
        /// The serial in the publish.
        serial: i64,
        /// The last serial accepted with this key.
        last: i64,
    },
}

impl PublishFrame {
    /// Takes a publish frame apart (`salt.payload.loads` of the single ZeroMQ frame).
    pub fn parse(frame: &[u8]) -> std::result::Result<Self, PublishError> {
        let outer = value::decode(frame).map_err(|e| PublishError::Malformed(e.to_string()))?;
        if !matches!(outer, Value::Map(_)) {
            return Err(PublishError::Malformed("not a map".into()));
        }
        let enc = value::get_str(&outer, "enc")
            .ok_or_else(|| PublishError::Malformed("no enc".into()))?
            .to_owned();
        if enc != "aes" {
            return Err(PublishError::NotAes(enc));
        }
        let blob = value::get_bytes(&outer, "load")
            .ok_or_else(|| PublishError::Malformed("load is not bytes".into()))?
            .to_vec();
        let sig = value::get_bytes(&outer, "sig")
            .filter(|s| !s.is_empty())
            .map(|sig| {
                let algo = value::get_str(&outer, "sig_algo").unwrap_or("PKCS1v15-SHA1");
                (sig.to_vec(), algo.to_owned())
            });
        Ok(Self { enc, blob, sig })
    }

    /// `AsyncPubChannel._verify_master_signature` for a minion with `sign_pub_messages`.
    pub fn verify(&self, master: &PublicKey) -> std::result::Result<(), PublishError> {
        let (sig, algo) = self.sig.as_ref().ok_or(PublishError::Unsigned)?;
        let algo = SigAlgo::parse(algo).map_err(|_| PublishError::BadSignature)?;
        if master.verify(&self.blob, sig, algo) {
            Ok(())
        } else {
            Err(PublishError::BadSignature)
        }
    }
}

/// The publish AES key with its replay counter (Salt keeps the serial in the Crypticle, so
/// a new key starts again from 0).
#[derive(Debug, Clone)]
pub struct PublishKey {
    crypticle: Crypticle,
    last_serial: i64,
}

impl PublishKey {
    /// A key that has seen no publish yet.
    pub fn new(crypticle: Crypticle) -> Self {
        Self {
            crypticle,
            last_serial: 0,
        }
    }

    /// The key string (to tell whether a re-authentication changed the key).
    pub fn key_string(&self) -> &str {
        self.crypticle.key_string()
    }

    /// The last serial accepted with this key.
    pub fn last_serial(&self) -> i64 {
        self.last_serial
    }

    /// `Crypticle.loads` with the serial check: decrypts, pops `serial` and refuses one that
    /// is not above the last accepted. The job load must be a map.
    pub fn open(&mut self, frame: &PublishFrame) -> std::result::Result<Value, PublishError> {
        let mut load = match self.crypticle.loads(&frame.blob, None) {
            Ok(v) => v,
            Err(Error::BadHmac) => return Err(PublishError::Decrypt),
            Err(e) => return Err(PublishError::NotAPayload(e.to_string())),
        };
        if !matches!(load, Value::Map(_)) {
            return Err(PublishError::NotAPayload("the load is not a map".into()));
        }
        if let Some(serial) = value::remove(&mut load, "serial") {
            let serial = match &serial {
                Value::Integer(i) => i.as_i64(),
                _ => None,
            }
            .ok_or_else(|| PublishError::NotAPayload("serial is not an integer".into()))?;
            if serial <= self.last_serial {
                return Err(PublishError::Replay {
                    serial,
                    last: self.last_serial,
                });
            }
            self.last_serial = serial;
        }
        Ok(load)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{
        accept_reply, aes_key_sig, open_aes_request, pillar_reply, publish_frame, ret_reply,
        seal_reply, AcceptKeys, AuthRequest, Request,
    };
    use crate::value::map;
    use std::sync::OnceLock;

    // ------------------------------------------------------------------ stock Salt vectors

    const VECTORS: &[u8] = include_bytes!("../tests/vectors/salt-3008.3.msgpack");
    const MASTER_PEM: &str = include_str!("../tests/vectors/keys/master.pem");
    const MASTER_PUB: &str = include_str!("../tests/vectors/keys/master.pub");
    const MINION_PEM: &str = include_str!("../tests/vectors/keys/minion.pem");
    const MINION_PUB: &str = include_str!("../tests/vectors/keys/minion.pub");
    const OTHER_PUB: &str = include_str!("../tests/vectors/keys/other.pub");

    fn vectors() -> &'static Value {
        static V: OnceLock<Value> = OnceLock::new();
        V.get_or_init(|| value::decode(VECTORS).unwrap())
    }

    fn at(path: &str) -> &'static Value {
        path.split('.')
            .fold(vectors(), |v, k| value::get(v, k).unwrap())
    }

    fn vbytes(path: &str, key: &str) -> &'static [u8] {
        value::get_bytes(at(path), key).unwrap()
    }

    fn fixed(key: &str) -> &'static str {
        value::get_str(at("fixed"), key).unwrap()
    }

    fn vmaster() -> &'static PrivateKey {
        static K: OnceLock<PrivateKey> = OnceLock::new();
        K.get_or_init(|| PrivateKey::from_pem(MASTER_PEM.as_bytes()).unwrap())
    }

    fn vminion() -> &'static PrivateKey {
        static K: OnceLock<PrivateKey> = OnceLock::new();
        K.get_or_init(|| PrivateKey::from_pem(MINION_PEM.as_bytes()).unwrap())
    }

    /// The value as Python's `raw=True` decoder sees it: `str` and `bin` alike.
    fn raw(v: &Value) -> Value {
        match v {
            Value::String(s) => Value::Binary(s.as_bytes().to_vec()),
            Value::Array(a) => Value::Array(a.iter().map(raw).collect()),
            Value::Map(m) => Value::Map(m.iter().map(|(k, v)| (raw(k), raw(v))).collect()),
            other => other.clone(),
        }
    }

    /// Decodes msgpack bytes and compares them as Python would read them.
    fn same_wire(ours: &[u8], theirs: &[u8]) -> bool {
        raw(&value::decode(ours).unwrap()) == raw(&value::decode(theirs).unwrap())
    }

    fn keys_of(v: &Value) -> Vec<&str> {
        v.as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| value::str_of(k).unwrap())
            .collect()
    }

    fn vector_state<'a>(
        nonce: &'a str,
        pinned: Option<&'a str>,
        token: Option<&'a [u8]>,
    ) -> SignInState<'a> {
        SignInState {
            key: vminion(),
            nonce,
            pinned,
            token,
            enc_algo: EncAlgo::OaepSha1,
            sig_algo: SigAlgo::Pkcs1v15Sha1,
        }
    }

    #[test]
    fn first_contact_auth_request_reads_as_the_stock_minion_s() {
        let pub_clean = clean_key(MINION_PUB);
        let body = auth_request(&SignIn {
            id: fixed("minion_id"),
            pub_clean: &pub_clean,
            nonce: fixed("auth_nonce"),
            enc_algo: EncAlgo::OaepSha1,
            sig_algo: SigAlgo::Pkcs1v15Sha1,
            autosign_grains: None,
            token: None,
        })
        .unwrap();
        // Same maps, keys in the same order; only the msgpack string widths may differ
        // (Halite writes str8 and bin where Python writes str16), which Python reads alike.
        assert!(same_wire(
            &value::encode(&body),
            vbytes("auth.first", "request")
        ));
    }

    #[test]
    fn reauth_request_has_stock_layout_and_a_token_the_master_decrypts() {
        let pub_clean = clean_key(MINION_PUB);
        let master_pub = PublicKey::from_pem(MASTER_PUB.as_bytes()).unwrap();
        let token = fixed("token").as_bytes();
        let ours = auth_request(&SignIn {
            id: fixed("minion_id"),
            pub_clean: &pub_clean,
            nonce: fixed("auth_nonce"),
            enc_algo: EncAlgo::OaepSha1,
            sig_algo: SigAlgo::Pkcs1v15Sha1,
            autosign_grains: None,
            token: Some((&master_pub, token)),
        })
        .unwrap();
        let theirs = value::decode(vbytes("auth.reauth", "request")).unwrap();
        assert_eq!(keys_of(&ours), keys_of(&theirs));
        let (ol, tl) = (
            value::get(&ours, "load").unwrap(),
            value::get(&theirs, "load").unwrap(),
        );
        assert_eq!(keys_of(ol), keys_of(tl));
        let req = AuthRequest::parse(ol).unwrap();
        let tok = vmaster()
            .decrypt(req.token.as_deref().unwrap(), req.enc_algo)
            .unwrap();
        assert_eq!(tok, token);
    }

    #[test]
    fn stock_accept_reply_opens_on_first_contact_and_asks_to_pin() {
        let reply = value::decode(vbytes("auth.first", "reply")).unwrap();
        let out = open_auth_reply(&reply, &vector_state(fixed("auth_nonce"), None, None));
        let AuthOutcome::Accepted(creds) = out.unwrap() else {
            panic!("not accepted")
        };
        assert_eq!(creds.aes, fixed("aes"));
        assert_eq!(creds.session, fixed("session"));
        assert_eq!(creds.publish_port, 4505);
        assert_eq!(creds.master_pub, clean_key(MASTER_PUB));
        assert!(creds.pin);
    }

    #[test]
    fn stock_reauth_reply_opens_with_the_pinned_key_and_token() {
        let reply = value::decode(vbytes("auth.reauth", "reply")).unwrap();
        let token = fixed("token").as_bytes();
        let st = vector_state(fixed("auth_nonce"), Some(MASTER_PUB), Some(token));
        let AuthOutcome::Accepted(creds) = open_auth_reply(&reply, &st).unwrap() else {
            panic!("not accepted")
        };
        assert_eq!(creds.aes, fixed("aes"));
        assert!(!creds.pin);
        // Another token than the one sent: the master did not prove it holds its key.
        let st = vector_state(fixed("auth_nonce"), Some(MASTER_PUB), Some(b"other"));
        assert!(matches!(
            open_auth_reply(&reply, &st),
            Err(AuthError::BadToken)
        ));
    }

    #[test]
    fn stock_reply_from_a_master_other_than_the_pinned_one_is_refused() {
        let reply = value::decode(vbytes("auth.reauth", "reply")).unwrap();
        let token = fixed("token").as_bytes();
        let st = vector_state(fixed("auth_nonce"), Some(OTHER_PUB), Some(token));
        assert!(matches!(
            open_auth_reply(&reply, &st),
            Err(AuthError::MasterKeyChanged)
        ));
    }

    #[test]
    fn stock_pending_reply_is_pending_and_a_wrong_nonce_is_refused() {
        let reply = value::decode(vbytes("auth.pending", "reply")).unwrap();
        let nonce = fixed("auth_nonce");
        for pinned in [None, Some(MASTER_PUB)] {
            let out = open_auth_reply(&reply, &vector_state(nonce, pinned, None)).unwrap();
            assert!(matches!(out, AuthOutcome::Pending));
        }
        let other = "f".repeat(32);
        assert!(matches!(
            open_auth_reply(&reply, &vector_state(&other, Some(MASTER_PUB), None)),
            Err(AuthError::BadNonce)
        ));
        // Signed by the vector master: a minion pinned to another key refuses it.
        assert!(matches!(
            open_auth_reply(&reply, &vector_state(nonce, Some(OTHER_PUB), None)),
            Err(AuthError::BadSignature)
        ));
    }

    #[test]
    fn stock_unsupported_algorithm_replies_are_recognised() {
        let mut seen = Vec::new();
        for case in at("auth.bad_algorithms").as_array().unwrap() {
            let reply = value::decode(value::get_bytes(case, "reply").unwrap()).unwrap();
            seen.push(
                match open_auth_reply(&reply, &vector_state("n", None, None)) {
                    Ok(AuthOutcome::BadEncAlgo) => "enc",
                    Ok(AuthOutcome::BadSigAlgo) => "sig",
                    Err(AuthError::NotSigned(_)) => "unsigned",
                    other => panic!("unexpected {other:?}"),
                },
            );
        }
        assert!(seen.contains(&"enc") && seen.contains(&"sig"), "{seen:?}");
    }

    #[test]
    fn v3_request_plaintext_reads_as_the_stock_minion_s() {
        let session = Crypticle::new(fixed("session")).unwrap();
        let salt_body = value::decode(vbytes("requests.send", "request")).unwrap();
        let salt_plain = session
            .decrypt(value::get_bytes(&salt_body, "load").unwrap())
            .unwrap();
        let salt_load = session
            .loads(value::get_bytes(&salt_body, "load").unwrap(), None)
            .unwrap();
        // The caller's load: the stock one without what the channel adds.
        let mut load = salt_load.clone();
        for k in ["nonce", "ts", "tok"] {
            value::remove(&mut load, k);
        }
        let tok = vminion().x931_sign(b"salt").unwrap();
        let who = Requester {
            id: fixed("minion_id"),
            tok: &tok,
            enc_algo: EncAlgo::OaepSha1,
            sig_algo: SigAlgo::Pkcs1v15Sha1,
        };
        let ts = value::get_i64(&salt_load, "ts").unwrap();
        let nonce = value::get_str(at("requests"), "nonce").unwrap();
        let ours = aes_request(&session, &who, load, nonce, ts).unwrap();
        assert_eq!(keys_of(&ours), keys_of(&salt_body));
        let our_plain = session
            .decrypt(value::get_bytes(&ours, "load").unwrap())
            .unwrap();
        let prefix = crypticle::PICKLE_PREFIX.len();
        assert_eq!(our_plain[..prefix], salt_plain[..prefix]);
        assert!(same_wire(&our_plain[prefix..], &salt_plain[prefix..]));
    }

    #[test]
    fn stock_send_reply_opens_with_the_nonce() {
        let session = Crypticle::new(fixed("session")).unwrap();
        let reply = value::decode(vbytes("requests.send", "reply")).unwrap();
        let nonce = value::get_str(at("requests"), "nonce").unwrap();
        let got = open_reply(&session, &reply, nonce).unwrap();
        assert_eq!(got, map([("stored", Value::from(true))]));
        assert!(matches!(
            open_reply(&session, &reply, &"0".repeat(32)),
            Err(ReplyError::Invalid(_))
        ));
    }

    #[test]
    fn stock_pillar_reply_opens_and_checks_nonce() {
        let reply = value::decode(vbytes("requests.pillar", "reply")).unwrap();
        let master = PublicKey::from_pem(MASTER_PUB.as_bytes()).unwrap();
        let keys = PrivateReplyKeys {
            key: vminion(),
            master: &master,
            enc_algo: EncAlgo::OaepSha1,
            sig_algo: SigAlgo::Pkcs1v15Sha1,
        };
        let nonce = value::get_str(at("requests"), "nonce").unwrap();
        let pillar = open_pillar_reply(&reply, &keys, nonce).unwrap();
        assert_eq!(value::get_str(&pillar, "role"), Some("web"));
        assert_eq!(value::get_bytes(&pillar, "secret"), Some(&[0, 0xff][..]));
        assert!(open_pillar_reply(&reply, &keys, &"0".repeat(32)).is_err());
        let other = PublicKey::from_pem(OTHER_PUB.as_bytes()).unwrap();
        let wrong = PrivateReplyKeys {
            master: &other,
            ..keys
        };
        assert!(matches!(
            open_pillar_reply(&reply, &wrong, nonce),
            Err(ReplyError::Reauth(_))
        ));
    }

    #[test]
    fn stock_publish_frames_verify_decrypt_and_drop_replays() {
        let master = PublicKey::from_pem(MASTER_PUB.as_bytes()).unwrap();
        let cases = value::get(vectors(), "publish")
            .unwrap()
            .as_array()
            .unwrap();
        for case in cases {
            let signed = value::get(case, "signed") == Some(&Value::Boolean(true));
            let frame = PublishFrame::parse(value::get_bytes(case, "frame").unwrap()).unwrap();
            if signed {
                frame.verify(&master).unwrap();
            } else {
                assert!(matches!(frame.verify(&master), Err(PublishError::Unsigned)));
            }
            let aes = Crypticle::new(value::get_str(case, "aes").unwrap()).unwrap();
            let mut key = PublishKey::new(aes);
            let load = key.open(&frame).unwrap();
            assert_eq!(value::get(&load, "serial"), None);
            assert_eq!(value::get_str(&load, "fun"), Some("test.ping"));
            assert_eq!(key.last_serial(), 1);
            assert!(matches!(
                key.open(&frame),
                Err(PublishError::Replay { serial: 1, last: 1 })
            ));
        }
    }

    // --------------------------------------------------- against Halite's master side

    fn keys() -> &'static (PrivateKey, PrivateKey, PrivateKey) {
        static K: OnceLock<(PrivateKey, PrivateKey, PrivateKey)> = OnceLock::new();
        K.get_or_init(|| {
            (
                PrivateKey::generate(2048).unwrap(),
                PrivateKey::generate(2048).unwrap(),
                PrivateKey::generate(2048).unwrap(),
            )
        })
    }

    fn pem_of(k: &PrivateKey) -> String {
        clean_key(&k.public_key().unwrap().to_pem().unwrap())
    }

    struct Exchange {
        reply: Value,
        nonce: String,
        token: Option<Vec<u8>>,
    }

    /// A sign-in answered by Halite's master-side functions with `master`.
    fn exchange(master: &PrivateKey, pinned: Option<&str>, accept: bool) -> Exchange {
        let (_, minion, _) = keys();
        let pub_clean = pem_of(minion);
        let nonce = new_nonce();
        let token = pinned.map(|_| new_token());
        let pinned_key = pinned.map(|p| PublicKey::from_pem(p.as_bytes()).unwrap());
        let body = auth_request(&SignIn {
            id: "m1",
            pub_clean: &pub_clean,
            nonce: &nonce,
            enc_algo: EncAlgo::OaepSha1,
            sig_algo: SigAlgo::Pkcs1v15Sha1,
            autosign_grains: None,
            token: pinned_key.as_ref().zip(token.as_deref()),
        })
        .unwrap();
        let body = value::decode(&value::encode(&body)).unwrap();
        let Request::Clear { load, version: 3 } = Request::parse(&body).unwrap() else {
            panic!("not a v3 clear request")
        };
        let req = AuthRequest::parse(&load).unwrap();
        let reply = if accept {
            let mpub = pem_of(master);
            let aes = crypticle::generate_key_string();
            accept_reply(
                master,
                &PublicKey::from_pem(req.pub_pem.as_bytes()).unwrap(),
                &req,
                &AcceptKeys {
                    master_pub: &mpub,
                    publish_port: 4505,
                    aes: &aes,
                    session: &crypticle::generate_key_string(),
                    aes_sig: &aes_key_sig(master, &aes).unwrap(),
                },
            )
            .unwrap()
        } else {
            ret_reply(master, &req, Value::Boolean(true)).unwrap()
        };
        Exchange {
            reply: value::decode(&value::encode(&reply)).unwrap(),
            nonce,
            token,
        }
    }

    fn state<'a>(x: &'a Exchange, pinned: Option<&'a str>) -> SignInState<'a> {
        SignInState {
            key: &keys().1,
            nonce: &x.nonce,
            pinned,
            token: x.token.as_deref(),
            enc_algo: EncAlgo::OaepSha1,
            sig_algo: SigAlgo::Pkcs1v15Sha1,
        }
    }

    #[test]
    fn halite_master_accepts_first_contact_and_reauth_with_token() {
        let (master, _, _) = keys();
        let x = exchange(master, None, true);
        let AuthOutcome::Accepted(first) = open_auth_reply(&x.reply, &state(&x, None)).unwrap()
        else {
            panic!("not accepted")
        };
        assert!(first.pin);
        assert_eq!(first.master_pub, pem_of(master));
        let pinned = first.master_pub.clone();
        let x = exchange(master, Some(&pinned), true);
        let out = open_auth_reply(&x.reply, &state(&x, Some(&pinned))).unwrap();
        assert!(matches!(
            out,
            AuthOutcome::Accepted(Creds { pin: false, .. })
        ));
    }

    #[test]
    fn a_changed_master_key_is_refused() {
        let (master, _, impostor) = keys();
        let pinned = pem_of(master);
        let x = exchange(impostor, Some(&pinned), true);
        assert!(matches!(
            open_auth_reply(&x.reply, &state(&x, Some(&pinned))),
            Err(AuthError::MasterKeyChanged)
        ));
    }

    #[test]
    fn pending_reply_from_halite_master_is_pending() {
        let (master, _, _) = keys();
        let x = exchange(master, None, false);
        assert!(matches!(
            open_auth_reply(&x.reply, &state(&x, None)).unwrap(),
            AuthOutcome::Pending
        ));
    }

    #[test]
    fn tampered_or_unsigned_auth_replies_are_refused() {
        let (master, _, _) = keys();
        let x = exchange(master, None, true);
        // Flip a byte of the signature.
        let mut bad = x.reply.clone();
        let mut sig = value::get_bytes(&bad, "sig").unwrap().to_vec();
        sig[10] ^= 1;
        value::set(&mut bad, "sig", bin(sig));
        assert!(matches!(
            open_auth_reply(&bad, &state(&x, None)),
            Err(AuthError::BadSignature)
        ));
        for reply in [s("bad load"), map([("enc", s("clear"))]), Value::Nil] {
            assert!(matches!(
                open_auth_reply(&reply, &state(&x, None)),
                Err(AuthError::NotSigned(_))
            ));
        }
        let garbage = map([("load", bin(vec![0xc1])), ("sig", bin(vec![1]))]);
        assert!(matches!(
            open_auth_reply(&garbage, &state(&x, None)),
            Err(AuthError::Malformed(_))
        ));
    }

    fn who(tok: &[u8]) -> Requester<'_> {
        Requester {
            id: "m1",
            tok,
            enc_algo: EncAlgo::OaepSha1,
            sig_algo: SigAlgo::Pkcs1v15Sha1,
        }
    }

    #[test]
    fn aes_request_opens_on_the_master_and_the_reply_opens_on_the_minion() {
        let (_, minion, _) = keys();
        let session = Crypticle::generate();
        let tok = minion.x931_sign(b"salt").unwrap();
        let nonce = new_nonce();
        assert_eq!(nonce.len(), 32);
        let load = map([("cmd", s("_return")), ("id", s("old")), ("jid", s("1"))]);
        let body = aes_request(&session, &who(&tok), load, &nonce, 7).unwrap();
        let body = value::decode(&value::encode(&body)).unwrap();
        let Request::Aes {
            id, blob, version, ..
        } = Request::parse(&body).unwrap()
        else {
            panic!("not an aes request")
        };
        assert_eq!((id.as_str(), version), ("m1", 3));
        let req = open_aes_request(&session, &id, &blob).unwrap();
        assert_eq!(keys_of(&req.load), ["cmd", "id", "jid", "ts"]);
        assert_eq!(value::get_i64(&req.load, "ts"), Some(7));
        assert!(minion
            .public_key()
            .unwrap()
            .x931_verify(&req.tok.unwrap(), b"salt"));
        let reply = seal_reply(&session, &Value::Nil, req.nonce.as_deref()).unwrap();
        assert_eq!(open_reply(&session, &reply, &nonce).unwrap(), Value::Nil);
        let other = seal_reply(&session, &Value::Nil, Some(&new_nonce())).unwrap();
        assert!(matches!(
            open_reply(&session, &other, &nonce),
            Err(ReplyError::Invalid(_))
        ));
    }

    #[test]
    fn bad_load_and_foreign_replies_ask_for_reauth() {
        let session = Crypticle::generate();
        let nonce = new_nonce();
        let foreign = seal_reply(&Crypticle::generate(), &Value::Nil, Some(&nonce)).unwrap();
        for reply in [s("bad load"), foreign, map([("msg", s("bad load"))])] {
            assert!(
                matches!(
                    open_reply(&session, &reply, &nonce),
                    Err(ReplyError::Reauth(_))
                ),
                "{reply}"
            );
        }
        assert_eq!(
            open_reply(&session, &Value::Nil, &nonce).unwrap(),
            Value::Nil
        );
        assert!(aes_request(&session, &who(b"t"), s("x"), &nonce, 0).is_err());
    }

    #[test]
    fn halite_pillar_reply_opens_and_foreign_ones_are_refused() {
        let (master, minion, impostor) = keys();
        let mpub = master.public_key().unwrap();
        let pillar = map([("role", s("db"))]);
        let nonce = new_nonce();
        let reply = pillar_reply(
            master,
            &minion.public_key().unwrap(),
            EncAlgo::OaepSha1,
            SigAlgo::Pkcs1v15Sha1,
            &pillar,
            &nonce,
        )
        .unwrap();
        let keys = PrivateReplyKeys {
            key: minion,
            master: &mpub,
            enc_algo: EncAlgo::OaepSha1,
            sig_algo: SigAlgo::Pkcs1v15Sha1,
        };
        assert_eq!(open_pillar_reply(&reply, &keys, &nonce).unwrap(), pillar);
        assert!(open_pillar_reply(&reply, &keys, &new_nonce()).is_err());
        let forged = pillar_reply(
            impostor,
            &minion.public_key().unwrap(),
            EncAlgo::OaepSha1,
            SigAlgo::Pkcs1v15Sha1,
            &pillar,
            &nonce,
        )
        .unwrap();
        assert!(matches!(
            open_pillar_reply(&forged, &keys, &nonce),
            Err(ReplyError::Reauth(_))
        ));
        assert!(matches!(
            open_pillar_reply(&s("bad load"), &keys, &nonce),
            Err(ReplyError::Reauth(_))
        ));
        let not_a_map = pillar_reply(
            master,
            &minion.public_key().unwrap(),
            EncAlgo::OaepSha1,
            SigAlgo::Pkcs1v15Sha1,
            &Value::from(1),
            &nonce,
        )
        .unwrap();
        assert!(matches!(
            open_pillar_reply(&not_a_map, &keys, &nonce),
            Err(ReplyError::Invalid(_))
        ));
    }

    fn job(serial: i64) -> Value {
        map([
            ("fun", s("test.ping")),
            ("jid", s(format!("2026000000000000000{serial}"))),
            ("serial", Value::from(serial)),
        ])
    }

    #[test]
    fn publishes_from_halite_master_verify_decrypt_and_replays_are_dropped() {
        let (master, _, impostor) = keys();
        let mpub = master.public_key().unwrap();
        let aes = Crypticle::generate();
        let mut key = PublishKey::new(aes.clone());
        let sign = Some((master, SigAlgo::Pkcs1v15Sha1));
        let f2 = PublishFrame::parse(&publish_frame(&aes, &job(2), sign).unwrap()).unwrap();
        f2.verify(&mpub).unwrap();
        assert_eq!(
            value::get_str(&key.open(&f2).unwrap(), "fun"),
            Some("test.ping")
        );
        let f1 = PublishFrame::parse(&publish_frame(&aes, &job(1), sign).unwrap()).unwrap();
        assert!(matches!(
            key.open(&f1),
            Err(PublishError::Replay { serial: 1, last: 2 })
        ));
        assert!(matches!(
            key.open(&f2),
            Err(PublishError::Replay { serial: 2, last: 2 })
        ));
        // A new key (after re-authentication) starts counting again.
        assert!(PublishKey::new(aes.clone()).open(&f1).is_ok());

        let forged = publish_frame(&aes, &job(3), Some((impostor, SigAlgo::Pkcs1v15Sha1))).unwrap();
        assert!(matches!(
            PublishFrame::parse(&forged).unwrap().verify(&mpub),
            Err(PublishError::BadSignature)
        ));
        let unsigned = PublishFrame::parse(&publish_frame(&aes, &job(3), None).unwrap()).unwrap();
        assert!(matches!(
            unsigned.verify(&mpub),
            Err(PublishError::Unsigned)
        ));

        let rotated = publish_frame(&Crypticle::generate(), &job(4), None).unwrap();
        assert!(matches!(
            key.open(&PublishFrame::parse(&rotated).unwrap()),
            Err(PublishError::Decrypt)
        ));
        let not_a_map = publish_frame(&aes, &Value::from(5), None).unwrap();
        assert!(matches!(
            key.open(&PublishFrame::parse(&not_a_map).unwrap()),
            Err(PublishError::NotAPayload(_))
        ));
        // The serial was not consumed by the failures.
        assert_eq!(key.last_serial(), 2);
    }

    #[test]
    fn garbage_publish_frames_are_errors_not_panics() {
        let clear = value::encode(&map([("enc", s("clear")), ("load", map([("x", s("y"))]))]));
        assert!(matches!(
            PublishFrame::parse(&clear),
            Err(PublishError::NotAes(_))
        ));
        for frame in [
            &b""[..],
            b"\xc1garbage",
            b"broadcast",
            &value::encode(&s("x")),
            &value::encode(&map([("enc", s("aes"))])),
            &value::encode(&map([("enc", s("aes")), ("load", Value::from(1))])),
        ] {
            assert!(matches!(
                PublishFrame::parse(frame),
                Err(PublishError::Malformed(_))
            ));
        }
    }
}
