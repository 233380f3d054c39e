//! The `file` backend (Salt's `salt/auth/file.py`): users and passwords in a local file.

use std::fs::File;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use halite_target::pyvalue;
use openssl::hash::MessageDigest;
use rmpv::Value;

use crate::crypt::{ct_eq, hex_digest, verify_htpasswd, HashTrouble};
use crate::{Backend, Error, Identity};

/// Largest password file read (bytes). A larger file fails every attempt.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The file backend's options, without the `^`.
const OPTIONS: [&str; 7] = [
    "filename",
    "filetype",
    "hashtype",
    "field_separator",
    "username_field",
    "password_field",
    "realm",
];

/// How a `text` file stores passwords (`^hashtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextHash {
    /// The password itself (`plaintext`, the default).
    Plaintext,
    /// Lowercase hex MD5 of the UTF-8 password.
    Md5,
    /// Lowercase hex SHA-1.
    Sha1,
    /// Lowercase hex SHA-224.
    Sha224,
    /// Lowercase hex SHA-256.
    Sha256,
    /// Lowercase hex SHA-384.
    Sha384,
    /// Lowercase hex SHA-512.
    Sha512,
}

impl TextHash {
    const ALL: [(&'static str, TextHash); 7] = [
        ("plaintext", TextHash::Plaintext),
        ("md5", TextHash::Md5),
        ("sha1", TextHash::Sha1),
        ("sha224", TextHash::Sha224),
        ("sha256", TextHash::Sha256),
        ("sha384", TextHash::Sha384),
        ("sha512", TextHash::Sha512),
    ];

    /// The `^hashtype` value naming this.
    pub fn as_str(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, h)| *h == self)
            .map_or("plaintext", |(name, _)| name)
    }

    /// What a file line holds for `password`.
    fn encode(self, password: &str) -> Result<String, Error> {
        let md = match self {
            TextHash::Plaintext => return Ok(password.to_owned()),
            TextHash::Md5 => MessageDigest::md5(),
            TextHash::Sha1 => MessageDigest::sha1(),
            TextHash::Sha224 => MessageDigest::sha224(),
            TextHash::Sha256 => MessageDigest::sha256(),
            TextHash::Sha384 => MessageDigest::sha384(),
            TextHash::Sha512 => MessageDigest::sha512(),
        };
        hex_digest(md, self.as_str(), password.as_bytes())
    }
}

/// The options of a `text` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextOptions {
    /// `^hashtype` (`plaintext`).
    pub hash: TextHash,
    /// `^field_separator` (`:`). Empty: no user authenticates.
    pub separator: String,
    /// `^username_field`, 1-based (1). 0: every attempt is an [`Error::Malformed`].
    pub username_field: usize,
    /// `^password_field`, 1-based (2). 0: every attempt is an [`Error::Malformed`].
    pub password_field: usize,
}

impl Default for TextOptions {
    fn default() -> Self {
        TextOptions {
            hash: TextHash::Plaintext,
            separator: ":".to_owned(),
            username_field: 1,
            password_field: 2,
        }
    }
}

/// The layout of the password file (`^filetype` and the options that go with it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileFormat {
    /// `text`: one user a line, fields split by a separator.
    Text(TextOptions),
    /// `htpasswd`: `user:hash` lines (Apache's `htpasswd`).
    Htpasswd,
    /// `htdigest`: `user:realm:md5(user:realm:password)` lines (Apache's `htdigest`).
    Htdigest {
        /// `^realm`.
        realm: String,
    },
}

