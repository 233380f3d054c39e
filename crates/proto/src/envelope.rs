//! Request, reply and publish envelopes of the ZeroMQ channels (salt-protocol.md §3–§5).
//!
//! Master side: [`Request::parse`] classifies a body received on the request port;
//! [`AuthRequest`] reads `_auth`; [`accept_reply`] (with `pub_sig`: [`accept_reply_with`]) /
//! [`ret_reply`] build the signed clear replies; [`open_aes_request`] decrypts a v3 request
//! with the minion's session key; [`seal_reply`] and [`pillar_reply`] encrypt answers;
//! [`publish_frame`] builds one frame for the publish port.

use crate::crypticle::Crypticle;
use crate::rsa::{EncAlgo, PrivateKey, PublicKey, SigAlgo};
use crate::value::{self, bin, map, s};
use crate::{Error, Result, Value};
use openssl::hash::{hash, MessageDigest};

/// The plaintext reply that makes a minion re-authenticate.
pub const BAD_LOAD: &str = "bad load";

/// A body received on the request port, classified by its `enc`.
#[derive(Debug, Clone)]
pub enum Request {
    /// `enc: "clear"`: `_auth`, or a local client's `publish`.
    Clear {
        /// The clear load (a map).
        load: Value,
        /// The payload's `version` (0 when absent).
        version: i64,
    },
    /// `enc: "aes"`: a minion request encrypted with its session key.
    Aes {
        /// The outer `id`, which selects the session key.
        id: String,
        /// The encrypted load.
        blob: Vec<u8>,
        /// The payload's `version`.
        version: i64,
        /// The outer `enc_algo`, used by `send_private` replies.
        enc_algo: EncAlgo,
        /// The outer `sig_algo`, used by `send_private` replies.
        sig_algo: SigAlgo,
    },
}

impl Request {
    /// Classifies a decoded request body (`ReqServerChannel.handle_message` pre-checks).
    pub fn parse(body: &Value) -> Result<Self> {
        if !matches!(body, Value::Map(_)) {
            return Err(Error::Malformed("request is not a map".into()));
        }
        let enc = value::require_str(body, "enc")?;
        let load = value::get(body, "load")
            .ok_or_else(|| Error::Malformed("request without load".into()))?;
        let version = value::get_i64(body, "version").unwrap_or(0);
        match enc {
            "clear" => {
                if !matches!(load, Value::Map(_)) {
                    return Err(Error::Malformed("clear load is not a map".into()));
                }
                Ok(Self::Clear {
                    load: load.clone(),
                    version,
                })
            }
            "aes" => {
                let id = value::require_str(body, "id")?.to_owned();
                let blob = value::bytes_of(load)
                    .ok_or_else(|| Error::Malformed("aes load is not bytes".into()))?
                    .to_vec();
                let enc_algo =
                    EncAlgo::parse(value::get_str(body, "enc_algo").unwrap_or("OAEP-SHA1"))?;
                let sig_algo =
                    SigAlgo::parse(value::get_str(body, "sig_algo").unwrap_or("PKCS1v15-SHA1"))?;
                Ok(Self::Aes {
                    id,
                    blob,
                    version,
                    enc_algo,
                    sig_algo,
                })
            }
            other => Err(Error::Malformed(format!("unknown enc {other:?}"))),
        }
    }
}

/// A parsed `_auth` load (`AsyncAuth.minion_sign_in_payload`).
#[derive(Debug, Clone)]
pub struct AuthRequest {
    /// Minion id.
    pub id: String,
    /// Nonce to echo (32 hex characters from stock minions; any string accepted).
    pub nonce: String,
    /// Requested key-transport algorithm.
    pub enc_algo: EncAlgo,
    /// Requested signature algorithm.
    pub sig_algo: SigAlgo,
    /// The minion's public key, stripped.
    pub pub_pem: String,
    /// The token encrypted to the master key, present on re-authentication.
    pub token: Option<Vec<u8>>,
    /// `autosign_grains` when the minion sends them.
    pub autosign_grains: Option<Value>,
}

/// Why an `_auth` load cannot be answered with a signed reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthLoadError {
    /// Unsupported `enc_algo`: reply unsigned `{"ret": "bad enc algo"}`.
    BadEncAlgo,
    /// Unsupported `sig_algo`: reply unsigned `{"ret": "bad sig algo"}`.
    BadSigAlgo,
    /// Missing or mistyped fields: reply `"bad load"`.
    Malformed(String),
}

