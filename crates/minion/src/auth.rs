//! Signing in to the master (`salt/crypt.py:AsyncAuth`): the `_auth` exchange with Salt's
//! retry and wait rules and log wording, the pinned master key, and the current session
//! keys shared by everything that talks to the master.
//!
//! Trust in the master's key follows Salt (`verify_master_pubkey_sign`,
//! `master_sign_key_name`, `always_verify_signature`, `master_finger`; the checks are
//! `halite_proto::minion::open_auth_reply_with`), with Salt's log lines. A refused key fails
//! the sign-in and the minion tries again as after any failed sign-in, except a
//! `master_finger` mismatch, which ends the minion with status 42
//! ([`crate::EX_MASTER_FINGER`]). Deviations (see `halite_proto::minion`): with
//! `verify_master_pubkey_sign` the signature is checked on every sign-in (salt#55523), so
//! `always_verify_signature` only adds Salt's INFO line for an unchanged key; a signature
//! over the key with a trailing newline verifies (salt#68930); `master_finger` may also be
//! the value `salt-key -F master` prints (3008.3 prints another digest than the one its
//! minions check); a key that fails a check, `master_finger` included, is never written to
//! `minion_master.pub`. Stock 3008.3 logs the `master_finger` CRITICAL and calls
//! `sys.exit(42)`, which its event loop swallows: the process exits 0 (measured); Halite
//! exits 42 as Salt means to.
//!
//! Sign-ins are serialised: when several threads find the session stale at once (a job
//! return answered "bad load" while the publish loop saw a key rotation), the first signs
//! in and the others take its result, recognised by the session [`Session::generation`].

use crate::keys::MinionKeys;
use crate::settings::Settings;
use crate::shutdown::Shutdown;
use crate::transport::ReqSocket;
use crate::Error;
use halite_proto::crypticle::Crypticle;
use halite_proto::minion::{self as proto, AuthError, AuthOutcome, KeyTrust, SignIn, SignInState};
use halite_proto::rsa::PublicKey;
use halite_proto::{value, Value};
use std::sync::{Arc, Mutex, RwLock};

/// The keys of one successful sign-in.
pub struct Session {
    /// The publish AES key.
    pub aes: Crypticle,
    /// The per-minion request key.
    pub session: Crypticle,
    /// The publish port the master announced.
    pub publish_port: u16,
    /// The master's public key (pinned in `minion_master.pub`).
    pub master: PublicKey,
    /// Increases with every sign-in of this process.
    pub generation: u64,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("publish_port", &self.publish_port)
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

/// What one `_auth` exchange came to.
enum Attempt {
    Accepted(Box<Session>),
    /// Pending key or timed-out request: wait and sign in again.
    Retry,
}

/// The minion's authentication state toward one master.
pub struct Auth {
    settings: Arc<Settings>,
    keys: Arc<MinionKeys>,
    ctx: zmq::Context,
    master_uri: String,
    autosign_grains: Option<Value>,
    caller: bool,
    stop: Arc<Shutdown>,
    signing_in: Mutex<u64>,
    current: RwLock<Option<Arc<Session>>>,
}

impl Auth {
    /// Authentication toward `master_uri` (`tcp://master:ret_port`). `caller` is true for
    /// `halite-call`, which gives up at once on a pending key as `salt-call` does. The
    /// `autosign_grains` named in the settings are taken from `grains`.
    pub fn new(
        settings: Arc<Settings>,
        keys: Arc<MinionKeys>,
        ctx: &zmq::Context,
        master_uri: String,
        grains: &Value,
        caller: bool,
        stop: Arc<Shutdown>,
    ) -> Auth {
        let autosign_grains = (!settings.autosign_grains.is_empty()).then(|| {
            Value::Map(
                settings
                    .autosign_grains
                    .iter()
                    .filter_map(|g| {
                        value::get(grains, g).map(|v| (value::s(g.as_str()), v.clone()))
                    })
                    .collect(),
            )
        });
        Auth {
            settings,
            keys,
            ctx: ctx.clone(),
            master_uri,
            autosign_grains,
            caller,
            stop,
            signing_in: Mutex::new(0),
            current: RwLock::new(None),
        }
    }

