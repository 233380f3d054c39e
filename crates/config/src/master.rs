//! The master configuration: `master_config` + `apply_master_config` of Salt 3008.3.

use std::path::{Path, PathBuf};

use rmpv::Value;

use crate::apply::{self, Role};
use crate::merge::Gathered;
use crate::options::{OptMap, Origins};
use crate::pyval::py_eq;
use crate::types::{EncryptionAlgorithm, IdSource, LogLevel, SigningAlgorithm};
use crate::validate::{salt_type_warnings, Reader};
use crate::ConfigError;

/// Options whose values `MasterConfig` checks strictly; Salt's generic type warnings are
/// not repeated for them.
pub(crate) const TYPED: &[&str] = &[
    "id",
    "interface",
    "ipv6",
    "publish_port",
    "ret_port",
    "root_dir",
    "pki_dir",
    "cachedir",
    "sock_dir",
    "user",
    "auto_accept",
    "autosign_file",
    "autoreject_file",
    "open_mode",
    "keep_jobs_seconds",
    "worker_threads",
    "log_level",
    "log_level_logfile",
    "log_file",
    "key_logfile",
    "max_event_size",
    "sign_pub_messages",
    "timeout",
    "gather_job_timeout",
    "hash_type",
    "keysize",
    "publish_session",
    "minimum_auth_version",
    "max_minions",
    "auth_events",
    "minion_data_cache",
    "job_cache",
    "publish_signing_algorithm",
    "cluster_encryption_algorithm",
    "conf_file",
    "master_sign_pubkey",
    "master_sign_key_name",
    "master_use_pubkey_signature",
    "master_pubkey_signature",
    "max_pending_keys",
    "request_server_ttl",
    "max_request_size",
    "max_clear_request_size",
];

/// Default of `max_pending_keys` (a Halite option).
///
/// Any peer that reaches the request port can store a pending key under a new id without
/// credentials, so without a cap a loop of `_auth` requests fills `minions_pre/` (a file
/// and an inode each) until the disk or `salt-key -L` gives out. 10,000 is the largest
/// fleet the benchmark runs, all brought up at once before anyone accepts a key, and costs
/// about 5 MB of key files and a listing salt-key still prints in well under a second.
/// `auto_accept` and `autosign_file` minions never wait in pending and are not limited by it.
pub const DEFAULT_MAX_PENDING_KEYS: u64 = 10_000;

/// Default of `max_request_size` (a Halite option): the largest request body the request
/// port takes (libzmq's `maxmsgsize` there; a peer sending more is disconnected). Salt has
/// no limit; 64 MiB is far above any return a minion sends in practice and bounds what one
/// request can cost the master.
pub const DEFAULT_MAX_REQUEST_SIZE: u64 = 64 << 20;

/// Default of `max_clear_request_size` (a Halite option): the largest clear (unencrypted,
/// unauthenticated) request body. Stock 3008.3 clients send far less: `_auth` ~0.9 KiB
/// (2048-bit keys) to ~1.6 KiB (4096-bit, with `autosign_grains`), a `publish` a few
/// hundred bytes plus its arguments, a `salt-cp --chunked` chunk 86 KiB at the default
/// `salt_cp_chunk_size` (65536, base64-encoded) and 1.34 MiB at 1 MiB chunks. Old-style
/// `salt-cp` (without `--chunked`) sends whole files in one request and is refused above
/// this size.
pub const DEFAULT_MAX_CLEAR_REQUEST_SIZE: u64 = 1 << 20;

/// The smallest `max_request_size` and `max_clear_request_size` accepted: a sign-in with
/// a large key and grains, or a return of a few lines, must fit.
const MIN_REQUEST_SIZE: u64 = 64 << 10;

