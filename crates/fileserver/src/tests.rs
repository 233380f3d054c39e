//! Request→reply tests of the backend on real directories: reply shapes, chunking,
//! hashing, listings, and everything that must not leave the roots.

use crate::{Command, Options, Roots};
use halite_proto::value::{self, map, s};
use rmpv::Value;
use std::fs;
use std::io::Read;
use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::time::Duration;

/// `tmp/srv/salt` (base), `tmp/srv/extra` (base's second root), `tmp/envs/__env__`
/// (the `__env__` roots), and `tmp/secret` outside every root.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let f = Fixture { dir };
        fs::create_dir_all(f.base().join("web/files")).unwrap();
        fs::create_dir_all(f.base().join("empty")).unwrap();
        fs::create_dir_all(f.path("srv/extra")).unwrap();
        fs::create_dir_all(f.path("envs/dev")).unwrap();
        fs::write(f.base().join("top.sls"), "base:\n  '*': [web]\n").unwrap();
        fs::write(f.base().join("web/init.sls"), "web: {}\n").unwrap();
        fs::write(f.base().join("web/files/abc"), "abc").unwrap();
        fs::write(f.path("srv/extra/top.sls"), "shadowed\n").unwrap();
        fs::write(f.path("srv/extra/only-extra"), "extra\n").unwrap();
        fs::write(f.path("envs/dev/dev.sls"), "dev\n").unwrap();
        fs::write(f.path("secret"), "the secret\n").unwrap();
        f
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn base(&self) -> PathBuf {
        self.path("srv/salt")
    }

    fn options(&self) -> Options {
        Options {
            file_roots: vec![
                ("base".to_owned(), vec![self.base(), self.path("srv/extra")]),
                ("__env__".to_owned(), vec![self.path("envs/__env__")]),
            ],
            list_check_interval: Duration::ZERO,
            ..Options::default()
        }
    }

    fn roots(&self) -> Roots {
        Roots::new(self.options())
    }
}

fn ask(roots: &Roots, cmd: &str, fields: &[(&str, Value)]) -> Value {
    let mut load = vec![(s("cmd"), s(cmd))];
    load.extend(fields.iter().map(|(k, v)| (s(*k), v.clone())));
    roots.answer(Command::from_cmd(cmd).unwrap(), &Value::Map(load))
}

fn serve(roots: &Roots, path: &str, saltenv: &str, loc: u64) -> Value {
    ask(
        roots,
        "_serve_file",
        &[
            ("path", s(path)),
            ("saltenv", s(saltenv)),
            ("loc", Value::from(loc)),
        ],
    )
}

fn hash(roots: &Roots, path: &str, saltenv: &str) -> Value {
    ask(
        roots,
        "_file_hash",
        &[("path", s(path)), ("saltenv", s(saltenv))],
    )
}

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|i| value::str_of(i).unwrap().to_owned())
            .collect(),
        other => panic!("not a list: {other}"),
    }
}

fn empty_serve() -> Value {
    map([("data", s("")), ("dest", s(""))])
}

/// Asserts that nothing of `path` in `saltenv` is served, hashed or found.
fn assert_refused(roots: &Roots, path: &str, saltenv: &str) {
    assert_eq!(
        serve(roots, path, saltenv, 0),
        empty_serve(),
        "{path:?} in {saltenv:?}"
    );
    assert_eq!(hash(roots, path, saltenv), s(""), "{path:?} in {saltenv:?}");
    assert_eq!(
        ask(
            roots,
            "_file_hash_and_stat",
            &[("path", s(path)), ("saltenv", s(saltenv))]
        ),
        Value::Array(vec![s(""), Value::Nil])
    );
    assert_eq!(
        ask(
            roots,
            "_file_find",
            &[("path", s(path)), ("saltenv", s(saltenv))]
        ),
        map([("path", s("")), ("rel", s(""))]),
        "{path:?} in {saltenv:?}"
    );
}

#[test]
fn traversal_absolute_paths_and_nul_bytes_never_reach_outside_the_roots() {
    let f = Fixture::new();
    let roots = f.roots();
    let secret = f.path("secret");
    for path in [
        "../../secret",
        "../secret",
        "web/../../../secret",
        "web/files/../../../../secret",
        secret.to_str().unwrap(),
        "/etc/passwd",
        "../../../../../../../../etc/passwd",
        "top.sls\0",
        "\0",
        "",
        ".",
        "web/..",
        "top.sls?saltenv=../..",
        "|../../secret",
    ] {
        assert_refused(&roots, path, "base");
    }
    // The positive control: the same requests reach files inside the roots.
    assert_eq!(
        value::get_str(&hash(&roots, "top.sls", "base"), "hash_type"),
        Some("sha256")
    );
}

