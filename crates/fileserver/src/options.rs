//! The master options the `roots` backend reads, checked once at start.

use crate::Error;
use halite_config::MasterConfig;
use halite_target::pyre::{Anchor, PyRegex};
use openssl::hash::{Hasher, MessageDigest};
use rmpv::Value;
use std::path::PathBuf;
use std::time::Duration;

/// Salt's `file_buffer_size` default on the master (1 MiB).
pub const DEFAULT_FILE_BUFFER_SIZE: usize = 1 << 20;

/// The largest `file_buffer_size` honoured; a larger value is lowered to it (with a
/// warning): every `_serve_file` reply holds one chunk in memory per request worker.
pub const MAX_FILE_BUFFER_SIZE: usize = 64 << 20;

/// How long a cached listing is trusted before its directories' mtimes are checked
/// again (see the crate docs, "Listing cache").
pub const DEFAULT_LIST_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// A `hash_type` the master can compute (Salt's `hashlib` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashType {
    /// `md5`
    Md5,
    /// `sha1`
    Sha1,
    /// `sha224`
    Sha224,
    /// `sha256` (Salt's default)
    Sha256,
    /// `sha384`
    Sha384,
    /// `sha512`
    Sha512,
}

impl HashType {
    /// Every supported type, by Salt's name.
    pub const ALL: [(&'static str, HashType); 6] = [
        ("md5", HashType::Md5),
        ("sha1", HashType::Sha1),
        ("sha224", HashType::Sha224),
        ("sha256", HashType::Sha256),
        ("sha384", HashType::Sha384),
        ("sha512", HashType::Sha512),
    ];

    /// The type named `name` (lower case, as Salt normalises `hash_type`).
    pub fn parse(name: &str) -> Option<HashType> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
    }

    /// Salt's name, sent as `hash_type` in replies.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, t)| *t == self)
            .map_or("sha256", |(n, _)| n)
    }

    /// A fresh OpenSSL hasher of this type.
    pub(crate) fn hasher(self) -> Result<Hasher, openssl::error::ErrorStack> {
        Hasher::new(match self {
            HashType::Md5 => MessageDigest::md5(),
            HashType::Sha1 => MessageDigest::sha1(),
            HashType::Sha224 => MessageDigest::sha224(),
            HashType::Sha256 => MessageDigest::sha256(),
            HashType::Sha384 => MessageDigest::sha384(),
            HashType::Sha512 => MessageDigest::sha512(),
        })
    }
}

/// The options of the `roots` backend.
#[derive(Debug, Clone)]
pub struct Options {
    /// `file_roots`: `(saltenv, directories)` in the configured order. A `__env__` entry
    /// serves any other saltenv, with `__env__` in its directories replaced by the name.
    pub file_roots: Vec<(String, Vec<PathBuf>)>,
    /// Whether `roots` is in `fileserver_backend`; when not, nothing is served.
    pub enabled: bool,
    /// `hash_type`.
    pub hash_type: HashType,
    /// `file_buffer_size`: the most bytes one `_serve_file` reply carries.
    pub file_buffer_size: usize,
    /// `file_ignore_regex`, compiled with Python's `re.search` semantics.
    pub ignore_regex: Vec<std::sync::Arc<PyRegex>>,
    /// `file_ignore_glob` (Python `fnmatch` patterns).
    pub ignore_glob: Vec<String>,
    /// `fileserver_followsymlinks`.
    pub follow_symlinks: bool,
    /// `fileserver_ignoresymlinks`.
    pub ignore_symlinks: bool,
    /// How long a listing is trusted before its directories are checked for changes.
    pub list_check_interval: Duration,
}

impl Default for Options {
    /// Salt's master defaults with `file_roots` `{base: [/srv/salt]}`.
    fn default() -> Options {
        Options {
            file_roots: vec![("base".to_owned(), vec![PathBuf::from("/srv/salt")])],
            enabled: true,
            hash_type: HashType::Sha256,
            file_buffer_size: DEFAULT_FILE_BUFFER_SIZE,
            ignore_regex: Vec::new(),
            ignore_glob: Vec::new(),
            follow_symlinks: true,
            ignore_symlinks: false,
            list_check_interval: DEFAULT_LIST_CHECK_INTERVAL,
        }
    }
}