    /// The master URI requests go to.
    pub fn master_uri(&self) -> &str {
        &self.master_uri
    }

    /// The settings this authentication runs with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The minion's keys.
    pub fn keys(&self) -> &MinionKeys {
        &self.keys
    }

    /// The current session, if signed in.
    pub fn current(&self) -> Option<Arc<Session>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The current session, signing in first if there is none.
    pub fn session(&self) -> Result<Arc<Session>, Error> {
        match self.current() {
            Some(s) => Ok(s),
            None => self.reauthenticate(0),
        }
    }

    /// Signs in again because the session of `generation` stopped working — unless another
    /// thread already did so since, in which case its session is returned.
    pub fn reauthenticate(&self, generation: u64) -> Result<Arc<Session>, Error> {
        let mut last = self.signing_in.lock().unwrap_or_else(|e| e.into_inner());
        if *last != generation {
            if let Some(s) = self.current() {
                return Ok(s);
            }
        }
        let mut session = self.authenticate()?;
        *last += 1;
        session.generation = *last;
        let session = Arc::new(session);
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(session.clone());
        Ok(session)
    }

    /// `AsyncAuth._authenticate`: signs in until accepted. A pending key or a timed-out
    /// request waits `acceptance_wait_time` (doubling up to `acceptance_wait_time_max`) and
    /// tries again, without limit unless `auth_retries` is set.
    fn authenticate(&self) -> Result<Session, Error> {
        let base = self.settings.acceptance_wait_time;
        let max = if self.settings.acceptance_wait_time_max.is_zero() {
            base
        } else {
            self.settings.acceptance_wait_time_max
        };
        let mut wait = base;
        let mut attempts = 0u32;
        loop {
            if self.stop.is_stopped() {
                return Err(Error::Stopped);
            }
            attempts += 1;
            match self.sign_in()? {
                Attempt::Accepted(session) => return Ok(*session),
                Attempt::Retry => {
                    let retries = self.settings.auth_retries;
                    if retries > 0 && attempts >= retries {
                        return Err(Error::Auth(format!(
                            "Failed to authenticate with the master after {attempts} attempts"
                        )));
                    }
                    if self.caller {
                        return Err(Error::Pending);
                    }
                    if !wait.is_zero() {
                        tracing::info!("Waiting {} seconds before retry.", secs(wait));
                        if self.stop.sleep(wait) {
                            return Err(Error::Stopped);
                        }
                    }
                    if wait < max {
                        wait += base;
                        tracing::debug!("Authentication wait time is {}", secs(wait));
                    }
                }
            }
        }
    }