impl AuthLoadError {
    /// The reply Salt sends for this error.
    pub fn reply(&self) -> Value {
        match self {
            Self::BadEncAlgo => map([
                ("enc", s("clear")),
                ("load", map([("ret", s("bad enc algo"))])),
            ]),
            Self::BadSigAlgo => map([
                ("enc", s("clear")),
                ("load", map([("ret", s("bad sig algo"))])),
            ]),
            Self::Malformed(_) => s(BAD_LOAD),
        }
    }
}

impl AuthRequest {
    /// Reads an `_auth` clear load.
    pub fn parse(load: &Value) -> std::result::Result<Self, AuthLoadError> {
        let field = |k: &str| {
            value::get_str(load, k).map(str::to_owned).ok_or_else(|| {
                AuthLoadError::Malformed(format!("missing or non-string field {k:?}"))
            })
        };
        let id = field("id")?;
        let nonce = field("nonce")?;
        let pub_pem = field("pub")?.trim().to_owned();
        let enc_algo = EncAlgo::parse(value::get_str(load, "enc_algo").unwrap_or("OAEP-SHA1"))
            .map_err(|_| AuthLoadError::BadEncAlgo)?;
        let sig_algo = SigAlgo::parse(value::get_str(load, "sig_algo").unwrap_or("PKCS1v15-SHA1"))
            .map_err(|_| AuthLoadError::BadSigAlgo)?;
        let token = value::get_bytes(load, "token").map(<[u8]>::to_vec);
        let autosign_grains = value::get(load, "autosign_grains").cloned();
        Ok(Self {
            id,
            nonce,
            enc_algo,
            sig_algo,
            pub_pem,
            token,
            autosign_grains,
        })
    }
}

/// `_clear_signed`: `{"enc": "clear", "load": msgpack(inner), "sig": sign(load)}`.
pub fn signed_clear(master: &PrivateKey, inner: &Value, sig_algo: SigAlgo) -> Result<Value> {
    let load = value::encode(inner);
    let sig = master.sign(&load, sig_algo)?;
    Ok(map([
        ("enc", s("clear")),
        ("load", bin(load)),
        ("sig", bin(sig)),
    ]))
}

/// A signed `{"ret": ret, "nonce": nonce}` reply (pending, rejected, denied, full).
pub fn ret_reply(master: &PrivateKey, req: &AuthRequest, ret: Value) -> Result<Value> {
    signed_clear(
        master,
        &map([("ret", ret), ("nonce", s(req.nonce.clone()))]),
        req.sig_algo,
    )
}

/// What the master hands an accepted minion.
pub struct AcceptKeys<'a> {
    /// The master public key, `clean_key` form.
    pub master_pub: &'a str,
    /// `publish_port` to tell the minion.
    pub publish_port: u16,
    /// The global publish AES key string.
    pub aes: &'a str,
    /// This minion's session key string.
    pub session: &'a str,
    /// [`aes_key_sig`] of `aes`: the same for every minion until the key rotates, so the
    /// master computes it once per key instead of once per sign-in.
    pub aes_sig: &'a [u8],
}

/// The reply's `sig`: the master's X9.31 signature over the hex SHA-256 of the AES key string
/// (deterministic, so one value serves every sign-in while the key lasts).
pub fn aes_key_sig(master: &PrivateKey, aes: &str) -> Result<Vec<u8>> {
    master.x931_sign(sha256_hex(aes.as_bytes()).as_bytes())
}

/// The signed success reply (`_auth_impl_sync`, auth_mode 1). A token that fails to decrypt
/// is left out, as Salt does (the minion then fails its own token check and retries).
pub fn accept_reply(
    master: &PrivateKey,
    minion_pub: &PublicKey,
    req: &AuthRequest,
    keys: &AcceptKeys<'_>,
) -> Result<Value> {
    accept_reply_with(master, minion_pub, req, keys, None)
}

/// [`accept_reply`] of a master with `master_sign_pubkey`: `pub_sig` (from
/// [`crate::signing::PubKeySignature::value`]) goes right after `publish_port`, where Salt
/// puts it. `None` is exactly [`accept_reply`].
pub fn accept_reply_with(
    master: &PrivateKey,
    minion_pub: &PublicKey,
    req: &AuthRequest,
    keys: &AcceptKeys<'_>,
    pub_sig: Option<Value>,
) -> Result<Value> {
    let mut inner = vec![
        (s("enc"), s("pub")),
        (s("pub_key"), s(keys.master_pub)),
        (s("publish_port"), Value::from(keys.publish_port)),
    ];
    if let Some(sig) = pub_sig {
        inner.push((s("pub_sig"), sig));
    }
    if let Some(tok) = &req.token {
        if let Ok(plain) = master.decrypt(tok, req.enc_algo) {
            inner.push((s("token"), bin(minion_pub.encrypt(&plain, req.enc_algo)?)));
        }
    }
    inner.push((
        s("aes"),
        bin(minion_pub.encrypt(keys.aes.as_bytes(), req.enc_algo)?),
    ));
    inner.push((
        s("session"),
        bin(minion_pub.encrypt(keys.session.as_bytes(), req.enc_algo)?),
    ));
    inner.push((s("sig"), bin(keys.aes_sig.to_vec())));
    inner.push((s("nonce"), s(req.nonce.clone())));
    signed_clear(master, &Value::Map(inner), req.sig_algo)
}

