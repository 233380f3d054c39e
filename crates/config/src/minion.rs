//! The minion configuration: `minion_config` + `apply_minion_config` of Salt 3008.3.

use std::path::{Path, PathBuf};

use rmpv::Value;

use crate::apply::{self, Role};
use crate::master::{join_return_list, raw_get};
use crate::merge::Gathered;
use crate::options::{OptMap, Origins};
use crate::paths::{py_join, py_split};
use crate::pyval::py_str;
use crate::types::{
    EncryptionAlgorithm, IdSource, IpcMode, LogLevel, Master, MasterType, SigningAlgorithm,
};
use crate::validate::{salt_type_warnings, Reader};
use crate::ConfigError;

/// Options whose values `MinionConfig` checks strictly.
pub(crate) const TYPED: &[&str] = &[
    "id",
    "master",
    "master_port",
    "publish_port",
    "ipv6",
    "root_dir",
    "pki_dir",
    "cachedir",
    "sock_dir",
    "grains",
    "acceptance_wait_time",
    "acceptance_wait_time_max",
    "auth_tries",
    "auth_timeout",
    "random_reauth_delay",
    "log_level",
    "log_level_logfile",
    "log_file",
    "key_logfile",
    "user",
    "hash_type",
    "keysize",
    "encryption_algorithm",
    "signing_algorithm",
    "master_type",
    "ipc_mode",
    "tcp_pub_port",
    "tcp_pull_port",
    "max_event_size",
    "conf_file",
    "verify_master_pubkey_sign",
    "always_verify_signature",
    "master_sign_key_name",
    "master_finger",
];

/// A loaded salt-minion configuration.
///
/// As for [`crate::MasterConfig`], `raw` holds every option after Salt's derivations and
/// the typed fields are read from it.
#[derive(Debug, Clone)]
pub struct MinionConfig {
    /// `id`: configured, else the cached id, else the host's FQDN.
    pub id: String,
    /// Where `id` came from.
    pub id_source: IdSource,
    /// `master` (`salt`).
    pub master: Master,
    /// `master_port` (4506).
    pub master_port: u16,
    /// `publish_port` if set (normally learnt from the master).
    pub publish_port: Option<u16>,
    /// `ipv6`: `None` (Salt's default) resolves the master over both families.
    pub ipv6: Option<bool>,
    /// `root_dir` as configured (`/`).
    pub root_dir: PathBuf,
    /// `pki_dir` under `root_dir` (`/etc/salt/pki/minion`).
    pub pki_dir: PathBuf,
    /// `cachedir` under `root_dir` (`/var/cache/salt/minion`).
    pub cachedir: PathBuf,
    /// `sock_dir` under `root_dir` (`/var/run/salt/minion`).
    pub sock_dir: PathBuf,
    /// `extension_modules` under `root_dir`.
    pub extension_modules: PathBuf,
    /// `pidfile` under `root_dir` (`/var/run/salt-minion.pid`).
    pub pidfile: PathBuf,
    /// Static `grains` from the configuration (a mapping; empty if unset or left empty).
    pub grains: Value,
    /// `acceptance_wait_time` in seconds (10).
    pub acceptance_wait_time: f64,
    /// `acceptance_wait_time_max` in seconds (0: no growth).
    pub acceptance_wait_time_max: f64,
    /// `auth_tries` (7).
    pub auth_tries: u32,
    /// `auth_timeout` in seconds (5).
    pub auth_timeout: u64,
    /// `random_reauth_delay` in seconds (10).
    pub random_reauth_delay: u64,
    /// `log_level` (warning).
    pub log_level: LogLevel,
    /// `log_level_logfile` (unset: follow `log_level`).
    pub log_level_logfile: Option<LogLevel>,
    /// `log_file`: a path under `root_dir`, or a URI.
    pub log_file: String,
    /// `key_logfile` (unset by default for minions).
    pub key_logfile: Option<String>,
    /// `user` (Salt's default: the user loading the configuration).
    pub user: String,
    /// `hash_type`, lower-cased (sha256).
    pub hash_type: String,
    /// `keysize` (2048).
    pub keysize: u32,
    /// `encryption_algorithm` (OAEP-SHA1).
    pub encryption_algorithm: EncryptionAlgorithm,
    /// `signing_algorithm` (PKCS1v15-SHA1).
    pub signing_algorithm: SigningAlgorithm,
    /// `master_type` (str).
    pub master_type: MasterType,
    /// `ipc_mode` (ipc).
    pub ipc_mode: IpcMode,
    /// `tcp_pub_port` (4510).
    pub tcp_pub_port: u16,
    /// `tcp_pull_port` (4511).
    pub tcp_pull_port: u16,
    /// `max_event_size` in bytes (1048576).
    pub max_event_size: u64,
    /// `conf_file`: the main file if it was read, else `/etc/salt/minion`.
    pub conf_file: PathBuf,
    /// `verify_master_pubkey_sign` (false): the master must send `pub_sig`, a signature of
    /// its public key that verifies with `pki_dir/<master_sign_key_name>.pub`.
    pub verify_master_pubkey_sign: bool,
    /// `always_verify_signature` (false): in Salt, also verify the signature when the
    /// master's key did not change.
    pub always_verify_signature: bool,
    /// `master_sign_key_name` (`master_sign`): the verification key is
    /// `pki_dir/<name>.pub`.
    pub master_sign_key_name: String,
    /// `master_finger`: the expected fingerprint (`hash_type`) of the master's public key;
    /// `None` when unset or empty (Salt's default `''`).
    pub master_finger: Option<String>,
    /// Every option as a msgpack map (Salt's `opts`).
    pub raw: Value,
    origins: Origins,
    warnings: Vec<String>,
}

