//! halite-key against the stock salt-key 3008.3: every case builds two identical master
//! directories, runs stock salt-key on one and halite-key on the other with the same
//! arguments and stdin, and compares exit code, stdout, the meaningful stderr lines and the
//! resulting files (names, modes, symlink targets, contents).
//!
//! The fixture is written through `halite-keystore` (minion keys with `put`/`add_denied`,
//! the master pair migrated from a legacy `master.pem`), so these tests also check that
//! stock Salt reads the layout Halite writes.
//!
//! The stock programs come from `<workspace>/.salt-venv` (created by `scripts/setup-tests`); without
//! it these tests fail rather than pass silently.

use halite_keystore::{KeyState, KeyStore};
use halite_proto::rsa::PrivateKey;
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

const HALITE_KEY: &str = env!("CARGO_BIN_EXE_halite-key");

fn stock_salt_key() -> PathBuf {
    halite_testkit::salt_venv().join("bin/salt-key")
}

/// Key material shared by every fixture, so that the two directories of a case are equal.
struct Material {
    master_pem: String,
    master_pub: String,
    minions: Vec<String>,
}

fn material() -> &'static Material {
    static M: OnceLock<Material> = OnceLock::new();
    M.get_or_init(|| {
        let master = PrivateKey::generate(2048).unwrap();
        Material {
            master_pem: master.to_pem().unwrap(),
            master_pub: master.public_key().unwrap().to_pem().unwrap(),
            minions: (0..4)
                .map(|_| {
                    PrivateKey::generate(1024)
                        .unwrap()
                        .public_key()
                        .unwrap()
                        .to_pem()
                        .unwrap()
                })
                .collect(),
        }
    })
}

/// A master configuration directory with keys in every state and some minion data cache.
fn fixture(root: &Path) {
    let m = material();
    for sub in ["pki", "cache", "sock"] {
        fs::create_dir_all(root.join(sub)).unwrap();
    }
    let d = root.display();
    fs::write(
        root.join("master"),
        format!(
            "user: {}\nroot_dir: {d}\npki_dir: {d}/pki\ncachedir: {d}/cache\nsock_dir: {d}/sock\n\
             log_file: {d}/master.log\nkey_logfile: {d}/key.log\nid: testm_master\n",
            halite_config::current_user().expect("the test user has a passwd entry")
        ),
    )
    .unwrap();
    let pki = root.join("pki");
    fs::write(pki.join("master.pem"), &m.master_pem).unwrap();
    fs::write(pki.join("master.pub"), &m.master_pub).unwrap();
    let store = KeyStore::open(&pki).unwrap();
    store.load_or_create_master_keys("testm", 2048).unwrap();
    let k = &m.minions;
    for (state, id, key) in [
        (KeyState::Accepted, "Alpha", &k[0]),
        (KeyState::Accepted, "beta", &k[1]),
        (KeyState::Pending, "gamma", &k[2]),
        (KeyState::Pending, "Zed", &k[3]),
        (KeyState::Pending, "web1", &k[1]),
        (KeyState::Pending, "web2", &k[2]),
        (KeyState::Rejected, "rej1", &k[3]),
        (KeyState::Rejected, "web3", &k[0]),
    ] {
        store.put(id, state, key).unwrap();
    }
    store
        .put(
            "bad",
            KeyState::Pending,
            "-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----",
        )
        .unwrap();
    assert!(store.add_denied("beta", &k[3]).unwrap());
    let cache = root.join("cache");
    for (bank, name) in [
        ("grains", "Alpha.p"),
        ("grains", "beta.p"),
        ("grains", "gamma.p"),
        ("grains", "gone.p"),
        ("grains", "web1.p"),
        ("pillar", "gone:base.p"),
        ("pillar", "beta:base.p"),
    ] {
        fs::create_dir_all(cache.join(bank)).unwrap();
        fs::write(cache.join(bank).join(name), "x").unwrap();
    }
}