/// A loaded salt-master configuration.
///
/// The typed fields are read from [`MasterConfig::raw`] after Salt's derivations; `raw`
/// holds every option (Salt's defaults, overridden by the files, with derived values such
/// as root-prefixed paths written back), in Salt's key order.
#[derive(Debug, Clone)]
pub struct MasterConfig {
    /// `id`: configured, else `<cached minion id or generated FQDN>_master`.
    pub id: String,
    /// Where `id` came from.
    pub id_source: IdSource,
    /// `interface` to bind (`0.0.0.0`).
    pub interface: String,
    /// `ipv6` (Salt's default `None` behaves as false on the master).
    pub ipv6: bool,
    /// `publish_port` (4505).
    pub publish_port: u16,
    /// `ret_port` (4506).
    pub ret_port: u16,
    /// `root_dir` as configured (`/`).
    pub root_dir: PathBuf,
    /// `pki_dir` under `root_dir` (`/etc/salt/pki/master`).
    pub pki_dir: PathBuf,
    /// `cachedir` under `root_dir` (`/var/cache/salt/master`).
    pub cachedir: PathBuf,
    /// `sock_dir` under `root_dir` (`/var/run/salt/master`; `<cachedir>/.salt-unix` when
    /// the configured one is more than 10 characters longer than `cachedir`).
    pub sock_dir: PathBuf,
    /// `token_dir`: always `<cachedir>/tokens`.
    pub token_dir: PathBuf,
    /// `extension_modules` under `root_dir` (`/var/cache/salt/master/extmods`).
    pub extension_modules: PathBuf,
    /// `pidfile` under `root_dir` (`/var/run/salt-master.pid`).
    pub pidfile: PathBuf,
    /// `user` to run as (Salt's default: the user loading the configuration).
    pub user: String,
    /// `auto_accept` (false).
    pub auto_accept: bool,
    /// `autosign_file` under `root_dir` (unset by default in 3008.3).
    pub autosign_file: Option<PathBuf>,
    /// `autoreject_file` under `root_dir` (unset by default).
    pub autoreject_file: Option<PathBuf>,
    /// `open_mode` (false).
    pub open_mode: bool,
    /// `keep_jobs_seconds` (86400). The legacy `keep_jobs` (hours) is ignored, as in
    /// Salt 3008.3, which no longer reads it.
    pub keep_jobs_seconds: u64,
    /// `worker_threads` (5, at least 1; raised to 3 when `peer` is set, as Salt does).
    pub worker_threads: u32,
    /// `log_level` (warning).
    pub log_level: LogLevel,
    /// `log_level_logfile` (unset: follow `log_level`).
    pub log_level_logfile: Option<LogLevel>,
    /// `log_file`: a path under `root_dir`, or a URI such as `udp://host:514`.
    pub log_file: String,
    /// `key_logfile`: like `log_file` (`/var/log/salt/key`).
    pub key_logfile: String,
    /// `max_event_size` in bytes (1048576).
    pub max_event_size: u64,
    /// `sign_pub_messages` (true).
    pub sign_pub_messages: bool,
    /// `timeout` for CLI jobs, in seconds (5).
    pub timeout: u64,
    /// `gather_job_timeout` in seconds (10).
    pub gather_job_timeout: u64,
    /// `hash_type`, lower-cased (sha256).
    pub hash_type: String,
    /// `keysize` of generated RSA keys (2048).
    pub keysize: u32,
    /// `publish_session` rotation period in seconds (86400).
    pub publish_session: u64,
    /// `minimum_auth_version` (3).
    pub minimum_auth_version: u32,
    /// `max_minions` (0: unlimited).
    pub max_minions: u64,
    /// `request_server_ttl` in seconds (0: off, as in Salt): encrypted requests whose `ts`
    /// is older than this are refused.
    pub request_server_ttl: u64,
    /// `max_pending_keys`, a Halite option ([`DEFAULT_MAX_PENDING_KEYS`]; 0: unlimited, as
    /// in Salt): once this many keys are pending, a sign-in that would store another one is
    /// refused until keys are accepted, rejected or deleted.
    pub max_pending_keys: u64,
    /// `max_request_size`, a Halite option ([`DEFAULT_MAX_REQUEST_SIZE`], at least
    /// 65536): the largest request body, in bytes.
    pub max_request_size: u64,
    /// `max_clear_request_size`, a Halite option ([`DEFAULT_MAX_CLEAR_REQUEST_SIZE`], at
    /// least 65536, at most `max_request_size`): the largest clear request body, in bytes.
    pub max_clear_request_size: u64,
    /// `auth_events` (true).
    pub auth_events: bool,
    /// `minion_data_cache` (true).
    pub minion_data_cache: bool,
    /// `job_cache` (true).
    pub job_cache: bool,
    /// `publish_signing_algorithm` (PKCS1v15-SHA1).
    pub publish_signing_algorithm: SigningAlgorithm,
    /// `cluster_encryption_algorithm` (OAEP-SHA1).
    pub cluster_encryption_algorithm: EncryptionAlgorithm,
    /// `conf_file`: the main file if it was read, else Salt's default `/etc/salt/master`.
    pub conf_file: PathBuf,
    /// `master_sign_pubkey` (false): sign the master public key in every auth reply.
    pub master_sign_pubkey: bool,
    /// `master_sign_key_name` (`master_sign`): the signing pair is `<name>.pem/.pub` in
    /// `pki_dir`.
    pub master_sign_key_name: String,
    /// `master_use_pubkey_signature` (false): with `master_sign_pubkey`, send the signature
    /// read from [`MasterConfig::master_pubkey_signature`] instead of signing.
    pub master_use_pubkey_signature: bool,
    /// `master_pubkey_signature`: the signature file's name in `pki_dir`. Unset or empty
    /// means `<id>_pubkey_signature` (3008.3's `MasterKeys`; older Salt and salt-key's help
    /// text say `master_pubkey_signature`).
    pub master_pubkey_signature: String,
    /// Every option as a msgpack map (Salt's `opts`).
    pub raw: Value,
    origins: Origins,
    warnings: Vec<String>,
}

