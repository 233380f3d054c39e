//! Halite's publish engine against libzmq SUB sockets (the vendored libzmq, as Halite's
//! minion uses it; stock salt-minions are covered by the master's interop tests) and raw
//! ZMTP peers that misbehave.

use halite_transport::pubserver::{PubServer, PubServerConfig};
use halite_transport::zmtp::{self, SocketType};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(20);

fn server(hwm: usize, heartbeat_ivl: Option<Duration>, timeout: Duration) -> PubServer {
    PubServer::bind(PubServerConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        backlog: 100,
        hwm,
        heartbeat_ivl,
        heartbeat_timeout: timeout,
    })
    .unwrap()
}

fn plain_server() -> PubServer {
    server(1000, None, Duration::from_secs(30))
}

/// The heartbeat tests' interval: many PINGs in a short test.
const HB_IVL: Duration = Duration::from_millis(50);
/// The heartbeat tests' silence timeout: 20 intervals, so that a loaded machine's
/// scheduling delays (of either end) are not mistaken for a dead peer.
const HB_TIMEOUT: Duration = Duration::from_secs(1);

/// PINGs every [`HB_IVL`], silence for [`HB_TIMEOUT`] drops the peer.
fn heartbeat_server() -> PubServer {
    server(1000, Some(HB_IVL), HB_TIMEOUT)
}

