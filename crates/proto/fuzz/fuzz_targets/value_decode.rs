//! `value::decode` and `decode_prefix` on arbitrary bytes: never panic, and whatever
//! decodes re-encodes to bytes that decode again.
#![no_main]

use halite_proto::value;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = value::decode(data) {
        let again = value::decode(&value::encode(&v)).expect("Halite's own encoding decodes");
        assert_eq!(value::truthy(&again), value::truthy(&v));
    }
    if let Ok((_, used)) = value::decode_prefix(data) {
        assert!(used <= data.len());
    }
});
