//! Signed master public keys (`master_sign_pubkey`) with stock Salt 3008.3 on the other side:
//! stock minions with `verify_master_pubkey_sign` join a signing Halite master and refuse one
//! that does not sign; stock `salt-key --gen-signature` and `halite-key --gen-signature`
//! write the same file; a missing precomputed signature stops Halite's master as it stops
//! Salt's.

mod common;

use common::*;
use halite_testkit::*;
use std::path::Path;
use std::time::Duration;

/// The master id of these tests: keys are `sig.pem/.pub`, the signature file
/// `sig_master_pubkey_signature`.
const ID: &str = "id: sig_master\n";
const SIGNATURE: &str = "sig_master_pubkey_signature";
/// A stock minion that verifies the master's key with its copy of `master_sign.pub`.
const VERIFYING: &str = "verify_master_pubkey_sign: True\n";

/// Copies the master's `master_sign.pub` into minion `id`'s pki directory, as the
/// MultiMaster-PKI tutorial says to.
fn give_minion_sign_pub(root: &TempRoot, id: &str) {
    let pki = root.minion_pki_dir(id);
    std::fs::create_dir_all(&pki).unwrap();
    std::fs::copy(
        root.master_pki_dir().join("master_sign.pub"),
        pki.join("master_sign.pub"),
    )
    .unwrap();
}

fn log_text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn stock_minions_verifying_the_master_key_join_a_signing_halite_master() {
    let root = TempRoot::with_master_extra(&format!(
        "{ID}auto_accept: True\nmaster_sign_pubkey: True\n"
    ));
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    // The master binds its ports first, then loads (here: creates) its keys.
    let pki = root.master_pki_dir();
    assert!(
        wait_until(Duration::from_secs(30), || pki
            .join("master_sign.pub")
            .is_file()),
        "no signing pair was created"
    );
    assert!(pki.join("master_sign.pem").is_file());

    // One minion per signing algorithm a minion may ask for.
    root.add_minion_with("sha1", VERIFYING);
    root.add_minion_with(
        "sha224",
        &format!("{VERIFYING}signing_algorithm: PKCS1v15-SHA224\n"),
    );
    let mut minions = Vec::new();
    for id in ["sha1", "sha224"] {
        give_minion_sign_pub(&root, id);
        minions.push(start_stock_minion(&root, id));
    }
    wait_for_pings(&root, &["sha1", "sha224"]);
    for id in ["sha1", "sha224"] {
        let log = log_text(&root.minion_log(id));
        assert!(
            log.contains("Successfully verified signature of master public key with verification public key master_sign.pub"),
            "{id}: {log}"
        );
        assert!(
            log.contains("Received signed and verified master pubkey from master"),
            "{id}: {log}"
        );
    }
}

#[test]
fn stock_minion_verifying_the_master_key_refuses_a_halite_master_that_does_not_sign() {
    let root = TempRoot::with_master_extra(&format!("{ID}auto_accept: True\n"));
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    root.add_minion_with("strict", VERIFYING);
    // A verification key the master never signed with.
    let pki = root.minion_pki_dir("strict");
    std::fs::create_dir_all(&pki).unwrap();
    let stranger = halite_proto::rsa::PrivateKey::generate(2048).unwrap();
    std::fs::write(
        pki.join("master_sign.pub"),
        stranger.public_key().unwrap().to_pem().unwrap(),
    )
    .unwrap();
    let _minion = start_stock_minion(&root, "strict");
    wait_for_log(
        &root.minion_log("strict"),
        "The master did not send its public-key signature, but signature verification is enabled on the minion. Either disable signature verification on the minion or enable signing the public on the master!",
        JOIN,
    );
    // Its key is accepted (auto_accept), but it never joins: no job reaches it.
    let pings = halite_json(&root, &["strict", "test.ping", "-t", "5"]);
    assert_ne!(
        pings.get("strict"),
        Some(&serde_json::Value::Bool(true)),
        "the minion must not run jobs"
    );
    assert!(
        !root
            .minion_pki_dir("strict")
            .join("minion_master.pub")
            .exists(),
        "the unsigned master key was not pinned"
    );
}

#[test]
fn stock_and_halite_gen_signature_write_the_same_file_and_minions_accept_it() {
    let root = TempRoot::with_master_extra(ID);
    // The master makes its key pair at first start.
    let mut master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    master.stop();

    let stock_dir = root.path().join("stock-sig");
    let halite_dir = root.path().join("halite-sig");
    let stock = run_stock_salt_key(
        &root,
        [
            "--gen-signature",
            "--auto-create",
            "--signature-path",
            stock_dir.to_str().unwrap(),
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&stock.stdout),
        "return:\n    True\n",
        "{}",
        String::from_utf8_lossy(&stock.stderr)
    );
    // halite-key signs with the pair stock salt-key just created: PKCS#1 v1.5 is
    // deterministic, so the two files must be byte for byte the same.
    let halite = run_halite_key(
        &root,
        [
            "--gen-signature",
            "--signature-path",
            halite_dir.to_str().unwrap(),
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&halite.stdout),
        "return:\n    True\n"
    );
    let names = |dir: &Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(names(&stock_dir), [SIGNATURE]);
    assert_eq!(names(&halite_dir), [SIGNATURE]);
    assert_eq!(
        std::fs::read(stock_dir.join(SIGNATURE)).unwrap(),
        std::fs::read(halite_dir.join(SIGNATURE)).unwrap()
    );

    // The precomputed signature in the pki directory, sent by the master as read; a stock
    // minion verifies it.
    let out = run_halite_key(&root, ["--gen-signature"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "return:\n    True\n");
    root.write_master_config(&format!(
        "{ID}auto_accept: True\nmaster_sign_pubkey: True\nmaster_use_pubkey_signature: True\n"
    ));
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    root.add_minion_with("m1", VERIFYING);
    give_minion_sign_pub(&root, "m1");
    let _minion = start_stock_minion(&root, "m1");
    wait_for_pings(&root, &["m1"]);
    assert!(log_text(&root.minion_log("m1"))
        .contains("Received signed and verified master pubkey from master"));
    assert!(log_text(&root.master_log()).contains(&format!(
        "Read {SIGNATURE}'s signature from {}",
        root.master_pki_dir().join(SIGNATURE).display()
    )));
}

#[test]
fn missing_precomputed_signature_stops_halite_and_stock_masters_alike() {
    let root = TempRoot::with_master_extra(&format!(
        "{ID}master_sign_pubkey: True\nmaster_use_pubkey_signature: True\n"
    ));
    let path = root.master_pki_dir().join(SIGNATURE);
    let lines = [
        format!(
            "Signing the master.pub key with a signature is enabled but no signature file found at the defined location {}",
            path.display()
        ),
        "The signature-file may be either named differently or has to be created with 'salt-key --gen-signature'".to_owned(),
    ];
    for (start, name) in [
        (start_stock_master as fn(&TempRoot) -> Proc, "salt-master"),
        (start_halite_master, "halite-master"),
    ] {
        let _ = std::fs::remove_file(root.master_log());
        let mut master = start(&root);
        let status = master
            .wait_exit(JOIN)
            .unwrap_or_else(|| panic!("{name} kept running without its signature file"));
        assert_eq!(status.code(), Some(1), "{name}");
        let log = log_text(&root.master_log());
        for line in &lines {
            assert!(log.contains(line), "{name} did not log {line:?}:\n{log}");
        }
    }
}
