//! What the `halite-api` integration tests share: a fleet (a master, minions and the API
//! on loopback), a small HTTP client over `ureq`, and an SSE reader on a raw socket.

#![allow(dead_code)]

use halite_testkit::*;
use serde_json::Value as Json;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// The `file` eauth backend's users (`^filetype: text`).
pub const USERS: &str = "alice:alicepw\nbob:bobpw\n";

/// The clients the fleet's API enables (not `wheel_async` or `ssh`).
pub const ENABLED: &str =
    "[local, local_async, local_subset, local_batch, runner, runner_async, wheel]";

/// Which master a fleet runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `halite-master` with `halite-api`.
    Halite,
    /// Stock `salt-master` with stock `salt-api`.
    Stock,
}

/// A master, its minions and an API in front of it.
pub struct Fleet {
    pub root: TempRoot,
    pub port: u16,
    pub http: Http,
    /// The kind of the API.
    pub kind: Kind,
    api: Option<Proc>,
    procs: Vec<Proc>,
}

/// The master config the fleets use: `external_auth` (alice may run `test.*`, `grains.*`,
/// `sys.*`, runners and `@jobs`; bob only `test.ping`), the enabled clients, and
/// `rest_cherrypy` on `port` over plain HTTP; `extra` is merged in (a YAML mapping of
/// top-level options; its `rest_cherrypy` replaces the default one).
pub fn master_yaml(
    root: &TempRoot,
    port: u16,
    enabled: &str,
    rest_extra: &str,
    extra: &str,
) -> String {
    let users = root.path().join("eauth-users");
    std::fs::write(&users, USERS).unwrap();
    format!(
        "auto_accept: true\n\
         keep_jobs_seconds: 3600\n\
         external_auth:\n  \
           file:\n    \
             ^filename: {}\n    \
             ^filetype: text\n    \
             alice:\n      - 'test.*'\n      - 'grains.*'\n      - 'sys.*'\n      - '@runner'\n      - '@jobs'\n      - '@wheel'\n    \
             bob:\n      - test.ping\n\
         netapi_enable_clients: {enabled}\n\
         api_pidfile: {}\n\
         api_logfile: {}\n\
         rest_cherrypy:\n  \
           port: {port}\n  \
           host: 127.0.0.1\n  \
           disable_ssl: true\n{rest_extra}{extra}",
        users.display(),
        root.master_root().join("run").join("salt-api.pid").display(),
        root.master_root().join("log").join("api").display(),
    )
}

impl Fleet {
    /// A Halite master with `minions` and `halite-api`, waiting until every minion answers
    /// `test.ping` through the API. `rest_extra` adds indented `rest_cherrypy` options.
    pub fn start(minions: &[&str], rest_extra: &str) -> Fleet {
        Fleet::start_kind(Kind::Halite, minions, rest_extra, "")
    }

    /// A fleet of `kind` (see [`Fleet::start`]); `extra` adds top-level master options.
    pub fn start_kind(kind: Kind, minions: &[&str], rest_extra: &str, extra: &str) -> Fleet {
        Fleet::start_mixed(kind, kind, minions, rest_extra, extra)
    }

    /// A `master` of one kind with an `api` of another (see [`Fleet::start_kind`]).
    pub fn start_mixed(
        master: Kind,
        api: Kind,
        minions: &[&str],
        rest_extra: &str,
        extra: &str,
    ) -> Fleet {
        Fleet::start_custom(master, api, minions, |root, port| {
            master_yaml(root, port, ENABLED, rest_extra, extra)
        })
    }

    /// A `master` of one kind with an `api` of another, whose master config is
    /// `config(root, api_port)` (written whole: it must carry `rest_cherrypy` on that port
    /// over plain HTTP, `external_auth` for alice with `alicepw`, and the enabled clients).
    pub fn start_custom(
        master: Kind,
        api: Kind,
        minions: &[&str],
        config: impl FnOnce(&TempRoot, u16) -> String,
    ) -> Fleet {
        let root = TempRoot::new();
        let port = free_ports(1)[0];
        root.write_master_config(&config(&root, port));
        let mut procs = vec![match master {
            Kind::Halite => start_halite_master(&root),
            Kind::Stock => start_stock_master(&root),
        }];
        for id in minions {
            procs.push(start_halite_minion(&root, id));
        }
        let api_proc = start_api(&root, api);
        let mut fleet = Fleet {
            http: Http::new(port),
            port,
            kind: api,
            root,
            api: Some(api_proc),
            procs,
        };
        fleet.wait_for_minions(minions);
        fleet
    }

