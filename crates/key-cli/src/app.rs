//! salt-key's command flow (`salt/cli/key.py:SaltKey.run`, `salt/key.py:KeyCLI.run`):
//! options and configuration, then one command, with salt-key's messages and exit codes.

use crate::cache::{drop_minion_data, request_aes_rotation};
use crate::display::{Display, KeyData, Section, LOCAL};
use crate::opts::Options;
use crate::user::{check_user, UserCheck};
use halite_config::{LogLevel, MasterConfig};
use halite_keystore::{
    fnmatch, key_fingerprint, sort_ignorecase, Action, Include, KeyState, KeyStore,
};
use halite_output::{OutputIndent, OutputOptions, Outputter};
use halite_proto::rsa::{PrivateKey, PublicKey, SigAlgo};
use halite_proto::{signing, Value};
use std::collections::HashSet;
use std::io::{self, BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

/// The program name in usage messages.
const PROG: &str = "halite-key";
/// `salt.defaults.exitcodes.EX_USAGE`: bad command line.
const EX_USAGE: i32 = 64;
/// `salt.defaults.exitcodes.EX_NOUSER`: the configured user does not exist.
const EX_NOUSER: i32 = 67;
/// Exit code of a configuration file salt-key cannot load.
const EX_CONFIG: i32 = 1;
/// `--help` text (salt-key's, naming this program).
const HELP: &str = include_str!("help.txt");
/// `--list` arguments salt-key accepts (any text starting with one of these).
const LIST_PREFIXES: [&str; 6] = ["acc", "pre", "un", "rej", "den", "all"];
/// Options Halite does not implement; they are refused rather than ignored.
const UNSUPPORTED: [&str; 5] = ["saltfile", "eauth", "mktoken", "username", "password"];

/// Runs salt-key with `argv` (without the program name) and returns the exit code.
pub fn run(argv: &[String]) -> i32 {
    let opts = match Options::parse(argv) {
        Ok(o) => o,
        Err(msg) => return usage_error(&msg),
    };
    if opts.flag("help") {
        print!("{HELP}");
        return 0;
    }
    if opts.flag("version") || opts.flag("versions_report") {
        println!("{PROG} {} (salt-key 3008.3)", env!("CARGO_PKG_VERSION"));
        return 0;
    }
    if let Some(dest) = UNSUPPORTED.iter().find(|d| opts.given(d)) {
        return usage_error(&format!(
            "option {} is not supported by {PROG}",
            Options::long_name(dest)
        ));
    }
    let keysize = opts.int("keysize").unwrap_or(2048);
    if keysize < 2048 {
        return usage_error("The minimum value for keysize is 2048");
    }
    if keysize > 32768 {
        return usage_error("The maximum value for keysize is 32768");
    }
    let list = opts.text("list");
    if !list.is_empty() && !LIST_PREFIXES.iter().any(|p| list.starts_with(p)) {
        return usage_error(&format!("'{list}' is not a valid argument to '--list'"));
    }

    let gen_keys = opts.text("gen_keys");
    let gen_keys_dir = PathBuf::from(opts.string("gen_keys_dir").unwrap_or("."));
    let mut config_dir = PathBuf::from(opts.string("config_dir").unwrap_or("/etc/salt"));
    if !gen_keys.is_empty() && !readable(&config_dir) {
        if let Err(e) = std::fs::create_dir_all(&gen_keys_dir) {
            eprintln!("Error: {e}");
            return 0;
        }
        config_dir = gen_keys_dir.clone();
    }
    if !config_dir.is_dir() {
        eprintln!(
            "WARNING: CONFIG '{}' directory does not exist.",
            config_dir.display()
        );
    }
    let cfg = match MasterConfig::load(&config_dir) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("[ERROR   ] {e}");
            return EX_CONFIG;
        }
    };
    let log_level = opts
        .string("log_level")
        .and_then(LogLevel::parse)
        .unwrap_or(cfg.log_level);
    let log = Log {
        errors: log_level <= LogLevel::Error,
        critical: log_level <= LogLevel::Critical,
    };

    let out_file = opts.string("output_file").map(PathBuf::from);
    if let (Some(path), false) = (&out_file, opts.flag("output_file_append")) {
        if path.is_file() {
            if let Err(e) = std::fs::File::create(path) {
                return usage_error(&format!("{}: Access denied: {e}", path.display()));
            }
        }
    }
    if !gen_keys.is_empty() && !gen_keys_dir.is_dir() {
        if let Err(e) = std::fs::create_dir_all(&gen_keys_dir) {
            eprintln!("Error: {e}");
            return 0;
        }
    }
    if opts.flag("delete_all") && !opts.args.is_empty() {
        eprintln!("Error: Delete all takes no arguments. Use -d to delete specified keys");
        return 0;
    }
    let user = opts.string("user").unwrap_or(&cfg.user).to_owned();
    match check_user(&user) {
        UserCheck::Ok => {}
        UserCheck::CannotSwitch => {
            log.critical(&format!(
                "Salt configured to run as user \"{user}\" but unable to switch."
            ));
            return 0;
        }
        UserCheck::NoSuchUser => {
            eprintln!("Failed to prepare the Salt environment for user {user}. The user is not available.");
            return EX_NOUSER;
        }
    }

    let display = make_display(&opts, &cfg, out_file, &log);
    let cli = KeyCli {
        store: KeyStore::at(&cfg.pki_dir),
        opts: &opts,
        cfg: &cfg,
        display,
        log,
        keysize: keysize as u32,
    };
    cli.run(command(&opts));
    0
}

