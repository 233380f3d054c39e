//! Trust in the master's key against stock salt-master 3008.3 (salt-semantics.md §6.6):
//! `verify_master_pubkey_sign` with a signing master (`master_sign_pubkey: True`, the
//! verification key copied from the master as the MultiMaster-PKI tutorial says), a
//! signing key the minion does not trust (also once the key is pinned: salt#55523),
//! `master_finger`, and the consistency checks between a signing master and a verifying
//! minion — each with Salt's log lines.

mod common;

use common::*;
use halite_testkit::*;
use std::path::Path;
use std::time::Duration;

/// The master's id: its key pair is `trust.pem/.pub` (3008 names it after the id).
const MASTER_ID: &str = "id: trust_master\n";
const VERIFYING: &str = "verify_master_pubkey_sign: True\n";
const CRITICAL: &str = "The Salt Master server's public key did not authenticate!";

fn log_text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn pinned(root: &TempRoot, id: &str) -> Option<String> {
    std::fs::read_to_string(root.minion_pki_dir(id).join("minion_master.pub")).ok()
}

/// Writes `pem` as minion `id`'s verification key `master_sign.pub`.
fn give_sign_pub(root: &TempRoot, id: &str, pem: &[u8]) {
    let pki = root.minion_pki_dir(id);
    std::fs::create_dir_all(&pki).unwrap();
    std::fs::write(pki.join("master_sign.pub"), pem).unwrap();
}

