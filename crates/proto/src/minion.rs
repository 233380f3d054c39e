//! The minion side of the request and publish channels (salt-protocol.md §3.3–§3.11, §5.3):
//! the counterparts of [`crate::envelope`]'s master-side functions.
//!
//! - [`auth_request`] builds the clear `_auth` body (`AsyncAuth.minion_sign_in_payload`);
//!   [`open_auth_reply_with`] checks the master's signed reply the way
//!   `AsyncAuth.handle_signin_response` does, trusting the master's key as [`KeyTrust`]
//!   says, and returns an [`AuthOutcome`] ([`open_auth_reply`]: Salt's default trust).
//! - [`aes_request`] wraps a load in a v3 request (`AsyncReqChannel._package_load`);
//!   [`open_reply`] opens the nonce-bound `send` reply and [`open_pillar_reply`] the
//!   `send_private` one used for `_pillar`.
//! - [`PublishFrame::parse`], [`PublishFrame::verify`] and [`PublishKey::open`] take a frame
//!   from the publish port apart, check its signature and decrypt it with replay protection.
//!
//! Everything is pure: the caller reads `minion_master.pub` and the verification key
//! `<master_sign_key_name>.pub`, writes `minion_master.pub` when [`Creds::pin`] says so,
//! owns the sockets and the clock, and decides what to log.
//!
//! Trusting the master's key (salt-semantics.md §6.6, `AsyncAuth.verify_master`): the first
//! key is pinned (trust on first use) unless `verify_master_pubkey_sign` asks for a
//! signature; a changed key is refused unless its signature verifies, and then replaces the
//! pin (failover between masters with different keys); `pub_sig` must be sent exactly when
//! the minion verifies (`check_auth_deps`); `master_finger` must match the key's fingerprint.
//!
//! Deviations from Salt, all fail closed or are documented fixes:
//! - Salt writes `minion_master.pub` on first contact *before* it checks the reply's
//!   signature, nonce and `master_finger`; here the key is only handed back for pinning once
//!   every check passed, so a reply that fails a check never pins a key (Salt pins a key
//!   whose fingerprint it then rejects).
//! - Salt verifies a pending reply only when a master key is pinned (there is nothing to
//!   verify it with otherwise); so does this module, and a pending reply never pins a key.
//! - With `verify_master_pubkey_sign`, Salt checks the signature only when the key is new or
//!   changed (or with `always_verify_signature`), so a master whose key is already pinned is
//!   accepted whatever signed it — even a signing key the minion does not trust
//!   (salt#55523, reproduced with stock 3008.3). Here the signature is checked on every
//!   sign-in; `always_verify_signature` only changes what the caller logs.
//! - Salt verifies the signature over the key text exactly as sent; a signature made over
//!   the key file *with* its trailing newline (what `salt-key --gen-signature` wrote before
//!   salt#68930 was fixed, and what such precomputed signature files still hold) never
//!   verifies. Here the signature may cover the `clean_key` form, the text as sent, or the
//!   `clean_key` form plus a newline: all are the same key, signed by the trusted key.
//! - A `pub_sig` that is not base64 or a verification key file that is not an RSA public key
//!   make Salt raise out of its sign-in; here they are [`AuthError`]s like any other refusal.
//! - `master_finger` is compared, as in Salt, with `pem_finger` of the key (the digest of the
//!   lines between the PEM armour), and also accepted when it is the digest of the whole key
//!   file: that is what `salt-key -F master` prints in 3008.3, the value Salt's documentation
//!   says to configure, which a stock 3008.3 minion refuses. Both are digests of the same key.

use crate::crypticle::{self, Crypticle};
use crate::envelope::sha256_hex;
use crate::pem::{clean_key, pem_finger};
use crate::rsa::{EncAlgo, PrivateKey, PublicKey, SigAlgo};
use crate::signing::a2b_base64;
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
    /// True on first contact, or when a changed key's signature verified: the caller must
    /// write `master_pub` to `minion_master.pub`.
    pub pin: bool,
    /// True when `pub_sig` was checked and verified with the verification key.
    pub verified: bool,
}

