//! A temporary directory laid out for one master and any number of minions.
//!
//! Layout (`DIR` is a short path such as `/tmp/hl-Ab12Cd`: Unix socket paths are limited to
//! 107 bytes and Salt puts its sockets in `sock_dir`):
//!
//! ```text
//! DIR/master                      master config; DIR is what `-c` takes
//! DIR/master-root/{pki,cache,sock,run,log/master,srv/salt,srv/pillar}
//! DIR/minion-<id>/minion          minion config; DIR/minion-<id> is what `-c` takes
//! DIR/minion-<id>/{pki,cache,sock,run,log/minion,srv/salt,srv/pillar}
//! DIR/procs/<name>.stdout|stderr  output of every Proc started by the starters
//! ```
//!
//! A root is made for a master on 127.0.0.1 with ports from [`free_ports`] ([`TempRoot::new`],
//! [`TempRoot::with_master_extra`]), or for a master on a host of a network lab
//! ([`crate::Lab`]) bound to that host's address with Salt's default ports
//! ([`TempRoot::for_lab_host`]); a minion may name several masters
//! ([`TempRoot::add_minion_for`]). A multi-master test makes one root per master.
//!
//! Configs are Salt-compatible YAML. Caller-provided extra YAML (a mapping) is merged over
//! the defaults key by key, so extras can override any default (Salt's YAML loader rejects
//! duplicate keys, so appending would not work).

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde_json::json;
use serde_norway::{Mapping, Value};

use crate::ports::free_ports;
use crate::process::log_tail;

/// Environment variable: when set to `1`, a [`TempRoot`] is kept on disk after the test
/// (its path is printed to stderr).
pub const KEEP_TEMP_ENV: &str = "HALITE_KEEP_TEMP";

/// Environment variable: the directory [`TempRoot`]s are made in (default `/tmp`; keep it
/// short, sockets live below it). `halite-bench` runs use it to put both masters on a
/// tmpfs such as `/dev/shm`, out of reach of the file system's own costs.
pub const TEMP_BASE_ENV: &str = "HALITE_TEMP_BASE";

/// Salt's default `publish_port`, used by every master of a lab ([`TempRoot::for_lab_host`]).
pub const SALT_PUBLISH_PORT: u16 = 4505;
/// Salt's default `ret_port` (a minion's `master_port`), used by every master of a lab.
pub const SALT_RET_PORT: u16 = 4506;

/// A temp dir with a master config and per-minion configs, removed on drop.
///
/// On drop during a panic, the tails of all logs and process outputs are printed to stderr,
/// so a failing test shows what the daemons said, followed by the panic message again: a
/// CI page that keeps only the end of a test's output still shows why it failed.
pub struct TempRoot {
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    interface: String,
    publish_port: u16,
    ret_port: u16,
}

impl TempRoot {
    /// A new root with a master config using the defaults only.
    pub fn new() -> TempRoot {
        TempRoot::with_master_extra("")
    }

    /// A new root whose master config merges `extra_yaml` (a YAML mapping, e.g.
    /// `"auto_accept: true\n"`) over the defaults.
    ///
    /// # Panics
    /// When the directory cannot be created or `extra_yaml` is not a YAML mapping.
    pub fn with_master_extra(extra_yaml: &str) -> TempRoot {
        let ports = free_ports(2);
        TempRoot::create(Ipv4Addr::LOCALHOST, ports[0], ports[1], extra_yaml)
    }

    /// A new root for a master on a lab host ([`crate::Host`]): its config binds
    /// `interface: <interface>` with Salt's default ports ([`SALT_PUBLISH_PORT`],
    /// [`SALT_RET_PORT`]), as every lab host has its own network namespace and so its own
    /// ports, and merges `extra_yaml` over the defaults. Minions added to this root name
    /// `interface` as their master unless told otherwise ([`TempRoot::add_minion_for`]).
    ///
    /// Only a process in the lab host's namespace can reach that master: start it and its
    /// CLIs with the [`crate::Host`] starters.
    ///
    /// # Panics
    /// As [`TempRoot::with_master_extra`].
    pub fn for_lab_host(interface: Ipv4Addr, extra_yaml: &str) -> TempRoot {
        TempRoot::create(interface, SALT_PUBLISH_PORT, SALT_RET_PORT, extra_yaml)
    }

