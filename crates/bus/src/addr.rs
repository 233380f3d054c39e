//! Where the bus lives: socket names, modes and loopback ports
//! (`salt/transport/base.py:ipc_publish_server`, `ipc_publish_client`, `_minion_hash`).

use crate::{Error, Result};
use openssl::hash::{hash, MessageDigest};
use std::fmt;
use std::path::{Path, PathBuf};

/// File name of the master's pub socket in `sock_dir`.
pub const MASTER_PUB: &str = "master_event_pub.ipc";
/// File name of the master's pull socket in `sock_dir`.
pub const MASTER_PULL: &str = "master_event_pull.ipc";

/// One bus socket: a Unix socket path, or a port on `127.0.0.1` (`ipc_mode: tcp`).
///
/// Deviation: Salt binds `::1` instead when `ipv6: true`; Halite always uses `127.0.0.1`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BusAddr {
    /// A Unix stream socket at this path.
    Unix(PathBuf),
    /// A TCP port on `127.0.0.1`; port 0 binds an ephemeral port.
    Tcp(u16),
}

impl fmt::Display for BusAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BusAddr::Unix(path) => write!(f, "{}", path.display()),
            BusAddr::Tcp(port) => write!(f, "127.0.0.1:{port}"),
        }
    }
}

/// The two sockets of one bus and the modes Salt gives the Unix socket files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusSockets {
    /// Where subscribers connect.
    pub pub_addr: BusAddr,
    /// Where senders connect.
    pub pull_addr: BusAddr,
    /// Mode of the pub socket file (ignored for TCP).
    pub pub_mode: u32,
    /// Mode of the pull socket file (ignored for TCP).
    pub pull_mode: u32,
}

impl BusSockets {
    /// The master bus in `sock_dir`: pub `0660` (group members may listen), pull `0600`.
    pub fn master(sock_dir: &Path) -> Self {
        BusSockets {
            pub_addr: BusAddr::Unix(sock_dir.join(MASTER_PUB)),
            pull_addr: BusAddr::Unix(sock_dir.join(MASTER_PULL)),
            pub_mode: 0o660,
            pull_mode: 0o600,
        }
    }

    /// The minion bus in `sock_dir`, both sockets `0600`. `hash_id` is Salt's
    /// `opts.get("hash_id", opts["id"])`: the minion id, except for delta-proxy sub-minions.
    pub fn minion(sock_dir: &Path, hash_type: &str, hash_id: &str) -> Result<Self> {
        let h = minion_hash(hash_type, hash_id)?;
        Ok(BusSockets {
            pub_addr: BusAddr::Unix(sock_dir.join(format!("minion_event_{h}_pub.ipc"))),
            pull_addr: BusAddr::Unix(sock_dir.join(format!("minion_event_{h}_pull.ipc"))),
            pub_mode: 0o600,
            pull_mode: 0o600,
        })
    }

    /// A bus on loopback TCP ports (`ipc_mode: tcp`): the master uses `tcp_master_pub_port`
    /// / `tcp_master_pull_port` (4512/4513), a minion `tcp_pub_port` / `tcp_pull_port`
    /// (4510/4511).
    pub fn tcp(pub_port: u16, pull_port: u16) -> Self {
        BusSockets {
            pub_addr: BusAddr::Tcp(pub_port),
            pull_addr: BusAddr::Tcp(pull_port),
            pub_mode: 0o600,
            pull_mode: 0o600,
        }
    }
}

/// The first 10 hex digits of `hash_type(id)`, which name a minion's bus sockets
/// (`_minion_hash`). `hash_type` is a `hashlib` name, compared case-insensitively as Salt
/// lowercases it when loading the config.
pub fn minion_hash(hash_type: &str, id: &str) -> Result<String> {
    let md = match hash_type.to_ascii_lowercase().as_str() {
        "md5" => MessageDigest::md5(),
        "sha1" => MessageDigest::sha1(),
        "sha224" => MessageDigest::sha224(),
        "sha256" => MessageDigest::sha256(),
        "sha384" => MessageDigest::sha384(),
        "sha512" => MessageDigest::sha512(),
        "sha3_224" => MessageDigest::sha3_224(),
        "sha3_256" => MessageDigest::sha3_256(),
        "sha3_384" => MessageDigest::sha3_384(),
        "sha3_512" => MessageDigest::sha3_512(),
        _ => return Err(Error::UnknownHashType(hash_type.to_owned())),
    };
    let digest = hash(md, id.as_bytes()).map_err(|e| Error::Hash(e.to_string()))?;
    let mut hex = hex::encode(digest);
    hex.truncate(10);
    Ok(hex)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minion_hash_matches_hashlib() {
        // python3 -c 'import hashlib; print(hashlib.<h>(b"<id>").hexdigest()[:10])'
        let cases = [
            ("sha256", "minion1", "1e9498c860"),
            ("SHA256", "minion1", "1e9498c860"),
            ("md5", "minion1", "c5a7daa544"),
            ("sha512", "web-01.example.com", "acd8c1b650"),
            ("sha3_256", "minion1", "a31aa7fc24"),
        ];
        for (ty, id, want) in cases {
            assert_eq!(minion_hash(ty, id).unwrap(), want, "{ty}({id})");
        }
    }

    #[test]
    fn unknown_hash_type_is_an_error() {
        assert!(
            matches!(minion_hash("crc32", "m"), Err(Error::UnknownHashType(t)) if t == "crc32")
        );
    }

    #[test]
    fn socket_names_and_modes_follow_salt() {
        let dir = Path::new("/run/salt");
        let m = BusSockets::master(dir);
        assert_eq!(
            m.pub_addr,
            BusAddr::Unix("/run/salt/master_event_pub.ipc".into())
        );
        assert_eq!(
            m.pull_addr,
            BusAddr::Unix("/run/salt/master_event_pull.ipc".into())
        );
        assert_eq!((m.pub_mode, m.pull_mode), (0o660, 0o600));
        let n = BusSockets::minion(dir, "sha256", "minion1").unwrap();
        assert_eq!(
            n.pub_addr,
            BusAddr::Unix("/run/salt/minion_event_1e9498c860_pub.ipc".into())
        );
        assert_eq!(
            n.pull_addr,
            BusAddr::Unix("/run/salt/minion_event_1e9498c860_pull.ipc".into())
        );
        assert_eq!((n.pub_mode, n.pull_mode), (0o600, 0o600));
        assert_eq!(BusAddr::Tcp(4512).to_string(), "127.0.0.1:4512");
    }
}
