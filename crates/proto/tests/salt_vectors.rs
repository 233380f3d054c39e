//! Halite's protocol core checked against stock Salt 3008.3.
//!
//! Salt → Halite: `tests/vectors/salt-3008.3.msgpack` holds bytes produced by stock Salt's
//! own code (`tests/vectors/capture.py`, which documents how to regenerate it) with the fixed
//! keys under `tests/vectors/keys/`. Deterministic outputs (msgpack, PKCS#1 v1.5, X9.31,
//! PEM, fingerprints, event frames) must be byte-identical; randomised ones (OAEP, Crypticle
//! IVs) must decrypt and verify.
//!
//! Halite → Salt: the tests named `salt_*` hand Halite's bytes to stock Salt, run from the
//! venv at `<repo>/.salt-venv` (or `$HALITE_SALT_PYTHON`) as `tests/vectors/salt_check.py`,
//! which drives the code a stock minion runs on what it receives.
//!
//! A "view" is how Salt sees a decoded value (`saltenv.view` in Python, [`view`] here):
//! msgpack `str` and `bin` both become text when they hold UTF-8 and bytes otherwise.

use chrono::{DateTime, Utc};
use halite_proto::auth::{decide, Decision, KeyState, Policy, Store};
use halite_proto::crypticle::{self, Crypticle};
use halite_proto::envelope::{
    accept_reply, aes_key_sig, open_aes_request, pillar_reply, publish_frame, ret_reply,
    seal_reply, sha256_hex, AcceptKeys, AuthLoadError, AuthRequest, Request,
};
use halite_proto::event::{self, decode_pub_stream, Frame, PullFrame};
use halite_proto::pem::{clean_key, pem_finger};
use halite_proto::rsa::{EncAlgo, PrivateKey, PublicKey, SigAlgo};
use halite_proto::value::{self, bin, map, s};
use halite_proto::{jid, Value};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

const VECTORS: &[u8] = include_bytes!("vectors/salt-3008.3.msgpack");
const MASTER_PEM: &str = include_str!("vectors/keys/master.pem");
const MASTER_PUB: &str = include_str!("vectors/keys/master.pub");
const MINION_PEM: &str = include_str!("vectors/keys/minion.pem");
const MINION_PUB: &str = include_str!("vectors/keys/minion.pub");
const OTHER_PEM: &str = include_str!("vectors/keys/other.pem");
const OTHER_PUB: &str = include_str!("vectors/keys/other.pub");

// ------------------------------------------------------------------------------ helpers

fn vectors() -> &'static Value {
    static V: OnceLock<Value> = OnceLock::new();
    V.get_or_init(|| value::decode(VECTORS).expect("the vectors file is valid msgpack"))
}

/// Follows a dotted path of map keys from the root of the vectors.
fn at(path: &str) -> &'static Value {
    path.split('.').fold(vectors(), |v, k| field(v, k))
}

fn field<'a>(v: &'a Value, key: &str) -> &'a Value {
    value::get(v, key).unwrap_or_else(|| panic!("vector field {key:?} missing in {v}"))
}

fn bytes<'a>(v: &'a Value, key: &str) -> &'a [u8] {
    value::get_bytes(v, key).unwrap_or_else(|| panic!("vector field {key:?} is not bytes"))
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    value::get_str(v, key).unwrap_or_else(|| panic!("vector field {key:?} is not text"))
}

fn items<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    field(v, key)
        .as_array()
        .unwrap_or_else(|| panic!("vector field {key:?} is not a list"))
}

fn name(v: &Value) -> &str {
    value::get_str(v, "name").unwrap_or("?")
}

fn master() -> &'static PrivateKey {
    static K: OnceLock<PrivateKey> = OnceLock::new();
    K.get_or_init(|| PrivateKey::from_pem(MASTER_PEM.as_bytes()).unwrap())
}

fn minion() -> &'static PrivateKey {
    static K: OnceLock<PrivateKey> = OnceLock::new();
    K.get_or_init(|| PrivateKey::from_pem(MINION_PEM.as_bytes()).unwrap())
}

fn other() -> &'static PrivateKey {
    static K: OnceLock<PrivateKey> = OnceLock::new();
    K.get_or_init(|| PrivateKey::from_pem(OTHER_PEM.as_bytes()).unwrap())
}

fn public(pem: &str) -> PublicKey {
    PublicKey::from_pem(pem.as_bytes()).unwrap()
}

fn fixed(key: &str) -> &'static str {
    text(at("fixed"), key)
}

/// Which Python decoder read the bytes: `salt.payload.loads` (network: str and bin both
/// decode to text when UTF-8) or `loads(encoding="utf-8")` (event bus: bin stays bytes).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reader {
    Network,
    EventBus,
}

fn tagged(tag: &str, rest: impl IntoIterator<Item = Value>) -> Value {
    Value::Array(std::iter::once(s(tag)).chain(rest).collect())
}

fn text_or_bytes(b: &[u8]) -> Value {
    match std::str::from_utf8(b) {
        Ok(t) => tagged("str", [s(t)]),
        Err(_) => tagged("bytes", [bin(b.to_vec())]),
    }
}

/// How Salt sees `v` (the Rust twin of `saltenv.view`).
fn view(v: &Value, reader: Reader) -> Value {
    match v {
        Value::Nil => tagged("nil", []),
        Value::Boolean(b) => tagged("bool", [Value::Boolean(*b)]),
        Value::Integer(i) => tagged("int", [s(i.to_string())]),
        Value::F32(f) => tagged("float", [bin(f64::from(*f).to_be_bytes().to_vec())]),
        Value::F64(f) => tagged("float", [bin(f.to_be_bytes().to_vec())]),
        Value::String(st) => text_or_bytes(st.as_bytes()),
        Value::Binary(b) if reader == Reader::EventBus => tagged("bytes", [bin(b.clone())]),
        Value::Binary(b) => text_or_bytes(b),
        Value::Array(a) => tagged(
            "list",
            [Value::Array(a.iter().map(|x| view(x, reader)).collect())],
        ),
        Value::Map(m) => tagged(
            "map",
            [Value::Array(
                m.iter()
                    .map(|(k, x)| Value::Array(vec![view(k, reader), view(x, reader)]))
                    .collect(),
            )],
        ),
        Value::Ext(78, d) => tagged("datetime", [s(String::from_utf8_lossy(d))]),
        Value::Ext(79, d) => {
            // salt.defaults._Constant: msgpack (name, value) packed with use_bin_type=True.
            let inner = value::decode(d).expect("ext 79 holds msgpack");
            let parts = inner.as_array().expect("ext 79 holds a pair");
            tagged(
                "const",
                [
                    s(value::str_of(&parts[0]).unwrap()),
                    view(&parts[1], Reader::EventBus),
                ],
            )
        }
        // salt.payload.loads hands other ext types back as their raw data.
        Value::Ext(_, d) => text_or_bytes(d),
    }
}

