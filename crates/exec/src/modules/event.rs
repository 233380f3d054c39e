//! `salt/modules/event.py`: fire events on the minion bus or up to the master.
//!
//! `event.fire` writes to the running minion's bus (its pull socket in `sock_dir`, or
//! `tcp_pull_port` with `ipc_mode: tcp`). `event.fire_master` does it with the
//! `fire_master` tag, so the minion daemon forwards the event; from `salt-call`
//! (`__opts__["__cli"] == "salt-call"`) or with `preload` it sends a `_minion_event`
//! request straight to the master over [`Context::master`](crate::Context::master), as
//! Salt does. Both return `True`, or `False` when the event could not be handed on (no
//! minion bus, no master channel, masterless mode). `event.send` builds the data and calls
//! one of them.
//!
//! Salt swallows every failure of these functions into `False` with a debug log line;
//! so does Halite.

use halite_bus::{BusAddr, BusClient, BusSockets};
use halite_config::{IpcMode, MasterType};
use rmpv::Value;

use crate::error::ExecError;
use crate::pyval::{py_str, text, truthy};
use crate::registry::{Export, Invocation};
use crate::Context;

pub(crate) const EXPORTS: &[Export] = &[
    ("event.fire", fire, None),
    ("event.fire_master", fire_master, None),
    ("event.send", send, None),
];

fn key(k: &str) -> Value {
    Value::from(k)
}

/// `__opts__.get(name)` as text, when it is a string.
fn opt_text(ctx: &Context, name: &str) -> Option<String> {
    ctx.opts.get(name).and_then(text).map(|t| t.into_owned())
}

fn opt_true(ctx: &Context, name: &str) -> bool {
    ctx.opts.get(name).is_some_and(truthy)
}

/// The minion bus's pull socket, as `salt.utils.event.get_event("minion", ...)` finds it.
fn minion_pull(ctx: &Context) -> Result<BusAddr, halite_bus::Error> {
    let opts = &ctx.opts;
    Ok(match opts.ipc_mode {
        IpcMode::Tcp => BusSockets::tcp(opts.tcp_pub_port, opts.tcp_pull_port).pull_addr,
        IpcMode::Ipc => {
            let hash_id = opt_text(ctx, "hash_id").unwrap_or_else(|| opts.id.clone());
            BusSockets::minion(&opts.sock_dir, &opts.hash_type, &hash_id)?.pull_addr
        }
    })
}

/// `SaltEvent("minion", ...).fire_event(data, tag)`: true once the event is written to
/// the minion bus.
fn fire_on_minion_bus(ctx: &Context, data: Value, tag: &str) -> bool {
    let addr = match minion_pull(ctx) {
        Ok(a) => a,
        Err(e) => {
            tracing::debug!("Cannot locate the minion event bus: {e}");
            return false;
        }
    };
    let max_event_size = usize::try_from(ctx.opts.max_event_size).unwrap_or(usize::MAX);
    let client = BusClient::new(max_event_size);
    let fire = move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(client.fire(&addr, tag, data))
            .map_err(|e| e.to_string())
    };
    // A runtime cannot be started on a thread that already runs one.
    let result = if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|scope| {
            scope
                .spawn(fire)
                .join()
                .unwrap_or_else(|_| Err("the event thread panicked".to_owned()))
        })
    } else {
        fire()
    };
    match result {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!("Cannot fire {tag} on the minion event bus: {e}");
            false
        }
    }
}

/// `event.fire(data, tag)`.
fn fire(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let data = inv.arg("data").clone();
    let tag = py_str(inv.arg("tag"));
    Ok(Value::Boolean(fire_data(inv.ctx, data, &tag)))
}

/// `fire_event`'s checks (non-empty tag, dict data), then the bus.
fn fire_data(ctx: &Context, data: Value, tag: &str) -> bool {
    if tag.is_empty() || !matches!(data, Value::Map(_)) {
        tracing::debug!("Not firing {tag:?}: the tag is empty or the data is not a dict");
        return false;
    }
    fire_on_minion_bus(ctx, data, tag)
}

