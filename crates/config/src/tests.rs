//! Loading whole configurations, checked against what the stock Salt 3008.3 in the venv
//! produces for the same files (captured with `master_config`/`minion_config`).

use std::fs;
use std::path::{Path, PathBuf};

use rmpv::Value;

use crate::{
    generate_minion_id, ConfigError, EncryptionAlgorithm, IdSource, IpcMode, LogLevel, Master,
    MasterConfig, MasterType, MinionConfig, Origin, SigningAlgorithm,
};
use halite_output::py_repr;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    fs::write(&path, text).unwrap();
    path
}

fn yaml(text: &str) -> Value {
    crate::yaml::load(text).unwrap()
}

/// Compares every option of `raw` with the Salt fixture (`option<TAB>repr`).
fn assert_matches_salt_fixture(raw: &Value, fixture: &str) {
    let Value::Map(pairs) = raw else {
        panic!("raw is not a map")
    };
    let mut checked = 0;
    for line in fixture.lines() {
        let (key, want) = line.split_once('\t').unwrap();
        let got = pairs
            .iter()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| py_repr(v))
            .unwrap_or_else(|| "<absent>".to_owned());
        assert_eq!(got, want, "option {key}");
        checked += 1;
    }
    assert!(checked > 300, "only {checked} options checked");
}

#[test]
fn master_defaults_equal_salts_applied_defaults() {
    let cfg = MasterConfig::from_yaml_str(
        "root_dir: /halite-root\nid: fixture\n",
        Path::new("/nonexistent/master"),
    )
    .unwrap();
    assert_matches_salt_fixture(
        &cfg.raw,
        include_str!("../tests/data/salt_master_defaults.tsv"),
    );
}

#[test]
fn minion_defaults_equal_salts_applied_defaults() {
    let cfg = MinionConfig::from_yaml_str(
        "root_dir: /halite-root\nid: fixture\n",
        Path::new("/nonexistent/minion"),
    )
    .unwrap();
    assert_matches_salt_fixture(
        &cfg.raw,
        include_str!("../tests/data/salt_minion_defaults.tsv"),
    );
}

#[test]
fn missing_master_file_means_salt_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = MasterConfig::load(dir.path()).unwrap();
    // Salt's id rules read the host's cached minion id (`/etc/salt/minion_id`) when there
    // is one: a host with Salt installed has it.
    let cached = Path::new("/etc/salt/minion_id");
    match std::fs::read_to_string(cached) {
        Ok(text) => {
            let id = text.lines().next().unwrap_or("").trim().to_owned();
            assert_eq!(cfg.id, format!("{id}_master"));
            assert_eq!(cfg.id_source, IdSource::Cached(cached.to_owned()));
        }
        Err(_) => {
            assert_eq!(cfg.id, format!("{}_master", generate_minion_id()));
            assert_eq!(cfg.id_source, IdSource::Generated);
        }
    }
    assert_eq!(cfg.interface, "0.0.0.0");
    assert!(!cfg.ipv6);
    assert_eq!((cfg.publish_port, cfg.ret_port), (4505, 4506));
    assert_eq!(cfg.root_dir, Path::new("/"));
    assert_eq!(cfg.pki_dir, Path::new("/etc/salt/pki/master"));
    assert_eq!(cfg.cachedir, Path::new("/var/cache/salt/master"));
    assert_eq!(cfg.sock_dir, Path::new("/var/run/salt/master"));
    assert_eq!(cfg.token_dir, Path::new("/var/cache/salt/master/tokens"));
    assert_eq!(cfg.pidfile, Path::new("/var/run/salt-master.pid"));
    assert!(!cfg.auto_accept && !cfg.open_mode);
    assert_eq!(
        (cfg.autosign_file.clone(), cfg.autoreject_file.clone()),
        (None, None)
    );
    assert_eq!(cfg.keep_jobs_seconds, 86400);
    assert_eq!(cfg.worker_threads, 5);
    assert_eq!(cfg.log_level, LogLevel::Warning);
    assert_eq!(cfg.log_level_logfile, None);
    assert_eq!(cfg.log_file, "/var/log/salt/master");
    assert_eq!(cfg.key_logfile, "/var/log/salt/key");
    assert_eq!(cfg.max_event_size, 1_048_576);
    assert!(cfg.sign_pub_messages);
    assert_eq!((cfg.timeout, cfg.gather_job_timeout), (5, 10));
    assert_eq!(cfg.hash_type, "sha256");
    assert_eq!(cfg.keysize, 2048);
    assert_eq!(cfg.publish_session, 86400);
    assert_eq!(cfg.minimum_auth_version, 3);
    assert_eq!(cfg.max_minions, 0);
    assert_eq!(cfg.request_server_ttl, 0);
    assert!(cfg.auth_events && cfg.minion_data_cache && cfg.job_cache);
    assert_eq!(
        cfg.publish_signing_algorithm,
        SigningAlgorithm::Pkcs1v15Sha1
    );
    assert_eq!(
        cfg.cluster_encryption_algorithm,
        EncryptionAlgorithm::OaepSha1
    );
    // Salt keeps its default conf_file when the main file is missing.
    assert_eq!(cfg.conf_file, Path::new("/etc/salt/master"));
    assert!(cfg.unknown_options().is_empty());
    assert!(cfg.warnings().is_empty(), "{:?}", cfg.warnings());
}

