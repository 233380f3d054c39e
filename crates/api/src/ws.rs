//! `GET /ws` and `GET /ws/<token>`: the master's event bus over a WebSocket, with
//! salt-api's handshake and framing (`rest_cherrypy`'s `WebsocketEndpoint` with ws4py's
//! `SynchronizingWebsocket`), fed by the same shared [`Hub`] as `/events`.
//!
//! # The exchange, as stock
//!
//! * A request that is not a WebSocket handshake (no `Upgrade: websocket`, no
//!   `Sec-WebSocket-Key`, a version other than 13) is 400, before any session check
//!   (ws4py's tool validates the handshake first); a handshake without a valid session is
//!   401; otherwise 101.
//! * The session is the token in the path (`/ws/<token>`), else the session of the request
//!   (`X-Auth-Token`, else the `session_id` cookie), as for every other endpoint. Browsers
//!   cannot set headers on a WebSocket, so they use the cookie or the path.
//! * Nothing is sent until the client sends the text message `websocket client ready`;
//!   every message the client sends is answered with the text message
//!   `server received message`. Events that happen before "ready" are not sent.
//! * Then each event is one text message `data: {"data": ..., "tag": ...}\n\n` (the same
//!   JSON as `/events`).
//! * With the query parameter `format_events` (any value), the client gets salt-api's
//!   aggregated view instead ([`SaltInfo`]): `{"jobs": {...}}` after each job's `new` and
//!   `ret` events, `{"minions": [...]}` after key and presence changes and `grains.items`
//!   returns; a presence event that names new minions starts a `grains.items` job on them
//!   with the caller's token (the `local` client, so it must be enabled).
//!
//! # Beyond stock (Halite extensions, each opt-in or invisible to stock clients)
//!
//! * The stream ends, with a Close frame (1000 "session ended"), when the token expires or
//!   is logged out, as `/events` does (stock's stream outlives its token); a connection that
//!   never said "ready" is closed so when the token expires. A Close 1001 when the API
//!   stops.
//! * `?tag=<glob>` filters by tag, as on `/events`; `?ids` starts each message with an
//!   `id: <journal id>` line; `?last_event_id=<n>` (or a `Last-Event-ID` header) resumes
//!   after journal id `n` with no gap and no duplicate. Events filtered by the caller's ACL
//!   (`events_acl`) apply here too ([`crate::events`]).
//! * A Ping frame every `sse_keepalive` seconds keeps proxies from cutting quiet sockets.
//! * Client messages are limited to [`MAX_MESSAGE`] bytes (ws4py: unlimited).
//!
//! # Deviations from stock
//!
//! * Stock serves `/ws` only when the Python package `ws4py` is installed and answers 404
//!   otherwise (it is not a dependency of Salt 3008.3, so a stock salt-api usually has no
//!   `/ws`); here it is always served.
//! * Stock forks one OS process per connection; here a connection is a task reading the
//!   shared hub, like an `/events` stream.
//! * A token in the query string (`?token=`, which CherryPy maps onto the path argument)
//!   is not accepted: it ends up in access logs, as the `/events` hardening of 3008 says.
//! * `format_events`: an event without the fields stock reads (which kills stock's stream
//!   with a `KeyError`) is skipped; at most [`MAX_JOBS`] jobs are kept, the oldest dropped
//!   first (stock keeps every job for the life of the connection and resends them all on
//!   each event); the `grains.items` job of new minions targets them as a list (stock
//!   passes `expr_type`, which `LocalClient` ignores, so its comma-joined ids are a glob
//!   that matches only when there is one).
//!
//! # Invariants
//!
//! * A client that never reads holds at most [`crate::events::CLIENT_QUEUE`] frames and
//!   one message in the socket's write buffer; its task waits, and nothing else does.
//! * Nothing a client sends panics or grows memory beyond [`MAX_MESSAGE`].

use crate::events::{self, Hub, StreamSpec};
use crate::render::Format;
use crate::session::{unix_now, Sessions};
use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What the client sends to start the stream.
pub const READY: &str = "websocket client ready";

