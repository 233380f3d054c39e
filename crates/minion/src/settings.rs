//! The minion options the daemon and `halite-call` act on, read once from a loaded
//! [`MinionConfig`] with Salt's defaults, and checked.
//!
//! `halite-config` checks the options behind its typed fields; the others the minion uses
//! (return timers, replay window, publish signatures...) are checked here with the same
//! strictness: a value of the wrong type stops the minion with an error naming the option,
//! its file and what it accepts, where Salt would log a warning and fail later.

use crate::Error;
use halite_config::{MasterType, MinionConfig};
use halite_proto::rsa::{EncAlgo, SigAlgo};
use halite_proto::Value;
use std::time::Duration;

/// Default of the Halite option `fire_master_queue_size`.
pub const DEFAULT_FIRE_MASTER_QUEUE_SIZE: usize = 10_000;

/// Largest accepted `fire_master_queue_size`.
pub const MAX_FIRE_MASTER_QUEUE_SIZE: usize = 10_000_000;

/// Default of the Halite option `publish_max_age`, in seconds: Salt's default CLI
/// `timeout`, after which the CLI asks whether the minion runs the job.
pub const DEFAULT_PUBLISH_MAX_AGE: f64 = 5.0;

/// Default of the Halite option `shutdown_job_timeout`, in seconds: the 5 s Salt's
/// stopping minion waits before it signals its running jobs (`MinionManager.stop_async`).
pub const DEFAULT_SHUTDOWN_JOB_TIMEOUT: f64 = 5.0;