impl std::fmt::Debug for Creds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Creds")
            .field("publish_port", &self.publish_port)
            .field("pin", &self.pin)
            .field("verified", &self.verified)
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

/// Why a sign-in reply was refused. The messages are Salt's log lines.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The reply is not a signed clear envelope (e.g. the string `"bad load"`).
    #[error("Sign-in attempt failed: {0}")]
    NotSigned(String),
    /// The master sent a public key different from the pinned `minion_master.pub`, and the
    /// minion does not verify signatures.
    #[error("The master key has changed, the salt master could have been subverted, verify salt master's public key")]
    MasterKeyChanged,
    /// The master sent `pub_sig` but the minion does not verify (`check_auth_deps`).
    #[error("The masters sent its public-key signature, but signature verification is not enabled on the minion. Either enable signature verification on the minion or disable signing the public key on the master!")]
    UnexpectedPubSig,
    /// The minion verifies but the master sent no `pub_sig` (`check_auth_deps`).
    #[error("The master did not send its public-key signature, but signature verification is enabled on the minion. Either disable signature verification on the minion or enable signing the public on the master!")]
    MissingPubSig,
    /// The verification key file does not exist.
    #[error("Verification public key {file} does not exist. You need to copy it from the master to the minions pki directory")]
    SignKeyMissing {
        /// `<master_sign_key_name>.pub`.
        file: String,
    },
    /// The verification key file is not an RSA public key.
    #[error("There was an error while verifying the masters public-key signature: the verification public key {file} is not an RSA public key ({reason})")]
    SignKeyInvalid {
        /// `<master_sign_key_name>.pub`.
        file: String,
        /// What the PEM reader said.
        reason: String,
    },
    /// `pub_sig` is not base64 text.
    #[error("There was an error while verifying the masters public-key signature: {0}")]
    PubSigMalformed(String),
    /// `pub_sig` is not a signature of the master's key by the verification key.
    #[error("Received signed public-key from master {master} but signature verification failed!")]
    PubSigFailed {
        /// The master, as named in the configuration.
        master: String,
        /// True when the key is the pinned one (Salt then adds "The masters public could
        /// not be verified. Is the verification pubkey ... up to date?").
        pinned: bool,
    },
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
    /// `master_finger` is not the fingerprint of the key the master sent (Salt exits 42).
    #[error("The specified fingerprint in the master configuration file:\n{expected}\nDoes not match the authenticating master's key:\n{actual}\nVerify that the configured fingerprint matches the fingerprint of the correct master and that this minion is not subject to a man-in-the-middle attack.")]
    MasterFinger {
        /// `master_finger`.
        expected: String,
        /// The fingerprint of the master's key.
        actual: String,
    },
    /// A field is missing, mistyped or does not decrypt.
    #[error("malformed sign-in reply: {0}")]
    Malformed(#[from] Error),
}

/// How the minion trusts the public key a master presents: `verify_master_pubkey_sign`,
/// `always_verify_signature` (the caller's logging only, see the module notes),
/// `master_sign_key_name`, `master_finger`. [`KeyTrust::default`] is Salt's default: trust on
/// first use, no signature, no fingerprint.
#[derive(Debug, Clone, Copy)]
pub struct KeyTrust<'a> {
    /// `verify_master_pubkey_sign`.
    pub verify_sign: bool,
    /// The verification key's file name, `<master_sign_key_name>.pub` (for messages).
    pub sign_key_file: &'a str,
    /// The verification key file's contents; `None` when there is no such file. Only used
    /// with `verify_sign`.
    pub sign_key: Option<&'a [u8]>,
    /// `master_finger`, when set and not empty.
    pub master_finger: Option<&'a str>,
    /// `hash_type`, for the fingerprint.
    pub hash_type: &'a str,
    /// The master as the configuration names it (for messages).
    pub master: &'a str,
}

impl Default for KeyTrust<'_> {
    fn default() -> Self {
        KeyTrust {
            verify_sign: false,
            sign_key_file: "master_sign.pub",
            sign_key: None,
            master_finger: None,
            hash_type: "sha256",
            master: "",
        }
    }
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

