//! `POST /keys` end to end, as a kickstart script uses it: the tarball unpacks with the
//! system's `tar` into a new minion's pki directory, the public key is now an accepted key
//! (`GET /keys`), the private key belongs to it, and a minion started on that pair is let
//! in and answers `test.ping` (the master refuses a minion whose key differs from the
//! accepted one). An existing key is kept unless `force` is given. Against `halite-api`
//! in front of a Halite master and of a stock salt-master, and against stock `salt-api` +
//! stock master for the same headers and tar members; the error cases differ on purpose
//! (salt-api answers them all with 500, halite-api with 400/401, see `src/keys.rs`).

mod common;

use common::*;
use halite_testkit::*;
use openssl::pkey::PKey;
use serde_json::json;
use std::io::Read;
use std::process::Command;

/// What `POST /keys` answered: the status, the headers we look at, the raw body.
struct TarReply {
    status: u16,
    content_type: String,
    disposition: String,
    cache_control: String,
    body: Vec<u8>,
}

/// `POST /keys` with `body` of content type `ct`, read as bytes.
fn post_keys(port: u16, ct: &str, body: &[u8]) -> TarReply {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(TIMEOUT))
        .build()
        .into();
    let mut resp = agent
        .post(format!("http://127.0.0.1:{port}/keys"))
        .header("Content-Type", ct)
        .send(body)
        .expect("POST /keys");
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default()
    };
    let (content_type, disposition, cache_control) = (
        header("content-type"),
        header("content-disposition"),
        header("cache-control"),
    );
    let mut body = Vec::new();
    resp.body_mut()
        .as_reader()
        .read_to_end(&mut body)
        .expect("the body");
    TarReply {
        status: resp.status().as_u16(),
        content_type,
        disposition,
        cache_control,
        body,
    }
}

/// The members of a tar: (name, content).
fn members(tar: &[u8]) -> Vec<(String, String)> {
    let mut archive = tar::Archive::new(tar);
    archive
        .entries()
        .expect("a tar")
        .map(|e| {
            let mut e = e.expect("a member");
            let mut content = String::new();
            e.read_to_string(&mut content).expect("text");
            (e.path().unwrap().display().to_string(), content)
        })
        .collect()
}

/// The public half of a private PEM, and a public PEM, as DER (the same key whatever the
/// PEM flavour).
fn public_der_of_private(pem: &str) -> Vec<u8> {
    PKey::private_key_from_pem(pem.as_bytes())
        .expect("an RSA private key")
        .public_key_to_der()
        .unwrap()
}

fn public_der(pem: &str) -> Vec<u8> {
    PKey::public_key_from_pem(pem.as_bytes())
        .expect("a public key")
        .public_key_to_der()
        .unwrap()
}

/// The accepted key of `id` in the master's pki directory, as DER.
fn accepted_der(fleet: &Fleet, id: &str) -> Vec<u8> {
    let path = fleet.root.master_pki_dir().join("minions").join(id);
    public_der(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}")))
}

const FORM: &str = "application/x-www-form-urlencoded";

