//! `value::decode` and `decode_prefix` on arbitrary bytes: never panic, and whatever
//! decodes re-encodes to bytes that decode again.
#![no_main]

use halite_proto::value;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = value::decode(data) {
        // Re-encoding may be shorter (Python never sends wide forms, a fuzzer does), so the
        // re-encoding gets the budget of the original input.
        let again = value::decode_with(&value::encode(&v), value::Budget::for_input(data.len()))
            .expect("Halite's own encoding decodes");
        assert_eq!(value::truthy(&again), value::truthy(&v));
    }
    if let Ok((_, used)) = value::decode_prefix(data) {
        assert!(used <= data.len());
    }
});