#[test]
fn saltenv_names_that_would_move_an_env_root_are_unknown() {
    let f = Fixture::new();
    let roots = f.roots();
    // `__env__` → `tmp/envs/..` = `tmp`, where `secret` is: Salt serves it.
    for saltenv in ["..", "../..", "dev/../..", "a/b", "", ".", "x\0y"] {
        assert_refused(&roots, "secret", saltenv);
        assert_eq!(
            ask(&roots, "_file_list", &[("saltenv", s(saltenv))]),
            Value::Array(vec![]),
            "{saltenv:?}"
        );
    }
    assert_refused(&roots, "secret?saltenv=..", "base");
    // A plain name maps onto `__env__`.
    assert_eq!(
        value::get_bytes(&serve(&roots, "dev.sls", "dev", 0), "data"),
        Some(&b"dev\n"[..])
    );
    assert_eq!(
        value::get_bytes(&serve(&roots, "dev.sls?saltenv=dev", "base", 0), "data"),
        Some(&b"dev\n"[..])
    );
    assert_eq!(
        strings(&ask(&roots, "_file_list", &[("saltenv", s("dev"))])),
        ["dev.sls"]
    );
}

#[test]
fn an_unknown_saltenv_without_env_wildcard_serves_nothing() {
    let f = Fixture::new();
    let mut opts = f.options();
    opts.file_roots.retain(|(e, _)| e == "base");
    let roots = Roots::new(opts);
    assert_refused(&roots, "top.sls", "dev");
    assert_eq!(
        ask(&roots, "_file_list", &[("saltenv", s("dev"))]),
        Value::Array(vec![])
    );
    assert_eq!(
        ask(&roots, "_symlink_list", &[("saltenv", s("dev"))]),
        Value::Map(vec![])
    );
}

#[test]
fn symlinks_out_of_a_root_are_followed_only_when_followsymlinks_is_on() {
    let f = Fixture::new();
    symlink(f.path("secret"), f.base().join("out-link")).unwrap();
    symlink(f.path("envs"), f.base().join("out-dir")).unwrap();
    symlink("web/files/abc", f.base().join("in-link")).unwrap();

    let following = f.roots();
    assert_eq!(
        value::get_bytes(&serve(&following, "out-link", "base", 0), "data"),
        Some(&b"the secret\n"[..]),
        "links in file_roots are the admin's, followed as Salt does"
    );

    let mut opts = f.options();
    opts.follow_symlinks = false;
    let confined = Roots::new(opts);
    assert_refused(&confined, "out-link", "base");
    assert_refused(&confined, "out-dir/dev/dev.sls", "base");
    assert_eq!(
        value::get_bytes(&serve(&confined, "in-link", "base", 0), "data"),
        Some(&b"abc"[..]),
        "a link inside the root is served"
    );
    let listed = strings(&ask(&confined, "_file_list", &[("saltenv", s("base"))]));
    assert!(
        !listed.iter().any(|f| f.starts_with("out-dir/")),
        "{listed:?}"
    );
}

#[test]
fn with_ignoresymlinks_no_path_through_a_link_is_listed_or_served() {
    let f = Fixture::new();
    symlink("web/files/abc", f.base().join("in-link")).unwrap();
    symlink("web", f.base().join("web-link")).unwrap();
    let mut opts = f.options();
    opts.ignore_symlinks = true;
    let roots = Roots::new(opts);
    assert_refused(&roots, "in-link", "base");
    assert_refused(&roots, "web-link/init.sls", "base");
    assert!(
        value::get_bytes(&serve(&roots, "web/init.sls", "base", 0), "data")
            .is_some_and(|d| !d.is_empty())
    );
    let listed = strings(&ask(&roots, "_file_list", &[("saltenv", s("base"))]));
    assert!(!listed.iter().any(|f| f.contains("link")), "{listed:?}");
}

#[test]
fn ignored_files_and_files_in_ignored_directories_are_neither_listed_nor_served() {
    let f = Fixture::new();
    fs::create_dir(f.base().join(".git")).unwrap();
    fs::write(f.base().join(".git/config"), "[core]\n").unwrap();
    fs::write(f.base().join("web/x.swp"), "swap").unwrap();
    let mut opts = f.options();
    opts.ignore_glob = vec!["*.swp".to_owned()];
    opts.ignore_regex = vec![std::sync::Arc::new(
        halite_target::pyre::PyRegex::new(r"/\.git($|/)", halite_target::pyre::Anchor::Search)
            .unwrap(),
    )];
    let roots = Roots::new(opts);
    assert_refused(&roots, ".git/config", "base");
    assert_refused(&roots, "web/x.swp", "base");
    let listed = strings(&ask(&roots, "_file_list", &[("saltenv", s("base"))]));
    assert!(
        !listed
            .iter()
            .any(|f| f.contains(".git") || f.ends_with(".swp")),
        "{listed:?}"
    );
}

