//! A fake master for the tests: a real pki directory and job store on a temp root, a log
//! of what was fired, and a count of the key-change notifications.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use halite_config::MasterConfig;
use halite_jobcache::{JobStore, RedbJobStore};
use halite_keystore::{KeyState, KeyStore};
use halite_proto::rsa::PrivateKey;
use rmpv::Value;

use crate::WheelHost;

pub(crate) struct FakeHost {
    pub opts: MasterConfig,
    pub store: KeyStore,
    pub connected: Vec<String>,
    jobs: RedbJobStore,
    events: Mutex<Vec<(String, Value)>>,
    changes: AtomicUsize,
    pub dir: tempfile::TempDir,
}

/// A distinct valid public key per `n` (generated once per test binary).
pub(crate) fn pubkey(n: usize) -> String {
    static KEYS: OnceLock<Vec<String>> = OnceLock::new();
    KEYS.get_or_init(|| {
        (0..6)
            .map(|_| {
                PrivateKey::generate(2048)
                    .and_then(|k| k.public_key())
                    .and_then(|p| p.to_pem())
                    .expect("a test key")
            })
            .collect()
    })[n % 6]
        .clone()
}

impl FakeHost {
    /// A master (`id: master1_master`, master key pair made) with these keys, each a
    /// distinct valid key.
    pub fn with_keys(keys: &[(KeyState, &str)]) -> FakeHost {
        FakeHost::with_config(keys, "")
    }

    /// [`FakeHost::with_keys`] with more master configuration (YAML).
    pub fn with_config(keys: &[(KeyState, &str)], config: &str) -> FakeHost {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = format!(
            "id: master1_master\nroot_dir: {}\n{config}",
            dir.path().display()
        );
        let opts =
            MasterConfig::from_yaml_str(&text, &dir.path().join("master")).expect("test config");
        let store = KeyStore::open(&opts.pki_dir).expect("pki dir");
        store
            .load_or_create_master_keys("master1", 2048)
            .expect("master keys");
        for (n, (state, id)) in keys.iter().enumerate() {
            match state {
                KeyState::Denied => store.add_denied(id, &pubkey(n)).map(drop),
                _ => store.put(id, *state, &pubkey(n)),
            }
            .expect("test key");
        }
        let jobs = RedbJobStore::open(dir.path().join("jobs.redb")).expect("job store");
        FakeHost {
            opts,
            store,
            connected: Vec::new(),
            jobs,
            events: Mutex::new(Vec::new()),
            changes: AtomicUsize::new(0),
            dir,
        }
    }

    /// Events fired, in order.
    pub fn events(&self) -> Vec<(String, Value)> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The data of the `salt/key` events, in order.
    pub fn key_events(&self) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|(t, _)| t == "salt/key")
            .map(|(_, d)| d)
            .collect()
    }

    /// The job load stored for `jid`.
    pub fn jobs_load(&self, jid: &str) -> Option<Value> {
        self.jobs.get_load(jid).ok().flatten().map(|job| job.load)
    }

    /// How many times the host was told keys changed.
    pub fn changes(&self) -> usize {
        self.changes.load(Ordering::SeqCst)
    }
}

impl WheelHost for FakeHost {
    fn keys(&self) -> &KeyStore {
        &self.store
    }

    fn fire(&self, tag: &str, data: Value) {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((tag.to_owned(), data));
    }

    fn connected(&self) -> Vec<String> {
        self.connected.clone()
    }

    fn opts(&self) -> &MasterConfig {
        &self.opts
    }

    fn jobs(&self) -> &dyn JobStore {
        &self.jobs
    }

    fn keys_changed(&self) {
        self.changes.fetch_add(1, Ordering::SeqCst);
    }
}