/// `local` or `file_client: local` without `use_master_when_local`.
fn masterless(ctx: &Context) -> bool {
    (opt_true(ctx, "local") || opt_text(ctx, "file_client").as_deref() == Some("local"))
        && !opt_true(ctx, "use_master_when_local")
}

/// `event.fire_master(data, tag, preload=None)`.
fn fire_master(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let (data, tag, preload) = (
        inv.arg("data").clone(),
        inv.arg("tag").clone(),
        inv.arg("preload").clone(),
    );
    Ok(Value::Boolean(fire_master_data(
        inv.ctx, data, tag, preload,
    )))
}

fn fire_master_data(ctx: &Context, data: Value, tag: Value, preload: Value) -> bool {
    if masterless(ctx) {
        tracing::warn!(
            "Local mode detected. Event with tag {} will NOT be sent.",
            py_str(&tag)
        );
        return false;
    }
    if truthy(&preload) || opt_text(ctx, "__cli").as_deref() == Some("salt-call") {
        let mut load = vec![
            (key("id"), Value::from(ctx.id.as_str())),
            (key("tag"), tag),
            (key("data"), data),
            (key("cmd"), Value::from("_minion_event")),
        ];
        if let Value::Map(extra) = preload {
            for (k, v) in extra {
                match load.iter_mut().find(|(have, _)| *have == k) {
                    Some(slot) => slot.1 = v,
                    None => load.push((k, v)),
                }
            }
        }
        return match &ctx.master {
            Some(master) => match master.request(Value::Map(load)) {
                Ok(_) => true,
                Err(e) => {
                    tracing::debug!("fire_master: the request to the master failed: {e}");
                    false
                }
            },
            None => {
                tracing::debug!("fire_master: no channel to the master");
                false
            }
        };
    }
    let event = Value::Map(vec![
        (key("data"), data),
        (key("tag"), tag),
        (key("events"), Value::Nil),
        (key("pretag"), Value::Nil),
    ]);
    fire_on_minion_bus(ctx, event, "fire_master")
}

/// `{k: v for k, v in master_dict.items() if k in keys}`.
fn subset(keys: &[Value], dict: &Value) -> Value {
    let Value::Map(entries) = dict else {
        return Value::Map(Vec::new());
    };
    Value::Map(
        entries
            .iter()
            .filter(|(k, _)| keys.contains(k))
            .cloned()
            .collect(),
    )
}

/// `with_*`: a list picks keys of `all`, anything else truthy takes all of it.
fn selection(with: &Value, all: impl FnOnce() -> Value) -> Option<Value> {
    match with {
        Value::Array(keys) => Some(subset(keys, &all())),
        w if truthy(w) => Some(all()),
        _ => None,
    }
}

/// `dict.update`: replaces existing keys in place, appends new ones.
fn update(dict: &mut Vec<(Value, Value)>, k: Value, v: Value) {
    match dict.iter_mut().find(|(have, _)| *have == k) {
        Some(slot) => slot.1 = v,
        None => dict.push((k, v)),
    }
}

fn environ() -> Value {
    Value::Map(
        std::env::vars_os()
            .map(|(k, v)| {
                (
                    Value::from(k.to_string_lossy().into_owned()),
                    Value::from(v.to_string_lossy().into_owned()),
                )
            })
            .collect(),
    )
}