    /// Waits until every id of `minions` answers `test.ping` through the API.
    pub fn wait_for_minions(&mut self, minions: &[&str]) {
        wait_for_port(self.port, TIMEOUT);
        let mut last = String::new();
        let ok = wait_until(TIMEOUT, || {
            let Some(token) = self.try_login("alice", "alicepw") else {
                last = "no login".into();
                return false;
            };
            let r = self.http.post_json(
                "/",
                &serde_json::json!([{"client": "local", "tgt": "*", "fun": "test.ping", "timeout": 5}]),
                &[("X-Auth-Token", &token)],
            );
            last = r.body.clone();
            r.status == 200
                && minions
                    .iter()
                    .all(|m| r.json()["return"][0][m] == Json::Bool(true))
        });
        assert!(
            ok,
            "minions {minions:?} never answered through the API: {last}"
        );
    }

    /// Logs in; the session token.
    pub fn login(&self, user: &str, password: &str) -> String {
        self.try_login(user, password)
            .unwrap_or_else(|| panic!("{user} cannot log in"))
    }

    fn try_login(&self, user: &str, password: &str) -> Option<String> {
        let r = self.http.post_json(
            "/login",
            &serde_json::json!({"username": user, "password": password, "eauth": "file"}),
            &[],
        );
        (r.status == 200)
            .then(|| r.json()["return"][0]["token"].as_str().map(str::to_owned))
            .flatten()
    }

    /// What the API printed on stderr so far.
    pub fn api_log(&self) -> String {
        self.api.as_ref().map(|a| a.stderr()).unwrap_or_default()
    }

    /// Stops the API, e.g. to restart it.
    pub fn stop_api(&mut self) {
        if let Some(mut api) = self.api.take() {
            api.stop();
        }
    }

    /// Starts the API again.
    pub fn restart_api(&mut self) {
        self.stop_api();
        self.api = Some(start_api(&self.root, self.kind));
        wait_for_port(self.port, TIMEOUT);
    }

    /// The master's process (the first one started).
    pub fn stop_master(&mut self) {
        if let Some(m) = self.procs.first_mut() {
            m.stop();
        }
    }

    /// The master's `sock_dir`.
    pub fn sock_dir(&self) -> PathBuf {
        self.root.master_root().join("sock")
    }
}

/// Starts `halite-api -c ROOT` (or stock `salt-api`).
pub fn start_api(root: &TempRoot, kind: Kind) -> Proc {
    match kind {
        Kind::Halite => {
            let mut cmd = Command::new(halite_bin("halite-api"));
            cmd.arg("-c")
                .arg(root.master_config_dir())
                .args(["-l", "info"]);
            Proc::spawn(cmd, &root.procs_dir(), "halite-api")
        }
        Kind::Stock => {
            let mut cmd = stock_command(root, "salt-api");
            cmd.args(["-l", "info"]);
            Proc::spawn(cmd, &root.procs_dir(), "salt-api").with_stop_grace(STOCK_STOP_GRACE)
        }
    }
}

/// An HTTP response, read whole.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    /// The body as JSON.
    ///
    /// # Panics
    /// When it is not JSON.
    pub fn json(&self) -> Json {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A client of one API on 127.0.0.1.
pub struct Http {
    agent: ureq::Agent,
    pub base: String,
}

impl Http {
    pub fn new(port: u16) -> Http {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(TIMEOUT))
            .max_redirects(0)
            .build()
            .into();
        Http {
            agent,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    /// Any request.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<(&str, Vec<u8>)>,
    ) -> Reply {
        let mut b = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let body = match body {
            Some((ct, bytes)) => {
                b = b.header("Content-Type", ct);
                bytes
            }
            None => vec![],
        };
        let req = b.body(body).expect("a request");
        let mut resp = self
            .agent
            .run(req)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let body = resp
            .body_mut()
            .with_config()
            .limit(64 * 1024 * 1024)
            .read_to_string()
            .unwrap_or_default();
        Reply {
            status,
            headers,
            body,
        }
    }

    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        self.request("GET", path, headers, None)
    }

    pub fn post(&self, path: &str, ct: &str, body: &[u8], headers: &[(&str, &str)]) -> Reply {
        self.request("POST", path, headers, Some((ct, body.to_vec())))
    }

    pub fn post_json(&self, path: &str, body: &Json, headers: &[(&str, &str)]) -> Reply {
        let mut h = vec![("Accept", "application/json")];
        h.extend_from_slice(headers);
        self.post(path, "application/json", body.to_string().as_bytes(), &h)
    }
}

/// One record of an event stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// An event: its `id:` (if any), `tag:` and `data:` (parsed).
    Event {
        id: Option<u64>,
        tag: String,
        data: Json,
    },
    /// A comment line (`: keepalive`).
    Comment(String),
}