impl MinionConfig {
    /// Loads `dir/minion` plus `dir/minion.d/*.conf` (and any `include`d files).
    /// A missing `dir/minion` means Salt's defaults.
    pub fn load(dir: &Path) -> Result<MinionConfig, ConfigError> {
        Self::load_file(&dir.join("minion"))
    }

    /// Loads the main file `conf_file` and its includes.
    pub fn load_file(conf_file: &Path) -> Result<MinionConfig, ConfigError> {
        Self::build(apply::gather(conf_file, Role::Minion)?)
    }

    /// Builds a configuration from the text of a main file named `conf_file`, without
    /// reading any include (only the minion id cache is read when no `id` is set).
    pub fn from_yaml_str(yaml: &str, conf_file: &Path) -> Result<MinionConfig, ConfigError> {
        Self::build(apply::gather_str(yaml, conf_file)?)
    }

    /// Salt's defaults with `root_dir` set to `root_dir` and every path below it.
    ///
    /// # Panics
    /// Never for the built-in defaults; a panic here is a bug in this crate.
    pub fn defaults_in(root_dir: &Path) -> MinionConfig {
        let mut overrides = Gathered::default();
        overrides
            .opts
            .set("root_dir", Value::from(root_dir.to_string_lossy().as_ref()));
        Self::build(overrides).expect("Salt's minion defaults are valid")
    }

    /// The value of any option, typed or not.
    pub fn get(&self, option: &str) -> Option<&Value> {
        raw_get(&self.raw, option)
    }

    /// Options set in the files (main and included) that neither Salt nor Halite knows,
    /// each with the file and the closest valid name; the daemons warn about them.
    pub fn unknown_options(&self) -> Vec<crate::UnknownOption> {
        crate::names::unknown(&self.origins, Role::Minion)
    }

    /// Warnings Salt would log while loading this configuration.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Where `option` was set.
    pub fn origin(&self, option: &str) -> crate::Origin {
        self.origins.of(option)
    }

