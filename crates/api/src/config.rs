//! The API's configuration: the master config's `rest_cherrypy:` section, read as
//! `salt.netapi.rest_cherrypy.app.API.get_conf` and `rest_cherrypy.start` read it, plus the
//! master options salt-api consumes (`netapi_enable_clients`, `netapi_allow_raw_shell`,
//! `rest_timeout`, `api_pidfile`, `api_logfile`).
//!
//! Deviations, each failing closed: a value of the wrong type is an error naming the option
//! (Salt carries on with whatever Python makes of it); a missing `ssl_crt`/`ssl_key` without
//! `disable_ssl` stops the start with an error (salt-api logs the same error and then serves
//! nothing). `api_pidfile`/`api_logfile` default to `salt-api.pid` beside the master's
//! `pidfile` and `api` beside its `log_file` (Salt: the same names under its `PIDFILE_DIR`
//! and `LOGS_DIR`, which are those directories unless the master's were moved).
//!
//! Halite extension: `rest_cherrypy: sse_keepalive` (seconds, default 15, 0 = off), the
//! interval of the keep-alive comments on `/events` and of the Ping frames on `/ws`.
//!
//! Halite extension: `rest_cherrypy: metrics_disable_auth` (default false): `GET /metrics`
//! answers without a session, for Prometheus scrapers (as `stats_disable_auth` does for
//! `/stats`).
//!
//! Halite extension: `rest_cherrypy: events_acl` (default false, for compatibility): when
//! true, `/events` and `/ws` drop the job events the session's ACL does not cover (the rule
//! is in [`crate::events`]).

use crate::Error;
use halite_config::MasterConfig;
use halite_proto::value;
use halite_proto::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The clients `salt.netapi.NetapiClient` knows (`netapi.CLIENTS`, from
/// `inspect.getmembers`, hence the stray `destroy`): what `GET /` lists and the names a
/// chunk may give.
pub const CLIENTS: [&str; 10] = [
    "destroy",
    "local",
    "local_async",
    "local_batch",
    "local_subset",
    "runner",
    "runner_async",
    "ssh",
    "wheel",
    "wheel_async",
];

/// Default interval of the `/events` keep-alive comments.
pub const DEFAULT_SSE_KEEPALIVE: Duration = Duration::from_secs(15);

/// Certificate and key for HTTPS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// `ssl_crt`: the certificate (PEM; may hold the chain after it).
    pub crt: PathBuf,
    /// `ssl_key`: its private key (PEM).
    pub key: PathBuf,
    /// `ssl_chain`: more chain certificates (PEM), optional.
    pub chain: Option<PathBuf>,
}

/// `api_acl`: which users may log in from which addresses (checked at `/login` only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiAcl {
    /// `users: {name or '*': [ip or '*', ...]}`; empty when `users` is missing, which
    /// refuses everybody (as `salt_api_acl_tool` does for a non-empty `api_acl`).
    pub users: BTreeMap<String, Vec<String>>,
}

impl ApiAcl {
    /// `salt_api_acl_tool`: whether `username` may log in from `ip`. The user's own
    /// entry is used when there is one, else the `'*'` entry; an entry allows the
    /// addresses it lists, or every address when it lists `'*'`.
    pub fn allows(&self, username: &str, ip: &str) -> bool {
        let entry = match self.users.get(username) {
            Some(e) => e,
            None => match self.users.get("*") {
                Some(e) => e,
                None => return false,
            },
        };
        entry.iter().any(|a| a == ip || a == "*")
    }
}