/// An `/events` stream read on a raw socket (HTTP/1.0, so the body is not chunked).
pub struct Sse {
    pub status: u16,
    pub head: String,
    reader: BufReader<TcpStream>,
}

impl Sse {
    /// `GET <path>` with `headers`; reads the response head.
    pub fn open(port: u16, path: &str, headers: &[(&str, &str)]) -> Sse {
        let mut tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let mut req = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        tcp.write_all(req.as_bytes()).expect("send");
        tcp.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut reader = BufReader::new(tcp);
        let mut head = String::new();
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) => break,
                Ok(_) => {
                    if line == "\r\n" {
                        break;
                    }
                    head.push_str(&line);
                }
                Err(_) if Instant::now() < deadline => {
                    head.push_str(&line);
                }
                Err(e) => panic!("no response head: {e}"),
            }
        }
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        Sse {
            status,
            head,
            reader,
        }
    }

    /// The next record within `timeout`; `None` at the end of the stream or on timeout.
    pub fn next(&mut self, timeout: Duration) -> Option<Record> {
        let deadline = Instant::now() + timeout;
        let mut fields: Vec<(String, String)> = Vec::new();
        let mut line = String::new();
        loop {
            match self.reader.read_line(&mut line) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(_) => {
                    if Instant::now() >= deadline {
                        return None;
                    }
                    continue;
                }
            }
            let text = line.trim_end_matches('\n').to_owned();
            line.clear();
            if text.is_empty() {
                if fields.is_empty() {
                    continue;
                }
                return Some(record(std::mem::take(&mut fields)));
            }
            if let Some(comment) = text.strip_prefix(':') {
                if fields.is_empty() {
                    // A comment alone followed by its blank line.
                    return Some(Record::Comment(comment.trim().to_owned()));
                }
                continue;
            }
            if let Some((k, v)) = text.split_once(':') {
                fields.push((k.to_owned(), v.strip_prefix(' ').unwrap_or(v).to_owned()));
            }
        }
    }

    /// Whether the server closes the stream within `timeout` (what arrives meanwhile is
    /// dropped).
    pub fn ends_within(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut line = String::new();
        while Instant::now() < deadline {
            line.clear();
            if let Ok(0) = self.reader.read_line(&mut line) {
                return true;
            }
        }
        false
    }

    /// The next event (comments skipped) within `timeout`.
    pub fn next_event(&mut self, timeout: Duration) -> Option<(Option<u64>, String, Json)> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left)? {
                Record::Event { id, tag, data } => return Some((id, tag, data)),
                Record::Comment(_) => continue,
            }
        }
    }
}

fn record(fields: Vec<(String, String)>) -> Record {
    let get = |k: &str| fields.iter().find(|(f, _)| f == k).map(|(_, v)| v.clone());
    if get("data").is_none() && get("tag").is_none() {
        // `retry:` alone (it joins the first record in the stock format).
        if let Some(r) = get("retry") {
            return Record::Comment(format!("retry {r}"));
        }
    }
    Record::Event {
        id: get("id").and_then(|i| i.parse().ok()),
        tag: get("tag").unwrap_or_default(),
        data: get("data")
            .and_then(|d| serde_json::from_str(&d).ok())
            .unwrap_or(Json::Null),
    }
}

/// Fires events on the master bus of `sock_dir`, in order, through one connection.
pub fn fire(sock_dir: &std::path::Path, events: Vec<(String, Json)>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let bus = halite_journal::MasterBus::new(sock_dir, 1_048_576);
        let mut sender = bus.sender().await.expect("the master bus");
        for chunk in events.chunks(200) {
            let batch: Vec<(&str, rmpv::Value)> = chunk
                .iter()
                .map(|(t, d)| (t.as_str(), to_value(d)))
                .collect();
            sender.send_all(batch).await.expect("fire");
        }
    });
}

/// A JSON value as msgpack.
pub fn to_value(j: &Json) -> rmpv::Value {
    match j {
        Json::Null => rmpv::Value::Nil,
        Json::Bool(b) => rmpv::Value::Boolean(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => rmpv::Value::from(i),
            None => rmpv::Value::F64(n.as_f64().unwrap_or(0.0)),
        },
        Json::String(s) => rmpv::Value::from(s.as_str()),
        Json::Array(a) => rmpv::Value::Array(a.iter().map(to_value).collect()),
        Json::Object(o) => rmpv::Value::Map(
            o.iter()
                .map(|(k, v)| (rmpv::Value::from(k.as_str()), to_value(v)))
                .collect(),
        ),
    }
}
