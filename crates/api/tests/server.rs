//! `halite-api` on its own (no master running): HTTPS with `ssl_crt`/`ssl_key`, refusing
//! to start without them, `root_prefix`, `authorized_ips`, 503 while the master is down,
//! and connections that misbehave (slow or huge headers) without stopping the service.

mod common;

use common::*;
use halite_testkit::*;
use openssl::asn1::Asn1Time;
use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::rsa::Rsa;
use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
use openssl::x509::{X509NameBuilder, X509};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

/// A root whose master config has `rest_cherrypy` with `rest` (indented options) and no
/// master running.
fn api_root(rest: &str) -> (TempRoot, u16) {
    let root = TempRoot::new();
    let port = free_ports(1)[0];
    root.write_master_config(&format!(
        "rest_cherrypy:\n  port: {port}\n  host: 127.0.0.1\n{rest}"
    ));
    (root, port)
}

fn self_signed(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let key = PKey::from_rsa(Rsa::generate(2048).unwrap()).unwrap();
    let mut name = X509NameBuilder::new().unwrap();
    name.append_entry_by_text("CN", "localhost").unwrap();
    let name = name.build();
    let mut b = X509::builder().unwrap();
    b.set_version(2).unwrap();
    b.set_subject_name(&name).unwrap();
    b.set_issuer_name(&name).unwrap();
    b.set_pubkey(&key).unwrap();
    b.set_not_before(&Asn1Time::days_from_now(0).unwrap())
        .unwrap();
    b.set_not_after(&Asn1Time::days_from_now(1).unwrap())
        .unwrap();
    b.sign(&key, MessageDigest::sha256()).unwrap();
    let (crt, pem) = (dir.join("api.crt"), dir.join("api.key"));
    std::fs::write(&crt, b.build().to_pem().unwrap()).unwrap();
    std::fs::write(&pem, key.private_key_to_pem_pkcs8().unwrap()).unwrap();
    (crt, pem)
}

/// One HTTP/1.0 request over TLS; the whole response.
fn https_get(port: u16, path: &str) -> String {
    let mut c = SslConnector::builder(SslMethod::tls_client()).unwrap();
    c.set_verify(SslVerifyMode::NONE);
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut tls = c.build().connect("localhost", tcp).unwrap();
    tls.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .unwrap();
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn https_serves_with_the_configured_certificate_and_refuses_to_start_without_one() {
    let (root, port) = api_root("");
    // No ssl_crt/ssl_key and no disable_ssl: salt-api refuses, and so does halite-api.
    let out = run(
        halite_bin("halite-api"),
        [
            std::ffi::OsStr::new("-c"),
            root.master_config_dir().as_os_str(),
        ],
        TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(78));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("ssl_crt and ssl_key are required"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let (crt, key) = self_signed(root.path());
    root.write_master_config(&format!(
        "rest_cherrypy:\n  port: {port}\n  host: 127.0.0.1\n  ssl_crt: {}\n  ssl_key: {}\n",
        crt.display(),
        key.display()
    ));
    let _api = start_api(&root, Kind::Halite);
    wait_for_port(port, TIMEOUT);
    let resp = https_get(port, "/");
    assert!(
        resp.starts_with("HTTP/1.0 200") || resp.starts_with("HTTP/1.1 200"),
        "{resp}"
    );
    assert!(resp.contains(r#"{"return": "Welcome""#), "{resp}");
    // Plain HTTP on the TLS port gets nothing useful, and the server goes on.
    let mut plain = TcpStream::connect(("127.0.0.1", port)).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let _ = plain.write_all(b"GET / HTTP/1.0\r\n\r\n");
    let mut buf = Vec::new();
    let _ = plain.read_to_end(&mut buf);
    assert!(!String::from_utf8_lossy(&buf).contains("Welcome"));
    assert!(https_get(port, "/").contains("Welcome"));
}

#[test]
fn without_a_master_logins_are_503_and_misbehaving_clients_do_not_stop_the_service() {
    let (root, port) =
        api_root("  disable_ssl: true\n  root_prefix: /api\n  authorized_ips: [127.0.0.1]\n");
    let _api = start_api(&root, Kind::Halite);
    wait_for_port(port, TIMEOUT);
    let http = Http::new(port);
    assert_eq!(http.get("/api", &[]).status, 200);
    assert_eq!(http.get("/api/", &[]).status, 200);
    assert_eq!(http.get("/", &[]).status, 404, "outside root_prefix");
    assert_eq!(http.get("/apix", &[]).status, 404);
    let r = http.post_json(
        "/api/login",
        &serde_json::json!({"username": "a", "password": "b", "eauth": "file"}),
        &[],
    );
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("Salt Master is not available."));

    // Connections that never finish their header, one with a 10 MB header, and one with
    // an endless body: the API keeps answering others meanwhile.
    let mut slow: Vec<TcpStream> = (0..50)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let _ = s.write_all(b"GET /api HTTP/1.1\r\nHost: x\r\nX-Slow: ");
            s
        })
        .collect();
    let mut huge = TcpStream::connect(("127.0.0.1", port)).unwrap();
    huge.set_write_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    huge.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let _ = huge.write_all(b"GET /api HTTP/1.1\r\nHost: x\r\nX-Big: ");
    let chunk = vec![b'a'; 1024 * 1024];
    for _ in 0..10 {
        if huge.write_all(&chunk).is_err() {
            break;
        }
    }
    let mut answer = Vec::new();
    let _ = huge.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "a 10 MB header: {answer}"
    );
    for _ in 0..5 {
        assert_eq!(http.get("/api", &[]).status, 200);
    }
    for s in &mut slow {
        let _ = s.write_all(b"x");
    }
    assert_eq!(http.get("/api", &[]).status, 200);
}