/// The `file` backend: checks a user name and password against `^filename`.
///
/// The file is read on every attempt (so an edited file takes effect at once, as in Salt),
/// at most [`MAX_FILE_BYTES`] of it. Secrets are compared in constant time. The backend
/// knows no groups ([`Identity::groups`] is `None`).
///
/// - **`text`** (default): the file must be UTF-8. Lines end at `\n`, `\r\n` or `\r` and
///   are stripped of surrounding whitespace (Python's `str.strip`), then split at
///   `^field_separator`. Blank lines are skipped (a deviation: Salt aborts at them). The
///   **first** line whose username field equals the user name decides, even when a later
///   line has the same user (Salt). A line before it without the username or password
///   field is an [`Error::Malformed`] (Salt aborts the attempt there too). With a
///   `^hashtype` other than `plaintext` the field holds the lowercase hex digest of the
///   password.
/// - **`htpasswd`**: passlib's `HtpasswdFile` rules: lines end at `\n`; blank lines and
///   lines whose first non-blank character is `#` are skipped; the rest, stripped of
///   trailing whitespace, must be exactly `user:hash`, or the whole file is
///   [`Error::Malformed`]; the first line of a user counts. Hashes: bcrypt (`$2y$`, `$2b$`,
///   `$2a$`), SHA-crypt (`$5$`, `$6$`), Apache MD5 (`$apr1$`) and `{SHA}`; plaintext, DES
///   `crypt(3)` and other schemes are refused with an [`Error::Malformed`] that names the
///   user's line (passlib accepts plaintext and DES).
/// - **`htdigest`**: as `htpasswd` with `user:realm:hash` lines; the line of the user in
///   `^realm` counts, and its hash is the hex MD5 of `user:realm:password`.
///
/// In `htpasswd` and `htdigest` files a user name longer than 255 bytes or containing `:`,
/// a tab, CR, LF or NUL never authenticates (passlib refuses it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileBackend {
    path: PathBuf,
    format: FileFormat,
}

impl FileBackend {
    /// A backend reading `path` in `format`.
    pub fn new(path: impl Into<PathBuf>, format: FileFormat) -> FileBackend {
        FileBackend {
            path: path.into(),
            format,
        }
    }

    /// Reads the `^` options of `external_auth:file` (`entries`: the backend's map). Returns
    /// the backend and warnings (unknown `^options`, which Salt ignores).
    ///
    /// Errors ([`Error::Config`]): no `^filename` (Salt's message), an option of the wrong
    /// type, a `^filetype` other than `text`, `htpasswd`, `htdigest`, a `^hashtype` this
    /// backend does not know, an empty `^field_separator`, a field number that is not a
    /// positive integer, an `htdigest` file without `^realm` (Salt's message).
    pub fn from_options(entries: &[(Value, Value)]) -> Result<(FileBackend, Vec<String>), Error> {
        let mut warnings = Vec::new();
        let get = |name: &str| pyvalue::dict_get(entries, &format!("^{name}"));
        for (key, _) in pyvalue::dict_entries(entries) {
            if let Some(option) = pyvalue::text(key).and_then(|k| k.strip_prefix('^')) {
                if !OPTIONS.contains(&option) {
                    warnings.push(format!(
                        "external_auth:file:^{option} is not an option of the file backend; \
                         ignored"
                    ));
                }
            }
        }
        let Some(filename) = get("filename") else {
            return Err(Error::Config(
                "salt.auth.file: An authentication file must be specified via \
                 external_auth:file:^filename"
                    .to_owned(),
            ));
        };
        let path = PathBuf::from(string_option("filename", filename)?);
        let filetype = match get("filetype") {
            None => "text",
            Some(v) => string_option("filetype", v)?,
        };
        let format = match filetype {
            "text" => {
                let hash = match get("hashtype") {
                    None => TextHash::Plaintext,
                    Some(v) => {
                        let name = string_option("hashtype", v)?;
                        TextHash::ALL
                            .iter()
                            .find(|(n, _)| *n == name)
                            .map(|(_, h)| *h)
                            .ok_or_else(|| {
                                Error::Config(format!(
                                    "external_auth:file:^hashtype must be one of plaintext, \
                                     md5, sha1, sha224, sha256, sha384, sha512, not {}",
                                    repr(v)
                                ))
                            })?
                    }
                };
                let separator = match get("field_separator") {
                    None => ":".to_owned(),
                    Some(v) => {
                        let sep = string_option("field_separator", v)?;
                        if sep.is_empty() {
                            return Err(Error::Config(
                                "external_auth:file:^field_separator must not be empty".to_owned(),
                            ));
                        }
                        sep.to_owned()
                    }
                };
                FileFormat::Text(TextOptions {
                    hash,
                    separator,
                    username_field: field_option("username_field", get("username_field"), 1)?,
                    password_field: field_option("password_field", get("password_field"), 2)?,
                })
            }
            "htpasswd" => FileFormat::Htpasswd,
            "htdigest" => {
                let realm = match get("realm") {
                    Some(v) => string_option("realm", v)?,
                    None => "",
                };
                if realm.is_empty() {
                    return Err(Error::Config(
                        "salt.auth.file: A ^realm must be defined in external_auth:file for \
                         htdigest filetype"
                            .to_owned(),
                    ));
                }
                FileFormat::Htdigest {
                    realm: realm.to_owned(),
                }
            }
            other => {
                return Err(Error::Config(format!(
                    "external_auth:file:^filetype must be one of text, htpasswd, htdigest, \
                     not '{other}'"
                )))
            }
        };
        Ok((FileBackend { path, format }, warnings))
    }