#[test]
fn missing_minion_file_means_salt_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = MinionConfig::load(dir.path()).unwrap();
    assert_eq!(cfg.id, generate_minion_id());
    assert_eq!(cfg.master, Master::Single("salt".to_owned()));
    assert_eq!(cfg.master_port, 4506);
    assert_eq!(cfg.publish_port, None);
    assert_eq!(cfg.ipv6, None);
    assert_eq!(cfg.pki_dir, Path::new("/etc/salt/pki/minion"));
    assert_eq!(cfg.cachedir, Path::new("/var/cache/salt/minion"));
    assert_eq!(cfg.sock_dir, Path::new("/var/run/salt/minion"));
    assert_eq!(cfg.grains, Value::Map(Vec::new()));
    assert_eq!(
        (cfg.acceptance_wait_time, cfg.acceptance_wait_time_max),
        (10.0, 0.0)
    );
    assert_eq!(
        (cfg.auth_tries, cfg.auth_timeout, cfg.random_reauth_delay),
        (7, 5, 10)
    );
    assert_eq!(cfg.log_file, "/var/log/salt/minion");
    assert_eq!(cfg.key_logfile, None);
    assert_eq!(cfg.encryption_algorithm, EncryptionAlgorithm::OaepSha1);
    assert_eq!(cfg.signing_algorithm, SigningAlgorithm::Pkcs1v15Sha1);
    assert_eq!(cfg.master_type, MasterType::Str);
    assert_eq!(cfg.ipc_mode, IpcMode::Ipc);
    assert_eq!((cfg.tcp_pub_port, cfg.tcp_pull_port), (4510, 4511));
    assert_eq!(cfg.max_event_size, 1_048_576);
    assert_eq!(cfg.conf_file, Path::new("/etc/salt/minion"));
    assert!(cfg.warnings().is_empty(), "{:?}", cfg.warnings());
}

#[test]
fn empty_files_are_fine() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "master", "");
    write(dir.path(), "master.d/empty.conf", "# nothing here\n");
    let cfg = MasterConfig::load(dir.path()).unwrap();
    assert_eq!(cfg.conf_file, dir.path().join("master"));
    assert_eq!(cfg.publish_port, 4505);
}

