//! Steps shared by `apply_master_config` and `apply_minion_config`: defaults, gathering
//! the files, the log file override, renamed options, the minion id, and root_dir
//! prepending.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rmpv::Value;

use crate::host::{current_user, dynamic_ipc_buffer, generate_minion_id};
use crate::merge::{include_config, load_main, parse_conf, Gathered};
use crate::options::{OptMap, Origin, Origins};
use crate::paths::{is_uri, prepend_root, py_join};
use crate::types::IdSource;
use crate::validate::Reader;
use crate::{yaml, ConfigError};

/// Which daemon's defaults and rules apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Master,
    Minion,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Master => "master",
            Role::Minion => "minion",
        }
    }
}

fn parse_defaults(text: &str) -> OptMap {
    match yaml::load(text) {
        Ok(Value::Map(pairs)) => OptMap(pairs),
        // Unreachable for the embedded tables; `defaults_parse` tests pin that.
        _ => OptMap::default(),
    }
}

/// Salt's `DEFAULT_<ROLE>_OPTS` without the host-dependent values.
pub(crate) fn static_defaults(role: Role) -> &'static OptMap {
    static MASTER: OnceLock<OptMap> = OnceLock::new();
    static MINION: OnceLock<OptMap> = OnceLock::new();
    match role {
        Role::Master => MASTER.get_or_init(|| parse_defaults(include_str!("defaults/master.yaml"))),
        Role::Minion => MINION.get_or_init(|| parse_defaults(include_str!("defaults/minion.yaml"))),
    }
}

/// Salt's defaults for `role` on this host.
pub(crate) fn defaults(role: Role) -> OptMap {
    let mut opts = static_defaults(role).clone();
    let user = current_user().unwrap_or_else(|| "root".to_owned());
    opts.set("user", Value::from(user));
    if opts.contains("ssh_config_file") {
        let home = std::env::var("HOME").unwrap_or_else(|_| "/".to_owned());
        opts.set(
            "ssh_config_file",
            Value::from(py_join(&py_join(&home, ".ssh"), "config")),
        );
    }
    opts
}

/// `master_config`/`minion_config` up to `apply_*_config`: the main file `conf_path`
/// (missing means defaults), then `default_include`, then `include`.
pub(crate) fn gather(conf_path: &Path, role: Role) -> Result<Gathered, ConfigError> {
    let mut out = Gathered::default();
    if let Some(main) = load_main(conf_path)? {
        out.origins.record(&main, conf_path);
        out.opts = main;
    }
    let default_include = out.opts.get("default_include").cloned().unwrap_or_else(|| {
        static_defaults(role)
            .get("default_include")
            .cloned()
            .unwrap_or(Value::Nil)
    });
    let include = out.opts.get("include").cloned().unwrap_or(Value::Nil);
    for (option, patterns, verbose) in [
        ("default_include", default_include, false),
        ("include", include, true),
    ] {
        let origin = out.origins.of(option);
        let found = include_config(&patterns, conf_path, verbose, option, &origin, 0)?;
        out.opts.update(found.opts);
        out.origins.extend(found.origins);
        out.warnings.extend(found.warnings);
    }
    Ok(out)
}

/// The options of one in-memory main file, without includes.
pub(crate) fn gather_str(yaml: &str, conf_path: &Path) -> Result<Gathered, ConfigError> {
    let mut opts = parse_conf(yaml.as_bytes(), conf_path)?;
    opts.set(
        "conf_file",
        Value::from(conf_path.to_string_lossy().as_ref()),
    );
    let mut origins = Origins::default();
    origins.record(&opts, conf_path);
    Ok(Gathered {
        opts,
        origins,
        warnings: Vec::new(),
    })
}

