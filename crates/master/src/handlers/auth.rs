//! `_auth`: a minion's sign-in (`AuthFuncs._auth_impl`).
//!
//! The decision itself is pure (`halite_proto::auth::decide`); this module reads the stored
//! key, the `autosign_file`/`autoreject_file` lists, persists what the decision says, signs
//! the reply and fires `salt/auth`, with Salt's log lines.
//!
//! With `master_sign_pubkey`, accepted minions also get `pub_sig`, the signature of the
//! master public key by the signing pair ([`pub_key_signature`], set up once at start).
//! Deviation from Salt: the signature is computed once per algorithm and cached, not on
//! every sign-in (the signed key never changes while the master runs).
//!
//! `_auth` needs no credentials, so what it stores is bounded. Deviations from Salt:
//! - A presented key that does not parse as an RSA public key is refused before anything
//!   else (signed `ret: False`, Salt's `Corrupt or missing public key` line at WARNING, no
//!   `salt/auth` event) and stored nowhere. Salt stores any text as a pending key (or as a
//!   denied key of a known id) and only fails when the key is accepted.
//! - At most `max_pending_keys` keys wait in `minions_pre/` (a Halite option, 10,000 by
//!   default, 0 for no limit; see `halite_config::DEFAULT_MAX_PENDING_KEYS`). When that many
//!   are pending, a sign-in that would store a new pending key is answered `full` (what
//!   Salt answers at `max_minions`: a minion logs it and tries again later; it does not
//!   exit) with a `salt/auth` event whose `act` is `full`, and nothing is stored. The first
//!   refusal is logged at WARNING, later ones at DEBUG, until a place frees up (a key is
//!   accepted, rejected or deleted). Ids whose key is already pending or accepted are not
//!   affected, nor are `auto_accept`/`autosign_file` sign-ins, which never wait.
//! - `max_minions` admits at most that many connected minions, as documented; Salt's
//!   `_auth_impl` refuses only when more than `max_minions` are connected, so it admits
//!   one more. Connected minions signing in again are never refused (as in Salt).
//! - A key presented for an id whose accepted or pending key differs is denied as in
//!   Salt (CVE-2016-9639: never swapped): the stored key stays, the new one is recorded
//!   once in `minions_denied/`, and the minion gets a signed `ret: False`.

use crate::dispatch::bad_load;
use crate::keys::PendingPlace;
use crate::Master;
use halite_config::MasterConfig;
use halite_keystore::KeyStore;
use halite_metrics::AuthFailure;
use halite_proto::auth::{self, Decision, KeyState, Policy, Store};
use halite_proto::envelope::{self, AcceptKeys, AuthRequest};
use halite_proto::pem::clean_key;
use halite_proto::rsa::{PublicKey, SigAlgo};
use halite_proto::signing::{self, PubKeySignature};
use halite_proto::value::{self, s};
use halite_proto::Value;
use std::time::SystemTime;