/// Everything `halite-api` is configured with.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// `host` (default `0.0.0.0`).
    pub host: String,
    /// `port` (required).
    pub port: u16,
    /// `None` with `disable_ssl: True`.
    pub tls: Option<TlsFiles>,
    /// `root_prefix` without its trailing `/`: `""` for the default `/`.
    pub root_prefix: String,
    /// `debug`: error details in 500 bodies.
    pub debug: bool,
    /// `thread_pool` (default 100): how many requests that talk to the master run at once;
    /// more wait their turn (CherryPy's worker threads). `/events` streams do not count.
    pub thread_pool: usize,
    /// `max_request_body_size` (default 1 MiB): larger bodies get 413.
    pub max_request_body_size: usize,
    /// `webhook_url` without its leading `/` (default `hook`).
    pub webhook_url: String,
    /// `webhook_disable_auth`.
    pub webhook_disable_auth: bool,
    /// `stats_disable_auth`.
    pub stats_disable_auth: bool,
    /// `metrics_disable_auth` (Halite): `/metrics` without a session.
    pub metrics_disable_auth: bool,
    /// `static`: a directory served under [`ApiConfig::static_path`].
    pub static_dir: Option<PathBuf>,
    /// `static_path` (default `/static`).
    pub static_path: String,
    /// `app`: an HTML file served under [`ApiConfig::app_path`] (and to browsers
    /// navigating anywhere else).
    pub app: Option<PathBuf>,
    /// `app_path` (default `/app`).
    pub app_path: String,
    /// `api_acl`.
    pub api_acl: Option<ApiAcl>,
    /// `authorized_ips`: when set, other client addresses get 403.
    pub authorized_ips: Option<Vec<String>>,
    /// `enable_sessions` (default true): false removes `/login`, `/logout`, `/minions`
    /// and `/jobs`.
    pub enable_sessions: bool,
    /// `netapi_enable_clients` (default none).
    pub enable_clients: Vec<String>,
    /// `netapi_allow_raw_shell`.
    pub allow_raw_shell: bool,
    /// `rest_timeout` (default 300 s): how long the `runner` client waits.
    pub rest_timeout: Duration,
    /// `sse_keepalive` (Halite): keep-alive comment interval on `/events`; `None` = off.
    pub sse_keepalive: Option<Duration>,
    /// `events_acl` (Halite): event streams drop the job events the session's ACL does not
    /// cover.
    pub events_acl: bool,
    /// `api_pidfile`.
    pub pidfile: PathBuf,
    /// `api_logfile`.
    pub log_file: PathBuf,
}

impl ApiConfig {
    /// Reads the API's options from a loaded master config.
    ///
    /// # Errors
    /// [`Error::Config`] when there is no `rest_cherrypy:` section with a `port` (salt-api
    /// does not load rest_cherrypy then), when an option has the wrong type, or when TLS is
    /// on and `ssl_crt` or `ssl_key` is missing.
    pub fn from_master(cfg: &MasterConfig) -> Result<ApiConfig, Error> {
        let file = cfg.conf_file.display().to_string();
        let bad = |option: &str, expected: &str, got: &Value| Error::Config {
            file: file.clone(),
            message: format!("invalid value for {option}: expected {expected}, got {got}"),
        };
        let section = match cfg.get("rest_cherrypy") {
            Some(v @ Value::Map(_)) => v.clone(),
            Some(Value::Nil) | None => Value::Map(vec![]),
            Some(other) => return Err(bad("rest_cherrypy", "a mapping", other)),
        };
        let opt = |name: &str| value::get(&section, name).filter(|v| !v.is_nil());
        let text = |name: &str, default: &str| -> Result<String, Error> {
            match opt(name) {
                None => Ok(default.to_owned()),
                Some(Value::String(s)) => s
                    .as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| bad(name, "a string", &Value::Nil)),
                Some(v @ (Value::Integer(_) | Value::F64(_))) => Ok(v.to_string()),
                Some(other) => Err(bad(name, "a string", other)),
            }
        };
        let flag = |name: &str, default: bool| -> Result<bool, Error> {
            match opt(name) {
                None => Ok(default),
                Some(Value::Boolean(b)) => Ok(*b),
                Some(other) => Err(bad(name, "true or false", other)),
            }
        };
        let number = |name: &str, default: u64| -> Result<u64, Error> {
            match opt(name) {
                None => Ok(default),
                Some(v @ Value::Integer(i)) => i.as_u64().ok_or_else(|| bad(name, "a count", v)),
                Some(other) => Err(bad(name, "a count", other)),
            }
        };
        let path = |name: &str| -> Result<Option<PathBuf>, Error> {
            match opt(name) {
                None => Ok(None),
                Some(_) => text(name, "").map(|t| Some(PathBuf::from(t))),
            }
        };