    fn build(mut gathered: Gathered) -> Result<MinionConfig, ConfigError> {
        let mut opts = apply::defaults(Role::Minion);
        let default_log_file = opts
            .str("log_file")
            .unwrap_or("/var/log/salt/minion")
            .to_owned();
        apply::adjust_log_file_override(&mut gathered, &default_log_file)?;
        let Gathered {
            opts: overrides,
            origins,
            mut warnings,
        } = gathered;
        opts.update(overrides.clone());
        apply::renamed_options(&mut opts, Role::Minion, &mut warnings);

        let (id, id_source) = apply::resolve_id(&opts, &origins)?;
        opts.set("id", Value::from(id.as_str()));
        append_minion_id_dirs(&mut opts, &origins, &id)?;
        apply::derived_dirs(&mut opts, &overrides, &origins)?;
        let open_mode = opts.get("open_mode") == Some(&Value::Boolean(true));
        opts.set("open_mode", Value::Boolean(open_mode));
        apply::prepend_root_dirs(
            &mut opts,
            &origins,
            &[
                "pki_dir",
                "cachedir",
                "sock_dir",
                "extension_modules",
                "pidfile",
            ],
            &["log_file", "key_logfile"],
        )?;
        if !opts.contains("beacons") {
            opts.set("beacons", Value::Map(Vec::new()));
        }

        let reader = Reader {
            opts: &opts,
            origins: &origins,
        };
        apply::supported_transport(&reader)?;
        let master = match opts.get("master") {
            Some(Value::Array(items)) if !items.is_empty() => {
                let mut list = Vec::with_capacity(items.len());
                for item in items {
                    match item {
                        Value::String(_) | Value::Integer(_) | Value::F64(_) => {
                            list.push(py_str(item))
                        }
                        _ => {
                            return Err(reader.invalid(
                                "master",
                                "a host name or a non-empty list of host names",
                                item,
                            ))
                        }
                    }
                }
                Master::List(list)
            }
            Some(Value::Array(_)) | Some(Value::Nil) | None => {
                return Err(reader.invalid(
                    "master",
                    "a host name or a non-empty list of host names",
                    opts.get("master").unwrap_or(&Value::Nil),
                ))
            }
            Some(_) => Master::Single(reader.string("master")?),
        };
        let hash_type = reader.string("hash_type")?.to_lowercase();
        let log_level = reader.log_level("log_level")?;
        let log_level_logfile = match opts.get("log_level_logfile") {
            None | Some(Value::Nil) => None,
            Some(_) => Some(reader.log_level("log_level_logfile")?),
        };
        let grains = reader.map("grains")?;
        let config = MinionConfig {
            id,
            id_source,
            master,
            master_port: reader.port("master_port")?,
            publish_port: reader.opt_port("publish_port")?,
            ipv6: reader.opt_bool("ipv6")?,
            root_dir: PathBuf::from(reader.string("root_dir")?),
            pki_dir: PathBuf::from(reader.string("pki_dir")?),
            cachedir: PathBuf::from(reader.string("cachedir")?),
            sock_dir: PathBuf::from(reader.string("sock_dir")?),
            extension_modules: PathBuf::from(reader.string("extension_modules")?),
            pidfile: PathBuf::from(reader.string("pidfile")?),
            grains: grains.clone(),
            acceptance_wait_time: reader.seconds("acceptance_wait_time")?,
            acceptance_wait_time_max: reader.seconds("acceptance_wait_time_max")?,
            auth_tries: reader.u32_min("auth_tries", 0, "a non-negative integer")?,
            auth_timeout: reader.u64("auth_timeout", "a non-negative number of seconds")?,
            random_reauth_delay: reader
                .u64("random_reauth_delay", "a non-negative number of seconds")?,
            log_level,
            log_level_logfile,
            log_file: reader.string("log_file")?,
            key_logfile: reader.opt_string("key_logfile")?,
            user: reader.string("user")?,
            hash_type,
            keysize: reader.u32_min("keysize", 1, "a positive number of bits")?,
            encryption_algorithm: reader
                .choice("encryption_algorithm", &EncryptionAlgorithm::CHOICES)?,
            signing_algorithm: reader.choice("signing_algorithm", &SigningAlgorithm::CHOICES)?,
            master_type: reader.choice("master_type", &MasterType::CHOICES)?,
            ipc_mode: reader.choice("ipc_mode", &IpcMode::CHOICES)?,
            tcp_pub_port: reader.port("tcp_pub_port")?,
            tcp_pull_port: reader.port("tcp_pull_port")?,
            max_event_size: reader.u64("max_event_size", "a non-negative number of bytes")?,
            conf_file: PathBuf::from(reader.string("conf_file")?),
            verify_master_pubkey_sign: reader.boolean("verify_master_pubkey_sign")?,
            always_verify_signature: reader.boolean("always_verify_signature")?,
            master_sign_key_name: reader.string("master_sign_key_name")?,
            master_finger: reader
                .opt_string("master_finger")?
                .filter(|f| !f.is_empty()),
            raw: Value::Nil,
            origins: Origins::default(),
            warnings: Vec::new(),
        };
        opts.set("hash_type", Value::from(config.hash_type.as_str()));
        opts.set("grains", grains);
        join_return_list(&mut opts);
        warnings.extend(salt_type_warnings(&opts, TYPED));
        Ok(MinionConfig {
            raw: Value::Map(opts.0),
            origins,
            warnings,
            ..config
        })
    }
}

