//! A master built from recording parts, and minions that sign in to it through
//! [`Master::handle_request`]: request→reply tests of every handler, without sockets or
//! processes.

use crate::events::EventSink;
use crate::jobs::JobSink;
use crate::{Master, Parts};
use halite_config::MasterConfig;
use halite_jobcache::{JobStore, NewReturn, RedbJobStore};
use halite_proto::crypticle::Crypticle;
use halite_proto::minion::{
    aes_request, auth_request, new_nonce, open_auth_reply, open_reply, AuthOutcome, Requester,
    SignIn, SignInState,
};
use halite_proto::pem::clean_key;
use halite_proto::rsa::{EncAlgo, PrivateKey, SigAlgo};
use halite_proto::{value, Value};
use halite_token::RedbTokenStore;
use halite_transport::{PeerId, ServerTransport};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Records what the master sends.
#[derive(Default)]
pub struct Wire {
    /// Held replies sent later: (peer, body).
    pub replies: Mutex<Vec<(PeerId, Vec<u8>)>>,
    replied: Condvar,
    /// Publish frames.
    pub publishes: Mutex<Vec<Vec<u8>>>,
}

impl ServerTransport for Wire {
    fn reply(&self, peer: PeerId, body: Vec<u8>) -> Result<(), halite_transport::Error> {
        self.replies.lock().unwrap().push((peer, body));
        self.replied.notify_all();
        Ok(())
    }

    fn publish(&self, frame: Vec<u8>) -> Result<(), halite_transport::Error> {
        self.publishes.lock().unwrap().push(frame);
        Ok(())
    }

    fn publish_peers(&self) -> Vec<std::net::IpAddr> {
        vec![std::net::Ipv4Addr::LOCALHOST.into()]
    }
}

impl Wire {
    /// Waits for a held reply to `peer`.
    pub fn held_reply(&self, peer: &PeerId, timeout: Duration) -> Option<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        let mut r = self.replies.lock().unwrap();
        loop {
            if let Some(pos) = r.iter().position(|(p, _)| p == peer) {
                return Some(r.remove(pos).1);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            r = self.replied.wait_timeout(r, deadline - now).unwrap().0;
        }
    }
}

/// Records fired events.
#[derive(Default)]
pub struct Events(pub Mutex<Vec<(String, Value)>>);

impl EventSink for Events {
    fn fire(&self, tag: &str, data: Value) {
        self.0.lock().unwrap().push((tag.to_owned(), data));
    }
}

impl Events {
    /// Tags fired so far that start with `prefix`.
    pub fn tags(&self, prefix: &str) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| t.starts_with(prefix))
            .map(|(t, _)| t.clone())
            .collect()
    }

    /// The data of the first event with `tag`.
    pub fn data(&self, tag: &str) -> Option<Value> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .find(|(t, _)| t == tag)
            .map(|(_, d)| d.clone())
    }
}

/// Writes loads and returns straight into a redb store.
pub struct StoreSink(pub Arc<RedbJobStore>);

impl JobSink for StoreSink {
    fn save_load(&self, jid: &str, load: Value, minions: Vec<String>) -> Result<(), String> {
        self.0.save_load(jid, &load, &minions, 1).unwrap();
        Ok(())
    }

    fn add_return(&self, jid: String, id: String, packed: Vec<u8>, ack: crate::jobs::Ack) {
        let load = value::decode(&packed).unwrap();
        let _ = self
            .0
            .add_returns(
                &[NewReturn {
                    jid: &jid,
                    minion_id: &id,
                    load: &load,
                    owed: false,
                }],
                1,
            )
            .unwrap();
        ack();
    }
}

/// A master on a temporary root.
pub struct TestMaster {
    /// The master.
    pub master: Arc<Master>,
    /// What it sent.
    pub wire: Arc<Wire>,
    /// What it fired.
    pub events: Arc<Events>,
    /// Its job store.
    pub store: Arc<RedbJobStore>,
    /// The root, removed when the test ends.
    _dir: tempfile::TempDir,
}

/// One minion key for every test minion: RSA generation is the slow part.
fn minion_key() -> &'static PrivateKey {
    static KEY: OnceLock<PrivateKey> = OnceLock::new();
    KEY.get_or_init(|| PrivateKey::generate(2048).unwrap())
}