        let port = match opt("port") {
            None => {
                return Err(Error::Config {
                    file,
                    message: "rest_cherrypy: port is required (salt-api does not load \
                              rest_cherrypy without it)"
                        .into(),
                })
            }
            Some(Value::Integer(i)) => i
                .as_u64()
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p > 0)
                .ok_or_else(|| bad("rest_cherrypy: port", "a port number", &Value::Integer(*i)))?,
            Some(Value::String(s)) => s
                .as_str()
                .and_then(|t| t.trim().parse::<u16>().ok())
                .filter(|p| *p > 0)
                .ok_or_else(|| {
                    bad(
                        "rest_cherrypy: port",
                        "a port number",
                        &Value::String(s.clone()),
                    )
                })?,
            Some(other) => return Err(bad("rest_cherrypy: port", "a port number", other)),
        };

        let disable_ssl = flag("disable_ssl", false)?;
        let tls = if disable_ssl {
            None
        } else {
            match (path("ssl_crt")?, path("ssl_key")?) {
                (Some(crt), Some(key)) => Some(TlsFiles {
                    crt,
                    key,
                    chain: path("ssl_chain")?,
                }),
                _ => {
                    return Err(Error::Config {
                        file,
                        message: "rest_cherrypy: ssl_crt and ssl_key are required unless \
                                  disable_ssl is True"
                            .into(),
                    })
                }
            }
        };

        let mut root_prefix = text("root_prefix", "/")?;
        if !root_prefix.starts_with('/') {
            root_prefix.insert(0, '/');
        }
        while root_prefix.ends_with('/') {
            root_prefix.pop();
        }

        let api_acl = match opt("api_acl") {
            None => None,
            Some(Value::Map(m)) if m.is_empty() => None,
            Some(acl @ Value::Map(_)) => {
                Some(parse_api_acl(acl).map_err(|what| bad("rest_cherrypy: api_acl", what, acl))?)
            }
            Some(other) => return Err(bad("rest_cherrypy: api_acl", "a mapping", other)),
        };
        let authorized_ips = match opt("authorized_ips") {
            None => None,
            Some(Value::Array(a)) if a.is_empty() => None,
            Some(list @ Value::Array(a)) => Some(
                a.iter()
                    .map(|ip| match ip {
                        Value::String(s) => s.as_str().map(str::to_owned),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        bad("rest_cherrypy: authorized_ips", "a list of addresses", list)
                    })?,
            ),
            Some(other) => {
                return Err(bad(
                    "rest_cherrypy: authorized_ips",
                    "a list of addresses",
                    other,
                ))
            }
        };

        let enable_clients = match cfg.get("netapi_enable_clients") {
            None | Some(Value::Nil) => vec![],
            Some(list @ Value::Array(a)) => a
                .iter()
                .map(|c| value::str_of(c).map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad("netapi_enable_clients", "a list of client names", list))?,
            Some(other) => {
                return Err(bad(
                    "netapi_enable_clients",
                    "a list of client names",
                    other,
                ))
            }
        };
        let allow_raw_shell = match cfg.get("netapi_allow_raw_shell") {
            None | Some(Value::Nil) => false,
            Some(Value::Boolean(b)) => *b,
            Some(other) => return Err(bad("netapi_allow_raw_shell", "true or false", other)),
        };
        let rest_timeout = match cfg.get("rest_timeout") {
            None | Some(Value::Nil) => Duration::from_secs(300),
            Some(v) => seconds(v).ok_or_else(|| bad("rest_timeout", "seconds", v))?,
        };
        let sse_keepalive = match opt("sse_keepalive") {
            None => Some(DEFAULT_SSE_KEEPALIVE),
            Some(v) => {
                let d =
                    seconds(v).ok_or_else(|| bad("rest_cherrypy: sse_keepalive", "seconds", v))?;
                (!d.is_zero()).then_some(d)
            }
        };

        let sibling = |configured: &str, of: &Path, name: &str| -> Result<PathBuf, Error> {
            match cfg.get(configured) {
                Some(Value::String(s)) => s
                    .as_str()
                    .map(PathBuf::from)
                    .ok_or_else(|| bad(configured, "a path", &Value::Nil)),
                None | Some(Value::Nil) => Ok(of
                    .parent()
                    .map_or_else(|| PathBuf::from(name), |d| d.join(name))),
                Some(other) => Err(bad(configured, "a path", other)),
            }
        };

        let webhook_url = text("webhook_url", "hook")?
            .trim_start_matches('/')
            .trim_end_matches('/')
            .to_owned();
        let clean_path = |p: String| {
            let mut p = if p.starts_with('/') {
                p
            } else {
                format!("/{p}")
            };
            while p.len() > 1 && p.ends_with('/') {
                p.pop();
            }
            p
        };
        let max_body = number("max_request_body_size", 1_048_576)?;
        let thread_pool = number("thread_pool", 100)?.max(1);
        Ok(ApiConfig {
            host: text("host", "0.0.0.0")?,
            port,
            tls,
            root_prefix,
            debug: flag("debug", false)?,
            thread_pool: usize::try_from(thread_pool).unwrap_or(usize::MAX),
            max_request_body_size: usize::try_from(max_body).unwrap_or(usize::MAX),
            webhook_url,
            webhook_disable_auth: flag("webhook_disable_auth", false)?,
            stats_disable_auth: flag("stats_disable_auth", false)?,
            metrics_disable_auth: flag("metrics_disable_auth", false)?,
            static_dir: path("static")?,
            static_path: clean_path(text("static_path", "/static")?),
            app: path("app")?,
            app_path: clean_path(text("app_path", "/app")?),
            api_acl,
            authorized_ips,
            enable_sessions: flag("enable_sessions", true)?,
            enable_clients,
            allow_raw_shell,
            rest_timeout,
            sse_keepalive,
            events_acl: flag("events_acl", false)?,
            pidfile: sibling("api_pidfile", &cfg.pidfile, "salt-api.pid")?,
            log_file: sibling("api_logfile", Path::new(&cfg.log_file), "api")?,
        })
    }

    /// Whether `client` is listed in `netapi_enable_clients`.
    pub fn client_enabled(&self, client: &str) -> bool {
        self.enable_clients.iter().any(|c| c == client)
    }
}

