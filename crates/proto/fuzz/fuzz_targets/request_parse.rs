//! A request-port body: `Request::parse` (the envelope read without decoding it, a clear
//! load decoded within its budget) and `AuthRequest::parse` for clear loads, as the master
//! does with untrusted bytes from the network.
#![no_main]

use halite_proto::envelope::{AuthRequest, Request};
use halite_proto::value;
use libfuzzer_sys::fuzz_target;

/// The master's default limit for clear requests.
const MAX_CLEAR: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    match Request::parse(data, MAX_CLEAR) {
        Ok(Request::Clear { load, .. }) => {
            if let Err(e) = AuthRequest::parse(&load) {
                let _ = e.reply();
            }
        }
        Ok(Request::Aes { blob, .. }) => {
            // Whenever the whole body also decodes, the borrowed blob is its `load`.
            if let Ok(body) = value::decode(data) {
                assert!(value::bytes_of(value::get(&body, "load").unwrap()) == Some(blob))
            }
        }
        Err(_) => {}
    }
});