/// The answer to every client message.
pub const RECEIVED: &str = "server received message";

/// The largest message (and frame) accepted from a client.
pub const MAX_MESSAGE: usize = 64 * 1024;

/// Jobs a `format_events` view keeps.
pub const MAX_JOBS: usize = 256;

/// Minions a `format_events` view keeps.
pub const MAX_MINIONS: usize = 100_000;

/// What one `/ws` connection serves.
pub struct WsSpec {
    /// The event stream (its wire is [`events::Wire::Ws`], without keep-alives).
    pub stream: StreamSpec,
    /// `?format_events`.
    pub format_events: bool,
    /// Interval of the Ping frames.
    pub ping: Option<Duration>,
}

/// Serves one upgraded connection until the client goes, the session ends or `shutdown`.
/// `grains` is called with the ids of new minions a `format_events` view wants the grains
/// of (it starts the `grains.items` job).
pub async fn serve_socket<G>(
    mut socket: WebSocket,
    hub: Arc<Hub>,
    sessions: Arc<Sessions>,
    spec: WsSpec,
    grains: G,
    shutdown: CancellationToken,
) where
    G: Fn(Vec<String>) + Send,
{
    let WsSpec {
        stream,
        format_events,
        ping,
    } = spec;
    let left = (stream.session.expire() - unix_now()).clamp(0.0, 1e9);
    let expiry = tokio::time::Instant::now() + Duration::from_secs_f64(left);
    let (tx, mut rx) = mpsc::channel::<Bytes>(events::CLIENT_QUEUE);
    let mut pending = Some((stream, tx));
    let mut task: Option<AbortOnDrop> = None;
    let mut info = format_events.then(SaltInfo::default);
    let mut ping = ping.map(|every| {
        let mut i = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        i
    });
    // Made once, not per message (see `events::serve`).
    let expiry = tokio::time::sleep_until(expiry);
    let stopping = shutdown.cancelled();
    tokio::pin!(expiry, stopping);
    loop {
        let step = tokio::select! {
            msg = socket.recv() => match msg {
                Some(Ok(Message::Text(text))) => {
                    if text.as_str() == READY {
                        start(&mut pending, &mut task, &hub, &sessions, &shutdown);
                    }
                    Step::Send(vec![Message::text(RECEIVED)])
                }
                Some(Ok(Message::Binary(bytes))) => {
                    if bytes.as_ref() == READY.as_bytes() {
                        start(&mut pending, &mut task, &hub, &sessions, &shutdown);
                    }
                    Step::Send(vec![Message::text(RECEIVED)])
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => Step::Send(vec![]),
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
            },
            frame = rx.recv(), if task.is_some() => match frame {
                Some(bytes) => Step::Send(render(bytes, info.as_mut(), &grains)),
                None => Step::Close(1000, "session ended"),
            },
            () = tick(&mut ping) => Step::Send(vec![Message::Ping(Bytes::new())]),
            // Once streaming, the stream itself watches the token.
            () = &mut expiry, if task.is_none() => {
                Step::Close(1000, "session ended")
            }
            () = &mut stopping => Step::Close(1001, "server shutting down"),
        };
        match step {
            Step::Send(messages) => {
                for m in messages {
                    if !send(&mut socket, m, &shutdown).await {
                        return;
                    }
                }
            }
            Step::Close(code, reason) => {
                let close = Message::Close(Some(CloseFrame {
                    code,
                    reason: Utf8Bytes::from_static(reason),
                }));
                let _ = tokio::time::timeout(Duration::from_secs(1), socket.send(close)).await;
                return;
            }
        }
    }
}

/// What the connection does next.
enum Step {
    Send(Vec<Message>),
    Close(u16, &'static str),
}

/// Aborts the stream task when the connection ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the event stream (once: a second "ready" changes nothing, as stock).
fn start(
    pending: &mut Option<(StreamSpec, mpsc::Sender<Bytes>)>,
    task: &mut Option<AbortOnDrop>,
    hub: &Arc<Hub>,
    sessions: &Arc<Sessions>,
    shutdown: &CancellationToken,
) {
    if let Some((spec, tx)) = pending.take() {
        let handle = tokio::spawn(events::serve(
            hub.clone(),
            sessions.clone(),
            spec,
            tx,
            shutdown.clone(),
        ));
        *task = Some(AbortOnDrop(handle));
    }
}

/// Sends `m`, giving up at `shutdown`; whether the connection can go on.
async fn send(socket: &mut WebSocket, m: Message, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        r = socket.send(m) => r.is_ok(),
        () = shutdown.cancelled() => false,
    }
}

/// The next Ping tick; never, without pings.
async fn tick(ping: &mut Option<tokio::time::Interval>) {
    match ping {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// The messages for one event message of the stream: itself, or what the `format_events`
/// view makes of it.
fn render<G: Fn(Vec<String>)>(
    bytes: Bytes,
    info: Option<&mut SaltInfo>,
    grains: &G,
) -> Vec<Message> {
    let Some(info) = info else {
        return match Utf8Bytes::try_from(bytes) {
            Ok(text) => vec![Message::Text(text)],
            Err(_) => vec![],
        };
    };
    let Some(event) = parse_message(&bytes) else {
        return vec![];
    };
    let tag = value::get_str(&event, "tag").unwrap_or("");
    let data = value::get(&event, "data").unwrap_or(&Value::Nil);
    let out = info.process(tag, data);
    if !out.grains.is_empty() {
        grains(out.grains);
    }
    out.messages
        .iter()
        .map(|m| {
            let text = String::from_utf8_lossy(&Format::Json.serialize(m)).into_owned();
            Message::text(text)
        })
        .collect()
}

/// The event of a stream message (`data: <json>\n\n`, maybe after an `id:` line).
fn parse_message(bytes: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(bytes).ok()?;
    let start = text.find("data: ")? + "data: ".len();
    crate::body::json(text.get(start..)?.trim_end().as_bytes())
}

/// What [`SaltInfo::process`] makes of one event.
#[derive(Debug, Default, PartialEq)]
pub struct Formatted {
    /// Messages to send, in order.
    pub messages: Vec<Value>,
    /// New minions whose grains are wanted (`grains.items` on them).
    pub grains: Vec<String>,
}

/// salt-api's `event_processor.SaltInfo`: a real-time view of jobs and minions, kept per
/// connection (see the module docs for what differs).
#[derive(Debug, Default)]
pub struct SaltInfo {
    /// `jid → job`, in insertion order.
    jobs: Vec<(Value, Value)>,
    /// `id → info` (a map with `grains` once known), in insertion order.
    minions: Vec<(String, Value)>,
}

impl SaltInfo {
    /// `SaltInfo.process`: updates the view with an event.
    pub fn process(&mut self, tag: &str, data: &Value) -> Formatted {
        let mut out = Formatted::default();
        let parts: Vec<&str> = tag.split('/').collect();
        match parts.get(1).copied() {
            Some("job") => match parts.get(3).copied() {
                Some("new") if self.new_job(data) => {
                    out.messages.push(self.jobs_message());
                    if value::get_str(data, "fun") == Some("grains.items") {
                        self.minions.clear();
                    }
                }
                Some("ret") => {
                    if let [_, _, jid, _, mid] = parts.as_slice() {
                        if self.ret_job(jid, mid, data) {
                            out.messages.push(self.jobs_message());
                            if value::get_str(data, "fun") == Some("grains.items") {
                                let grains = value::get(data, "return").cloned();
                                self.set_grains(mid, grains.unwrap_or(Value::Nil));
                                out.messages.push(self.minions_message());
                            }
                        }
                    }
                }
                _ => {}
            },
            Some("key") => {
                if let Some(act) = value::get(data, "act") {
                    let id = value::get(data, "id").and_then(value::str_of);
                    match (value::str_of(act), id) {
                        (Some("delete"), Some(id)) => self.minions.retain(|(m, _)| m != id),
                        (Some("accept"), Some(id)) => self.add_minion(id),
                        (Some("delete" | "accept"), None) => return out,
                        _ => {}
                    }
                    out.messages.push(self.minions_message());
                }
            }
            Some("presence") => {
                let Some(Value::Array(present)) = value::get(data, "present") else {
                    return out;
                };
                let present: Vec<&str> = present.iter().filter_map(value::str_of).collect();
                let before = self.minions.len();
                self.minions.retain(|(m, _)| present.contains(&m.as_str()));
                let mut changed = self.minions.len() != before;
                let mut new: Vec<String> = Vec::new();
                for id in present {
                    if !self.minions.iter().any(|(m, _)| m == id) && !new.iter().any(|n| n == id) {
                        new.push(id.to_owned());
                    }
                }
                if !new.is_empty() {
                    changed = true;
                    out.grains = new;
                }
                if changed {
                    out.messages.push(self.minions_message());
                }
            }
            _ => {}
        }
        out
    }

    /// `process_new_job_event`; false (nothing changed) when a field stock reads is
    /// missing.
    fn new_job(&mut self, data: &Value) -> bool {
        let field = |k: &str| value::get(data, k);
        let (Some(jid), Some(Value::Array(mids)), Some(stamp), Some(fun), Some(tgt), Some(tt)) = (
            field("jid"),
            field("minions"),
            field("_stamp"),
            field("fun"),
            field("tgt"),
            field("tgt_type"),
        ) else {
            return false;
        };
        let minions = Value::Map(
            mids.iter()
                .map(|m| (m.clone(), map([("success", Value::Boolean(false))])))
                .collect(),
        );
        let job = map([
            ("jid", jid.clone()),
            ("start_time", stamp.clone()),
            ("minions", minions),
            ("fun", fun.clone()),
            ("tgt", tgt.clone()),
            ("tgt_type", tt.clone()),
            ("state", s("running")),
        ]);
        match self.jobs.iter_mut().find(|(k, _)| k == jid) {
            Some(slot) => slot.1 = job,
            None => {
                self.jobs.push((jid.clone(), job));
                if self.jobs.len() > MAX_JOBS {
                    self.jobs.remove(0);
                }
            }
        }
        true
    }

    /// `process_ret_job_event`; false when a field stock reads is missing.
    fn ret_job(&mut self, jid: &str, mid: &str, data: &Value) -> bool {
        let field = |k: &str| value::get(data, k);
        let (Some(ret), Some(retcode), Some(success)) =
            (field("return"), field("retcode"), field("success"))
        else {
            return false;
        };
        let key = s(jid);
        let index = match self.jobs.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                self.jobs.push((key, Value::Map(vec![])));
                if self.jobs.len() > MAX_JOBS {
                    self.jobs.remove(0);
                }
                self.jobs.len() - 1
            }
        };
        let Some((_, job)) = self.jobs.get_mut(index) else {
            return false;
        };
        if !matches!(value::get(job, "minions"), Some(Value::Map(_))) {
            value::set(job, "minions", Value::Map(vec![]));
        }
        let complete = {
            let Some(Value::Map(minions)) = value_mut(job, "minions") else {
                return false;
            };
            let key = s(mid);
            let slot = match minions.iter().position(|(k, _)| *k == key) {
                Some(i) => i,
                None => {
                    minions.push((key, Value::Map(vec![])));
                    minions.len() - 1
                }
            };
            if let Some((_, minion)) = minions.get_mut(slot) {
                if !matches!(minion, Value::Map(_)) {
                    *minion = Value::Map(vec![]);
                }
                value::set(minion, "return", ret.clone());
                value::set(minion, "retcode", retcode.clone());
                value::set(minion, "success", success.clone());
            }
            minions
                .iter()
                .all(|(_, m)| value::get(m, "success").is_some_and(value::truthy))
        };
        if complete {
            value::set(job, "state", s("complete"));
        }
        true
    }

    /// Adds minion `id` (with no information yet) unless it is known.
    fn add_minion(&mut self, id: &str) {
        if !self.minions.iter().any(|(m, _)| m == id) {
            self.minions.push((id.to_owned(), Value::Map(vec![])));
            if self.minions.len() > MAX_MINIONS {
                self.minions.remove(0);
            }
        }
    }

    /// `process_minion_update`: the grains of minion `id`, added when missing.
    fn set_grains(&mut self, id: &str, grains: Value) {
        self.add_minion(id);
        if let Some((_, info)) = self.minions.iter_mut().find(|(m, _)| m == id) {
            if !matches!(info, Value::Map(_)) {
                *info = Value::Map(vec![]);
            }
            value::set(info, "grains", grains);
        }
    }

    /// `{"jobs": {...}}`.
    fn jobs_message(&self) -> Value {
        map([("jobs", Value::Map(self.jobs.clone()))])
    }

    /// `publish_minions`: `{"minions": [{...info, "id": id}]}`.
    fn minions_message(&self) -> Value {
        let list = self
            .minions
            .iter()
            .map(|(id, info)| {
                let mut entry = match info {
                    Value::Map(_) => info.clone(),
                    _ => Value::Map(vec![]),
                };
                value::set(&mut entry, "id", s(id.clone()));
                entry
            })
            .collect();
        map([("minions", Value::Array(list))])
    }
}

/// A mutable field of a map value.
fn value_mut<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Value> {
    match v {
        Value::Map(entries) => entries
            .iter_mut()
            .find(|(k, _)| value::str_of(k) == Some(key))
            .map(|(_, v)| v),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(v: &Value) -> String {
        String::from_utf8(Format::Json.serialize(v)).unwrap()
    }

    fn list(ids: &[&str]) -> Value {
        Value::Array(ids.iter().map(|i| s(*i)).collect())
    }

    fn new_job(jid: &str, fun: &str, minions: &[&str]) -> Value {
        map([
            ("jid", s(jid)),
            ("tgt", s("*")),
            ("tgt_type", s("glob")),
            ("fun", s(fun)),
            ("minions", list(minions)),
            ("_stamp", s("2024-01-01T00:00:00.000000")),
        ])
    }

    fn ret(fun: &str, success: bool, value: Value) -> Value {
        map([
            ("fun", s(fun)),
            ("return", value),
            ("retcode", Value::from(0)),
            ("success", Value::Boolean(success)),
        ])
    }

    #[test]
    fn jobs_are_published_as_stock_builds_them() {
        let mut info = SaltInfo::default();
        let out = info.process("salt/job/1/new", &new_job("1", "test.ping", &["a", "b"]));
        assert_eq!(out.messages.len(), 1);
        assert_eq!(
            json(&out.messages[0]),
            r#"{"jobs": {"1": {"jid": "1", "start_time": "2024-01-01T00:00:00.000000", "minions": {"a": {"success": false}, "b": {"success": false}}, "fun": "test.ping", "tgt": "*", "tgt_type": "glob", "state": "running"}}}"#
        );
        info.process(
            "salt/job/1/ret/a",
            &ret("test.ping", true, Value::Boolean(true)),
        );
        let out = info.process(
            "salt/job/1/ret/b",
            &ret("test.ping", true, Value::Boolean(true)),
        );
        assert_eq!(
            json(&out.messages[0]),
            r#"{"jobs": {"1": {"jid": "1", "start_time": "2024-01-01T00:00:00.000000", "minions": {"a": {"success": true, "return": true, "retcode": 0}, "b": {"success": true, "return": true, "retcode": 0}}, "fun": "test.ping", "tgt": "*", "tgt_type": "glob", "state": "complete"}}}"#
        );
        // A return of a job never announced makes a job of its own.
        let out = info.process("salt/job/2/ret/c", &ret("test.ping", false, Value::Nil));
        assert!(json(&out.messages[0]).ends_with(
            r#""2": {"minions": {"c": {"return": null, "retcode": 0, "success": false}}}}}"#
        ));
    }

    #[test]
    fn grains_returns_key_and_presence_events_update_the_minions() {
        let mut info = SaltInfo::default();
        let out = info.process(
            "salt/key",
            &map([
                ("act", s("accept")),
                ("id", s("m1")),
                ("result", Value::Boolean(true)),
            ]),
        );
        assert_eq!(json(&out.messages[0]), r#"{"minions": [{"id": "m1"}]}"#);
        info.process("salt/job/3/new", &new_job("3", "grains.items", &["m1"]));
        assert!(
            info.minions.is_empty(),
            "a grains.items job starts the list afresh"
        );
        let out = info.process(
            "salt/job/3/ret/m1",
            &ret("grains.items", true, map([("os", s("Debian"))])),
        );
        assert_eq!(out.messages.len(), 2);
        assert_eq!(
            json(&out.messages[1]),
            r#"{"minions": [{"grains": {"os": "Debian"}, "id": "m1"}]}"#
        );
        let out = info.process("salt/presence/present", &map([("present", list(&["m2"]))]));
        assert_eq!(out.grains, vec!["m2".to_owned()], "m2 is new");
        assert_eq!(json(&out.messages[0]), r#"{"minions": []}"#, "m1 is gone");
        let out = info.process("salt/presence/present", &map([("present", list(&[]))]));
        assert_eq!(out, Formatted::default(), "nothing changed");
        let out = info.process("salt/key", &map([("act", s("delete")), ("id", s("m1"))]));
        assert_eq!(json(&out.messages[0]), r#"{"minions": []}"#);
    }

    #[test]
    fn events_without_the_fields_stock_reads_are_skipped() {
        let mut info = SaltInfo::default();
        for (tag, data) in [
            ("salt/job/1/new", map([("jid", s("1"))])),
            ("salt/job/1/ret/a", map([("return", Value::Nil)])),
            ("salt/job/1/ret", ret("x", true, Value::Nil)),
            ("salt/job/1", Value::Nil),
            ("salt/key", map([("act", s("accept"))])),
            ("salt/presence/present", map([("present", s("m1"))])),
            ("salt", Value::Nil),
            ("", Value::Nil),
        ] {
            assert_eq!(info.process(tag, &data), Formatted::default(), "{tag}");
        }
        assert!(info.jobs.is_empty() && info.minions.is_empty());
    }

    #[test]
    fn the_view_keeps_a_bounded_number_of_jobs() {
        let mut info = SaltInfo::default();
        for n in 0..MAX_JOBS + 10 {
            let jid = n.to_string();
            info.process(
                &format!("salt/job/{jid}/new"),
                &new_job(&jid, "test.ping", &[]),
            );
        }
        assert_eq!(info.jobs.len(), MAX_JOBS);
        assert_eq!(info.jobs[0].0, s("10"), "the oldest went first");
    }

    #[test]
    fn stream_messages_parse_back_to_their_event() {
        let ev = parse_message(b"id: 4\ndata: {\"data\": {\"a\": 1}, \"tag\": \"t\"}\n\n").unwrap();
        assert_eq!(value::get_str(&ev, "tag"), Some("t"));
        assert_eq!(parse_message(b"data: {broken\n\n"), None);
        assert_eq!(parse_message(b"\xff\xfe"), None);
        assert_eq!(parse_message(b""), None);
    }

    #[test]
    fn rendering_passes_messages_through_or_formats_them() {
        let called = std::cell::RefCell::new(Vec::new());
        let grains = |ids: Vec<String>| called.borrow_mut().extend(ids);
        let bytes = Bytes::from_static(
            b"data: {\"data\": {\"present\": [\"m9\"]}, \"tag\": \"salt/presence/present\"}\n\n",
        );
        let plain = render(bytes.clone(), None, &grains);
        assert_eq!(
            plain,
            vec![Message::Text(Utf8Bytes::from_static(
                "data: {\"data\": {\"present\": [\"m9\"]}, \"tag\": \"salt/presence/present\"}\n\n"
            ))]
        );
        assert!(called.borrow().is_empty());
        let mut info = SaltInfo::default();
        let formatted = render(bytes, Some(&mut info), &grains);
        assert_eq!(formatted, vec![Message::text(r#"{"minions": []}"#)]);
        assert_eq!(*called.borrow(), vec!["m9".to_owned()]);
    }
}