/// `_adjust_log_file_override`: `log_dir` moves the log file.
pub(crate) fn adjust_log_file_override(
    overrides: &mut Gathered,
    default_log_file: &str,
) -> Result<(), ConfigError> {
    let reader = Reader {
        opts: &overrides.opts,
        origins: &overrides.origins,
    };
    let Some(log_dir) = reader.opt_string("log_dir")?.filter(|d| !d.is_empty()) else {
        return Ok(());
    };
    let log_file = reader.opt_string("log_file")?.filter(|f| !f.is_empty());
    let new = match log_file {
        Some(file) if file.starts_with('/') => return Ok(()),
        Some(file) => py_join(&log_dir, &file),
        None => {
            let base = default_log_file
                .rsplit('/')
                .next()
                .unwrap_or(default_log_file);
            if let Origin::File(path) = overrides.origins.of("log_dir") {
                overrides.origins.set("log_file", &path);
            }
            py_join(&log_dir, base)
        }
    };
    overrides.opts.set("log_file", Value::from(new));
    Ok(())
}

/// The renames both roles apply after merging: `environment` → `saltenv` and
/// `git`/`hg`/`svn`/`minion` → `*fs` in `fileserver_backend`.
pub(crate) fn renamed_options(opts: &mut OptMap, role: Role, warnings: &mut Vec<String>) {
    if let Some(environment) = opts.get("environment").cloned() {
        let saltenv = opts.get("saltenv").cloned().unwrap_or(Value::Nil);
        if saltenv != Value::Nil {
            warnings.push(format!(
                "The 'saltenv' and 'environment' {} config options cannot both be used. Ignoring 'environment' in favor of 'saltenv'.",
                role.name()
            ));
            opts.set("environment", saltenv);
        } else {
            warnings.push(format!(
                "The 'environment' {} config option has been renamed to 'saltenv'. Using {} as the 'saltenv' config value.",
                role.name(),
                crate::pyval::py_str(&environment)
            ));
            opts.set("saltenv", environment);
        }
    }
    if let Some(Value::Array(backends)) = opts.get_mut("fileserver_backend") {
        for backend in backends.iter_mut() {
            if let Some(name @ ("git" | "hg" | "svn" | "minion")) = backend.as_str() {
                *backend = Value::from(format!("{name}fs"));
            }
        }
    }
}

/// The `sock_dir` length rule, `extension_modules` and `utils_dirs`, and
/// `ipc_write_buffer`, common to both roles. `overrides` are the file options.
pub(crate) fn derived_dirs(
    opts: &mut OptMap,
    overrides: &OptMap,
    reader_origins: &Origins,
) -> Result<(), ConfigError> {
    let reader = Reader {
        opts,
        origins: reader_origins,
    };
    let cachedir = reader.string("cachedir")?;
    let sock_dir = reader.string("sock_dir")?;
    if sock_dir.chars().count() > cachedir.chars().count() + 10 {
        opts.set("sock_dir", Value::from(py_join(&cachedir, ".salt-unix")));
    }
    if !opts.truthy("extension_modules") {
        opts.set(
            "extension_modules",
            Value::from(py_join(&cachedir, "extmods")),
        );
    }
    if !opts.truthy("utils_dirs") {
        let reader = Reader {
            opts,
            origins: reader_origins,
        };
        let ext = reader.string("extension_modules")?;
        opts.set(
            "utils_dirs",
            Value::Array(vec![Value::from(py_join(&ext, "utils"))]),
        );
    }
    match overrides.get("ipc_write_buffer") {
        Some(Value::String(s)) if s.as_bytes() == b"dynamic" => {
            opts.set("ipc_write_buffer", Value::from(dynamic_ipc_buffer()));
        }
        Some(_) => {}
        None => opts.set("ipc_write_buffer", Value::from(0)),
    }
    Ok(())
}

/// `transport`: Halite speaks Salt's `zeromq` transport only. Salt's `tcp` and `ws`
/// transports frame messages differently, so a daemon started with them would listen in
/// a language its peers do not speak: refused at start, not ignored.
pub(crate) fn supported_transport(reader: &Reader<'_>) -> Result<(), ConfigError> {
    match reader.opt_string("transport")?.as_deref() {
        None | Some("zeromq") => Ok(()),
        Some(other) => Err(ConfigError::Unsupported {
            option: "transport".to_owned(),
            origin: reader.origins.of("transport"),
            reason: format!(
                "Halite speaks the 'zeromq' transport only, not '{other}'; set 'transport: zeromq' on this daemon and its peers"
            ),
        }),
    }
}

