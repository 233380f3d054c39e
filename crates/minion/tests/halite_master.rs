//! A Halite master and the `halite` CLI drive Halite minions; the minions survive a master
//! restart; `halite-call` returns to the master.

mod common;

use common::*;
use halite_proto::value;
use halite_testkit::*;
use std::process::Command;
use std::time::Duration;

#[test]
fn halite_master_drives_halite_minions_and_they_survive_a_restart() {
    let root = TempRoot::new();
    let mut master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let ids = ["n1", "n2"];
    // Pending keys are retried until accepted.
    let _minions = start_minions_until_pending(&root, &ids);
    assert_success("halite-key -A", &run_halite_key(&root, ["-A", "-y"]));
    Cli::Halite.wait_for_pings(&root, &ids);
    check_jobs(&root, Cli::Halite, ids);

    // The master restarts with a new AES key: the minions sign in again by themselves.
    let offsets: Vec<u64> = ids
        .iter()
        .map(|id| file_len(&root.minion_log(id)))
        .collect();
    master.stop();
    master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    for (id, offset) in ids.iter().zip(offsets) {
        wait_for_log_from(
            &root.minion_log(id),
            offset,
            "Connection to master 127.0.0.1 lost",
            JOIN,
        );
        wait_for_log_from(
            &root.minion_log(id),
            offset,
            "Minion is ready to receive requests!",
            JOIN,
        );
    }
    Cli::Halite.wait_for_pings(&root, &ids);
    drop(master);
}

#[test]
fn halite_call_returns_a_local_call_to_the_master() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    root.add_minion("c1");
    let sock = root.master_root().join("sock");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let addr = halite_bus::BusSockets::master(&sock).pub_addr;
        let mut listener = halite_bus::BusClient::new(1 << 20)
            .listen(&addr, "salt/job/")
            .await
            .unwrap();
        let dir = root.minion_config_dir("c1");
        let out = tokio::task::spawn_blocking(move || {
            let mut cmd = Command::new(halite_bin("halite-call"));
            cmd.arg("-c").arg(dir).args(["test.echo", "hello"]);
            run_command(cmd, TIMEOUT)
        })
        .await
        .unwrap();
        assert_eq!(
            assert_success("halite-call test.echo", &out),
            "local:\n    hello\n"
        );
        let ret = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let event = listener
                    .recv()
                    .await
                    .unwrap()
                    .expect("the master bus closed");
                if event.tag().ends_with("/ret/c1") {
                    return event.data().clone();
                }
            }
        })
        .await
        .expect("no return event for the halite-call job");
        assert_eq!(value::get_str(&ret, "fun"), Some("test.echo"));
        assert_eq!(value::get_str(&ret, "return"), Some("hello"));
        assert_ne!(
            value::get_str(&ret, "jid"),
            Some("req"),
            "the master allocates the jid"
        );
    });
}

#[test]
fn halite_call_reports_an_unaccepted_key_like_salt_call() {
    let root = TempRoot::new();
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let mut cmd = Command::new(halite_bin("halite-call"));
    cmd.arg("-c").arg(root.add_minion("c2")).arg("test.ping");
    let out = run_command(cmd, TIMEOUT);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Minion failed to authenticate with the master, has the minion key been accepted?\n"
    );
}

#[test]
fn invalid_config_values_stop_the_minion_naming_option_and_file() {
    let root = TempRoot::new();
    for (extra, option) in [
        ("sign_pub_messages: maybe\n", "sign_pub_messages"),
        ("master_port: many\n", "master_port"),
    ] {
        let dir = root.add_minion_with("bad", extra);
        let mut cmd = Command::new(halite_bin("halite-minion"));
        cmd.arg("-c").arg(&dir);
        let out = run_command(cmd, TIMEOUT);
        assert!(!out.status.success(), "{option}: the minion started");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(option) && err.contains(&*dir.join("minion").to_string_lossy()),
            "{option}: {err}"
        );
    }
}
