//! The fileserver requests of Salt's `AESFuncs`, load in, reply out, in the shapes stock
//! Salt 3008.3 sends (`salt.fileserver.Fileserver` over the `roots` backend).

use crate::listing::Listing;
use crate::roots::Roots;
use flate2::write::GzEncoder;
use flate2::Compression;
use halite_proto::value::{self, bin, map, s};
use halite_target::pyvalue;
use rmpv::Value;
use std::io::Write;

/// The backend name replies carry (`back`, the keys of `_file_envs` with `sources`).
pub const BACKEND: &str = "roots";

/// A fileserver request (the load's `cmd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// `_serve_file`: one chunk of a file.
    ServeFile,
    /// `_file_find`: where a file is, with its stat.
    FileFind,
    /// `_file_hash`: a file's hash.
    FileHash,
    /// `_file_hash_and_stat`: a file's hash and stat.
    FileHashAndStat,
    /// `_file_list`: the files of a saltenv.
    FileList,
    /// `_file_list_emptydirs`: the empty directories of a saltenv.
    FileListEmptydirs,
    /// `_dir_list`: the directories of a saltenv.
    DirList,
    /// `_symlink_list`: the symlinks of a saltenv.
    SymlinkList,
    /// `_file_envs`: the saltenvs.
    FileEnvs,
    /// `_master_tops`: always `{}` (see the crate docs).
    MasterTops,
}

impl Command {
    /// Every request by its `cmd`.
    pub const ALL: [(&'static str, Command); 10] = [
        ("_serve_file", Command::ServeFile),
        ("_file_find", Command::FileFind),
        ("_file_hash", Command::FileHash),
        ("_file_hash_and_stat", Command::FileHashAndStat),
        ("_file_list", Command::FileList),
        ("_file_list_emptydirs", Command::FileListEmptydirs),
        ("_dir_list", Command::DirList),
        ("_symlink_list", Command::SymlinkList),
        ("_file_envs", Command::FileEnvs),
        ("_master_tops", Command::MasterTops),
    ];

    /// The request `cmd` names, if it is a fileserver request.
    pub fn from_cmd(cmd: &str) -> Option<Command> {
        Self::ALL.iter().find(|(n, _)| *n == cmd).map(|(_, c)| *c)
    }
}

impl Roots {
    /// The reply to the request `cmd` with `load` (a decrypted minion load). Never fails:
    /// what Salt answers for a missing or unknown file, saltenv or field is answered.
    pub fn answer(&self, cmd: Command, load: &Value) -> Value {
        match cmd {
            Command::ServeFile => self.serve_file(load),
            Command::FileFind => self.file_find(load),
            Command::FileHash => self.file_hash(load).0,
            Command::FileHashAndStat => {
                let (hash, stat) = self.file_hash(load);
                Value::Array(vec![hash, stat])
            }
            Command::FileList => self.list(load, |l| &l.files),
            Command::FileListEmptydirs => self.list(load, |l| &l.empty_dirs),
            Command::DirList => self.list(load, |l| &l.dirs),
            Command::SymlinkList => self.symlink_list(load),
            Command::FileEnvs => self.file_envs(load),
            Command::MasterTops => Value::Map(Vec::new()),
        }
    }

    /// `_serve_file`: `{data, dest}` with up to `file_buffer_size` bytes from `loc`
    /// (gzip-compressed at the asked level, with `gzip` echoed); `{data: "", dest: ""}`
    /// for a missing field or file. A `loc` that is not a non-negative integer, or a read
    /// error, also gets the empty reply (Salt's worker raises and answers `""`).
    fn serve_file(&self, load: &Value) -> Value {
        let empty = || map([("data", s("")), ("dest", s(""))]);
        let (Some(path), Some(loc), Some(saltenv)) = (
            value::get(load, "path"),
            value::get(load, "loc"),
            value::get(load, "saltenv"),
        ) else {
            return empty();
        };
        let Some(found) = value::str_of(path).and_then(|p| self.find(p, &pyvalue::to_str(saltenv)))
        else {
            return empty();
        };
        let Some(loc) = loc.as_u64() else {
            tracing::warn!("_serve_file of {} with an unusable loc {loc}", found.rel());
            return empty();
        };
        let data = match self.read_chunk(&found, loc) {
            Ok(d) => d,
            Err(e) => {
                tracing::error!("{e}");
                return empty();
            }
        };
        let level = value::get(load, "gzip")
            .filter(|g| value::truthy(g))
            .filter(|_| !data.is_empty());
        let mut reply = vec![(s("data"), Value::Nil), (s("dest"), s(found.rel()))];
        let data = match level {
            Some(level) => match gzip(&data, level) {
                Some(z) => {
                    reply.push((s("gzip"), level.clone()));
                    z
                }
                None => {
                    tracing::warn!("_serve_file: gzip level {level} is not 1-9; sent uncompressed");
                    data
                }
            },
            None => data,
        };
        if let Some(slot) = reply.first_mut() {
            slot.1 = bin(data);
        }
        Value::Map(reply)
    }

