//! A configuration file's text as the daemons load it: Salt's YAML typing
//! (`yaml::load_bytes`, on any bytes), then, for a mapping that sets `id`, the whole
//! master or minion configuration (`from_yaml_str`: defaults, Salt's derivations, the
//! typed fields' checks, Salt's warnings and the unknown-option names with their
//! suggestions). Also the CLIs' typing of one command-line word (`args`).
//!
//! The first byte picks master (even) or minion (odd). A mapping without `id` is not
//! loaded whole: the id would be generated from the host name through the resolver, which
//! is slow, not input-driven, and would make every run depend on the machine.
#![no_main]

use halite_config::{args, yaml, MasterConfig, MinionConfig};
use libfuzzer_sys::fuzz_target;
use rmpv::Value;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Some((&role, text)) = data.split_first() else {
        return;
    };
    let doc = yaml::load_bytes(text);
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let _ = args::yamlify_arg(text);
    let _ = args::parse_kwarg(text);
    let has_id = matches!(&doc, Ok(Value::Map(pairs))
        if pairs.iter().any(|(k, _)| k.as_str() == Some("id")));
    if !has_id {
        return;
    }
    if role % 2 == 0 {
        if let Ok(cfg) = MasterConfig::from_yaml_str(text, Path::new("/etc/salt/master")) {
            for unknown in cfg.unknown_options() {
                let _ = unknown.to_string();
            }
            let _ = cfg.warnings();
        }
    } else if let Ok(cfg) = MinionConfig::from_yaml_str(text, Path::new("/etc/salt/minion")) {
        for unknown in cfg.unknown_options() {
            let _ = unknown.to_string();
        }
        let _ = cfg.warnings();
    }
});
