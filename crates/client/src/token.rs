//! eauth tokens on the client side: asking the master for one (`mk_token`) or about one
//! (`get_token`), as Salt's `salt.auth.Resolver` does, and the `token_file` a CLI keeps it
//! in (`salt.config.client_config`, `Resolver.token_cli`).
//!
//! The token file: `token_file` from the master config, else
//! `$XDG_CONFIG_HOME/salt/salt_token` (`~/.config/salt/salt_token` without the variable)
//! when that `salt` directory exists, else `~/salt_token`; `~` expanded and made absolute
//! as Python's `abspath(expanduser(...))` does. Its token is used while the file's mtime
//! plus the config's `token_expire` (43200 s) is later than now.
//!
//! Deviation (safety): Salt writes the file under umask 0177 but keeps the mode of a file
//! that already exists; here the file is created 0600 and an existing one is truncated
//! and set to 0600 before the token is written, so the token is never readable by others.

use crate::local::LocalClient;
use crate::Error;
use halite_config::MasterConfig;
use halite_proto::value::{self, s};
use halite_proto::Value;
use std::ffi::{CStr, CString, OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Salt's default `token_expire`: 12 hours.
pub const DEFAULT_TOKEN_EXPIRE: i64 = 43200;

/// Where a CLI keeps its eauth token, and how long a saved token is used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenFile {
    path: PathBuf,
    expire: i64,
}

impl TokenFile {
    /// The token file of a CLI using `cfg`, as `client_config` finds it: the config's
    /// `token_file`, else [`default_token_file`] for this process's `XDG_CONFIG_HOME` and
    /// home directory; `token_expire` from the config.
    pub fn for_config(cfg: &MasterConfig) -> TokenFile {
        let configured = cfg.get("token_file").and_then(value::str_of);
        let raw = match configured {
            Some(p) => PathBuf::from(p),
            None => default_token_file(std::env::var_os("XDG_CONFIG_HOME").as_deref(), &home()),
        };
        let expire = match cfg.get("token_expire") {
            Some(Value::Integer(i)) => i.as_i64().unwrap_or(DEFAULT_TOKEN_EXPIRE),
            _ => DEFAULT_TOKEN_EXPIRE,
        };
        TokenFile::new(abspath(&expanduser(&raw)), expire)
    }

    /// A token file at `path` whose token is used for `expire` seconds after it was written.
    pub fn new(path: PathBuf, expire: i64) -> TokenFile {
        TokenFile { path, expire }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The saved token, when the file is a regular file, readable, and younger than
    /// `token_expire` (surrounding whitespace removed, as Salt's `read().strip()`).
    pub fn load(&self) -> Option<String> {
        self.load_at(SystemTime::now())
    }

    /// [`TokenFile::load`] as of `now`: valid while `mtime + token_expire > now`, `now` in
    /// whole seconds (Salt compares with `time.mktime(time.localtime())`).
    pub fn load_at(&self, now: SystemTime) -> Option<String> {
        let meta = std::fs::metadata(&self.path).ok()?;
        if !meta.is_file() {
            return None;
        }
        let mtime = seconds_since_epoch(meta.modified().ok()?);
        let now = seconds_since_epoch(now).floor();
        if mtime + self.expire as f64 <= now {
            return None;
        }
        match std::fs::read(&self.path) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => Some(text.trim().to_owned()),
                Err(_) => {
                    tracing::debug!("{} is not text; no token", self.path.display());
                    None
                }
            },
            Err(e) => {
                tracing::debug!("cannot read {}: {e}", self.path.display());
                None
            }
        }
    }

    /// Writes `token` (and nothing else) to the file, which is created 0600, or truncated
    /// and set to 0600 if it exists, before anything is written to it.
    pub fn save(&self, token: &str) -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&self.path)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        file.write_all(token.as_bytes())?;
        file.flush()
    }
}

/// `client_config`'s default token file for `XDG_CONFIG_HOME` (`None`: unset) and the
/// home directory: `<xdg>/salt/salt_token` (`<home>/.config/salt/salt_token` when unset)
/// if that `salt` directory exists, else `<home>/salt_token`.
pub fn default_token_file(xdg_config_home: Option<&OsStr>, home: &Path) -> PathBuf {
    let xdg = match xdg_config_home {
        Some(dir) => PathBuf::from(dir),
        None => home.join(".config"),
    };
    let xdg_salt = xdg.join("salt");
    if xdg_salt.is_dir() {
        xdg_salt.join("salt_token")
    } else {
        home.join("salt_token")
    }
}