#[test]
fn special_files_are_refused_without_blocking() {
    let f = Fixture::new();
    let fifo = f.base().join("pipe");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    assert_refused(&f.roots(), "pipe", "base");
    assert_refused(&f.roots(), "web", "base");
}

#[test]
fn serve_file_sends_chunks_of_file_buffer_size_until_an_empty_one() {
    let f = Fixture::new();
    let content: Vec<u8> = (0..2500u32).map(|i| (i * 7 % 251) as u8).collect();
    fs::write(f.base().join("web/files/blob"), &content).unwrap();
    let mut opts = f.options();
    opts.file_buffer_size = 1000;
    let roots = Roots::new(opts);
    let mut got = Vec::new();
    let mut sizes = Vec::new();
    loop {
        let reply = serve(&roots, "web/files/blob", "base", got.len() as u64);
        assert_eq!(value::get_str(&reply, "dest"), Some("web/files/blob"));
        let Some(Value::Binary(data)) = value::get(&reply, "data") else {
            panic!("data is not bin: {reply}");
        };
        sizes.push(data.len());
        if data.is_empty() {
            break;
        }
        got.extend_from_slice(data);
    }
    assert_eq!(sizes, [1000, 1000, 500, 0]);
    assert_eq!(got, content);
    // Past the end: an empty chunk, still naming the file.
    let reply = serve(&roots, "web/files/blob", "base", 10_000);
    assert_eq!(value::get(&reply, "data"), Some(&Value::Binary(vec![])));
}

#[test]
fn a_100_mb_file_is_served_in_bounded_chunks_and_its_hash_matches() {
    let f = Fixture::new();
    let path = f.base().join("big.bin");
    let file = fs::File::create(&path).unwrap();
    file.set_len(100 << 20).unwrap();
    use std::os::unix::fs::FileExt;
    for (i, off) in [0u64, 1 << 20, 77_777_777, (100 << 20) - 3]
        .into_iter()
        .enumerate()
    {
        file.write_all_at(&[i as u8 + 1; 3], off).unwrap();
    }
    let roots = f.roots();
    let mut hasher = openssl::hash::Hasher::new(openssl::hash::MessageDigest::sha256()).unwrap();
    let (mut loc, mut chunks) = (0u64, 0);
    loop {
        let reply = serve(&roots, "big.bin", "base", loc);
        let data = value::get_bytes(&reply, "data").unwrap();
        assert!(data.len() <= 1 << 20, "a chunk is at most file_buffer_size");
        if data.is_empty() {
            break;
        }
        hasher.update(data).unwrap();
        loc += data.len() as u64;
        chunks += 1;
    }
    assert_eq!((loc, chunks), (100 << 20, 100));
    let served = hex::encode(hasher.finish().unwrap());
    assert_eq!(
        value::get_str(&hash(&roots, "big.bin", "base"), "hsum"),
        Some(served.as_str())
    );
}

#[test]
fn gzip_chunks_decompress_to_the_data_and_an_invalid_level_is_sent_plain() {
    let f = Fixture::new();
    let roots = f.roots();
    let load = |level: i64| {
        ask(
            &roots,
            "_serve_file",
            &[
                ("path", s("top.sls")),
                ("saltenv", s("base")),
                ("loc", Value::from(0)),
                ("gzip", Value::from(level)),
            ],
        )
    };
    let reply = load(5);
    assert_eq!(value::get(&reply, "gzip"), Some(&Value::from(5)));
    let mut plain = Vec::new();
    flate2::read::GzDecoder::new(value::get_bytes(&reply, "data").unwrap())
        .read_to_end(&mut plain)
        .unwrap();
    assert_eq!(plain, fs::read(f.base().join("top.sls")).unwrap());
    let reply = load(12);
    assert_eq!(value::get(&reply, "gzip"), None);
    assert_eq!(
        value::get_bytes(&reply, "data"),
        Some(&fs::read(f.base().join("top.sls")).unwrap()[..])
    );
}