    fn create(interface: Ipv4Addr, publish_port: u16, ret_port: u16, extra_yaml: &str) -> TempRoot {
        crate::panic_note::install();
        let base = std::env::var_os(TEMP_BASE_ENV).unwrap_or_else(|| "/tmp".into());
        let dir = tempfile::Builder::new()
            .prefix("hl-")
            .tempdir_in(&base)
            .unwrap_or_else(|e| panic!("cannot create a temp dir in {base:?}: {e}"));
        let root = TempRoot {
            path: dir.path().to_path_buf(),
            dir: Some(dir),
            interface: interface.to_string(),
            publish_port,
            ret_port,
        };
        mkdirs(&root.procs_dir());
        root.write_master_config(extra_yaml);
        root
    }

    /// The root directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The master's config directory (the root itself): what `-c` takes for `salt-master`,
    /// `salt`, `salt-key`, `salt-run` and their Halite counterparts.
    pub fn master_config_dir(&self) -> &Path {
        &self.path
    }

    /// `DIR/master`.
    pub fn master_config_file(&self) -> PathBuf {
        self.path.join("master")
    }

    /// The master's `root_dir`.
    pub fn master_root(&self) -> PathBuf {
        self.path.join("master-root")
    }

    /// The master's `pki_dir` (holding `master.pem`, `minions/`, `minions_pre/`...).
    pub fn master_pki_dir(&self) -> PathBuf {
        self.master_root().join("pki")
    }

    /// The master's `log_file`.
    pub fn master_log(&self) -> PathBuf {
        self.master_root().join("log").join("master")
    }

    /// The master's `interface` (`127.0.0.1` unless made by [`TempRoot::for_lab_host`]).
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// The master's `publish_port`.
    pub fn publish_port(&self) -> u16 {
        self.publish_port
    }

    /// The master's `ret_port` (the minions' `master_port`).
    pub fn ret_port(&self) -> u16 {
        self.ret_port
    }

    /// Where the starters put the stdout/stderr files of the processes they spawn.
    pub fn procs_dir(&self) -> PathBuf {
        self.path.join("procs")
    }

    /// (Re)writes `DIR/master`: the defaults merged with `extra_yaml`. Keeps ports and keys,
    /// so a restarted master finds its minions again.
    ///
    /// # Panics
    /// When `extra_yaml` is not a YAML mapping or the file cannot be written.
    pub fn write_master_config(&self, extra_yaml: &str) {
        let root = self.master_root();
        let r = make_config_root(&root);
        let defaults = json!({
            "interface": self.interface,
            "publish_port": self.publish_port,
            "ret_port": self.ret_port,
            "user": current_user(),
            "root_dir": r,
            "pki_dir": format!("{r}/pki"),
            "cachedir": format!("{r}/cache"),
            "sock_dir": format!("{r}/sock"),
            "pidfile": format!("{r}/run/salt-master.pid"),
            "log_file": format!("{r}/log/master"),
            "key_logfile": format!("{r}/log/key"),
            "log_level": "warning",
            "log_level_logfile": "debug",
            "file_roots": { "base": [format!("{r}/srv/salt")] },
            "pillar_roots": { "base": [format!("{r}/srv/pillar")] },
        });
        write_config(&self.master_config_file(), defaults, extra_yaml);
    }

    /// Writes the config of minion `id` with the defaults only; returns its config dir.
    pub fn add_minion(&self, id: &str) -> PathBuf {
        self.add_minion_with(id, "")
    }

    /// (Re)writes the config of minion `id` (`DIR/minion-<id>/minion`): the defaults merged
    /// with `extra_yaml`. Returns its config dir (what `-c` takes). Keeps existing keys.
    ///
    /// Defaults are tuned for tests: `master` is this root's [`TempRoot::interface`] and
    /// `master_port` its `ret_port`, `acceptance_wait_time: 1`, `random_reauth_delay: 0`,
    /// reconnect delays of 100 ms to 1 s without randomisation, debug-level log file, and
    /// `enable_fqdns_grains: false` (the fqdns grain does reverse DNS lookups, which stall on
    /// a machine without DNS).
    ///
    /// # Panics
    /// When `id` is not a plain name (letters, digits, `.`, `_`, `-`, not starting with `.`),
    /// `extra_yaml` is not a YAML mapping, or a file cannot be written.
    pub fn add_minion_with(&self, id: &str, extra_yaml: &str) -> PathBuf {
        self.write_minion_config(id, json!(self.interface), extra_yaml)
    }

