//! `GET /ws` on `halite-api` in front of a Halite master: salt-api's handshake (400 before
//! 401 before 101, "websocket client ready", "server received message"), its framing
//! (`data: <json>\n\n` text messages), the session in the path, the header or the cookie,
//! the `?tag=`/`?ids`/`last_event_id` extensions, the end of the stream at logout, the
//! `format_events` view; and events filtered by the caller's ACL (`events_acl`) on `/ws`
//! and `/events`, with two users of different rights listening at once.

mod common;

use common::*;
use halite_testkit::{halite_bin, wait_for_port, Proc, TIMEOUT};
use serde_json::{json, Value as Json};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use tungstenite::client::IntoClientRequest;
use tungstenite::handshake::HandshakeError;
use tungstenite::http::{HeaderName, HeaderValue};
use tungstenite::{Message, WebSocket};

const WAIT: Duration = Duration::from_secs(60);
const READY: &str = "websocket client ready";
const RECEIVED: &str = "server received message";

/// What a WebSocket gave.
#[derive(Debug, Clone, PartialEq)]
enum Got {
    Text(String),
    Closed(Option<u16>),
}

/// A blocking WebSocket client.
struct Ws {
    sock: WebSocket<TcpStream>,
}

impl Ws {
    /// Opens `ws://127.0.0.1:<port><path>` with `headers`; the HTTP status when the server
    /// refuses the upgrade.
    fn connect(port: u16, path: &str, headers: &[(&str, &str)]) -> Result<Ws, u16> {
        let tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        tcp.set_read_timeout(Some(TIMEOUT)).unwrap();
        let mut req = format!("ws://127.0.0.1:{port}{path}")
            .into_client_request()
            .expect("a request");
        for (k, v) in headers {
            req.headers_mut().insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        match tungstenite::client(req, tcp) {
            Ok((sock, resp)) => {
                assert_eq!(resp.status(), 101);
                sock.get_ref()
                    .set_read_timeout(Some(Duration::from_millis(200)))
                    .unwrap();
                Ok(Ws { sock })
            }
            Err(HandshakeError::Failure(tungstenite::Error::Http(resp))) => {
                Err(resp.status().as_u16())
            }
            Err(e) => panic!("handshake: {e}"),
        }
    }

    /// Opens and sends "websocket client ready", checking the answer.
    fn ready(port: u16, path: &str, headers: &[(&str, &str)]) -> Ws {
        let mut ws = Ws::connect(port, path, headers)
            .unwrap_or_else(|status| panic!("{path}: status {status}"));
        ws.send(READY);
        assert_eq!(ws.next(WAIT), Some(Got::Text(RECEIVED.into())));
        ws
    }

    fn send(&mut self, text: &str) {
        self.sock.send(Message::text(text)).expect("send");
    }

    /// The next text message or the close, within `timeout`.
    fn next(&mut self, timeout: Duration) -> Option<Got> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.sock.read() {
                Ok(Message::Text(t)) => return Some(Got::Text(t.to_string())),
                Ok(Message::Close(f)) => return Some(Got::Closed(f.map(|f| u16::from(f.code)))),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if Instant::now() >= deadline {
                        return None;
                    }
                }
                Err(
                    tungstenite::Error::ConnectionClosed
                    | tungstenite::Error::AlreadyClosed
                    | tungstenite::Error::Io(_),
                ) => return Some(Got::Closed(None)),
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    /// The next event message (acknowledgements skipped): its `id:` line, tag, data and
    /// raw text.
    fn next_event(&mut self, timeout: Duration) -> Option<(Option<u64>, String, Json, String)> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left)? {
                Got::Text(t) if t == RECEIVED => continue,
                Got::Text(t) => {
                    let (id, rest) = match t.strip_prefix("id: ") {
                        Some(r) => {
                            let (id, rest) = r.split_once('\n').expect("an id line");
                            (Some(id.parse().expect("a numeric id")), rest)
                        }
                        None => (None, t.as_str()),
                    };
                    let json_text = rest
                        .strip_prefix("data: ")
                        .and_then(|r| r.strip_suffix("\n\n"))
                        .unwrap_or_else(|| panic!("not salt-api's framing: {t:?}"));
                    let doc: Json = serde_json::from_str(json_text).expect("JSON");
                    let tag = doc["tag"].as_str().unwrap_or_default().to_owned();
                    return Some((id, tag, doc, t));
                }
                Got::Closed(_) => return None,
            }
        }
    }

    /// The events with tags under `prefix` until the one tagged `end` (excluded).
    fn until(&mut self, prefix: &str, end: &str) -> Vec<(Option<u64>, String, String)> {
        let mut got = Vec::new();
        loop {
            let (id, tag, _, raw) = self
                .next_event(WAIT)
                .unwrap_or_else(|| panic!("no {end} after {got:?}"));
            if tag == end {
                return got;
            }
            if tag.starts_with(prefix) {
                got.push((id, tag, raw));
            }
        }
    }

    /// Whether the server closes within `timeout` with `code` (events meanwhile skipped).
    fn closes_with(&mut self, code: u16, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            match self.next(deadline.saturating_duration_since(Instant::now())) {
                Some(Got::Closed(c)) => return c == Some(code),
                Some(Got::Text(_)) => {}
                None => return false,
            }
        }
        false
    }
}