/// The signing half of `MasterKeys._setup_keys`, run once at start: nothing without
/// `master_sign_pubkey`; with `master_use_pubkey_signature`, the signature file from the pki
/// directory (missing: Salt's two ERROR lines and a startup error, which exits 1); otherwise
/// the signing pair `<master_sign_key_name>.pem/.pub`, created (`keysize` bits, 0400) when
/// missing.
///
/// Deviations from Salt: an empty signature file is refused at start (Salt starts and then
/// fails every sign-in); a precomputed signature that does not verify with a
/// `<master_sign_key_name>.pub` present in the pki directory is reported at WARNING (it was
/// made for another master key, so minions will refuse it).
pub(crate) fn pub_key_signature(
    cfg: &MasterConfig,
    store: &KeyStore,
    master_pub: &str,
) -> Result<Option<PubKeySignature>, crate::Error> {
    if !cfg.master_sign_pubkey {
        return Ok(None);
    }
    let keys_err = |e: halite_keystore::Error| crate::Error::Keys(e.to_string());
    if !cfg.master_use_pubkey_signature {
        let name = &cfg.master_sign_key_name;
        let key = store
            .find_or_create_pair(name, cfg.keysize)
            .map_err(keys_err)?;
        tracing::debug!(
            "Loaded {name} key: {}",
            store.pki_dir().join(format!("{name}.pem")).display()
        );
        return Ok(Some(PubKeySignature::computed(key, master_pub)));
    }
    let name = &cfg.master_pubkey_signature;
    let path = store.pubkey_signature_path(name).map_err(keys_err)?;
    let text = store.read_pubkey_signature(name).map_err(keys_err)?;
    let Some(sig) = text.as_deref().and_then(PubKeySignature::precomputed) else {
        if text.is_some() {
            tracing::error!("The signature file {} is empty", path.display());
        } else {
            tracing::error!(
                "Signing the master.pub key with a signature is enabled but no signature file found at the defined location {}",
                path.display()
            );
        }
        tracing::error!(
            "The signature-file may be either named differently or has to be created with 'salt-key --gen-signature'"
        );
        return Err(crate::Error::PubkeySignature(path));
    };
    tracing::info!("Read {name}'s signature from {}", path.display());
    if signature_is_stale(cfg, store, master_pub, text.as_deref().unwrap_or_default()) {
        tracing::warn!(
            "The signature in {name} does not verify the master public key with {}.pub; minions verifying it will refuse this master",
            cfg.master_sign_key_name
        );
    }
    Ok(Some(sig))
}

/// Whether a precomputed signature fails to verify the master public key with the signing
/// public key `<master_sign_key_name>.pub` (`publish_signing_algorithm`, what salt-key signs
/// with). `false` when the master does not have that key (signing may happen elsewhere).
fn signature_is_stale(cfg: &MasterConfig, store: &KeyStore, master_pub: &str, sig: &str) -> bool {
    let pub_name = format!("{}.pub", cfg.master_sign_key_name);
    let Ok(Some(pem)) = store.read_local(&pub_name) else {
        return false;
    };
    let Ok(verify_key) = PublicKey::from_pem(pem.as_bytes()) else {
        return false;
    };
    let algo =
        SigAlgo::parse(cfg.publish_signing_algorithm.as_str()).unwrap_or(SigAlgo::Pkcs1v15Sha1);
    !signing::verify_master_pub(&verify_key, master_pub, sig.as_bytes(), algo)
}