    /// One `_auth` exchange (`AsyncAuth.sign_in` + `handle_signin_response`).
    fn sign_in(&self) -> Result<Attempt, Error> {
        let pinned = self.keys.pinned_master()?;
        let pinned_key = match &pinned {
            Some(text) => Some(PublicKey::from_pem(text.as_bytes()).map_err(|e| {
                Error::Keys(format!("{}: {e}", self.keys.master_pub_path().display()))
            })?),
            None => None,
        };
        let token = pinned.as_ref().map(|_| proto::new_token());
        let nonce = proto::new_nonce();
        let s = &self.settings;
        let body = proto::auth_request(&SignIn {
            id: &s.id,
            pub_clean: &self.keys.pub_clean,
            nonce: &nonce,
            enc_algo: s.enc_algo,
            sig_algo: s.sig_algo,
            autosign_grains: self.autosign_grains.as_ref(),
            token: pinned_key.as_ref().zip(token.as_deref()),
        })
        .map_err(|e| Error::Auth(e.to_string()))?;
        let body = value::encode(&body);

        let mut req = ReqSocket::new(&self.ctx, self.master_uri.clone(), s);
        let mut reply = None;
        for _ in 0..s.auth_tries.max(1) {
            match req.request(&body, s.auth_timeout) {
                Ok(r) => {
                    reply = Some(r);
                    break;
                }
                Err(Error::Timeout { .. } | Error::Disconnected { .. })
                    if !self.stop.is_stopped() =>
                {
                    continue
                }
                Err(e) => return Err(e),
            }
        }
        let Some(reply) = reply else {
            if self.stop.is_stopped() {
                return Err(Error::Stopped);
            }
            if s.sign_in_timeout_is_error {
                return Err(Error::Auth(
                    "Attempt to authenticate with the salt master failed with timeout error".into(),
                ));
            }
            tracing::warn!(
                "SaltReqTimeoutError: Message timed out: no reply to the sign-in from the master at {} ({} tries of {} s)",
                self.master_uri,
                s.auth_tries.max(1),
                secs(s.auth_timeout)
            );
            return Ok(Attempt::Retry);
        };
        let reply = match value::decode(&reply) {
            Ok(v) => v,
            Err(e) => {
                tracing::error!("Sign-in attempt failed: undecodable reply ({e})");
                return Err(Error::Auth(
                    "Attempt to authenticate with the salt master failed".into(),
                ));
            }
        };
        let state = SignInState {
            key: &self.keys.key,
            nonce: &nonce,
            pinned: pinned.as_deref(),
            token: token.as_deref(),
            enc_algo: s.enc_algo,
            sig_algo: s.sig_algo,
        };
        let (sign_key_file, sign_key) = if s.verify_master_pubkey_sign {
            self.keys.sign_key(&s.master_sign_key_name)?
        } else {
            (String::new(), None)
        };
        let master = self.master_name();
        let trust = KeyTrust {
            verify_sign: s.verify_master_pubkey_sign,
            sign_key_file: &sign_key_file,
            sign_key: sign_key.as_deref(),
            master_finger: s.master_finger.as_deref(),
            hash_type: &s.hash_type,
            master: &master,
        };
        match proto::open_auth_reply_with(&reply, &state, &trust) {
            Ok(AuthOutcome::Accepted(creds)) => {
                if creds.verified {
                    tracing::debug!("Successfully verified signature of master public key with verification public key {sign_key_file}");
                    if creds.pin || s.always_verify_signature {
                        tracing::info!(
                            "Received signed and verified master pubkey from master {master}"
                        );
                    }
                }
                if creds.pin {
                    self.keys.pin_master(&creds.master_pub)?;
                }
                let bad = |e: halite_proto::Error| Error::Auth(e.to_string());
                let session = Session {
                    aes: Crypticle::new(&creds.aes).map_err(bad)?,
                    session: Crypticle::new(&creds.session).map_err(bad)?,
                    publish_port: creds.publish_port,
                    master: PublicKey::from_pem(creds.master_pub.as_bytes()).map_err(bad)?,
                    generation: 0,
                };
                tracing::debug!("Got new master aes key.");
                Ok(Attempt::Accepted(Box::new(session)))
            }
            Ok(AuthOutcome::Pending) => {
                tracing::error!(
                    "The Salt Master has cached the public key for this node, this salt minion will wait for {} seconds before attempting to re-authenticate",
                    secs(s.acceptance_wait_time)
                );
                Ok(Attempt::Retry)
            }
            Ok(AuthOutcome::Rejected) if s.rejected_retry => {
                tracing::error!(
                    "The Salt Master has rejected this minion's public key.\nTo repair this issue, delete the public key for this minion on the Salt Master.\nThe Salt Minion will attempt to re-authenticate."
                );
                Ok(Attempt::Retry)
            }
            Ok(AuthOutcome::Rejected) => {
                tracing::error!(
                    critical = true,
                    "The Salt Master has rejected this minion's public key!\nTo repair this issue, delete the public key for this minion on the Salt Master and restart this minion.\nOr restart the Salt Master in open mode to clean out the keys. The Salt Minion will now exit."
                );
                Err(Error::Rejected)
            }
            Ok(AuthOutcome::Full) => Err(Error::Auth(
                "Attempt to authenticate with the salt master failed: the master is full".into(),
            )),
            Ok(AuthOutcome::BadEncAlgo) => {
                tracing::error!("This minion is using a encryption algorithm that is not supported by it's Master. Please check your minion configutation.");
                Err(Error::Auth(
                    "Attempt to authenticate with the salt master failed".into(),
                ))
            }
            Ok(AuthOutcome::BadSigAlgo) => {
                tracing::error!("This minion is using a signing algorithm that is not supported by it's Master. Please check your minion configutation.");
                Err(Error::Auth(
                    "Attempt to authenticate with the salt master failed".into(),
                ))
            }
            Err(e) => Err(self.refused(e)),
        }
    }

