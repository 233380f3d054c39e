//! `halite-api` in front of a Halite master with two Halite minions, on loopback: the
//! salt-api session a client goes through (login, the clients, jobs, logout), salt-api's
//! status codes for what goes wrong, the webhook, sessions that survive an API restart.
//! The `/events` stream has its own file (`events.rs`).

mod common;

use common::*;
use serde_json::{json, Value as Json};
use std::time::Duration;

const M1: &str = "m1";
const M2: &str = "m2";

fn auth(token: &str) -> [(&'static str, &str); 1] {
    [("X-Auth-Token", token)]
}

#[test]
fn login_runs_local_runner_and_jobs_then_logout_revokes_the_session() {
    let fleet = Fleet::start(&[M1, M2], "");
    let http = &fleet.http;

    // Login: the token is the session, in the body, the header and the cookie.
    let r = http.post_json(
        "/login",
        &json!({"username": "alice", "password": "alicepw", "eauth": "file"}),
        &[],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let ret = &r.json()["return"][0];
    let token = ret["token"].as_str().unwrap().to_owned();
    assert_eq!(r.header("X-Auth-Token"), Some(token.as_str()));
    let cookie = r.header("Set-Cookie").unwrap();
    assert!(
        cookie.starts_with(&format!("session_id={token};")),
        "{cookie}"
    );
    assert_eq!(ret["user"], "alice");
    assert_eq!(ret["eauth"], "file");
    assert!(ret["expire"].as_f64().unwrap() > ret["start"].as_f64().unwrap());
    assert_eq!(
        ret["perms"],
        json!(["@jobs", "@runner", "@wheel", "grains.*", "sys.*", "test.*"])
    );
    // A form login works too (salt-api-cli sends one).
    let r = http.post(
        "/login",
        "application/x-www-form-urlencoded",
        b"username=alice&password=alicepw&eauth=file",
        &[],
    );
    assert_eq!(r.status, 200, "{}", r.body);

    // local: every minion's return; full_return adds the metadata.
    let r = http.post_json(
        "/",
        &json!([{"client": "local", "tgt": "*", "fun": "test.ping"}]),
        &auth(&token),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json(), json!({"return": [{M1: true, M2: true}]}));
    assert_eq!(r.header("Cache-Control"), Some("private"));
    let r = http.post_json(
        "/",
        &json!([{"client": "local", "tgt": M1, "fun": "test.echo", "arg": "hi", "full_return": true}]),
        &auth(&token),
    );
    let full = &r.json()["return"][0][M1];
    assert_eq!(full["ret"], "hi", "{}", r.body);
    assert_eq!(full["retcode"], 0);
    assert!(
        full["jid"].as_str().is_some_and(|j| j.len() == 20),
        "{full}"
    );
    // The cookie alone is a session too (SaltGUI's EventSource relies on it).
    let r = http.post_json(
        "/",
        &json!([{"client": "local", "tgt": M2, "fun": "test.arg", "arg": ["a"], "kwarg": {"k": 1}}]),
        &[("Cookie", &format!("session_id={token}"))],
    );
    let ret = &r.json()["return"][0][M2];
    assert_eq!(ret["args"], json!(["a"]), "{}", r.body);
    assert_eq!(ret["kwargs"]["k"], 1, "{}", r.body);
    // Two chunks, two elements.
    let r = http.post_json(
        "/",
        &json!([{"client": "local", "tgt": M1, "fun": "test.ping"},
                {"client": "local", "tgt": "nomatch*", "fun": "test.ping"}]),
        &auth(&token),
    );
    assert_eq!(r.json(), json!({"return": [{M1: true}, {}]}));

    // local_async, then the job through /jobs/<jid>.
    let r = http.post_json(
        "/",
        &json!([{"client": "local_async", "tgt": "*", "fun": "test.ping"}]),
        &auth(&token),
    );
    let job = r.json()["return"][0].clone();
    let jid = job["jid"].as_str().unwrap().to_owned();
    let mut minions: Vec<String> = serde_json::from_value(job["minions"].clone()).unwrap();
    minions.sort();
    assert_eq!(minions, [M1, M2]);
    let mut last = Json::Null;
    let returned = halite_testkit::wait_until(Duration::from_secs(60), || {
        last = http.get(&format!("/jobs/{jid}"), &auth(&token)).json();
        last["return"] == json!([{M1: true, M2: true}])
    });
    assert!(returned, "{last}");
    assert_eq!(last["info"][0]["jid"], jid.as_str());
    assert_eq!(last["info"][0]["Function"], "test.ping");
    let r = http.get("/jobs", &auth(&token));
    assert_eq!(
        r.json()["return"][0][&jid]["Function"],
        "test.ping",
        "{}",
        r.body
    );

    // runner and runner_async.
    let r = http.post_json(
        "/",
        &json!([{"client": "runner", "fun": "manage.up"}]),
        &auth(&token),
    );
    assert_eq!(r.json(), json!({"return": [[M1, M2]]}), "{}", r.body);
    let r = http.post_json(
        "/",
        &json!([{"client": "runner", "fun": "test.arg", "arg": ["x", "a=1"], "kwarg": {"b": 2}, "c": 3, "full_return": true}]),
        &auth(&token),
    );
    let ev = &r.json()["return"][0];
    assert!(ev["tag"].as_str().unwrap().ends_with("/ret"), "{ev}");
    assert_eq!(
        ev["data"]["return"],
        json!({"args": ["x"], "kwargs": {"a": 1, "b": 2, "c": 3}}),
        "{ev}"
    );
    let r = http.post_json(
        "/",
        &json!([{"client": "runner_async", "fun": "manage.up"}]),
        &auth(&token),
    );
    let ret = &r.json()["return"][0];
    assert_eq!(
        ret["tag"].as_str().unwrap(),
        format!("salt/run/{}", ret["jid"].as_str().unwrap())
    );

    // local_subset and local_batch.
    let r = http.post_json(
        "/",
        &json!([{"client": "local_subset", "tgt": "*", "fun": "test.ping", "subset": 1}]),
        &auth(&token),
    );
    let subset = r.json()["return"][0].as_object().unwrap().clone();
    assert_eq!(subset.len(), 1, "{}", r.body);
    assert_eq!(subset.values().next(), Some(&Json::Bool(true)));
    let r = http.post_json(
        "/",
        &json!([{"client": "local_batch", "tgt": "*", "fun": "test.ping", "batch": "1"}]),
        &auth(&token),
    );
    let mut batch: Vec<Json> = r.json()["return"].as_array().unwrap().clone();
    batch.sort_by_key(|v| v.to_string());
    assert_eq!(batch, [json!({M1: true}), json!({M2: true})], "{}", r.body);

    // /minions.
    let r = http.get(&format!("/minions/{M1}"), &auth(&token));
    assert_eq!(r.json()["return"][0][M1]["id"], M1, "{}", r.body);
    let r = http.post_json(
        "/minions",
        &json!({"tgt": M2, "fun": "test.ping"}),
        &auth(&token),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    let jid = r.json()["return"][0]["jid"].as_str().unwrap().to_owned();
    assert_eq!(
        r.json()["_links"],
        json!({"jobs": [{"href": format!("/jobs/{jid}")}]})
    );

    // /stats answers a live session.
    let r = http.get("/stats", &auth(&token));
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.json()["Halite API"]["Total Requests"].as_u64().unwrap() > 10,
        "{}",
        r.body
    );

    // /run takes credentials in the chunk: a login, or the session token itself.
    let r = http.post_json(
        "/run",
        &json!([{"client": "local", "tgt": M1, "fun": "test.ping",
                 "username": "alice", "password": "alicepw", "eauth": "file"}]),
        &[],
    );
    assert_eq!(r.json(), json!({"return": [{M1: true}]}), "{}", r.body);
    let r = http.post_json(
        "/run",
        &json!([{"client": "local", "tgt": M1, "fun": "test.ping", "token": token}]),
        &[],
    );
    assert_eq!(r.json(), json!({"return": [{M1: true}]}), "{}", r.body);

    // /token: a bare list of token data; that token is a session too.
    let r = http.post_json(
        "/token",
        &json!({"username": "alice", "password": "alicepw", "eauth": "file"}),
        &[],
    );
    let other = r.json()[0]["token"].as_str().unwrap().to_owned();
    assert_eq!(r.json()[0]["name"], "alice", "{}", r.body);
    let r = http.post_json(
        "/",
        &json!([{"client": "local", "tgt": M1, "fun": "test.ping"}]),
        &auth(&other),
    );
    assert_eq!(r.status, 200, "{}", r.body);

    // Logout: 200, the cookie expires, and the token is refused from then on.
    let r = http.post("/logout", "application/json", b"", &auth(&token));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json(), json!({"return": "Your token has been cleared"}));
    assert!(r.header("Set-Cookie").unwrap().contains("Max-Age=0"));
    for (path, body) in [
        (
            "/",
            json!([{"client": "local", "tgt": M1, "fun": "test.ping"}]),
        ),
        (
            "/run",
            json!([{"client": "local", "tgt": M1, "fun": "test.ping", "token": token}]),
        ),
    ] {
        let r = http.post_json(path, &body, &auth(&token));
        assert_eq!(r.status, 401, "{path} after logout: {}", r.body);
    }
    assert_eq!(
        http.post("/logout", "application/json", b"", &auth(&token))
            .status,
        401
    );
}

#[test]
fn salt_apis_status_codes_for_what_goes_wrong() {
    let mut fleet = Fleet::start(
        &[M1],
        "  max_request_body_size: 2048\n  api_acl:\n    users:\n      alice: ['*']\n      \
         bob: [192.0.2.1]\n",
    );
    let http = &fleet.http;
    let alice = fleet.login("alice", "alicepw");
    // api_acl keeps bob from logging in from here; /token is not subject to it.
    let r = http.post_json(
        "/token",
        &json!({"username": "bob", "password": "bobpw", "eauth": "file"}),
        &[],
    );
    let bob = r.json()[0]["token"].as_str().unwrap().to_owned();
    let chunk = |extra: Json| {
        let mut c = json!({"client": "local", "tgt": M1, "fun": "test.ping"});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        json!([c])
    };
    let page_message = |body: &str| {
        body.split("<p>")
            .nth(1)
            .and_then(|b| b.split("</p>").next())
            .unwrap_or("")
            .replace("&quot;", "\"")
            .replace("&#x27;", "'")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&")
    };

    // (what, request, status, the error page's message)
    let cases: Vec<(&str, Reply, u16, &str)> = vec![
        ("no session", http.post_json("/", &chunk(json!({})), &[]), 401,
         "No permission -- see authorization schemes"),
        ("unknown session", http.post_json("/", &chunk(json!({})), &auth("abcdef")), 401,
         "No permission -- see authorization schemes"),
        ("non-hex session", http.post_json("/", &chunk(json!({})), &auth("../../etc")), 401,
         "No permission -- see authorization schemes"),
        ("non-hex chunk token", http.post_json("/run", &chunk(json!({"token": "xyz"})), &[]), 401,
         "Invalid token"),
        ("no credentials", http.post_json("/run", &chunk(json!({})), &[]), 401,
         "No authentication credentials given"),
        ("bad password", http.post_json("/login", &json!({"username": "alice", "password": "no", "eauth": "file"}), &[]), 401,
         "Could not authenticate using provided credentials"),
        ("api_acl", http.post_json("/login", &json!({"username": "bob", "password": "bobpw", "eauth": "file"}), &[]), 401,
         "You are not authorized to access that resource"),
        ("no session on /stats", http.get("/stats", &[]), 401,
         "No permission -- see authorization schemes"),
        ("denied function", http.post_json("/", &chunk(json!({"fun": "test.echo", "arg": ["x"]})), &auth(&bob)), 401,
         "Authorization error occurred."),
        ("denied runner", http.post_json("/", &json!([{"client": "runner", "fun": "manage.up"}]), &auth(&bob)), 401,
         "Authentication failure of type \"token\" occurred for user bob."),
        ("raw_shell", http.post_json("/", &chunk(json!({"raw_shell": true})), &auth(&alice)), 401,
         "Raw shell option not allowed."),
        ("invalid client", http.post_json("/", &chunk(json!({"client": "foo"})), &auth(&alice)), 400,
         "Invalid client specified: 'foo'"),
        ("disabled client", http.post_json("/", &chunk(json!({"client": "wheel_async"})), &auth(&alice)), 400,
         "Client disabled: 'wheel_async'. Add to 'netapi_enable_clients' master config option to enable."),
        ("not a list", http.post("/", "application/json", b"\"x\"", &auth(&alice)), 400,
         "Lowstates must be a list"),
        ("empty body", http.post("/", "application/json", b"", &auth(&alice)), 400,
         "Lowstates must be a list"),
        ("bad JSON", http.post("/", "application/json", b"[{", &auth(&alice)), 400,
         "Invalid JSON document"),
        ("bad YAML", http.post("/", "application/x-yaml", b"- a: [1\n  b", &auth(&alice)), 400,
         "Invalid YAML document"),
        ("unknown content type", http.post("/", "text/csv", b"a,b", &auth(&alice)), 406,
         "Content type not supported"),
        ("unacceptable Accept", http.get("/", &[("Accept", "text/csv")]), 406,
         "Your client sent this Accept header: text/csv. But this resource only emits these media types: application/json, application/x-yaml."),
        ("body too large", http.post("/", "application/json", &vec![b' '; 4096], &auth(&alice)), 413,
         "The entity sent with the request exceeds the maximum allowed bytes."),
        ("runner timeout", http.post_json("/", &json!([{"client": "runner", "fun": "test.sleep", "s_time": 5, "timeout": 0.5}]), &auth(&alice)), 504,
         ""),
        ("unknown path", http.get("/nope", &[]), 404, "The path '/nope' was not found."),
        ("wrong verb", http.request("DELETE", "/", &[], None), 405,
         "Specified method is invalid for this resource"),
        ("query on /events", http.get("/events?token=abc", &auth(&alice)), 400, ""),
        ("no session on /events", http.get("/events", &[]), 401,
         "No permission -- see authorization schemes"),
    ];
    for (what, r, status, message) in cases {
        assert_eq!(r.status, status, "{what}: {}", r.body);
        if !message.is_empty() {
            assert_eq!(page_message(&r.body), message, "{what}: {}", r.body);
            assert_eq!(
                r.header("Content-Type"),
                Some("text/html;charset=utf-8"),
                "{what}"
            );
        }
    }
    let r = http.request("DELETE", "/", &[], None);
    assert_eq!(r.header("Allow"), Some("GET,HEAD,POST"));

    // YAML out when asked for; the same data.
    let r = http.get("/", &[("Accept", "application/x-yaml")]);
    assert_eq!(r.header("Content-Type"), Some("application/x-yaml"));
    assert!(
        r.body.starts_with("clients:\n- destroy\n- local\n"),
        "{}",
        r.body
    );
    assert!(r.body.ends_with("return: Welcome\n"), "{}", r.body);
    // A YAML lowstate, and SaltGUI's JSON sent as text/plain.
    let r = http.post(
        "/",
        "application/x-yaml",
        b"- client: local\n  tgt: m1\n  fun: test.ping\n",
        &auth(&alice),
    );
    assert_eq!(r.json(), json!({"return": [{M1: true}]}), "{}", r.body);
    let r = http.post(
        "/",
        "text/plain;charset=UTF-8",
        chunk(json!({})).to_string().as_bytes(),
        &auth(&alice),
    );
    assert_eq!(r.json(), json!({"return": [{M1: true}]}), "{}", r.body);

    // GET /login and the welcome page.
    let r = http.get("/login", &[]);
    assert_eq!(r.json(), json!({"status": null, "return": "Please log in"}));
    assert_eq!(r.header("WWW-Authenticate"), Some("Session"));
    let r = http.get("/", &[]);
    assert_eq!(
        r.json(),
        json!({"return": "Welcome", "clients": ["destroy", "local", "local_async", "local_batch",
               "local_subset", "runner", "runner_async", "ssh", "wheel", "wheel_async"]})
    );

    // CORS: the origin is echoed and X-Auth-Token exposed; a preflight is a 200.
    let r = http.get("/", &[("Origin", "http://gui.example")]);
    assert_eq!(
        r.header("Access-Control-Allow-Origin"),
        Some("http://gui.example")
    );
    assert_eq!(r.header("Access-Control-Allow-Credentials"), Some("true"));
    assert_eq!(
        r.header("Access-Control-Expose-Headers"),
        Some("X-Auth-Token")
    );
    for path in ["/", "/login", "/events", "/hook/x", "/run"] {
        let r = http.request(
            "OPTIONS",
            path,
            &[
                ("Origin", "http://gui.example"),
                ("Access-Control-Request-Method", "POST"),
                (
                    "Access-Control-Request-Headers",
                    "X-Auth-Token, Content-Type",
                ),
            ],
            None,
        );
        assert_eq!(r.status, 200, "preflight {path}: {}", r.body);
        assert_eq!(r.header("Access-Control-Allow-Methods"), Some("GET, POST"));
        assert!(r
            .header("Access-Control-Allow-Headers")
            .is_some_and(|h| h.contains("X-Auth-Token") && h.contains("Content-Type")));
    }

    // The API and the master keep serving after all that.
    let r = http.post_json("/", &chunk(json!({})), &auth(&alice));
    assert_eq!(r.json(), json!({"return": [{M1: true}]}), "{}", r.body);

    // Master down: 503.
    fleet.stop_master();
    let r = fleet.http.post_json(
        "/login",
        &json!({"username": "alice", "password": "alicepw", "eauth": "file"}),
        &[],
    );
    assert_eq!(r.status, 503, "{}", r.body);
    let r = fleet
        .http
        .post_json("/run", &chunk(json!({"token": alice})), &[]);
    assert_eq!(r.status, 503, "{}", r.body);
}

#[test]
fn the_webhook_fires_its_event_without_the_callers_token_or_cookies() {
    let fleet = Fleet::start(&[M1], "");
    let token = fleet.login("alice", "alicepw");
    let mut sse = Sse::open(
        fleet.port,
        "/events?tag=salt/netapi/hook/*",
        &[("X-Auth-Token", &token)],
    );
    assert_eq!(sse.status, 200, "{}", sse.head);
    let r = fleet.http.post(
        "/hook/deploy/web%201",
        "application/json",
        br#"{"ref": "main"}"#,
        &[
            ("X-Auth-Token", &token),
            ("Cookie", &format!("session_id={token}; theme=dark")),
            ("X-Hub-Signature", "sha1=abc"),
        ],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json(), json!({"success": true}));
    let (_, tag, data) = sse
        .next_event(Duration::from_secs(60))
        .expect("the hook event");
    assert_eq!(tag, "salt/netapi/hook/deploy/web 1");
    let ev = &data["data"];
    assert_eq!(ev["body"], r#"{"ref": "main"}"#);
    assert_eq!(ev["post"], json!({"ref": "main"}));
    let headers = ev["headers"].as_object().unwrap();
    assert_eq!(headers["X-Hub-Signature"], "sha1=abc");
    assert_eq!(headers["Content-Type"], "application/json");
    assert_eq!(headers["Remote-Addr"], "127.0.0.1");
    for leaked in ["X-Auth-Token", "Cookie"] {
        assert!(!headers.contains_key(leaked), "{leaked} in {headers:?}");
    }
    assert!(
        !data.to_string().contains(&token),
        "the token leaked: {data}"
    );
    // Without a session the hook is refused (webhook_disable_auth is off).
    let r = fleet.http.post("/hook/x", "application/json", b"{}", &[]);
    assert_eq!(r.status, 401);
}

#[test]
fn sessions_survive_a_restart_of_the_api() {
    let mut fleet = Fleet::start(&[M1], "");
    let token = fleet.login("alice", "alicepw");
    fleet.restart_api();
    let r = fleet.http.post_json(
        "/",
        &json!([{"client": "local", "tgt": M1, "fun": "test.ping"}]),
        &auth(&token),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json(), json!({"return": [{M1: true}]}));
}

#[test]
fn logout_revokes_the_token_on_the_master_so_a_restarted_api_refuses_it_too() {
    let mut fleet = Fleet::start(&[M1], "");
    let token = fleet.login("alice", "alicepw");
    let kept = fleet.login("alice", "alicepw");
    let r = fleet
        .http
        .post("/logout", "application/json", b"", &auth(&token));
    assert_eq!(r.status, 200, "{}", r.body);
    // A new API process knows nothing of this one's logouts: only the master can refuse.
    fleet.restart_api();
    let ping = json!([{"client": "local", "tgt": M1, "fun": "test.ping"}]);
    let r = fleet.http.post_json("/", &ping, &auth(&token));
    assert_eq!(r.status, 401, "a logged-out token still works: {}", r.body);
    let r = fleet.http.post_json("/", &ping, &auth(&kept));
    assert_eq!(r.status, 200, "another session was revoked too: {}", r.body);
}

#[test]
fn nothing_runs_until_the_admin_enables_clients() {
    let fleet = Fleet::start(&[M1], "");
    // A second API on the same master, configured without `netapi_enable_clients`.
    let other = halite_testkit::TempRoot::new();
    let port = halite_testkit::free_ports(1)[0];
    let master = std::fs::read_to_string(fleet.root.master_config_file()).unwrap();
    let mut cfg: serde_json::Map<String, Json> = serde_norway_from(&master);
    cfg.remove("netapi_enable_clients");
    cfg["rest_cherrypy"]["port"] = json!(port);
    let own = |name: &str| json!(other.path().join(name).display().to_string());
    cfg.insert("api_pidfile".into(), own("salt-api.pid"));
    cfg.insert("api_logfile".into(), own("api.log"));
    std::fs::write(
        other.master_config_file(),
        serde_json::to_string(&cfg).unwrap(),
    )
    .unwrap();
    let mut cmd = std::process::Command::new(halite_testkit::halite_bin("halite-api"));
    cmd.arg("-c").arg(other.master_config_dir());
    let _api = halite_testkit::Proc::spawn(cmd, &other.procs_dir(), "halite-api-default");
    halite_testkit::wait_for_port(port, halite_testkit::TIMEOUT);
    let http = Http::new(port);
    let token = fleet.login("alice", "alicepw");
    for client in [
        "local",
        "local_async",
        "runner",
        "runner_async",
        "wheel",
        "local_batch",
    ] {
        let r = http.post_json(
            "/",
            &json!([{"client": client, "tgt": M1, "fun": "test.ping"}]),
            &auth(&token),
        );
        assert_eq!(r.status, 400, "{client}: {}", r.body);
        assert!(r.body.contains("Client disabled"), "{client}: {}", r.body);
    }
}

/// A YAML mapping (the test root's master config) as JSON.
fn serde_norway_from(yaml: &str) -> serde_json::Map<String, Json> {
    let v: Json = serde_norway::from_str(yaml).expect("the master config");
    v.as_object().cloned().expect("a mapping")
}