/// The same files as a capture from Salt 3008.3: master.d files merge into each other
/// recursively (lists concatenated without repeats) and replace the main file's
/// top-level options; paths are re-rooted under root_dir.
#[test]
fn master_d_merges_and_root_dir_prepending_follow_salt() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let root_s = root.to_str().unwrap();
    write(
        dir.path(),
        "master",
        &format!(
            "root_dir: {root_s}\npki_dir: relpki\ncachedir: /var/cache/salt/master\n\
             sock_dir: {root_s}/sock\nlog_file: udp://localhost:514\nkey_logfile: file:///dev/log\n\
             autosign_file: /etc/salt/autosign.conf\nfile_roots:\n  base: [/srv/a]\n  dev: [/srv/d]\n\
             publish_port: \"4515\"\nid: m1\n"
        ),
    );
    write(
        dir.path(),
        "master.d/10.conf",
        "file_roots:\n  base: [/srv/b, /srv/a]\nnodegroups:\n  g1: L@a,b\n\
         external_auth: {pam: {fred: [test.*]}}\n",
    );
    write(
        dir.path(),
        "master.d/20.conf",
        "file_roots:\n  base: [/srv/c]\nnodegroups:\n  g2: G@os:x\n\
         external_auth: {pam: {fred: [grains.*], bob: [.*]}}\n",
    );
    write(dir.path(), "master.d/30.conf.disabled", "publish_port: 1\n");
    write(dir.path(), "master.d/.hidden.conf", "publish_port: 2\n");
    let cfg = MasterConfig::load(dir.path()).unwrap();

    assert_eq!(cfg.pki_dir, root.join("relpki"));
    assert_eq!(cfg.cachedir, root.join("var/cache/salt/master"));
    assert_eq!(cfg.sock_dir, root.join("sock"));
    assert_eq!(cfg.log_file, "udp://localhost:514");
    assert_eq!(cfg.key_logfile, "file:///dev/log");
    assert_eq!(cfg.autosign_file, Some(root.join("etc/salt/autosign.conf")));
    assert_eq!(cfg.token_dir, root.join("var/cache/salt/master/tokens"));
    assert_eq!(
        cfg.extension_modules,
        root.join("var/cache/salt/master/extmods")
    );
    assert_eq!(
        cfg.get("syndic_dir"),
        Some(&Value::from(format!(
            "{root_s}/var/cache/salt/master/syndics"
        )))
    );
    assert_eq!(cfg.publish_port, 4515);
    assert_eq!(
        cfg.get("file_roots"),
        Some(&yaml("{base: [/srv/b, /srv/a, /srv/c]}"))
    );
    assert_eq!(
        cfg.get("nodegroups"),
        Some(&yaml("{g1: 'L@a,b', g2: 'G@os:x'}"))
    );
    assert_eq!(
        cfg.get("external_auth"),
        Some(&yaml("{pam: {fred: [test.*, grains.*], bob: [.*]}}"))
    );
    assert_eq!(
        cfg.origin("nodegroups"),
        Origin::File(dir.path().join("master.d/20.conf"))
    );
    assert_eq!(
        cfg.origin("pki_dir"),
        Origin::File(dir.path().join("master"))
    );
    assert_eq!(cfg.origin("ret_port"), Origin::Defaults);
}

#[test]
fn later_master_d_files_override_earlier_ones() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "master", "publish_port: 1000\nret_port: 1001\n");
    write(dir.path(), "master.d/20-b.conf", "publish_port: 3000\n");
    write(
        dir.path(),
        "master.d/10-a.conf",
        "publish_port: 2000\nret_port: 2001\n",
    );
    let cfg = MasterConfig::load(dir.path()).unwrap();
    assert_eq!((cfg.publish_port, cfg.ret_port), (3000, 2001));
}

#[test]
fn include_option_and_log_dir_follow_salt() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    write(
        dir.path(),
        "master",
        &format!(
            "root_dir: {}\nid: m1\nlog_dir: /var/log/halite\n\
             sock_dir: /a/very/long/socket/directory/path/that/is/long\n\
             worker_threads: 2\npeer: {{.*: [test.*]}}\ninclude: [extra/*.yml, nothing/*.conf]\nkeep_jobs: 1\n",
            root.display()
        ),
    );
    write(dir.path(), "extra/a.yml", "timeout: 9\n");
    let cfg = MasterConfig::load(dir.path()).unwrap();
    assert_eq!(
        cfg.log_file,
        format!("{}/var/log/halite/master", root.display())
    );
    // A sock_dir more than 10 characters longer than cachedir moves under cachedir.
    assert_eq!(cfg.sock_dir, root.join("var/cache/salt/master/.salt-unix"));
    assert_eq!(cfg.worker_threads, 3);
    assert_eq!(cfg.timeout, 9);
    assert_eq!(cfg.keep_jobs_seconds, 86400);
    let missing = dir.path().join("nothing/*.conf");
    assert!(cfg
        .warnings()
        .iter()
        .any(|w| w.contains(&missing.display().to_string())));
    assert!(cfg
        .warnings()
        .iter()
        .any(|w| w.contains("cannot be lower than 3")));
}