/// Lower-case hex SHA-256, as `hashlib.sha256(x).hexdigest()`.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(hash(MessageDigest::sha256(), data).expect("SHA-256 is always available"))
}

/// A decrypted v3 request.
#[derive(Debug, Clone)]
pub struct AesRequest {
    /// The load without `nonce` and `tok` (has `cmd`, `id`, `ts`, ...).
    pub load: Value,
    /// The nonce to bind the reply to.
    pub nonce: Option<String>,
    /// The minion's X9.31 token over `b"salt"`.
    pub tok: Option<Vec<u8>>,
}

/// Decrypts a v3 request and checks that the inner id matches the outer one.
pub fn open_aes_request(session: &Crypticle, outer_id: &str, blob: &[u8]) -> Result<AesRequest> {
    let mut load = session.loads(blob, None)?;
    if !matches!(load, Value::Map(_)) {
        return Err(Error::Malformed("decrypted load is not a map".into()));
    }
    if value::get_str(&load, "id") != Some(outer_id) {
        return Err(Error::Malformed("inner id does not match outer id".into()));
    }
    let nonce =
        value::remove(&mut load, "nonce").and_then(|v| value::str_of(&v).map(str::to_owned));
    let tok = value::remove(&mut load, "tok").and_then(|v| value::bytes_of(&v).map(<[u8]>::to_vec));
    Ok(AesRequest { load, nonce, tok })
}

/// The `send` reply: `Crypticle(session).dumps(ret, nonce)`.
pub fn seal_reply(session: &Crypticle, ret: &Value, nonce: Option<&str>) -> Result<Value> {
    Ok(bin(session.dumps(ret, nonce)?))
}

/// The `send_private` reply used for `_pillar` (`ReqServerChannel._encrypt_private`).
pub fn pillar_reply(
    master: &PrivateKey,
    minion_pub: &PublicKey,
    enc_algo: EncAlgo,
    sig_algo: SigAlgo,
    pillar: &Value,
    nonce: &str,
) -> Result<Value> {
    let k = Crypticle::generate();
    let key = minion_pub.encrypt(k.key_string().as_bytes(), enc_algo)?;
    let data = value::encode(&map([
        ("key", bin(key.clone())),
        ("pillar", pillar.clone()),
        ("nonce", s(nonce)),
    ]));
    let sig = master.sign(&data, sig_algo)?;
    let signed = k.dumps(&map([("data", bin(data)), ("sig", bin(sig))]), None)?;
    Ok(map([("key", bin(key)), ("pillar", bin(signed))]))
}

