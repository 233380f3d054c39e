//! Small value types shared by the master and minion configurations.

use std::fmt;
use std::path::PathBuf;

/// A Salt log level (`salt/_logging/impl.py · LOG_LEVELS`), matched case-insensitively.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// `all` (everything, Python's NOTSET).
    All,
    /// `garbage` (level 1).
    Garbage,
    /// `trace` (level 5).
    Trace,
    /// `debug` (10).
    Debug,
    /// `profile` (15).
    Profile,
    /// `info` (20).
    Info,
    /// `warning` (30), Salt's default.
    Warning,
    /// `error` (40).
    Error,
    /// `critical` (50).
    Critical,
    /// `quiet` (nothing at all).
    Quiet,
}

impl LogLevel {
    pub(crate) const CHOICES: [(&'static str, LogLevel); 10] = [
        ("all", LogLevel::All),
        ("garbage", LogLevel::Garbage),
        ("trace", LogLevel::Trace),
        ("debug", LogLevel::Debug),
        ("profile", LogLevel::Profile),
        ("info", LogLevel::Info),
        ("warning", LogLevel::Warning),
        ("error", LogLevel::Error),
        ("critical", LogLevel::Critical),
        ("quiet", LogLevel::Quiet),
    ];

    /// Salt's name for the level.
    pub fn as_str(self) -> &'static str {
        Self::CHOICES
            .iter()
            .find(|(_, level)| *level == self)
            .map_or("warning", |(name, _)| name)
    }

    /// Parses a level name case-insensitively, as Salt's `LOG_LEVELS[level.lower()]`.
    pub fn parse(name: &str) -> Option<LogLevel> {
        let lower = name.to_lowercase();
        Self::CHOICES
            .iter()
            .find(|(n, _)| *n == lower)
            .map(|(_, level)| *level)
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// RSA signing algorithm (`salt.crypt.VALID_SIGNING_ALGORITHMS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigningAlgorithm {
    /// `PKCS1v15-SHA1`, the default.
    Pkcs1v15Sha1,
    /// `PKCS1v15-SHA224`.
    Pkcs1v15Sha224,
}

impl SigningAlgorithm {
    pub(crate) const CHOICES: [(&'static str, SigningAlgorithm); 2] = [
        ("PKCS1v15-SHA1", SigningAlgorithm::Pkcs1v15Sha1),
        ("PKCS1v15-SHA224", SigningAlgorithm::Pkcs1v15Sha224),
    ];

    /// Salt's name for the algorithm.
    pub fn as_str(self) -> &'static str {
        match self {
            SigningAlgorithm::Pkcs1v15Sha1 => "PKCS1v15-SHA1",
            SigningAlgorithm::Pkcs1v15Sha224 => "PKCS1v15-SHA224",
        }
    }
}

/// RSA encryption algorithm (`salt.crypt.VALID_ENCRYPTION_ALGORITHMS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncryptionAlgorithm {
    /// `OAEP-SHA1`, the default.
    OaepSha1,
    /// `OAEP-SHA224`.
    OaepSha224,
}

impl EncryptionAlgorithm {
    pub(crate) const CHOICES: [(&'static str, EncryptionAlgorithm); 2] = [
        ("OAEP-SHA1", EncryptionAlgorithm::OaepSha1),
        ("OAEP-SHA224", EncryptionAlgorithm::OaepSha224),
    ];

    /// Salt's name for the algorithm.
    pub fn as_str(self) -> &'static str {
        match self {
            EncryptionAlgorithm::OaepSha1 => "OAEP-SHA1",
            EncryptionAlgorithm::OaepSha224 => "OAEP-SHA224",
        }
    }
}

/// The minion's `master_type`.
///
/// Salt checks this when the minion starts and exits on anything else; here it is
/// checked at load time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MasterType {
    /// `str`: one master, or every listed master at once (hot-hot multi-master).
    Str,
    /// `failover`: the listed masters in turn.
    Failover,
    /// `distributed`: behaves like failover in 3008.3.
    Distributed,
    /// `func`: the master address comes from a module function.
    Func,
    /// `disable`: no master connection.
    Disable,
}

impl MasterType {
    pub(crate) const CHOICES: [(&'static str, MasterType); 5] = [
        ("str", MasterType::Str),
        ("failover", MasterType::Failover),
        ("distributed", MasterType::Distributed),
        ("func", MasterType::Func),
        ("disable", MasterType::Disable),
    ];
}

/// How local IPC sockets are exposed (`ipc_mode`).
///
/// Deviation: Salt treats any value other than `tcp` as `ipc`; here other values are
/// refused as typos.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpcMode {
    /// Unix domain sockets under `sock_dir`.
    Ipc,
    /// Loopback TCP on `tcp_pub_port` / `tcp_pull_port`.
    Tcp,
}

impl IpcMode {
    pub(crate) const CHOICES: [(&'static str, IpcMode); 2] =
        [("ipc", IpcMode::Ipc), ("tcp", IpcMode::Tcp)];
}

/// The minion's `master` option: one address or a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Master {
    /// `master: salt`
    Single(String),
    /// `master: [m1, m2]`
    List(Vec<String>),
}

impl Master {
    /// The configured addresses in order.
    pub fn addresses(&self) -> Vec<&str> {
        match self {
            Master::Single(one) => vec![one.as_str()],
            Master::List(many) => many.iter().map(String::as_str).collect(),
        }
    }
}

/// Where the configuration's `id` came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdSource {
    /// Set by the `id` option.
    Configured,
    /// Read from the minion id cache file (`<root_dir>/etc/salt/minion_id`).
    Cached(PathBuf),
    /// Generated from the host name (`generate_minion_id`). A minion daemon may write it
    /// to the cache file, as Salt does with `minion_id_caching`.
    Generated,
}