/// The kickstart flow through `fleet`'s API; returns the statuses of the error cases
/// (no credentials, a wrong password, a user without `@wheel`, no `mid`).
fn kickstart(fleet: &Fleet, id: &str) -> Vec<(&'static str, u16)> {
    let form = format!("mid={id}&username=alice&password=alicepw&eauth=file");
    let r = post_keys(fleet.port, FORM, form.as_bytes());
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.content_type, "application/x-tar");
    assert_eq!(
        r.disposition,
        format!("attachment; filename=\"saltkeys-{id}.tar\"")
    );
    assert_eq!(r.cache_control, "no-cache");
    assert_eq!(r.body.len() % 10240, 0, "padded to tar records");
    let files = members(&r.body);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["minion.pub", "minion.pem"]);
    let (public, private) = (&files[0].1, &files[1].1);
    assert_eq!(
        public_der_of_private(private),
        public_der(public),
        "the .pem is the .pub's private key"
    );
    assert_eq!(
        accepted_der(fleet, id),
        public_der(public),
        "the .pub is the accepted key"
    );
    let token = fleet.login("alice", "alicepw");
    let listed = fleet.http.get("/keys", &[("X-Auth-Token", &token)]).json();
    let accepted = listed["return"]["minions"].as_array().unwrap();
    assert!(accepted.contains(&json!(id)), "{listed}");

    // The key is kept without force: two empty members, as salt-api sends.
    let r = post_keys(fleet.port, FORM, form.as_bytes());
    assert_eq!(r.status, 200);
    assert_eq!(
        members(&r.body),
        [
            ("minion.pub".to_owned(), String::new()),
            ("minion.pem".to_owned(), String::new())
        ]
    );
    assert_eq!(accepted_der(fleet, id), public_der(public), "key kept");

    // With force (JSON), a new pair replaces it.
    let body = json!({"mid": id, "username": "alice", "password": "alicepw", "eauth": "file", "force": true});
    let r = post_keys(fleet.port, "application/json", body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let forced = members(&r.body);
    assert_ne!(forced[0].1, *public, "a new key");
    assert_eq!(accepted_der(fleet, id), public_der(&forced[0].1));

    // The system's tar unpacks it where a kickstart script puts it.
    fleet.root.add_minion(id);
    let pki = fleet.root.minion_pki_dir(id);
    let tarfile = fleet.root.path().join(format!("saltkeys-{id}.tar"));
    std::fs::write(&tarfile, &r.body).unwrap();
    let mut untar = Command::new("tar");
    untar.arg("-C").arg(&pki).arg("-xf").arg(&tarfile);
    let out = run_command(untar, TIMEOUT);
    assert!(out.status.success(), "tar -x: {out:?}");
    assert_eq!(
        std::fs::read_to_string(pki.join("minion.pem")).unwrap(),
        forced[1].1
    );

    let mut errors = Vec::new();
    for (what, body) in [
        ("no credentials", format!("mid={id}x")),
        (
            "wrong password",
            format!("mid={id}x&username=alice&password=nope&eauth=file"),
        ),
        (
            "no @wheel",
            format!("mid={id}x&username=bob&password=bobpw&eauth=file"),
        ),
        (
            "no mid",
            "username=alice&password=alicepw&eauth=file".into(),
        ),
    ] {
        let r = post_keys(fleet.port, FORM, body.as_bytes());
        println!("{what}: {}", r.status);
        errors.push((what, r.status));
    }
    assert!(
        !fleet
            .root
            .master_pki_dir()
            .join("minions")
            .join(format!("{id}x"))
            .exists(),
        "a refused request made no key"
    );
    errors
}

const HALITE_ERRORS: [(&str, u16); 4] = [
    ("no credentials", 401),
    ("wrong password", 401),
    ("no @wheel", 401),
    ("no mid", 400),
];

#[test]
fn gen_accept_tarball_through_halite_api_and_halite_master_lets_the_new_minion_in() {
    let mut fleet = Fleet::start(&["m1"], "");
    assert_eq!(kickstart(&fleet, "kick1"), HALITE_ERRORS);
    // A minion started on the unpacked pair is let in (a different key would be refused).
    let _minion = start_halite_minion(&fleet.root, "kick1");
    fleet.wait_for_minions(&["m1", "kick1"]);
}

#[test]
fn gen_accept_tarball_through_halite_api_in_front_of_a_stock_master() {
    let fleet = Fleet::start_mixed(Kind::Stock, Kind::Halite, &["m1"], "", "");
    assert_eq!(kickstart(&fleet, "kick2"), HALITE_ERRORS);
}

#[test]
fn stock_salt_api_gives_the_same_tarball_and_500_for_every_error() {
    let fleet = Fleet::start_kind(Kind::Stock, &["m1"], "", "");
    let errors = kickstart(&fleet, "kick3");
    assert!(
        errors.iter().all(|(_, status)| *status == 500),
        "salt-api 3008.3 answers {errors:?}"
    );
}