impl Master {
    pub(crate) fn handle_auth(&self, load: &Value) -> Value {
        self.metrics.count_auth_request();
        let req = match AuthRequest::parse(load) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = ?e, "Unusable _auth request");
                self.metrics.count_auth_failure(AuthFailure::Malformed);
                return e.reply();
            }
        };
        match self.auth(&req) {
            Ok(v) => v,
            Err(e) => {
                tracing::error!("Authentication of {} failed internally: {e}", req.id);
                self.metrics.count_auth_failure(AuthFailure::Error);
                bad_load()
            }
        }
    }

    fn auth(&self, req: &AuthRequest) -> halite_proto::Result<Value> {
        let id = req.id.as_str();
        if !auth::valid_id(id) {
            tracing::info!("Authentication request from invalid id {id}");
            self.metrics.count_auth_failure(AuthFailure::InvalidId);
            return envelope::ret_reply(&self.key, req, Value::from(false));
        }
        tracing::info!("Authentication request from {id}");
        if let Err(e) = PublicKey::from_pem(clean_key(&req.pub_pem).as_bytes()) {
            tracing::warn!(
                "Corrupt or missing public key \"{id}\": {e}; the sign-in is refused and nothing is stored"
            );
            self.metrics.count_auth_failure(AuthFailure::BadKey);
            return envelope::ret_reply(&self.key, req, Value::from(false));
        }
        let policy = Policy {
            open_mode: self.cfg.open_mode,
            autosign: self.cfg.auto_accept || self.listed_in(self.cfg.autosign_file.as_deref(), id),
            autoreject: self.listed_in(self.cfg.autoreject_file.as_deref(), id),
            full: self.minions_full(id),
        };
        let stored = match self.keys.store().get(id) {
            Ok(k) => k,
            Err(e) => {
                tracing::error!("Could not read the key of {id}: {e}");
                self.metrics.count_auth_failure(AuthFailure::Error);
                return envelope::ret_reply(&self.key, req, Value::from(false));
            }
        };
        let decision = auth::decide(
            stored.as_ref().map(|(st, pem)| (*st, pem.as_str())),
            &req.pub_pem,
            policy,
        );
        let new_pending = decision
            == Decision::Pend {
                store: Store::Key(KeyState::Pending),
            };
        if new_pending {
            if let PendingPlace::Full { first } =
                self.keys.reserve_pending(self.cfg.max_pending_keys)
            {
                return self.refuse_pending(req, first);
            }
        }
        self.log_decision(id, stored.as_ref().map(|(st, _)| *st), decision);
        self.count_auth_decision(decision);
        let persisted = match decision.store() {
            Store::Nothing => Ok(()),
            Store::Key(state) => self
                .keys
                .store()
                .put(id, state, &req.pub_pem)
                .map_err(|e| e.to_string()),
            Store::MoveStored(state) => match &stored {
                Some((_, pem)) => self
                    .keys
                    .store()
                    .put(id, state, pem)
                    .map_err(|e| e.to_string()),
                None => Ok(()),
            },
            Store::AddDenied => self
                .keys
                .store()
                .add_denied(id, &req.pub_pem)
                .map(drop)
                .map_err(|e| e.to_string()),
        };
        if let Err(e) = persisted {
            tracing::error!("Could not store the key of {id}: {e}");
            if new_pending {
                self.keys.release_pending();
            }
        }
        let reply = match decision {
            Decision::Accept { .. } => self.accept(req)?,
            Decision::Pend { .. } => envelope::ret_reply(&self.key, req, Value::from(true))?,
            Decision::Reject { .. } | Decision::Deny => {
                envelope::ret_reply(&self.key, req, Value::from(false))?
            }
            Decision::Full => envelope::ret_reply(&self.key, req, s("full"))?,
        };
        self.fire_auth_event(req, decision);
        Ok(reply)
    }

    /// `salt/auth` for `decision` (with `auth_events`).
    fn fire_auth_event(&self, req: &AuthRequest, decision: Decision) {
        if !self.cfg.auth_events {
            return;
        }
        let mut data = vec![
            (s("result"), Value::from(decision.result())),
            (s("act"), s(decision.act())),
            (s("id"), s(req.id.clone())),
            (s("pub"), s(req.pub_pem.clone())),
        ];
        if let Some(g) = &req.autosign_grains {
            data.push((s("autosign_grains"), g.clone()));
        }
        self.events.fire("salt/auth", Value::Map(data));
    }

    /// `max_minions`: that many minions are connected and `id` is not one of them.
    /// Connected minions are counted only when the option is set (Salt's `connected_ids`,
    /// [`Master::connected_minions`]).
    fn minions_full(&self, id: &str) -> bool {
        let max = self.cfg.max_minions;
        if max == 0 {
            return false;
        }
        let connected = self.connected_minions();
        u64::try_from(connected.len()).unwrap_or(u64::MAX) >= max
            && !connected.iter().any(|(m, _)| m == id)
    }

    /// The answer to a sign-in that would store a pending key past `max_pending_keys`.
    fn refuse_pending(&self, req: &AuthRequest, first: bool) -> halite_proto::Result<Value> {
        let max = self.cfg.max_pending_keys;
        if first {
            tracing::warn!(
                "{max} keys are pending (max_pending_keys): new keys are refused until pending keys are accepted, rejected or deleted"
            );
        }
        tracing::debug!(
            "New public key for {} refused: max_pending_keys ({max}) reached",
            req.id
        );
        self.fire_auth_event(req, Decision::Full);
        self.metrics.count_auth_failure(AuthFailure::Full);
        envelope::ret_reply(&self.key, req, s("full"))
    }

    fn accept(&self, req: &AuthRequest) -> halite_proto::Result<Value> {
        let id = req.id.as_str();
        let Some((_, public)) = self.keys.insert(id, &req.pub_pem) else {
            tracing::error!("Corrupt or missing public key \"{id}\"");
            self.metrics.count_auth_failure(AuthFailure::Error);
            return envelope::ret_reply(&self.key, req, Value::from(false));
        };
        let session = match self.sessions.get_or_create(id, SystemTime::now()) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("Could not write the session key of {id}: {e}");
                self.metrics.count_auth_failure(AuthFailure::Error);
                return envelope::ret_reply(&self.key, req, Value::from(false));
            }
        };
        let (aes, aes_sig) = self.publisher.auth_keys()?;
        let keys = AcceptKeys {
            master_pub: &self.pub_clean,
            publish_port: self.cfg.publish_port,
            aes: aes.key_string(),
            session: session.key_string(),
            aes_sig: &aes_sig,
        };
        let pub_sig = match &self.pub_sig {
            Some(sig) => {
                tracing::debug!("Adding pubkey signature to auth-reply");
                Some(sig.value(req.sig_algo)?)
            }
            None => None,
        };
        envelope::accept_reply_with(&self.key, &public, req, &keys, pub_sig)
    }

    fn log_decision(&self, id: &str, stored: Option<KeyState>, decision: Decision) {
        match (decision, stored) {
            (Decision::Accept { .. }, _) => tracing::info!("Authentication accepted from {id}"),
            (Decision::Pend { .. }, None) => tracing::info!("New public key for {id} placed in pending"),
            (Decision::Pend { .. }, Some(_)) => tracing::info!(
                "Authentication failed from host {id}, the key is in pending and needs to be accepted with salt-key -a {id}"
            ),
            (Decision::Reject { .. }, Some(KeyState::Rejected)) => {
                tracing::info!("Public key rejected for {id}. Key is present in rejection key dir.")
            }
            (Decision::Reject { .. }, _) => tracing::info!("New public key for {id} rejected via autoreject_file"),
            (Decision::Deny, _) => tracing::error!(
                "Authentication attempt from {id} failed, the public keys did not match. This may be an attempt to compromise the Salt cluster."
            ),
            (Decision::Full, _) => tracing::info!(
                "Too many minions connected (max_minions={}). Rejecting connection from id {id}",
                self.cfg.max_minions
            ),
        }
    }

    /// `request_server_ttl` (`ReqServerChannel.handle_message`): whether an encrypted
    /// request from `id` is refused because its `ts` is older than the ttl. Always false
    /// with the option at 0 (Salt's default). Deviation: a request without a numeric `ts`
    /// is refused with a log line (Salt fails on it with an exception).
    pub(crate) fn request_expired(&self, id: &str, load: &Value) -> bool {
        let ttl = self.cfg.request_server_ttl;
        if ttl == 0 {
            return false;
        }
        let ts = match value::get(load, "ts") {
            Some(Value::Integer(i)) => i.as_f64(),
            Some(Value::F64(f)) => Some(*f),
            _ => None,
        };
        let Some(ts) = ts else {
            tracing::warn!(
                "Received request from {id} without a timestamp; refused (request_server_ttl is set)"
            );
            return true;
        };
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let age = now - ts;
        let expired = age > ttl as f64;
        if expired {
            tracing::warn!(
                "Received request from {id} with expired ttl: {} > {ttl}",
                age.trunc()
            );
        }
        expired
    }

    /// `check_signing_file`: a line of the autosign/autoreject file that equals the id,
    /// matches it as a glob, or as an anchored regex.
    fn listed_in(&self, file: Option<&std::path::Path>, id: &str) -> bool {
        let Some(path) = file else { return false };
        let Ok(text) = std::fs::read_to_string(path) else {
            return false;
        };
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .any(|line| {
                line == id
                    || halite_target::fnmatch::fnmatch(id, line)
                    || self.regex.re_fullmatch(line, id).unwrap_or(false)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Events, StoreSink, TestMaster, Wire};
    use crate::Parts;
    use halite_proto::pem::clean_key;
    use halite_proto::rsa::PrivateKey;
    use halite_proto::value::{self, map};
    use halite_transport::PeerId;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;
    use std::sync::{Arc, OnceLock};

    fn minion_key() -> &'static PrivateKey {
        static KEY: OnceLock<PrivateKey> = OnceLock::new();
        KEY.get_or_init(|| PrivateKey::generate(2048).unwrap())
    }

    /// Signs `id` in with `sig_algo` and answers the inner load of the (accepted) reply.
    fn sign_in(master: &Master, id: &str, sig_algo: SigAlgo) -> Value {
        let pub_clean = clean_key(&minion_key().public_key().unwrap().to_pem().unwrap());
        let body = map([
            ("enc", s("clear")),
            (
                "load",
                map([
                    ("cmd", s("_auth")),
                    ("id", s(id)),
                    ("nonce", s("0".repeat(32))),
                    ("enc_algo", s("OAEP-SHA1")),
                    ("sig_algo", s(sig_algo.name())),
                    ("pub", s(pub_clean)),
                ]),
            ),
            ("version", Value::from(3)),
        ]);
        let reply = master
            .handle_request(&value::encode(&body), &PeerId(id.as_bytes().to_vec()))
            .expect("_auth is answered at once");
        let reply = value::decode(&reply).unwrap();
        value::decode(value::get_bytes(&reply, "load").expect("a signed reply")).unwrap()
    }

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn signing_master_creates_its_pair_and_signs_with_the_algorithm_asked_for() {
        let tm = TestMaster::new("master_sign_pubkey: True\n");
        let pki = tm.master.cfg.pki_dir.clone();
        for file in ["master_sign.pem", "master_sign.pub"] {
            assert_eq!(mode(&pki.join(file)), 0o400, "{file}");
        }
        let verify =
            PublicKey::from_pem(&std::fs::read(pki.join("master_sign.pub")).unwrap()).unwrap();
        let mut seen = Vec::new();
        for algo in [SigAlgo::Pkcs1v15Sha1, SigAlgo::Pkcs1v15Sha224] {
            let inner = sign_in(&tm.master, "m1", algo);
            let pub_key = value::get_str(&inner, "pub_key").unwrap();
            assert_eq!(pub_key, tm.master.pub_clean);
            let pub_sig = value::get(&inner, "pub_sig").expect("pub_sig in the reply");
            assert!(matches!(pub_sig, Value::Binary(_)), "Salt sends bytes");
            let sig = value::bytes_of(pub_sig).unwrap();
            assert!(
                signing::verify_master_pub(&verify, pub_key, sig, algo),
                "{algo:?}"
            );
            seen.push(sig.to_vec());
        }
        assert_ne!(seen[0], seen[1], "one signature per algorithm");
        let again = sign_in(&tm.master, "m2", SigAlgo::Pkcs1v15Sha1);
        assert_eq!(value::get_bytes(&again, "pub_sig"), Some(&seen[0][..]));
    }

    #[test]
    fn custom_signing_key_name_is_used_and_an_existing_pair_kept() {
        let tm = TestMaster::new("master_sign_pubkey: True\nmaster_sign_key_name: signer\n");
        let pki = tm.master.cfg.pki_dir.clone();
        assert!(!pki.join("master_sign.pem").exists());
        let pem = std::fs::read_to_string(pki.join("signer.pem")).unwrap();
        let store = KeyStore::at(&pki);
        pub_key_signature(&tm.master.cfg, &store, &tm.master.pub_clean).unwrap();
        assert_eq!(
            std::fs::read_to_string(pki.join("signer.pem")).unwrap(),
            pem
        );
        let verify = PublicKey::from_pem(&std::fs::read(pki.join("signer.pub")).unwrap()).unwrap();
        let inner = sign_in(&tm.master, "m1", SigAlgo::Pkcs1v15Sha1);
        assert!(signing::verify_master_pub(
            &verify,
            &tm.master.pub_clean,
            value::get_bytes(&inner, "pub_sig").unwrap(),
            SigAlgo::Pkcs1v15Sha1
        ));
    }

    /// Signs `id` in and reports its grains with a loopback `ipv4`, so that it counts as
    /// connected (the fake wire's publish peer is 127.0.0.1).
    fn connect(tm: &TestMaster, id: &str) {
        let m = tm.minion(id);
        // The reply (the pillar, sealed for the minion's key) does not matter here.
        let (body, _) = m.request(map([
            ("cmd", s("_pillar")),
            ("id", s(id)),
            (
                "grains",
                map([("ipv4", Value::Array(vec![s("127.0.0.1")]))]),
            ),
            ("ver", s("2")),
        ]));
        assert!(tm.master.handle_request(&body, &m.peer()).is_some());
    }

    #[test]
    fn max_minions_admits_that_many_connected_minions_and_no_new_one() {
        let tm = TestMaster::new("max_minions: 2\n");
        connect(&tm, "m1");
        connect(&tm, "m2");
        assert_eq!(tm.master.connected_minions().len(), 2);
        let refused = sign_in(&tm.master, "m3", SigAlgo::Pkcs1v15Sha1);
        assert_eq!(value::get(&refused, "ret"), Some(&s("full")), "{refused:?}");
        assert!(value::get(&refused, "aes").is_none());
        let last_auth = tm
            .events
            .0
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|(t, _)| t == "salt/auth")
            .map(|(_, d)| d.clone())
            .unwrap();
        assert_eq!(value::get(&last_auth, "act"), Some(&s("full")));
        assert_eq!(value::get(&last_auth, "id"), Some(&s("m3")));
        // A connected minion signing in again is never refused.
        // (`minion` panics unless the sign-in is accepted.)
        tm.minion("m2");
        // Without the option nobody is counted or refused.
        let open = TestMaster::new("");
        connect(&open, "m1");
        connect(&open, "m2");
        let m3 = sign_in(&open.master, "m3", SigAlgo::Pkcs1v15Sha1);
        assert!(value::get(&m3, "aes").is_some(), "{m3:?}");
    }

    #[test]
    fn master_that_does_not_sign_sends_no_pub_sig_and_makes_no_pair() {
        let tm = TestMaster::new("");
        let inner = sign_in(&tm.master, "m1", SigAlgo::Pkcs1v15Sha1);
        assert_eq!(value::get(&inner, "pub_sig"), None);
        assert!(value::get(&inner, "aes").is_some());
        assert!(!tm.master.cfg.pki_dir.join("master_sign.pem").exists());
    }

    /// A master on `root` with `extra` config, built like `TestMaster` but after the test
    /// prepared its pki directory.
    fn master_in(root: &Path, extra: &str) -> Result<Arc<Master>, crate::Error> {
        let yaml = format!(
            "root_dir: {}\nid: sig_master\nauto_accept: True\n{extra}",
            root.display()
        );
        let cfg = MasterConfig::from_yaml_str(&yaml, &root.join("master")).unwrap();
        crate::prepare_dirs(&cfg).unwrap();
        let store = Arc::new(halite_jobcache::RedbJobStore::open(root.join("jobs.redb")).unwrap());
        Master::new(
            cfg,
            Parts {
                transport: Arc::new(Wire::default()),
                events: Arc::new(Events::default()),
                jobs: Arc::new(StoreSink(store.clone())),
                job_store: store,
                tokens: Arc::new(
                    halite_token::RedbTokenStore::open(root.join("tokens.redb")).unwrap(),
                ),
            },
        )
    }

    const PRECOMPUTED: &str = "master_sign_pubkey: True\nmaster_use_pubkey_signature: True\n";

    #[test]
    fn precomputed_signature_file_is_sent_as_read_whatever_the_algorithm() {
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("etc/salt/pki/master");
        let store = KeyStore::open(&pki).unwrap();
        let (_, master_pub) = store.load_or_create_master_keys("sig", 2048).unwrap();
        let signer = PrivateKey::generate(2048).unwrap();
        let text =
            signing::signature_file_text(&signer, &master_pub, SigAlgo::Pkcs1v15Sha1).unwrap();
        assert!(store
            .write_pubkey_signature("sig_master_pubkey_signature", &text)
            .unwrap());
        let master = master_in(dir.path(), PRECOMPUTED).unwrap();
        assert!(
            !pki.join("master_sign.pem").exists(),
            "no signing pair is needed on the master"
        );
        for algo in [SigAlgo::Pkcs1v15Sha1, SigAlgo::Pkcs1v15Sha224] {
            let inner = sign_in(&master, "m1", algo);
            assert_eq!(
                value::get(&inner, "pub_sig"),
                Some(&s(text.trim_end())),
                "the file's clean text, as a string"
            );
        }
        let verify = signer.public_key().unwrap();
        let inner = sign_in(&master, "m1", SigAlgo::Pkcs1v15Sha1);
        assert!(signing::verify_master_pub(
            &verify,
            value::get_str(&inner, "pub_key").unwrap(),
            value::get_bytes(&inner, "pub_sig").unwrap(),
            SigAlgo::Pkcs1v15Sha1
        ));
    }

    #[test]
    fn precomputed_signature_for_another_master_key_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::open(dir.path()).unwrap();
        let (_, master_pub) = store.load_or_create_master_keys("sig", 2048).unwrap();
        let cfg = MasterConfig::from_yaml_str(
            &format!("root_dir: {}\n{PRECOMPUTED}", dir.path().display()),
            &dir.path().join("master"),
        )
        .unwrap();
        let signer = PrivateKey::generate(2048).unwrap();
        let sig = |text: &str| {
            signing::signature_file_text(&signer, text, SigAlgo::Pkcs1v15Sha1).unwrap()
        };
        let other_pub = clean_key(&signer.public_key().unwrap().to_pem().unwrap());
        assert!(
            !signature_is_stale(&cfg, &store, &master_pub, &sig(&other_pub)),
            "without master_sign.pub on the master nothing can be checked"
        );
        store.find_or_create_pair("master_sign", 2048).unwrap();
        std::fs::remove_file(dir.path().join("master_sign.pub")).unwrap();
        std::fs::write(
            dir.path().join("master_sign.pub"),
            signer.public_key().unwrap().to_pem().unwrap(),
        )
        .unwrap();
        assert!(!signature_is_stale(
            &cfg,
            &store,
            &master_pub,
            &sig(&master_pub)
        ));
        assert!(signature_is_stale(
            &cfg,
            &store,
            &master_pub,
            &sig(&other_pub)
        ));
    }

    #[test]
    fn configured_signature_file_name_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("etc/salt/pki/master");
        KeyStore::open(&pki)
            .unwrap()
            .write_pubkey_signature("mine.sig", "QUJD\n")
            .unwrap();
        let master = master_in(
            dir.path(),
            &format!("{PRECOMPUTED}master_pubkey_signature: mine.sig\n"),
        )
        .unwrap();
        let inner = sign_in(&master, "m1", SigAlgo::Pkcs1v15Sha1);
        assert_eq!(value::get_str(&inner, "pub_sig"), Some("QUJD"));
    }

    #[test]
    fn missing_or_empty_signature_file_stops_the_master() {
        let dir = tempfile::tempdir().unwrap();
        let err = master_in(dir.path(), PRECOMPUTED)
            .err()
            .expect("start refused");
        let path = dir
            .path()
            .join("etc/salt/pki/master/sig_master_pubkey_signature");
        assert!(
            matches!(&err, crate::Error::PubkeySignature(p) if *p == path),
            "{err}"
        );
        KeyStore::at(path.parent().unwrap())
            .write_pubkey_signature("sig_master_pubkey_signature", "\n")
            .unwrap();
        assert!(matches!(
            master_in(dir.path(), PRECOMPUTED),
            Err(crate::Error::PubkeySignature(_))
        ));
    }

    #[test]
    fn use_pubkey_signature_without_sign_pubkey_does_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let master = master_in(dir.path(), "master_use_pubkey_signature: True\n").unwrap();
        let inner = sign_in(&master, "m1", SigAlgo::Pkcs1v15Sha1);
        assert_eq!(value::get(&inner, "pub_sig"), None);
    }
}