#[test]
fn authorized_ips_refuses_other_addresses() {
    let (root, port) = api_root("  disable_ssl: true\n  authorized_ips: [192.0.2.1]\n");
    let _api = start_api(&root, Kind::Halite);
    wait_for_port(port, TIMEOUT);
    let r = Http::new(port).get("/", &[]);
    assert_eq!(r.status, 403);
    assert!(r.body.contains("Bad IP"), "{}", r.body);
}

#[test]
fn the_app_and_static_files_are_served_and_sessions_can_be_turned_off() {
    let (root, port) = api_root("");
    let app = root.path().join("index.html");
    std::fs::write(&app, "<html>the app</html>").unwrap();
    let assets = root.path().join("assets");
    std::fs::create_dir_all(assets.join("js")).unwrap();
    std::fs::write(assets.join("js").join("app.js"), "let x = 1;").unwrap();
    std::fs::write(root.path().join("secret"), "s3cret").unwrap();
    root.write_master_config(&format!(
        "rest_cherrypy:\n  port: {port}\n  host: 127.0.0.1\n  disable_ssl: true\n  \
         app: {}\n  static: {}\n  enable_sessions: false\n  stats_disable_auth: true\n",
        app.display(),
        assets.display()
    ));
    let _api = start_api(&root, Kind::Halite);
    wait_for_port(port, TIMEOUT);
    let http = Http::new(port);
    let r = http.get("/app", &[]);
    assert_eq!((r.status, r.body.as_str()), (200, "<html>the app</html>"));
    assert_eq!(http.get("/app/any/route", &[]).body, "<html>the app</html>");
    let r = http.get("/static/js/app.js", &[]);
    assert_eq!((r.status, r.body.as_str()), (200, "let x = 1;"));
    assert_eq!(
        r.header("Content-Type"),
        Some("text/javascript;charset=utf-8")
    );
    for escape in [
        "/static/../secret",
        "/static/%2e%2e/secret",
        "/static/js/../../secret",
        "/static/js",
    ] {
        let r = http.get(escape, &[]);
        assert_eq!(r.status, 404, "{escape}: {}", r.body);
        assert!(!r.body.contains("s3cret"));
    }
    // A browser navigating anywhere gets the app; API clients get the API.
    let browser = [("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")];
    assert_eq!(http.get("/minions", &browser).body, "<html>the app</html>");
    assert!(http.get("/", &[("Accept", "*/*")]).body.contains("Welcome"));
    assert!(http.get("/", &[]).body.contains("Welcome"));
    // enable_sessions: false removes the session URLs; stats_disable_auth opens /stats.
    for path in ["/login", "/minions", "/jobs"] {
        assert_eq!(http.get(path, &[]).status, 404, "{path}");
    }
    assert_eq!(
        http.post("/logout", "application/json", b"", &[]).status,
        404
    );
    assert_eq!(http.get("/stats", &[]).status, 200);
}