/// One publish frame: `{"enc": "aes", "load": Crypticle(aes).dumps(load), ["sig_algo", "sig"]}`.
/// `load` must already carry its `serial`.
pub fn publish_frame(
    aes: &Crypticle,
    load: &Value,
    signer: Option<(&PrivateKey, SigAlgo)>,
) -> Result<Vec<u8>> {
    let blob = aes.dumps(load, None)?;
    let mut outer = vec![(s("enc"), s("aes"))];
    let sig = match signer {
        Some((key, algo)) => Some((algo, key.sign(&blob, algo)?)),
        None => None,
    };
    outer.push((s("load"), bin(blob)));
    if let Some((algo, sig)) = sig {
        outer.push((s("sig_algo"), s(algo.name())));
        outer.push((s("sig"), bin(sig)));
    }
    Ok(value::encode(&Value::Map(outer)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::OnceLock;

    fn keys() -> &'static (PrivateKey, PrivateKey) {
        static K: OnceLock<(PrivateKey, PrivateKey)> = OnceLock::new();
        K.get_or_init(|| {
            (
                PrivateKey::generate(2048).unwrap(),
                PrivateKey::generate(2048).unwrap(),
            )
        })
    }

    fn auth_load(minion: &PrivateKey) -> Value {
        map([
            ("cmd", s("_auth")),
            ("id", s("m1")),
            ("nonce", s("0".repeat(32))),
            ("enc_algo", s("OAEP-SHA1")),
            ("sig_algo", s("PKCS1v15-SHA1")),
            (
                "pub",
                s(crate::pem::clean_key(
                    &minion.public_key().unwrap().to_pem().unwrap(),
                )),
            ),
        ])
    }

    #[test]
    fn requests_are_classified_and_malformed_ones_refused() {
        let clear = map([
            ("enc", s("clear")),
            ("load", map([("cmd", s("_auth"))])),
            ("version", Value::from(3)),
        ]);
        assert!(matches!(
            Request::parse(&clear).unwrap(),
            Request::Clear { version: 3, .. }
        ));
        let aes = map([
            ("enc", s("aes")),
            ("load", bin(vec![1, 2])),
            ("version", Value::from(3)),
            ("id", s("m1")),
        ]);
        assert!(matches!(Request::parse(&aes).unwrap(), Request::Aes { ref id, .. } if id == "m1"));
        for bad in [
            s("garbage"),
            map([("enc", s("clear"))]),
            map([("enc", s("rot13")), ("load", Value::Map(vec![]))]),
            map([("enc", s("aes")), ("load", bin(vec![1]))]),
            map([("enc", s("clear")), ("load", s("x"))]),
        ] {
            assert!(Request::parse(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn auth_reply_is_signed_and_carries_decryptable_keys() {
        let (master, minion) = keys();
        let req = AuthRequest::parse(&auth_load(minion)).unwrap();
        let aes = crate::crypticle::generate_key_string();
        let session = crate::crypticle::generate_key_string();
        let mpub = crate::pem::clean_key(&master.public_key().unwrap().to_pem().unwrap());
        let reply = accept_reply(
            master,
            &minion.public_key().unwrap(),
            &req,
            &AcceptKeys {
                master_pub: &mpub,
                publish_port: 4505,
                aes: &aes,
                session: &session,
                aes_sig: &aes_key_sig(master, &aes).unwrap(),
            },
        )
        .unwrap();
        let load = value::get_bytes(&reply, "load").unwrap();
        let sig = value::get_bytes(&reply, "sig").unwrap();
        assert!(master
            .public_key()
            .unwrap()
            .verify(load, sig, SigAlgo::Pkcs1v15Sha1));
        let inner = value::decode(load).unwrap();
        let keys: Vec<_> = match &inner {
            Value::Map(m) => m
                .iter()
                .map(|(k, _)| value::str_of(k).unwrap().to_owned())
                .collect(),
            _ => panic!(),
        };
        assert_eq!(
            keys,
            [
                "enc",
                "pub_key",
                "publish_port",
                "aes",
                "session",
                "sig",
                "nonce"
            ]
        );
        let got_aes = minion
            .decrypt(value::get_bytes(&inner, "aes").unwrap(), EncAlgo::OaepSha1)
            .unwrap();
        assert_eq!(got_aes, aes.as_bytes());
        let digest = master
            .public_key()
            .unwrap()
            .x931_recover(value::get_bytes(&inner, "sig").unwrap())
            .unwrap();
        assert_eq!(digest, sha256_hex(aes.as_bytes()).as_bytes());
        assert_eq!(value::get_str(&inner, "nonce"), Some(&*"0".repeat(32)));
    }

    #[test]
    fn signing_master_puts_pub_sig_after_publish_port_and_it_verifies() {
        let (master, minion) = keys();
        let signer = PrivateKey::generate(2048).unwrap();
        let mut load = auth_load(minion);
        value::set(&mut load, "sig_algo", s("PKCS1v15-SHA224"));
        let req = AuthRequest::parse(&load).unwrap();
        let aes = crate::crypticle::generate_key_string();
        let session = crate::crypticle::generate_key_string();
        let mpub = crate::pem::clean_key(&master.public_key().unwrap().to_pem().unwrap());
        let pub_sig = crate::signing::PubKeySignature::computed(signer.clone(), &mpub)
            .value(req.sig_algo)
            .unwrap();
        let reply = accept_reply_with(
            master,
            &minion.public_key().unwrap(),
            &req,
            &AcceptKeys {
                master_pub: &mpub,
                publish_port: 4505,
                aes: &aes,
                session: &session,
                aes_sig: &aes_key_sig(master, &aes).unwrap(),
            },
            Some(pub_sig),
        )
        .unwrap();
        let load = value::get_bytes(&reply, "load").unwrap();
        assert!(master.public_key().unwrap().verify(
            load,
            value::get_bytes(&reply, "sig").unwrap(),
            SigAlgo::Pkcs1v15Sha224
        ));
        let inner = value::decode(load).unwrap();
        let Value::Map(pairs) = &inner else {
            panic!("inner load is not a map")
        };
        let keys: Vec<_> = pairs
            .iter()
            .map(|(k, _)| value::str_of(k).unwrap().to_owned())
            .collect();
        assert_eq!(
            keys,
            [
                "enc",
                "pub_key",
                "publish_port",
                "pub_sig",
                "aes",
                "session",
                "sig",
                "nonce"
            ]
        );
        assert!(crate::signing::verify_master_pub(
            &signer.public_key().unwrap(),
            value::get_str(&inner, "pub_key").unwrap(),
            value::get_bytes(&inner, "pub_sig").unwrap(),
            SigAlgo::Pkcs1v15Sha224,
        ));
    }

    #[test]
    fn unsupported_algorithms_get_salts_unsigned_replies() {
        let (_, minion) = keys();
        let mut load = auth_load(minion);
        value::set(&mut load, "enc_algo", s("ROT13"));
        assert_eq!(
            AuthRequest::parse(&load).unwrap_err(),
            AuthLoadError::BadEncAlgo
        );
        let mut load = auth_load(minion);
        value::set(&mut load, "sig_algo", s("MD5"));
        let err = AuthRequest::parse(&load).unwrap_err();
        assert_eq!(
            value::get_str(value::get(&err.reply(), "load").unwrap(), "ret"),
            Some("bad sig algo")
        );
        let mut load = auth_load(minion);
        value::remove(&mut load, "pub");
        assert_eq!(AuthRequest::parse(&load).unwrap_err().reply(), s(BAD_LOAD));
    }

    #[test]
    fn aes_request_opens_and_strips_nonce_and_tok() {
        let c = Crypticle::generate();
        let inner = map([
            ("cmd", s("_return")),
            ("nonce", s("n".repeat(32))),
            ("tok", bin(vec![9])),
            ("id", s("m1")),
        ]);
        let blob = c.dumps(&inner, None).unwrap();
        let r = open_aes_request(&c, "m1", &blob).unwrap();
        assert_eq!(r.nonce.as_deref(), Some(&*"n".repeat(32)));
        assert_eq!(r.tok, Some(vec![9]));
        assert_eq!(value::get(&r.load, "nonce"), None);
        assert!(open_aes_request(&c, "m2", &blob).is_err());
        assert!(open_aes_request(&Crypticle::generate(), "m1", &blob).is_err());
    }

    #[test]
    fn pillar_reply_decrypts_and_verifies_like_a_minion() {
        let (master, minion) = keys();
        let r = pillar_reply(
            master,
            &minion.public_key().unwrap(),
            EncAlgo::OaepSha1,
            SigAlgo::Pkcs1v15Sha1,
            &Value::Map(vec![]),
            "abc",
        )
        .unwrap();
        let k = minion
            .decrypt(value::get_bytes(&r, "key").unwrap(), EncAlgo::OaepSha1)
            .unwrap();
        let c = Crypticle::new(std::str::from_utf8(&k).unwrap()).unwrap();
        let signed = c
            .loads(value::get_bytes(&r, "pillar").unwrap(), None)
            .unwrap();
        let data = value::get_bytes(&signed, "data").unwrap();
        assert!(master.public_key().unwrap().verify(
            data,
            value::get_bytes(&signed, "sig").unwrap(),
            SigAlgo::Pkcs1v15Sha1
        ));
        let data = value::decode(data).unwrap();
        assert_eq!(value::get_str(&data, "nonce"), Some("abc"));
        assert_eq!(value::get_bytes(&data, "key"), value::get_bytes(&r, "key"));
    }

    #[test]
    fn publish_frame_has_salts_outer_keys_and_a_valid_signature() {
        let (master, _) = keys();
        let aes = Crypticle::generate();
        let load = map([("fun", s("test.ping")), ("serial", Value::from(1))]);
        let frame = value::decode(
            &publish_frame(&aes, &load, Some((master, SigAlgo::Pkcs1v15Sha1))).unwrap(),
        )
        .unwrap();
        let blob = value::get_bytes(&frame, "load").unwrap();
        assert!(master.public_key().unwrap().verify(
            blob,
            value::get_bytes(&frame, "sig").unwrap(),
            SigAlgo::Pkcs1v15Sha1
        ));
        assert_eq!(aes.loads(blob, None).unwrap(), load);
        let unsigned = value::decode(&publish_frame(&aes, &load, None).unwrap()).unwrap();
        assert_eq!(value::get(&unsigned, "sig"), None);
    }
}