/// `$HALITE_SALT_PYTHON`, else the python of `$HALITE_SALT_VENV` (the venv `scripts/setup-tests`
/// names), else of `<repo>/.salt-venv`. (halite-testkit's `salt_venv` is not used here:
/// the kit depends on crates that depend on this one.)
fn salt_python() -> PathBuf {
    if let Some(python) = std::env::var_os("HALITE_SALT_PYTHON") {
        return PathBuf::from(python);
    }
    std::env::var_os("HALITE_SALT_VENV")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.salt-venv"))
        .join("bin/python")
}

/// Runs `salt_check.py cmd` in the stock-Salt venv with `input`, returning its answer.
fn salt(cmd: &str, input: Value) -> Value {
    let python = salt_python();
    assert!(
        python.exists(),
        "stock Salt venv not found at {}: create it with `python3.11 -m venv .salt-venv && \
         .salt-venv/bin/pip install salt==3008.3` in the repository root, or point \
         HALITE_SALT_PYTHON at a python that has salt 3008.3 installed",
        python.display()
    );
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/salt_check.py");
    let mut child = Command::new(&python)
        .arg(&script)
        .arg(cmd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&value::encode(&input))
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "salt_check.py {cmd} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    value::decode(&out.stdout).expect("salt_check.py answers msgpack")
}

fn salt_result(cmd: &str, input: Value) -> Value {
    let answer = salt(cmd, input);
    if let Some(err) = value::get_str(&answer, "error") {
        panic!("stock Salt refused Halite's bytes: {err}");
    }
    field(&answer, "result").clone()
}

fn keys_of(v: &Value) -> Vec<String> {
    v.as_map()
        .unwrap()
        .iter()
        .map(|(k, _)| value::str_of(k).unwrap().to_owned())
        .collect()
}

/// The `load` of a signed clear reply, after checking the master's signature over it.
fn verified_inner(reply: &Value, master_pub: &PublicKey) -> Value {
    assert_eq!(value::get_str(reply, "enc"), Some("clear"));
    let load = bytes(reply, "load");
    assert!(
        master_pub.verify(load, bytes(reply, "sig"), SigAlgo::Pkcs1v15Sha1),
        "reply signature"
    );
    value::decode(load).unwrap()
}

fn auth_request(wire: &[u8]) -> AuthRequest {
    match Request::parse(wire, usize::MAX).unwrap() {
        Request::Clear { load, version } => {
            assert_eq!(version, 3);
            AuthRequest::parse(&load).unwrap()
        }
        other => panic!("expected a clear request, got {other:?}"),
    }
}

fn master_pub_clean() -> String {
    clean_key(MASTER_PUB)
}

// ------------------------------------------------------------------------------ msgpack

#[test]
fn halite_reads_every_salt_dumps_vector_as_salt_does() {
    for case in items(vectors(), "msgpack_dumps") {
        let got =
            value::decode(bytes(case, "wire")).unwrap_or_else(|e| panic!("{}: {e}", name(case)));
        assert_eq!(
            view(&got, Reader::Network),
            *field(case, "view"),
            "{}",
            name(case)
        );
    }
}

#[test]
fn nonce_is_str16_and_a_64k_string_is_str32_in_salt_dumps() {
    let wire = |n: &str| {
        bytes(
            items(vectors(), "msgpack_dumps")
                .iter()
                .find(|c| name(c) == n)
                .unwrap(),
            "wire",
        )
        .to_vec()
    };
    assert_eq!(wire("nonce_32_chars_is_str16")[..3], [0xda, 0x00, 0x20]);
    assert_eq!(wire("str_65536")[..5], [0xdb, 0x00, 0x01, 0x00, 0x00]);
    // Halite reads both; its own encoder may pick str8 or bin instead (see the test below).
    assert!(value::decode(&wire("nonce_32_chars_is_str16")).is_ok());
}

#[test]
fn halite_reads_the_event_bus_encoding_as_salt_does() {
    for case in items(vectors(), "msgpack_dumps") {
        let wire = value::get_bytes(case, "bin_type_wire").unwrap_or_else(|| bytes(case, "wire"));
        let want = value::get(case, "bin_type_view").unwrap_or_else(|| field(case, "view"));
        let got = value::decode(wire).unwrap_or_else(|e| panic!("{}: {e}", name(case)));
        assert_eq!(view(&got, Reader::EventBus), *want, "{}", name(case));
    }
}

#[test]
fn halite_encoder_is_byte_identical_to_salt_event_bus_encoder() {
    // salt.payload.dumps(use_bin_type=True) (events, frames) picks the same widths as
    // Halite's encoder: smallest ints, float64, str8 for 32..=255 bytes, bin for bytes.
    for case in items(vectors(), "msgpack_dumps") {
        let wire = value::get_bytes(case, "bin_type_wire").unwrap_or_else(|| bytes(case, "wire"));
        let v = value::decode(wire).unwrap();
        assert_eq!(
            hex::encode(value::encode(&v)),
            hex::encode(wire),
            "{}",
            name(case)
        );
    }
}

#[test]
fn halite_reads_odd_msgpack_inputs_as_salt_does() {
    for case in items(vectors(), "msgpack_loads") {
        let got =
            value::decode(bytes(case, "wire")).unwrap_or_else(|e| panic!("{}: {e}", name(case)));
        assert_eq!(
            view(&got, Reader::Network),
            *field(case, "view"),
            "{}",
            name(case)
        );
    }
}

fn msgpack_error_cases(reserved: bool) -> impl Iterator<Item = &'static Value> {
    items(vectors(), "msgpack_errors")
        .iter()
        .filter(move |c| (name(c) == "reserved_byte_c1") == reserved)
}

#[test]
fn halite_rejects_truncated_and_trailing_msgpack_like_salt() {
    for case in msgpack_error_cases(false) {
        assert_eq!(
            field(case, "salt_rejects"),
            &Value::Boolean(true),
            "{}",
            name(case)
        );
        assert!(
            value::decode(bytes(case, "wire")).is_err(),
            "{}",
            name(case)
        );
    }
}

