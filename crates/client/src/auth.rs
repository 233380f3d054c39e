//! Who a client says it is, and how the `salt` and `salt-run` command lines come to it.
//!
//! [`Credentials`] travel as Salt's clients send them: the local user's key as the load's
//! `key` (with `user`); eauth as `username`, `password` and `eauth`, and a token as
//! `token`, inside a publish load's `kwargs` (`LocalClient._prep_pub`) and at the top
//! level of a `runner` load (`RunnerClient._reformat_low`, `master_call`).
//!
//! [`LocalClient::cli_credentials`] is `SaltCMD._run` (for `salt`) and `Runner.run` (for
//! `salt-run -a`): a token saved in the `token_file` comes first (`salt` always looks,
//! `salt-run` only with `-a`), unless this user can read `cachedir/.root_key`; then `-a`
//! asks for what `--username`/`--password` did not give ([`resolve_eauth`]), and `-T`
//! trades the credentials for a token and saves it.
//!
//! Deviations from Salt (both only leave out what the master ignores, and what a stock
//! master would otherwise write into its job cache with the job):
//! * With `-T`, Salt sends the new token together with `username`, `password`, `eauth`
//!   and a stray `cmd: "mk_token"`; the master authenticates the token alone (a token
//!   comes first), so only the token is sent.
//! * When the token is set aside for the readable `.root_key`, Salt's `salt` puts the root
//!   key in the publish `kwargs`, where the master does not look (it checks the load's own
//!   `key`, the user's); here the publish carries the user's key alone. `salt-run -a`
//!   sends the root key as the runner load's `key`, and so does this.
//! * Prompts: with standard input not a terminal, the password is read as a line from
//!   it (the prompt on stderr), where Python's `getpass` would still read `/dev/tty`;
//!   end of input gives an empty answer instead of a traceback.

use crate::local::LocalClient;
use crate::token::{root_key, TokenFile};
use crate::Error;
use halite_config::MasterConfig;
use halite_proto::value::s;
use halite_proto::Value;
use std::io::{BufRead, IsTerminal, Write};

/// The eauth backends a client offers for `-a`: the `auth` modules stock Salt 3008.3's
/// client loader holds. The client cannot know which ones a master has enabled; a master
/// refuses the others when it authenticates.
pub const EAUTH_BACKENDS: [&str; 6] = ["auto", "file", "ldap", "pam", "rest", "sharedsecret"];

/// How a client authenticates a request.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// A key from the master's `cachedir` (the local user's, normally), sent as `key`.
    Key(String),
    /// External authentication: a backend of the master's `external_auth` and what it
    /// checks.
    Eauth {
        /// The backend (`pam`, `file`, ...).
        eauth: String,
        /// The user to authenticate as.
        username: String,
        /// Their password.
        password: String,
    },
    /// A token from `mk_token`.
    Token(String),
}

impl std::fmt::Debug for Credentials {
    /// Secrets are never shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Key(_) => f.write_str("Key(<redacted>)"),
            Credentials::Eauth {
                eauth, username, ..
            } => f
                .debug_struct("Eauth")
                .field("eauth", eauth)
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
            Credentials::Token(_) => f.write_str("Token(<redacted>)"),
        }
    }
}

impl Credentials {
    /// What these credentials add to a publish load's `kwargs`: nothing for a key (it is
    /// the load's own `key`); `username`, `password`, `eauth`; or `token`.
    pub fn publish_kwargs(&self) -> Vec<(Value, Value)> {
        match self {
            Credentials::Key(_) => vec![],
            Credentials::Eauth {
                eauth,
                username,
                password,
            } => vec![
                (s("username"), s(username.clone())),
                (s("password"), s(password.clone())),
                (s("eauth"), s(eauth.clone())),
            ],
            Credentials::Token(t) => vec![(s("token"), s(t.clone()))],
        }
    }