#[test]
fn unknown_options_are_kept_and_listed() {
    let cfg = MasterConfig::from_yaml_str(
        "id: m\nhalite_extra: {a: 1}\npeer_run: {.*: [.*]}\ninterface: 127.0.0.1\n",
        Path::new("/etc/salt/master"),
    )
    .unwrap();
    let unknown: Vec<String> = cfg.unknown_options().into_iter().map(|u| u.name).collect();
    assert_eq!(unknown, ["halite_extra"]);
    assert_eq!(cfg.get("halite_extra"), Some(&yaml("{a: 1}")));
    assert_eq!(cfg.get("peer_run"), Some(&yaml("{.*: [.*]}")));
    assert_eq!(cfg.interface, "127.0.0.1");
}

#[test]
fn misspelt_options_in_the_main_file_and_master_d_are_named_with_their_file_and_closest_name() {
    let dir = tempfile::tempdir().unwrap();
    let main = write(
        dir.path(),
        "master",
        "id: m\npublish_prot: 4505\nmysql.host: db\nevent_journal: true\n",
    );
    let conf = write(
        dir.path(),
        "master.d/50-acl.conf",
        "publisher_acls: {fred: [test.ping]}\nnonsense_option_xyz: 1\n",
    );
    let cfg = MasterConfig::load(dir.path()).unwrap();
    let warnings: Vec<String> = cfg
        .unknown_options()
        .iter()
        .map(|u| u.to_string())
        .collect();
    assert_eq!(
        warnings,
        [
            format!(
                "Unknown option 'publish_prot' in {} (did you mean 'publish_port'?)",
                main.display()
            ),
            format!(
                "Unknown option 'publisher_acls' in {} (did you mean 'publisher_acl'?)",
                conf.display()
            ),
            format!("Unknown option 'nonsense_option_xyz' in {}", conf.display()),
        ]
    );
    // The minion's Halite options are not the master's, and the reverse.
    let minion = MinionConfig::from_yaml_str(
        "id: m\nevent_journal: true\nfire_master_queue_size: 5\nmastr: salt\n",
        Path::new("/etc/salt/minion"),
    )
    .unwrap();
    let names: Vec<(String, Option<&str>)> = minion
        .unknown_options()
        .into_iter()
        .map(|u| (u.name, u.suggestion))
        .collect();
    assert_eq!(
        names,
        [
            ("event_journal".to_owned(), None),
            ("mastr".to_owned(), Some("master")),
        ]
    );
}

#[test]
fn max_pending_keys_is_a_halite_option_with_a_default_and_zero_for_no_limit() {
    let load = |text: &str| MasterConfig::from_yaml_str(text, Path::new("/etc/salt/master"));
    assert_eq!(
        load("id: m\n").unwrap().max_pending_keys,
        crate::DEFAULT_MAX_PENDING_KEYS
    );
    assert_eq!(
        load("id: m\nmax_pending_keys: ~\n")
            .unwrap()
            .max_pending_keys,
        10_000
    );
    assert_eq!(
        load("id: m\nmax_pending_keys: 3\n")
            .unwrap()
            .max_pending_keys,
        3
    );
    assert_eq!(
        load("id: m\nmax_pending_keys: 0\n")
            .unwrap()
            .max_pending_keys,
        0
    );
    for bad in ["-1", "many", "[1]"] {
        let err = load(&format!("id: m\nmax_pending_keys: {bad}\n")).unwrap_err();
        assert!(
            err.to_string()
                .contains("invalid value for option 'max_pending_keys'"),
            "{bad}: {err}"
        );
    }
}