#[test]
fn halite_rejects_the_reserved_msgpack_byte_like_salt() {
    // 0xc1 is "never used" in the msgpack spec; msgpack-python raises on it, while
    // rmpv 1.3 decodes Marker::Reserved as Nil.
    for case in msgpack_error_cases(true) {
        assert_eq!(field(case, "salt_rejects"), &Value::Boolean(true));
        assert!(
            value::decode(bytes(case, "wire")).is_err(),
            "0xc1 decoded as {:?}",
            value::decode(bytes(case, "wire"))
        );
    }
}

#[test]
fn salt_reads_halite_encoding_of_every_vector_like_the_original() {
    let cases: Vec<&Value> = items(vectors(), "msgpack_dumps")
        .iter()
        .chain(items(vectors(), "msgpack_loads"))
        .collect();
    let wires = cases
        .iter()
        .map(|c| bin(value::encode(&value::decode(bytes(c, "wire")).unwrap())))
        .collect();
    let answer = salt("loads", map([("wires", Value::Array(wires))]));
    for (case, got) in cases.iter().zip(items(&answer, "views")) {
        assert_eq!(got, field(case, "view"), "{}", name(case));
    }
}

// ------------------------------------------------------------------------------ crypticle

fn crypticle() -> Crypticle {
    Crypticle::new(text(at("crypticle"), "key")).unwrap()
}

#[test]
fn crypticle_decrypts_blobs_made_by_salt() {
    let c = crypticle();
    for case in items(at("crypticle"), "encrypt") {
        assert_eq!(
            c.decrypt(bytes(case, "blob")).unwrap(),
            bytes(case, "plaintext")
        );
    }
}

#[test]
fn crypticle_loads_salt_dumps_with_and_without_nonce() {
    let c = crypticle();
    for case in items(at("crypticle"), "dumps") {
        let blob = bytes(case, "blob");
        let nonce = value::get_str(case, "nonce");
        let mut plain = b"pickle::".to_vec();
        plain.extend_from_slice(nonce.unwrap_or("").as_bytes());
        plain.extend_from_slice(bytes(case, "body"));
        assert_eq!(c.decrypt(blob).unwrap(), plain);
        assert_eq!(
            view(&c.loads(blob, nonce).unwrap(), Reader::Network),
            *field(case, "view")
        );
        if nonce.is_some() {
            assert!(c
                .loads(blob, Some("ffffffffffffffffffffffffffffffff"))
                .is_err());
        }
    }
}

#[test]
fn crypticle_rejects_a_blob_salt_rejects_as_tampered() {
    assert_eq!(
        field(at("crypticle"), "salt_rejects_tampered"),
        &Value::Boolean(true)
    );
    assert!(matches!(
        crypticle().decrypt(bytes(at("crypticle"), "tampered")),
        Err(halite_proto::Error::BadHmac)
    ));
}

#[test]
fn crypticle_drops_a_payload_without_pickle_prefix_as_salt_does() {
    // Salt's loads returns {} (the message is dropped); Halite reports it instead.
    assert_eq!(
        *field(at("crypticle"), "no_prefix_salt_loads"),
        tagged("map", [Value::Array(vec![])])
    );
    assert!(matches!(
        crypticle().loads(bytes(at("crypticle"), "no_prefix"), None),
        Err(halite_proto::Error::BadPayload(_))
    ));
}

#[test]
fn salt_decrypts_crypticle_blobs_made_by_halite() {
    let c = crypticle();
    let plaintexts: Vec<Vec<u8>> = (0..40)
        .map(|n| (0..n).map(|i| (i * 13 + 5) as u8).collect())
        .collect();
    let obj = map([
        ("fun", s("test.ping")),
        ("arg", Value::Array(vec![])),
        ("blob", bin(vec![0xff, 0])),
    ]);
    let nonce = fixed("req_nonce");
    let answer = salt(
        "crypticle",
        map([
            ("key", s(c.key_string())),
            (
                "encrypted",
                Value::Array(
                    plaintexts
                        .iter()
                        .map(|p| bin(c.encrypt(p).unwrap()))
                        .collect(),
                ),
            ),
            (
                "dumped",
                Value::Array(vec![
                    map([
                        ("blob", bin(c.dumps(&obj, None).unwrap())),
                        ("nonce", Value::Nil),
                    ]),
                    map([
                        ("blob", bin(c.dumps(&obj, Some(nonce)).unwrap())),
                        ("nonce", s(nonce)),
                    ]),
                ]),
            ),
        ]),
    );
    let decrypted: Vec<&[u8]> = items(&answer, "decrypted")
        .iter()
        .map(|b| value::bytes_of(b).unwrap())
        .collect();
    assert_eq!(
        decrypted,
        plaintexts.iter().map(Vec::as_slice).collect::<Vec<_>>()
    );
    for got in items(&answer, "loaded") {
        assert_eq!(*got, view(&obj, Reader::Network));
    }
}

#[test]
fn salt_accepts_generated_key_strings() {
    let key = crypticle::generate_key_string();
    let c = Crypticle::new(&key).unwrap();
    let answer = salt(
        "crypticle",
        map([
            ("key", s(key.clone())),
            (
                "encrypted",
                Value::Array(vec![bin(c.encrypt(b"hello").unwrap())]),
            ),
            ("dumped", Value::Array(vec![])),
        ]),
    );
    assert_eq!(
        value::bytes_of(&items(&answer, "decrypted")[0]),
        Some(&b"hello"[..])
    );
}

// ------------------------------------------------------------------------------ rsa / pem

#[test]
fn oaep_ciphertexts_made_by_salt_decrypt_in_halite() {
    for case in items(at("rsa"), "oaep") {
        let algo = EncAlgo::parse(text(case, "algo")).unwrap();
        assert_eq!(
            minion().decrypt(bytes(case, "ciphertext"), algo).unwrap(),
            bytes(case, "plaintext")
        );
    }
}

#[test]
fn salt_decrypts_oaep_ciphertexts_made_by_halite() {
    let pubkey = minion().public_key().unwrap();
    let plain = fixed("aes").as_bytes();
    let algos = [EncAlgo::OaepSha1, EncAlgo::OaepSha224];
    let list = algos
        .iter()
        .map(|a| {
            map([
                ("algo", s(a.name())),
                ("ciphertext", bin(pubkey.encrypt(plain, *a).unwrap())),
            ])
        })
        .collect();
    let answer = salt("oaep", map([("items", Value::Array(list))]));
    for got in items(&answer, "plaintexts") {
        assert_eq!(value::bytes_of(got), Some(plain));
    }
}