    /// [`TempRoot::add_minion_with`] for a minion of the masters at `masters` (lab hosts'
    /// addresses, all serving on this root's `ret_port`): `master: <ip>` for one,
    /// `master: [<ip>, ...]` (Salt's multi-master list, in this order) for more. `extra_yaml`
    /// adds the rest (`master_type: failover`, `master_alive_interval`, ...) and may override
    /// `master` too (e.g. with a list of one).
    ///
    /// # Panics
    /// When `masters` is empty, and as [`TempRoot::add_minion_with`].
    pub fn add_minion_for(&self, id: &str, masters: &[Ipv4Addr], extra_yaml: &str) -> PathBuf {
        let master = match masters {
            [] => panic!("minion {id} needs at least one master address"),
            [one] => json!(one.to_string()),
            many => json!(many.iter().map(Ipv4Addr::to_string).collect::<Vec<_>>()),
        };
        self.write_minion_config(id, master, extra_yaml)
    }

    fn write_minion_config(
        &self,
        id: &str,
        master: serde_json::Value,
        extra_yaml: &str,
    ) -> PathBuf {
        let dir = self.minion_config_dir(id);
        let r = make_config_root(&dir);
        let defaults = json!({
            "id": id,
            "master": master,
            "master_port": self.ret_port,
            "user": current_user(),
            "root_dir": r,
            "pki_dir": format!("{r}/pki"),
            "cachedir": format!("{r}/cache"),
            "sock_dir": format!("{r}/sock"),
            "pidfile": format!("{r}/run/salt-minion.pid"),
            "log_file": format!("{r}/log/minion"),
            "log_level": "warning",
            "log_level_logfile": "debug",
            "acceptance_wait_time": 1,
            "random_reauth_delay": 0,
            "recon_default": 100,
            "recon_max": 1000,
            "recon_randomize": false,
            "enable_fqdns_grains": false,
            "file_roots": { "base": [format!("{r}/srv/salt")] },
            "pillar_roots": { "base": [format!("{r}/srv/pillar")] },
        });
        write_config(&dir.join("minion"), defaults, extra_yaml);
        dir
    }

    /// Whether [`TempRoot::add_minion`] has written a config for `id`.
    pub fn has_minion(&self, id: &str) -> bool {
        self.minion_config_dir(id).join("minion").is_file()
    }

    /// Config dir (and `root_dir`) of minion `id`: `DIR/minion-<id>`.
    ///
    /// # Panics
    /// When `id` is not a plain name (see [`TempRoot::add_minion_with`]).
    pub fn minion_config_dir(&self, id: &str) -> PathBuf {
        check_id(id);
        self.path.join(format!("minion-{id}"))
    }

    /// The `pki_dir` of minion `id` (holding `minion.pem`, `minion.pub`, `minion_master.pub`).
    pub fn minion_pki_dir(&self, id: &str) -> PathBuf {
        self.minion_config_dir(id).join("pki")
    }

    /// The `log_file` of minion `id`.
    pub fn minion_log(&self, id: &str) -> PathBuf {
        self.minion_config_dir(id).join("log").join("minion")
    }

    /// Keeps the directory on disk after drop (for debugging) and returns its path.
    pub fn keep(mut self) -> PathBuf {
        if let Some(dir) = self.dir.take() {
            let _ = dir.keep();
        }
        self.path.clone()
    }

    /// Logs and process outputs under the root, for the panic report.
    fn log_files(&self) -> Vec<PathBuf> {
        let mut files = vec![self.master_log()];
        let mut minions: Vec<PathBuf> = read_dir_sorted(&self.path)
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("minion-"))
            })
            .map(|p| p.join("log").join("minion"))
            .collect();
        files.append(&mut minions);
        files.extend(read_dir_sorted(&self.procs_dir()));
        files.retain(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0));
        files
    }
}

impl Default for TempRoot {
    fn default() -> Self {
        TempRoot::new()
    }
}

impl std::fmt::Debug for TempRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TempRoot")
            .field("path", &self.path)
            .field("interface", &self.interface)
            .field("publish_port", &self.publish_port)
            .field("ret_port", &self.ret_port)
            .finish()
    }
}

impl Drop for TempRoot {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("==== halite-testkit: logs of {} ====", self.path.display());
            for file in self.log_files() {
                eprintln!("---- {} (last 60 lines) ----", file.display());
                eprintln!("{}", log_tail(&file, 60));
            }
            if let Some(message) = crate::panic_note::take() {
                eprintln!("==== halite-testkit: the test failed: {message} ====");
            }
        }
        if std::env::var(KEEP_TEMP_ENV).is_ok_and(|v| v == "1") {
            if let Some(dir) = self.dir.take() {
                eprintln!("halite-testkit: kept {}", dir.keep().display());
            }
        }
    }
}