impl MasterConfig {
    /// Loads `dir/master` plus `dir/master.d/*.conf` (and any `include`d files).
    /// A missing `dir/master` means Salt's defaults.
    pub fn load(dir: &Path) -> Result<MasterConfig, ConfigError> {
        Self::load_file(&dir.join("master"))
    }

    /// Loads the main file `conf_file` and its includes (relative to its directory).
    pub fn load_file(conf_file: &Path) -> Result<MasterConfig, ConfigError> {
        Self::build(apply::gather(conf_file, Role::Master)?)
    }

    /// Builds a configuration from the text of a main file named `conf_file`, without
    /// reading any include. Useful in tests; only the minion id cache (when no `id` is
    /// set) is read from disk.
    pub fn from_yaml_str(yaml: &str, conf_file: &Path) -> Result<MasterConfig, ConfigError> {
        Self::build(apply::gather_str(yaml, conf_file)?)
    }

    /// Salt's defaults with `root_dir` set to `root_dir` and every path below it.
    ///
    /// # Panics
    /// Never for the built-in defaults; a panic here is a bug in this crate.
    pub fn defaults_in(root_dir: &Path) -> MasterConfig {
        let mut overrides = Gathered::default();
        overrides
            .opts
            .set("root_dir", Value::from(root_dir.to_string_lossy().as_ref()));
        Self::build(overrides).expect("Salt's master defaults are valid")
    }

    /// The value of any option, typed or not.
    pub fn get(&self, option: &str) -> Option<&Value> {
        raw_get(&self.raw, option)
    }

    /// A roots option (`file_roots`, `pillar_roots`) as Salt's `_validate_file_roots`
    /// leaves it: `(saltenv, directories)` in the file's order, the saltenv as Python's
    /// `str()` of the key, a value that is not a list read as no directories, and each
    /// directory holding `*`, `?` or `[` expanded like `glob.glob` (sorted here; Python's
    /// order is the directory's). An option that is not a mapping means Salt's fallback
    /// `{base: [/srv/salt]}` (for `pillar_roots` too, as in Salt). Entries that are not
    /// strings are dropped (Salt would fail on them later).
    pub fn roots(&self, option: &str) -> Vec<(String, Vec<String>)> {
        let Some(Value::Map(pairs)) = self.get(option) else {
            return vec![("base".to_owned(), vec!["/srv/salt".to_owned()])];
        };
        pairs
            .iter()
            .map(|(env, dirs)| {
                let dirs = match dirs {
                    Value::Array(items) => items
                        .iter()
                        .filter_map(Value::as_str)
                        .flat_map(expand_glob_path)
                        .collect(),
                    _ => Vec::new(),
                };
                (py_str_key(env), dirs)
            })
            .collect()
    }