#[test]
fn pkcs1v15_signatures_are_byte_identical_to_salts() {
    let mpub = public(MASTER_PUB);
    for case in items(at("rsa"), "pkcs1v15") {
        let algo = SigAlgo::parse(text(case, "algo")).unwrap();
        let (msg, sig) = (bytes(case, "message"), bytes(case, "signature"));
        assert_eq!(
            hex::encode(master().sign(msg, algo).unwrap()),
            hex::encode(sig),
            "{}",
            algo.name()
        );
        assert!(mpub.verify(msg, sig, algo));
    }
}

fn x931_case(key: &str, message: &[u8]) -> &'static Value {
    items(at("rsa"), "x931")
        .iter()
        .find(|c| text(c, "key") == key && bytes(c, "message") == message)
        .expect("x931 vector present")
}

#[test]
fn x931_signature_of_salt_token_is_byte_identical() {
    let sig = bytes(x931_case("minion", b"salt"), "signature");
    assert_eq!(
        hex::encode(minion().x931_sign(b"salt").unwrap()),
        hex::encode(sig)
    );
    assert!(public(MINION_PUB).x931_verify(sig, b"salt"));
}

#[test]
fn x931_signature_of_aes_key_digest_is_byte_identical() {
    let digest = sha256_hex(fixed("aes").as_bytes());
    let sig = bytes(x931_case("master", digest.as_bytes()), "signature");
    assert_eq!(
        hex::encode(master().x931_sign(digest.as_bytes()).unwrap()),
        hex::encode(sig)
    );
    assert_eq!(
        public(MASTER_PUB).x931_recover(sig).unwrap(),
        digest.as_bytes()
    );
}

#[test]
fn x931_signatures_of_every_length_are_byte_identical() {
    for case in items(at("rsa"), "x931") {
        let key = if text(case, "key") == "master" {
            master()
        } else {
            minion()
        };
        let (msg, sig) = (bytes(case, "message"), bytes(case, "signature"));
        assert_eq!(key.x931_sign(msg).unwrap(), sig, "{} bytes", msg.len());
        assert_eq!(
            key.public_key().unwrap().x931_recover(sig).unwrap(),
            msg,
            "{} bytes",
            msg.len()
        );
    }
}

#[test]
fn pem_text_is_byte_identical_to_salts() {
    let pem = field(at("rsa"), "pem");
    for (private, public_pem, key) in [
        ("master.pem", "master.pub", master()),
        ("minion.pem", "minion.pub", minion()),
    ] {
        assert_eq!(key.to_pem().unwrap(), text(pem, private));
        assert_eq!(
            key.public_key().unwrap().to_pem().unwrap(),
            text(pem, public_pem)
        );
        assert_eq!(
            PublicKey::from_pem(text(pem, public_pem).as_bytes())
                .unwrap()
                .to_pem()
                .unwrap(),
            text(pem, public_pem)
        );
    }
    assert_eq!(text(pem, "master.pub"), MASTER_PUB);
}

#[test]
fn pem_finger_matches_salt() {
    for case in items(at("rsa"), "pem_finger") {
        let contents = match text(case, "file") {
            "master.pub" => MASTER_PUB,
            "minion.pub" => MINION_PUB,
            "master.pem" => MASTER_PEM,
            other => panic!("unknown key file {other}"),
        };
        let sum = text(case, "sum_type");
        assert_eq!(
            pem_finger(contents.as_bytes(), sum).unwrap(),
            text(case, "finger"),
            "{} {sum}",
            text(case, "file")
        );
    }
}

fn clean_key_case(n: &str) -> &'static Value {
    items(at("rsa"), "clean_key")
        .iter()
        .find(|c| name(c) == n)
        .unwrap()
}

#[test]
fn clean_key_matches_salt_for_lf_crlf_and_whitespace() {
    for n in ["as_written", "crlf", "surrounding_whitespace"] {
        let case = clean_key_case(n);
        assert_eq!(clean_key(text(case, "input")), text(case, "output"), "{n}");
    }
}

#[test]
fn clean_key_treats_a_lone_carriage_return_as_a_line_break_like_salt() {
    // Python's str.splitlines() also splits on a bare "\r" (and \v, \f, \x1c-\x1e, \x85,
    // U+2028, U+2029); Rust's str::lines() only on "\n" and "\r\n".
    let case = clean_key_case("lone_cr_line_ends");
    assert_eq!(clean_key(text(case, "input")), text(case, "output"));
}

// ------------------------------------------------------------------------------ auth

#[test]
fn auth_request_built_by_stock_minion_parses() {
    let req = auth_request(bytes(at("auth.first"), "request"));
    assert_eq!(req.id, fixed("minion_id"));
    assert_eq!(req.nonce, fixed("auth_nonce"));
    assert_eq!(req.enc_algo, EncAlgo::OaepSha1);
    assert_eq!(req.sig_algo, SigAlgo::Pkcs1v15Sha1);
    assert_eq!(req.pub_pem, clean_key(MINION_PUB));
    assert_eq!(req.token, None);
    assert!(req.autosign_grains.is_none());
    // Appendix B.2 layout: {"enc", "load": {cmd, id, nonce, enc_algo, sig_algo, pub}, "version"}.
    let body = value::decode(bytes(at("auth.first"), "request")).unwrap();
    assert_eq!(keys_of(&body), ["enc", "load", "version"]);
    assert_eq!(
        keys_of(field(&body, "load")),
        ["cmd", "id", "nonce", "enc_algo", "sig_algo", "pub"]
    );
}

#[test]
fn reauth_request_token_decrypts_with_the_master_key() {
    let req = auth_request(bytes(at("auth.reauth"), "request"));
    let token = req
        .token
        .expect("a minion that knows the master sends a token");
    assert_eq!(
        master().decrypt(&token, req.enc_algo).unwrap(),
        fixed("token").as_bytes()
    );
    let body = value::decode(bytes(at("auth.reauth"), "request")).unwrap();
    assert_eq!(
        keys_of(field(&body, "load")),
        ["cmd", "id", "nonce", "enc_algo", "sig_algo", "token", "pub"]
    );
}