/// `event.send(tag, data=None, preload=None, with_env=False, with_grains=False,
/// with_pillar=False, with_env_opts=False, **kwargs)`.
fn send(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let ctx = inv.ctx;
    let mut data: Vec<(Value, Value)> = Vec::new();
    if let Some(env) = selection(inv.arg("with_env"), environ) {
        data.push((key("environ"), env));
    }
    if let Some(grains) = selection(inv.arg("with_grains"), || (*ctx.grains).clone()) {
        data.push((key("grains"), grains));
    }
    if let Some(pillar) = selection(inv.arg("with_pillar"), || (*ctx.pillar).clone()) {
        data.push((key("pillar"), pillar));
    }
    if truthy(inv.arg("with_env_opts")) {
        // Salt's defaults hold `saltenv: None` and `pillarenv: None`.
        let get = |name: &str| ctx.opts.get(name).cloned().unwrap_or(Value::Nil);
        data.push((key("saltenv"), get("saltenv")));
        data.push((key("pillarenv"), get("pillarenv")));
    }
    for (k, v) in inv.call.kwargs.iter().cloned() {
        update(&mut data, k, v);
    }
    if let Value::Map(extra) = inv.arg("data") {
        for (k, v) in extra.iter().cloned() {
            update(&mut data, k, v);
        }
    }
    let data = Value::Map(data);
    let tag = inv.arg("tag").clone();
    let local = (opt_true(ctx, "local")
        || opt_text(ctx, "file_client").as_deref() == Some("local")
        || ctx.opts.master_type == MasterType::Disable)
        && !opt_true(ctx, "use_master_when_local");
    let sent = if local {
        fire_data(ctx, data, &py_str(&tag))
    } else {
        fire_master_data(ctx, data, tag, inv.arg("preload").clone())
    };
    Ok(Value::Boolean(sent))
}

/// A channel that records requests, for tests of the direct path.
#[cfg(test)]
pub(crate) struct Recorder(pub std::sync::Mutex<Vec<Value>>);