/// The stock master's own fingerprint, as `salt-key -F master` prints it (in 3008.3 the
/// digest of the whole key file).
fn stock_master_finger(root: &TempRoot) -> String {
    let out = run_stock_salt_key(root, ["-F", "master", "--out", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "salt-key -F master: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    json["local"]["trust.pub"]
        .as_str()
        .unwrap_or_else(|| panic!("no trust.pub in {json}"))
        .to_owned()
}

/// Waits until every id in `ids` answers `test.ping` sent by stock `salt` to that list.
fn wait_for_pings(root: &TempRoot, ids: &[&str]) {
    let list = ids.join(",");
    let mut last = serde_json::Map::new();
    let ok = wait_until(JOIN, || {
        last = Cli::Stock.json(root, &["-L", &list, "test.ping", "-t", "10"]);
        ids.iter()
            .all(|id| last.get(*id) == Some(&serde_json::Value::Bool(true)))
    });
    assert!(ok, "{ids:?} did not all answer test.ping: {last:?}");
}

/// Waits until `needle` is in the log of minion `id` at least `times` times (the minion
/// keeps trying to sign in).
fn wait_for_repeated_log(root: &TempRoot, id: &str, needle: &str, times: usize) {
    let path = root.minion_log(id);
    let seen = wait_until(JOIN, || log_text(&path).matches(needle).count() >= times);
    assert!(
        seen,
        "{id}: {needle:?} not logged {times} times:\n{}",
        log_tail(&path, 40)
    );
}

/// The fingerprint a stock minion checks `master_finger` against (`pem_finger` of the key
/// file: the digest of the lines between the armour), also what `key.finger_master` prints.
fn master_pem_finger(root: &TempRoot) -> String {
    let file = std::fs::read(root.master_pki_dir().join("trust.pub")).unwrap();
    halite_proto::pem::pem_finger(&file, "sha256").unwrap()
}

fn start_stock_signing_master(root: &TempRoot) -> Proc {
    let master = start_stock_master(root);
    wait_for_port(root.ret_port(), JOIN);
    let sign_pub = root.master_pki_dir().join("master_sign.pub");
    assert!(
        wait_until(JOIN, || sign_pub.is_file()),
        "the stock master made no signing pair"
    );
    master
}

#[test]
fn halite_minions_verify_a_stock_signing_master_and_refuse_untrusted_signatures() {
    let root = TempRoot::with_master_extra(&format!(
        "{MASTER_ID}auto_accept: True\nmaster_sign_pubkey: True\n"
    ));
    let mut master = start_stock_signing_master(&root);
    let sign_pub = std::fs::read(root.master_pki_dir().join("master_sign.pub")).unwrap();
    let stock_finger = stock_master_finger(&root);
    let pem_finger = master_pem_finger(&root);
    assert_ne!(stock_finger, pem_finger);
    let stranger = halite_proto::rsa::PrivateKey::generate(2048).unwrap();
    let stranger_pub = stranger.public_key().unwrap().to_pem().unwrap();

    // Two verifying minions, one per signing algorithm the master signs with on request,
    // with the master's fingerprint in either form: the one `salt-key -F master` prints and
    // the one a stock minion checks.
    root.add_minion_with(
        "v1",
        &format!("{VERIFYING}master_finger: '{stock_finger}'\n"),
    );
    root.add_minion_with(
        "v224",
        &format!("{VERIFYING}signing_algorithm: PKCS1v15-SHA224\nmaster_finger: '{pem_finger}'\n"),
    );
    // A minion whose verification key the master never signed with, and one that does
    // not verify at all.
    root.add_minion_with("stranger", VERIFYING);
    root.add_minion("plain");
    give_sign_pub(&root, "v1", &sign_pub);
    give_sign_pub(&root, "v224", &sign_pub);
    give_sign_pub(&root, "stranger", stranger_pub.as_bytes());
    let mut minions: Vec<Proc> = ["v1", "v224", "stranger", "plain"]
        .iter()
        .map(|id| start_halite_minion(&root, id))
        .collect();

    wait_for_pings(&root, &["v1", "v224"]);
    for id in ["v1", "v224"] {
        let log = log_text(&root.minion_log(id));
        for line in [
            "Successfully verified signature of master public key with verification public key master_sign.pub",
            "Received signed and verified master pubkey from master 127.0.0.1",
        ] {
            assert!(log.contains(line), "{id} did not log {line:?}:\n{log}");
        }
        assert!(pinned(&root, id).is_some(), "{id} pinned no key");
    }

    wait_for_repeated_log(
        &root,
        "stranger",
        "Received signed public-key from master 127.0.0.1 but signature verification failed!",
        2,
    );
    wait_for_log(&root.minion_log("stranger"), CRITICAL, JOIN);
    wait_for_repeated_log(
        &root,
        "plain",
        "The masters sent its public-key signature, but signature verification is not enabled on the minion. Either enable signature verification on the minion or disable signing the public key on the master!",
        2,
    );
    wait_for_log(&root.minion_log("plain"), CRITICAL, JOIN);
    for id in ["stranger", "plain"] {
        assert_eq!(
            pinned(&root, id),
            None,
            "{id} pinned a key it did not trust"
        );
    }
    let pings = Cli::Stock.json(&root, &["-L", "stranger,plain", "test.ping", "-t", "5"]);
    assert!(
        pings.values().all(|v| v != &serde_json::Value::Bool(true)),
        "{pings:?}"
    );

    // salt#55523: the master now signs with another signing key; its own key, pinned by
    // v1, is unchanged. Stock 3008.3 minions accept it; Halite's refuse it.
    master.stop();
    let pki = root.master_pki_dir();
    for (name, text) in [
        ("master_sign.pem", stranger.to_pem().unwrap()),
        ("master_sign.pub", stranger_pub.clone()),
    ] {
        let _ = std::fs::remove_file(pki.join(name));
        std::fs::write(pki.join(name), text).unwrap();
    }
    let before = pinned(&root, "v1");
    minions[0].stop();
    let log = root.minion_log("v1");
    let from = file_len(&log);
    let _master = start_stock_signing_master(&root);
    minions[0] = start_halite_minion(&root, "v1");
    for line in [
        "Received signed public-key from master 127.0.0.1 but signature verification failed!",
        "The masters public could not be verified. Is the verification pubkey master_sign.pub up to date?",
        CRITICAL,
    ] {
        wait_for_log_from(&log, from, line, JOIN);
    }
    let pings = Cli::Stock.json(&root, &["v1", "test.ping", "-t", "5"]);
    assert_ne!(pings.get("v1"), Some(&serde_json::Value::Bool(true)));
    assert_eq!(pinned(&root, "v1"), before, "the pinned key was replaced");
}

#[test]
fn halite_minion_refuses_a_stock_master_that_does_not_sign_and_a_wrong_master_finger() {
    let root = TempRoot::with_master_extra(&format!("{MASTER_ID}auto_accept: True\n"));
    let _master = start_stock_master(&root);
    wait_for_port(root.ret_port(), JOIN);

    root.add_minion_with("strict", VERIFYING);
    let signer = halite_proto::rsa::PrivateKey::generate(2048).unwrap();
    let signer_pub = signer.public_key().unwrap().to_pem().unwrap();
    give_sign_pub(&root, "strict", signer_pub.as_bytes());
    let finger = "aa:bb:cc";
    root.add_minion_with("finger", &format!("master_finger: '{finger}'\n"));
    let _strict = start_halite_minion(&root, "strict");
    let mut wrong_finger = start_halite_minion(&root, "finger");

    // The verifying minion logs Salt's ERROR, fails to sign in, and tries again.
    wait_for_repeated_log(
        &root,
        "strict",
        "The master did not send its public-key signature, but signature verification is enabled on the minion. Either disable signature verification on the minion or enable signing the public on the master!",
        2,
    );
    wait_for_log(&root.minion_log("strict"), CRITICAL, JOIN);
    assert_eq!(pinned(&root, "strict"), None);

    // A master whose key does not match master_finger ends the minion with status 42,
    // and its key is not pinned.
    let status = wrong_finger
        .wait_exit(JOIN)
        .expect("the minion kept running with a wrong master_finger");
    assert_eq!(status.code(), Some(42));
    let actual = master_pem_finger(&root);
    wait_for_log(
        &root.minion_log("finger"),
        &format!("The specified fingerprint in the master configuration file:\n{finger}\nDoes not match the authenticating master's key:\n{actual}\nVerify that the configured fingerprint matches the fingerprint of the correct master and that this minion is not subject to a man-in-the-middle attack."),
        Duration::from_secs(5),
    );
    assert_eq!(pinned(&root, "finger"), None);

    // halite-call with the same minion config ends the same way.
    let call = run(
        halite_bin("halite-call"),
        [
            "-c",
            root.minion_config_dir("finger").to_str().unwrap(),
            "test.ping",
        ],
        JOIN,
    );
    assert_eq!(
        call.status.code(),
        Some(42),
        "halite-call with a wrong master_finger"
    );
    assert_eq!(pinned(&root, "finger"), None);
}