#[test]
fn autosign_grains_request_parses() {
    let req = auth_request(bytes(at("auth"), "autosign_grains_request"));
    assert_eq!(req.id, "grains1");
    let grains = req.autosign_grains.expect("autosign_grains sent");
    assert_eq!(value::get_str(&grains, "os"), Some("Debian"));
}

#[test]
fn accept_reply_built_by_salt_verifies_and_decrypts() {
    let mpub = public(MASTER_PUB);
    for step in ["auth.first", "auth.reauth"] {
        let reply = value::decode(bytes(at(step), "reply")).unwrap();
        assert_eq!(keys_of(&reply), ["enc", "load", "sig"], "{step}");
        let inner = verified_inner(&reply, &mpub);
        assert_eq!(value::get_str(&inner, "enc"), Some("pub"));
        assert_eq!(
            value::get_str(&inner, "pub_key"),
            Some(&*master_pub_clean())
        );
        assert_eq!(value::get_i64(&inner, "publish_port"), Some(4505));
        assert_eq!(value::get_str(&inner, "nonce"), Some(fixed("auth_nonce")));
        let aes = minion()
            .decrypt(bytes(&inner, "aes"), EncAlgo::OaepSha1)
            .unwrap();
        assert_eq!(aes, fixed("aes").as_bytes());
        let session = minion()
            .decrypt(bytes(&inner, "session"), EncAlgo::OaepSha1)
            .unwrap();
        assert_eq!(session, fixed("session").as_bytes());
        assert!(mpub.x931_verify(bytes(&inner, "sig"), sha256_hex(&aes).as_bytes()));
        if step == "auth.reauth" {
            let token = minion()
                .decrypt(bytes(&inner, "token"), EncAlgo::OaepSha1)
                .unwrap();
            assert_eq!(token, fixed("token").as_bytes());
        }
    }
}

fn halite_accept(request_wire: &[u8], master_key: &PrivateKey, aes: &str, session: &str) -> Value {
    let req = auth_request(request_wire);
    let mpub = clean_key(&master_key.public_key().unwrap().to_pem().unwrap());
    let keys = AcceptKeys {
        master_pub: &mpub,
        publish_port: 4505,
        aes,
        session,
        aes_sig: &aes_key_sig(master_key, aes).unwrap(),
    };
    accept_reply(
        master_key,
        &PublicKey::from_pem(req.pub_pem.as_bytes()).unwrap(),
        &req,
        &keys,
    )
    .unwrap()
}

#[test]
fn accept_reply_has_salts_layout_and_x931_signature() {
    for step in ["auth.first", "auth.reauth"] {
        let salt_inner = value::decode(bytes(
            &value::decode(bytes(at(step), "reply")).unwrap(),
            "load",
        ))
        .unwrap();
        let ours = halite_accept(
            bytes(at(step), "request"),
            master(),
            fixed("aes"),
            fixed("session"),
        );
        let inner = verified_inner(&ours, &public(MASTER_PUB));
        assert_eq!(keys_of(&inner), keys_of(&salt_inner), "{step}");
        for k in ["enc", "pub_key", "publish_port", "nonce"] {
            assert_eq!(
                view(field(&inner, k), Reader::Network),
                view(field(&salt_inner, k), Reader::Network),
                "{k}"
            );
        }
        // X9.31 is deterministic: same key, same AES key string, same bytes.
        assert_eq!(bytes(&inner, "sig"), bytes(&salt_inner, "sig"));
    }
}

#[test]
fn pending_reply_built_by_salt_matches_halite_ret_reply() {
    let salt_reply = value::decode(bytes(at("auth.pending"), "reply")).unwrap();
    let salt_inner = verified_inner(&salt_reply, &public(MASTER_PUB));
    let req = auth_request(bytes(at("auth.pending"), "request"));
    let ours = ret_reply(master(), &req, Value::Boolean(true)).unwrap();
    assert_eq!(keys_of(&ours), keys_of(&salt_reply));
    let inner = verified_inner(&ours, &public(MASTER_PUB));
    assert_eq!(
        view(&inner, Reader::Network),
        view(&salt_inner, Reader::Network)
    );
}

fn signin(request: &[u8], reply: &Value, master_pub: bool) -> Value {
    salt(
        "signin",
        map([
            ("request", bin(request.to_vec())),
            ("reply", bin(value::encode(reply))),
            ("master_pub", Value::from(master_pub)),
        ]),
    )
}

#[test]
fn salt_minion_accepts_halite_accept_reply_on_first_contact() {
    let (aes, session) = (
        crypticle::generate_key_string(),
        crypticle::generate_key_string(),
    );
    let request = bytes(at("auth.first"), "request");
    let reply = halite_accept(request, master(), &aes, &session);
    let answer = signin(request, &reply, false);
    let creds = field(&answer, "result");
    assert_eq!(value::get_str(creds, "aes"), Some(&*aes), "{answer}");
    assert_eq!(value::get_bytes(creds, "session"), Some(session.as_bytes()));
    assert_eq!(value::get_i64(creds, "publish_port"), Some(4505));
    // Trust on first use: the minion stored the key Halite sent, in clean_key form.
    assert_eq!(
        value::get_str(creds, "minion_master_pub"),
        Some(&*master_pub_clean())
    );
}

#[test]
fn salt_minion_accepts_halite_accept_reply_on_reauth_with_token() {
    let (aes, session) = (
        crypticle::generate_key_string(),
        crypticle::generate_key_string(),
    );
    let request = bytes(at("auth.reauth"), "request");
    let reply = halite_accept(request, master(), &aes, &session);
    let answer = signin(request, &reply, true);
    assert_eq!(
        value::get_str(field(&answer, "result"), "aes"),
        Some(&*aes),
        "{answer}"
    );
}

#[test]
fn salt_minion_refuses_accept_reply_from_another_master_key() {
    let request = bytes(at("auth.reauth"), "request");
    let reply = halite_accept(request, other(), fixed("aes"), fixed("session"));
    let answer = signin(request, &reply, true);
    let err = value::get_str(&answer, "error")
        .unwrap_or_else(|| panic!("Salt accepted a foreign master: {answer}"));
    assert!(err.contains("Invalid master key"), "{err}");
}

#[test]
fn salt_minion_reads_halite_pending_reply_as_retry() {
    let request = bytes(at("auth.pending"), "request");
    let reply = ret_reply(master(), &auth_request(request), Value::Boolean(true)).unwrap();
    let answer = signin(request, &reply, true);
    assert_eq!(value::get_str(&answer, "result"), Some("retry"), "{answer}");
}