fn sub(ctx: &zmq::Context, srv: &PubServer, topic: &[u8]) -> zmq::Socket {
    let s = ctx.socket(zmq::SUB).unwrap();
    s.set_rcvtimeo(100).unwrap();
    s.set_linger(0).unwrap();
    s.set_subscribe(topic).unwrap();
    s.connect(&format!("tcp://{}", srv.local_addr())).unwrap();
    s
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Publishes `probe` until every socket got one: then all subscriptions are in place
/// (a PUB drops what it sends before a subscription arrives, as libzmq's does).
fn sync_probe(srv: &PubServer, subs: &[&zmq::Socket], probe: &[u8]) {
    let mut got = vec![false; subs.len()];
    let deadline = Instant::now() + WAIT;
    while got.iter().any(|g| !g) {
        assert!(Instant::now() < deadline, "subscribers never got a probe");
        srv.publish(probe.to_vec()).unwrap();
        for (i, s) in subs.iter().enumerate() {
            while let Ok(m) = s.recv_bytes(zmq::DONTWAIT) {
                got[i] |= m == probe;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Next message that is not `probe`.
fn recv_skipping(s: &zmq::Socket, probe: &[u8]) -> Option<Vec<u8>> {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        match s.recv_bytes(0) {
            Ok(m) if m == probe => continue,
            Ok(m) => return Some(m),
            Err(_) => continue,
        }
    }
    None
}

/// A hand-driven ZMTP peer.
struct Raw {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    /// Connects and completes the handshake as `kind`, announcing ZMTP 3.`minor`.
    fn handshaken(srv: &PubServer, kind: SocketType, minor: u8) -> Raw {
        let mut raw = Raw::connect(srv);
        let mut g = zmtp::greeting();
        g[11] = minor;
        raw.stream.write_all(&g).unwrap();
        let mut theirs = [0u8; zmtp::GREETING_LEN];
        raw.stream.read_exact(&mut theirs).unwrap();
        zmtp::check_greeting(&theirs).unwrap();
        raw.send(&zmtp::ready_body(kind, b""), true);
        let ready = raw.frame().expect("READY from the server");
        assert!(ready.0, "READY is a command");
        zmtp::check_ready(SocketType::Sub, &ready.1).unwrap();
        raw
    }

    fn connect(srv: &PubServer) -> Raw {
        let stream = TcpStream::connect(srv.local_addr()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        Raw {
            stream,
            buf: Vec::new(),
        }
    }

    fn send(&mut self, body: &[u8], command: bool) {
        let mut out = Vec::new();
        zmtp::encode_frame(&mut out, body, false, command);
        self.stream.write_all(&out).unwrap();
    }

    /// The next frame `(command, body)`, or `None` when the server closed the connection
    /// or nothing came within [`WAIT`].
    fn frame(&mut self) -> Option<(bool, Vec<u8>)> {
        self.frame_within(WAIT)
    }

    fn frame_within(&mut self, wait: Duration) -> Option<(bool, Vec<u8>)> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some((f, used)) = zmtp::parse_frame(&self.buf, 1 << 20).unwrap() {
                let out = (f.command, f.body.to_vec());
                self.buf.drain(..used);
                return Some(out);
            }
            if Instant::now() > deadline {
                return None;
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => return None,
            }
        }
    }

    /// Whether the server closed the connection (reads return EOF or reset) within [`WAIT`].
    fn closed_by_server(&mut self) -> bool {
        let deadline = Instant::now() + WAIT;
        let mut chunk = [0u8; 4096];
        while Instant::now() < deadline {
            match self.stream.read(&mut chunk) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return true,
            }
        }
        false
    }
}

#[test]
fn libzmq_subscribers_get_every_publish_in_order() {
    let srv = plain_server();
    let ctx = zmq::Context::new();
    let subs: Vec<zmq::Socket> = (0..3).map(|_| sub(&ctx, &srv, b"")).collect();
    wait_for("3 subscribers", || srv.subscribers() == 3);
    sync_probe(&srv, &subs.iter().collect::<Vec<_>>(), b"probe");
    // Short and long frames, a large one included.
    let bodies: Vec<Vec<u8>> = (0..200)
        .map(|i: usize| {
            let mut b = format!("m{i}-").into_bytes();
            b.resize(
                b.len() + (i * 37) % 700 + if i == 7 { 3 << 20 } else { 0 },
                b'x',
            );
            b
        })
        .collect();
    for b in &bodies {
        srv.publish(b.clone()).unwrap();
    }
    for s in &subs {
        for b in &bodies {
            assert_eq!(recv_skipping(s, b"probe").as_ref(), Some(b));
        }
    }
}

#[test]
fn prefix_subscriptions_filter_publishes_and_cancel_stops_them() {
    let srv = plain_server();
    let ctx = zmq::Context::new();
    let all = sub(&ctx, &srv, b"");
    let a = sub(&ctx, &srv, b"a");
    wait_for("2 subscribers", || srv.subscribers() == 2);
    sync_probe(&srv, &[&a, &all], b"a-probe");
    for m in [&b"xyz"[..], b"abc", b"a", b"ba"] {
        srv.publish(m.to_vec()).unwrap();
    }
    let mut got_a = Vec::new();
    for _ in 0..2 {
        got_a.push(recv_skipping(&a, b"a-probe").unwrap());
    }
    assert_eq!(got_a, [b"abc".to_vec(), b"a".to_vec()]);
    let mut got_all = Vec::new();
    for _ in 0..4 {
        got_all.push(recv_skipping(&all, b"a-probe").unwrap());
    }
    assert_eq!(got_all, [&b"xyz"[..], b"abc", b"a", b"ba"]);

    // Cancelling: nothing more for `a`, while `all` still gets everything.
    a.set_unsubscribe(b"a").unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        srv.publish(b"after".to_vec()).unwrap();
        srv.publish(b"a-marker".to_vec()).unwrap();
        assert_eq!(recv_skipping(&all, b"a-probe").unwrap(), b"after");
        assert_eq!(recv_skipping(&all, b"a-probe").unwrap(), b"a-marker");
        // Until the cancel arrives `a` may still get markers; then none.
        let mut late = 0;
        while a.recv_bytes(zmq::DONTWAIT).is_ok() {
            late += 1;
        }
        if late == 0 {
            std::thread::sleep(Duration::from_millis(200));
            if a.recv_bytes(zmq::DONTWAIT).is_err() {
                break;
            }
        }
        assert!(Instant::now() < deadline, "unsubscribe never took effect");
    }
}

#[test]
fn zmtp_3_1_subscribe_commands_and_pings_are_understood() {
    let srv = plain_server();
    let mut raw = Raw::handshaken(&srv, SocketType::Sub, 1);
    raw.send(&zmtp::command_body("SUBSCRIBE", b"t"), true);
    raw.send(&zmtp::command_body("PING", b"\0\0ctx"), true);
    assert_eq!(
        raw.frame(),
        Some((true, zmtp::command_body("PONG", b"ctx"))),
        "PING answered with PONG and its context"
    );
    // The subscription was read before the PING (same order on the wire).
    srv.publish(b"other".to_vec()).unwrap();
    srv.publish(b"topic".to_vec()).unwrap();
    assert_eq!(raw.frame(), Some((false, b"topic".to_vec())));
}

#[test]
fn heartbeats_go_out_and_silent_peers_are_dropped() {
    let srv = heartbeat_server();
    // Before our handshake: the server cannot have heard from us earlier than this.
    let started = Instant::now();
    let mut raw = Raw::handshaken(&srv, SocketType::Sub, 0);
    // Never answering: PINGs keep coming until the server gives up and closes.
    let mut pings = 0;
    // A server that never drops the peer would PING forever: give up well after the
    // timeout (generously, for a loaded machine) and fail instead of hanging.
    let give_up = started + 20 * HB_TIMEOUT + Duration::from_secs(10);
    while let Some(frame) = raw.frame() {
        assert_eq!(frame, (true, zmtp::command_body("PING", b"\0\0")));
        pings += 1;
        if pings == 1 {
            assert_eq!(srv.subscribers(), 1);
        }
        assert!(
            Instant::now() < give_up,
            "silent peer never dropped: {pings} PINGs in {:?}",
            started.elapsed()
        );
    }
    let lived = started.elapsed();
    assert!(raw.closed_by_server(), "silent peer never dropped");
    println!("MEASURED silent peer dropped after {lived:?} and {pings} PINGs");
    assert!(
        pings >= 2,
        "heartbeats repeat until the drop; got {pings} PING"
    );
    assert!(
        lived >= HB_TIMEOUT,
        "dropped after {lived:?}, before {HB_TIMEOUT:?} of silence"
    );
    wait_for("the registry to forget it", || srv.subscribers() == 0);
}

#[test]
fn libzmq_subscriber_with_heartbeats_stays_connected() {
    let srv = heartbeat_server();
    let ctx = zmq::Context::new();
    let s = ctx.socket(zmq::SUB).unwrap();
    s.set_rcvtimeo(100).unwrap();
    s.set_heartbeat_ivl(HB_IVL.as_millis() as i32).unwrap();
    s.set_heartbeat_timeout(HB_TIMEOUT.as_millis() as i32)
        .unwrap();
    s.set_subscribe(b"").unwrap();
    s.monitor(
        "inproc://hb-mon",
        zmq::SocketEvent::DISCONNECTED as i32 | zmq::SocketEvent::CONNECTED as i32,
    )
    .unwrap();
    let mon = ctx.socket(zmq::PAIR).unwrap();
    mon.connect("inproc://hb-mon").unwrap();
    s.connect(&format!("tcp://{}", srv.local_addr())).unwrap();
    sync_probe(&srv, &[&s], b"probe");
    // Three timeouts' worth of heartbeats both ways: a server that stopped counting the
    // subscriber's PONGs and PINGs as signs of life would have dropped it by now.
    std::thread::sleep(3 * HB_TIMEOUT);
    srv.publish(b"still here".to_vec()).unwrap();
    assert_eq!(recv_skipping(&s, b"probe").unwrap(), b"still here");
    let mut events = Vec::new();
    while let Ok(parts) = mon.recv_multipart(zmq::DONTWAIT) {
        events.push(u16::from_le_bytes([parts[0][0], parts[0][1]]));
    }
    let disconnects = events
        .iter()
        .filter(|e| i32::from(**e) == zmq::SocketEvent::DISCONNECTED as i32)
        .count();
    assert_eq!(disconnects, 0, "monitor events {events:?}");
    assert_eq!(srv.subscribers(), 1);
}

/// A minion judges its master by its heartbeats (`master_alive_interval`): a master's
/// publish port answers them even when it sends none of its own (the default).
#[test]
fn a_server_without_heartbeats_answers_a_subscribers_pings() {
    let srv = plain_server();
    let ctx = zmq::Context::new();
    let s = ctx.socket(zmq::SUB).unwrap();
    s.set_rcvtimeo(100).unwrap();
    s.set_heartbeat_ivl(HB_IVL.as_millis() as i32).unwrap();
    s.set_heartbeat_timeout(HB_TIMEOUT.as_millis() as i32)
        .unwrap();
    s.set_subscribe(b"").unwrap();
    s.monitor(
        "inproc://hb-plain-mon",
        zmq::SocketEvent::DISCONNECTED as i32,
    )
    .unwrap();
    let mon = ctx.socket(zmq::PAIR).unwrap();
    mon.connect("inproc://hb-plain-mon").unwrap();
    s.connect(&format!("tcp://{}", srv.local_addr())).unwrap();
    sync_probe(&srv, &[&s], b"probe");
    // Three heartbeat timeouts long, with nothing published meanwhile.
    std::thread::sleep(3 * HB_TIMEOUT);
    assert!(
        mon.recv_multipart(zmq::DONTWAIT).is_err(),
        "the subscriber's heartbeat timed out"
    );
    srv.publish(b"still here".to_vec()).unwrap();
    assert_eq!(recv_skipping(&s, b"probe").unwrap(), b"still here");
    assert_eq!(srv.subscribers(), 1);
}

#[test]
fn garbage_and_wrong_peers_are_dropped_while_subscribers_keep_receiving() {
    let srv = plain_server();
    let ctx = zmq::Context::new();
    let good = sub(&ctx, &srv, b"");
    wait_for("the subscriber", || srv.subscribers() == 1);
    sync_probe(&srv, &[&good], b"probe");

    let mut http = Raw::connect(&srv);
    http.stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".repeat(3).as_slice())
        .unwrap();
    assert!(http.closed_by_server(), "HTTP peer kept");

    let mut req = Raw::connect(&srv);
    req.stream.write_all(&zmtp::greeting()).unwrap();
    let mut g = [0u8; zmtp::GREETING_LEN];
    req.stream.read_exact(&mut g).unwrap();
    req.send(&zmtp::ready_body(SocketType::Req, b"id"), true);
    let _server_ready = req.frame();
    let error = req.frame().expect("an ERROR command");
    assert!(error.0 && error.1.starts_with(b"\x05ERROR"), "{error:?}");
    assert!(req.closed_by_server(), "REQ peer kept");

    let mut huge = Raw::handshaken(&srv, SocketType::Sub, 0);
    let mut header = vec![0x02];
    header.extend_from_slice(&(1u64 << 40).to_be_bytes());
    huge.stream.write_all(&header).unwrap();
    assert!(huge.closed_by_server(), "oversized frame accepted");

    // Subscribing without end (256 subscriptions are allowed), in one write so that the
    // server's close cannot fail the test's own writes.
    let mut greedy = Raw::handshaken(&srv, SocketType::Sub, 0);
    let mut subs = Vec::new();
    for i in 0..300u32 {
        let mut sub = vec![1u8];
        sub.extend_from_slice(&i.to_be_bytes());
        zmtp::encode_frame(&mut subs, &sub, false, false);
    }
    greedy.stream.write_all(&subs).unwrap();
    assert!(
        greedy.closed_by_server(),
        "unbounded subscriptions accepted"
    );

    let mut flags = Raw::handshaken(&srv, SocketType::Sub, 0);
    flags.stream.write_all(&[0xf0, 1, 1]).unwrap();
    assert!(flags.closed_by_server(), "invalid flags accepted");

    wait_for("only the good subscriber", || srv.subscribers() == 1);
    srv.publish(b"after the garbage".to_vec()).unwrap();
    assert_eq!(
        recv_skipping(&good, b"probe").unwrap(),
        b"after the garbage"
    );
}

#[test]
fn a_subscriber_that_stops_reading_loses_publishes_past_hwm_and_holds_back_nobody() {
    const HWM: usize = 4;
    const COUNT: usize = 256;
    let srv = server(HWM, None, Duration::from_secs(30));
    let ctx = zmq::Context::new();
    let fast = sub(&ctx, &srv, b"");
    let mut stuck = Raw::handshaken(&srv, SocketType::Sub, 0);
    stuck.send(b"\x01", false);
    wait_for("2 subscribers", || srv.subscribers() == 2);
    sync_probe(&srv, &[&fast], b"probe");
    // 64 MiB in all, far more than the stuck peer's socket buffers and queue hold. Each
    // publish waits for the fast subscriber, so only the stuck one can fall behind.
    let body = vec![b'p'; 256 * 1024];
    for _ in 0..COUNT {
        srv.publish(body.clone()).unwrap();
        assert_eq!(
            recv_skipping(&fast, b"probe").map(|m| m.len()),
            Some(body.len())
        );
    }
    assert_eq!(srv.subscribers(), 2, "the stuck peer is kept");
    // What the stuck peer finds when it reads at last: whole frames, fewer than were sent.
    let mut late = 0;
    while let Some((command, frame)) = stuck.frame_within(Duration::from_secs(2)) {
        if frame == b"probe" {
            continue;
        }
        assert!(!command && frame.len() == body.len());
        late += 1;
    }
    assert!(
        late < COUNT,
        "nothing was dropped for the stuck peer ({late})"
    );
}

#[test]
fn shutdown_closes_connections_and_later_publishes_fail() {
    let srv = plain_server();
    let mut raw = Raw::handshaken(&srv, SocketType::Sub, 0);
    srv.shutdown();
    assert!(raw.closed_by_server());
    assert!(srv.publish(b"late".to_vec()).is_err());
}
