//! A request-port body: msgpack decode, `Request::parse`, and `AuthRequest::parse` for
//! clear loads, as the master does with untrusted bytes from the network.
#![no_main]

use halite_proto::envelope::{AuthRequest, Request};
use halite_proto::value;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(body) = value::decode(data) else {
        return;
    };
    match Request::parse(&body) {
        Ok(Request::Clear { load, .. }) => {
            if let Err(e) = AuthRequest::parse(&load) {
                let _ = e.reply();
            }
        }
        Ok(Request::Aes { blob, .. }) => {
            assert!(value::bytes_of(value::get(&body, "load").unwrap()) == Some(&blob[..]))
        }
        Err(_) => {}
    }
});