#[test]
fn unsupported_algorithm_replies_match_salt() {
    let body = value::decode(bytes(at("auth.reauth"), "request")).unwrap();
    for case in items(at("auth"), "bad_algorithms") {
        let salt_reply = value::decode(bytes(case, "reply")).unwrap();
        let mut load = field(&body, "load").clone();
        value::set(&mut load, "enc_algo", s(text(case, "enc_algo")));
        value::set(&mut load, "sig_algo", s(text(case, "sig_algo")));
        let with_token = field(case, "with_token") == &Value::Boolean(true);
        if !with_token {
            value::remove(&mut load, "token");
        }
        let err = AuthRequest::parse(&load).unwrap_err();
        if with_token || text(case, "sig_algo") != "PKCS1v15-SHA1" {
            assert_eq!(
                view(&err.reply(), Reader::Network),
                view(&salt_reply, Reader::Network)
            );
        } else {
            // Salt 3008.3 without a token: pub.encrypt raises outside the try, and
            // handle_message answers this string. Halite answers "bad enc algo" instead;
            // either way a stock minion fails the sign-in.
            assert_eq!(err, AuthLoadError::BadEncAlgo);
            assert_eq!(salt_reply, s("Some exception handling minion payload"));
        }
    }
}

fn check_decisions(policy_name: &str, policy: Policy) {
    let presented = clean_key(MINION_PUB);
    let key_of = |who: &str| match who {
        "minion" => clean_key(MINION_PUB),
        "other" => clean_key(OTHER_PUB),
        other => panic!("unknown key {other}"),
    };
    let state_of = |st: &str| match st {
        "pending" => KeyState::Pending,
        "accepted" => KeyState::Accepted,
        "rejected" => KeyState::Rejected,
        other => panic!("unknown state {other}"),
    };
    let cases: Vec<&Value> = items(at("auth"), "decisions")
        .iter()
        .filter(|c| text(c, "policy") == policy_name)
        .collect();
    assert!(!cases.is_empty());
    let mut mismatches = Vec::new();
    for case in cases {
        let state = text(case, "stored_state");
        let who = value::get_str(case, "stored_key");
        let stored_text = who.map(key_of);
        let stored = match (state, &stored_text) {
            ("none" | "denied", _) => None,
            (st, Some(k)) => Some((state_of(st), k.as_str())),
            _ => unreachable!(),
        };
        let d = decide(stored, &presented, policy);
        let outcome = match d {
            Decision::Accept { .. } => s("accept"),
            Decision::Pend { .. } => tagged("bool", [Value::Boolean(true)]),
            Decision::Reject { .. } | Decision::Deny => tagged("bool", [Value::Boolean(false)]),
            Decision::Full => tagged("str", [s("full")]),
        };
        // The keys bank after applying Halite's Store to the stored state.
        let (mut after_state, mut after_key) = match stored {
            Some(_) => (Some(state.to_owned()), who.map(str::to_owned)),
            None => (None, None),
        };
        let mut denied: Vec<String> = if state == "denied" {
            vec![who.unwrap().to_owned()]
        } else {
            vec![]
        };
        match d.store() {
            Store::Nothing => {}
            Store::Key(st) => {
                after_state = Some(
                    match st {
                        KeyState::Accepted => "accepted",
                        KeyState::Pending => "pending",
                        KeyState::Rejected => "rejected",
                        KeyState::Denied => "denied",
                    }
                    .to_owned(),
                );
                after_key = Some("minion".to_owned());
            }
            Store::MoveStored(st) => {
                after_state = Some(
                    match st {
                        KeyState::Accepted => "accepted",
                        KeyState::Pending => "pending",
                        KeyState::Rejected => "rejected",
                        KeyState::Denied => "denied",
                    }
                    .to_owned(),
                );
            }
            Store::AddDenied => {
                if !denied.iter().any(|d| d == "minion") {
                    denied.push("minion".to_owned());
                }
            }
        }
        let salt_denied: Vec<&str> = items(case, "denied_keys")
            .iter()
            .map(|d| value::str_of(d).unwrap())
            .collect();
        let ours = (
            outcome,
            after_state.as_deref(),
            after_key.as_deref(),
            denied.iter().map(String::as_str).collect(),
        );
        let theirs = (
            field(case, "outcome").clone(),
            value::get_str(case, "after_state"),
            value::get_str(case, "after_key"),
            salt_denied,
        );
        if ours != theirs {
            let show = |(o, st, k, den): &(Value, Option<&str>, Option<&str>, Vec<&str>)| {
                format!("reply {o}, keys bank {st:?} holding {k:?}, denied {den:?}")
            };
            mismatches.push(format!(
                "stored {state}/{}: halite {d:?} gives {}; salt gives {}",
                who.unwrap_or("-"),
                show(&ours),
                show(&theirs)
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{policy_name}:\n{}",
        mismatches.join("\n")
    );
}

#[test]
fn auth_decisions_match_salt_with_manual_acceptance() {
    check_decisions("manual", Policy::default());
}

#[test]
fn auth_decisions_match_salt_with_auto_accept() {
    check_decisions(
        "auto_accept",
        Policy {
            autosign: true,
            ..Policy::default()
        },
    );
}

#[test]
fn auth_decisions_match_salt_with_autoreject() {
    check_decisions(
        "autoreject",
        Policy {
            autoreject: true,
            ..Policy::default()
        },
    );
}

#[test]
fn auth_decisions_match_salt_with_autoreject_and_auto_accept() {
    check_decisions(
        "autoreject_and_auto_accept",
        Policy {
            autosign: true,
            autoreject: true,
            ..Policy::default()
        },
    );
}

#[test]
fn auth_decisions_match_salt_in_open_mode() {
    check_decisions(
        "open_mode",
        Policy {
            open_mode: true,
            ..Policy::default()
        },
    );
}

// ------------------------------------------------------------------------------ requests

fn session() -> Crypticle {
    Crypticle::new(fixed("session")).unwrap()
}

#[test]
fn aes_request_built_by_stock_minion_opens_with_session_key() {
    let send = at("requests.send");
    let body = value::decode(bytes(send, "request")).unwrap();
    // Appendix B.3 layout.
    assert_eq!(
        keys_of(&body),
        ["enc", "load", "version", "id", "enc_algo", "sig_algo"]
    );
    let Request::Aes {
        id,
        blob,
        version,
        enc_algo,
        sig_algo,
    } = Request::parse(bytes(send, "request"), usize::MAX).unwrap()
    else {
        panic!("expected an aes request");
    };
    assert_eq!(
        (id, version, enc_algo, sig_algo),
        ("m1", 3, EncAlgo::OaepSha1, SigAlgo::Pkcs1v15Sha1)
    );
    let req = open_aes_request(&session(), id, blob).unwrap();
    assert_eq!(req.nonce.as_deref(), Some(text(at("requests"), "nonce")));
    // The master saw the same load (nonce and tok popped) as Halite does.
    assert_eq!(view(&req.load, Reader::Network), *field(send, "master_saw"));
    let tok = req.tok.expect("v3 requests carry tok");
    assert_eq!(tok, minion().x931_sign(b"salt").unwrap());
    assert!(public(MINION_PUB).x931_verify(&tok, b"salt"));
}

#[test]
fn send_reply_built_by_salt_opens_with_the_request_nonce() {
    let send = at("requests.send");
    let reply = value::decode(bytes(send, "reply")).unwrap();
    let blob = value::bytes_of(&reply).expect("the reply is a msgpack string holding the blob");
    let got = session()
        .loads(blob, Some(text(at("requests"), "nonce")))
        .unwrap();
    assert_eq!(view(&got, Reader::Network), *field(send, "minion_got"));
    assert!(session()
        .loads(blob, Some("00000000000000000000000000000000"))
        .is_err());
}

#[test]
fn salt_minion_opens_halite_seal_reply() {
    let nonce = text(at("requests"), "nonce");
    let ret = map([
        ("stored", Value::Boolean(true)),
        ("bytes", bin(vec![0xfe, 0xff])),
    ]);
    let reply = seal_reply(&session(), &ret, Some(nonce)).unwrap();
    let got = salt_result(
        "send",
        map([("reply", bin(value::encode(&reply))), ("nonce", s(nonce))]),
    );
    assert_eq!(got, view(&ret, Reader::Network));
}

#[test]
fn pillar_reply_built_by_salt_opens_like_a_minion() {
    let pillar = at("requests.pillar");
    let reply = value::decode(bytes(pillar, "reply")).unwrap();
    assert_eq!(keys_of(&reply), ["key", "pillar"]);
    let key = bytes(&reply, "key");
    let k = minion().decrypt(key, EncAlgo::OaepSha1).unwrap();
    let c = Crypticle::new(std::str::from_utf8(&k).unwrap()).unwrap();
    let signed = c.loads(bytes(&reply, "pillar"), None).unwrap();
    let data = bytes(&signed, "data");
    assert!(public(MASTER_PUB).verify(data, bytes(&signed, "sig"), SigAlgo::Pkcs1v15Sha1));
    let data = value::decode(data).unwrap();
    assert_eq!(keys_of(&data), ["key", "pillar", "nonce"]);
    assert_eq!(value::get_bytes(&data, "key"), Some(key));
    assert_eq!(
        value::get_str(&data, "nonce"),
        Some(text(at("requests"), "nonce"))
    );
    assert_eq!(
        view(field(&data, "pillar"), Reader::Network),
        *field(pillar, "minion_got")
    );
}

#[test]
fn pillar_reply_has_salts_layout() {
    let salt_reply = value::decode(bytes(at("requests.pillar"), "reply")).unwrap();
    let mpub = minion().public_key().unwrap();
    let ours = pillar_reply(
        master(),
        &mpub,
        EncAlgo::OaepSha1,
        SigAlgo::Pkcs1v15Sha1,
        &Value::Map(vec![]),
        "n",
    )
    .unwrap();
    assert_eq!(keys_of(&ours), keys_of(&salt_reply));
}

fn test_pillar() -> Value {
    map([
        ("role", s("web")),
        (
            "ports",
            Value::Array(vec![Value::from(80), Value::from(443)]),
        ),
    ])
}

/// What a stock minion's pillar request returns when Halite binds the reply to `nonce`.
fn pillar_via_salt(nonce: &str) -> Value {
    let mpub = minion().public_key().unwrap();
    let reply = pillar_reply(
        master(),
        &mpub,
        EncAlgo::OaepSha1,
        SigAlgo::Pkcs1v15Sha1,
        &test_pillar(),
        nonce,
    )
    .unwrap();
    salt(
        "pillar",
        map([
            ("reply", bin(value::encode(&reply))),
            ("nonce", s(text(at("requests"), "nonce"))),
        ]),
    )
}

#[test]
fn salt_minion_opens_halite_pillar_reply() {
    let answer = pillar_via_salt(text(at("requests"), "nonce"));
    assert_eq!(
        value::get(&answer, "result"),
        Some(&view(&test_pillar(), Reader::Network)),
        "{answer}"
    );
}

#[test]
fn salt_minion_refuses_pillar_reply_bound_to_another_nonce() {
    let answer = pillar_via_salt("ffffffffffffffffffffffffffffffff");
    let err = value::get_str(&answer, "error")
        .unwrap_or_else(|| panic!("Salt accepted a replayed pillar: {answer}"));
    assert!(err.contains("nonce"), "{err}");
}

// ------------------------------------------------------------------------------ publish

fn publish_case(signed: bool) -> &'static Value {
    items(vectors(), "publish")
        .iter()
        .find(|c| field(c, "signed") == &Value::Boolean(signed))
        .unwrap()
}

#[test]
fn publish_frame_built_by_salt_verifies_and_decrypts() {
    for signed in [true, false] {
        let case = publish_case(signed);
        let frame = value::decode(bytes(case, "frame")).unwrap();
        let blob = bytes(&frame, "load");
        if signed {
            assert_eq!(keys_of(&frame), ["enc", "load", "sig_algo", "sig"]);
            let algo = SigAlgo::parse(text(&frame, "sig_algo")).unwrap();
            assert!(public(MASTER_PUB).verify(blob, bytes(&frame, "sig"), algo));
        } else {
            assert_eq!(keys_of(&frame), ["enc", "load"]);
        }
        let aes = Crypticle::new(text(case, "aes")).unwrap();
        let load = aes.loads(blob, None).unwrap();
        // Halite's loads keeps `serial` (Salt's pops it after the replay check).
        assert_eq!(value::get_i64(&load, "serial"), Some(1));
        assert_eq!(view(&load, Reader::Network), *field(case, "load"));
    }
}

fn salt_publish_load() -> Value {
    value::decode(&value::encode(&value::map([
        ("fun", s("test.ping")),
        ("arg", Value::Array(vec![])),
        ("tgt", s("m1")),
        ("jid", s("20261122072315104997")),
        ("ret", s("")),
        ("tgt_type", s("glob")),
        ("user", s("root")),
        ("serial", Value::from(1)),
    ])))
    .unwrap()
}

#[test]
fn publish_frame_has_salts_layout() {
    let aes = Crypticle::new(fixed("aes")).unwrap();
    let load = salt_publish_load();
    let ours = value::decode(
        &publish_frame(&aes, &load, Some((master(), SigAlgo::Pkcs1v15Sha1))).unwrap(),
    )
    .unwrap();
    let theirs = value::decode(bytes(publish_case(true), "frame")).unwrap();
    assert_eq!(keys_of(&ours), keys_of(&theirs));
    assert_eq!(
        value::get_str(&ours, "sig_algo"),
        value::get_str(&theirs, "sig_algo")
    );
    assert_eq!(
        view(
            &aes.loads(bytes(&ours, "load"), None).unwrap(),
            Reader::Network
        ),
        *field(publish_case(true), "load")
    );
}

fn publish_via_salt(signer: Option<&PrivateKey>, signed: bool) -> Value {
    let aes = Crypticle::new(fixed("aes")).unwrap();
    let frame = publish_frame(
        &aes,
        &salt_publish_load(),
        signer.map(|k| (k, SigAlgo::Pkcs1v15Sha1)),
    )
    .unwrap();
    salt(
        "publish",
        map([("frame", bin(frame)), ("signed", Value::from(signed))]),
    )
}

#[test]
fn salt_minion_decodes_halite_publish_frame() {
    for (signer, signed) in [(Some(master()), true), (None, false)] {
        let answer = publish_via_salt(signer, signed);
        let got = field(&answer, "result");
        // The minion's Crypticle pops `serial` (first publish: serial 1 > 0).
        let mut want = salt_publish_load();
        value::remove(&mut want, "serial");
        assert_eq!(*got, view(&want, Reader::Network), "signed={signed}");
    }
}

#[test]
fn salt_minion_refuses_halite_publish_frame_signed_by_another_key() {
    let answer = publish_via_salt(Some(other()), true);
    let err = value::get_str(&answer, "error")
        .unwrap_or_else(|| panic!("Salt accepted a forged publish: {answer}"));
    assert!(err.contains("signature"), "{err}");
}

// ------------------------------------------------------------------------------ events

#[test]
fn event_packing_is_byte_identical_to_salt() {
    for case in items(at("events"), "events") {
        let raw = bytes(case, "event");
        let (tag, data) = event::unpack_event(raw).unwrap();
        assert_eq!(tag, text(case, "tag"));
        assert_eq!(tag, text(case, "unpacked_tag"));
        assert_eq!(
            view(&data, Reader::EventBus),
            *field(case, "unpacked_data"),
            "{tag}"
        );
        assert_eq!(
            hex::encode(event::pack_event(&tag, &data)),
            hex::encode(raw),
            "{tag}"
        );
    }
}

#[test]
fn event_pull_and_pub_frames_are_byte_identical_to_salt() {
    for case in items(at("events"), "events") {
        let raw = bytes(case, "event");
        let (pull, publ) = (bytes(case, "pull"), bytes(case, "pub"));
        assert_eq!(event::frame_pull(raw), pull);
        assert_eq!(event::frame_pub(raw), publ);
        let want = Frame::Complete {
            event: raw.to_vec(),
            consumed: pull.len(),
        };
        assert_eq!(PullFrame::check(pull, 1 << 20).unwrap(), want);
        let mut two = publ.to_vec();
        two.extend_from_slice(publ);
        assert_eq!(
            decode_pub_stream(&two, 1 << 20).unwrap(),
            Frame::Complete {
                event: raw.to_vec(),
                consumed: publ.len()
            }
        );
    }
}

fn utc_micros(v: &Value) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(value::get_i64(v, "unix_micros").unwrap()).unwrap()
}

#[test]
fn event_stamp_matches_salt_isoformat() {
    // datetime.isoformat() leaves the fraction out when microsecond == 0.
    for case in items(at("events"), "stamps") {
        assert_eq!(event::stamp(utc_micros(case)), text(case, "stamp"));
    }
}

#[test]
fn jid_matches_salt_gen_jid() {
    for case in items(at("events"), "jids") {
        assert_eq!(jid::format_jid(utc_micros(case)), text(case, "jid"));
    }
}

// ------------------------------------------------------------------------------ robustness

/// Every message stock Salt produced in the vectors, as it arrives on some socket.
fn salt_messages() -> Vec<&'static [u8]> {
    let mut out = vec![
        bytes(at("auth.first"), "request"),
        bytes(at("auth.first"), "reply"),
        bytes(at("auth.reauth"), "request"),
        bytes(at("auth.reauth"), "reply"),
        bytes(at("auth.pending"), "reply"),
        bytes(at("requests.send"), "request"),
        bytes(at("requests.send"), "reply"),
        bytes(at("requests.pillar"), "request"),
        bytes(at("requests.pillar"), "reply"),
    ];
    out.extend(
        items(vectors(), "publish")
            .iter()
            .map(|c| bytes(c, "frame")),
    );
    for case in items(at("events"), "events") {
        out.extend([
            bytes(case, "event"),
            bytes(case, "pull"),
            bytes(case, "pub"),
        ]);
    }
    out
}

/// Runs every decoder Halite points at untrusted bytes; none may panic.
fn decode_everything(wire: &[u8]) {
    let _ = value::decode(wire);
    match Request::parse(wire, 1 << 20) {
        Ok(Request::Clear { load, .. }) => {
            let _ = AuthRequest::parse(&load);
        }
        Ok(Request::Aes { id, blob, .. }) => {
            let _ = open_aes_request(&session(), id, blob);
        }
        Err(_) => {}
    }
    let _ = value::decode_prefix(wire);
    let _ = PullFrame::check(wire, 1 << 20);
    let _ = decode_pub_stream(wire, 1 << 20);
    let _ = event::unpack_event(wire);
}

#[test]
fn decoders_survive_every_truncation_and_byte_change_of_salts_messages() {
    for wire in salt_messages() {
        for i in 0..wire.len() {
            decode_everything(&wire[..i]);
            for b in [0x00, 0xc1, 0xdb, 0xdd, 0xdf, 0xff, wire[i] ^ 0x01] {
                let mut m = wire.to_vec();
                m[i] = b;
                decode_everything(&m);
            }
        }
    }
}