    /// The authentication entries of a `runner` load: `user` and `key` for a key (the
    /// form Halite's CLIs use), the eauth fields or `token` alone otherwise (as
    /// `RunnerClient.cmd_sync` sends them after `_reformat_low`: no `user`).
    pub fn runner_fields(&self, user: &str) -> Vec<(Value, Value)> {
        match self {
            Credentials::Key(key) => vec![(s("user"), s(user)), (s("key"), s(key.clone()))],
            other => other.publish_kwargs(),
        }
    }
}

/// The external-authentication flags of `salt` and `salt-run` (`EAuthMixIn`).
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct EauthArgs {
    /// Specify an external authentication system to use.
    #[arg(
        short = 'a',
        long = "auth",
        visible_aliases = ["eauth", "external-auth"],
        default_value = ""
    )]
    pub eauth: String,
    /// Generate and save an authentication token for re-use. The token is generated and
    /// made available for the period defined in the Salt Master.
    #[arg(short = 'T', long = "make-token")]
    pub make_token: bool,
    /// Username for external authentication.
    #[arg(long = "username")]
    pub username: Option<String>,
    /// Password for external authentication.
    #[arg(long = "password")]
    pub password: Option<String>,
}

/// What `Resolver.cli` prints for a backend the client does not offer (two lines, on
/// stdout).
pub fn unavailable_message(eauth: &str) -> String {
    let mut names = EAUTH_BACKENDS;
    names.sort_unstable();
    format!(
        "The specified external authentication system \"{eauth}\" is not available\n\
         Available eauth types: {}\n",
        names.join(", ")
    )
}

/// Asks the person at the terminal for what the command line did not give.
pub trait Prompter {
    /// Asks for a value shown as typed (Python's `input(prompt)`); `None` at end of input.
    fn ask(&mut self, prompt: &str) -> Option<String>;
    /// Asks for a secret (Python's `getpass(prompt)`); `None` at end of input.
    fn ask_secret(&mut self, prompt: &str) -> Option<String>;
}

/// [`Prompter`] on the process's terminal: `ask` prints the prompt on stdout and reads a
/// line from stdin; `ask_secret` reads from the terminal without echo when stdin is one,
/// else prints the prompt on stderr and reads a line from stdin.
#[derive(Debug, Default)]
pub struct TerminalPrompter;

impl TerminalPrompter {
    fn read_line() -> Option<String> {
        let mut line = String::new();
        match std::io::stdin().lock().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => {
                if line.ends_with('\n') {
                    line.pop();
                    if line.ends_with('\r') {
                        line.pop();
                    }
                }
                Some(line)
            }
        }
    }
}

impl Prompter for TerminalPrompter {
    fn ask(&mut self, prompt: &str) -> Option<String> {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(prompt.as_bytes()).and_then(|()| out.flush());
        drop(out);
        Self::read_line()
    }

    fn ask_secret(&mut self, prompt: &str) -> Option<String> {
        if std::io::stdin().is_terminal() {
            if let Ok(secret) = rpassword::prompt_password(prompt) {
                return Some(secret);
            }
        }
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(prompt.as_bytes()).and_then(|()| err.flush());
        drop(err);
        Self::read_line()
    }
}

/// `Resolver.cli(eauth)`: the eauth credentials for `eauth`, asking `prompter` for the
/// username (`username: `) and then the password (`password: `, secret) unless given;
/// an empty username is this process's user. `None` when the client does not offer
/// `eauth` ([`EAUTH_BACKENDS`]; print [`unavailable_message`]).
pub fn resolve_eauth(
    eauth: &str,
    username: Option<&str>,
    password: Option<&str>,
    prompter: &mut dyn Prompter,
) -> Option<Credentials> {
    if !EAUTH_BACKENDS.contains(&eauth) {
        return None;
    }
    let mut username = match username {
        Some(u) => u.to_owned(),
        None => prompter.ask("username: ").unwrap_or_default(),
    };
    let password = match password {
        Some(p) => p.to_owned(),
        None => prompter.ask_secret("password: ").unwrap_or_default(),
    };
    if username.is_empty() {
        username = halite_config::current_user().unwrap_or_default();
    }
    Some(Credentials::Eauth {
        eauth: eauth.to_owned(),
        username,
        password,
    })
}

