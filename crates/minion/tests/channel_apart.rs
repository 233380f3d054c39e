//! Requests sent apart (`Channel::send_apart`, `MasterChannel::request_apart`) do not hold
//! up the minion's shared request socket, wait the usual timeout plus the hold, and report
//! timeouts as Salt's `SaltReqTimeoutError`.
//!
//! The master here is made of `halite_proto`'s master-side functions. It accepts the
//! sign-in, answers `quick` requests at once, holds `hold` requests for [`HELD`], and
//! never answers `never` requests.

use halite_config::MinionConfig;
use halite_exec::{ExecError, MasterChannel, SALT_REQ_TIMEOUT_ERROR};
use halite_minion::auth::Auth;
use halite_minion::channel::Channel;
use halite_minion::keys::MinionKeys;
use halite_minion::settings::Settings;
use halite_minion::shutdown::Shutdown;
use halite_minion::transport::ReqSocket;
use halite_proto::crypticle::{self, Crypticle};
use halite_proto::envelope::{
    accept_reply, aes_key_sig, open_aes_request, seal_reply, AcceptKeys, AuthRequest, Request,
};
use halite_proto::pem::clean_key;
use halite_proto::rsa::{PrivateKey, PublicKey};
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the master holds a `hold` request.
const HELD: Duration = Duration::from_secs(2);

/// The fake master's thread; stopped on drop.
struct HoldingMaster {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for HoldingMaster {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts the master on 127.0.0.1:`port`; `seen` gets the `cmd` of every request it reads.
fn start_master(port: u16, seen: mpsc::Sender<String>) -> HoldingMaster {
    let ctx = zmq::Context::new();
    let router = ctx.socket(zmq::ROUTER).unwrap();
    router.set_linger(0).unwrap();
    router.bind(&format!("tcp://127.0.0.1:{port}")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::spawn(move || {
        let _ctx = ctx;
        serve(&router, &flag, &seen);
    });
    HoldingMaster {
        stop,
        thread: Some(thread),
    }
}

fn serve(router: &zmq::Socket, stop: &AtomicBool, seen: &mpsc::Sender<String>) {
    let key = PrivateKey::generate(2048).unwrap();
    let pub_clean = clean_key(&key.public_key().unwrap().to_pem().unwrap());
    let aes = crypticle::generate_key_string();
    let session = Crypticle::generate();
    // Replies not yet due: (when, peer identity, body).
    let mut held: Vec<(Instant, Vec<u8>, Vec<u8>)> = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        for (_, peer, body) in held.iter().filter(|(due, _, _)| *due <= now) {
            router
                .send_multipart([peer.as_slice(), b"", body.as_slice()], 0)
                .unwrap();
        }
        held.retain(|(due, _, _)| *due > now);
        if router.poll(zmq::POLLIN, 20).unwrap() == 0 {
            continue;
        }
        let parts = router.recv_multipart(0).unwrap();
        let (Some(peer), Some(body)) = (parts.first(), parts.last()) else {
            continue;
        };
        let (reply, due) = match Request::parse(body, usize::MAX).unwrap() {
            Request::Clear { load, .. } => {
                let req = AuthRequest::parse(&load).unwrap();
                let minion_pub = PublicKey::from_pem(req.pub_pem.as_bytes()).unwrap();
                let reply = accept_reply(
                    &key,
                    &minion_pub,
                    &req,
                    &AcceptKeys {
                        master_pub: &pub_clean,
                        publish_port: 1,
                        aes: &aes,
                        session: session.key_string(),
                        aes_sig: &aes_key_sig(&key, &aes).unwrap(),
                    },
                )
                .unwrap();
                (reply, Some(now))
            }
            Request::Aes { id, blob, .. } => {
                let req = open_aes_request(&session, id, blob).unwrap();
                let cmd = value::get_str(&req.load, "cmd").unwrap_or("").to_owned();
                let _ = seen.send(cmd.clone());
                let reply =
                    seal_reply(&session, &s(format!("{cmd} done")), req.nonce.as_deref()).unwrap();
                let due = match cmd.as_str() {
                    "hold" => Some(now + HELD),
                    "never" => None,
                    _ => Some(now),
                };
                (reply, due)
            }
        };
        if let Some(due) = due {
            held.push((due, peer.clone(), value::encode(&reply)));
        }
    }
}

/// A signed-in channel as `halite-call` builds it, with one-second, one-try requests.
fn channel(dir: &std::path::Path, port: u16) -> Arc<Channel> {
    let text = format!(
        "id: apart1\nmaster: 127.0.0.1\nmaster_port: {port}\nroot_dir: {d}\npki_dir: {d}/pki\n\
         request_channel_timeout: 1\nrequest_channel_tries: 1\n",
        d = dir.display()
    );
    let cfg = MinionConfig::from_yaml_str(&text, &dir.join("minion")).unwrap();
    let settings = Arc::new(Settings::from_config(&cfg).unwrap());
    let keys = Arc::new(MinionKeys::load_or_create(&dir.join("pki"), 2048).unwrap());
    let ctx = zmq::Context::new();
    let uri = format!("tcp://127.0.0.1:{port}");
    let auth = Arc::new(Auth::new(
        settings.clone(),
        keys,
        &ctx,
        uri.clone(),
        &Value::Map(Vec::new()),
        true,
        Arc::new(Shutdown::new()),
    ));
    Arc::new(Channel::new(auth, ReqSocket::new(&ctx, uri, &settings)))
}

fn free_port() -> u16 {
    halite_testkit::free_ports(1)[0]
}

fn load(cmd: &str) -> Value {
    map([("cmd", s(cmd)), ("id", s("apart1"))])
}

#[test]
fn a_held_request_apart_does_not_hold_up_a_short_one_on_the_shared_socket() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (tx, seen) = mpsc::channel();
    let _master = start_master(port, tx);
    let channel = channel(dir.path(), port);