impl TestMaster {
    /// The client key the master wrote for local user `user` (`cachedir/.<user>_key`).
    pub fn client_key(&self, user: &str) -> String {
        self.master
            .client_keys
            .iter()
            .find(|(u, _)| u == user)
            .unwrap_or_else(|| panic!("no client key for {user}"))
            .1
            .clone()
    }

    /// A master with `auto_accept: True` plus `extra` (YAML) in its config.
    pub fn new(extra: &str) -> TestMaster {
        TestMaster::with_jobs(extra, |store| Arc::new(StoreSink(store)))
    }

    /// [`TestMaster::new`] writing jobs to the sink `jobs` makes from the job store.
    pub fn with_jobs(
        extra: &str,
        jobs: impl FnOnce(Arc<RedbJobStore>) -> Arc<dyn JobSink>,
    ) -> TestMaster {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let yaml = format!(
            "root_dir: {}\nauto_accept: True\nkeysize: 2048\n{extra}",
            root.display()
        );
        let cfg = MasterConfig::from_yaml_str(&yaml, &root.join("master")).unwrap();
        crate::prepare_dirs(&cfg).unwrap();
        let wire = Arc::new(Wire::default());
        let events = Arc::new(Events::default());
        let store = Arc::new(RedbJobStore::open(root.join("jobs.redb")).unwrap());
        let master = Master::new(
            cfg,
            Parts {
                transport: wire.clone(),
                events: events.clone(),
                jobs: jobs(store.clone()),
                job_store: store.clone(),
                tokens: Arc::new(RedbTokenStore::open(root.join("tokens.redb")).unwrap()),
            },
        )
        .unwrap();
        TestMaster {
            master,
            wire,
            events,
            store,
            _dir: dir,
        }
    }

    /// Sends a clear request (a local client's) and decodes the reply, waiting up to 10 s
    /// for a held one (an eauth login).
    pub fn clear(&self, load: Value) -> Value {
        let body = value::map([
            ("enc", value::s("clear")),
            ("load", load),
            ("version", Value::from(3)),
        ]);
        let peer = PeerId(b"cli".to_vec());
        let reply = match self.master.handle_request(&value::encode(&body), &peer) {
            Some(reply) => reply,
            None => self
                .wire
                .held_reply(&peer, Duration::from_secs(10))
                .expect("a held clear reply within 10 s"),
        };
        value::decode(&reply).unwrap()
    }

    /// Signs `id` in (accepted) and answers the minion.
    pub fn minion(&self, id: &str) -> TestMinion {
        let key = minion_key();
        let nonce = new_nonce();
        let pub_clean = clean_key(&key.public_key().unwrap().to_pem().unwrap());
        let body = auth_request(&SignIn {
            id,
            pub_clean: &pub_clean,
            nonce: &nonce,
            enc_algo: EncAlgo::OaepSha1,
            sig_algo: SigAlgo::Pkcs1v15Sha1,
            autosign_grains: None,
            token: None,
        })
        .unwrap();
        let reply = self
            .master
            .handle_request(&value::encode(&body), &PeerId(id.as_bytes().to_vec()))
            .unwrap();
        let outcome = open_auth_reply(
            &value::decode(&reply).unwrap(),
            &SignInState {
                key,
                nonce: &nonce,
                pinned: None,
                token: None,
                enc_algo: EncAlgo::OaepSha1,
                sig_algo: SigAlgo::Pkcs1v15Sha1,
            },
        )
        .unwrap();
        let AuthOutcome::Accepted(creds) = outcome else {
            panic!("{id} not accepted: {outcome:?}");
        };
        TestMinion {
            id: id.to_owned(),
            session: Crypticle::new(&creds.session).unwrap(),
            tok: key.x931_sign(b"salt").unwrap(),
        }
    }
}

/// A signed-in minion.
pub struct TestMinion {
    /// Its id.
    pub id: String,
    /// Its session key.
    pub session: Crypticle,
    /// Its token.
    pub tok: Vec<u8>,
}

impl TestMinion {
    /// Its peer identity on the fake wire.
    pub fn peer(&self) -> PeerId {
        PeerId(self.id.as_bytes().to_vec())
    }

    /// An encrypted request body for `load`, and the nonce its reply answers.
    pub fn request(&self, load: Value) -> (Vec<u8>, String) {
        let nonce = new_nonce();
        let who = Requester {
            id: &self.id,
            tok: &self.tok,
            enc_algo: EncAlgo::OaepSha1,
            sig_algo: SigAlgo::Pkcs1v15Sha1,
        };
        let body = aes_request(&self.session, &who, load, &nonce, 0).unwrap();
        (value::encode(&body), nonce)
    }

