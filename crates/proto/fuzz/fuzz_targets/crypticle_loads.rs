//! `Crypticle::loads` with a fixed key. Raw input almost never passes the HMAC, so the
//! input is also encrypted first to reach the prefix, nonce and msgpack checks behind it.
#![no_main]

use halite_proto::crypticle::Crypticle;
use libfuzzer_sys::fuzz_target;

const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc=";
const NONCE: &str = "0d6e1f2a3b4c4d5e8f90a1b2c3d4e5f6";

fuzz_target!(|data: &[u8]| {
    let c = Crypticle::new(KEY).expect("the fixed key is a valid key string");
    let _ = c.loads(data, None);
    let _ = c.loads(data, Some(NONCE));
    let blob = c
        .encrypt(data)
        .expect("encryption of any plaintext succeeds");
    assert_eq!(c.decrypt(&blob).expect("own blob decrypts"), data);
    let _ = c.loads(&blob, None);
    let _ = c.loads(&blob, Some(NONCE));
});
