//! The fileserver requests (`_serve_file`, `_file_hash`, `_file_list`, ..., `_master_tops`):
//! answered by the `roots` backend of `halite-fileserver`, which holds all the logic
//! (paths, saltenvs, symlinks, ignore rules, caches) and never reads outside the roots.

use crate::dispatch::{AesCall, AesReply};
use crate::Master;
use halite_fileserver::Command;
use halite_proto::value;
use halite_proto::Value;

impl Master {
    /// Every command of [`Command::ALL`] lands here (see the table in [`crate::dispatch`]).
    pub(crate) fn handle_fileserver(&self, call: AesCall<'_>) -> AesReply {
        let cmd = value::get_str(&call.load, "cmd").unwrap_or("");
        match Command::from_cmd(cmd) {
            Some(command) => AesReply::Send(self.fileserver.answer(command, &call.load)),
            None => AesReply::Send(Value::Map(vec![])),
        }
    }

    /// The saltenvs for `_master_opts`' `file_roots`: each mapped to an empty list, as Salt
    /// hides the directories.
    pub(crate) fn file_roots_for_minions(&self) -> Value {
        Value::Map(
            self.fileserver
                .envs()
                .into_iter()
                .map(|env| (value::s(env), Value::Array(vec![])))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::TestMaster;
    use halite_proto::value::{self, map, s};
    use halite_proto::Value;

    fn master_with_roots() -> (TestMaster, tempfile::TempDir) {
        let srv = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(srv.path().join("base/web")).unwrap();
        std::fs::write(srv.path().join("base/top.sls"), "base:\n  '*': [web]\n").unwrap();
        std::fs::write(srv.path().join("base/web/init.sls"), "web: {}\n").unwrap();
        std::fs::write(srv.path().join("secret"), "no\n").unwrap();
        let tm = TestMaster::new(&format!(
            "file_roots:\n  base: [{b}]\n  __env__: [{e}]\nfile_buffer_size: 4\n",
            b = srv.path().join("base").display(),
            e = srv.path().join("envs/__env__").display(),
        ));
        (tm, srv)
    }

    #[test]
    fn a_minion_gets_listings_hashes_and_chunks_of_the_roots() {
        let (tm, _srv) = master_with_roots();
        let m = tm.minion("m1");
        let list = m.call(
            &tm,
            map([
                ("cmd", s("_file_list")),
                ("saltenv", s("base")),
                ("prefix", s("")),
            ]),
        );
        assert_eq!(list, Value::Array(vec![s("top.sls"), s("web/init.sls")]));
        let envs = m.call(&tm, map([("cmd", s("_file_envs"))]));
        assert_eq!(envs, Value::Array(vec![s("__env__"), s("base")]));
        let hash = m.call(
            &tm,
            map([
                ("cmd", s("_file_hash")),
                ("path", s("top.sls")),
                ("saltenv", s("base")),
            ]),
        );
        assert_eq!(value::get_str(&hash, "hash_type"), Some("sha256"));
        let chunk = m.call(
            &tm,
            map([
                ("cmd", s("_serve_file")),
                ("path", s("web/init.sls")),
                ("saltenv", s("base")),
                ("loc", Value::from(4)),
            ]),
        );
        assert_eq!(
            chunk,
            map([
                ("data", value::bin(b" {}\n".to_vec())),
                ("dest", s("web/init.sls"))
            ])
        );
        let tops = m.call(&tm, map([("cmd", s("_master_tops")), ("id", s("m1"))]));
        assert_eq!(tops, Value::Map(vec![]));
    }

    #[test]
    fn traversal_through_the_request_port_gets_nothing() {
        let (tm, _srv) = master_with_roots();
        let m = tm.minion("m1");
        for (path, saltenv) in [
            ("../secret", "base"),
            ("secret", ".."),
            ("/etc/passwd", "base"),
        ] {
            let reply = m.call(
                &tm,
                map([
                    ("cmd", s("_serve_file")),
                    ("path", s(path)),
                    ("saltenv", s(saltenv)),
                    ("loc", Value::from(0)),
                ]),
            );
            assert_eq!(
                reply,
                map([("data", s("")), ("dest", s(""))]),
                "{path} in {saltenv}"
            );
        }
    }

    #[test]
    fn master_opts_names_the_saltenvs_without_their_directories() {
        let (tm, _srv) = master_with_roots();
        let m = tm.minion("m1");
        let opts = m.call(
            &tm,
            map([("cmd", s("_master_opts")), ("env_only", Value::from(true))]),
        );
        assert_eq!(
            value::get(&opts, "file_roots"),
            Some(&map([
                ("__env__", Value::Array(vec![])),
                ("base", Value::Array(vec![]))
            ]))
        );
    }
}