    let long = {
        let channel = channel.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            let reply = channel.request_apart(load("hold"), HELD, &|| false);
            (reply, start.elapsed())
        })
    };
    // The master has the held request before the short one is sent.
    let first = seen.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(first, "hold");

    let start = Instant::now();
    let reply = channel.send(&load("quick"), Duration::from_secs(10), 1);
    let quick = start.elapsed();
    assert_eq!(reply.unwrap(), s("quick done"));
    assert!(quick < HELD / 2, "the short request waited {quick:?}");
    assert!(!long.is_finished(), "the held request ended first");

    let (reply, took) = long.join().unwrap();
    assert_eq!(reply.unwrap(), s("hold done"));
    // Held past the one-second request timeout: the hold extends it.
    assert!(took >= HELD, "{took:?}");

    // The socket goes back to the spares and serves the next request apart.
    let reply = channel.request_apart(load("quick"), Duration::ZERO, &|| false);
    assert_eq!(reply.unwrap(), s("quick done"));
}

#[test]
fn an_unanswered_request_apart_is_a_salt_req_timeout_after_timeout_plus_hold() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (tx, _seen) = mpsc::channel();
    let _master = start_master(port, tx);
    let channel = channel(dir.path(), port);
    // Sign in first, so the timing below is the request's alone.
    assert_eq!(
        channel.request_apart(load("quick"), Duration::ZERO, &|| false),
        Ok(s("quick done"))
    );

    let start = Instant::now();
    let err = channel
        .request_apart(load("never"), Duration::from_millis(500), &|| false)
        .unwrap_err();
    let took = start.elapsed();
    assert_eq!(
        err,
        ExecError::Exception {
            kind: SALT_REQ_TIMEOUT_ERROR,
            message: "Message timed out".to_owned(),
        }
    );
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(10),
        "{took:?}"
    );

    // An abandoned request ends as soon as its caller gives up.
    let give_up = Instant::now() + Duration::from_millis(200);
    let start = Instant::now();
    let err = channel
        .request_apart(load("never"), Duration::from_secs(30), &|| {
            Instant::now() > give_up
        })
        .unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5), "{err}");
    assert!(
        matches!(&err, ExecError::Exception { kind, .. } if *kind != SALT_REQ_TIMEOUT_ERROR),
        "{err:?}"
    );
    assert_eq!(
        channel.master_uri().as_deref(),
        Some(format!("tcp://127.0.0.1:{port}").as_str())
    );
}