/// What a run leaves behind and prints.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: Vec<String>,
    files: BTreeMap<String, String>,
}

fn run(bin: &Path, root: &Path, args: &[&str], stdin: Option<&str>) -> Outcome {
    let mut child = Command::new(bin)
        .arg("-c")
        .arg(root)
        .args(args)
        .current_dir(root)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let root_text = root.display().to_string();
    let clean = |b: &[u8]| {
        String::from_utf8_lossy(b)
            .replace(&root_text, "ROOT")
            .replace("salt-key", "halite-key")
    };
    Outcome {
        code: out.status.code(),
        stdout: clean(&out.stdout),
        stderr: clean(&out.stderr)
            .lines()
            .filter(|l| meaningful_stderr(l))
            .map(str::to_owned)
            .collect(),
        files: snapshot(root),
    }
}

/// Stock salt-key also writes Python tracebacks and resource warnings to stderr; the
/// messages themselves are what must match.
fn meaningful_stderr(line: &str) -> bool {
    let python_noise = line.starts_with("Traceback ")
        || line.starts_with(' ')
        || line
            .trim_start_matches("[WARNING ] ")
            .starts_with("unclosed ")
        || line.split_once(": ").is_some_and(|(head, _)| {
            head.ends_with("Error") && head != "Error" && !head.contains(' ')
        });
    !python_noise
}

/// Every entry under `pki/` and `cache/`: type, mode, and content or link target.
fn snapshot(root: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    let root_text = root.display().to_string();
    let mut stack = vec![root.join("pki"), root.join("cache")];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let mode = meta.mode() & 0o7777;
            let desc = if meta.file_type().is_symlink() {
                format!(
                    "link -> {}",
                    fs::read_link(&path)
                        .unwrap()
                        .display()
                        .to_string()
                        .replace(&root_text, "ROOT")
                )
            } else if meta.is_dir() {
                stack.push(path.clone());
                format!("dir {mode:o}")
            } else {
                format!("file {mode:o} {:?}", fs::read(&path).unwrap())
            };
            files.insert(rel, desc);
        }
    }
    files
}

/// Runs stock salt-key and halite-key on fresh, identical fixtures and asserts the same
/// outcome. Returns halite-key's outcome for further checks.
fn same_as_stock(args: &[&str], stdin: Option<&str>) -> Outcome {
    let stock_bin = stock_salt_key();
    let stock_dir = tempfile::tempdir().unwrap();
    let halite_dir = tempfile::tempdir().unwrap();
    fixture(stock_dir.path());
    fixture(halite_dir.path());
    let stock = run(&stock_bin, stock_dir.path(), args, stdin);
    let halite = run(Path::new(HALITE_KEY), halite_dir.path(), args, stdin);
    assert_eq!(halite.code, stock.code, "exit code of {args:?}");
    assert_eq!(halite.stdout, stock.stdout, "stdout of {args:?}");
    assert_eq!(halite.stderr, stock.stderr, "stderr of {args:?}");
    for (path, stock_desc) in &stock.files {
        assert_eq!(
            halite.files.get(path),
            Some(stock_desc),
            "{path} after {args:?}"
        );
    }
    assert_eq!(
        halite.files.len(),
        stock.files.len(),
        "files after {args:?}: {:?}",
        halite.files.keys()
    );
    halite
}

#[test]
fn listing_matches_stock() {
    for args in [
        &["-L"][..],
        &["--list=acc"],
        &["-l", "un"],
        &["-l", "den", "--out=json"],
        &["-l", "all", "--out", "yaml"],
        &["-L", "--force-color"],
        &["-L", "--out", "nested"],
        &["-L", "--out", "txt"],
        &["-L", "--out", "json", "--out-indent", "-1"],
        &["-L", "--out", "bogus"],
        &[],
    ] {
        same_as_stock(args, None);
    }
    let out = same_as_stock(&["-L", "--out", "json"], None);
    let keys: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("    \""))
        .map(str::trim)
        .collect();
    assert_eq!(
        keys,
        [
            "\"minions_pre\": [",
            "\"minions_rejected\": [",
            "\"minions\": [",
            "\"minions_denied\": ["
        ]
    );
}

