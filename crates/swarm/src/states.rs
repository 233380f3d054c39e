//! `state.apply` as a stock 3008.3 minion asks the master for it (`--simulate-states`), so
//! a swarm costs a master what a fleet applying states costs it, without running states.
//!
//! The requests are the ones a stock salt-minion sent for one warm `state.apply` of
//! bench/states.sh's tree (a top file naming `web`, `web/init.sls`, the template
//! `web/files/motd.j2`; the minion's file cache already filled), recorded at a stock master
//! by wrapping `AESFuncs.run_func`: `_master_opts`, `_pillar` (stock compiles the pillar
//! again for every `state.apply`), `_file_envs`, `_file_hash` of the top file,
//! `_master_tops`, 19 `_file_list` (one per `cp.list_master`-style lookup the state
//! compiler makes), four `_file_hash` of the sls and template files — then the `_return`,
//! sent by the caller. They go one after another, as the stock minion's job process sends
//! them. The return is three successful states without changes (a warm run), in the shape
//! `state.apply` returns, with `out: highstate`.
//!
//! Not simulated: rendering, the file cache, `_serve_file` of a cold run (a warm run sends
//! none), and failures — a request that fails is counted and the job still returns.

use crate::exec::JobReturn;
use halite_proto::value::{map, s};
use halite_proto::Value;

/// One request of a simulated `state.apply`.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// An ordinary encrypted request (the reply is opened with the session key).
    Aes(Value),
    /// `_pillar`, whose reply is the master-signed private envelope.
    Pillar(Value),
}

/// `_file_list` requests a stock minion sends per warm `state.apply` of the tree.
const FILE_LISTS: usize = 19;

/// The files the state compiler hashes, in order.
const HASHED: [&str; 4] = [
    "web.sls",
    "web/init.sls",
    "web/files/motd.j2",
    "web/files/motd.j2",
];

/// The requests of one warm `state.apply` by minion `id` with `grains`, in order.
pub fn requests(id: &str, grains: &Value) -> Vec<Request> {
    let base = || s("base");
    let mut out = vec![
        Request::Aes(map([("id", s(id)), ("cmd", s("_master_opts"))])),
        Request::Pillar(map([
            ("id", s(id)),
            ("grains", grains.clone()),
            ("saltenv", Value::Nil),
            ("pillarenv", Value::Nil),
            ("pillar_override", Value::Map(Vec::new())),
            ("extra_minion_data", Value::Map(Vec::new())),
            ("ver", s("2")),
            ("cmd", s("_pillar")),
        ])),
        Request::Aes(map([("id", s(id)), ("cmd", s("_file_envs"))])),
        Request::Aes(map([
            ("path", s("top.sls")),
            ("saltenv", base()),
            ("id", s(id)),
            ("cmd", s("_file_hash")),
        ])),
        Request::Aes(map([
            ("id", s(id)),
            ("opts", map([("id", s(id)), ("saltenv", Value::Nil)])),
            ("cmd", s("_master_tops")),
        ])),
    ];
    out.extend((0..FILE_LISTS).map(|_| {
        Request::Aes(map([
            ("saltenv", base()),
            ("prefix", s("")),
            ("id", s(id)),
            ("cmd", s("_file_list")),
        ]))
    }));
    out.extend(HASHED.iter().map(|path| {
        Request::Aes(map([
            ("path", s(*path)),
            ("saltenv", base()),
            ("id", s(id)),
            ("cmd", s("_file_hash")),
        ]))
    }));
    out
}

/// The return of a warm `state.apply`: the tree's three states, all true, no changes.
pub fn highstate_return() -> JobReturn {
    let state = |key: &str, id: &str, name: &str, comment: &str, run: i64| {
        (
            s(key),
            map([
                ("name", s(name)),
                ("changes", Value::Map(Vec::new())),
                ("result", Value::Boolean(true)),
                ("comment", s(comment)),
                ("__sls__", s("web")),
                ("__run_num__", Value::from(run)),
                ("start_time", s("00:00:00.000000")),
                ("duration", Value::F64(1.0)),
                ("__id__", s(id)),
            ]),
        )
    };
    JobReturn {
        ret: Value::Map(vec![
            state(
                "file_|-web-dir_|-/srv/site_|-directory",
                "web-dir",
                "/srv/site",
                "The directory /srv/site is in the correct state",
                0,
            ),
            state(
                "file_|-web-motd_|-/srv/site/motd_|-managed",
                "web-motd",
                "/srv/site/motd",
                "File /srv/site/motd is in the correct state",
                1,
            ),
            state(
                "cmd_|-web-reload_|-echo reloaded_|-run",
                "web-reload",
                "echo reloaded",
                "State was not run because none of the onchanges reqs changed",
                2,
            ),
        ]),
        retcode: 0,
        success: true,
        out: Some("highstate"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::value;

    #[test]
    fn a_warm_state_apply_sends_the_recorded_stock_requests_in_order() {
        let reqs = requests("m1", &map([("id", s("m1"))]));
        let cmds: Vec<&str> = reqs
            .iter()
            .map(|r| {
                let (Request::Aes(l) | Request::Pillar(l)) = r;
                value::get_str(l, "cmd").unwrap()
            })
            .collect();
        assert_eq!(cmds.len(), 5 + FILE_LISTS + HASHED.len());
        assert_eq!(
            cmds[..5],
            [
                "_master_opts",
                "_pillar",
                "_file_envs",
                "_file_hash",
                "_master_tops"
            ]
        );
        assert!(cmds[5..5 + FILE_LISTS].iter().all(|c| *c == "_file_list"));
        assert!(cmds[5 + FILE_LISTS..].iter().all(|c| *c == "_file_hash"));
        assert!(matches!(reqs[1], Request::Pillar(_)));
        assert!(reqs.iter().all(|r| {
            let (Request::Aes(l) | Request::Pillar(l)) = r;
            value::get_str(l, "id") == Some("m1")
        }));
    }

    #[test]
    fn the_return_is_three_unchanged_successful_states_for_the_highstate_outputter() {
        let r = highstate_return();
        assert_eq!((r.retcode, r.success, r.out), (0, true, Some("highstate")));
        let Value::Map(states) = &r.ret else {
            panic!("not a map")
        };
        assert_eq!(states.len(), 3);
        for (_, st) in states {
            assert_eq!(value::get(st, "result"), Some(&Value::Boolean(true)));
            assert_eq!(value::get(st, "changes"), Some(&Value::Map(Vec::new())));
        }
    }
}