fn usage_error(msg: &str) -> i32 {
    eprint!("Usage: {PROG} [options]\n\n{PROG}: error: {msg}\n");
    EX_USAGE
}

fn readable(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok()
}

/// Console logging with Salt's `[LEVEL   ] message` format, filtered by `--log-level`.
#[derive(Debug, Clone, Copy)]
struct Log {
    errors: bool,
    critical: bool,
}

impl Log {
    fn error(&self, msg: &str) {
        if self.errors {
            eprintln!("[ERROR   ] {msg}");
        }
    }

    fn critical(&self, msg: &str) {
        if self.critical {
            eprintln!("[CRITICAL] {msg}");
        }
    }
}

/// `get_printout`'s choices: `--out` (else the config's `output`, else salt-key's `key`
/// outputter), colors (`--force-color`, `--no-color`, the config's `color`, else whether
/// stdout is a terminal) and indentation.
fn make_display(opts: &Options, cfg: &MasterConfig, file: Option<PathBuf>, log: &Log) -> Display {
    let name = opts
        .string("output")
        .map(str::to_owned)
        .or_else(|| cfg.get("output").and_then(Value::as_str).map(str::to_owned));
    let outputter = match name.as_deref() {
        None | Some("") | Some("key") => None,
        Some(n) => match Outputter::from_name(n) {
            Ok(o) => Some(o),
            Err(e @ halite_output::Error::UnknownOutputter(_)) => {
                log.error(&e.to_string());
                Some(Outputter::Nested)
            }
            Err(_) => Some(Outputter::Nested),
        },
    };
    let color = if opts.flag("force_color") {
        true
    } else if opts.flag("no_color") {
        false
    } else {
        match cfg.get("color") {
            Some(v) => truthy(v),
            None => io::stdout().is_terminal(),
        }
    };
    let indent = match opts.int("output_indent") {
        Some(n) => OutputIndent::Spaces(n),
        None => match cfg.get("output_indent") {
            None => OutputIndent::Unset,
            Some(Value::Nil) => OutputIndent::Null,
            Some(Value::String(s)) if s.as_str() == Some("pretty") => OutputIndent::Pretty,
            Some(v) => v.as_i64().map_or(OutputIndent::Unset, OutputIndent::Spaces),
        },
    };
    let options = OutputOptions {
        color,
        indent,
        nested_indent: cfg
            .get("nested_indent")
            .and_then(Value::as_u64)
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0),
        strip_colors: cfg.get("strip_colors").map(truthy).unwrap_or(true),
        ..OutputOptions::default()
    };
    Display {
        outputter,
        options,
        file,
    }
}

/// Python truthiness of a configuration value.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Nil => false,
        Value::Boolean(b) => *b,
        Value::Integer(i) => i.as_i64() != Some(0) && i.as_u64() != Some(0),
        Value::F64(f) => *f != 0.0,
        Value::F32(f) => *f != 0.0,
        Value::String(s) => !s.as_bytes().is_empty(),
        Value::Binary(b) => !b.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Map(m) => !m.is_empty(),
        Value::Ext(..) => true,
    }
}

/// The one thing salt-key does per run (`KeyCLI._update_opts`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Command {
    GenKeys(String),
    GenSignature,
    List(String),
    Print(String),
    Change(Action, String),
    Finger(String),
}