#[test]
fn invalid_list_argument_is_a_usage_error() {
    let out = same_as_stock(&["-l", "foo"], None);
    assert_eq!(out.code, Some(64));
    assert_eq!(
        out.stderr,
        [
            "Usage: halite-key [options]",
            "",
            "halite-key: error: 'foo' is not a valid argument to '--list'"
        ]
    );
}

#[test]
fn bad_options_are_usage_errors() {
    for args in [
        &["--bogus"][..],
        &["-a"],
        &["--keysize", "abc"],
        &["--keysize", "1024"],
        &["--acc", "x"],
        &["--log-level", "bogus", "-L"],
        &["-L", "--log-level", "quiet", "--out", "bogus"],
    ] {
        same_as_stock(args, None);
    }
}

#[test]
fn fingerprints_match_stock_including_local_keys() {
    for args in [
        &["-f", "beta,web*"][..],
        &["-F", "--out", "json"],
        &["-f", "*.pub"],
        &["-F", "--force-color"],
    ] {
        same_as_stock(args, None);
    }
    let out = same_as_stock(&["-F"], None);
    assert!(
        out.stdout.starts_with("Local Keys:\ntestm.pem:  "),
        "{}",
        out.stdout
    );
}

#[test]
fn printing_keys_matches_stock() {
    for args in [&["-P"][..], &["-P", "--out", "json"], &["-p", "beta"]] {
        same_as_stock(args, None);
    }
}

#[test]
fn accepting_matches_stock() {
    for args in [
        &["-a", "gamma", "-y"][..],
        &["-A", "-y"],
        &["-a", "beta", "--include-denied", "-y"],
        &["-a", "web*", "--include-all", "-y"],
        &["-a", "web1,web*", "-y"],
        &["-a", "bad", "-y"],
        &["-a", "gamma", "-y", "--out", "json"],
    ] {
        same_as_stock(args, None);
    }
}

#[test]
fn rejecting_matches_stock() {
    for args in [
        &["-r", "web1", "-y"][..],
        &["-R", "-y"],
        &["-r", "Alpha", "--include-accepted", "-y"],
        &["-r", "*", "--include-all", "--include-denied", "-y"],
        &["-r", "gamma", "-y", "--rotate-aes-key", "False"],
    ] {
        same_as_stock(args, None);
    }
}

#[test]
fn deleting_matches_stock() {
    for args in [
        &["-d", "beta", "-y"][..],
        &["-D", "-y"],
        &["-d", "beta,web*", "-y"],
        &["-d", "web1", "--preserve-minions=True", "-y"],
        &["-d", "web1", "--rotate-aes-key=false", "-y"],
        &["-D", "extra"],
    ] {
        same_as_stock(args, None);
    }
}

#[test]
fn unmatched_globs_are_reported_with_the_searched_states() {
    for args in [
        &["-a", "nomatch"][..],
        &["-a", "nomatch", "--include-all", "--include-denied"],
        &["-r", "nomatch", "--include-all", "--include-denied"],
        &["-d", "nomatch", "--include-denied"],
    ] {
        let out = same_as_stock(args, None);
        assert_eq!(out.code, Some(0));
    }
}

#[test]
fn prompts_match_stock() {
    for (args, input) in [
        (&["-a", "gamma"][..], Some("y\n")),
        (&["-a", "gamma"], Some("\n")),
        (&["-a", "gamma"], Some("n\n")),
        (&["-a", "gamma"], None),
        (&["-d", "gamma"], Some("\n")),
        (&["-d", "gamma"], Some("Yes\n")),
        (&["-r", "web*"], Some("yes")),
    ] {
        same_as_stock(args, input);
    }
}