    /// The master as Salt names it in its messages (`opts["master"]`, without a port).
    fn master_name(&self) -> String {
        let s = &self.settings;
        crate::transport::split_master(&s.master, s.master_port).0
    }

    /// Logs a refused reply with Salt's wording and turns it into the error Salt raises.
    fn refused(&self, e: AuthError) -> Error {
        match e {
            AuthError::MasterKeyChanged
            | AuthError::BadToken
            | AuthError::BadAesSig
            | AuthError::UnexpectedPubSig
            | AuthError::MissingPubSig
            | AuthError::SignKeyInvalid { .. }
            | AuthError::PubSigMalformed(_) => {
                tracing::error!("{e}");
                self.critical_master_key()
            }
            AuthError::SignKeyMissing { .. } => {
                tracing::error!("{e}");
                tracing::error!(
                    "Received signed public-key from master {} but signature verification failed!",
                    self.master_name()
                );
                self.critical_master_key()
            }
            AuthError::PubSigFailed { pinned, .. } => {
                tracing::debug!("Failed to verify signature of public key");
                tracing::error!("{e}");
                if pinned {
                    tracing::error!(
                        "The masters public could not be verified. Is the verification pubkey {}.pub up to date?",
                        self.settings.master_sign_key_name
                    );
                }
                self.critical_master_key()
            }
            AuthError::MasterFinger { .. } => {
                tracing::error!(critical = true, "{e}");
                Error::MasterFinger
            }
            AuthError::BadSignature => {
                tracing::error!(critical = true, "The payload signature did not validate.");
                Error::Auth("Invalid signature".into())
            }
            AuthError::BadNonce => {
                tracing::error!(critical = true, "The payload nonce did not validate.");
                Error::Auth("Invalid nonce".into())
            }
            AuthError::NotSigned(what) => {
                tracing::error!("Sign-in attempt failed: {what}");
                Error::Auth("Attempt to authenticate with the salt master failed".into())
            }
            AuthError::Malformed(err) => {
                tracing::error!("Sign-in attempt failed: {err}");
                Error::Auth("Attempt to authenticate with the salt master failed".into())
            }
        }
    }

    /// Salt's CRITICAL message when the master's key did not authenticate, and the error
    /// its sign-in raises.
    fn critical_master_key(&self) -> Error {
        tracing::error!(
            critical = true,
            "The Salt Master server's public key did not authenticate!\nThe master may need to be updated if it is a version of Salt lower than {}, or\nIf you are confident that you are connecting to a valid Salt Master, then remove the master public key and restart the Salt Minion.\nThe master public key can be found at:\n{}",
            crate::SALT_VERSION,
            self.keys.master_pub_path().display()
        );
        Error::Auth("Invalid master key".into())
    }
}

/// Seconds as Salt prints its float options (`10`, `0.5`).
pub(crate) fn secs(d: std::time::Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{}", s as u64)
    } else {
        format!("{s}")
    }
}