/// Settings derived from the minion configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `id`.
    pub id: String,
    /// The first address of `master` (`host`, `host:port` or `[v6]:port`).
    pub master: String,
    /// `master_port` (used when `master` carries no port).
    pub master_port: u16,
    /// `publish_port`, when configured to something other than the master's answer.
    pub publish_port: Option<u16>,
    /// `ipv6`.
    pub ipv6: Option<bool>,
    /// `encryption_algorithm`.
    pub enc_algo: EncAlgo,
    /// `signing_algorithm`.
    pub sig_algo: SigAlgo,
    /// `acceptance_wait_time`.
    pub acceptance_wait_time: Duration,
    /// `acceptance_wait_time_max` (0: no growth).
    pub acceptance_wait_time_max: Duration,
    /// `auth_tries`: sends of one `_auth` request before it counts as timed out.
    pub auth_tries: u32,
    /// `auth_timeout`: wait for one `_auth` reply.
    pub auth_timeout: Duration,
    /// `auth_retries`: sign-ins before giving up (0: forever).
    pub auth_retries: u32,
    /// A sign-in timeout is an error instead of a retry: set for each master of a
    /// failover list, so a silent master passes the turn to the next (Salt gets there with
    /// `auth_safemode: False`, its default, whose `SaltClientError` the failover loop
    /// catches). `auth_safemode` itself is not read: with one master Salt retries either
    /// way (inside `sign_in` when it is true, in the connect loop when it is false).
    pub sign_in_timeout_is_error: bool,
    /// `rejected_retry`: keep retrying instead of exiting when the key is rejected.
    pub rejected_retry: bool,
    /// `sign_pub_messages`: require and verify the master's publish signatures.
    pub sign_pub_messages: bool,
    /// `request_channel_timeout`.
    pub request_timeout: Duration,
    /// `request_channel_tries`.
    pub request_tries: u32,
    /// `return_retry_timer`.
    pub return_retry_timer: u64,
    /// `return_retry_timer_max`.
    pub return_retry_timer_max: u64,
    /// `return_retry_tries`.
    pub return_retry_tries: u32,
    /// `fire_master_queue_size` (Halite extension, default
    /// [`DEFAULT_FIRE_MASTER_QUEUE_SIZE`]): how many `fire_master` events wait for the
    /// master while it is away before the oldest are dropped.
    pub fire_master_queue_size: usize,
    /// `pub_ret`: send job returns to the master.
    pub pub_ret: bool,
    /// `minion_jid_queue_hwm`: how many recent jids are remembered to drop duplicates.
    pub jid_queue_hwm: usize,
    /// `enable_legacy_startup_events`: also fire `minion_start`.
    pub legacy_startup_events: bool,
    /// `zmq_monitor`: treat a publish-socket disconnect as "master lost".
    pub zmq_monitor: bool,
    /// `recon_default` in milliseconds.
    pub recon_default: i32,
    /// `recon_max` in milliseconds.
    pub recon_max: i32,
    /// `recon_randomize`.
    pub recon_randomize: bool,
    /// `tcp_keepalive`, `tcp_keepalive_idle`, `tcp_keepalive_cnt`, `tcp_keepalive_intvl`.
    pub tcp_keepalive: (bool, i32, i32, i32),
    /// `retry_dns` (0: fall back to 127.0.0.1 at once).
    pub retry_dns: Duration,
    /// `saltenv` (sent with `_pillar`).
    pub saltenv: Value,
    /// `pillarenv` (sent with `_pillar`).
    pub pillarenv: Value,
    /// `autosign_grains` names, sent with `_auth` when set.
    pub autosign_grains: Vec<String>,
    /// `resources` (sent with `_register_resources`; Halite manages none itself).
    pub resources: Value,
    /// `verify_master_pubkey_sign`: the master's key must carry a signature that verifies
    /// with `pki_dir/<master_sign_key_name>.pub` (checked on every sign-in).
    pub verify_master_pubkey_sign: bool,
    /// `always_verify_signature`: log the verification of an unchanged key at INFO as Salt
    /// does when it checks it (Halite always checks it).
    pub always_verify_signature: bool,
    /// `master_sign_key_name`.
    pub master_sign_key_name: String,
    /// `master_finger`, when set and not empty.
    pub master_finger: Option<String>,
    /// `hash_type` (for `master_finger`).
    pub hash_type: String,
    /// `master`: every configured address, in order ([`Settings::master`] is the first).
    pub masters: Vec<String>,
    /// `master_type`.
    pub master_type: MasterType,
    /// `random_master`, or its deprecated alias `master_shuffle`: shuffle the list.
    pub random_master: bool,
    /// The deprecated `master_shuffle` was set (Salt warns about it).
    pub master_shuffle: bool,
    /// `master_alive_interval` (0: off): the liveness period of the master connection
    /// ([`Heartbeat`](crate::transport::Heartbeat)).
    pub master_alive_interval: Duration,
    /// `master_failback`: with `failover`, go back to the first master once it answers.
    pub master_failback: bool,
    /// `master_failback_interval`, or `master_alive_interval` when that is 0 (Salt's rule).
    pub master_failback_interval: Duration,
    /// `master_tries`: rounds over the master list before a connection attempt gives up
    /// (`None`: no limit, Salt's -1 on Linux).
    pub master_tries: Option<u32>,
    /// `retry_dns_count`: retries of an unresolvable master name (`None`: no limit).
    pub retry_dns_count: Option<u32>,
    /// `publish_max_age` (Halite extension, default [`DEFAULT_PUBLISH_MAX_AGE`]): a
    /// publish that may have waited longer than this on the minion before it could run
    /// is stale and dropped (see [`daemon`](crate::daemon)).
    pub publish_max_age: Duration,
    /// `shutdown_job_timeout` (Halite extension, default
    /// [`DEFAULT_SHUTDOWN_JOB_TIMEOUT`]): how long a stopping minion waits for its
    /// running jobs to finish and return (see [`jobs`](crate::jobs)).
    pub shutdown_job_timeout: Duration,
}

/// Reads typed options out of the raw configuration, naming the option on error.
struct Opts<'a>(&'a MinionConfig);

impl Opts<'_> {
    fn invalid(&self, option: &str, expected: &str, got: &Value) -> Error {
        Error::Config(halite_config::ConfigError::InvalidValue {
            option: option.to_owned(),
            origin: self.0.origin(option),
            expected: expected.to_owned(),
            got: got.to_string(),
        })
    }

    fn get(&self, option: &str) -> &Value {
        const NIL: &Value = &Value::Nil;
        self.0.get(option).unwrap_or(NIL)
    }

    fn boolean(&self, option: &str, default: bool) -> Result<bool, Error> {
        match self.get(option) {
            Value::Nil => Ok(default),
            Value::Boolean(b) => Ok(*b),
            other => Err(self.invalid(option, "true or false", other)),
        }
    }

    fn int(&self, option: &str, default: i64, min: i64, max: i64) -> Result<i64, Error> {
        let v = self.get(option);
        let n = match v {
            Value::Nil => return Ok(default),
            Value::Integer(i) => i.as_i64(),
            _ => None,
        };
        n.filter(|n| (min..=max).contains(n))
            .ok_or_else(|| self.invalid(option, &format!("an integer from {min} to {max}"), v))
    }

    fn seconds(&self, option: &str, default: f64) -> Result<Duration, Error> {
        let v = self.get(option);
        let n = match v {
            Value::Nil => Some(default),
            Value::Integer(i) => i.as_i64().map(|i| i as f64),
            Value::F64(f) => Some(*f),
            Value::F32(f) => Some(f64::from(*f)),
            _ => None,
        };
        n.filter(|n| n.is_finite() && *n >= 0.0 && *n < 1e9)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| self.invalid(option, "a non-negative number of seconds", v))
    }
}

