//! Request, reply and publish envelopes of the ZeroMQ channels (salt-protocol.md §3–§5).
//!
//! Master side: [`Request::parse`] classifies a body received on the request port without
//! decoding it (the envelope is read in place, an encrypted load is borrowed, a clear load
//! is decoded within its budget only when the body is within the clear-request limit);
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

/// A body received on the request port, classified by its `enc`. An encrypted request
/// borrows its id and blob from the body.
#[derive(Debug, Clone)]
pub enum Request<'a> {
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
        id: &'a str,
        /// The encrypted load.
        blob: &'a [u8],
        /// The payload's `version`.
        version: i64,
        /// The outer `enc_algo`, used by `send_private` replies.
        enc_algo: EncAlgo,
        /// The outer `sig_algo`, used by `send_private` replies.
        sig_algo: SigAlgo,
    },
}

impl<'a> Request<'a> {
    /// Classifies a request body (`ReqServerChannel.handle_message` pre-checks) without
    /// decoding more than it needs: the top level must be a map (anything else is refused
    /// from its first byte); its entries are read as raw bytes ([`value::RawMap`], no
    /// allocation); an encrypted request's `id` and `load` are borrowed from `body`; a
    /// clear request's load is decoded (within [`value::Budget::for_clear`] of its
    /// length) only when the whole body is at most `max_clear` bytes, else
    /// [`Error::TooLarge`]. A body over `max_clear` can only be an encrypted request, whose
    /// envelope holds no array or map: the first one met ends the parse with
    /// [`Error::TooLarge`] without being walked. When a key appears twice the first one
    /// counts, as in [`value::get`].
    ///
    /// Errors: [`Error::Msgpack`] for bytes that are not one msgpack value (or a clear load
    /// over its decode budget), [`Error::Malformed`] for a well-formed body that is not a
    /// request.
    pub fn parse(body: &'a [u8], max_clear: usize) -> Result<Self> {
        let mut fields = Fields::default();
        let mut entries = value::RawMap::new(body).map_err(|e| match e {
            Error::Malformed(_) => Error::Malformed("request is not a map".into()),
            e => e,
        })?;
        let too_large = || Error::TooLarge {
            size: body.len(),
            limit: max_clear,
        };
        if body.len() > max_clear {
            // Only an encrypted request may be this large, and its envelope holds no
            // container: one (a clear load) is refused where it starts, without a walk.
            entries = entries.flat();
        }
        for entry in entries.by_ref() {
            let (key, val) = entry.map_err(|e| match e {
                Error::Malformed(_) => too_large(),
                e => e,
            })?;
            fields.note(key, val);
        }
        if entries.end() != body.len() {
            return Err(Error::Msgpack(format!(
                "{} trailing bytes",
                body.len() - entries.end()
            )));
        }
        let enc = fields
            .enc
            .and_then(text)
            .ok_or_else(|| Error::Malformed("missing or non-string field \"enc\"".into()))?;
        let load = fields
            .load
            .ok_or_else(|| Error::Malformed("request without load".into()))?;
        let version = fields.version.and_then(int_or_decimal).unwrap_or(0);
        match enc {
            "clear" => {
                if body.len() > max_clear {
                    return Err(too_large());
                }
                if !matches!(load.first(), Some(0x80..=0x8f | 0xde | 0xdf)) {
                    return Err(Error::Malformed("clear load is not a map".into()));
                }
                Ok(Self::Clear {
                    load: value::decode_with(load, value::Budget::for_clear(load.len()))?,
                    version,
                })
            }
            "aes" => {
                let id = fields
                    .id
                    .and_then(text)
                    .ok_or_else(|| Error::Malformed("missing or non-string field \"id\"".into()))?;
                let blob = value::raw_bytes(load)
                    .ok_or_else(|| Error::Malformed("aes load is not bytes".into()))?;
                let enc_algo =
                    EncAlgo::parse(fields.enc_algo.and_then(text).unwrap_or("OAEP-SHA1"))?;
                let sig_algo =
                    SigAlgo::parse(fields.sig_algo.and_then(text).unwrap_or("PKCS1v15-SHA1"))?;
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

/// The raw values of the envelope fields [`Request::parse`] reads (first occurrence).
#[derive(Default)]
struct Fields<'a> {
    enc: Option<&'a [u8]>,
    load: Option<&'a [u8]>,
    version: Option<&'a [u8]>,
    id: Option<&'a [u8]>,
    enc_algo: Option<&'a [u8]>,
    sig_algo: Option<&'a [u8]>,
}

impl<'a> Fields<'a> {
    fn note(&mut self, key: &[u8], val: &'a [u8]) {
        let slot = match value::raw_bytes(key) {
            Some(b"enc") => &mut self.enc,
            Some(b"load") => &mut self.load,
            Some(b"version") => &mut self.version,
            Some(b"id") => &mut self.id,
            Some(b"enc_algo") => &mut self.enc_algo,
            Some(b"sig_algo") => &mut self.sig_algo,
            _ => return,
        };
        slot.get_or_insert(val);
    }
}

/// The text of a raw `str`/`bin` field that is UTF-8.
fn text(raw: &[u8]) -> Option<&str> {
    value::raw_bytes(raw).and_then(|b| std::str::from_utf8(b).ok())
}

/// A raw integer field, or the decimal-string form Python sometimes sends (as
/// [`value::get_i64`]).
fn int_or_decimal(raw: &[u8]) -> Option<i64> {
    value::raw_i64(raw).or_else(|| text(raw).and_then(|t| t.trim().parse().ok()))
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

    const CLEAR_LIMIT: usize = 1 << 20;

    fn parse(v: &Value) -> Result<Request<'static>> {
        let body: &'static [u8] = Box::leak(value::encode(v).into_boxed_slice());
        Request::parse(body, CLEAR_LIMIT)
    }

    #[test]
    fn requests_are_classified_and_malformed_ones_refused() {
        let clear = map([
            ("enc", s("clear")),
            ("load", map([("cmd", s("_auth"))])),
            ("version", Value::from(3)),
        ]);
        assert!(matches!(
            parse(&clear).unwrap(),
            Request::Clear { version: 3, .. }
        ));
        let aes = map([
            ("enc", s("aes")),
            ("load", bin(vec![1, 2])),
            ("version", Value::from(3)),
            ("id", s("m1")),
        ]);
        assert!(matches!(
            parse(&aes).unwrap(),
            Request::Aes {
                id: "m1",
                blob: &[1, 2],
                ..
            }
        ));
        for bad in [
            s("garbage"),
            map([("enc", s("clear"))]),
            map([("enc", s("rot13")), ("load", Value::Map(vec![]))]),
            map([("enc", s("aes")), ("load", bin(vec![1]))]),
            map([("enc", s("clear")), ("load", s("x"))]),
            map([
                ("enc", s("aes")),
                ("load", Value::Map(vec![])),
                ("id", s("m1")),
            ]),
        ] {
            assert!(matches!(parse(&bad), Err(Error::Malformed(_))), "{bad:?}");
        }
    }

    #[test]
    fn a_body_that_is_not_a_map_is_refused_from_its_first_byte() {
        // The 16 MB array of zeros: refused without walking its elements (a
        // truncated array of the same declared size gives the same answer, so nothing
        // past the header was read).
        let mut huge = vec![0xdd, 0x00, 0xf4, 0x24, 0x00];
        huge.resize(16_000_005, 0);
        let err = Request::parse(&huge, CLEAR_LIMIT).unwrap_err();
        assert_eq!(err.to_string(), "malformed message: request is not a map");
        let err = Request::parse(&huge[..5], CLEAR_LIMIT).unwrap_err();
        assert_eq!(err.to_string(), "malformed message: request is not a map");
        assert!(matches!(
            Request::parse(b"\xc1\xff garbage", CLEAR_LIMIT),
            Err(Error::Msgpack(_))
        ));
        assert!(matches!(
            Request::parse(b"", CLEAR_LIMIT),
            Err(Error::Msgpack(_))
        ));
    }

    #[test]
    fn a_clear_request_over_the_clear_limit_is_refused_before_its_load_is_decoded() {
        // A load far over any decode budget: refused for its size, not for its contents.
        let mut load = vec![0xdd];
        load.extend_from_slice(&2_000_000u32.to_be_bytes());
        load.resize(5 + 2_000_000, 0);
        let mut body = vec![0x82, 0xa3];
        body.extend_from_slice(b"enc");
        body.extend_from_slice(&[0xa5]);
        body.extend_from_slice(b"clear");
        body.extend_from_slice(&[0xa4]);
        body.extend_from_slice(b"load");
        body.extend_from_slice(&load);
        assert!(matches!(
            Request::parse(&body, CLEAR_LIMIT),
            Err(Error::TooLarge { size, limit: CLEAR_LIMIT }) if size == body.len()
        ));
        // ... where the load starts: the same body cut short inside the load, which a walk
        // would report as truncated msgpack, gets the same answer.
        let cut = &body[..body.len() - 10];
        assert!(matches!(
            Request::parse(cut, CLEAR_LIMIT),
            Err(Error::TooLarge { .. })
        ));
        // Within the limit, its load must still fit the decode budget (and be a map).
        assert!(matches!(
            Request::parse(&body, usize::MAX),
            Err(Error::Malformed(_))
        ));
        // A map load of dense elements over its budget: a msgpack error naming the budget.
        let mut dense = vec![0x81, 0xa1, b'a', 0xdd];
        dense.extend_from_slice(&100_000u32.to_be_bytes());
        dense.resize(dense.len() + 100_000, 0);
        let body = [
            &[0x82, 0xa3][..],
            b"enc",
            &[0xa5],
            b"clear",
            &[0xa4],
            b"load",
            &dense,
        ]
        .concat();
        let err = Request::parse(&body, CLEAR_LIMIT).unwrap_err();
        assert!(err.to_string().contains("elements"), "{err}");
        // An encrypted request of any size within the transport's limit is not a clear one.
        let aes = map([
            ("enc", s("aes")),
            ("load", bin(vec![0; 2 * CLEAR_LIMIT])),
            ("id", s("m1")),
        ]);
        assert!(
            matches!(parse(&aes).unwrap(), Request::Aes { blob, .. } if blob.len() == 2 * CLEAR_LIMIT)
        );
    }

    #[test]
    fn an_aes_request_borrows_its_blob_and_id_from_the_body() {
        let body = value::encode(&map([
            ("enc", s("aes")),
            ("load", bin(vec![5; 100])),
            ("version", s("3")),
            ("id", s("m1")),
            ("enc_algo", s("OAEP-SHA224")),
            ("sig_algo", s("PKCS1v15-SHA224")),
            ("extra", Value::Array(vec![Value::Nil; 3])),
        ]));
        let Request::Aes {
            id,
            blob,
            version,
            enc_algo,
            sig_algo,
        } = Request::parse(&body, CLEAR_LIMIT).unwrap()
        else {
            panic!("not an aes request")
        };
        let inside = |p: *const u8| body.as_ptr_range().contains(&p);
        assert!(inside(blob.as_ptr()) && inside(id.as_ptr()));
        assert_eq!((id, blob.len(), version), ("m1", 100, 3));
        assert_eq!(
            (enc_algo, sig_algo),
            (EncAlgo::OaepSha224, SigAlgo::Pkcs1v15Sha224)
        );
    }

    #[test]
    fn envelope_oddities_are_read_as_before() {
        // The first of two `enc` keys counts; keys may be bin; trailing bytes are refused.
        let v = Value::Map(vec![
            (bin(b"enc".to_vec()), s("clear")),
            (s("enc"), s("aes")),
            (s("load"), map([("cmd", s("ping"))])),
        ]);
        assert!(matches!(
            parse(&v).unwrap(),
            Request::Clear { version: 0, .. }
        ));
        let mut body = value::encode(&v);
        body.push(0xc0);
        assert!(matches!(
            Request::parse(&body, CLEAR_LIMIT),
            Err(Error::Msgpack(m)) if m == "1 trailing bytes"
        ));
        // A map cut short inside its entries is not msgpack.
        body.truncate(body.len() - 3);
        assert!(matches!(
            Request::parse(&body, CLEAR_LIMIT),
            Err(Error::Msgpack(_))
        ));
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