#[test]
fn serve_file_without_its_fields_or_with_a_bad_loc_answers_nothing() {
    let f = Fixture::new();
    let roots = f.roots();
    assert_eq!(
        ask(
            &roots,
            "_serve_file",
            &[("path", s("top.sls")), ("saltenv", s("base"))]
        ),
        empty_serve()
    );
    assert_eq!(
        ask(
            &roots,
            "_serve_file",
            &[("path", s("top.sls")), ("loc", Value::from(0))]
        ),
        empty_serve()
    );
    for loc in [Value::from(-1), s("0"), Value::F64(1.5), Value::Nil] {
        let reply = ask(
            &roots,
            "_serve_file",
            &[
                ("path", s("top.sls")),
                ("saltenv", s("base")),
                ("loc", loc.clone()),
            ],
        );
        assert_eq!(reply, empty_serve(), "loc {loc}");
    }
    assert_eq!(
        ask(
            &roots,
            "_serve_file",
            &[
                ("path", Value::from(3)),
                ("saltenv", s("base")),
                ("loc", Value::from(0))
            ]
        ),
        empty_serve()
    );
}

#[test]
fn file_hash_uses_the_configured_hash_type() {
    let f = Fixture::new();
    for (name, hsum) in [
        ("md5", "900150983cd24fb0d6963f7d28e17f72"),
        ("sha1", "a9993e364706816aba3e25717850c26c9cd0d89d"),
        ("sha224", "23097d223405d8228642a477bda255b32aadbce4bda0b3f7e36c9da7"),
        ("sha256", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        (
            "sha384",
            "cb00753f45a35e8bb5a03d699ac65007272c32ab0eded1631a8b605a43ff5bed8086072ba1e7cc2358baeca134c825a7",
        ),
        (
            "sha512",
            "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f",
        ),
    ] {
        let mut opts = f.options();
        opts.hash_type = crate::HashType::parse(name).unwrap();
        let roots = Roots::new(opts);
        assert_eq!(
            hash(&roots, "web/files/abc", "base"),
            map([("hash_type", s(name)), ("hsum", s(hsum))])
        );
    }
}

#[test]
fn a_changed_file_gets_a_new_hash() {
    let f = Fixture::new();
    let roots = f.roots();
    let before = hash(&roots, "web/files/abc", "base");
    assert_eq!(hash(&roots, "web/files/abc", "base"), before, "cached");
    fs::write(f.base().join("web/files/abc"), "abcd").unwrap();
    let after = hash(&roots, "web/files/abc", "base");
    assert_eq!(
        value::get_str(&after, "hsum"),
        Some("88d4266fd4e6338d13b845fcf289579d209c897823b9217da3e161936f031589")
    );
}

#[test]
fn hash_and_stat_and_find_carry_salts_stat_list() {
    let f = Fixture::new();
    let roots = f.roots();
    let reply = ask(
        &roots,
        "_file_hash_and_stat",
        &[("path", s("web/files/abc")), ("saltenv", s("base"))],
    );
    let Value::Array(pair) = reply else {
        panic!("not a pair")
    };
    assert_eq!(value::get_str(&pair[0], "hash_type"), Some("sha256"));
    let Value::Array(stat) = &pair[1] else {
        panic!("no stat list")
    };
    assert_eq!(stat.len(), 10);
    assert_eq!(stat[6], Value::from(3), "st_size");
    assert_eq!(
        stat[0].as_u64().unwrap() & 0o170000,
        0o100000,
        "a regular file's st_mode"
    );

    let found = ask(&roots, "_file_find", &[("path", s("web//files/./abc"))]);
    assert_eq!(
        value::get_str(&found, "rel"),
        Some("web/files/abc"),
        "saltenv defaults to base"
    );
    assert_eq!(
        value::get_str(&found, "path"),
        Some("web/files/abc"),
        "no absolute master path"
    );
    assert_eq!(value::get_str(&found, "back"), Some("roots"));
    assert_eq!(value::get(&found, "stat"), Some(&pair[1]));
}

#[test]
fn the_first_root_holding_a_file_wins_and_index_picks_a_root() {
    let f = Fixture::new();
    let roots = f.roots();
    let data =
        |path: &str| value::get_bytes(&serve(&roots, path, "base", 0), "data").map(<[u8]>::to_vec);
    assert_eq!(
        data("top.sls").unwrap(),
        fs::read(f.base().join("top.sls")).unwrap()
    );
    assert_eq!(data("top.sls?index=1").unwrap(), b"shadowed\n");
    assert_eq!(data("top.sls?index=-1").unwrap(), b"shadowed\n");
    assert_eq!(data("only-extra").unwrap(), b"extra\n");
    assert_eq!(serve(&roots, "top.sls?index=2", "base", 0), empty_serve());
}

#[test]
fn listings_merge_the_roots_and_filter_by_prefix() {
    let f = Fixture::new();
    symlink("web/files/abc", f.base().join("in-link")).unwrap();
    let roots = f.roots();
    let list = |cmd: &str, prefix: &str| {
        ask(
            &roots,
            cmd,
            &[("saltenv", s("base")), ("prefix", s(prefix))],
        )
    };
    assert_eq!(
        strings(&list("_file_list", "")),
        [
            "in-link",
            "only-extra",
            "top.sls",
            "web/files/abc",
            "web/init.sls"
        ]
    );
    assert_eq!(
        strings(&list("_file_list", "/web/")),
        ["web/files/abc", "web/init.sls"]
    );
    assert_eq!(
        strings(&list("_dir_list", "")),
        ["empty", "web", "web/files"]
    );
    assert_eq!(strings(&list("_file_list_emptydirs", "")), ["empty"]);
    assert_eq!(
        list("_symlink_list", ""),
        map([("in-link", s("web/files/abc"))])
    );
    assert_eq!(list("_symlink_list", "web"), Value::Map(vec![]));
    assert_eq!(
        ask(&roots, "_file_list", &[]),
        Value::Array(vec![]),
        "no saltenv"
    );
    assert_eq!(ask(&roots, "_symlink_list", &[]), Value::Map(vec![]));
}

#[test]
fn a_new_file_is_listed_and_many_requests_share_one_walk() {
    let f = Fixture::new();
    let mut opts = f.options();
    opts.list_check_interval = Duration::from_secs(3600);
    let roots = Roots::new(opts);
    for _ in 0..10_000 {
        ask(&roots, "_file_list", &[("saltenv", s("base"))]);
    }
    assert_eq!(roots.walks(), 1);

    let roots = f.roots();
    ask(&roots, "_file_list", &[("saltenv", s("base"))]);
    fs::write(f.base().join("web/new.sls"), "").unwrap();
    let listed = strings(&ask(&roots, "_file_list", &[("saltenv", s("base"))]));
    assert!(listed.contains(&"web/new.sls".to_owned()), "{listed:?}");
}

#[test]
fn file_envs_are_sorted_and_follow_back_and_sources() {
    let f = Fixture::new();
    let roots = f.roots();
    let envs = |fields: &[(&str, Value)]| ask(&roots, "_file_envs", fields);
    assert_eq!(strings(&envs(&[])), ["__env__", "base"]);
    assert_eq!(
        envs(&[("sources", Value::from(true))]),
        map([("roots", envs(&[]))])
    );
    assert_eq!(
        strings(&envs(&[("back", s("roots,gitfs"))])),
        ["__env__", "base"]
    );
    assert_eq!(envs(&[("back", s("gitfs"))]), Value::Array(vec![]));
    assert_eq!(envs(&[("back", s("-roots"))]), Value::Array(vec![]));
    assert_eq!(
        strings(&envs(&[("back", Value::Array(vec![s("-gitfs")]))])),
        ["__env__", "base"]
    );
}

#[test]
fn master_tops_is_empty_and_a_disabled_backend_serves_nothing() {
    let f = Fixture::new();
    assert_eq!(
        ask(&f.roots(), "_master_tops", &[("id", s("m1"))]),
        Value::Map(vec![])
    );
    let mut opts = f.options();
    opts.enabled = false;
    let roots = Roots::new(opts);
    assert_refused(&roots, "top.sls", "base");
    assert_eq!(ask(&roots, "_file_envs", &[]), Value::Array(vec![]));
    assert_eq!(
        ask(&roots, "_file_list", &[("saltenv", s("base"))]),
        Value::Array(vec![])
    );
}

#[test]
fn every_command_name_maps_to_its_request() {
    for (name, cmd) in Command::ALL {
        assert_eq!(Command::from_cmd(name), Some(cmd));
    }
    assert_eq!(Command::from_cmd("_pillar"), None);
}

#[test]
fn non_string_saltenvs_are_read_as_python_str() {
    let f = Fixture::new();
    fs::create_dir_all(f.path("envs/1")).unwrap();
    fs::write(f.path("envs/1/one.sls"), "").unwrap();
    let roots = f.roots();
    assert_eq!(
        strings(&ask(&roots, "_file_list", &[("saltenv", Value::from(1))])),
        ["one.sls"]
    );
    assert_eq!(
        ask(&roots, "_file_list", &[("saltenv", Value::Nil)]),
        Value::Array(vec![])
    );
}