/// Whose rules [`LocalClient::cli_credentials`] follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CliKind {
    /// `salt` (`SaltCMD._run`): a saved token is used whether or not `-a` is given.
    Salt,
    /// `salt-run` (`Runner.run`): credentials other than the user's key only with `-a`.
    SaltRun,
}

/// What the authentication flags of a command line came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliCredentials {
    /// Authenticate with these.
    Use(Credentials),
    /// `-a` named a backend the client does not offer: the CLI prints
    /// [`unavailable_message`] for it and fails as its stock counterpart does.
    Unavailable(String),
}

impl LocalClient {
    /// The credentials a `kind` command line with these flags uses, in Salt's order:
    ///
    /// 1. `salt`, or `salt-run` with `-a`: a token saved in the [`TokenFile`] of `cfg`
    ///    while it is valid, unless this user can read `cachedir/.root_key`, in which case
    ///    `salt` keeps the user's key and `salt-run` uses the root key; `-a` is then not
    ///    looked at.
    /// 2. No `-a`: the user's key (this client's current credentials).
    /// 3. `-a X`: [`resolve_eauth`] (or [`CliCredentials::Unavailable`]); with `-T`, the
    ///    credentials are traded for a token with [`LocalClient::mk_token`], the token is
    ///    saved to the token file (a failure to save is logged) and used. A master that
    ///    refuses to make a token leaves the eauth credentials to be refused in turn.
    pub async fn cli_credentials(
        &self,
        cfg: &MasterConfig,
        args: &EauthArgs,
        kind: CliKind,
        prompter: &mut dyn Prompter,
    ) -> Result<CliCredentials, Error> {
        let token_file = TokenFile::for_config(cfg);
        if kind == CliKind::Salt || !args.eauth.is_empty() {
            if let Some(token) = token_file.load() {
                return Ok(CliCredentials::Use(match (root_key(cfg), kind) {
                    (None, _) => Credentials::Token(token),
                    (Some(_), CliKind::Salt) => self.credentials().clone(),
                    (Some(key), CliKind::SaltRun) => Credentials::Key(key),
                }));
            }
        }
        if args.eauth.is_empty() {
            return Ok(CliCredentials::Use(self.credentials().clone()));
        }
        let Some(creds) = resolve_eauth(
            &args.eauth,
            args.username.as_deref(),
            args.password.as_deref(),
            prompter,
        ) else {
            return Ok(CliCredentials::Unavailable(args.eauth.clone()));
        };
        if !args.make_token {
            return Ok(CliCredentials::Use(creds));
        }
        let Credentials::Eauth {
            eauth,
            username,
            password,
        } = &creds
        else {
            return Ok(CliCredentials::Use(creds));
        };
        match self.mk_token(eauth, username, password).await {
            Ok(data) => {
                let token = halite_proto::value::get_str(&data, "token")
                    .unwrap_or_default()
                    .to_owned();
                if let Err(e) = token_file.save(&token) {
                    tracing::warn!(
                        "Cannot save the token to {}: {e}",
                        token_file.path().display()
                    );
                }
                Ok(CliCredentials::Use(Credentials::Token(token)))
            }
            Err(Error::Authentication) => Ok(CliCredentials::Use(creds)),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers prompts from a script and records them.
    #[derive(Default)]
    struct Script {
        answers: Vec<Option<&'static str>>,
        asked: Vec<(String, bool)>,
    }

    impl Prompter for Script {
        fn ask(&mut self, prompt: &str) -> Option<String> {
            self.asked.push((prompt.to_owned(), false));
            self.answers.remove(0).map(str::to_owned)
        }
        fn ask_secret(&mut self, prompt: &str) -> Option<String> {
            self.asked.push((prompt.to_owned(), true));
            self.answers.remove(0).map(str::to_owned)
        }
    }

    fn eauth(e: &str, u: &str, p: &str) -> Credentials {
        Credentials::Eauth {
            eauth: e.into(),
            username: u.into(),
            password: p.into(),
        }
    }

    #[test]
    fn given_flags_are_used_without_prompting() {
        let mut script = Script::default();
        let got = resolve_eauth("file", Some("alice"), Some("pw"), &mut script);
        assert_eq!(got, Some(eauth("file", "alice", "pw")));
        assert!(script.asked.is_empty());
    }

    #[test]
    fn missing_username_and_password_are_asked_for_the_password_secretly() {
        let mut script = Script {
            answers: vec![Some("bob"), Some("s3cret")],
            ..Script::default()
        };
        let got = resolve_eauth("pam", None, None, &mut script);
        assert_eq!(got, Some(eauth("pam", "bob", "s3cret")));
        assert_eq!(
            script.asked,
            vec![("username: ".into(), false), ("password: ".into(), true)]
        );
    }

    #[test]
    fn empty_username_becomes_the_current_user_and_end_of_input_is_empty() {
        let me = halite_config::current_user().unwrap();
        let mut script = Script {
            answers: vec![None, None],
            ..Script::default()
        };
        assert_eq!(
            resolve_eauth("file", None, None, &mut script),
            Some(eauth("file", &me, ""))
        );
        let mut script = Script::default();
        assert_eq!(
            resolve_eauth("file", Some(""), Some(""), &mut script),
            Some(eauth("file", &me, ""))
        );
    }

    #[test]
    fn unknown_backends_are_unavailable_with_salts_message() {
        let mut script = Script::default();
        assert_eq!(resolve_eauth("django", Some("a"), None, &mut script), None);
        assert!(script.asked.is_empty(), "nothing is asked");
        assert_eq!(
            unavailable_message("django"),
            "The specified external authentication system \"django\" is not available\n\
             Available eauth types: auto, file, ldap, pam, rest, sharedsecret\n"
        );
    }

    #[test]
    fn credentials_go_where_salts_clients_put_them() {
        assert!(Credentials::Key("k".into()).publish_kwargs().is_empty());
        assert_eq!(
            eauth("file", "alice", "pw").publish_kwargs(),
            vec![
                (s("username"), s("alice")),
                (s("password"), s("pw")),
                (s("eauth"), s("file")),
            ]
        );
        assert_eq!(
            Credentials::Token("t".into()).publish_kwargs(),
            vec![(s("token"), s("t"))]
        );
        assert_eq!(
            Credentials::Key("k".into()).runner_fields("fred"),
            vec![(s("user"), s("fred")), (s("key"), s("k"))]
        );
        assert_eq!(
            eauth("file", "alice", "pw").runner_fields("fred"),
            eauth("file", "alice", "pw").publish_kwargs()
        );
        assert_eq!(
            Credentials::Token("t".into()).runner_fields("fred"),
            vec![(s("token"), s("t"))]
        );
    }

    #[test]
    fn debug_output_hides_secrets() {
        for c in [
            Credentials::Key("KEYVALUE".into()),
            eauth("file", "alice", "PASSWORD"),
            Credentials::Token("TOKENVALUE".into()),
        ] {
            let shown = format!("{c:?}");
            for secret in ["KEYVALUE", "PASSWORD", "TOKENVALUE"] {
                assert!(!shown.contains(secret), "{shown}");
            }
        }
        assert!(format!("{:?}", eauth("file", "alice", "x")).contains("alice"));
    }

    /// A master config whose cachedir and token file are in `dir`, with the user's key
    /// `UK` (and the root key `RK` when `root_key` is set); the saved token `SAVED` when
    /// `saved` is set. The master runs as `nobody`, so root's own key is `.nobody_key`, not
    /// `.root_key`. The port is one nothing listens on: these cases send nothing.
    fn setup(dir: &std::path::Path, root_key: bool, saved: bool) -> (MasterConfig, LocalClient) {
        let yaml = format!(
            "cachedir: {d}/cache\ntoken_file: {d}/salt_token\nret_port: 1\nuser: nobody\n",
            d = dir.display()
        );
        let cfg = MasterConfig::from_yaml_str(&yaml, &dir.join("master")).unwrap();
        std::fs::create_dir_all(&cfg.cachedir).unwrap();
        let me = crate::specific_user();
        let key_user = if me == "root" { cfg.user.clone() } else { me };
        std::fs::write(cfg.cachedir.join(format!(".{key_user}_key")), "UK").unwrap();
        if root_key {
            std::fs::write(cfg.cachedir.join(".root_key"), "RK").unwrap();
        } else {
            let _ = std::fs::remove_file(cfg.cachedir.join(".root_key"));
        }
        if saved {
            TokenFile::for_config(&cfg).save("SAVED").unwrap();
        }
        let client = LocalClient::new(&cfg);
        (cfg, client)
    }

    fn args(eauth: &str, make_token: bool) -> EauthArgs {
        EauthArgs {
            eauth: eauth.into(),
            make_token,
            username: Some("alice".into()),
            password: Some("pw".into()),
        }
    }

    async fn decide(
        client: &LocalClient,
        cfg: &MasterConfig,
        a: &EauthArgs,
        kind: CliKind,
    ) -> CliCredentials {
        client
            .cli_credentials(cfg, a, kind, &mut Script::default())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_saved_token_comes_first_for_salt_and_for_salt_run_with_eauth() {
        let dir = tempfile::tempdir().unwrap();
        let (cfg, client) = setup(dir.path(), false, true);
        let token = CliCredentials::Use(Credentials::Token("SAVED".into()));
        assert_eq!(
            decide(&client, &cfg, &args("", false), CliKind::Salt).await,
            token
        );
        // -a, even a backend nobody has, is not looked at while the token is valid.
        assert_eq!(
            decide(&client, &cfg, &args("nosuch", true), CliKind::Salt).await,
            token
        );
        assert_eq!(
            decide(&client, &cfg, &args("file", false), CliKind::SaltRun).await,
            token
        );
        // salt-run without -a keeps the user's key.
        let user_key = CliCredentials::Use(Credentials::Key("UK".into()));
        assert_eq!(
            decide(&client, &cfg, &args("", false), CliKind::SaltRun).await,
            user_key
        );
        // Once older than token_expire (43200 s), the saved token is not used.
        let file = std::fs::File::options()
            .write(true)
            .open(TokenFile::for_config(&cfg).path())
            .unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(43201);
        file.set_modified(old).unwrap();
        assert_eq!(
            decide(&client, &cfg, &args("", false), CliKind::Salt).await,
            user_key
        );
    }

    #[tokio::test]
    async fn a_readable_root_key_beats_the_saved_token() {
        let dir = tempfile::tempdir().unwrap();
        let (cfg, client) = setup(dir.path(), true, true);
        let user_key = client.credentials().clone();
        assert_eq!(
            decide(&client, &cfg, &args("", false), CliKind::Salt).await,
            CliCredentials::Use(user_key)
        );
        assert_eq!(
            decide(&client, &cfg, &args("file", false), CliKind::SaltRun).await,
            CliCredentials::Use(Credentials::Key("RK".into()))
        );
    }

    #[tokio::test]
    async fn without_a_token_eauth_flags_give_eauth_credentials_or_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let (cfg, client) = setup(dir.path(), false, false);
        for kind in [CliKind::Salt, CliKind::SaltRun] {
            assert_eq!(
                decide(&client, &cfg, &args("", false), kind).await,
                CliCredentials::Use(Credentials::Key("UK".into()))
            );
            assert_eq!(
                decide(&client, &cfg, &args("file", false), kind).await,
                CliCredentials::Use(eauth("file", "alice", "pw"))
            );
            assert_eq!(
                decide(&client, &cfg, &args("nosuch", true), kind).await,
                CliCredentials::Unavailable("nosuch".into())
            );
        }
    }

    /// A one-shot stand-in master on a REP socket: answers one request with `reply` and
    /// hands back the load it got.
    fn fake_master(reply: Value) -> (u16, std::thread::JoinHandle<Value>) {
        let ctx = zmq::Context::new();
        let rep = ctx.socket(zmq::REP).unwrap();
        rep.bind("tcp://127.0.0.1:*").unwrap();
        // A client that never asks fails the test instead of hanging it.
        rep.set_rcvtimeo(60_000).unwrap();
        let endpoint = rep.get_last_endpoint().unwrap().unwrap();
        let port = endpoint.rsplit(':').next().unwrap().parse().unwrap();
        let handle = std::thread::spawn(move || {
            let body = rep.recv_bytes(0).unwrap();
            rep.send(halite_proto::value::encode(&reply), 0).unwrap();
            let request = halite_proto::value::decode(&body).unwrap();
            halite_proto::value::get(&request, "load").unwrap().clone()
        });
        (port, handle)
    }

    fn setup_with_master(dir: &std::path::Path, port: u16) -> (MasterConfig, LocalClient) {
        let yaml = format!(
            "cachedir: {d}/cache\ntoken_file: {d}/salt_token\ninterface: 127.0.0.1\n\
             ret_port: {port}\nuser: nobody\n",
            d = dir.display()
        );
        let cfg = MasterConfig::from_yaml_str(&yaml, &dir.join("master")).unwrap();
        let client = LocalClient::new(&cfg);
        (cfg, client)
    }

    #[tokio::test]
    async fn make_token_sends_resolvers_load_saves_the_token_and_uses_it() {
        let dir = tempfile::tempdir().unwrap();
        let data = halite_proto::value::map([
            ("name", s("alice")),
            ("eauth", s("file")),
            ("token", s("NEWTOKEN")),
        ]);
        let (port, master) = fake_master(data);
        let (cfg, client) = setup_with_master(dir.path(), port);
        let got = decide(&client, &cfg, &args("file", true), CliKind::Salt).await;
        assert_eq!(
            got,
            CliCredentials::Use(Credentials::Token("NEWTOKEN".into()))
        );
        assert_eq!(
            master.join().unwrap(),
            halite_proto::value::map([
                ("username", s("alice")),
                ("password", s("pw")),
                ("cmd", s("mk_token")),
                ("eauth", s("file")),
            ])
        );
        let path = dir.path().join("salt_token");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "NEWTOKEN");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[tokio::test]
    async fn a_refused_make_token_leaves_the_eauth_credentials_and_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let (port, master) = fake_master(s(""));
        let (cfg, client) = setup_with_master(dir.path(), port);
        let got = decide(&client, &cfg, &args("file", true), CliKind::SaltRun).await;
        assert_eq!(got, CliCredentials::Use(eauth("file", "alice", "pw")));
        master.join().unwrap();
        assert!(!dir.path().join("salt_token").exists());
    }

    #[test]
    fn eauth_flags_parse_with_all_of_salts_spellings() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            auth: EauthArgs,
        }
        use clap::Parser;
        for flag in ["-a", "--auth", "--eauth", "--external-auth"] {
            let cli = Cli::try_parse_from(["x", flag, "pam"]).unwrap();
            assert_eq!(cli.auth.eauth, "pam", "{flag}");
        }
        let cli = Cli::try_parse_from([
            "x",
            "-a",
            "file",
            "-T",
            "--username",
            "u",
            "--password",
            "p",
        ])
        .unwrap();
        assert_eq!(
            cli.auth,
            EauthArgs {
                eauth: "file".into(),
                make_token: true,
                username: Some("u".into()),
                password: Some("p".into()),
            }
        );
        let cli = Cli::try_parse_from(["x", "--make-token"]).unwrap();
        assert_eq!(cli.auth.eauth, "");
        assert!(cli.auth.make_token);
    }
}