/// `append_minionid_config_dirs`: per-id subdirectories for several minions on one host.
fn append_minion_id_dirs(
    opts: &mut OptMap,
    origins: &Origins,
    id: &str,
) -> Result<(), ConfigError> {
    let dirs: Vec<String> = match opts.get("append_minionid_config_dirs") {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    };
    for dir in &dirs {
        let reader = Reader { opts, origins };
        match dir.as_str() {
            "pki_dir" | "cachedir" | "extension_modules" => {
                let base = reader.string(dir)?;
                opts.set(dir, Value::from(py_join(&base, id)));
            }
            "default_include" if opts.contains("default_include") => {
                let current = reader.string(dir)?;
                let (head, tail) = py_split(&current);
                let new = py_join(&py_join(&head, id), &tail);
                opts.set(dir, Value::from(new));
            }
            _ => {}
        }
    }
    if dirs.iter().any(|d| d == "pidfile") {
        let reader = Reader { opts, origins };
        let pidfile = reader.string("pidfile")?;
        let (head, tail) = py_split(&pidfile);
        let new = py_join(&py_join(&py_join(&head, "salt"), id), &tail);
        opts.set("pidfile", Value::from(new));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str) -> Result<MinionConfig, ConfigError> {
        MinionConfig::from_yaml_str(yaml, Path::new("/m/minion"))
    }

    #[test]
    fn key_trust_options_default_like_salt_3008() {
        let cfg = load("id: m1\n").unwrap();
        assert!(!cfg.verify_master_pubkey_sign);
        assert!(!cfg.always_verify_signature);
        assert_eq!(cfg.master_sign_key_name, "master_sign");
        assert_eq!(cfg.master_finger, None);
        assert_eq!(cfg.get("master_finger"), Some(&Value::from("")));
    }

    #[test]
    fn key_trust_options_are_read() {
        let cfg = load(
            "id: m1\nverify_master_pubkey_sign: True\nalways_verify_signature: true\n\
             master_sign_key_name: signer\nmaster_finger: 'ab:cd'\n",
        )
        .unwrap();
        assert!(cfg.verify_master_pubkey_sign && cfg.always_verify_signature);
        assert_eq!(cfg.master_sign_key_name, "signer");
        assert_eq!(cfg.master_finger.as_deref(), Some("ab:cd"));
        assert!(cfg.warnings().is_empty(), "{:?}", cfg.warnings());
        for empty in ["''", "null"] {
            let cfg = load(&format!("id: m1\nmaster_finger: {empty}\n")).unwrap();
            assert_eq!(cfg.master_finger, None, "{empty}");
        }
    }

    #[test]
    fn key_trust_switches_must_be_booleans_and_names_strings() {
        for (yaml, option) in [
            (
                "verify_master_pubkey_sign: 'yes'\n",
                "verify_master_pubkey_sign",
            ),
            ("always_verify_signature: 1\n", "always_verify_signature"),
            ("master_sign_key_name: [a]\n", "master_sign_key_name"),
            ("master_finger: {a: b}\n", "master_finger"),
        ] {
            let err = load(yaml).unwrap_err().to_string();
            assert!(
                err.contains(option) && err.contains("/m/minion"),
                "{yaml}: {err}"
            );
        }
    }
}