#[test]
fn request_size_limits_are_halite_options_with_defaults_a_floor_and_clear_within_all() {
    let load = |text: &str| MasterConfig::from_yaml_str(text, Path::new("/etc/salt/master"));
    let cfg = load("id: m\n").unwrap();
    assert_eq!(cfg.max_request_size, crate::DEFAULT_MAX_REQUEST_SIZE);
    assert_eq!(
        cfg.max_clear_request_size,
        crate::DEFAULT_MAX_CLEAR_REQUEST_SIZE
    );
    assert!(cfg.unknown_options().is_empty());
    let cfg = load("id: m\nmax_request_size: 1048576\nmax_clear_request_size: 4194304\n").unwrap();
    assert_eq!(cfg.max_request_size, 1 << 20);
    assert_eq!(
        cfg.max_clear_request_size,
        1 << 20,
        "clear requests are requests"
    );
    assert!(cfg.unknown_options().is_empty());
    for bad in ["0", "65535", "-1", "lots"] {
        for option in ["max_request_size", "max_clear_request_size"] {
            let err = load(&format!("id: m\n{option}: {bad}\n")).unwrap_err();
            assert!(
                err.to_string()
                    .contains(&format!("invalid value for option '{option}'")),
                "{bad}: {err}"
            );
        }
    }
}

#[test]
fn yaml_scalars_reach_options_with_salt_types() {
    let cfg = MasterConfig::from_yaml_str(
        "id: m\nauto_accept: yes\nopen_mode: Off\nsign_pub_messages: FALSE\n\
         quoted_bool: 'yes'\nmode: 0755\nquoted_mode: '0755'\nhex: 0x1f\nbig: 1_000\n\
         nothing: ~\nratio: 1.5\n",
        Path::new("/etc/salt/master"),
    )
    .unwrap();
    assert!(cfg.auto_accept);
    assert!(!cfg.open_mode);
    assert!(!cfg.sign_pub_messages);
    assert_eq!(cfg.get("quoted_bool"), Some(&Value::from("yes")));
    assert_eq!(cfg.get("mode"), Some(&Value::from(755)));
    assert_eq!(cfg.get("quoted_mode"), Some(&Value::from("0755")));
    assert_eq!(cfg.get("hex"), Some(&Value::from(31)));
    assert_eq!(cfg.get("big"), Some(&Value::from(1000)));
    assert_eq!(cfg.get("nothing"), Some(&Value::Nil));
    assert_eq!(cfg.get("ratio"), Some(&Value::F64(1.5)));
}

#[test]
fn invalid_values_name_option_file_and_expected_type() {
    let cases: &[(&str, &str)] = &[
        ("publish_port: abc", "invalid value for option 'publish_port' in {file}: expected an integer port (0-65535), got \"abc\""),
        ("publish_port: 70000", "invalid value for option 'publish_port' in {file}: expected an integer port (0-65535), got 70000"),
        ("ret_port: 4506.0", "invalid value for option 'ret_port' in {file}: expected an integer port (0-65535), got 4506.0"),
        ("auto_accept: maybe", "invalid value for option 'auto_accept' in {file}: expected a boolean (true or false), got \"maybe\""),
        ("open_mode: 'yes'", "invalid value for option 'open_mode' in {file}: expected a boolean (true or false), got \"yes\""),
        ("worker_threads: -1", "invalid value for option 'worker_threads' in {file}: expected a positive integer, got -1"),
        ("worker_threads: 0", "invalid value for option 'worker_threads' in {file}: expected a positive integer, got 0"),
        ("log_level: loud", "invalid value for option 'log_level' in {file}: expected one of all, garbage, trace, debug, profile, info, warning, error, critical, quiet, got \"loud\""),
        ("ipv6: 1", "invalid value for option 'ipv6' in {file}: expected a boolean (true or false) or null, got 1"),
        ("interface: [a]", "invalid value for option 'interface' in {file}: expected a string, got a list"),
        ("pki_dir: ~", "invalid value for option 'pki_dir' in {file}: expected a string, got null"),
        ("publish_signing_algorithm: PKCS1v15-MD5", "invalid value for option 'publish_signing_algorithm' in {file}: expected one of PKCS1v15-SHA1, PKCS1v15-SHA224, got \"PKCS1v15-MD5\""),
        ("include: 5", "invalid value for option 'include' in {file}: expected a path glob or a list of path globs, got 5"),
    ];
    for &(line, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "master", "id: m\n");
        let file = write(dir.path(), "master.d/10.conf", &format!("{line}\n"));
        let err = MasterConfig::load(dir.path()).unwrap_err();
        assert!(
            matches!(err, ConfigError::InvalidValue { .. }),
            "{line}: {err:?}"
        );
        assert_eq!(
            err.to_string(),
            want.replace("{file}", &file.display().to_string()),
            "{line}"
        );
    }
}