fn events(tags: &[&str]) -> Vec<(String, Json)> {
    tags.iter().map(|t| ((*t).to_owned(), json!({}))).collect()
}

fn tags(got: &[(Option<u64>, String, String)]) -> Vec<&str> {
    got.iter().map(|(_, t, _)| t.as_str()).collect()
}

#[test]
fn the_websocket_follows_salt_apis_handshake_framing_and_sessions() {
    let fleet = Fleet::start(&["m1"], "");
    let port = fleet.port;
    let token = fleet.login("alice", "alicepw");
    let auth = [("X-Auth-Token", token.as_str())];
    let sock = fleet.sock_dir();

    // Not a WebSocket handshake: 400, before the session is looked at.
    assert_eq!(fleet.http.get("/ws", &auth).status, 400);
    assert_eq!(fleet.http.get("/ws", &[]).status, 400);
    // A handshake without a valid session: 401. A token in the query is not taken.
    assert_eq!(Ws::connect(port, "/ws", &[]).err(), Some(401));
    assert_eq!(Ws::connect(port, "/ws/nothex", &[]).err(), Some(401));
    let unknown = format!("/ws/{}", "ab".repeat(20));
    assert_eq!(Ws::connect(port, &unknown, &[]).err(), Some(401));
    let in_query = format!("/ws?token={token}");
    assert_eq!(Ws::connect(port, &in_query, &[]).err(), Some(401));

    // Nothing before "ready": `early` went through the hub (a reader saw it) before the
    // client said it was ready.
    let mut ws = Ws::connect(port, "/ws", &auth).expect("101");
    let mut watcher = Sse::open(port, "/events?tag=test/ws/early", &auth);
    fire(&sock, events(&["test/ws/early"]));
    assert_eq!(
        watcher.next_event(WAIT).map(|e| e.1).as_deref(),
        Some("test/ws/early")
    );
    ws.send(READY);
    assert_eq!(ws.next(WAIT), Some(Got::Text(RECEIVED.into())));
    fire(
        &sock,
        events(&["test/ws/a/0", "test/ws/a/1", "test/ws/end"]),
    );
    let got = ws.until("test/ws/", "test/ws/end");
    assert_eq!(tags(&got), ["test/ws/a/0", "test/ws/a/1"], "and not early");
    for (id, tag, raw) in &got {
        assert_eq!(*id, None, "no id lines unless asked");
        assert!(
            raw.starts_with("data: {\"data\": {\"_stamp\": ")
                && raw.ends_with(&format!(", \"tag\": \"{tag}\"}}\n\n")),
            "salt-api's message: {raw:?}"
        );
    }
    // Every message is answered.
    ws.send("hello");
    let mut answered = false;
    while let Some(Got::Text(t)) = ws.next(WAIT) {
        if t == RECEIVED {
            answered = true;
            break;
        }
    }
    assert!(answered);

    // The token in the path, with Halite's tag filter and ids; the session cookie.
    let by_path = format!("/ws/{token}?tag=test/ws/b/*&ids");
    let mut with_ids = Ws::ready(port, &by_path, &[]);
    let cookie = format!("session_id={token}");
    let mut by_cookie = Ws::ready(port, "/ws?tag=test/ws/b/*", &[("Cookie", cookie.as_str())]);
    fire(
        &sock,
        events(&[
            "test/ws/other",
            "test/ws/b/0",
            "test/ws/b/1",
            "test/ws/b/2",
            "test/ws/b/end",
        ]),
    );
    let got = with_ids.until("test/ws/", "test/ws/b/end");
    assert_eq!(tags(&got), ["test/ws/b/0", "test/ws/b/1", "test/ws/b/2"]);
    let ids: Vec<u64> = got
        .iter()
        .map(|(id, _, _)| id.expect("an id line"))
        .collect();
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{ids:?}");
    let got = by_cookie.until("test/ws/", "test/ws/b/end");
    assert_eq!(tags(&got), ["test/ws/b/0", "test/ws/b/1", "test/ws/b/2"]);
    assert!(got.iter().all(|(id, _, _)| id.is_none()));

    // Resume after b/0, with Halite's last_event_id.
    let resume = format!("/ws?tag=test/ws/b/*&ids&last_event_id={}", ids[0]);
    let mut resumed = Ws::ready(port, &resume, &auth);
    let got = resumed.until("test/ws/", "test/ws/b/end");
    assert_eq!(
        tags(&got),
        ["test/ws/b/1", "test/ws/b/2"],
        "exactly what came after"
    );

    // Logout ends every stream of the token with a Close.
    let r = fleet.http.post("/logout", "application/json", b"", &auth);
    assert_eq!(r.status, 200);
    fire(&sock, events(&["test/ws/b/wake"]));
    assert!(
        ws.closes_with(1000, WAIT),
        "the /ws stream of a logged-out token goes on"
    );
    assert!(with_ids.closes_with(1000, WAIT));
    assert!(by_cookie.closes_with(1000, WAIT));
    assert_eq!(Ws::connect(port, "/ws", &auth).err(), Some(401));
}