    /// Options set in the files (main and included) that neither Salt nor Halite knows,
    /// each with the file and the closest valid name; the daemons warn about them.
    pub fn unknown_options(&self) -> Vec<crate::UnknownOption> {
        crate::names::unknown(&self.origins, Role::Master)
    }

    /// Warnings Salt would log while loading this configuration (type warnings from
    /// `_validate_opts` for untyped options, renamed options, includes matching nothing).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Where `option` was set.
    pub fn origin(&self, option: &str) -> crate::Origin {
        self.origins.of(option)
    }

    fn build(mut gathered: Gathered) -> Result<MasterConfig, ConfigError> {
        let mut opts = apply::defaults(Role::Master);
        let default_log_file = opts
            .str("log_file")
            .unwrap_or("/var/log/salt/master")
            .to_owned();
        apply::adjust_log_file_override(&mut gathered, &default_log_file)?;
        let Gathered {
            opts: mut overrides,
            mut origins,
            mut warnings,
        } = gathered;
        if overrides.contains("cluster_port") && !overrides.contains("cluster_pool_port") {
            warnings.push(
                "The 'cluster_port' master opt is deprecated and will be removed in Argon+1 / Potassium; use 'cluster_pool_port' instead."
                    .to_owned(),
            );
            if let Some(port) = overrides.get("cluster_port").cloned() {
                overrides.set("cluster_pool_port", port);
                if let crate::Origin::File(path) = origins.of("cluster_port") {
                    origins.set("cluster_pool_port", &path);
                }
            }
        }
        opts.update(overrides.clone());

        if external_auth_has_rest(opts.get("external_auth")) {
            if opts.get("keep_acl_in_token") == Some(&Value::Boolean(false)) {
                warnings.push("The 'rest' external_auth backend requires 'keep_acl_in_token' to be True. Setting 'keep_acl_in_token' to True.".to_owned());
            }
            opts.set("keep_acl_in_token", Value::Boolean(true));
        }
        apply::renamed_options(&mut opts, Role::Master, &mut warnings);
        apply::derived_dirs(&mut opts, &overrides, &origins)?;
        {
            let reader = Reader {
                opts: &opts,
                origins: &origins,
            };
            let cachedir = reader.string("cachedir")?;
            opts.set(
                "token_dir",
                Value::from(crate::paths::py_join(&cachedir, "tokens")),
            );
            opts.set(
                "syndic_dir",
                Value::from(crate::paths::py_join(&cachedir, "syndics")),
            );
        }

        let (mut id, id_source) = apply::resolve_id(&opts, &origins)?;
        if id_source != IdSource::Configured {
            id.push_str("_master");
        }
        opts.set("id", Value::from(id.as_str()));

        apply::prepend_root_dirs(
            &mut opts,
            &origins,
            &[
                "pki_dir",
                "cachedir",
                "pidfile",
                "sock_dir",
                "extension_modules",
                "autosign_file",
                "autoreject_file",
                "token_dir",
                "syndic_dir",
                "sqlite_queue_dir",
                "autosign_grains_dir",
            ],
            &["log_file", "key_logfile", "ssh_log_file"],
        )?;
        cluster_settings(&mut opts, &mut warnings);

        let reader = Reader {
            opts: &opts,
            origins: &origins,
        };
        apply::supported_transport(&reader)?;
        let auto_accept = reader.boolean("auto_accept")?;
        let open_mode = reader.boolean("open_mode")?;
        let mut worker_threads = reader.u32_min("worker_threads", 1, "a positive integer")?;
        if worker_threads < 3 && opts.truthy("peer") {
            warnings.push(format!(
                "The 'worker_threads' setting in '{}' cannot be lower than 3. Resetting it to the default value of 3.",
                opts.str("conf_file").unwrap_or("")
            ));
            worker_threads = 3;
        }
        let hash_type = reader.string("hash_type")?.to_lowercase();
        let publish_signing_algorithm =
            reader.choice("publish_signing_algorithm", &SigningAlgorithm::CHOICES)?;
        let cluster_encryption_algorithm = reader.choice(
            "cluster_encryption_algorithm",
            &EncryptionAlgorithm::CHOICES,
        )?;
        let log_level = reader.log_level("log_level")?;
        let log_level_logfile = match opts.get("log_level_logfile") {
            None | Some(Value::Nil) => None,
            Some(_) => Some(reader.log_level("log_level_logfile")?),
        };
        // `opts.get("master_pubkey_signature") or f"{opts['id']}_pubkey_signature"`.
        let master_pubkey_signature = reader
            .opt_string("master_pubkey_signature")?
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| format!("{id}_pubkey_signature"));
        let size = |name: &str, default: u64| match opts.get(name) {
            None | Some(Value::Nil) => Ok(default),
            Some(_) => reader.u64_min(name, MIN_REQUEST_SIZE, "a number of bytes, at least 65536"),
        };
        let max_request_size = size("max_request_size", DEFAULT_MAX_REQUEST_SIZE)?;
        let max_clear_request_size =
            size("max_clear_request_size", DEFAULT_MAX_CLEAR_REQUEST_SIZE)?;
        let config = MasterConfig {
            id,
            id_source,
            interface: reader.string("interface")?,
            ipv6: reader.opt_bool("ipv6")?.unwrap_or(false),
            publish_port: reader.port("publish_port")?,
            ret_port: reader.port("ret_port")?,
            root_dir: PathBuf::from(reader.string("root_dir")?),
            pki_dir: PathBuf::from(reader.string("pki_dir")?),
            cachedir: PathBuf::from(reader.string("cachedir")?),
            sock_dir: PathBuf::from(reader.string("sock_dir")?),
            token_dir: PathBuf::from(reader.string("token_dir")?),
            extension_modules: PathBuf::from(reader.string("extension_modules")?),
            pidfile: PathBuf::from(reader.string("pidfile")?),
            user: reader.string("user")?,
            auto_accept,
            autosign_file: reader.opt_string("autosign_file")?.map(PathBuf::from),
            autoreject_file: reader.opt_string("autoreject_file")?.map(PathBuf::from),
            open_mode,
            keep_jobs_seconds: reader
                .u64("keep_jobs_seconds", "a non-negative number of seconds")?,
            worker_threads,
            log_level,
            log_level_logfile,
            log_file: reader.string("log_file")?,
            key_logfile: reader.string("key_logfile")?,
            max_event_size: reader.u64("max_event_size", "a non-negative number of bytes")?,
            sign_pub_messages: reader.boolean("sign_pub_messages")?,
            timeout: reader.u64("timeout", "a non-negative number of seconds")?,
            gather_job_timeout: reader
                .u64("gather_job_timeout", "a non-negative number of seconds")?,
            hash_type,
            keysize: reader.u32_min("keysize", 1, "a positive number of bits")?,
            publish_session: reader.u64("publish_session", "a non-negative number of seconds")?,
            minimum_auth_version: reader.u32_min(
                "minimum_auth_version",
                0,
                "a non-negative integer",
            )?,
            max_minions: reader.u64("max_minions", "a non-negative integer")?,
            request_server_ttl: reader
                .u64("request_server_ttl", "a non-negative number of seconds")?,
            max_pending_keys: match opts.get("max_pending_keys") {
                None | Some(Value::Nil) => DEFAULT_MAX_PENDING_KEYS,
                Some(_) => reader.u64("max_pending_keys", "a non-negative integer")?,
            },
            max_request_size,
            max_clear_request_size: max_clear_request_size.min(max_request_size),
            auth_events: reader.boolean("auth_events")?,
            minion_data_cache: reader.boolean("minion_data_cache")?,
            job_cache: reader.boolean("job_cache")?,
            publish_signing_algorithm,
            cluster_encryption_algorithm,
            conf_file: PathBuf::from(reader.string("conf_file")?),
            master_sign_pubkey: reader.boolean("master_sign_pubkey")?,
            master_sign_key_name: reader.string("master_sign_key_name")?,
            master_use_pubkey_signature: reader.boolean("master_use_pubkey_signature")?,
            master_pubkey_signature,
            raw: Value::Nil,
            origins: Origins::default(),
            warnings: Vec::new(),
        };