#[test]
fn numeric_strings_are_accepted_where_salt_accepts_them() {
    let cfg = MasterConfig::from_yaml_str(
        "id: m\npublish_port: '4510'\nworker_threads: ' 8 '\nlog_level: DEBUG\nhash_type: SHA512\n",
        Path::new("/etc/salt/master"),
    )
    .unwrap();
    assert_eq!(cfg.publish_port, 4510);
    assert_eq!(cfg.worker_threads, 8);
    assert_eq!(cfg.log_level, LogLevel::Debug);
    assert_eq!(cfg.hash_type, "sha512");
    assert_eq!(cfg.get("hash_type"), Some(&Value::from("sha512")));
}

#[test]
fn untyped_options_of_the_wrong_type_only_warn_like_salt() {
    let cfg = MasterConfig::from_yaml_str("id: m\nfile_recv: maybe\n", Path::new("/m")).unwrap();
    assert_eq!(
        cfg.warnings(),
        ["Config option 'file_recv' with value maybe has an invalid type of str, a bool is required for this option"]
    );
}

#[test]
fn yaml_errors_name_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "master", "id: m\n");
    let file = write(
        dir.path(),
        "master.d/bad.conf",
        "a: 1\nb: [unclosed\nc: 3\n",
    );
    let err = MasterConfig::load(dir.path()).unwrap_err();
    let ConfigError::Yaml { path, error } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(path, &file);
    assert_eq!((error.line, error.column), (3, 2));
    assert_eq!(
        err.to_string(),
        format!(
            "invalid YAML in {} at line 3, column 2: did not find expected ',' or ']' \
             (while parsing a flow sequence starting at line 2, column 4)",
            file.display()
        )
    );

    write(dir.path(), "master.d/bad.conf", "a: 1\na: 2\n");
    let err = MasterConfig::load(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("line 2, column 1: found conflicting ID 'a'"),
        "{err}"
    );
}

#[test]
fn unreadable_or_non_mapping_files_fail() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "minion", "- just\n- a list\n");
    let err = MinionConfig::load(dir.path()).unwrap_err();
    assert!(matches!(err, ConfigError::NotAMapping { .. }), "{err:?}");

    let dir = tempfile::tempdir().unwrap();
    fs::create_dir_all(dir.path().join("master.d/dir.conf")).unwrap();
    let err = MasterConfig::load(dir.path()).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }), "{err:?}");
}

#[test]
fn self_including_files_stop_at_the_depth_limit() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "master.d/loop.conf", "include: loop.conf\n");
    let err = MasterConfig::load(dir.path()).unwrap_err();
    assert!(matches!(err, ConfigError::IncludeDepth { .. }), "{err:?}");
}

#[test]
fn cached_minion_id_is_used_for_both_roles() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let cache = write(&root, "etc/salt/minion_id", "cached-host\nignored\n");
    let text = format!("root_dir: {}\n", root.display());
    let minion = MinionConfig::from_yaml_str(&text, Path::new("/m/minion")).unwrap();
    assert_eq!(minion.id, "cached-host");
    assert_eq!(minion.id_source, IdSource::Cached(cache.clone()));
    let master = MasterConfig::from_yaml_str(&text, Path::new("/m/master")).unwrap();
    assert_eq!(master.id, "cached-host_master");
    let no_cache = MinionConfig::from_yaml_str(
        &format!("{text}minion_id_caching: false\n"),
        Path::new("/m/minion"),
    )
    .unwrap();
    assert_eq!(no_cache.id_source, IdSource::Generated);
    let domain = MinionConfig::from_yaml_str(
        &format!("{text}append_domain: example.com\n"),
        Path::new("/m/minion"),
    )
    .unwrap();
    assert_eq!(domain.id, "cached-host.example.com");
}