#[test]
fn format_events_sends_salt_apis_job_and_minion_views() {
    let fleet = Fleet::start(&["m1"], "");
    let token = fleet.login("alice", "alicepw");
    let auth = [("X-Auth-Token", token.as_str())];
    let mut ws = Ws::ready(fleet.port, "/ws?format_events", &auth);
    let r = fleet.http.post_json(
        "/",
        &json!([{"client": "local_async", "tgt": "m1", "fun": "test.ping"}]),
        &auth,
    );
    let jid = r.json()["return"][0]["jid"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", r.body))
        .to_owned();
    let mut views = Vec::new();
    let job = loop {
        match ws.next(WAIT) {
            Some(Got::Text(t)) => {
                let doc: Json = serde_json::from_str(&t).unwrap_or_else(|_| panic!("{t}"));
                let job = doc["jobs"][&jid].clone();
                views.push(t);
                if job["state"] == "complete" {
                    break job;
                }
            }
            other => panic!("{other:?} after {views:?}"),
        }
    };
    assert_eq!(job["fun"], "test.ping");
    assert_eq!(job["tgt"], "m1");
    assert_eq!(job["minions"]["m1"]["return"], true);
    assert_eq!(job["minions"]["m1"]["success"], true);
    assert!(job["start_time"].is_string(), "{job}");
    assert!(
        views
            .first()
            .is_some_and(|v| v.contains("\"state\": \"running\"")),
        "the new event comes first: {views:?}"
    );

    // A key acceptance updates the minion list.
    fire(
        &fleet.sock_dir(),
        vec![(
            "salt/key".into(),
            json!({"act": "accept", "id": "m7", "result": true}),
        )],
    );
    loop {
        match ws.next(WAIT) {
            Some(Got::Text(t)) if t.starts_with("{\"minions\": ") => {
                let doc: Json = serde_json::from_str(&t).unwrap();
                assert!(
                    doc["minions"]
                        .as_array()
                        .unwrap()
                        .contains(&json!({"id": "m7"})),
                    "{t}"
                );
                break;
            }
            Some(Got::Text(_)) => {}
            other => panic!("{other:?}"),
        }
    }
}

/// The master config of the ACL fleet: ann may run `test.ping` and the `jobs` runners,
/// ben `test.echo` anywhere and `test.arg` on m2; alice (who waits for the minions) more.
fn acl_config(root: &halite_testkit::TempRoot, port: u16) -> String {
    let users = root.path().join("eauth-users");
    std::fs::write(&users, "alice:alicepw\nann:annpw\nben:benpw\n").unwrap();
    format!(
        "auto_accept: true\n\
         external_auth:\n  file:\n    ^filename: {}\n    ^filetype: text\n    \
           alice: ['test.*', '@runner']\n    \
           ann: [test.ping, '@jobs']\n    \
           ben: [test.echo, {{m2: [test.arg]}}]\n\
         netapi_enable_clients: [local, local_async, runner]\n\
         api_pidfile: {}\n\
         api_logfile: {}\n\
         rest_cherrypy:\n  port: {port}\n  host: 127.0.0.1\n  disable_ssl: true\n  \
           events_acl: true\n",
        users.display(),
        root.master_root().join("run/salt-api.pid").display(),
        root.master_root().join("log/api").display(),
    )
}

/// A second `halite-api` in front of the fleet's master, with `events_acl` off, on a port
/// of its own: the fleet's master config with its `rest_cherrypy` changed.
fn second_api(fleet: &Fleet) -> (Proc, u16) {
    let port = halite_testkit::free_ports(1)[0];
    let text = std::fs::read_to_string(fleet.root.master_config_file()).unwrap();
    let mut cfg: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    let dir = fleet.root.path().join("api2");
    std::fs::create_dir_all(&dir).unwrap();
    cfg["rest_cherrypy"]["port"] = port.into();
    cfg["rest_cherrypy"]["events_acl"] = false.into();
    cfg["api_pidfile"] = dir.join("api.pid").display().to_string().into();
    cfg["api_logfile"] = dir.join("api.log").display().to_string().into();
    std::fs::write(dir.join("master"), serde_norway::to_string(&cfg).unwrap()).unwrap();
    let mut cmd = std::process::Command::new(halite_bin("halite-api"));
    cmd.arg("-c").arg(&dir).args(["-l", "info"]);
    let proc = Proc::spawn(cmd, &fleet.root.procs_dir(), "halite-api-2");
    wait_for_port(port, TIMEOUT);
    (proc, port)
}

/// An event reader of either kind.
enum Reader {
    Sse(Sse),
    Ws(Ws),
}

impl Reader {
    /// The job-family tags (`salt/job|run|wheel/...`) and the `fun` of run events, until
    /// the event tagged `end`.
    fn jobs_until(&mut self, end: &str) -> Vec<(String, String)> {
        let mut got = Vec::new();
        loop {
            let (tag, data) = match self {
                Reader::Sse(s) => s.next_event(WAIT).map(|(_, t, d)| (t, d)),
                Reader::Ws(w) => w.next_event(WAIT).map(|(_, t, d, _)| (t, d)),
            }
            .unwrap_or_else(|| panic!("no {end} after {got:?}"));
            if tag == end {
                return got;
            }
            if ["salt/job/", "salt/run/", "salt/wheel/"]
                .iter()
                .any(|p| tag.starts_with(p))
            {
                let fun = data["data"]["fun"].as_str().unwrap_or_default().to_owned();
                got.push((tag, fun));
            }
        }
    }
}

/// Starts `fun` with `arg` on `tgt` as the owner of `token` (`local_async`): the jid.
fn start_job(fleet: &Fleet, token: &str, tgt: &str, fun: &str, arg: Json) -> String {
    let r = fleet.http.post_json(
        "/",
        &json!([{"client": "local_async", "tgt": tgt, "fun": fun, "arg": arg}]),
        &[("X-Auth-Token", token)],
    );
    r.json()["return"][0]["jid"]
        .as_str()
        .unwrap_or_else(|| panic!("{fun}: {} {}", r.status, r.body))
        .to_owned()
}

#[test]
fn with_events_acl_each_session_sees_only_the_jobs_its_acl_covers() {
    let fleet = Fleet::start_custom(Kind::Halite, Kind::Halite, &["m1", "m2"], acl_config);
    let (_api2, open_port) = second_api(&fleet);
    let ann = fleet.login("ann", "annpw");
    let ben = fleet.login("ben", "benpw");
    let ann_auth = [("X-Auth-Token", ann.as_str())];
    let ben_auth = [("X-Auth-Token", ben.as_str())];
    // Listening at once: ann on /events and ben on /ws with the filter; both again on the
    // API without it (a session is a master token, so it works on both).
    let mut ann_filtered = Reader::Sse(Sse::open(fleet.port, "/events", &ann_auth));
    let mut ben_filtered = Reader::Ws(Ws::ready(fleet.port, "/ws", &ben_auth));
    let mut ann_open = Reader::Sse(Sse::open(open_port, "/events", &ann_auth));
    let mut ben_open = Reader::Ws(Ws::ready(open_port, "/ws", &ben_auth));

    let ping = start_job(&fleet, &ann, "*", "test.ping", json!([]));
    let echo = start_job(&fleet, &ben, "*", "test.echo", json!(["hi"]));
    let arg = start_job(&fleet, &ben, "m2", "test.arg", json!(["x"]));
    let r = fleet.http.post_json(
        "/",
        &json!([{"client": "runner", "fun": "jobs.list_jobs"}]),
        &ann_auth,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    // Every job is over once the unfiltered stream saw its returns; then the marker.
    let expected_rets = [
        format!("salt/job/{ping}/ret/m1"),
        format!("salt/job/{ping}/ret/m2"),
        format!("salt/job/{echo}/ret/m1"),
        format!("salt/job/{echo}/ret/m2"),
        format!("salt/job/{arg}/ret/m2"),
    ];
    let mut seen: Vec<(String, String)> = Vec::new();
    let deadline = Instant::now() + WAIT;
    while !(expected_rets
        .iter()
        .all(|t| seen.iter().any(|(s, _)| s == t))
        && seen.iter().any(|(t, f)| {
            t.starts_with("salt/run/") && t.ends_with("/ret") && f == "runner.jobs.list_jobs"
        }))
    {
        assert!(
            Instant::now() < deadline,
            "the jobs did not finish: {seen:?}"
        );
        if let Reader::Sse(s) = &mut ann_open {
            if let Some((_, tag, data)) = s.next_event(WAIT) {
                seen.push((
                    tag,
                    data["data"]["fun"].as_str().unwrap_or_default().to_owned(),
                ));
            }
        }
    }
    fire(&fleet.sock_dir(), events(&["test/acl/end"]));

    let of = |got: &[(String, String)], jid: &str| {
        got.iter()
            .filter(|(t, _)| t.starts_with(&format!("salt/job/{jid}/")))
            .map(|(t, _)| {
                t.rsplit_once(&format!("{jid}/"))
                    .map_or("", |(_, k)| k)
                    .to_owned()
            })
            .collect::<Vec<_>>()
    };
    let runs = |got: &[(String, String)]| {
        got.iter()
            .filter(|(t, f)| t.starts_with("salt/run/") && f == "runner.jobs.list_jobs")
            .count()
    };
    let ann_got = ann_filtered.jobs_until("test/acl/end");
    let ben_got = ben_filtered.jobs_until("test/acl/end");
    println!("ann (filtered): {ann_got:?}\nben (filtered): {ben_got:?}");
    for kind in ["new", "ret/m1", "ret/m2"] {
        assert!(
            of(&ann_got, &ping).iter().any(|k| k == kind),
            "ann misses {kind} of her job"
        );
        assert!(
            of(&ben_got, &echo).iter().any(|k| k == kind),
            "ben misses {kind} of his job"
        );
    }
    assert!(of(&ben_got, &arg).iter().any(|k| k == "ret/m2"));
    assert!(
        runs(&ann_got) >= 2,
        "ann's runner's new and ret: {ann_got:?}"
    );
    assert_eq!(
        of(&ann_got, &echo),
        Vec::<String>::new(),
        "ann sees ben's test.echo"
    );
    assert_eq!(
        of(&ann_got, &arg),
        Vec::<String>::new(),
        "ann sees ben's test.arg"
    );
    assert_eq!(
        of(&ben_got, &ping),
        Vec::<String>::new(),
        "ben sees ann's test.ping"
    );
    assert!(
        !ben_got.iter().any(|(t, _)| t.starts_with("salt/run/")),
        "ben sees runner events: {ben_got:?}"
    );

    // Without the option both see everything.
    seen.extend(ann_open.jobs_until("test/acl/end"));
    let ben_all = ben_open.jobs_until("test/acl/end");
    for got in [&seen, &ben_all] {
        for jid in [&ping, &echo, &arg] {
            assert!(
                of(got, jid).iter().any(|k| k == "new"),
                "{jid} missing in {got:?}"
            );
        }
        assert!(runs(got) >= 2);
    }
}