/// Picks the command the way salt-key does: the first option set, in this order, wins;
/// `-L` is the default. The `*_all` forms use the glob `*`.
fn command(opts: &Options) -> Command {
    let star = || "*".to_owned();
    let text = |dest: &str| opts.text(dest).to_owned();
    if !opts.text("gen_keys").is_empty() {
        Command::GenKeys(text("gen_keys"))
    } else if opts.flag("gen_signature") {
        Command::GenSignature
    } else if !opts.text("list").is_empty() {
        Command::List(text("list"))
    } else if opts.flag("list_all") {
        Command::List("all".to_owned())
    } else if !opts.text("print").is_empty() {
        Command::Print(text("print"))
    } else if opts.flag("print_all") {
        Command::Print(star())
    } else if !opts.text("accept").is_empty() {
        Command::Change(Action::Accept, text("accept"))
    } else if opts.flag("accept_all") {
        Command::Change(Action::Accept, star())
    } else if !opts.text("reject").is_empty() {
        Command::Change(Action::Reject, text("reject"))
    } else if opts.flag("reject_all") {
        Command::Change(Action::Reject, star())
    } else if !opts.text("delete").is_empty() {
        Command::Change(Action::Delete, text("delete"))
    } else if opts.flag("delete_all") {
        Command::Change(Action::Delete, star())
    } else if !opts.text("finger").is_empty() {
        Command::Finger(text("finger"))
    } else if opts.flag("finger_all") {
        Command::Finger(star())
    } else {
        Command::List("all".to_owned())
    }
}

/// Why a command stopped early. Salt catches these in `KeyCLI.run` and exits 0.
enum Failure {
    /// A key-store error: shown like a `SaltException` (nested output, unless `-q`).
    Store(halite_keystore::Error),
    /// Any other error: logged at ERROR, as `log.exception` does.
    Other(String),
}

impl From<halite_keystore::Error> for Failure {
    fn from(e: halite_keystore::Error) -> Self {
        Failure::Store(e)
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Other(python_os_error(&e, None))
    }
}

struct KeyCli<'a> {
    store: KeyStore,
    opts: &'a Options,
    cfg: &'a MasterConfig,
    display: Display,
    log: Log,
    keysize: u32,
}