    /// `_file_hash` (and the pair `_file_hash_and_stat` sends): `{hash_type, hsum}` and the
    /// stat list, or `""` and `None` for a missing field or file.
    fn file_hash(&self, load: &Value) -> (Value, Value) {
        let none = || (s(""), Value::Nil);
        let (Some(path), Some(saltenv)) = (value::get(load, "path"), value::get(load, "saltenv"))
        else {
            return none();
        };
        let Some(found) = value::str_of(path).and_then(|p| self.find(p, &pyvalue::to_str(saltenv)))
        else {
            return none();
        };
        match self.hash(&found) {
            Ok(hsum) => (
                map([
                    ("hash_type", s(self.options().hash_type.name())),
                    ("hsum", s(hsum)),
                ]),
                stat_value(&found.stat_list()),
            ),
            Err(e) => {
                tracing::error!("{e}");
                none()
            }
        }
    }

    /// `_file_find`: `{path, rel, stat, back}` or `{path: "", rel: ""}`. The saltenv
    /// defaults to `base`. `path` carries the relative path, not the master's absolute one
    /// (stock sends the absolute path, which only its own callers need).
    fn file_find(&self, load: &Value) -> Value {
        let not_found = || map([("path", s("")), ("rel", s(""))]);
        let Some(path) = value::get(load, "path").filter(|p| value::truthy(p)) else {
            return not_found();
        };
        let saltenv = value::get(load, "saltenv").map_or_else(|| "base".into(), pyvalue::to_str);
        match value::str_of(path).and_then(|p| self.find(p, &saltenv)) {
            Some(found) => map([
                ("path", s(found.rel())),
                ("rel", s(found.rel())),
                ("stat", stat_value(&found.stat_list())),
                ("back", s(BACKEND)),
            ]),
            None => not_found(),
        }
    }

    /// `_file_list`, `_file_list_emptydirs`, `_dir_list`: the sorted names starting with
    /// `prefix` (stripped of `/`), `[]` without a saltenv or for an unknown one.
    fn list(&self, load: &Value, pick: fn(&Listing) -> &Vec<String>) -> Value {
        let Some(listing) =
            value::get(load, "saltenv").and_then(|e| self.listing(&pyvalue::to_str(e)))
        else {
            return Value::Array(Vec::new());
        };
        let prefix = prefix(load);
        Value::Array(
            pick(&listing)
                .iter()
                .filter(|name| name.starts_with(prefix))
                .map(|name| s(name.as_str()))
                .collect(),
        )
    }

    /// `_symlink_list`: `{link: target}` for links starting with `prefix`, `{}` without a
    /// saltenv or for an unknown one.
    fn symlink_list(&self, load: &Value) -> Value {
        let Some(listing) =
            value::get(load, "saltenv").and_then(|e| self.listing(&pyvalue::to_str(e)))
        else {
            return Value::Map(Vec::new());
        };
        let prefix = prefix(load);
        Value::Map(
            listing
                .links
                .iter()
                .filter(|(name, _)| name.starts_with(prefix))
                .map(|(name, dest)| (s(name.as_str()), s(dest.as_str())))
                .collect(),
        )
    }

    /// `_file_envs`: the saltenvs (sorted; Salt's order is a set's), or with `sources`
    /// `{roots: [...]}`. `back` picks backends as Salt's `Fileserver.backends` does: a
    /// comma-separated string or a list, all names prefixed with `-` meaning "all but".
    fn file_envs(&self, load: &Value) -> Value {
        let use_roots = match value::get(load, "back").filter(|b| value::truthy(b)) {
            None => true,
            Some(back) => {
                let names: Vec<String> = match back {
                    Value::Array(items) => items
                        .iter()
                        .map(|i| pyvalue::to_str(i).into_owned())
                        .collect(),
                    other => pyvalue::to_str(other)
                        .split(',')
                        .map(str::to_owned)
                        .collect(),
                };
                if names.iter().all(|n| n.starts_with('-')) {
                    !names.iter().any(|n| n == "-roots")
                } else {
                    names.iter().any(|n| n == BACKEND)
                }
            }
        };
        let envs = if use_roots { self.envs() } else { Vec::new() };
        let list = || Value::Array(envs.iter().map(|e| s(e.as_str())).collect());
        if value::get(load, "sources").is_some_and(value::truthy) {
            if use_roots && self.options().enabled {
                map([(BACKEND, list())])
            } else {
                Value::Map(Vec::new())
            }
        } else {
            list()
        }
    }
}

/// `load.get("prefix", "").strip("/")`; a prefix that is not a string counts as none.
fn prefix(load: &Value) -> &str {
    value::get_str(load, "prefix").map_or("", |p| p.trim_matches('/'))
}

fn stat_value(stat: &[i64; 10]) -> Value {
    Value::Array(stat.iter().map(|v| Value::from(*v)).collect())
}

/// `salt.utils.gzip_util.compress(data, level)`; `None` for a level Python's `zlib` would
/// refuse (it accepts -1, its default, and 0-9; 0 never gets here: it is falsy).
fn gzip(data: &[u8], level: &Value) -> Option<Vec<u8>> {
    let level = match level.as_i64()? {
        -1 => Compression::default(),
        l @ 1..=9 => Compression::new(u32::try_from(l).ok()?),
        _ => return None,
    };
    let mut z = GzEncoder::new(Vec::with_capacity(data.len() / 2), level);
    z.write_all(data).ok()?;
    z.finish().ok()
}