    /// The password file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's layout.
    pub fn format(&self) -> &FileFormat {
        &self.format
    }

    fn read(&self) -> Result<Vec<u8>, Error> {
        let read_err = |source| Error::Read {
            path: self.path.clone(),
            source,
        };
        let file = File::open(&self.path).map_err(read_err)?;
        let mut bytes = Vec::new();
        file.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read_err)?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(Error::TooLarge {
                path: self.path.clone(),
            });
        }
        Ok(bytes)
    }

    fn malformed(&self, line: usize, problem: impl Into<String>) -> Error {
        Error::Malformed {
            path: self.path.clone(),
            line,
            problem: problem.into(),
        }
    }

    fn check_text(
        &self,
        bytes: &[u8],
        username: &str,
        password: &str,
        options: &TextOptions,
    ) -> Result<bool, Error> {
        let TextOptions {
            hash,
            separator,
            username_field,
            password_field,
        } = options;
        if separator.is_empty() {
            return Ok(false);
        }
        let text = std::str::from_utf8(bytes)
            .map_err(|_| self.malformed(0, "a text password file must be UTF-8"))?;
        for (index, raw) in text_lines(text).enumerate() {
            let line = raw.trim_matches(py_space);
            if line.is_empty() {
                continue;
            }
            let fields: Vec<&str> = line.split(separator.as_str()).collect();
            let field = |n: &usize| n.checked_sub(1).and_then(|i| fields.get(i));
            let Some(user) = field(username_field) else {
                return Err(self.malformed(
                    index + 1,
                    format!("username field ({username_field}) does not exist"),
                ));
            };
            let Some(stored) = field(password_field) else {
                return Err(self.malformed(
                    index + 1,
                    format!("password field ({password_field}) does not exist"),
                ));
            };
            if *user == username {
                let offered = hash.encode(password)?;
                return Ok(ct_eq(stored.as_bytes(), offered.as_bytes()));
            }
        }
        Ok(false)
    }

    fn check_htpasswd(&self, bytes: &[u8], username: &str, password: &str) -> Result<bool, Error> {
        let mut found = None;
        for (index, fields) in ht_records(bytes) {
            let [user, stored] = fields.as_slice() else {
                return Err(self.malformed(
                    index + 1,
                    "malformed htpasswd file (a line must be user:hash)",
                ));
            };
            if found.is_none() && *user == username.as_bytes() {
                found = Some((index, *stored));
            }
        }
        let Some((index, stored)) = found else {
            return Ok(false);
        };
        let stored = std::str::from_utf8(stored).map_err(|_| {
            self.malformed(
                index + 1,
                format!("the hash of user '{username}' is not text"),
            )
        })?;
        verify_htpasswd(password, stored).map_err(|trouble| {
            let problem = match trouble {
                HashTrouble::Unsupported(what) => format!(
                    "the hash of user '{username}' is {what}, which Halite does not accept \
                     (use bcrypt, SHA-crypt or $apr1$)"
                ),
                HashTrouble::Malformed(why) => {
                    format!("the hash of user '{username}' is malformed: {why}")
                }
                HashTrouble::Digest(why) => format!("cannot check user '{username}': {why}"),
            };
            self.malformed(index + 1, problem)
        })
    }

    fn check_htdigest(
        &self,
        bytes: &[u8],
        username: &str,
        password: &str,
        realm: &str,
    ) -> Result<bool, Error> {
        let mut found = None;
        for (index, fields) in ht_records(bytes) {
            let [user, line_realm, stored] = fields.as_slice() else {
                return Err(self.malformed(
                    index + 1,
                    "malformed htdigest file (a line must be user:realm:hash)",
                ));
            };
            if found.is_none() && *user == username.as_bytes() && *line_realm == realm.as_bytes() {
                found = Some((index, *stored));
            }
        }
        let Some((index, stored)) = found else {
            return Ok(false);
        };
        let stored = stored.to_ascii_lowercase();
        if stored.len() != 32 || !stored.iter().all(u8::is_ascii_hexdigit) {
            return Err(self.malformed(
                index + 1,
                format!("the hash of user '{username}' is not 32 hex digits"),
            ));
        }
        let offered = hex_digest(
            MessageDigest::md5(),
            "md5",
            format!("{username}:{realm}:{password}").as_bytes(),
        )?;
        Ok(ct_eq(&stored, offered.as_bytes()))
    }
}