#[test]
fn id_function_is_refused() {
    let err = MinionConfig::from_yaml_str(
        "root_dir: /nonexistent-root\nid_function: {grains.get: {key: host}}\n",
        Path::new("/m/minion"),
    )
    .unwrap_err();
    assert!(matches!(err, ConfigError::Unsupported { .. }), "{err:?}");
}

#[test]
fn transports_other_than_zeromq_are_refused_naming_the_file() {
    for (text, ok) in [
        ("", true),
        ("transport: zeromq\n", true),
        ("transport: tcp\n", false),
        ("transport: ws\n", false),
    ] {
        let yaml = format!("root_dir: /nonexistent-root\nid: m\n{text}");
        let master = MasterConfig::from_yaml_str(&yaml, Path::new("/m/master"));
        let minion = MinionConfig::from_yaml_str(&yaml, Path::new("/m/minion"));
        assert_eq!(master.is_ok(), ok, "{text}: {master:?}");
        assert_eq!(minion.is_ok(), ok, "{text}: {minion:?}");
        if let Err(e) = master {
            let msg = e.to_string();
            assert!(
                matches!(e, ConfigError::Unsupported { ref option, .. } if option == "transport")
            );
            assert!(
                msg.contains("/m/master") && msg.contains("'zeromq' transport only"),
                "{msg}"
            );
        }
    }
}

/// Captured from Salt 3008.3: minion.d merges grains recursively, numeric ids become
/// strings with Salt's leading-zero rule, a master list stays a list.
#[test]
fn minion_d_merges_grains_and_keeps_master_list() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("mroot");
    write(
        dir.path(),
        "minion",
        &format!(
            "root_dir: {}\nmaster: [m1, m2]\nid: 0123\nlog_file: {}/var/log/min\n",
            root.display(),
            root.display()
        ),
    );
    write(
        dir.path(),
        "minion.d/a.conf",
        "grains:\n  roles: [web]\n  os_family: Debian\n",
    );
    write(
        dir.path(),
        "minion.d/b.conf",
        "grains:\n  roles: [db, web]\n",
    );
    let cfg = MinionConfig::load(dir.path()).unwrap();
    assert_eq!(cfg.id, "123");
    assert_eq!(
        cfg.master,
        Master::List(vec!["m1".to_owned(), "m2".to_owned()])
    );
    assert_eq!(cfg.grains, yaml("{roles: [web, db], os_family: Debian}"));
    assert_eq!(cfg.pki_dir, root.join("etc/salt/pki/minion"));
    assert_eq!(cfg.sock_dir, root.join("var/run/salt/minion"));
    assert_eq!(cfg.log_file, format!("{}/var/log/min", root.display()));
    assert_eq!(
        cfg.extension_modules,
        root.join("var/cache/salt/minion/extmods")
    );
    assert_eq!(cfg.pidfile, root.join("var/run/salt-minion.pid"));
}

/// Captured from Salt 3008.3: per-id directories and a relative log file under log_dir.
#[test]
fn minion_id_dirs_and_relative_log_dir_follow_salt() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("mroot");
    let cfg = MinionConfig::from_yaml_str(
        &format!(
            "root_dir: {}\nid: n1\nappend_minionid_config_dirs: [pki_dir, cachedir, pidfile]\n\
             log_dir: logs\nlog_file: min.log\nmaster: salt.example.com\n",
            root.display()
        ),
        Path::new("/m/minion"),
    )
    .unwrap();
    assert_eq!(cfg.pki_dir, root.join("etc/salt/pki/minion/n1"));
    assert_eq!(cfg.cachedir, root.join("var/cache/salt/minion/n1"));
    assert_eq!(cfg.pidfile, root.join("var/run/salt/n1/salt-minion.pid"));
    assert_eq!(cfg.log_file, format!("{}/logs/min.log", root.display()));
    assert_eq!(cfg.master, Master::Single("salt.example.com".to_owned()));
}