impl Settings {
    /// Reads and checks the settings of `cfg`.
    pub fn from_config(cfg: &MinionConfig) -> Result<Settings, Error> {
        let o = Opts(cfg);
        let master = cfg
            .master
            .addresses()
            .first()
            .map(|m| (*m).to_owned())
            .unwrap_or_default();
        let enc_algo = EncAlgo::parse(cfg.encryption_algorithm.as_str()).map_err(|_| {
            o.invalid(
                "encryption_algorithm",
                "OAEP-SHA1 or OAEP-SHA224",
                o.get("encryption_algorithm"),
            )
        })?;
        let sig_algo = SigAlgo::parse(cfg.signing_algorithm.as_str()).map_err(|_| {
            o.invalid(
                "signing_algorithm",
                "PKCS1v15-SHA1 or PKCS1v15-SHA224",
                o.get("signing_algorithm"),
            )
        })?;
        let autosign_grains = match o.get("autosign_grains") {
            Value::Nil => Vec::new(),
            Value::Array(items) => items
                .iter()
                .map(|i| {
                    i.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| o.invalid("autosign_grains", "a list of grain names", i))
                })
                .collect::<Result<_, _>>()?,
            other => return Err(o.invalid("autosign_grains", "a list of grain names", other)),
        };
        let env = |name: &str| -> Result<Value, Error> {
            match o.get(name) {
                v @ (Value::Nil | Value::String(_)) => Ok(v.clone()),
                other => Err(o.invalid(name, "an environment name", other)),
            }
        };
        let resources = match o.get("resources") {
            Value::Nil => Value::Map(Vec::new()),
            v @ Value::Map(_) => v.clone(),
            other => return Err(o.invalid("resources", "a mapping", other)),
        };
        let i32_opt = |name: &str, default: i64| -> Result<i32, Error> {
            Ok(o.int(name, default, i64::from(i32::MIN), i64::from(i32::MAX))? as i32)
        };
        if cfg.verify_master_pubkey_sign && cfg.master_sign_key_name.is_empty() {
            return Err(o.invalid(
                "master_sign_key_name",
                "the name of the verification key pair (verify_master_pubkey_sign is on)",
                o.get("master_sign_key_name"),
            ));
        }
        if cfg.master_finger.is_some()
            && halite_proto::pem::pem_finger(b"", &cfg.hash_type).is_err()
        {
            return Err(o.invalid(
                "hash_type",
                "a hash algorithm for master_finger (such as sha256)",
                o.get("hash_type"),
            ));
        }
        let master_alive_interval = o.seconds("master_alive_interval", 0.0)?;
        let master_failback = o.boolean("master_failback", false)?;
        let master_failback_interval = match o.seconds("master_failback_interval", 0.0)? {
            d if d.is_zero() && master_failback => master_alive_interval,
            d => d,
        };
        let master_shuffle = o.boolean("master_shuffle", false)?;
        let master_tries = o.int("master_tries", -1, i64::MIN, i64::from(u32::MAX))?;
        let retry_dns_count = match o.get("retry_dns_count") {
            Value::Nil => None,
            _ => Some(o.int("retry_dns_count", 0, 0, i64::from(u32::MAX))? as u32),
        };
        let return_retry_timer = o.int("return_retry_timer", 5, 0, 86_400)? as u64;
        let return_retry_timer_max = o.int("return_retry_timer_max", 10, 0, 86_400)? as u64;
        Ok(Settings {
            id: cfg.id.clone(),
            master,
            master_port: cfg.master_port,
            publish_port: cfg.publish_port,
            ipv6: cfg.ipv6,
            enc_algo,
            sig_algo,
            acceptance_wait_time: Duration::from_secs_f64(cfg.acceptance_wait_time.max(0.0)),
            acceptance_wait_time_max: Duration::from_secs_f64(
                cfg.acceptance_wait_time_max.max(0.0),
            ),
            auth_tries: cfg.auth_tries.max(1),
            auth_timeout: Duration::from_secs(cfg.auth_timeout.max(1)),
            auth_retries: o.int("auth_retries", 0, 0, i64::from(u32::MAX))? as u32,
            sign_in_timeout_is_error: false,
            rejected_retry: o.boolean("rejected_retry", false)?,
            sign_pub_messages: o.boolean("sign_pub_messages", false)?,
            request_timeout: o.seconds("request_channel_timeout", 60.0)?,
            request_tries: o.int("request_channel_tries", 3, 1, 1000)? as u32,
            return_retry_timer,
            return_retry_timer_max,
            return_retry_tries: o.int("return_retry_tries", 3, 1, 1000)? as u32,
            fire_master_queue_size: o.int(
                "fire_master_queue_size",
                DEFAULT_FIRE_MASTER_QUEUE_SIZE as i64,
                1,
                MAX_FIRE_MASTER_QUEUE_SIZE as i64,
            )? as usize,
            pub_ret: o.boolean("pub_ret", true)?,
            jid_queue_hwm: o.int("minion_jid_queue_hwm", 100, 1, 1_000_000)? as usize,
            legacy_startup_events: o.boolean("enable_legacy_startup_events", true)?,
            zmq_monitor: o.boolean("zmq_monitor", true)?,
            recon_default: i32_opt("recon_default", 1000)?,
            recon_max: i32_opt("recon_max", 10_000)?,
            recon_randomize: o.boolean("recon_randomize", true)?,
            tcp_keepalive: (
                o.boolean("tcp_keepalive", true)?,
                i32_opt("tcp_keepalive_idle", 300)?,
                i32_opt("tcp_keepalive_cnt", -1)?,
                i32_opt("tcp_keepalive_intvl", -1)?,
            ),
            retry_dns: o.seconds("retry_dns", 30.0)?,
            saltenv: env("saltenv")?,
            pillarenv: env("pillarenv")?,
            autosign_grains,
            resources,
            verify_master_pubkey_sign: cfg.verify_master_pubkey_sign,
            always_verify_signature: cfg.always_verify_signature,
            master_sign_key_name: cfg.master_sign_key_name.clone(),
            master_finger: cfg.master_finger.clone(),
            hash_type: cfg.hash_type.clone(),
            masters: cfg
                .master
                .addresses()
                .into_iter()
                .map(str::to_owned)
                .collect(),
            master_type: cfg.master_type,
            random_master: o.boolean("random_master", false)? || master_shuffle,
            master_shuffle,
            master_alive_interval,
            master_failback,
            master_failback_interval,
            // Salt compares the round count with master_tries: 0 and below never match.
            master_tries: u32::try_from(master_tries).ok().filter(|n| *n > 0),
            retry_dns_count,
            publish_max_age: o.seconds("publish_max_age", DEFAULT_PUBLISH_MAX_AGE)?,
            shutdown_job_timeout: o
                .seconds("shutdown_job_timeout", DEFAULT_SHUTDOWN_JOB_TIMEOUT)?,
        })
    }

    /// The per-try timeout of a job return: `return_retry_timer_max` when set, else
    /// `return_retry_timer`, times the number of tries (Salt's `_return_pub` budget).
    pub fn return_timeout(&self) -> Duration {
        let per_try = if self.return_retry_timer_max > 0 {
            self.return_retry_timer_max
        } else {
            self.return_retry_timer
        };
        Duration::from_secs(per_try.max(1) * u64::from(self.return_retry_tries))
    }

    /// `_return_retry_timer()`: a random whole number of seconds between the two timers.
    pub fn random_return_timer(&self) -> Duration {
        let lo = self.return_retry_timer;
        let hi = self.return_retry_timer_max.max(lo);
        Duration::from_secs((lo + crate::random_below(hi - lo + 1)).max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn settings(yaml: &str) -> Result<Settings, Error> {
        let cfg = MinionConfig::from_yaml_str(yaml, Path::new("/tmp/halite-test/minion")).unwrap();
        Settings::from_config(&cfg)
    }

    #[test]
    fn salt_defaults_are_used_when_nothing_is_set() {
        let s = settings("id: m1\n").unwrap();
        assert_eq!(s.master, "salt");
        assert_eq!(s.master_port, 4506);
        assert_eq!(s.acceptance_wait_time, Duration::from_secs(10));
        assert_eq!((s.auth_tries, s.auth_timeout), (7, Duration::from_secs(5)));
        assert_eq!(
            (
                s.return_retry_timer,
                s.return_retry_timer_max,
                s.return_retry_tries
            ),
            (5, 10, 3)
        );
        assert_eq!(s.return_timeout(), Duration::from_secs(30));
        assert_eq!(s.jid_queue_hwm, 100);
        assert_eq!(s.fire_master_queue_size, DEFAULT_FIRE_MASTER_QUEUE_SIZE);
        assert_eq!(
            (s.publish_max_age, s.shutdown_job_timeout),
            (Duration::from_secs(5), Duration::from_secs(5))
        );
        assert!(!s.sign_pub_messages && s.pub_ret && s.zmq_monitor && s.legacy_startup_events);
        assert_eq!(s.enc_algo, EncAlgo::OaepSha1);
        assert_eq!(s.resources, Value::Map(vec![]));
        assert!(!s.verify_master_pubkey_sign && !s.always_verify_signature);
        assert_eq!(s.master_sign_key_name, "master_sign");
        assert_eq!(
            (s.master_finger.as_deref(), s.hash_type.as_str()),
            (None, "sha256")
        );
    }

    #[test]
    fn mistyped_options_name_the_option_and_file() {
        for (yaml, option) in [
            ("sign_pub_messages: maybe\n", "sign_pub_messages"),
            ("return_retry_tries: 0\n", "return_retry_tries"),
            ("minion_jid_queue_hwm: lots\n", "minion_jid_queue_hwm"),
            ("request_channel_timeout: -1\n", "request_channel_timeout"),
            ("resources: [a]\n", "resources"),
            ("fire_master_queue_size: 0\n", "fire_master_queue_size"),
            ("fire_master_queue_size: many\n", "fire_master_queue_size"),
            ("publish_max_age: soon\n", "publish_max_age"),
            ("shutdown_job_timeout: -3\n", "shutdown_job_timeout"),
            (
                "verify_master_pubkey_sign: true\nmaster_sign_key_name: ''\n",
                "master_sign_key_name",
            ),
            ("master_finger: 'ab:cd'\nhash_type: nohash\n", "hash_type"),
        ] {
            let err = settings(yaml).unwrap_err().to_string();
            assert!(
                err.contains(option) && err.contains("/tmp/halite-test/minion"),
                "{err}"
            );
        }
    }

    #[test]
    fn random_return_timer_stays_between_the_two_timers() {
        let s = settings("return_retry_timer: 2\nreturn_retry_timer_max: 4\n").unwrap();
        for _ in 0..50 {
            let t = s.random_return_timer().as_secs();
            assert!((2..=4).contains(&t), "{t}");
        }
    }

    #[test]
    fn multi_master_options_follow_salts_rules() {
        let s = settings("id: m1\n").unwrap();
        assert_eq!(s.masters, ["salt"]);
        assert_eq!(s.master_type, MasterType::Str);
        assert!(!s.random_master && !s.master_failback);
        assert!(s.master_alive_interval.is_zero() && s.master_failback_interval.is_zero());
        assert_eq!((s.master_tries, s.retry_dns_count), (None, None));

        let s = settings(
            "master: [a, 'b:4606']\nmaster_type: failover\nmaster_alive_interval: 3\nmaster_failback: true\nmaster_shuffle: true\nmaster_tries: 2\nretry_dns_count: 0\n",
        )
        .unwrap();
        assert_eq!(s.masters, ["a", "b:4606"]);
        assert_eq!(s.master, "a");
        assert_eq!(s.master_type, MasterType::Failover);
        assert!(s.random_master && s.master_shuffle);
        // master_failback_interval 0 takes master_alive_interval.
        assert_eq!(s.master_failback_interval, Duration::from_secs(3));
        assert_eq!((s.master_tries, s.retry_dns_count), (Some(2), Some(0)));

        let s = settings("master_failback_interval: 7\nmaster_tries: 0\n").unwrap();
        assert_eq!(s.master_failback_interval, Duration::from_secs(7));
        assert_eq!(s.master_tries, None, "0 rounds never match: no limit");
        for (yaml, option) in [
            ("master_alive_interval: soon\n", "master_alive_interval"),
            ("master_failback: perhaps\n", "master_failback"),
            ("retry_dns_count: -1\n", "retry_dns_count"),
        ] {
            let err = settings(yaml).unwrap_err().to_string();
            assert!(err.contains(option), "{err}");
        }
    }
}