/// The first line of `cachedir/.root_key` (newline kept, as Python's `readline`), when
/// this process can read it. Salt's CLIs prefer it to a saved token.
pub fn root_key(cfg: &MasterConfig) -> Option<String> {
    let text = std::fs::read(cfg.cachedir.join(".root_key")).ok()?;
    let text = String::from_utf8(text).ok()?;
    let end = text.find('\n').map_or(text.len(), |i| i + 1);
    Some(text.get(..end).unwrap_or_default().to_owned())
}

fn seconds_since_epoch(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// `os.path.expanduser("~")`: `HOME` when set, else the user database's home of this
/// process's uid; `/` when neither is known.
fn home() -> PathBuf {
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h),
        None => passwd_home(None).unwrap_or_else(|| PathBuf::from("/")),
    }
}

/// `os.path.expanduser`: a leading `~` becomes [`home`], `~name` that user's home (left
/// as is when there is no such user); anything else is unchanged.
fn expanduser(path: &Path) -> PathBuf {
    let bytes = path.as_os_str().as_bytes();
    let Some(rest) = bytes.strip_prefix(b"~") else {
        return path.to_owned();
    };
    let split = rest.iter().position(|b| *b == b'/').unwrap_or(rest.len());
    let (name, tail) = rest.split_at(split);
    let user_home = if name.is_empty() {
        home()
    } else {
        let Some(h) = std::str::from_utf8(name)
            .ok()
            .and_then(|n| passwd_home(Some(n)))
        else {
            return path.to_owned();
        };
        h
    };
    let mut joined = user_home.into_os_string().into_vec();
    while joined.last() == Some(&b'/') {
        joined.pop();
    }
    joined.extend_from_slice(tail);
    if joined.is_empty() {
        joined.push(b'/');
    }
    PathBuf::from(OsString::from_vec(joined))
}

