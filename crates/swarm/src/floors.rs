//! `halite-bench floors`: what each unit of master work costs at least on this machine, to
//! put the swarm's per-sign-in and per-return figures beside (BENCHMARKS.md "Floors").
//!
//! One thread, each operation repeated for `secs`; figures are per operation:
//! - RSA-2048 with the master's own code (`halite_proto::rsa`): the PKCS#1 v1.5 signature
//!   every sign-in reply carries, the OAEP decryption of a re-sign-in's token, and the
//!   OAEP encryption of the AES key to the minion (a public operation);
//! - Crypticle (`halite_proto::crypticle`): opening a `_return` request and sealing its
//!   reply, with the load a `test.ping` return carries;
//! - msgpack: decoding that load and encoding it again;
//! - the kernel's side of a publish: one 300-byte write to a loopback TCP socket (the master
//!   sends every publish once per subscriber);
//! - the file system under `--dir`: creating a directory and a 40-byte file in it (what
//!   Salt's `local_cache` tree costs per return), and one `fsync` of a small write.
//!
//! Not measured here: libzmq's own PUB→SUB rate (`bench/limits.sh`).

use crate::Error;
use halite_proto::crypticle::Crypticle;
use halite_proto::rsa::{EncAlgo, PrivateKey, SigAlgo};
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use serde_json::{json, Value as Json};
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// Runs `op` repeatedly for `secs`; seconds per call.
fn per_op(secs: f64, mut op: impl FnMut(u64)) -> f64 {
    let budget = Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < budget {
        op(n);
        n += 1;
    }
    start.elapsed().as_secs_f64() / n.max(1) as f64
}

/// The load of a `test.ping` return, as a minion sends it.
fn return_load() -> Value {
    map([
        ("cmd", s("_return")),
        ("id", s("swarm-000042")),
        ("success", Value::Boolean(true)),
        ("return", Value::Boolean(true)),
        ("retcode", Value::from(0)),
        ("jid", s("20261124235959123456")),
        ("fun", s("test.ping")),
        ("fun_args", Value::Array(Vec::new())),
        ("_stamp", s("2026-11-24T23:59:59.123456")),
    ])
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        what: what.to_owned(),
        source,
    }
}

/// Measures every floor; `dir` is where the file-system figures are taken.
pub fn measure(dir: &Path, secs: f64) -> Result<Json, Error> {
    let key = PrivateKey::generate(2048)?;
    let public = key.public_key()?;
    let token = public.encrypt(b"token-of-a-re-sign-in", EncAlgo::OaepSha1)?;
    let aes = Crypticle::generate();
    let rsa_sign = per_op(secs, |_| {
        let _ = key.sign(b"the reply's signed part", SigAlgo::Pkcs1v15Sha1);
    });
    let rsa_decrypt = per_op(secs, |_| {
        let _ = key.decrypt(&token, EncAlgo::OaepSha1);
    });
    let rsa_encrypt = per_op(secs, |_| {
        let _ = public.encrypt(aes.key_string().as_bytes(), EncAlgo::OaepSha1);
    });

    let load = return_load();
    let sealed = aes.dumps(&load, Some("0123456789abcdef0123456789abcdef"))?;
    let crypticle_open = per_op(secs, |_| {
        let _ = aes.loads(&sealed, Some("0123456789abcdef0123456789abcdef"));
    });
    let crypticle_seal = per_op(secs, |_| {
        let _ = aes.dumps(&Value::Nil, Some("0123456789abcdef0123456789abcdef"));
    });
    let packed = value::encode(&load);
    let msgpack = per_op(secs, |_| {
        if let Ok(v) = value::decode(&packed) {
            let _ = value::encode(&v);
        }
    });

    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(io("binding loopback"))?;
    let addr = listener.local_addr().map_err(io("loopback address"))?;
    let mut sender = std::net::TcpStream::connect(addr).map_err(io("connecting loopback"))?;
    let (mut receiver, _) = listener.accept().map_err(io("accepting loopback"))?;
    sender.set_nodelay(true).map_err(io("TCP_NODELAY"))?;
    let drain = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        while matches!(receiver.read(&mut buf), Ok(n) if n > 0) {}
    });
    let frame = vec![0x5au8; 300];
    let tcp_write = per_op(secs, |_| {
        let _ = sender.write_all(&frame);
    });
    drop(sender);
    let _ = drain.join();

    let scratch = dir.join(format!("halite-floors-{}", std::process::id()));
    std::fs::create_dir(&scratch).map_err(io("creating a scratch directory"))?;
    let tree = per_op(secs, |n| {
        let d = scratch.join(format!("m{n}"));
        if std::fs::create_dir(&d).is_ok() {
            let _ = std::fs::write(d.join("return.p"), [0x83u8; 40]);
        }
    });
    let mut file =
        std::fs::File::create(scratch.join("fsync")).map_err(io("creating the fsync file"))?;
    let fsync = per_op(secs.min(3.0), |_| {
        let _ = file.write_all(b"0123456789");
        let _ = file.sync_data();
    });
    drop(file);
    std::fs::remove_dir_all(&scratch).map_err(io("removing the scratch directory"))?;

    let us = |s: f64| s * 1e6;
    Ok(json!({
        "dir": dir.display().to_string(),
        "rsa2048_sign_pkcs1v15_ms": rsa_sign * 1e3,
        "rsa2048_decrypt_oaep_ms": rsa_decrypt * 1e3,
        "rsa2048_encrypt_oaep_us": us(rsa_encrypt),
        "crypticle_open_return_us": us(crypticle_open),
        "crypticle_seal_reply_us": us(crypticle_seal),
        "msgpack_decode_encode_return_us": us(msgpack),
        "tcp_loopback_write_300b_us": us(tcp_write),
        "tree_mkdir_and_file_us": us(tree),
        "fsync_small_write_ms": fsync * 1e3,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_floor_is_a_positive_time() {
        let dir = tempfile::tempdir().unwrap();
        let floors = measure(dir.path(), 0.02).unwrap();
        for (name, v) in floors.as_object().unwrap() {
            if name != "dir" {
                let v = v.as_f64().unwrap();
                assert!(v > 0.0 && v.is_finite(), "{name}: {v}");
            }
        }
    }
}
