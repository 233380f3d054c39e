//! `AuthRequest::parse` on any decodable load; also with the fields a stock minion always
//! sends forced in, so the fuzzer spends its time on the optional ones.
#![no_main]

use halite_proto::envelope::AuthRequest;
use halite_proto::value::{self, s};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut load) = value::decode(data) else {
        return;
    };
    let _ = AuthRequest::parse(&load);
    for (k, v) in [
        ("cmd", "_auth"),
        ("id", "m1"),
        ("nonce", "00000000000000000000000000000000"),
    ] {
        if value::get(&load, k).is_none() {
            value::set(&mut load, k, s(v));
        }
    }
    if let Ok(req) = AuthRequest::parse(&load) {
        assert_eq!(Some(req.id.as_str()), value::get_str(&load, "id"));
        assert_eq!(Some(req.nonce.as_str()), value::get_str(&load, "nonce"));
    }
});