        // Write the normalised values back, as Salt's apply step does.
        opts.set("worker_threads", Value::from(worker_threads));
        opts.set("hash_type", Value::from(config.hash_type.as_str()));
        opts.set("auto_accept", Value::Boolean(auto_accept));
        opts.set("open_mode", Value::Boolean(open_mode));
        if !opts.contains("pillar_source_merging_strategy") {
            opts.set("pillar_source_merging_strategy", Value::from("smart"));
        }
        normalise_nodegroups(&mut opts);
        join_return_list(&mut opts);
        warnings.extend(salt_type_warnings(&opts, TYPED));
        Ok(MasterConfig {
            raw: Value::Map(opts.0),
            origins,
            warnings,
            ..config
        })
    }
}

pub(crate) fn raw_get<'a>(raw: &'a Value, option: &str) -> Option<&'a Value> {
    match raw {
        Value::Map(pairs) => pairs
            .iter()
            .find(|(k, _)| crate::options::key_is(k, option))
            .map(|(_, v)| v),
        _ => None,
    }
}

/// Salt's `_expand_glob_path` for one directory: globbed when it has magic characters.
fn expand_glob_path(dir: &str) -> Vec<String> {
    if !dir.contains(['*', '?', '[']) {
        return vec![dir.to_owned()];
    }
    let mut found: Vec<String> = crate::glob::glob(Path::new(dir))
        .into_iter()
        .filter_map(|p| p.to_str().map(str::to_owned))
        .collect();
    found.sort();
    found
}