/// `os.path.abspath`: joined to the working directory when relative, then normalised
/// lexically (`.` dropped, `..` removes the previous component).
fn abspath(path: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(path)
    };
    let mut out = PathBuf::from("/");
    for part in joined.components() {
        match part {
            Component::Normal(p) => out.push(p),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// A home directory from the user database: `name`'s, or this process's uid's.
fn passwd_home(name: Option<&str>) -> Option<PathBuf> {
    let cname = match name {
        Some(n) => Some(CString::new(n).ok()?),
        None => None,
    };
    let mut buf = vec![0u8; 16384];
    // SAFETY: a zeroed passwd is a valid out-parameter.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call and `buf` outlives it; getuid cannot fail.
    let rc = unsafe {
        match &cname {
            Some(c) => libc::getpwnam_r(
                c.as_ptr(),
                &mut pwd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            ),
            None => libc::getpwuid_r(
                libc::getuid(),
                &mut pwd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            ),
        }
    };
    if rc != 0 || result.is_null() || pwd.pw_dir.is_null() {
        return None;
    }
    // SAFETY: `pw_dir` is NUL-terminated inside `buf`, which is still alive.
    let dir = unsafe { CStr::from_ptr(pwd.pw_dir) };
    Some(PathBuf::from(OsStr::from_bytes(dir.to_bytes())))
}

/// Reads the master's answer to `mk_token`: the token data (a map with a string `token`,
/// plus `start`, `expire`, `name`, `eauth`, maybe `groups`), or
/// [`Error::Authentication`] for the `""` (or other empty answer) a master gives when the
/// credentials are refused.
pub fn parse_mk_token_reply(reply: &Value) -> Result<Value, Error> {
    if value::get_str(reply, "token").is_some() {
        return Ok(reply.clone());
    }
    if let Some(err) = master_error(reply) {
        return Err(err);
    }
    if !value::truthy(reply) {
        return Err(Error::Authentication);
    }
    Err(Error::BadReply(format!("{reply}")))
}

/// Reads the master's answer to `get_token`: the token data, or `None` for a token it
/// does not have or that expired (`{}`, or `False`).
pub fn parse_get_token_reply(reply: &Value) -> Result<Option<Value>, Error> {
    if let Some(err) = master_error(reply) {
        return Err(err);
    }
    match reply {
        Value::Map(m) if !m.is_empty() => Ok(Some(reply.clone())),
        other if !value::truthy(other) => Ok(None),
        other => Err(Error::BadReply(format!("{other}"))),
    }
}

/// `{"error": {"name", "message"}}` as [`Error::Master`].
fn master_error(reply: &Value) -> Option<Error> {
    let err = value::get(reply, "error")?;
    Some(Error::Master {
        name: value::get_str(err, "name").unwrap_or("").to_owned(),
        message: value::get_str(err, "message")
            .map(str::to_owned)
            .unwrap_or_else(|| format!("{err}")),
    })
}

impl LocalClient {
    /// Asks the master for a token for these eauth credentials: the clear load
    /// `{"username", "password", "cmd": "mk_token", "eauth"}` that Salt's
    /// `Resolver.token_cli` sends (no `token_expire`: the master's default applies).
    /// Returns the token data ([`parse_mk_token_reply`]).
    pub async fn mk_token(
        &self,
        eauth: &str,
        username: &str,
        password: &str,
    ) -> Result<Value, Error> {
        let load = Value::Map(vec![
            (s("username"), s(username)),
            (s("password"), s(password)),
            (s("cmd"), s("mk_token")),
            (s("eauth"), s(eauth)),
        ]);
        parse_mk_token_reply(&self.send_clear(load).await?)
    }

    /// Asks the master what it knows of `token` (`Resolver.get_token`): its data, or
    /// `None` when it has no such token or the token expired.
    pub async fn get_token(&self, token: &str) -> Result<Option<Value>, Error> {
        let load = Value::Map(vec![(s("token"), s(token)), (s("cmd"), s("get_token"))]);
        parse_get_token_reply(&self.send_clear(load).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::value::map;
    use std::time::Duration;

    #[test]
    fn default_token_file_is_in_the_xdg_salt_dir_only_when_it_exists() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        assert_eq!(default_token_file(None, h), h.join("salt_token"));
        std::fs::create_dir_all(h.join(".config/salt")).unwrap();
        assert_eq!(
            default_token_file(None, h),
            h.join(".config/salt/salt_token")
        );
        // XDG_CONFIG_HOME replaces ~/.config, whether or not ~/.config/salt exists.
        let xdg = h.join("xdg");
        assert_eq!(
            default_token_file(Some(xdg.as_os_str()), h),
            h.join("salt_token")
        );
        std::fs::create_dir_all(xdg.join("salt")).unwrap();
        assert_eq!(
            default_token_file(Some(xdg.as_os_str()), h),
            xdg.join("salt/salt_token")
        );
    }

    #[test]
    fn configured_token_file_wins_and_is_made_absolute() {
        let cfg = MasterConfig::from_yaml_str(
            "token_file: /srv/x/../tokens/./mine\ntoken_expire: 60\n",
            Path::new("/nonexistent/master"),
        )
        .unwrap();
        let tf = TokenFile::for_config(&cfg);
        assert_eq!(tf.path(), Path::new("/srv/tokens/mine"));
        assert_eq!(tf, TokenFile::new(PathBuf::from("/srv/tokens/mine"), 60));
        let cfg = MasterConfig::from_yaml_str("{}\n", Path::new("/nonexistent/master")).unwrap();
        assert_eq!(TokenFile::for_config(&cfg).expire, DEFAULT_TOKEN_EXPIRE);
    }

    #[test]
    fn expanduser_and_abspath_follow_python() {
        let home = home();
        assert_eq!(expanduser(Path::new("~")), home);
        assert_eq!(expanduser(Path::new("~/t")), home.join("t"));
        assert_eq!(
            expanduser(Path::new("~root/t")),
            passwd_home(Some("root")).unwrap().join("t")
        );
        assert_eq!(
            expanduser(Path::new("~no-such-user-here/t")),
            Path::new("~no-such-user-here/t")
        );
        assert_eq!(expanduser(Path::new("/a/~b")), Path::new("/a/~b"));
        assert_eq!(abspath(Path::new("/a/b/../../../c/.")), Path::new("/c"));
        assert_eq!(
            abspath(Path::new("rel/x")),
            std::env::current_dir().unwrap().join("rel/x")
        );
    }

    #[test]
    fn saved_token_is_used_until_mtime_plus_expire() {
        let dir = tempfile::tempdir().unwrap();
        let tf = TokenFile::new(dir.path().join("salt_token"), 100);
        assert_eq!(tf.load(), None, "no file, no token");
        tf.save("abc123").unwrap();
        let mtime = std::fs::metadata(tf.path()).unwrap().modified().unwrap();
        assert_eq!(tf.load_at(mtime).as_deref(), Some("abc123"));
        assert_eq!(
            tf.load_at(mtime + Duration::from_secs(99)).as_deref(),
            Some("abc123")
        );
        assert_eq!(tf.load_at(mtime + Duration::from_secs(101)), None);
        // Whitespace around the token is not part of it.
        std::fs::write(tf.path(), " tok\n").unwrap();
        assert_eq!(tf.load().as_deref(), Some("tok"));
        // A directory is not a token file.
        let d = TokenFile::new(dir.path().to_owned(), 100);
        assert_eq!(d.load(), None);
    }

    #[test]
    fn token_file_is_0600_even_when_it_existed_with_a_wider_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("salt_token");
        let tf = TokenFile::new(path.clone(), DEFAULT_TOKEN_EXPIRE);
        tf.save("first").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        tf.save("second").unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "second");
        // A missing directory is an error, reported to the caller.
        let bad = TokenFile::new(dir.path().join("no/such/dir/t"), 1);
        assert!(bad.save("x").is_err());
    }

    #[test]
    fn mk_token_reply_is_the_token_data_or_an_authentication_error() {
        let data = map([
            ("start", Value::F64(1.0)),
            ("expire", Value::F64(2.0)),
            ("name", s("alice")),
            ("eauth", s("file")),
            ("token", s("ab12")),
        ]);
        assert_eq!(parse_mk_token_reply(&data).unwrap(), data);
        for refused in [s(""), Value::Nil, Value::Boolean(false), map::<&str>([])] {
            assert!(
                matches!(parse_mk_token_reply(&refused), Err(Error::Authentication)),
                "{refused}"
            );
        }
        let err = map([(
            "error",
            map([("name", s("SaltInvocationError")), ("message", s("no"))]),
        )]);
        assert!(matches!(
            parse_mk_token_reply(&err),
            Err(Error::Master { ref message, .. }) if message == "no"
        ));
        for odd in [
            s("bad load"),
            map([("token", Value::from(5))]),
            Value::from(1),
        ] {
            assert!(
                matches!(parse_mk_token_reply(&odd), Err(Error::BadReply(_))),
                "{odd}"
            );
        }
    }

    #[test]
    fn get_token_reply_is_the_data_or_none() {
        let data = map([("name", s("alice")), ("token", s("ab12"))]);
        assert_eq!(parse_get_token_reply(&data).unwrap(), Some(data));
        assert_eq!(parse_get_token_reply(&map::<&str>([])).unwrap(), None);
        assert_eq!(parse_get_token_reply(&Value::Boolean(false)).unwrap(), None);
        assert!(parse_get_token_reply(&s("bad load")).is_err());
        assert!(parse_get_token_reply(&map([("error", s("x"))])).is_err());
    }

    #[test]
    fn root_key_is_its_first_line_when_readable() {
        let dir = tempfile::tempdir().unwrap();
        let yaml = format!("cachedir: {}\n", dir.path().display());
        let cfg = MasterConfig::from_yaml_str(&yaml, Path::new("/nonexistent/master")).unwrap();
        assert_eq!(root_key(&cfg), None);
        std::fs::write(dir.path().join(".root_key"), "KEY").unwrap();
        assert_eq!(root_key(&cfg).as_deref(), Some("KEY"));
        std::fs::write(dir.path().join(".root_key"), "KEY\nmore").unwrap();
        assert_eq!(root_key(&cfg).as_deref(), Some("KEY\n"));
    }
}