#[test]
fn gen_keys_writes_a_private_and_public_key() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let keys = dir.path().join("newkeys");
    let out = Command::new(HALITE_KEY)
        .arg("-c")
        .arg(dir.path())
        .args(["--gen-keys", "foo", "--gen-keys-dir"])
        .arg(&keys)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    // What salt-key 3008.3 means to print before it crashes: the public key's fingerprint.
    let public = fs::read_to_string(keys.join("foo.pub")).unwrap();
    let finger = halite_keystore::key_fingerprint(&public, "sha256").unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("return:\n    {finger}\n")
    );
    let pem = fs::read_to_string(keys.join("foo.pem")).unwrap();
    assert!(pem.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
    assert_eq!(PrivateKey::from_pem(pem.as_bytes()).unwrap().bits(), 2048);
    for name in ["foo.pem", "foo.pub"] {
        assert_eq!(
            fs::metadata(keys.join(name)).unwrap().permissions().mode() & 0o777,
            0o400,
            "{name}"
        );
    }
}

/// Salt's own minion-side check (`salt.crypt.verify_signature`, as `verify_pubkey_sig` calls
/// it) of the signature file `sig_file` against the clean master public key `master_pub`,
/// with the signing public key `sign_pub`.
fn stock_verifies(sig_file: &Path, sign_pub: &Path, master_pub: &Path) -> bool {
    let script = "import binascii, sys, salt.crypt\n\
                  sig = binascii.a2b_base64(open(sys.argv[1], 'rb').read())\n\
                  msg = salt.crypt.clean_key(open(sys.argv[3]).read())\n\
                  ok = salt.crypt.verify_signature(sys.argv[2], msg, sig, algorithm='PKCS1v15-SHA1')\n\
                  print(ok)\n";
    let out = Command::new(halite_testkit::salt_venv().join("bin/python3"))
        .arg("-c")
        .arg(script)
        .arg(sig_file)
        .arg(sign_pub)
        .arg(master_pub)
        .output()
        .expect("the stock venv's python runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim() == "True"
}

#[test]
fn gen_signature_refusals_match_stock() {
    for args in [
        &["--gen-signature"][..],
        &["--gen-signature", "--priv", "/nonexistent/sign.pem"],
        &["--gen-signature", "--pub", "/nonexistent/master.pub"],
        &["--gen-signature", "--out", "json"],
    ] {
        same_as_stock(args, None);
    }
}

/// `--gen-signature --auto-create` on both: same output, same file names and modes (the
/// signing pairs are random), and each signature verifies with its own `master_sign.pub`
/// under Salt's own check; a second run refuses to overwrite, with Salt's ERROR line.
#[test]
fn gen_signature_matches_stock_and_both_signatures_verify() {
    let stock_dir = tempfile::tempdir().unwrap();
    let halite_dir = tempfile::tempdir().unwrap();
    fixture(stock_dir.path());
    fixture(halite_dir.path());
    let bins = [stock_salt_key(), PathBuf::from(HALITE_KEY)];
    let dirs = [stock_dir.path(), halite_dir.path()];
    let shape = |o: &Outcome| -> Vec<(String, String)> {
        o.files
            .iter()
            .map(|(k, v)| (k.clone(), v.split(" [").next().unwrap_or(v).to_owned()))
            .collect()
    };
    for args in [
        &["--gen-signature", "--auto-create"][..],
        &["--gen-signature", "--auto-create"],
        &["--gen-signature", "--signature-path", "SIGS"],
        &["--gen-signature", "--signature-path", "SIGS"],
    ] {
        let mut outs = Vec::new();
        for (bin, dir) in bins.iter().zip(dirs) {
            let sigs = dir.join("pki/sigs");
            let args: Vec<&str> = args
                .iter()
                .map(|a| {
                    if *a == "SIGS" {
                        sigs.to_str().unwrap()
                    } else {
                        a
                    }
                })
                .collect();
            outs.push(run(bin, dir, &args, None));
        }
        let (stock, halite) = (&outs[0], &outs[1]);
        assert_eq!(halite.code, stock.code, "{args:?}");
        assert_eq!(halite.stdout, stock.stdout, "{args:?}");
        assert_eq!(halite.stderr, stock.stderr, "{args:?}");
        assert_eq!(shape(halite), shape(stock), "{args:?}");
    }
    for dir in dirs {
        let pki = dir.join("pki");
        let sign_pub = pki.join("master_sign.pub");
        let master_pub = pki.join("master.pub");
        for sig in [
            pki.join("testm_master_pubkey_signature"),
            pki.join("sigs/testm_master_pubkey_signature"),
        ] {
            assert!(
                stock_verifies(&sig, &sign_pub, &master_pub),
                "{}",
                sig.display()
            );
            assert_eq!(
                fs::metadata(&sig).unwrap().permissions().mode() & 0o777,
                0o400
            );
        }
    }
    let out = run(
        Path::new(HALITE_KEY),
        halite_dir.path(),
        &["--gen-signature"],
        None,
    );
    assert_eq!(
        out.stderr,
        ["[ERROR   ] testm_master_pubkey_signature already exists at expected location"]
    );
    assert_eq!(out.stdout, "return:\n    False\n");
}

/// The signing key and public key can come from anywhere (`--priv`, `--pub`).
#[test]
fn gen_signature_signs_given_files() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let signer = PrivateKey::generate(2048).unwrap();
    let priv_path = dir.path().join("offline.pem");
    let sign_pub = dir.path().join("offline.pub");
    fs::write(&priv_path, signer.to_pem().unwrap()).unwrap();
    fs::write(&sign_pub, signer.public_key().unwrap().to_pem().unwrap()).unwrap();
    let master_pub = dir.path().join("other_master.pub");
    fs::write(&master_pub, &material().master_pub).unwrap();
    let out = run(
        Path::new(HALITE_KEY),
        dir.path(),
        &[
            "--gen-signature",
            "--priv",
            priv_path.to_str().unwrap(),
            "--pub",
            master_pub.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(out.stdout, "return:\n    True\n", "{out:?}");
    let sig = dir.path().join("pki/testm_master_pubkey_signature");
    assert!(stock_verifies(&sig, &sign_pub, &master_pub));
    assert!(
        !dir.path().join("pki/master_sign.pem").exists(),
        "no signing pair is created when --priv is given"
    );
}

/// With `master_sign_key_name`, the pair the master signs with is used and `--auto-create`
/// never replaces it (Salt would look for `master_sign.pem` and regenerate `<name>.pem`).
#[test]
fn gen_signature_uses_and_keeps_the_named_signing_pair() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let mut cfg = fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("master"))
        .unwrap();
    cfg.write_all(b"master_sign_key_name: signer\nmaster_pubkey_signature: sig.b64\n")
        .unwrap();
    let pki = dir.path().join("pki");
    let args = ["--gen-signature", "--auto-create"];
    let out = run(Path::new(HALITE_KEY), dir.path(), &args, None);
    assert_eq!(out.stdout, "return:\n    True\n", "{out:?}");
    assert!(!pki.join("master_sign.pem").exists());
    let pem = fs::read(pki.join("signer.pem")).unwrap();
    assert!(stock_verifies(
        &pki.join("sig.b64"),
        &pki.join("signer.pub"),
        &pki.join("master.pub")
    ));
    fs::remove_file(pki.join("sig.b64")).unwrap();
    let out = run(Path::new(HALITE_KEY), dir.path(), &args, None);
    assert_eq!(out.stdout, "return:\n    True\n", "{out:?}");
    assert_eq!(fs::read(pki.join("signer.pem")).unwrap(), pem);
    assert!(stock_verifies(
        &pki.join("sig.b64"),
        &pki.join("signer.pub"),
        &pki.join("master.pub")
    ));
}