/// Python's `str()` of a YAML mapping key (a string, a number, a boolean or null).
fn py_str_key(key: &Value) -> String {
    match key {
        Value::String(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        Value::Boolean(true) => "True".to_owned(),
        Value::Boolean(false) => "False".to_owned(),
        Value::Nil => "None".to_owned(),
        Value::F64(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e16 => format!("{f:.1}"),
        other => other.to_string(),
    }
}

/// `"rest" in opts.get("external_auth", {})`.
fn external_auth_has_rest(value: Option<&Value>) -> bool {
    let rest = Value::from("rest");
    match value {
        Some(Value::Map(pairs)) => pairs.iter().any(|(k, _)| py_eq(k, &rest)),
        Some(Value::Array(items)) => items.iter().any(|item| py_eq(item, &rest)),
        _ => false,
    }
}

/// The cluster block of `apply_master_config`.
fn cluster_settings(opts: &mut OptMap, warnings: &mut Vec<String>) {
    if !opts.contains("cluster_id") {
        opts.set("cluster_id", Value::Nil);
    }
    if opts.get("cluster_id") != Some(&Value::Nil) {
        if !opts.truthy("cluster_peers") && !opts.truthy("cluster_secret") {
            warnings.push("Cluster id defined without defining cluster peers".to_owned());
            opts.set("cluster_peers", Value::Array(Vec::new()));
        }
        if !opts.truthy("cluster_pki_dir") {
            warnings.push(
                "Cluster id defined without defining cluster pki, falling back to pki_dir"
                    .to_owned(),
            );
            let pki_dir = opts.get("pki_dir").cloned().unwrap_or(Value::Nil);
            opts.set("cluster_pki_dir", pki_dir);
        }
    } else {
        if opts.truthy("cluster_peers") {
            warnings.push("Cluster peers defined without a cluster_id, ignoring.".to_owned());
            opts.set("cluster_peers", Value::Array(Vec::new()));
        }
        if opts.truthy("cluster_pki_dir") {
            warnings.push("Cluster pki dir defined without a cluster_id, ignoring.".to_owned());
            opts.set("cluster_pki_dir", Value::Nil);
        }
    }
}

/// `nodegroups: ~` means none; a list of one-key mappings is repacked into one mapping.
fn normalise_nodegroups(opts: &mut OptMap) {
    match opts.get("nodegroups") {
        None | Some(Value::Nil) => opts.set("nodegroups", Value::Map(Vec::new())),
        Some(Value::Array(items))
            if items
                .iter()
                .all(|item| matches!(item, Value::Map(m) if m.len() == 1)) =>
        {
            let mut merged = OptMap::default();
            for item in items.clone() {
                if let Value::Map(pairs) = item {
                    merged.update(OptMap(pairs));
                }
            }
            opts.set("nodegroups", Value::Map(merged.0));
        }
        _ => {}
    }
}

/// `_validate_opts` turns a `return` list into a comma-separated string.
pub(crate) fn join_return_list(opts: &mut OptMap) {
    if let Some(Value::Array(items)) = opts.get("return") {
        let joined: Vec<String> = items.iter().map(crate::pyval::py_str).collect();
        let joined = joined.join(",");
        opts.set("return", Value::from(joined));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str) -> Result<MasterConfig, ConfigError> {
        MasterConfig::from_yaml_str(yaml, Path::new("/m/master"))
    }

    #[test]
    fn signing_options_default_like_salt_3008() {
        let cfg = load("id: mm_master\n").unwrap();
        assert!(!cfg.master_sign_pubkey);
        assert_eq!(cfg.master_sign_key_name, "master_sign");
        assert!(!cfg.master_use_pubkey_signature);
        assert_eq!(cfg.master_pubkey_signature, "mm_master_pubkey_signature");
        assert_eq!(cfg.get("master_pubkey_signature"), Some(&Value::Nil));
    }

    #[test]
    fn signing_options_are_read_and_an_empty_signature_name_means_the_default() {
        let cfg = load(
            "id: mm\nmaster_sign_pubkey: True\nmaster_sign_key_name: signer\n\
             master_use_pubkey_signature: true\nmaster_pubkey_signature: mm.sig\n",
        )
        .unwrap();
        assert!(cfg.master_sign_pubkey && cfg.master_use_pubkey_signature);
        assert_eq!(cfg.master_sign_key_name, "signer");
        assert_eq!(cfg.master_pubkey_signature, "mm.sig");
        let cfg = load("id: mm\nmaster_pubkey_signature: ''\n").unwrap();
        assert_eq!(cfg.master_pubkey_signature, "mm_pubkey_signature");
    }

    #[test]
    fn roots_follow_salts_validate_file_roots() {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["f1", "f2", "other"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        let d = dir.path().display();
        let cfg = load(&format!(
            "file_roots:\n  base: [/srv/a, '{d}/f*']\n  2: /not/a/list\n  dev: [/srv/d, 7]\n"
        ))
        .unwrap();
        assert_eq!(
            cfg.roots("file_roots"),
            vec![
                (
                    "base".to_owned(),
                    vec!["/srv/a".to_owned(), format!("{d}/f1"), format!("{d}/f2")]
                ),
                ("2".to_owned(), vec![]),
                ("dev".to_owned(), vec!["/srv/d".to_owned()]),
            ]
        );
        let cfg = load("file_roots: [/srv/x]\n").unwrap();
        assert_eq!(
            cfg.roots("file_roots"),
            vec![("base".to_owned(), vec!["/srv/salt".to_owned()])]
        );
        let cfg = load("id: m\n").unwrap();
        assert_eq!(
            cfg.roots("file_roots"),
            vec![(
                "base".to_owned(),
                vec!["/srv/salt".to_owned(), "/srv/spm/salt".to_owned()]
            )]
        );
    }

    #[test]
    fn signing_switches_must_be_booleans() {
        for option in ["master_sign_pubkey", "master_use_pubkey_signature"] {
            let err = load(&format!("{option}: 'yes'\n")).unwrap_err();
            assert!(err.to_string().contains(option), "{err}");
        }
    }
}
