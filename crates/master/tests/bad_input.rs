//! Malformed input on every socket of a Halite master is logged and dropped; the master
//! keeps serving (issue: master core, "Bad input").

mod common;

use common::*;
use halite_proto::crypticle::Crypticle;
use halite_proto::value::{self, bin, map, s};
use halite_proto::Value;
use halite_testkit::*;
use std::io::Write;
use std::time::Duration;

fn request(port: u16, body: &[u8]) -> Option<Vec<u8>> {
    let ctx = zmq::Context::new();
    halite_transport::client::request(
        &ctx,
        &format!("tcp://127.0.0.1:{port}"),
        body,
        Duration::from_secs(30),
    )
    .ok()
}

fn reply_is_bad_load(reply: &[u8]) -> bool {
    let v = value::decode(reply).expect("reply is msgpack");
    value::str_of(&v).is_some_and(|t| t.starts_with("bad load"))
        || value::get_str(&v, "msg") == Some("bad load")
}

#[test]
fn malformed_input_is_logged_and_the_master_keeps_serving() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let _minion = start_stock_minion(&root, "b1");
    wait_for_pings(&root, &["b1"]);
    let log = root.master_log();
    let port = root.ret_port();

    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "garbage bytes",
            b"\xc1\xff garbage".to_vec(),
            "Undecodable request",
        ),
        (
            "msgpack without load",
            value::encode(&map([("enc", s("clear"))])),
            "Malformed request",
        ),
        (
            "unknown enc",
            value::encode(&map([
                ("enc", s("rot13")),
                ("load", map([("cmd", s("x"))])),
                ("version", Value::from(3)),
            ])),
            "Malformed request",
        ),
        (
            "request encrypted with a wrong key",
            value::encode(&map([
                ("enc", s("aes")),
                (
                    "load",
                    bin(Crypticle::generate()
                        .dumps(&map([("cmd", s("_return")), ("id", s("b1"))]), None)
                        .unwrap()),
                ),
                ("version", Value::from(3)),
                ("id", s("b1")),
            ])),
            "Failed to decrypt a request from b1",
        ),
        (
            "clear request over max_clear_request_size",
            value::encode(&map([
                ("enc", s("clear")),
                ("load", map([("x", bin(vec![0; 2 << 20]))])),
            ])),
            "Unencrypted request larger than max_clear_request_size refused",
        ),
    ];
    for (what, body, line) in cases {
        let offset = file_len(&log);
        let reply = request(port, &body).unwrap_or_else(|| panic!("{what}: no reply"));
        assert!(
            reply_is_bad_load(&reply),
            "{what}: reply {:?}",
            value::decode(&reply)
        );
        wait_for_log_from(&log, offset, line, Duration::from_secs(20));
    }

    // A broken ZMTP handshake on both ZeroMQ ports.
    for p in [root.publish_port(), root.ret_port()] {
        let offset = file_len(&log);
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", p)).unwrap();
        let mut greeting = vec![0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 3, 0];
        greeting.extend_from_slice(b"NULL");
        greeting.extend_from_slice(&[0; 16 + 32]);
        greeting.extend_from_slice(&[4, 5, b'R', b'E', b'A', b'D', b'Y']);
        greeting.extend_from_slice(&[0xff; 20]);
        conn.write_all(&greeting).unwrap();
        wait_for_log_from(
            &log,
            offset,
            "ZMTP handshake with a peer",
            Duration::from_secs(20),
        );
    }

    // Garbage on the event bus sockets.
    let sock = root.master_root().join("sock");
    for name in ["master_event_pull.ipc", "master_event_pub.ipc"] {
        let mut conn = std::os::unix::net::UnixStream::connect(sock.join(name)).unwrap();
        let _ = conn.write_all(b"\xff\xff\xff\xffnot a frame at all");
    }

    // Everything above left the master serving.
    wait_for_pings(&root, &["b1"]);
}

#[test]
fn bad_config_value_exits_nonzero_naming_the_option() {
    let root = TempRoot::with_master_extra("publish_port: not-a-port\n");
    let out = run(
        halite_bin("halite-master"),
        ["-c", root.master_config_dir().to_str().unwrap()],
        Duration::from_secs(30),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("publish_port"), "{err}");
    assert!(
        err.contains(&root.master_config_file().display().to_string()),
        "{err}"
    );
}