#[test]
fn minion_invalid_values_are_refused() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "master_type: hotpotato",
            "master_type",
            "one of str, failover, distributed, func, disable",
        ),
        ("ipc_mode: pipe", "ipc_mode", "one of ipc, tcp"),
        (
            "master: []",
            "master",
            "a host name or a non-empty list of host names",
        ),
        (
            "master: [a, [b]]",
            "master",
            "a host name or a non-empty list of host names",
        ),
        ("master_port: x", "master_port", "an integer port (0-65535)"),
        (
            "acceptance_wait_time: -1",
            "acceptance_wait_time",
            "a non-negative number of seconds",
        ),
        ("grains: [a]", "grains", "a mapping"),
        (
            "encryption_algorithm: RSA",
            "encryption_algorithm",
            "one of OAEP-SHA1, OAEP-SHA224",
        ),
    ];
    for &(line, option, expected) in cases {
        let err = MinionConfig::from_yaml_str(&format!("id: n\n{line}\n"), Path::new("/m/minion"))
            .unwrap_err();
        match err {
            ConfigError::InvalidValue {
                option: o,
                origin,
                expected: e,
                ..
            } => {
                assert_eq!((o.as_str(), e.as_str()), (option, expected), "{line}");
                assert_eq!(origin, Origin::File(PathBuf::from("/m/minion")));
            }
            other => panic!("{line}: {other:?}"),
        }
    }
}

#[test]
fn minion_accepts_salts_coercions() {
    let cfg = MinionConfig::from_yaml_str(
        "id: n\nmaster_port: '4606'\nacceptance_wait_time: '2.5'\nipv6: true\ngrains:\npublish_port: 4605\n",
        Path::new("/m/minion"),
    )
    .unwrap();
    assert_eq!(cfg.master_port, 4606);
    assert_eq!(cfg.acceptance_wait_time, 2.5);
    assert_eq!(cfg.ipv6, Some(true));
    assert_eq!(cfg.grains, Value::Map(Vec::new()));
    assert_eq!(cfg.publish_port, Some(4605));
}

#[test]
fn defaults_in_puts_every_path_under_the_root() {
    let master = MasterConfig::defaults_in(Path::new("/tmp/halite-t"));
    assert_eq!(
        master.pki_dir,
        Path::new("/tmp/halite-t/etc/salt/pki/master")
    );
    assert_eq!(
        master.sock_dir,
        Path::new("/tmp/halite-t/var/run/salt/master")
    );
    assert_eq!(master.log_file, "/tmp/halite-t/var/log/salt/master");
    let minion = MinionConfig::defaults_in(Path::new("/tmp/halite-t"));
    assert_eq!(
        minion.cachedir,
        Path::new("/tmp/halite-t/var/cache/salt/minion")
    );
}

/// Arbitrary bytes never panic the loader.
#[test]
fn hostile_inputs_fail_cleanly() {
    let inputs: Vec<Vec<u8>> = vec![
        b"\xff\xfe\x00garbage".to_vec(),
        b"a: &a [*a]".to_vec(),
        b"a: &a {<<: *a}".to_vec(),
        "[".repeat(3_000).into_bytes(),
        "a: ".to_owned().into_bytes().into_iter().chain("{b: ".repeat(2000).into_bytes()).collect(),
        b"a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]".to_vec(),
        b"a: !!int 0_".to_vec(),
        b"a: !!float x".to_vec(),
        b"a: !!bool maybe".to_vec(),
        b"a: !!binary \xc3\xa9".to_vec(),
        b"? [a]\n: b".to_vec(),
        b"a: !!omap [x]".to_vec(),
        b"a: !!str [x]".to_vec(),
        b"a: *nope".to_vec(),
        b"--- 1\n--- 2".to_vec(),
        b"a: &x 1\nb: &x 2".to_vec(),
        b"a: =".to_vec(),
        b"a: 1\n\tb: 2".to_vec(),
        b"a: \"\\ud800\"".to_vec(),
        b"id: {a: 1}".to_vec(),
        b"\x00".to_vec(),
    ];
    for input in inputs {
        let text = String::from_utf8_lossy(&input).into_owned();
        let result = MasterConfig::from_yaml_str(&text, Path::new("/m"));
        assert!(result.is_err(), "accepted {text:?}");
    }
}