/// Salt's `get_id` (without `id_function`): the cached id under `root_dir`, else a
/// generated one shaped by `minion_id_lowercase` / `minion_id_remove_domain`.
/// Returns the id, its source, and whether it is an IPv4 address.
fn get_id(reader: &Reader<'_>) -> Result<(String, IdSource, bool), ConfigError> {
    let root_dir = reader
        .opt_string("root_dir")?
        .unwrap_or_else(|| "/".to_owned());
    let cache = PathBuf::from(py_join(&py_join(&root_dir, "etc/salt"), "minion_id"));
    let caching = reader
        .opts
        .get("minion_id_caching")
        .is_none_or(crate::options::truthy);
    if caching {
        if let Ok(text) = std::fs::read(&cache) {
            let text = String::from_utf8_lossy(&text);
            let name = text.split_inclusive('\n').next().unwrap_or("").trim();
            if !name.is_empty() && name != "localhost" {
                return Ok((name.to_owned(), IdSource::Cached(cache), false));
            }
        }
    }
    if reader.opts.truthy("id_function") {
        return Err(ConfigError::Unsupported {
            option: "id_function".to_owned(),
            origin: reader.origins.of("id_function"),
            reason: "minion ids computed by execution modules are not available; set 'id' instead"
                .to_owned(),
        });
    }
    let mut id = generate_minion_id();
    if reader.opts.truthy("minion_id_lowercase") {
        id = id.to_lowercase();
    }
    match reader.opts.get("minion_id_remove_domain") {
        Some(Value::Boolean(true)) => {
            if let Some((host, _)) = id.split_once('.') {
                id = host.to_owned();
            }
        }
        Some(v) if crate::options::truthy(v) => {
            let domain = reader.string("minion_id_remove_domain")?;
            let suffix = format!(".{}", domain.to_uppercase());
            if id.to_uppercase().ends_with(&suffix) {
                let keep = id.len().saturating_sub(domain.len() + 1);
                id = id.get(..keep).unwrap_or(&id).to_owned();
            }
        }
        _ => {}
    }
    let is_ip = id.parse::<std::net::Ipv4Addr>().is_ok();
    Ok((id, IdSource::Generated, is_ip))
}

/// The id step of `apply_*_config`: keeps a configured id, else looks one up; then
/// `append_domain`. Returns the id, its source, and whether Salt's master would add
/// `_master` (only when the id was not configured).
pub(crate) fn resolve_id(
    opts: &OptMap,
    origins: &Origins,
) -> Result<(String, IdSource), ConfigError> {
    let reader = Reader { opts, origins };
    let configured = reader.opt_string("id")?.filter(|id| !id.is_empty());
    let (mut id, source, is_ip) = match configured {
        Some(id) => (id, IdSource::Configured, false),
        None => get_id(&reader)?,
    };
    if !is_ip && opts.contains("append_domain") {
        let domain = reader.string("append_domain")?;
        if !id.ends_with(&domain) && !id.ends_with('.') {
            id = format!("{id}.{domain}");
        }
    }
    Ok((id, source))
}

/// `prepend_root_dir` over `always` plus those of `if_not_uri` that are not URIs.
/// Absent and `null` options are left alone.
pub(crate) fn prepend_root_dirs(
    opts: &mut OptMap,
    origins: &Origins,
    always: &[&str],
    if_not_uri: &[&str],
) -> Result<(), ConfigError> {
    let reader = Reader { opts, origins };
    let root_dir = reader.string("root_dir")?;
    let mut updates = Vec::new();
    for &name in always.iter().chain(if_not_uri) {
        let Some(path) = reader.opt_string(name)? else {
            continue;
        };
        if if_not_uri.contains(&name) && is_uri(&path) {
            continue;
        }
        updates.push((name, prepend_root(&root_dir, &path)));
    }
    for (name, path) in updates {
        opts.set(name, Value::from(path));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_parse() {
        for role in [Role::Master, Role::Minion] {
            let opts = static_defaults(role);
            assert!(opts.0.len() > 300, "{role:?} has {} options", opts.0.len());
        }
        assert_eq!(
            static_defaults(Role::Master).get("publish_port"),
            Some(&Value::from(4505))
        );
        assert_eq!(
            static_defaults(Role::Minion).get("id"),
            Some(&Value::from(""))
        );
    }
}