/// `api_acl: {users: {name: [ip...]}}`; `Err` names what was expected.
fn parse_api_acl(acl: &Value) -> Result<ApiAcl, &'static str> {
    let mut users = BTreeMap::new();
    match value::get(acl, "users") {
        None | Some(Value::Nil) => {}
        Some(Value::Map(entries)) => {
            for (k, v) in entries {
                let name = match k {
                    Value::String(s) => s.as_str().ok_or("user names as strings")?.to_owned(),
                    other => other.to_string(),
                };
                let ips = match v {
                    Value::Array(a) => a
                        .iter()
                        .map(|ip| value::str_of(ip).map(str::to_owned))
                        .collect::<Option<Vec<_>>>()
                        .ok_or("lists of addresses")?,
                    _ => return Err("lists of addresses"),
                };
                users.insert(name, ips);
            }
        }
        Some(_) => return Err("users: a mapping of user names to addresses"),
    }
    Ok(ApiAcl { users })
}

/// A number of seconds (integer or float, non-negative, finite).
fn seconds(v: &Value) -> Option<Duration> {
    let f = match v {
        Value::Integer(i) => i.as_f64()?,
        Value::F64(f) => *f,
        Value::F32(f) => f64::from(*f),
        _ => return None,
    };
    (f.is_finite() && f >= 0.0)
        .then(|| Duration::try_from_secs_f64(f).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str) -> Result<ApiConfig, Error> {
        let cfg = MasterConfig::from_yaml_str(yaml, Path::new("/etc/salt/master")).unwrap();
        ApiConfig::from_master(&cfg)
    }

    #[test]
    fn defaults_are_salt_apis_and_no_client_is_enabled() {
        let c = load("rest_cherrypy:\n  port: 8000\n  disable_ssl: true\n").unwrap();
        assert_eq!(c.port, 8000);
        assert_eq!(c.host, "0.0.0.0");
        assert_eq!(c.tls, None);
        assert_eq!(c.root_prefix, "");
        assert_eq!(c.max_request_body_size, 1_048_576);
        assert_eq!(c.thread_pool, 100);
        assert_eq!(c.webhook_url, "hook");
        assert_eq!(c.static_path, "/static");
        assert_eq!(c.app_path, "/app");
        assert!(c.enable_sessions && !c.debug && !c.stats_disable_auth);
        assert!(
            !c.metrics_disable_auth,
            "/metrics needs a session by default"
        );
        assert!(c.enable_clients.is_empty());
        assert!(!c.client_enabled("local"));
        assert!(!c.allow_raw_shell);
        assert_eq!(c.rest_timeout, Duration::from_secs(300));
        assert_eq!(c.sse_keepalive, Some(DEFAULT_SSE_KEEPALIVE));
        assert!(!c.events_acl, "off by default, for compatibility");
        assert_eq!(c.pidfile, Path::new("/var/run/salt-api.pid"));
        assert_eq!(c.log_file, Path::new("/var/log/salt/api"));
    }

    #[test]
    fn without_a_port_rest_cherrypy_does_not_load() {
        assert!(matches!(load("{}\n"), Err(Error::Config { .. })));
        assert!(matches!(
            load("rest_cherrypy:\n  disable_ssl: true\n"),
            Err(Error::Config { .. })
        ));
        let e = load("rest_cherrypy:\n  port: 70000\n  disable_ssl: true\n").unwrap_err();
        assert!(e.to_string().contains("port"), "{e}");
    }

    #[test]
    fn tls_needs_both_files_unless_disabled() {
        let e = load("rest_cherrypy:\n  port: 8000\n").unwrap_err();
        assert!(e.to_string().contains("ssl_crt"), "{e}");
        let e = load("rest_cherrypy:\n  port: 8000\n  ssl_crt: /c.pem\n").unwrap_err();
        assert!(e.to_string().contains("ssl_key"), "{e}");
        let c =
            load("rest_cherrypy:\n  port: 8000\n  ssl_crt: /c.pem\n  ssl_key: /k.pem\n").unwrap();
        assert_eq!(
            c.tls,
            Some(TlsFiles {
                crt: "/c.pem".into(),
                key: "/k.pem".into(),
                chain: None
            })
        );
    }

    #[test]
    fn options_are_read_and_normalised() {
        let c = load(
            "rest_cherrypy:\n  port: '8443'\n  disable_ssl: true\n  root_prefix: api/\n  \
             webhook_url: /hooks/\n  static_path: assets/\n  max_request_body_size: 10\n  \
             authorized_ips: [127.0.0.1]\n  sse_keepalive: 0\n  enable_sessions: false\n  \
             events_acl: true\n\
             netapi_enable_clients: [local, runner]\nrest_timeout: 2.5\n\
             api_pidfile: /run/a.pid\npidfile: /srv/run/m.pid\nlog_file: /srv/log/master\n",
        )
        .unwrap();
        assert_eq!(c.port, 8443);
        assert_eq!(c.root_prefix, "/api");
        assert_eq!(c.webhook_url, "hooks");
        assert_eq!(c.static_path, "/assets");
        assert_eq!(c.max_request_body_size, 10);
        assert_eq!(c.authorized_ips, Some(vec!["127.0.0.1".to_owned()]));
        assert_eq!(c.sse_keepalive, None);
        assert!(c.events_acl);
        assert!(!c.enable_sessions);
        assert!(c.client_enabled("runner") && !c.client_enabled("wheel"));
        assert_eq!(c.rest_timeout, Duration::from_millis(2500));
        assert_eq!(c.pidfile, Path::new("/run/a.pid"));
        assert_eq!(c.log_file, Path::new("/srv/log/api"));
    }

    #[test]
    fn wrong_types_name_the_option() {
        for (yaml, option) in [
            (
                "rest_cherrypy:\n  port: 1\n  disable_ssl: maybe\n",
                "disable_ssl",
            ),
            (
                "rest_cherrypy:\n  port: 1\n  disable_ssl: true\n  thread_pool: -1\n",
                "thread_pool",
            ),
            (
                "rest_cherrypy:\n  port: 1\n  disable_ssl: true\nnetapi_enable_clients: local\n",
                "netapi_enable_clients",
            ),
            (
                "rest_cherrypy:\n  port: 1\n  disable_ssl: true\nrest_timeout: soon\n",
                "rest_timeout",
            ),
            (
                "rest_cherrypy:\n  port: 1\n  disable_ssl: true\n  api_acl: {users: {a: 1}}\n",
                "api_acl",
            ),
        ] {
            let e = load(yaml).unwrap_err().to_string();
            assert!(e.contains(option), "{yaml}: {e}");
        }
    }

    #[test]
    fn api_acl_uses_the_users_own_entry_before_the_wildcard() {
        let acl = ApiAcl {
            users: BTreeMap::from([
                ("alice".to_owned(), vec!["10.0.0.1".to_owned()]),
                ("bob".to_owned(), vec!["*".to_owned()]),
                ("*".to_owned(), vec!["127.0.0.1".to_owned()]),
            ]),
        };
        assert!(acl.allows("alice", "10.0.0.1"));
        assert!(
            !acl.allows("alice", "127.0.0.1"),
            "her own entry wins over '*'"
        );
        assert!(acl.allows("bob", "192.0.2.7"));
        assert!(acl.allows("carol", "127.0.0.1"));
        assert!(!acl.allows("carol", "10.0.0.1"));
        let nobody = ApiAcl {
            users: BTreeMap::new(),
        };
        assert!(!nobody.allows("alice", "127.0.0.1"));
        let c =
            load("rest_cherrypy:\n  port: 1\n  disable_ssl: true\n  api_acl: {x: 1}\n").unwrap();
        assert_eq!(
            c.api_acl,
            Some(ApiAcl {
                users: BTreeMap::new()
            })
        );
    }
}