impl KeyCli<'_> {
    fn run(&self, cmd: Command) {
        let result = match cmd {
            Command::GenKeys(name) => self.gen_keys(&name),
            Command::GenSignature => self.gen_signature(),
            Command::List(m) => self.list(&m),
            Command::Print(m) => self.print_keys(&m),
            Command::Finger(m) => self.finger(&m),
            Command::Change(action, m) => self.change(action, &m),
        };
        match result {
            Ok(()) => {}
            Err(Failure::Store(e)) => {
                if !self.opts.flag("quiet") {
                    // Nothing sensible is left to do if stdout itself fails.
                    let _ = self.display.message(&e.to_string());
                }
            }
            Err(Failure::Other(msg)) => self.log.error(&msg),
        }
    }

    fn show(&self, data: &KeyData) -> Result<(), Failure> {
        Ok(self.display.key_data(data)?)
    }

    /// `--gen-keys NAME`: `<NAME>.pem` and `<NAME>.pub` in `--gen-keys-dir`; an existing
    /// pair is kept. Prints `return:` and the SHA-256 fingerprint of the public key's PEM,
    /// which is what Salt 3008.3 means to print (`pem_finger(key=priv.public_key())`, the
    /// same digest `-F` shows for a `.pub` file). Deviations: Salt 3008.3 crashes computing
    /// that fingerprint (exit code 0, traceback on stderr) and also creates master keys in
    /// that directory; Halite only writes the requested pair.
    fn gen_keys(&self, name: &str) -> Result<(), Failure> {
        let dir = self.opts.string("gen_keys_dir").unwrap_or(".");
        let key = KeyStore::at(dir).find_or_create_pair(name, self.keysize)?;
        let public = key
            .public_key()
            .and_then(|p| p.to_pem())
            .map_err(|e| Failure::Other(e.to_string()))?;
        let finger = finger_of(&public, "sha256")?;
        Ok(self.display.returned(Value::from(finger))?)
    }

    /// `--gen-signature [--auto-create] [--priv FILE] [--pub FILE] [--signature-path DIR]`
    /// (`Key.gen_keys_signature`, `MasterKeys.gen_signature`): signs the master public key
    /// (`pki_dir/master.pub` unless `--pub`) with the signing key (`--priv`, else
    /// `pki_dir/<master_sign_key_name>.pem`, created with `--auto-create`) and writes
    /// `b2a_base64(signature)` to `<--signature-path or pki_dir>/<master_pubkey_signature>`
    /// (default `<id>_pubkey_signature`), mode 0400. Prints `return: True`, `return: False`
    /// (the file exists: kept, ERROR logged) or Salt's message.
    ///
    /// Deviations from Salt 3008.3, each its documented intent: the default signing key is
    /// `<master_sign_key_name>.pem`, the pair the master signs with (Salt looks for
    /// `master_sign.pem` whatever the name, and `--auto-create` then regenerates
    /// `<name>.pem` over an existing one); `--auto-create` never replaces an existing pair;
    /// the master's own key pair is not created as a side effect; and a configuration with
    /// `master_use_pubkey_signature` does not stop the command (Salt exits 1 because the
    /// signature it was asked to create is missing).
    fn gen_signature(&self) -> Result<(), Failure> {
        let ret = self.make_signature()?;
        Ok(self.display.returned(ret)?)
    }

    fn make_signature(&self) -> Result<Value, Failure> {
        let pki = &self.cfg.pki_dir;
        let given = |dest: &str| self.opts.string(dest).filter(|p| !p.is_empty());
        let public = match given("pub") {
            Some(p) if !Path::new(p).is_file() => {
                return Ok(Value::from(format!("Public-key {p} does not exist")));
            }
            Some(p) => Some(PathBuf::from(p)),
            None => Some(pki.join("master.pub")).filter(|p| p.is_file()),
        };
        let sign_name = &self.cfg.master_sign_key_name;
        let private = match given("priv") {
            Some(p) if !Path::new(p).is_file() => {
                return Ok(Value::from(format!("Private-key {p} does not exist")));
            }
            Some(p) => Some(PathBuf::from(p)),
            None => Some(pki.join(format!("{sign_name}.pem"))).filter(|p| p.is_file()),
        };
        let sign_key = match private {
            Some(path) => PrivateKey::from_pem(&std::fs::read(&path)?)
                .map_err(|e| Failure::Other(format!("{}: {e}", path.display())))?,
            None if self.opts.flag("auto_create") => {
                self.store.find_or_create_pair(sign_name, self.keysize)?
            }
            None => return Ok(Value::from("No usable private-key found")),
        };
        let Some(public) = public else {
            return Ok(Value::from("No usable public-key found"));
        };
        // Salt loads the key and signs its SubjectPublicKeyInfo PEM, whatever the file holds.
        let master_pub = PublicKey::from_pem(&std::fs::read(&public)?)
            .and_then(|k| k.to_pem())
            .map_err(|e| Failure::Other(format!("{}: {e}", public.display())))?;
        let algo = SigAlgo::parse(self.cfg.publish_signing_algorithm.as_str())
            .map_err(|e| Failure::Other(e.to_string()))?;
        let text = signing::signature_file_text(&sign_key, &master_pub, algo)
            .map_err(|e| Failure::Other(e.to_string()))?;
        let name = &self.cfg.master_pubkey_signature;
        let (target, shown) = match given("signature_path") {
            Some(dir) => (KeyStore::at(dir), format!("{dir}/{name}")),
            None => (self.store.clone(), name.clone()),
        };
        if !target.write_pubkey_signature(name, &text)? {
            self.log
                .error(&format!("{shown} already exists at expected location"));
            return Ok(Value::Boolean(false));
        }
        Ok(Value::Boolean(true))
    }

    /// `-L`, `-l STATE` (`Key.list_status`).
    fn list(&self, m: &str) -> Result<(), Failure> {
        let lists = self.store.list_all()?;
        let states: &[KeyState] = if m.starts_with("acc") {
            &[KeyState::Accepted]
        } else if m.starts_with("pre") || m.starts_with("un") {
            &[KeyState::Pending]
        } else if m.starts_with("rej") {
            &[KeyState::Rejected]
        } else if m.starts_with("den") {
            &[KeyState::Denied]
        } else {
            &[
                KeyState::Pending,
                KeyState::Rejected,
                KeyState::Accepted,
                KeyState::Denied,
            ]
        };
        let data: KeyData = states
            .iter()
            .map(|s| (s.dir_name(), Section::Ids(lists.get(*s).to_vec())))
            .collect();
        self.show(&data)
    }

    /// The stored text of `id` in `state` (`cache.fetch`): the id's key for accepted,
    /// pending and rejected, the denied key for denied.
    fn key_text(&self, state: KeyState, id: &str) -> Result<Option<String>, Failure> {
        Ok(if state == KeyState::Denied {
            self.store.get_denied(id)?
        } else {
            self.store.get(id)?.map(|(_, t)| t)
        })
    }

    /// `-p GLOB`, `-P` (`Key.key_str`).
    fn print_keys(&self, m: &str) -> Result<(), Failure> {
        let matches = self.store.glob_match(m)?;
        let mut data = KeyData::new();
        for (state, ids) in matches.iter() {
            let mut ids = ids.to_vec();
            sort_ignorecase(&mut ids);
            let mut texts: Vec<(String, String)> = Vec::new();
            for id in ids {
                if texts.iter().any(|(k, _)| *k == id) {
                    continue;
                }
                if let Some(text) = self.key_text(state, &id)? {
                    texts.push((id, text));
                }
            }
            data.push((state.dir_name(), Section::Texts(texts)));
        }
        self.show(&data)
    }

    /// `-f GLOB`, `-F` (`Key.finger`): fingerprints of the matching keys and of the master's
    /// own key files ("Local Keys").
    fn finger(&self, m: &str) -> Result<(), Failure> {
        let hash_type = self.cfg.hash_type.as_str();
        let matches = self.store.glob_match(m)?;
        let mut data = KeyData::new();
        for (state, ids) in matches.iter() {
            let mut texts: Vec<(String, String)> = Vec::new();
            for id in ids {
                if texts.iter().any(|(k, _)| k == id) {
                    continue;
                }
                if let Some(text) = self.key_text(state, id)? {
                    texts.push((id.clone(), finger_of(&text, hash_type)?));
                }
            }
            data.push((state.dir_name(), Section::Texts(texts)));
        }
        let patterns: Vec<&str> = m.split(',').collect();
        let mut local = Vec::new();
        for name in self.store.local_keys()? {
            if patterns == ["*"] || patterns.iter().any(|p| fnmatch(&name, p)) {
                if let Some(text) = self.store.read_local(&name)? {
                    let f = finger_of(&text, hash_type)?;
                    local.push((name, f));
                }
            }
        }
        if !local.is_empty() {
            data.push((LOCAL, Section::Texts(local)));
        }
        self.show(&data)
    }

    /// `-a`/`-A`, `-r`/`-R`, `-d`/`-D`: select, show, confirm, apply, report.
    fn change(&self, action: Action, m: &str) -> Result<(), Failure> {
        let o = self.opts;
        let include = Include::for_action(
            action,
            o.flag("include_accepted"),
            o.flag("include_rejected"),
            o.flag("include_denied"),
            o.flag("include_all"),
        );
        let selected = self.store.select(action, m, include)?;
        if selected.is_empty() {
            println!(
                "The key glob '{m}' does not match any {} keys.",
                include.describe()
            );
            return Ok(());
        }
        println!(
            "The following keys are going to be {}:",
            action.past_tense()
        );
        self.show(&groups(&selected))?;
        if !o.flag("yes") && !self.confirm(action)? {
            return Ok(());
        }
        let applied = self.store.apply(action, &selected, include)?;
        for id in &applied.invalid {
            self.log.error(&format!("Invalid RSA public key: {id}"));
        }
        for id in &applied.invalid {
            eprintln!("Unable to accept invalid key for {id}.");
        }
        match action {
            Action::Accept => {}
            Action::Reject => self.after_removal(&[])?,
            Action::Delete => {
                let keep: Vec<String> = if self.preserve_minions() {
                    selected.get(KeyState::Accepted).to_vec()
                } else {
                    Vec::new()
                };
                self.after_removal(&keep)?;
            }
        }
        let mut out = io::stdout().lock();
        for (_, ids) in applied.result.iter() {
            for id in ids {
                writeln!(out, "Key for minion {id} {}.", action.past_tense())?;
            }
        }
        Ok(())
    }

    /// `input("Proceed? [n/Y] ")` (delete: `[N/y]`, default no). End of input is Salt's
    /// `EOFError`: logged, and nothing is changed.
    fn confirm(&self, action: Action) -> Result<bool, Failure> {
        let (prompt, default_yes) = if action == Action::Delete {
            ("Proceed? [N/y] ", false)
        } else {
            ("Proceed? [n/Y] ", true)
        };
        {
            let mut out = io::stdout().lock();
            out.write_all(prompt.as_bytes())?;
            out.flush()?;
        }
        let mut line = String::new();
        if io::stdin().lock().read_line(&mut line)? == 0 {
            return Err(Failure::Other("EOF when reading a line".to_owned()));
        }
        let answer = line.strip_suffix('\n').unwrap_or(&line);
        Ok(if answer.is_empty() {
            default_yes
        } else {
            answer.to_lowercase().starts_with('y')
        })
    }

    /// `--preserve-minions` (`true` in any case), else the `preserve_minions` option.
    fn preserve_minions(&self) -> bool {
        match self.opts.string("preserve_minions") {
            Some(v) => v.to_lowercase() == "true",
            None => self.cfg.get("preserve_minions") == Some(&Value::Boolean(true)),
        }
    }

    /// `--rotate-aes-key` (`false` in any case, or empty, disables it), else `rotate_aes_key`.
    fn rotate_aes_key(&self) -> bool {
        match self.opts.string("rotate_aes_key") {
            Some(v) => !(v.is_empty() || v.to_lowercase() == "false"),
            None => self.cfg.get("rotate_aes_key").map(truthy).unwrap_or(true),
        }
    }

    /// After a reject or delete: drop the data cache of ids without a key (unless
    /// `preserve_minion_cache`), then request an AES key rotation (unless disabled).
    fn after_removal(&self, preserve: &[String]) -> Result<(), Failure> {
        let cachedir = &self.cfg.cachedir;
        let preserve_cache = self
            .cfg
            .get("preserve_minion_cache")
            .map(truthy)
            .unwrap_or(false);
        let localfs = self
            .cfg
            .get("cache")
            .and_then(Value::as_str)
            .is_none_or(|c| c == "localfs");
        if !preserve_cache && localfs {
            let lists = self.store.list_all()?;
            let mut keep: HashSet<String> = preserve.iter().cloned().collect();
            for state in [
                KeyState::Pending,
                KeyState::Rejected,
                KeyState::Accepted,
                KeyState::Denied,
            ] {
                keep.extend(lists.get(state).iter().cloned());
            }
            drop_minion_data(cachedir, &keep)?;
        }
        if self.rotate_aes_key() {
            request_aes_rotation(cachedir, &self.cfg.id)
                .map_err(|(path, e)| Failure::Other(python_os_error(&e, Some(&path))))?;
        }
        Ok(())
    }
}