impl Options {
    /// The options from a master configuration, and the warnings Salt (or Halite) would
    /// log about them.
    ///
    /// Errors: an unsupported `hash_type`, a `file_buffer_size` that is not a positive
    /// integer, an empty `fileserver_backend` (stock refuses to start too).
    pub fn from_master(cfg: &MasterConfig) -> Result<(Options, Vec<String>), Error> {
        let mut warnings = Vec::new();
        let hash_type = HashType::parse(&cfg.hash_type).ok_or_else(|| Error::Config {
            option: "hash_type",
            message: format!(
                "{:?} is not supported; use one of md5, sha1, sha224, sha256, sha384, sha512",
                cfg.hash_type
            ),
        })?;
        let file_buffer_size = match cfg.get("file_buffer_size") {
            None | Some(Value::Nil) => DEFAULT_FILE_BUFFER_SIZE,
            Some(v) => match v.as_u64().and_then(|n| usize::try_from(n).ok()) {
                Some(n) if n > 0 => n,
                _ => {
                    return Err(Error::Config {
                        option: "file_buffer_size",
                        message: format!("{v} is not a positive number of bytes"),
                    })
                }
            },
        };
        let file_buffer_size = if file_buffer_size > MAX_FILE_BUFFER_SIZE {
            warnings.push(format!(
                "file_buffer_size {file_buffer_size} is lowered to {MAX_FILE_BUFFER_SIZE} bytes"
            ));
            MAX_FILE_BUFFER_SIZE
        } else {
            file_buffer_size
        };
        let backends = string_list(cfg.get("fileserver_backend"));
        if backends.is_empty() {
            return Err(Error::Config {
                option: "fileserver_backend",
                message: "No fileserver backends are configured".to_owned(),
            });
        }
        for backend in backends.iter().filter(|b| b.as_str() != "roots") {
            warnings.push(format!(
                "fileserver_backend {backend:?} is not supported by Halite and serves nothing; \
                 only roots is served"
            ));
        }
        if cfg
            .get("master_tops")
            .is_some_and(halite_proto::value::truthy)
        {
            warnings.push(
                "master_tops is not supported by Halite (its modules are Python); minions \
                 get no master_tops data"
                    .to_owned(),
            );
        }
        let mut ignore_regex = Vec::new();
        for pattern in string_list(cfg.get("file_ignore_regex")) {
            match PyRegex::new(&pattern, Anchor::Search) {
                Ok(re) => ignore_regex.push(std::sync::Arc::new(re)),
                Err(e) => warnings.push(format!(
                    "Unable to parse file_ignore_regex. Skipping: {pattern} ({e})"
                )),
            }
        }
        let truthy =
            |name: &str, default: bool| cfg.get(name).map_or(default, halite_proto::value::truthy);
        let options = Options {
            file_roots: cfg
                .roots("file_roots")
                .into_iter()
                .map(|(env, dirs)| (env, dirs.into_iter().map(PathBuf::from).collect()))
                .collect(),
            enabled: backends.iter().any(|b| b == "roots"),
            hash_type,
            file_buffer_size,
            ignore_regex,
            ignore_glob: string_list(cfg.get("file_ignore_glob")),
            follow_symlinks: truthy("fileserver_followsymlinks", true),
            ignore_symlinks: truthy("fileserver_ignoresymlinks", false),
            list_check_interval: DEFAULT_LIST_CHECK_INTERVAL,
        };
        Ok((options, warnings))
    }
}

/// A string option that may also be a list of strings (`file_ignore_glob: '*.swp'`);
/// other items are dropped.
fn string_list(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|i| halite_proto::value::str_of(i).map(str::to_owned))
            .collect(),
        Some(other) => halite_proto::value::str_of(other)
            .map(|s| vec![s.to_owned()])
            .unwrap_or_default(),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn cfg(yaml: &str) -> MasterConfig {
        MasterConfig::from_yaml_str(yaml, Path::new("/m/master")).unwrap()
    }

    #[test]
    fn defaults_are_salts() {
        let (o, warnings) = Options::from_master(&cfg("id: m\n")).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(o.hash_type, HashType::Sha256);
        assert_eq!(o.file_buffer_size, 1_048_576);
        assert!(o.enabled && o.follow_symlinks && !o.ignore_symlinks);
        assert_eq!(
            o.file_roots,
            vec![(
                "base".to_owned(),
                vec![PathBuf::from("/srv/salt"), PathBuf::from("/srv/spm/salt")]
            )]
        );
    }

    #[test]
    fn options_are_read_and_bad_regexes_skipped_with_salts_warning() {
        let (o, warnings) = Options::from_master(&cfg(
            "id: m\nhash_type: MD5\nfile_buffer_size: 4096\nfile_ignore_regex: ['\\.svn', '(']\n\
             file_ignore_glob: '*.swp'\nfileserver_followsymlinks: false\n\
             fileserver_ignoresymlinks: true\nfileserver_backend: [gitfs, roots]\n\
             master_tops: {ext_nodes: cobbler}\n",
        ))
        .unwrap();
        assert_eq!(o.hash_type, HashType::Md5);
        assert_eq!(o.file_buffer_size, 4096);
        assert_eq!(o.ignore_regex.len(), 1);
        assert_eq!(o.ignore_glob, ["*.swp"]);
        assert!(!o.follow_symlinks && o.ignore_symlinks && o.enabled);
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert!(warnings[0].contains("\"gitfs\" is not supported"));
        assert!(warnings[1].contains("master_tops is not supported"));
        assert!(warnings[2].starts_with("Unable to parse file_ignore_regex. Skipping: ("));
    }

    #[test]
    fn unusable_values_refuse_to_start_naming_the_option() {
        for (yaml, option) in [
            ("hash_type: whirlpool\n", "hash_type"),
            ("file_buffer_size: 0\n", "file_buffer_size"),
            ("file_buffer_size: -5\n", "file_buffer_size"),
            ("file_buffer_size: big\n", "file_buffer_size"),
            ("fileserver_backend: []\n", "fileserver_backend"),
        ] {
            let err = Options::from_master(&cfg(&format!("id: m\n{yaml}"))).unwrap_err();
            assert!(err.to_string().contains(option), "{yaml}: {err}");
        }
    }

    #[test]
    fn a_huge_buffer_is_lowered_with_a_warning_and_roots_can_be_disabled() {
        let (o, warnings) = Options::from_master(&cfg(
            "id: m\nfile_buffer_size: 1073741824\nfileserver_backend: [gitfs]\n",
        ))
        .unwrap();
        assert_eq!(o.file_buffer_size, MAX_FILE_BUFFER_SIZE);
        assert!(!o.enabled);
        assert!(
            warnings.iter().any(|w| w.contains("lowered")),
            "{warnings:?}"
        );
    }

    #[test]
    fn hash_type_names_round_trip() {
        for (name, t) in HashType::ALL {
            assert_eq!(HashType::parse(name), Some(t));
            assert_eq!(t.name(), name);
        }
        assert_eq!(HashType::parse("sha3_256"), None);
    }
}