impl Backend for FileBackend {
    fn authenticate(&self, username: &str, password: &str) -> Result<Option<Identity>, Error> {
        let ok = match &self.format {
            FileFormat::Text(options) => {
                self.check_text(&self.read()?, username, password, options)?
            }
            FileFormat::Htpasswd => {
                if !ht_user_allowed(username) {
                    return Ok(None);
                }
                self.check_htpasswd(&self.read()?, username, password)?
            }
            FileFormat::Htdigest { realm } => {
                if !ht_user_allowed(username) {
                    return Ok(None);
                }
                self.check_htdigest(&self.read()?, username, password, realm)?
            }
        };
        Ok(ok.then(|| Identity {
            name: username.to_owned(),
            groups: None,
        }))
    }
}

/// The option `^name` as a string.
fn string_option<'v>(name: &str, value: &'v Value) -> Result<&'v str, Error> {
    pyvalue::text(value).ok_or_else(|| {
        Error::Config(format!(
            "external_auth:file:^{name} must be a string, not {}",
            repr(value)
        ))
    })
}

/// A 1-based field number: a positive integer or a string holding one (Salt's `int()`).
fn field_option(name: &str, value: Option<&Value>, default: usize) -> Result<usize, Error> {
    let Some(value) = value else {
        return Ok(default);
    };
    let number = match value {
        Value::Integer(i) => i.as_u64().and_then(|n| usize::try_from(n).ok()),
        other => pyvalue::text(other).and_then(|s| s.trim().parse::<usize>().ok()),
    };
    match number {
        Some(n) if n >= 1 => Ok(n),
        _ => Err(Error::Config(format!(
            "external_auth:file:^{name} must be a positive integer (fields count from 1), \
             not {}",
            repr(value)
        ))),
    }
}

fn repr(value: &Value) -> String {
    let mut out = String::new();
    pyvalue::repr(value, &mut out);
    out
}

/// Python's `str.isspace` for the characters `str.strip()` removes.
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}

/// The lines of a file read in Python's text mode: ended by `\n`, `\r\n` or `\r`.
fn text_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let Some(at) = rest.find(['\r', '\n']) else {
            let line = rest;
            rest = "";
            return Some(line);
        };
        let line = rest.get(..at).unwrap_or("");
        let tail = rest.get(at..).unwrap_or("");
        let skip = if tail.starts_with("\r\n") { 2 } else { 1 };
        rest = tail.get(skip..).unwrap_or("");
        Some(line)
    })
}

/// The records of an htpasswd/htdigest file as passlib reads them: `(line index, fields)`
/// for each line that is neither blank nor a `#` comment, split at `:` after trailing
/// whitespace is stripped.
fn ht_records(bytes: &[u8]) -> impl Iterator<Item = (usize, Vec<&[u8]>)> {
    bytes
        .split(|&b| b == b'\n')
        .enumerate()
        .filter_map(|(index, line)| {
            let start = line.iter().position(|b| !is_py_byte_space(*b))?;
            if line.get(start) == Some(&b'#') {
                return None;
            }
            let end = line
                .iter()
                .rposition(|b| !is_py_byte_space(*b))
                .map_or(0, |e| e + 1);
            let content = line.get(..end).unwrap_or(&[]);
            Some((index, content.split(|&b| b == b':').collect()))
        })
}