/// A selection as salt-key's preview dict.
fn groups(m: &halite_keystore::Matches) -> KeyData {
    m.iter()
        .map(|(s, ids)| (s.dir_name(), Section::Ids(ids.to_vec())))
        .collect()
}

fn finger_of(text: &str, hash_type: &str) -> Result<String, Failure> {
    key_fingerprint(text, hash_type)
        .map_err(|_| Failure::Other(format!("module 'hashlib' has no attribute '{hash_type}'")))
}

/// Python's `OSError` text: `[Errno 2] No such file or directory: '/path'`.
fn python_os_error(e: &io::Error, path: Option<&Path>) -> String {
    let text = e.to_string();
    let strerror = match text.rfind(" (os error ") {
        Some(i) => &text[..i],
        None => &text,
    };
    match (e.raw_os_error(), path) {
        (Some(code), Some(p)) => format!("[Errno {code}] {strerror}: '{}'", p.display()),
        (Some(code), None) => format!("[Errno {code}] {strerror}"),
        (None, _) => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Options {
        Options::parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn command_precedence_follows_salt() {
        let cases: &[(&[&str], Command)] = &[
            (&[], Command::List("all".into())),
            (&["-a", "x", "-L"], Command::List("all".into())),
            (
                &["-F", "-d", "x"],
                Command::Change(Action::Delete, "x".into()),
            ),
            (
                &["-A", "-r", "y"],
                Command::Change(Action::Accept, "*".into()),
            ),
            (
                &["-a", "", "-R"],
                Command::Change(Action::Reject, "*".into()),
            ),
            (&["-P", "-l", "acc"], Command::List("acc".into())),
            (&["--gen-keys", "k", "-L"], Command::GenKeys("k".into())),
            (
                &["--gen-keys", "k", "--gen-signature"],
                Command::GenKeys("k".into()),
            ),
            (&["-L", "--gen-signature"], Command::GenSignature),
            (&["-F"], Command::Finger("*".into())),
        ];
        for (args, want) in cases {
            assert_eq!(command(&parse(args)), *want, "{args:?}");
        }
    }

    #[test]
    fn os_errors_read_like_python() {
        let e = io::Error::from_raw_os_error(2);
        assert_eq!(
            python_os_error(&e, Some(Path::new("/c/.dfn-next"))),
            "[Errno 2] No such file or directory: '/c/.dfn-next'"
        );
    }
}