/// [`open_auth_reply_with`] with Salt's default trust ([`KeyTrust::default`]).
pub fn open_auth_reply(
    reply: &Value,
    st: &SignInState<'_>,
) -> std::result::Result<AuthOutcome, AuthError> {
    open_auth_reply_with(reply, st, &KeyTrust::default())
}

/// `AsyncAuth.handle_signin_response`: checks a reply to [`auth_request`].
///
/// Checks, in Salt's order: a signed clear envelope; on acceptance the master key
/// ([`KeyTrust`]: `pub_sig` sent exactly when the minion verifies, its signature, a changed
/// key refused unless signed), the X9.31 signature of the AES key, the returned token
/// (not for a changed key: its master could not decrypt a token sealed for the old one);
/// then the signature over the load bytes (with the pinned key, or with the key the reply
/// carries when it is new or verified) and the nonce; last `master_finger`. A pending or
/// rejected reply without a pinned key cannot be verified, as in Salt.
pub fn open_auth_reply_with(
    reply: &Value,
    st: &SignInState<'_>,
    trust: &KeyTrust<'_>,
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
    let verify_key = if let Some(sent) = value::get_str(&inner, "pub_key") {
        let offered = clean_key(sent);
        // Salt compares with the pin only when it sent a token, i.e. when a key is pinned.
        let known = st.token.is_some() && pinned.as_deref() == Some(offered.as_str());
        let changed = st.token.is_some() && pinned.is_some() && !known;
        let verified = check_master_key(&inner, sent, &offered, known, changed, st, trust)?;
        let master = PublicKey::from_pem(offered.as_bytes())?;
        let token = if changed { None } else { st.token };
        let (aes, session, publish_port) = extract_keys(&inner, st, &master, token)?;
        creds = Some(Creds {
            aes,
            session,
            publish_port,
            master_pub: offered,
            pin: pinned.is_none() || changed,
            verified,
        });
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
    let creds = creds.ok_or_else(|| malformed("reply holds neither keys nor ret"))?;
    if let Some(expected) = trust.master_finger.filter(|f| !f.is_empty()) {
        let actual = pem_finger(creds.master_pub.as_bytes(), trust.hash_type)?;
        if actual != expected && !is_key_file_finger(&creds.master_pub, expected, trust.hash_type)?
        {
            return Err(AuthError::MasterFinger {
                expected: expected.to_owned(),
                actual,
            });
        }
    }
    Ok(AuthOutcome::Accepted(creds))
}

/// Whether `finger` is the fingerprint `salt-key -F master` prints for the key
/// `master_clean`: Salt 3008.3's `Key.finger` hashes the whole key file (`pem_finger(key=..)`,
/// armour lines and trailing newline included), not the body `master_finger` is checked
/// against, so the value its documentation tells operators to copy never matches on a stock
/// minion. The file is the `clean_key` text with or without its final newline.
fn is_key_file_finger(master_clean: &str, finger: &str, hash_type: &str) -> Result<bool> {
    let md = openssl::hash::MessageDigest::from_name(hash_type)
        .ok_or_else(|| Error::UnsupportedAlgorithm(hash_type.to_owned()))?;
    for text in [format!("{master_clean}\n"), master_clean.to_owned()] {
        let digest = openssl::hash::hash(md, text.as_bytes())?;
        let hex: Vec<String> = digest.iter().map(|b| format!("{b:02x}")).collect();
        if hex.join(":") == finger {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `check_auth_deps` + the signature part of `verify_master`: whether the offered key may
/// be used. Returns whether its signature was verified.
fn check_master_key(
    inner: &Value,
    sent: &str,
    offered: &str,
    known: bool,
    changed: bool,
    st: &SignInState<'_>,
    trust: &KeyTrust<'_>,
) -> std::result::Result<bool, AuthError> {
    match (value::get(inner, "pub_sig"), trust.verify_sign) {
        (Some(_), false) => Err(AuthError::UnexpectedPubSig),
        (None, true) => Err(AuthError::MissingPubSig),
        (None, false) if changed => Err(AuthError::MasterKeyChanged),
        (None, false) => Ok(false),
        (Some(pub_sig), true) => {
            let file = || trust.sign_key_file.to_owned();
            let pem = trust
                .sign_key
                .ok_or_else(|| AuthError::SignKeyMissing { file: file() })?;
            let text = value::bytes_of(pub_sig).ok_or_else(|| {
                AuthError::PubSigMalformed("pub_sig is not base64 text".to_owned())
            })?;
            let raw = a2b_base64(text).map_err(|e| AuthError::PubSigMalformed(e.to_string()))?;
            let verifier = PublicKey::from_pem(pem).map_err(|e| AuthError::SignKeyInvalid {
                file: file(),
                reason: e.to_string(),
            })?;
            if signed_forms(sent, offered)
                .iter()
                .any(|text| verifier.verify(text.as_bytes(), &raw, st.sig_algo))
            {
                Ok(true)
            } else {
                Err(AuthError::PubSigFailed {
                    master: trust.master.to_owned(),
                    pinned: known,
                })
            }
        }
    }
}

/// The texts of one key a master may have signed: the `clean_key` form (what Salt 3008
/// masters sign and send), the text as sent (older masters send the file with its newline
/// and sign that), and the `clean_key` form with a trailing newline (a signature file made
/// before salt#68930 was fixed).
fn signed_forms(sent: &str, offered: &str) -> Vec<String> {
    let mut forms = vec![offered.to_owned()];
    for form in [sent.to_owned(), format!("{offered}\n")] {
        if !forms.contains(&form) {
            forms.push(form);
        }
    }
    forms
}

/// `decrypt_aes` + `extract_aes` + the session key of `handle_signin_response`: the AES
/// key, the session key and the publish port. `token` is the one the master must echo.
fn extract_keys(
    inner: &Value,
    st: &SignInState<'_>,
    master: &PublicKey,
    token: Option<&[u8]>,
) -> std::result::Result<(String, String, u16), AuthError> {
    let field = |k: &str| value::get_bytes(inner, k).ok_or_else(|| malformed(k));
    let aes_raw = st.key.decrypt(field("aes")?, st.enc_algo)?;
    let aes_str =
        String::from_utf8(aes_raw).map_err(|_| malformed("AES key string is not text"))?;
    if !master.x931_verify(field("sig")?, sha256_hex(aes_str.as_bytes()).as_bytes()) {
        return Err(AuthError::BadAesSig);
    }
    let (aes, echoed) = match aes_str.split_once("_|-") {
        Some((aes, echoed)) => (aes.to_owned(), Some(echoed.as_bytes().to_vec())),
        None => match value::get_bytes(inner, "token") {
            Some(t) => (aes_str.clone(), Some(st.key.decrypt(t, st.enc_algo)?)),
            None => (aes_str.clone(), None),
        },
    };
    if let Some(sent) = token {
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
    Ok((aes, session, publish_port))
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
        accept_reply_with, aes_key_sig, open_aes_request, pillar_reply, publish_frame, ret_reply,
        seal_reply, AcceptKeys, AuthRequest, Request,
    };
    use crate::signing::{b2a_base64, PubKeySignature};
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
        sig_algo: SigAlgo,
    }

    /// What an accepting master puts in its reply besides the keys.
    struct Offer {
        /// The `pub_key` text; the `clean_key` form of the master's key when `None`.
        pub_key: Option<String>,
        pub_sig: Option<Value>,
        /// The minion's `signing_algorithm` (asked in the request).
        sig_algo: SigAlgo,
    }

    impl Offer {
        fn unsigned() -> Offer {
            Offer {
                pub_key: None,
                pub_sig: None,
                sig_algo: SigAlgo::Pkcs1v15Sha1,
            }
        }

        /// A reply from `master` with `pub_sig` computed by `signer`, as a signing master
        /// sends it.
        fn signed(master: &PrivateKey, signer: &PrivateKey, sig_algo: SigAlgo) -> Offer {
            let pub_sig = PubKeySignature::computed(signer.clone(), &pem_of(master))
                .value(sig_algo)
                .unwrap();
            Offer {
                pub_key: None,
                pub_sig: Some(pub_sig),
                sig_algo,
            }
        }
    }

    /// A sign-in answered by Halite's master-side functions with `master`.
    fn exchange(master: &PrivateKey, pinned: Option<&str>, accept: bool) -> Exchange {
        exchange_with(master, pinned, accept.then(Offer::unsigned))
    }

    /// A sign-in answered by `master`: accepted with `offer`, or pending when `None`.
    fn exchange_with(master: &PrivateKey, pinned: Option<&str>, offer: Option<Offer>) -> Exchange {
        let (_, minion, _) = keys();
        let pub_clean = pem_of(minion);
        let nonce = new_nonce();
        let token = pinned.map(|_| new_token());
        let pinned_key = pinned.map(|p| PublicKey::from_pem(p.as_bytes()).unwrap());
        let sig_algo = offer.as_ref().map_or(SigAlgo::Pkcs1v15Sha1, |o| o.sig_algo);
        let body = auth_request(&SignIn {
            id: "m1",
            pub_clean: &pub_clean,
            nonce: &nonce,
            enc_algo: EncAlgo::OaepSha1,
            sig_algo,
            autosign_grains: None,
            token: pinned_key.as_ref().zip(token.as_deref()),
        })
        .unwrap();
        let body = value::encode(&body);
        let Request::Clear { load, version: 3 } = Request::parse(&body, usize::MAX).unwrap() else {
            panic!("not a v3 clear request")
        };
        let req = AuthRequest::parse(&load).unwrap();
        let reply = if let Some(offer) = offer {
            let mpub = offer.pub_key.unwrap_or_else(|| pem_of(master));
            let aes = crypticle::generate_key_string();
            accept_reply_with(
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
                offer.pub_sig,
            )
            .unwrap()
        } else {
            ret_reply(master, &req, Value::Boolean(true)).unwrap()
        };
        Exchange {
            reply: value::decode(&value::encode(&reply)).unwrap(),
            nonce,
            token,
            sig_algo,
        }
    }

    fn state<'a>(x: &'a Exchange, pinned: Option<&'a str>) -> SignInState<'a> {
        SignInState {
            key: &keys().1,
            nonce: &x.nonce,
            pinned,
            token: x.token.as_deref(),
            enc_algo: EncAlgo::OaepSha1,
            sig_algo: x.sig_algo,
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

    // ------------------------------------------------------------ trusting the master key

    /// The signing pair a signing master holds (`master_sign.pem`); the minion has its pub.
    fn signer() -> &'static PrivateKey {
        static K: OnceLock<PrivateKey> = OnceLock::new();
        K.get_or_init(|| PrivateKey::generate(2048).unwrap())
    }

    /// The minion's copy of `master_sign.pub`, as the master wrote it.
    fn signer_pub() -> &'static str {
        static P: OnceLock<String> = OnceLock::new();
        P.get_or_init(|| signer().public_key().unwrap().to_pem().unwrap())
    }

    /// `verify_master_pubkey_sign: True` with `sign_key` as `master_sign.pub`.
    fn verifying(sign_key: &[u8]) -> KeyTrust<'_> {
        KeyTrust {
            verify_sign: true,
            sign_key: Some(sign_key),
            master: "127.0.0.1",
            ..KeyTrust::default()
        }
    }

    fn accepted(out: std::result::Result<AuthOutcome, AuthError>) -> Creds {
        match out {
            Ok(AuthOutcome::Accepted(creds)) => creds,
            other => panic!("not accepted: {other:?}"),
        }
    }

    #[test]
    fn signed_key_verifies_on_first_contact_with_either_algorithm_and_is_pinned() {
        let (master, _, _) = keys();
        for algo in [SigAlgo::Pkcs1v15Sha1, SigAlgo::Pkcs1v15Sha224] {
            let x = exchange_with(master, None, Some(Offer::signed(master, signer(), algo)));
            let trust = verifying(signer_pub().as_bytes());
            let creds = accepted(open_auth_reply_with(&x.reply, &state(&x, None), &trust));
            assert!(creds.pin && creds.verified, "{algo:?}");
            assert_eq!(creds.master_pub, pem_of(master));
        }
        // Signed with SHA-1 but the minion's signing_algorithm is SHA-224: not verified.
        let mut x = exchange_with(
            master,
            None,
            Some(Offer::signed(master, signer(), SigAlgo::Pkcs1v15Sha1)),
        );
        x.sig_algo = SigAlgo::Pkcs1v15Sha224;
        let trust = verifying(signer_pub().as_bytes());
        let out = open_auth_reply_with(&x.reply, &state(&x, None), &trust);
        assert!(
            matches!(out, Err(AuthError::PubSigFailed { pinned: false, .. })),
            "{out:?}"
        );
    }

    #[test]
    fn a_changed_key_with_a_verified_signature_replaces_the_pin() {
        let (master, _, other_master) = keys();
        let old = pem_of(master);
        // The new master cannot decrypt the token sealed for the old key; Salt skips the
        // token check for a verified new key, and so does this module.
        let offer = Offer::signed(other_master, signer(), SigAlgo::Pkcs1v15Sha1);
        let x = exchange_with(other_master, Some(&old), Some(offer));
        let trust = verifying(signer_pub().as_bytes());
        let creds = accepted(open_auth_reply_with(
            &x.reply,
            &state(&x, Some(&old)),
            &trust,
        ));
        assert!(creds.pin && creds.verified);
        assert_eq!(creds.master_pub, pem_of(other_master));
        // The same reply to a minion that does not verify: the key changed, refused.
        let x = exchange(other_master, Some(&old), true);
        assert!(matches!(
            open_auth_reply_with(&x.reply, &state(&x, Some(&old)), &KeyTrust::default()),
            Err(AuthError::MasterKeyChanged)
        ));
    }

    #[test]
    fn the_pinned_key_verified_again_is_kept_and_the_token_still_checked() {
        let (master, _, _) = keys();
        let pinned = pem_of(master);
        let offer = Offer::signed(master, signer(), SigAlgo::Pkcs1v15Sha1);
        let x = exchange_with(master, Some(&pinned), Some(offer));
        let trust = verifying(signer_pub().as_bytes());
        let creds = accepted(open_auth_reply_with(
            &x.reply,
            &state(&x, Some(&pinned)),
            &trust,
        ));
        assert!(!creds.pin && creds.verified);
        let mut st = state(&x, Some(&pinned));
        st.token = Some(b"not the token sent");
        assert!(matches!(
            open_auth_reply_with(&x.reply, &st, &trust),
            Err(AuthError::BadToken)
        ));
    }

    /// salt#55523: Salt accepts a pinned master whatever key signed it.
    #[test]
    fn a_key_signed_by_another_signing_key_is_refused_even_when_pinned() {
        let (master, _, impostor) = keys();
        let pinned = pem_of(master);
        let trust = verifying(signer_pub().as_bytes());
        for (pin, expect_pinned) in [(None, false), (Some(pinned.as_str()), true)] {
            let offer = Offer::signed(master, impostor, SigAlgo::Pkcs1v15Sha1);
            let x = exchange_with(master, pin, Some(offer));
            match open_auth_reply_with(&x.reply, &state(&x, pin), &trust) {
                Err(e @ AuthError::PubSigFailed { pinned, .. }) => {
                    assert_eq!(pinned, expect_pinned);
                    assert_eq!(
                        e.to_string(),
                        "Received signed public-key from master 127.0.0.1 but signature verification failed!"
                    );
                }
                other => panic!("{other:?}"),
            }
        }
        // A changed key signed by another signing key is not a reason to re-pin either.
        let offer = Offer::signed(impostor, impostor, SigAlgo::Pkcs1v15Sha1);
        let x = exchange_with(impostor, Some(&pinned), Some(offer));
        assert!(matches!(
            open_auth_reply_with(&x.reply, &state(&x, Some(&pinned)), &trust),
            Err(AuthError::PubSigFailed { pinned: false, .. })
        ));
    }

    /// salt#68930: signature files made from the key file kept its trailing newline.
    #[test]
    fn a_signature_over_the_key_with_a_trailing_newline_verifies() {
        let (master, _, _) = keys();
        let file_text = master.public_key().unwrap().to_pem().unwrap();
        assert!(file_text.ends_with('\n'));
        let sig = signer()
            .sign(file_text.as_bytes(), SigAlgo::Pkcs1v15Sha1)
            .unwrap();
        let trust = verifying(signer_pub().as_bytes());
        // Sent clean (a 3008 master), as a precomputed signature file's text (a string).
        let offer = Offer {
            pub_key: None,
            pub_sig: Some(s(clean_key(&b2a_base64(&sig)))),
            sig_algo: SigAlgo::Pkcs1v15Sha1,
        };
        let x = exchange_with(master, None, Some(offer));
        let creds = accepted(open_auth_reply_with(&x.reply, &state(&x, None), &trust));
        assert!(creds.verified && creds.pin);
        assert_eq!(creds.master_pub, pem_of(master), "pinned in clean form");
        // Sent with the newline and signed as sent (an older master).
        let offer = Offer {
            pub_key: Some(file_text.clone()),
            pub_sig: Some(bin(b2a_base64(&sig).into_bytes())),
            sig_algo: SigAlgo::Pkcs1v15Sha1,
        };
        let x = exchange_with(master, None, Some(offer));
        let creds = accepted(open_auth_reply_with(&x.reply, &state(&x, None), &trust));
        assert_eq!(creds.master_pub, pem_of(master));
        // Any other text is not the key that was sent.
        let other = signer()
            .sign(format!("{file_text}\n").as_bytes(), SigAlgo::Pkcs1v15Sha1)
            .unwrap();
        let offer = Offer {
            pub_key: None,
            pub_sig: Some(bin(b2a_base64(&other).into_bytes())),
            sig_algo: SigAlgo::Pkcs1v15Sha1,
        };
        let x = exchange_with(master, None, Some(offer));
        assert!(matches!(
            open_auth_reply_with(&x.reply, &state(&x, None), &trust),
            Err(AuthError::PubSigFailed { .. })
        ));
    }

    #[test]
    fn pub_sig_must_be_sent_exactly_when_the_minion_verifies() {
        let (master, _, _) = keys();
        let offer = Offer::signed(master, signer(), SigAlgo::Pkcs1v15Sha1);
        let x = exchange_with(master, None, Some(offer));
        let err =
            open_auth_reply_with(&x.reply, &state(&x, None), &KeyTrust::default()).unwrap_err();
        assert!(matches!(err, AuthError::UnexpectedPubSig));
        assert_eq!(err.to_string(), "The masters sent its public-key signature, but signature verification is not enabled on the minion. Either enable signature verification on the minion or disable signing the public key on the master!");
        let x = exchange(master, None, true);
        let trust = verifying(signer_pub().as_bytes());
        let err = open_auth_reply_with(&x.reply, &state(&x, None), &trust).unwrap_err();
        assert!(matches!(err, AuthError::MissingPubSig));
        assert_eq!(err.to_string(), "The master did not send its public-key signature, but signature verification is enabled on the minion. Either disable signature verification on the minion or enable signing the public on the master!");
        // The stock master's reply carries no pub_sig either.
        let reply = value::decode(vbytes("auth.first", "reply")).unwrap();
        let st = vector_state(fixed("auth_nonce"), None, None);
        assert!(matches!(
            open_auth_reply_with(&reply, &st, &trust),
            Err(AuthError::MissingPubSig)
        ));
        // A pending reply has no key to check: still pending.
        let x = exchange_with(master, None, None);
        assert!(matches!(
            open_auth_reply_with(&x.reply, &state(&x, None), &trust),
            Ok(AuthOutcome::Pending)
        ));
    }

    #[test]
    fn a_missing_or_junk_verification_key_and_a_bad_pub_sig_are_errors() {
        let (master, _, _) = keys();
        let signed = || Some(Offer::signed(master, signer(), SigAlgo::Pkcs1v15Sha1));
        let x = exchange_with(master, None, signed());
        let st = state(&x, None);
        let missing = KeyTrust {
            sign_key: None,
            ..verifying(b"")
        };
        let err = open_auth_reply_with(&x.reply, &st, &missing).unwrap_err();
        assert!(matches!(err, AuthError::SignKeyMissing { .. }));
        assert_eq!(err.to_string(), "Verification public key master_sign.pub does not exist. You need to copy it from the master to the minions pki directory");
        let private_pem = signer().to_pem().unwrap();
        for junk in [
            &b"junk"[..],
            b"",
            b"-----BEGIN PUBLIC KEY-----\n!!\n-----END PUBLIC KEY-----\n",
            private_pem.as_bytes(),
        ] {
            let err = open_auth_reply_with(&x.reply, &st, &verifying(junk)).unwrap_err();
            assert!(matches!(err, AuthError::SignKeyInvalid { .. }), "{err:?}");
            assert!(err.to_string().contains("master_sign.pub"), "{err}");
        }
        let trust = verifying(signer_pub().as_bytes());
        for bad in [s("not base64 *"), Value::from(5), Value::Nil] {
            let offer = Offer {
                pub_key: None,
                pub_sig: Some(bad.clone()),
                sig_algo: SigAlgo::Pkcs1v15Sha1,
            };
            let x = exchange_with(master, None, Some(offer));
            let out = open_auth_reply_with(&x.reply, &state(&x, None), &trust);
            assert!(
                matches!(out, Err(AuthError::PubSigMalformed(_))),
                "{bad}: {out:?}"
            );
        }
        // Base64 of something that is no signature at all.
        let offer = Offer {
            pub_key: None,
            pub_sig: Some(s("AAAA")),
            sig_algo: SigAlgo::Pkcs1v15Sha1,
        };
        let x = exchange_with(master, None, Some(offer));
        assert!(matches!(
            open_auth_reply_with(&x.reply, &state(&x, None), &trust),
            Err(AuthError::PubSigFailed { .. })
        ));
    }

    #[test]
    fn master_finger_must_be_the_fingerprint_of_the_key_sent() {
        let (master, _, impostor) = keys();
        let file = master.public_key().unwrap().to_pem().unwrap();
        for hash_type in ["sha256", "md5"] {
            let finger = pem_finger(file.as_bytes(), hash_type).unwrap();
            let pinned_finger = KeyTrust {
                master_finger: Some(&finger),
                hash_type,
                ..KeyTrust::default()
            };
            let x = exchange(master, None, true);
            let creds = accepted(open_auth_reply_with(
                &x.reply,
                &state(&x, None),
                &pinned_finger,
            ));
            assert!(creds.pin);
            let x = exchange(impostor, None, true);
            match open_auth_reply_with(&x.reply, &state(&x, None), &pinned_finger) {
                Err(e @ AuthError::MasterFinger { .. }) => {
                    let actual = pem_finger(pem_of(impostor).as_bytes(), hash_type).unwrap();
                    assert_eq!(
                        e.to_string(),
                        format!("The specified fingerprint in the master configuration file:\n{finger}\nDoes not match the authenticating master's key:\n{actual}\nVerify that the configured fingerprint matches the fingerprint of the correct master and that this minion is not subject to a man-in-the-middle attack.")
                    );
                }
                other => panic!("{other:?}"),
            }
        }
        // The fingerprint `salt-key -F master` prints in 3008.3: the digest of the whole
        // key file (armour and newline included).
        let file_finger = {
            let digest =
                openssl::hash::hash(openssl::hash::MessageDigest::sha256(), file.as_bytes())
                    .unwrap();
            let hex: Vec<String> = digest.iter().map(|b| format!("{b:02x}")).collect();
            hex.join(":")
        };
        let key_file = KeyTrust {
            master_finger: Some(&file_finger),
            ..KeyTrust::default()
        };
        let x = exchange(master, None, true);
        accepted(open_auth_reply_with(&x.reply, &state(&x, None), &key_file));
        let x = exchange(impostor, None, true);
        assert!(matches!(
            open_auth_reply_with(&x.reply, &state(&x, None), &key_file),
            Err(AuthError::MasterFinger { .. })
        ));
        // Empty means unset, as Salt's default ''.
        let x = exchange(impostor, None, true);
        let unset = KeyTrust {
            master_finger: Some(""),
            ..KeyTrust::default()
        };
        accepted(open_auth_reply_with(&x.reply, &state(&x, None), &unset));
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
        let body = value::encode(&body);
        let Request::Aes {
            id, blob, version, ..
        } = Request::parse(&body, usize::MAX).unwrap()
        else {
            panic!("not an aes request")
        };
        assert_eq!((id, version), ("m1", 3));
        let req = open_aes_request(&session, id, blob).unwrap();
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