/// Name of the user running the tests (written as `user:` so Salt does not try to switch).
///
/// # Panics
/// When the user database has no entry for the effective user.
pub fn current_user() -> String {
    halite_config::current_user().expect("the user running the tests has no passwd entry")
}

/// Merges `extra_yaml` over `defaults` and writes the result to `path`.
fn write_config(path: &Path, defaults: serde_json::Value, extra_yaml: &str) {
    let text = render_config(defaults, extra_yaml);
    std::fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

fn render_config(defaults: serde_json::Value, extra_yaml: &str) -> String {
    let Ok(Value::Mapping(mut config)) = serde_norway::to_value(&defaults) else {
        unreachable!("config defaults are a JSON object");
    };
    for (key, value) in parse_extra(extra_yaml) {
        config.insert(key, value);
    }
    let body = serde_norway::to_string(&config)
        .unwrap_or_else(|e| panic!("cannot render config as YAML: {e}"));
    format!("# written by halite-testkit\n{body}")
}

fn parse_extra(extra_yaml: &str) -> Mapping {
    match serde_norway::from_str::<Value>(extra_yaml) {
        Ok(Value::Mapping(m)) => m,
        Ok(Value::Null) => Mapping::new(),
        Ok(other) => panic!("extra config must be a YAML mapping, got {other:?}"),
        Err(e) => panic!("extra config is not valid YAML ({e}):\n{extra_yaml}"),
    }
}

fn check_id(id: &str) {
    let plain = !id.is_empty()
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !plain {
        panic!("minion id {id:?} is not a plain name usable as a directory name");
    }
}

/// Creates the directories a master or minion config rooted at `dir` points into, and
/// returns `dir` as the text the config values are built from.
fn make_config_root(dir: &Path) -> &str {
    let r = dir
        .to_str()
        .unwrap_or_else(|| panic!("non-UTF-8 temp path {}", dir.display()));
    for sub in [
        "pki",
        "cache",
        "sock",
        "run",
        "log",
        "srv/salt",
        "srv/pillar",
    ] {
        mkdirs(&dir.join(sub));
    }
    r
}

fn mkdirs(path: &Path) {
    std::fs::create_dir_all(path)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
}

fn read_dir_sorted(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default();
    paths.sort();
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(path: &Path) -> Mapping {
        match serde_norway::from_str(&std::fs::read_to_string(path).unwrap()).unwrap() {
            Value::Mapping(m) => m,
            other => panic!("{other:?}"),
        }
    }

    fn get<'a>(m: &'a Mapping, key: &str) -> &'a Value {
        m.get(key).unwrap_or_else(|| panic!("{key} missing"))
    }

    #[test]
    fn master_config_points_everything_into_the_root() {
        let root = TempRoot::new();
        let conf = load(&root.master_config_file());
        let r = root.master_root().to_str().unwrap().to_owned();
        assert_eq!(get(&conf, "interface").as_str(), Some("127.0.0.1"));
        assert_eq!(
            get(&conf, "ret_port").as_u64(),
            Some(u64::from(root.ret_port()))
        );
        assert_eq!(
            get(&conf, "publish_port").as_u64(),
            Some(u64::from(root.publish_port()))
        );
        assert_ne!(root.ret_port(), root.publish_port());
        for key in [
            "root_dir", "pki_dir", "cachedir", "sock_dir", "log_file", "pidfile",
        ] {
            assert!(get(&conf, key).as_str().unwrap().starts_with(&r), "{key}");
        }
        assert_eq!(get(&conf, "user").as_str(), Some(current_user().as_str()));
        assert!(root.master_pki_dir().is_dir());
    }

    #[test]
    fn sock_dirs_leave_room_for_socket_names() {
        let root = TempRoot::new();
        root.add_minion("a-rather-long-minion-id-0001");
        let conf = load(
            &root
                .minion_config_dir("a-rather-long-minion-id-0001")
                .join("minion"),
        );
        let sock = get(&conf, "sock_dir").as_str().unwrap();
        // Salt's longest socket name in sock_dir is minion_event_<10 hex>_pull.ipc.
        assert!(
            sock.len() + "/minion_event_0123456789_pull.ipc".len() < 108,
            "{sock}"
        );
    }

    #[test]
    fn extras_override_defaults_and_add_keys() {
        let root = TempRoot::with_master_extra("log_level_logfile: info\nauto_accept: true\n");
        let conf = load(&root.master_config_file());
        assert_eq!(get(&conf, "log_level_logfile").as_str(), Some("info"));
        assert_eq!(get(&conf, "auto_accept").as_bool(), Some(true));
        let text = std::fs::read_to_string(root.master_config_file()).unwrap();
        assert_eq!(text.matches("log_level_logfile").count(), 1);
    }

    #[test]
    fn minion_config_targets_the_master_ret_port() {
        let root = TempRoot::new();
        let dir = root.add_minion_with("m1", "grains:\n  role: web\n");
        assert!(root.has_minion("m1"));
        assert!(!root.has_minion("m2"));
        let conf = load(&dir.join("minion"));
        assert_eq!(get(&conf, "id").as_str(), Some("m1"));
        assert_eq!(
            get(&conf, "master_port").as_u64(),
            Some(u64::from(root.ret_port()))
        );
        assert_eq!(get(&conf, "acceptance_wait_time").as_u64(), Some(1));
        assert_eq!(get(&conf, "random_reauth_delay").as_u64(), Some(0));
        assert!(get(&conf, "grains").as_mapping().is_some());
        assert!(root.minion_pki_dir("m1").is_dir());
        assert_eq!(root.minion_log("m1"), dir.join("log/minion"));
    }

    #[test]
    fn a_lab_root_binds_the_host_address_with_salts_ports_and_its_minions_follow() {
        let ip = Ipv4Addr::new(10, 77, 3, 1);
        let root = TempRoot::for_lab_host(ip, "auto_accept: true\n");
        assert_eq!(root.interface(), "10.77.3.1");
        let conf = load(&root.master_config_file());
        assert_eq!(get(&conf, "interface").as_str(), Some("10.77.3.1"));
        assert_eq!(get(&conf, "ret_port").as_u64(), Some(4506));
        assert_eq!(get(&conf, "publish_port").as_u64(), Some(4505));
        assert_eq!(get(&conf, "auto_accept").as_bool(), Some(true));
        // A restart rewrites the config on the same address.
        root.write_master_config("");
        let conf = load(&root.master_config_file());
        assert_eq!(get(&conf, "interface").as_str(), Some("10.77.3.1"));
        let conf = load(&root.add_minion("m1").join("minion"));
        assert_eq!(get(&conf, "master").as_str(), Some("10.77.3.1"));
        assert_eq!(get(&conf, "master_port").as_u64(), Some(4506));
    }

    #[test]
    fn a_minion_for_several_masters_lists_them_in_order() {
        let root = TempRoot::new();
        let (a, b) = (Ipv4Addr::new(10, 77, 3, 1), Ipv4Addr::new(10, 77, 3, 2));
        let dir = root.add_minion_for("m1", &[a, b], "master_type: failover\n");
        let conf = load(&dir.join("minion"));
        let masters: Vec<&str> = get(&conf, "master")
            .as_sequence()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(masters, ["10.77.3.1", "10.77.3.2"]);
        assert_eq!(get(&conf, "master_type").as_str(), Some("failover"));
        let conf = load(&root.add_minion_for("m2", &[b], "").join("minion"));
        assert_eq!(get(&conf, "master").as_str(), Some("10.77.3.2"));
        let overridden = root.add_minion_for("m3", &[a], "master: [10.77.3.1]\n");
        let conf = load(&overridden.join("minion"));
        assert_eq!(get(&conf, "master").as_sequence().map(Vec::len), Some(1));
        assert!(std::panic::catch_unwind(|| root.add_minion_for("m4", &[], "")).is_err());
    }

    #[test]
    fn extra_config_must_be_a_mapping() {
        for bad in ["- a\n- b\n", "just a string", "key: [unclosed"] {
            let result = std::panic::catch_unwind(|| parse_extra(bad));
            assert!(result.is_err(), "{bad:?} accepted");
        }
        assert!(parse_extra("").is_empty());
    }

    #[test]
    fn minion_ids_must_be_plain_names() {
        let root = TempRoot::new();
        for bad in ["", "../x", "a/b", ".hidden", "sp ace"] {
            let result = std::panic::catch_unwind(|| root.minion_config_dir(bad));
            assert!(result.is_err(), "{bad:?} accepted");
        }
        root.minion_config_dir("web-01.example_com");
    }

    #[test]
    fn root_is_short_and_removed_on_drop() {
        let root = TempRoot::new();
        let path = root.path().to_path_buf();
        assert!(
            path.to_str().unwrap().starts_with("/tmp/hl-"),
            "{}",
            path.display()
        );
        assert!(path.as_os_str().len() <= 20, "{}", path.display());
        drop(root);
        assert!(!path.exists());
    }
}