#[cfg(test)]
impl crate::MasterChannel for Recorder {
    fn request(&self, load: Value) -> Result<Value, String> {
        self.0.lock().map_err(|e| e.to_string())?.push(load);
        Ok(Value::Boolean(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{JobHandle, NoJobs, Registry};
    use halite_config::MinionConfig;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    fn ctx(config: &str, dir: &std::path::Path, master: Option<Arc<Recorder>>) -> Context {
        let text = format!(
            "id: ev1\nroot_dir: {d}\nsock_dir: {d}/sock\n{config}",
            d = dir.display()
        );
        let opts = MinionConfig::from_yaml_str(&text, &dir.join("minion")).expect("config");
        Context {
            id: "ev1".into(),
            opts: Arc::new(opts),
            grains: Arc::new(Value::Map(vec![
                (key("os"), Value::from("Debian")),
                (key("id"), Value::from("ev1")),
            ])),
            pillar: Arc::new(Value::Map(vec![(key("role"), Value::from("web"))])),
            jid: None,
            pub_data: None,
            jobs: Arc::new(NoJobs),
            job: JobHandle::new(),
            master: master.map(|m| m as Arc<dyn crate::MasterChannel>),
        }
    }

    fn call(ctx: &Context, fun: &str, args: Vec<Value>) -> Value {
        Registry::builtin()
            .execute(ctx, &Value::from(fun), &Value::Array(args))
            .ret
    }

    fn kw(pairs: &[(&str, Value)]) -> Value {
        let mut m: Vec<(Value, Value)> = pairs.iter().map(|(k, v)| (key(k), v.clone())).collect();
        m.push((key("__kwarg__"), Value::Boolean(true)));
        Value::Map(m)
    }

    /// Serves a minion bus in `dir/sock` while `f` runs; returns the events that reach it
    /// (waiting for `expected` of them, then a little longer for any extra).
    fn with_bus(dir: &std::path::Path, expected: usize, f: impl FnOnce()) -> Vec<(String, Value)> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        std::fs::create_dir_all(dir.join("sock")).unwrap();
        let sockets = BusSockets::minion(&dir.join("sock"), "sha256", "ev1").unwrap();
        let server = rt
            .block_on(halite_bus::BusServer::bind(&sockets, 1 << 20))
            .unwrap();
        let mut rx = server.handle().subscribe();
        let stop = tokio_util::sync::CancellationToken::new();
        let task = rt.spawn(server.run(stop.clone()));
        f();
        let got = rt.block_on(async {
            let mut got = Vec::new();
            loop {
                let wait = if got.len() < expected {
                    Duration::from_secs(10)
                } else {
                    Duration::from_millis(200)
                };
                match tokio::time::timeout(wait, rx.recv()).await {
                    Ok(Ok(ev)) => got.push((ev.tag().to_owned(), ev.data().clone())),
                    _ => return got,
                }
            }
        });
        stop.cancel();
        let _ = rt.block_on(task);
        got
    }

    fn without_stamp(mut v: Value) -> Value {
        if let Value::Map(m) = &mut v {
            m.retain(|(k, _)| text(k).as_deref() != Some("_stamp"));
        }
        v
    }

    #[test]
    fn fire_puts_the_event_on_the_minion_bus() {
        let dir = tempfile::tempdir().unwrap();
        let c = ctx("", dir.path(), None);
        let mut ret = Value::Nil;
        let got = with_bus(dir.path(), 1, || {
            ret = call(
                &c,
                "event.fire",
                vec![
                    Value::Map(vec![(key("k"), Value::from("v"))]),
                    Value::from("my/tag"),
                ],
            );
        });
        assert_eq!(ret, Value::Boolean(true));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, "my/tag");
        assert_eq!(
            without_stamp(got[0].1.clone()),
            Value::Map(vec![(key("k"), Value::from("v"))])
        );
    }

    #[test]
    fn fire_without_a_running_minion_or_with_bad_data_is_false() {
        let dir = tempfile::tempdir().unwrap();
        let c = ctx("", dir.path(), None);
        let data = Value::Map(vec![(key("k"), Value::from(1))]);
        assert_eq!(
            call(&c, "event.fire", vec![data, Value::from("t")]),
            Value::Boolean(false)
        );
        let got = with_bus(dir.path(), 0, || {
            assert_eq!(
                call(&c, "event.fire", vec![Value::from("x"), Value::from("t")]),
                Value::Boolean(false)
            );
            assert_eq!(
                call(&c, "event.fire", vec![Value::Map(vec![]), Value::from("")]),
                Value::Boolean(false)
            );
        });
        assert!(got.is_empty());
    }

    #[test]
    fn fire_master_in_the_daemon_fires_the_fire_master_event() {
        let dir = tempfile::tempdir().unwrap();
        let c = ctx("", dir.path(), None);
        let got = with_bus(dir.path(), 1, || {
            let ret = call(
                &c,
                "event.fire_master",
                vec![Value::from("message for the master"), Value::from("mytag")],
            );
            assert_eq!(ret, Value::Boolean(true));
        });
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, "fire_master");
        assert_eq!(
            without_stamp(got[0].1.clone()),
            Value::Map(vec![
                (key("data"), Value::from("message for the master")),
                (key("tag"), Value::from("mytag")),
                (key("events"), Value::Nil),
                (key("pretag"), Value::Nil),
            ])
        );
    }

    #[test]
    fn fire_master_from_salt_call_or_with_preload_asks_the_master_directly() {
        let dir = tempfile::tempdir().unwrap();
        let rec = Arc::new(Recorder(Mutex::new(Vec::new())));
        let c = ctx("__cli: salt-call\n", dir.path(), Some(rec.clone()));
        let data = Value::Map(vec![(key("data"), Value::from("m"))]);
        assert_eq!(
            call(
                &c,
                "event.fire_master",
                vec![data.clone(), Value::from("t")]
            ),
            Value::Boolean(true)
        );
        let daemon = ctx("", dir.path(), Some(rec.clone()));
        let preload = Value::Map(vec![
            (key("tag"), Value::from("over")),
            (key("extra"), Value::from(1)),
        ]);
        assert_eq!(
            call(
                &daemon,
                "event.fire_master",
                vec![data.clone(), Value::from("t"), preload]
            ),
            Value::Boolean(true)
        );
        let sent = rec.0.lock().unwrap().clone();
        assert_eq!(
            sent,
            [
                Value::Map(vec![
                    (key("id"), Value::from("ev1")),
                    (key("tag"), Value::from("t")),
                    (key("data"), data.clone()),
                    (key("cmd"), Value::from("_minion_event")),
                ]),
                Value::Map(vec![
                    (key("id"), Value::from("ev1")),
                    (key("tag"), Value::from("over")),
                    (key("data"), data),
                    (key("cmd"), Value::from("_minion_event")),
                    (key("extra"), Value::from(1)),
                ]),
            ]
        );
        let no_channel = ctx("__cli: salt-call\n", dir.path(), None);
        assert_eq!(
            call(
                &no_channel,
                "event.fire_master",
                vec![Value::Nil, Value::from("t")]
            ),
            Value::Boolean(false)
        );
    }