/// Python's `bytes.isspace` (what `bytes.strip()` removes).
fn is_py_byte_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// Whether passlib would look this user up at all.
fn ht_user_allowed(username: &str) -> bool {
    username.len() <= 255 && !username.contains([':', '\n', '\r', '\t', '\0'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_target::testutil::json;
    use std::process::Command;

    fn opts(text: &str) -> Vec<(Value, Value)> {
        match json(text) {
            Value::Map(entries) => entries,
            other => panic!("not a map: {other}"),
        }
    }

    fn backend(dir: &tempfile::TempDir, content: &[u8], format: FileFormat) -> FileBackend {
        let path = dir.path().join("users");
        std::fs::write(&path, content).unwrap();
        FileBackend::new(path, format)
    }

    fn text(hash: TextHash) -> FileFormat {
        FileFormat::Text(TextOptions {
            hash,
            ..TextOptions::default()
        })
    }

    fn ok(b: &FileBackend, user: &str, password: &str) -> bool {
        match b.authenticate(user, password) {
            Ok(Some(id)) => {
                assert_eq!(id.name, user);
                assert_eq!(id.groups, None, "the file backend has no groups");
                true
            }
            Ok(None) => false,
            Err(e) => panic!("{user}: {e}"),
        }
    }

    #[test]
    fn text_plaintext_accepts_the_right_password_only() {
        let dir = tempfile::tempdir().unwrap();
        let b = backend(
            &dir,
            b"dean:goneFishing\ngene:OceanMan\n",
            text(TextHash::Plaintext),
        );
        assert!(ok(&b, "dean", "goneFishing"));
        assert!(ok(&b, "gene", "OceanMan"));
        assert!(!ok(&b, "gene", "oceanman"));
        assert!(!ok(&b, "gene", "OceanMan "));
        assert!(!ok(&b, "bob", "OceanMan"), "unknown user");
        assert!(!ok(&b, "", ""));
    }

    #[test]
    fn text_first_line_of_a_user_decides() {
        let dir = tempfile::tempdir().unwrap();
        let b = backend(
            &dir,
            b"fred:first\nfred:second\n",
            text(TextHash::Plaintext),
        );
        assert!(ok(&b, "fred", "first"));
        assert!(
            !ok(&b, "fred", "second"),
            "Salt stops at the first line of fred"
        );
    }

    #[test]
    fn text_lines_are_stripped_and_end_at_any_newline() {
        let dir = tempfile::tempdir().unwrap();
        let content = b"  alice:one  \r\nbob:two\rcarol:three\n\n   \n\tdave:four\x1f";
        let b = backend(&dir, content, text(TextHash::Plaintext));
        for (user, pw) in [
            ("alice", "one"),
            ("bob", "two"),
            ("carol", "three"),
            ("dave", "four"),
        ] {
            assert!(ok(&b, user, pw), "{user}");
        }
    }

    #[test]
    fn text_hashtypes_hold_hex_digests() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (TextHash::Md5, "md5sum"),
            (TextHash::Sha1, "sha1sum"),
            (TextHash::Sha224, "sha224sum"),
            (TextHash::Sha256, "sha256sum"),
            (TextHash::Sha384, "sha384sum"),
            (TextHash::Sha512, "sha512sum"),
        ];
        for (hash, tool) in cases {
            let out = Command::new("sh")
                .args(["-c", &format!("printf %s 'pässword' | {tool}")])
                .output()
                .unwrap();
            let digest = String::from_utf8(out.stdout).unwrap();
            let digest = digest.split_whitespace().next().unwrap().to_owned();
            let b = backend(&dir, format!("trey:{digest}\n").as_bytes(), text(hash));
            assert!(ok(&b, "trey", "pässword"), "{hash:?}");
            assert!(!ok(&b, "trey", "password"), "{hash:?}");
            assert!(
                !ok(&b, "trey", &digest),
                "{hash:?}: the digest is no password"
            );
        }
    }

    #[test]
    fn text_fields_and_separator_are_configurable() {
        let dir = tempfile::tempdir().unwrap();
        // Salt's documented legacy layout.
        let (b, warnings) = FileBackend::from_options(&opts(&format!(
            r#"{{"^filename": "{}", "^filetype": "text", "^hashtype": "md5",
                "^username_field": 2, "^password_field": "3", "^field_separator": "|",
                "trey": [".*"]}}"#,
            dir.path().join("users").display()
        )))
        .unwrap();
        assert!(warnings.is_empty());
        // md5("secret") for trey; mike's field is no digest of "secret".
        let content = "46|trey|5ebe2294ecd0e0f08eab7690d2a6ee69\n\
                       555|mike|b6e02a4d2cb2a6ef0669e79be6fd02e4\n";
        std::fs::write(b.path(), content).unwrap();
        assert!(ok(&b, "trey", "secret"));
        assert!(!ok(&b, "trey", "5ebe2294ecd0e0f08eab7690d2a6ee69"));
        assert!(!ok(&b, "mike", "secret"));
        assert!(!ok(&b, "46", "trey"), "the username is field 2");
    }

    #[test]
    fn text_line_without_the_fields_before_the_user_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let b = backend(
            &dir,
            b"bob:x\nnopassword\nfred:pw\n",
            text(TextHash::Plaintext),
        );
        assert!(ok(&b, "bob", "x"), "lines after the user's are never read");
        let err = b.authenticate("fred", "pw").unwrap_err();
        assert!(
            err.to_string()
                .ends_with("line 2: password field (2) does not exist"),
            "{err}"
        );
        let b = backend(
            &dir,
            b"a:b\n",
            FileFormat::Text(TextOptions {
                username_field: 3,
                password_field: 1,
                ..TextOptions::default()
            }),
        );
        let err = b.authenticate("a", "b").unwrap_err();
        assert!(err.to_string().contains("username field (3)"), "{err}");
    }

    #[test]
    fn text_file_must_be_utf8() {
        let dir = tempfile::tempdir().unwrap();
        let b = backend(&dir, b"fred:\xff\xfe\n", text(TextHash::Plaintext));
        assert!(matches!(
            b.authenticate("fred", "x"),
            Err(Error::Malformed { line: 0, .. })
        ));
    }

    #[test]
    fn an_edited_file_takes_effect_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let b = backend(&dir, b"fred:old\n", text(TextHash::Plaintext));
        assert!(ok(&b, "fred", "old"));
        std::fs::write(b.path(), b"fred:new\n").unwrap();
        assert!(!ok(&b, "fred", "old"));
        assert!(ok(&b, "fred", "new"));
    }

    #[test]
    fn missing_unreadable_or_huge_files_fail_with_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = FileBackend::new(dir.path().join("none"), FileFormat::Htpasswd);
        let err = missing.authenticate("fred", "pw").unwrap_err();
        assert!(matches!(err, Error::Read { .. }), "{err}");
        assert!(
            err.to_string().starts_with("salt.auth.file: cannot read"),
            "{err}"
        );
        let directory = FileBackend::new(dir.path(), text(TextHash::Plaintext));
        assert!(matches!(
            directory.authenticate("fred", "pw"),
            Err(Error::Read { .. })
        ));
        let big = dir.path().join("big");
        let file = File::create(&big).unwrap();
        file.set_len(MAX_FILE_BYTES + 1).unwrap();
        let huge = FileBackend::new(&big, text(TextHash::Plaintext));
        assert!(matches!(
            huge.authenticate("fred", "pw"),
            Err(Error::TooLarge { .. })
        ));
    }

    /// `openssl passwd <flag> <password>`: a fresh hash with a random salt.
    fn openssl_passwd(flag: &str, password: &str) -> String {
        let out = Command::new("openssl")
            .args(["passwd", flag, password])
            .output()
            .expect("the openssl command line tool is needed to make htpasswd vectors");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    #[test]
    fn htpasswd_accepts_apr1_sha_crypt_bcrypt_and_sha_lines() {
        let dir = tempfile::tempdir().unwrap();
        let bcrypt_line = bcrypt::hash("b-pass", 4).unwrap();
        let content = format!(
            "# made by openssl passwd and the bcrypt crate\n\
             apr:{}\n\
             s256:{}\n\
             s512:{}\n\
             \n   \n\
             bc:{bcrypt_line}\n\
             bc2y:$2y${}\n\
             ldap:{{SHA}}5en6G6MezRroT3XKqkdPOmY/BfQ=\r\n",
            openssl_passwd("-apr1", "a-pass"),
            openssl_passwd("-5", "s256-pass"),
            openssl_passwd("-6", "s512-pass"),
            &bcrypt_line[4..],
        );
        let b = backend(&dir, content.as_bytes(), FileFormat::Htpasswd);
        for (user, pw) in [
            ("apr", "a-pass"),
            ("s256", "s256-pass"),
            ("s512", "s512-pass"),
            ("bc", "b-pass"),
            ("bc2y", "b-pass"),
            ("ldap", "secret"),
        ] {
            assert!(ok(&b, user, pw), "{user}");
            assert!(!ok(&b, user, "wrong"), "{user}");
        }
        assert!(!ok(&b, "nobody", "a-pass"), "unknown user");
        assert!(!ok(&b, "# made by openssl passwd and the bcrypt crate", ""));
    }

    #[test]
    fn htpasswd_first_record_of_a_user_wins() {
        let dir = tempfile::tempdir().unwrap();
        let content = format!(
            "fred:{}\nfred:{}\n",
            openssl_passwd("-apr1", "one"),
            openssl_passwd("-apr1", "two")
        );
        let b = backend(&dir, content.as_bytes(), FileFormat::Htpasswd);
        assert!(ok(&b, "fred", "one"));
        assert!(!ok(&b, "fred", "two"));
    }

    #[test]
    fn htpasswd_malformed_line_anywhere_fails_every_user() {
        let dir = tempfile::tempdir().unwrap();
        let content = format!("fred:{}\njunk\n", openssl_passwd("-apr1", "one"));
        let b = backend(&dir, content.as_bytes(), FileFormat::Htpasswd);
        let err = b.authenticate("fred", "one").unwrap_err();
        assert!(
            err.to_string().contains("line 2: malformed htpasswd"),
            "{err}"
        );
        let b = backend(&dir, b"fred:a:b\n", FileFormat::Htpasswd);
        assert!(matches!(
            b.authenticate("fred", "a"),
            Err(Error::Malformed { line: 1, .. })
        ));
    }

    #[test]
    fn htpasswd_refuses_plaintext_and_des_lines_with_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let b = backend(
            &dir,
            b"plain:secret\ndes:abNANd1rDfiNc\n",
            FileFormat::Htpasswd,
        );
        let err = b.authenticate("plain", "secret").unwrap_err();
        assert!(err.to_string().contains("plaintext password"), "{err}");
        let err = b.authenticate("des", "secret").unwrap_err();
        assert!(err.to_string().contains("DES"), "{err}");
        assert!(!ok(&b, "other", "secret"));
    }

    #[test]
    fn htpasswd_user_names_passlib_refuses_never_authenticate() {
        let dir = tempfile::tempdir().unwrap();
        let b = backend(&dir, b"a\tb:x\n", FileFormat::Htpasswd);
        assert!(!ok(&b, "a\tb", "x"));
        assert!(!ok(&b, &"a".repeat(256), "x"));
    }

    #[test]
    fn htdigest_checks_user_realm_and_password() {
        let dir = tempfile::tempdir().unwrap();
        let md5 = |s: &str| hex_digest(MessageDigest::md5(), "md5", s.as_bytes()).unwrap();
        let content = format!(
            "cory:Other:{}\ncory:MySecureRealm:{}\nann:MySecureRealm:{}\n",
            md5("cory:Other:other-pass"),
            md5("cory:MySecureRealm:cory-pass").to_uppercase(),
            md5("ann:MySecureRealm:ann-pass"),
        );
        let realm = FileFormat::Htdigest {
            realm: "MySecureRealm".into(),
        };
        let b = backend(&dir, content.as_bytes(), realm);
        assert!(ok(&b, "cory", "cory-pass"));
        assert!(!ok(&b, "cory", "other-pass"), "another realm's line");
        assert!(ok(&b, "ann", "ann-pass"));
        assert!(!ok(&b, "ann", "cory-pass"));
        assert!(!ok(&b, "bob", "ann-pass"));
        let b = backend(
            &dir,
            b"cory:MySecureRealm:nothex\n",
            FileFormat::Htdigest {
                realm: "MySecureRealm".into(),
            },
        );
        assert!(matches!(
            b.authenticate("cory", "x"),
            Err(Error::Malformed { line: 1, .. })
        ));
        let b = backend(
            &dir,
            b"cory:onlytwo\n",
            FileFormat::Htdigest { realm: "R".into() },
        );
        let err = b.authenticate("cory", "x").unwrap_err();
        assert!(err.to_string().contains("user:realm:hash"), "{err}");
    }

    #[test]
    fn options_are_read_with_defaults() {
        let (b, warnings) = FileBackend::from_options(&opts(
            r#"{"^filename": "/etc/insecure-user-list.txt", "gene": [".*"]}"#,
        ))
        .unwrap();
        assert!(warnings.is_empty());
        assert_eq!(b.path(), Path::new("/etc/insecure-user-list.txt"));
        assert_eq!(b.format(), &text(TextHash::Plaintext));
        let (b, _) = FileBackend::from_options(&opts(
            r#"{"^filename": "/x", "^filetype": "htdigest", "^realm": "R"}"#,
        ))
        .unwrap();
        assert_eq!(b.format(), &FileFormat::Htdigest { realm: "R".into() });
        let (b, warnings) = FileBackend::from_options(&opts(
            r#"{"^filename": "/x", "^filetype": "htpasswd", "^filenme": "/y"}"#,
        ))
        .unwrap();
        assert_eq!(b.format(), &FileFormat::Htpasswd);
        assert_eq!(
            warnings,
            ["external_auth:file:^filenme is not an option of the file backend; ignored"]
        );
    }

    #[test]
    fn malformed_options_are_errors_naming_the_key() {
        let cases = [
            (
                r#"{"fred": [".*"]}"#,
                "salt.auth.file: An authentication file must be specified via \
                 external_auth:file:^filename",
            ),
            (
                r#"{"^filename": 3}"#,
                "external_auth:file:^filename must be a string, not 3",
            ),
            (
                r#"{"^filename": "/x", "^filetype": "csv"}"#,
                "external_auth:file:^filetype must be one of text, htpasswd, htdigest, not 'csv'",
            ),
            (
                r#"{"^filename": "/x", "^hashtype": "MD5"}"#,
                "external_auth:file:^hashtype must be one of plaintext, md5, sha1, sha224, \
                 sha256, sha384, sha512, not 'MD5'",
            ),
            (
                r#"{"^filename": "/x", "^field_separator": ""}"#,
                "external_auth:file:^field_separator must not be empty",
            ),
            (
                r#"{"^filename": "/x", "^username_field": 0}"#,
                "external_auth:file:^username_field must be a positive integer (fields count \
                 from 1), not 0",
            ),
            (
                r#"{"^filename": "/x", "^password_field": "two"}"#,
                "external_auth:file:^password_field must be a positive integer (fields count \
                 from 1), not 'two'",
            ),
            (
                r#"{"^filename": "/x", "^filetype": "htdigest"}"#,
                "salt.auth.file: A ^realm must be defined in external_auth:file for htdigest \
                 filetype",
            ),
        ];
        for (config, message) in cases {
            match FileBackend::from_options(&opts(config)) {
                Err(Error::Config(got)) => assert_eq!(got, message),
                other => panic!("{config}: {other:?}"),
            }
        }
    }

    #[test]
    fn python_text_lines_and_strip() {
        let lines: Vec<&str> = text_lines("a\r\nb\rc\n\nd").collect();
        assert_eq!(lines, ["a", "b", "c", "", "d"]);
        assert_eq!(text_lines("").count(), 0);
        assert_eq!(" \u{3000}x\x1c".trim_matches(py_space), "x");
    }
}