    /// Sends an encrypted request and opens the reply (held replies are waited for).
    pub fn call(&self, tm: &TestMaster, load: Value) -> Value {
        let (body, nonce) = self.request(load);
        let reply = match tm.master.handle_request(&body, &self.peer()) {
            Some(r) => r,
            None => tm
                .wire
                .held_reply(&self.peer(), Duration::from_secs(30))
                .expect("a held reply within 30 s"),
        };
        open_reply(&self.session, &value::decode(&reply).unwrap(), &nonce).unwrap()
    }

    /// Sends an encrypted request whose reply the master holds; answers the nonce to open
    /// it with once [`Wire::held_reply`] has it. Panics if the master answered at once.
    pub fn call_held(&self, tm: &TestMaster, load: Value) -> String {
        let (body, nonce) = self.request(load);
        assert!(
            tm.master.handle_request(&body, &self.peer()).is_none(),
            "the master answered at once"
        );
        nonce
    }

    /// Sends an encrypted request that must be answered at once, and opens the reply.
    pub fn call_now(&self, tm: &TestMaster, load: Value) -> Value {
        let (body, nonce) = self.request(load);
        let reply = tm
            .master
            .handle_request(&body, &self.peer())
            .expect("the master held a reply it should have answered at once");
        open_reply(&self.session, &value::decode(&reply).unwrap(), &nonce).unwrap()
    }

    /// Opens a held reply.
    pub fn open(&self, reply: &[u8], nonce: &str) -> Value {
        open_reply(&self.session, &value::decode(reply).unwrap(), nonce).unwrap()
    }

    /// Returns `ret` for `jid` as a minion does.
    pub fn return_job(&self, tm: &TestMaster, jid: &str, fun: &str, ret: Value) {
        let load = value::map([
            ("cmd", value::s("_return")),
            ("id", value::s(self.id.clone())),
            ("jid", value::s(jid)),
            ("fun", value::s(fun)),
            ("fun_args", Value::Array(vec![])),
            ("return", ret),
            ("retcode", Value::from(0)),
            ("success", Value::from(true)),
        ]);
        self.call(tm, load);
    }
}

mod tests {
    use super::*;
    use crate::dispatch::{EXCEPTION_REPLY, TEST_PANIC_COMMAND};
    use halite_proto::value::{map, s};

    /// Collects what is logged.
    #[derive(Clone, Default)]
    struct Logs(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Logs {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn clear_body(load: Value) -> Vec<u8> {
        value::encode(&map([
            ("enc", s("clear")),
            ("load", load),
            ("version", Value::from(3)),
        ]))
    }

    #[test]
    fn a_request_whose_handler_panics_is_logged_answered_and_the_next_request_served() {
        let tm = TestMaster::new("");
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let (bad, good) = (PeerId(b"bad-peer".to_vec()), PeerId(b"next".to_vec()));
        let ping = map([("cmd", s("ping")), ("n", Value::from(1))]);
        tracing::subscriber::with_default(subscriber, || {
            // What a request worker does with each request, twice in a row.
            let panicking = clear_body(map([("cmd", s(TEST_PANIC_COMMAND))]));
            crate::serve_one(&tm.master, tm.wire.as_ref(), &bad, &panicking);
            crate::serve_one(
                &tm.master,
                tm.wire.as_ref(),
                &good,
                &clear_body(ping.clone()),
            );
        });
        let replies = tm.wire.replies.lock().unwrap().clone();
        assert_eq!(
            replies,
            [
                (bad, value::encode(&s(EXCEPTION_REPLY))),
                (good, value::encode(&ping)),
            ]
        );
        assert_eq!(tm.master.stats().request_panics(), 1);
        let logged = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
        let line = logged
            .lines()
            .find(|l| l.contains("Panic while handling"))
            .unwrap_or_else(|| panic!("no panic logged in:\n{logged}"));
        assert!(line.contains("ERROR"), "{line}");
        assert!(
            line.contains(&format!("the clear command {TEST_PANIC_COMMAND:?}")),
            "{line}"
        );
        assert!(line.contains("the test-only command panics"), "{line}");
        assert!(
            line.contains(&format!("{:?}", PeerId(b"bad-peer".to_vec()))),
            "{line}"
        );
        assert!(line.contains("panics=1"), "{line}");
    }
}