    #[test]
    fn fire_master_is_refused_in_masterless_mode() {
        let dir = tempfile::tempdir().unwrap();
        let rec = Arc::new(Recorder(Mutex::new(Vec::new())));
        for config in ["local: true\n", "file_client: local\n"] {
            let c = ctx(config, dir.path(), Some(rec.clone()));
            assert_eq!(
                call(&c, "event.fire_master", vec![Value::Nil, Value::from("t")]),
                Value::Boolean(false),
                "{config}"
            );
        }
        let c = ctx(
            "local: true\nuse_master_when_local: true\n__cli: salt-call\n",
            dir.path(),
            Some(rec.clone()),
        );
        assert_eq!(
            call(&c, "event.fire_master", vec![Value::Nil, Value::from("t")]),
            Value::Boolean(true)
        );
        assert_eq!(rec.0.lock().unwrap().len(), 1);
    }

    #[test]
    fn send_builds_the_data_as_salt_and_goes_to_the_master() {
        let dir = tempfile::tempdir().unwrap();
        let rec = Arc::new(Recorder(Mutex::new(Vec::new())));
        let c = ctx("__cli: salt-call\n", dir.path(), Some(rec.clone()));
        let ret = call(
            &c,
            "event.send",
            vec![
                Value::from("myco/tag"),
                kw(&[
                    ("with_grains", Value::Array(vec![Value::from("os")])),
                    ("with_pillar", Value::Boolean(true)),
                    ("with_env_opts", Value::Boolean(true)),
                    ("foo", Value::from("Foo")),
                    (
                        "data",
                        Value::Map(vec![(key("foo"), Value::from("from data"))]),
                    ),
                ]),
            ],
        );
        assert_eq!(ret, Value::Boolean(true));
        let sent = rec.0.lock().unwrap().clone();
        assert_eq!(sent.len(), 1);
        let data = halite_proto::value::get(&sent[0], "data").unwrap();
        assert_eq!(
            *data,
            Value::Map(vec![
                (
                    key("grains"),
                    Value::Map(vec![(key("os"), Value::from("Debian"))])
                ),
                (
                    key("pillar"),
                    Value::Map(vec![(key("role"), Value::from("web"))])
                ),
                (key("saltenv"), Value::Nil),
                (key("pillarenv"), Value::Nil),
                (key("foo"), Value::from("from data")),
            ])
        );
        assert_eq!(
            halite_proto::value::get_str(&sent[0], "tag"),
            Some("myco/tag")
        );
    }

    #[test]
    fn send_with_env_picks_variables_and_stays_local_when_masterless() {
        let dir = tempfile::tempdir().unwrap();
        let c = ctx("master_type: disable\n", dir.path(), None);
        let got = with_bus(dir.path(), 1, || {
            let ret = call(
                &c,
                "event.send",
                vec![
                    Value::from("local/tag"),
                    kw(&[("with_env", Value::Array(vec![Value::from("PATH")]))]),
                ],
            );
            assert_eq!(ret, Value::Boolean(true));
        });
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, "local/tag");
        let environ = halite_proto::value::get(&got[0].1, "environ").unwrap();
        let keys: Vec<_> = environ
            .as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| py_str(k))
            .collect();
        assert_eq!(keys, ["PATH"]);
    }
}
