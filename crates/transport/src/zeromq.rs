//! The master's server transport: libzmq's ROUTER on `ret_port`, Halite's own ZMTP PUB
//! engine ([`crate::pubserver`]) on `publish_port`.
//!
//! One thread owns the ROUTER plus an `inproc` PULL socket that carries replies from tokio
//! tasks (ZeroMQ sockets are not thread-safe; the inproc PUSH side is guarded by a mutex and
//! never blocks). Incoming requests go to the workers over a channel bounded twice: at most
//! [`INCOMING_CAPACITY`] requests and at most [`ZmqServerConfig::incoming_bytes`] bytes of
//! bodies, counted from the moment a request is read until the worker drops it. When
//! either bound is reached the thread stops reading the ROUTER (one request read before it
//! noticed waits with it), libzmq queues behind it (up to its HWM per peer) and minions see
//! back-pressure instead of the master growing without bound. Replies are never held back
//! by reads: each turn of the loop sends every reply the workers have handed in, then reads
//! at most [`READ_BATCH`] requests. Publishes go straight to the publish server's thread.
//!
//! `maxmsgsize` on the ROUTER is [`ZmqServerConfig::max_msg_size`]: libzmq drops the
//! connection of a peer announcing a larger frame before allocating anything for it (the
//! peer's REQ socket then times out; no reply can be sent to it).
//!
//! Socket options follow Salt (`salt/transport/zeromq.py`): ROUTER_HANDOVER, TCP keepalive
//! 60/15/3 on the ROUTER and idle 300 on the PUB, backlog `zmq_backlog`, `pub_hwm` on the
//! PUB, one frame per publish (no topic filtering), ZMTP heartbeats `zmq_heartbeat_ivl` /
//! `zmq_heartbeat_timeout` (10 s / 30 s) on the PUB.
//!
//! Deviation: Salt 3008.3 also turns ZMTP heartbeats on on the ROUTER by default; Halite
//! does only when `zmq_heartbeat_ivl` is set. libzmq keeps each I/O thread's timers in one
//! multimap and cancels a heartbeat timer with a linear scan on every PONG, so with N
//! connections the cost grows as N²: at 10,000 minions it took ~70 % of a core continuously
//! (BENCHMARKS.md). TCP keepalive still detects dead peers there. The publish engine's
//! heartbeats are tokio timers, O(1) each.

use crate::pubserver::{PubServer, PubServerConfig};
use crate::{Body, Error, Incoming, PeerId, ServerTransport};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::mpsc::{self, error::TrySendError};

/// Capacity of the incoming-request channel, in requests. When full (or when the byte
/// budget is used up), the socket thread stops reading (requests queue inside libzmq) —
/// back-pressure, nothing is dropped.
pub const INCOMING_CAPACITY: usize = 4096;

/// Requests read from the ROUTER in one turn of the socket loop before replies are sent
/// again.
pub const READ_BATCH: usize = 64;

/// Default [`ZmqServerConfig::max_msg_size`]: 64 MiB, the master's default
/// `max_request_size`.
pub const DEFAULT_MAX_MSG_SIZE: i64 = 64 << 20;

/// How long the socket thread waits before it looks again at a full queue (it also wakes
/// for every reply).
const FULL_RECHECK_MS: i64 = 5;

/// Salt's `zmq_heartbeat_ivl` default (ms), used on the publish port when none is set.
const SALT_HEARTBEAT_IVL_MS: i32 = 10_000;

const CMD_REPLY: &[u8] = b"R";
const CMD_STOP: &[u8] = b"S";

/// Where and how to bind.
#[derive(Debug, Clone)]
pub struct ZmqServerConfig {
    /// `interface` (an IP address; `0.0.0.0` or `::`).
    pub interface: String,
    /// `ipv6`: allow IPv6 on the sockets.
    pub ipv6: bool,
    /// `ret_port`.
    pub ret_port: u16,
    /// `publish_port`.
    pub publish_port: u16,
    /// `pub_hwm` (Salt default 1000).
    pub pub_hwm: i32,
    /// `zmq_backlog` (Salt default 1000).
    pub backlog: i32,
    /// `zmq_heartbeat_ivl` in ms as configured (0 turns heartbeats off). When not set, the
    /// publish port uses Salt's 10000 and the request port has none (module documentation).
    pub heartbeat_ivl_ms: Option<i32>,
    /// `zmq_heartbeat_timeout` in ms (Salt default 30000).
    pub heartbeat_timeout_ms: i32,
    /// Hard cap on one incoming message (libzmq's `maxmsgsize`); libzmq disconnects a peer
    /// that sends more. [`DEFAULT_MAX_MSG_SIZE`] unless set (the master sets its
    /// `max_request_size`).
    pub max_msg_size: i64,
    /// Bytes of request bodies read but not yet dropped by a worker; `None`: as much as
    /// [`max_msg_size`](Self::max_msg_size). A body larger than the whole budget is taken
    /// when nothing else holds any of it.
    pub incoming_bytes: Option<usize>,
}

impl ZmqServerConfig {
    /// Salt's defaults for the given addresses.
    pub fn new(interface: &str, ipv6: bool, ret_port: u16, publish_port: u16) -> Self {
        Self {
            interface: interface.to_owned(),
            ipv6,
            ret_port,
            publish_port,
            pub_hwm: 1000,
            backlog: 1000,
            heartbeat_ivl_ms: None,
            heartbeat_timeout_ms: 30_000,
            max_msg_size: DEFAULT_MAX_MSG_SIZE,
            incoming_bytes: None,
        }
    }

    fn endpoint(&self, port: u16) -> String {
        if self.interface.contains(':') {
            format!("tcp://[{}]:{port}", self.interface)
        } else {
            format!("tcp://{}:{port}", self.interface)
        }
    }
}

/// The running ZeroMQ server transport.
pub struct ZmqServer {
    ctx: zmq::Context,
    publisher: PubServer,
    cmd: Mutex<zmq::Socket>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl ZmqServer {
    /// Binds both sockets and starts the socket thread. Returns the transport and the
    /// receiver of incoming requests. Binding errors (port in use) are returned here.
    pub fn bind(cfg: &ZmqServerConfig) -> Result<(Self, mpsc::Receiver<Incoming>), Error> {
        let ctx = zmq::Context::new();
        let router = ctx
            .socket(zmq::ROUTER)
            .map_err(Error::zmq("create ROUTER"))?;
        let pull = ctx.socket(zmq::PULL).map_err(Error::zmq("create PULL"))?;
        let inproc = format!("inproc://halite-cmd-{:p}", &router as *const _);

        router
            .set_linger(1000)
            .map_err(Error::zmq("ROUTER linger"))?;
        router
            .set_router_handover(true)
            .map_err(Error::zmq("ROUTER handover"))?;
        router
            .set_tcp_keepalive(1)
            .map_err(Error::zmq("keepalive"))?;
        router
            .set_tcp_keepalive_idle(60)
            .map_err(Error::zmq("keepalive idle"))?;
        router
            .set_tcp_keepalive_intvl(15)
            .map_err(Error::zmq("keepalive intvl"))?;
        router
            .set_tcp_keepalive_cnt(3)
            .map_err(Error::zmq("keepalive cnt"))?;
        router
            .set_backlog(cfg.backlog)
            .map_err(Error::zmq("backlog"))?;
        router
            .set_maxmsgsize(cfg.max_msg_size)
            .map_err(Error::zmq("maxmsgsize"))?;
        router.set_ipv6(cfg.ipv6).map_err(Error::zmq("ipv6"))?;
        router
            .set_heartbeat_ivl(cfg.heartbeat_ivl_ms.unwrap_or(0))
            .map_err(Error::zmq("heartbeat"))?;
        router
            .set_heartbeat_timeout(cfg.heartbeat_timeout_ms)
            .map_err(Error::zmq("heartbeat"))?;

        let ret_ep = cfg.endpoint(cfg.ret_port);
        router
            .bind(&ret_ep)
            .map_err(Error::zmq(format!("bind {ret_ep}")))?;
        let publisher = PubServer::bind(PubServerConfig {
            addr: PubServerConfig::resolve(&cfg.interface, cfg.ipv6, cfg.publish_port)?,
            backlog: u32::try_from(cfg.backlog).unwrap_or(0),
            hwm: usize::try_from(cfg.pub_hwm).unwrap_or(0),
            heartbeat_ivl: Some(cfg.heartbeat_ivl_ms.unwrap_or(SALT_HEARTBEAT_IVL_MS))
                .filter(|ms| *ms > 0)
                .map(|ms| Duration::from_millis(ms.unsigned_abs().into())),
            heartbeat_timeout: Duration::from_millis(
                cfg.heartbeat_timeout_ms.max(0).unsigned_abs().into(),
            ),
        })?;
        pull.bind(&inproc).map_err(Error::zmq("bind inproc"))?;
        let push = ctx.socket(zmq::PUSH).map_err(Error::zmq("create PUSH"))?;
        push.set_sndhwm(0).map_err(Error::zmq("PUSH hwm"))?;
        push.connect(&inproc)
            .map_err(Error::zmq("connect inproc"))?;

        // Handshake failures (garbage on a port) are only visible through socket monitors.
        let failures = (zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL as i32)
            | (zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL as i32);
        let tag = format!("{:p}", &router as *const _);
        let ep = format!("inproc://halite-mon-request-{tag}");
        router
            .monitor(&ep, failures)
            .map_err(Error::zmq("monitor"))?;
        let monitor = ctx
            .socket(zmq::PAIR)
            .map_err(Error::zmq("create monitor"))?;
        monitor
            .connect(&ep)
            .map_err(Error::zmq("connect monitor"))?;

        let (tx, rx) = mpsc::channel(INCOMING_CAPACITY);
        let budget = ByteBudget::new(
            cfg.incoming_bytes
                .unwrap_or_else(|| usize::try_from(cfg.max_msg_size.max(0)).unwrap_or(usize::MAX)),
        );
        let thread = std::thread::Builder::new()
            .name("zmq-server".into())
            .spawn(move || {
                SocketLoop {
                    router,
                    pull,
                    monitor,
                    tx,
                    budget,
                    waiting: None,
                }
                .run()
            })
            .map_err(|e| Error::Zmq {
                op: format!("spawn thread: {e}"),
                source: zmq::Error::EFAULT,
            })?;
        tracing::info!(ret = %ret_ep, publish = %publisher.local_addr(), "Request and publish sockets bound");
        Ok((
            Self {
                ctx,
                publisher,
                cmd: Mutex::new(push),
                thread: Mutex::new(Some(thread)),
            },
            rx,
        ))
    }

    fn send_cmd(&self, parts: &[&[u8]]) -> Result<(), Error> {
        let sock = self.cmd.lock().map_err(|_| Error::Closed)?;
        sock.send_multipart(parts, zmq::DONTWAIT)
            .map_err(|_| Error::Closed)
    }

    /// Stops the request port: the socket thread ends and closes the ROUTER (its peers'
    /// connections close, so their requests fail at once), and the incoming channel
    /// closes once the requests already in it are taken. Replies fail from now on;
    /// publishes still go out. Idempotent.
    pub fn stop_requests(&self) {
        let _ = self.send_cmd(&[CMD_STOP]);
        let handle = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(h) = handle {
            let _ = h.join();
        }
    }

    /// Stops the request port ([`ZmqServer::stop_requests`]), then the publisher, and
    /// closes the sockets. Idempotent.
    pub fn shutdown(&self) {
        self.stop_requests();
        self.publisher.shutdown();
    }
}

impl Drop for ZmqServer {
    fn drop(&mut self) {
        self.shutdown();
        // The context is dropped after the sockets (field order: ctx first is fine because
        // zmq::Context::drop waits only for sockets still open; all are closed by now).
        let _ = &self.ctx;
    }
}

impl ServerTransport for ZmqServer {
    fn reply(&self, peer: PeerId, body: Vec<u8>) -> Result<(), Error> {
        self.send_cmd(&[CMD_REPLY, &peer.0, &body])
    }

    fn publish(&self, frame: Vec<u8>) -> Result<(), Error> {
        self.publisher.publish(frame)
    }

    fn publish_peers(&self) -> Vec<std::net::IpAddr> {
        self.publisher.subscriber_addrs()
    }
}

/// Logs one socket-monitor event: `[u16 event, u32 value]` then the endpoint.
fn log_monitor_event(mon: &zmq::Socket, port: &str) {
    while let Ok(parts) = mon.recv_multipart(zmq::DONTWAIT) {
        let event = parts
            .first()
            .and_then(|f| f.get(..2))
            .map(|b| u16::from_le_bytes([b[0], b[1]]));
        let endpoint = parts
            .get(1)
            .map(|e| String::from_utf8_lossy(e).into_owned())
            .unwrap_or_default();
        match event {
            Some(e) if i32::from(e) == zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL as i32 => tracing::warn!(
                "ZMTP handshake with a peer on the {port} port {endpoint} failed (protocol error); connection dropped"
            ),
            // A peer that connects and leaves without a greeting (port probes, health checks).
            _ => tracing::debug!("A peer on the {port} port {endpoint} left before the ZMTP handshake"),
        }
    }
}

/// The byte budget of requests between the socket thread and the workers: taken when a
/// request is read, given back when its [`Incoming`] is dropped. Lock-free.
#[derive(Debug)]
struct ByteBudget {
    total: usize,
    free: AtomicUsize,
}

impl ByteBudget {
    fn new(total: usize) -> Arc<Self> {
        Arc::new(ByteBudget {
            total,
            free: AtomicUsize::new(total),
        })
    }

    /// `n` bytes (at most the whole budget), when that much is free.
    fn try_take(self: &Arc<Self>, n: usize) -> Option<BytesPermit> {
        let n = n.min(self.total);
        self.free
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |free| {
                free.checked_sub(n)
            })
            .ok()?;
        Some(BytesPermit {
            budget: self.clone(),
            n,
        })
    }
}

/// A request's share of the [`ByteBudget`], given back on drop.
#[derive(Debug)]
pub(crate) struct BytesPermit {
    budget: Arc<ByteBudget>,
    n: usize,
}

impl Drop for BytesPermit {
    fn drop(&mut self) {
        self.budget.free.fetch_add(self.n, Ordering::AcqRel);
    }
}

/// Why one read from the ROUTER gave no request.
enum Skipped {
    /// Nothing waiting.
    Empty,
    /// A message that is not `[id, "", body]` (or `[id, body]`), already consumed.
    Layout(&'static str),
}

/// The socket thread's state.
struct SocketLoop {
    router: zmq::Socket,
    pull: zmq::Socket,
    monitor: zmq::Socket,
    tx: mpsc::Sender<Incoming>,
    budget: Arc<ByteBudget>,
    /// A request read while the queue was full; no more are read until it is queued.
    waiting: Option<(PeerId, Body)>,
}

impl SocketLoop {
    fn run(mut self) {
        loop {
            if !self.flush_waiting() {
                return;
            }
            let reading = self.waiting.is_none();
            let (router_ready, cmd_ready) = {
                let mut items = [
                    self.pull.as_poll_item(zmq::POLLIN),
                    self.monitor.as_poll_item(zmq::POLLIN),
                    self.router.as_poll_item(zmq::POLLIN),
                ];
                // A full queue is looked at again every few ms; replies wake the loop at once.
                let (items, timeout) = if reading {
                    (&mut items[..], -1)
                } else {
                    (&mut items[..2], FULL_RECHECK_MS)
                };
                if let Err(e) = zmq::poll(items, timeout) {
                    if e == zmq::Error::EINTR {
                        continue;
                    }
                    tracing::error!(error = %e, "ZeroMQ poll failed; stopping the socket thread");
                    return;
                }
                if items[1].is_readable() {
                    log_monitor_event(&self.monitor, "request");
                }
                (
                    items.get(2).is_some_and(|i| i.is_readable()),
                    items[0].is_readable(),
                )
            };
            if cmd_ready && !self.send_replies() {
                return;
            }
            if router_ready && !self.read_requests() {
                return;
            }
        }
    }

    /// Sends every reply handed in so far; `false` on the stop command.
    fn send_replies(&self) -> bool {
        while let Ok(parts) = self.pull.recv_multipart(zmq::DONTWAIT) {
            match parts.first().map(Vec::as_slice) {
                Some(CMD_REPLY) if parts.len() == 3 => {
                    let msg: [&[u8]; 3] = [&parts[1], b"", &parts[2]];
                    if let Err(e) = self.router.send_multipart(msg, zmq::DONTWAIT) {
                        tracing::debug!(error = %e, "Reply to a disconnected peer dropped");
                    }
                }
                Some(CMD_STOP) => return false,
                _ => tracing::error!("Malformed internal transport command ignored"),
            }
        }
        true
    }

    /// Reads up to [`READ_BATCH`] requests and queues them, stopping early when the queue
    /// is full; `false` when the workers are gone.
    fn read_requests(&mut self) -> bool {
        for _ in 0..READ_BATCH {
            match recv_request(&self.router) {
                Ok(req) => {
                    self.waiting = Some(req);
                    if !self.flush_waiting() {
                        return false;
                    }
                    if self.waiting.is_some() {
                        break;
                    }
                }
                Err(Skipped::Empty) => break,
                Err(Skipped::Layout(what)) => tracing::warn!("{what}"),
            }
        }
        true
    }

    /// Queues the waiting request if there is room for it; `false` when the workers are
    /// gone.
    fn flush_waiting(&mut self) -> bool {
        let Some((peer, body)) = self.waiting.take() else {
            return true;
        };
        let Some(permit) = self.budget.try_take(body.len()) else {
            self.waiting = Some((peer, body));
            return true;
        };
        match self.tx.try_send(Incoming {
            peer,
            body,
            _bytes: permit,
        }) {
            Ok(()) => true,
            Err(TrySendError::Full(inc)) => {
                self.waiting = Some((inc.peer, inc.body));
                true
            }
            Err(TrySendError::Closed(_)) => false,
        }
    }
}

/// Reads one request: REQ peers send `[id, "", body]`; `[id, body]` is taken too.
fn recv_request(router: &zmq::Socket) -> Result<(PeerId, Body), Skipped> {
    let more = || router.get_rcvmore().unwrap_or(false);
    let id = router.recv_msg(zmq::DONTWAIT).map_err(|_| Skipped::Empty)?;
    if !more() {
        return Err(Skipped::Layout(
            "Request with no body on the request port dropped",
        ));
    }
    let layout = || {
        // Consume the rest of the message.
        while more() {
            if router.recv_msg(zmq::DONTWAIT).is_err() {
                break;
            }
        }
        Skipped::Layout("Request with an unexpected frame layout on the request port dropped")
    };
    let second = router.recv_msg(zmq::DONTWAIT).map_err(|_| layout())?;
    let body = if more() {
        let body = router.recv_msg(zmq::DONTWAIT).map_err(|_| layout())?;
        if !second.is_empty() || more() {
            return Err(layout());
        }
        body
    } else {
        second
    };
    Ok((PeerId(id.to_vec()), Body::from_message(body)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::request;
    use crate::BodyRepr;
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;

    /// Long enough for a loaded 2-core machine; only a failing test waits this long.
    const PATIENCE: Duration = Duration::from_secs(30);

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    fn bind(
        cfg: impl FnOnce(&mut ZmqServerConfig),
    ) -> (Arc<ZmqServer>, mpsc::Receiver<Incoming>, String) {
        let ret = free_port();
        let mut c = ZmqServerConfig::new("127.0.0.1", false, ret, free_port());
        cfg(&mut c);
        let (server, rx) = ZmqServer::bind(&c).unwrap();
        (Arc::new(server), rx, format!("tcp://127.0.0.1:{ret}"))
    }

    /// The next request within `wait`, if any.
    fn next(rx: &mut mpsc::Receiver<Incoming>, wait: Duration) -> Option<Incoming> {
        let deadline = Instant::now() + wait;
        loop {
            if let Ok(inc) = rx.try_recv() {
                return Some(inc);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Sends `body` from a new REQ socket on its own thread; the reply comes on the handle.
    fn send(
        endpoint: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> std::thread::JoinHandle<Result<Vec<u8>, Error>> {
        let endpoint = endpoint.to_owned();
        std::thread::spawn(move || request(&zmq::Context::new(), &endpoint, &body, timeout))
    }

    #[test]
    fn the_byte_budget_is_taken_per_request_and_given_back_on_drop() {
        let budget = ByteBudget::new(100);
        let first = budget.try_take(60).unwrap();
        assert!(budget.try_take(50).is_none());
        let second = budget.try_take(40).unwrap();
        drop(first);
        assert!(budget.try_take(60).is_some());
        drop(second);
        // A body larger than the whole budget takes all of it, when all of it is free.
        let whole = budget.try_take(1_000).unwrap();
        assert_eq!(whole.n, 100);
        assert!(budget.try_take(0).is_some());
        assert!(budget.try_take(1).is_none());
        drop(whole);
        assert_eq!(budget.free.load(Ordering::Acquire), 100);
    }

    #[test]
    fn a_request_waits_in_libzmq_while_the_byte_budget_is_used_up() {
        let (server, mut rx, ep) = bind(|c| c.incoming_bytes = Some(1 << 20));
        let clients: Vec<_> = (1..=3u8)
            .map(|i| send(&ep, vec![i; 600 << 10], PATIENCE))
            .collect();
        let mut seen = Vec::new();
        for _ in 0..3 {
            let inc = next(&mut rx, PATIENCE).expect("a request once there is room for it");
            // While it holds 600 KiB of the 1 MiB budget, no other request is queued.
            assert!(
                next(&mut rx, Duration::from_millis(300)).is_none(),
                "a second 600 KiB request was queued beside the first"
            );
            let tag = inc.body.first().copied().unwrap();
            seen.push(tag);
            server.reply(inc.peer.clone(), vec![tag]).unwrap();
        }
        seen.sort_unstable();
        assert_eq!(seen, [1, 2, 3]);
        for (i, c) in clients.into_iter().enumerate() {
            assert_eq!(c.join().unwrap().unwrap(), [i as u8 + 1]);
        }
    }

    #[test]
    fn replies_keep_flowing_while_requests_flood_in() {
        // A small byte budget keeps the queue full; DEALER flooders that never wait for
        // replies keep the ROUTER from ever being empty.
        let (server, mut rx, ep) = bind(|c| c.incoming_bytes = Some(64 << 10));
        let worker = {
            let server = server.clone();
            std::thread::spawn(move || {
                let mut handled = 0u64;
                while let Some(inc) = rx.blocking_recv() {
                    std::thread::sleep(Duration::from_micros(20));
                    let _ = server.reply(inc.peer.clone(), b"ok".to_vec());
                    handled += 1;
                }
                handled
            })
        };
        let stop = Arc::new(AtomicBool::new(false));
        let flooders: Vec<_> = (0..4)
            .map(|_| {
                let (ep, stop) = (ep.clone(), stop.clone());
                std::thread::spawn(move || {
                    let ctx = zmq::Context::new();
                    let dealer = ctx.socket(zmq::DEALER).unwrap();
                    dealer.set_linger(0).unwrap();
                    dealer.connect(&ep).unwrap();
                    let body = vec![7u8; 1024];
                    let mut sent = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        match dealer.send_multipart([&b""[..], &body[..]], zmq::DONTWAIT) {
                            Ok(()) => sent += 1,
                            Err(_) => std::thread::sleep(Duration::from_micros(100)),
                        }
                        while dealer.recv_multipart(zmq::DONTWAIT).is_ok() {}
                    }
                    sent
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        let start = Instant::now();
        let mut slowest = Duration::ZERO;
        for _ in 0..20 {
            let t = Instant::now();
            let reply = request(&zmq::Context::new(), &ep, b"ping", PATIENCE)
                .expect("a reply while the flood goes on");
            assert_eq!(reply, b"ok");
            slowest = slowest.max(t.elapsed());
        }
        let total = start.elapsed();
        let flooding = flooders.iter().all(|f| !f.is_finished());
        stop.store(true, Ordering::Relaxed);
        let sent: u64 = flooders.into_iter().map(|f| f.join().unwrap()).sum();
        server.shutdown();
        let handled = worker.join().unwrap();
        println!(
            "MEASURED 20 round trips during a flood of {sent} requests ({handled} handled): \
             slowest {slowest:?}, all {total:?}"
        );
        assert!(flooding, "a flooder stopped early");
        assert!(sent > 20 * 64, "the flood was not a flood: {sent} requests");
    }

    #[test]
    fn a_message_over_max_msg_size_ends_its_connection_and_nothing_else() {
        let (server, mut rx, ep) = bind(|c| c.max_msg_size = 4096);
        let big = send(&ep, vec![1; 8192], Duration::from_secs(2));
        assert!(matches!(big.join().unwrap(), Err(Error::Timeout(_))));
        assert!(
            rx.try_recv().is_err(),
            "an oversized request reached the queue"
        );
        let small = send(&ep, vec![2; 100], PATIENCE);
        let inc = next(&mut rx, PATIENCE).expect("a request within the limit");
        assert_eq!(&*inc.body, &[2; 100][..]);
        server.reply(inc.peer.clone(), b"ok".to_vec()).unwrap();
        assert_eq!(small.join().unwrap().unwrap(), b"ok");
    }

    #[test]
    fn large_bodies_stay_in_their_libzmq_message_and_small_ones_are_copied() {
        let (server, mut rx, ep) = bind(|_| {});
        let large: Vec<u8> = (0..(1 << 20)).map(|i| (i % 251) as u8).collect();
        for body in [vec![9; 100], large] {
            let client = send(&ep, body.clone(), PATIENCE);
            let inc = next(&mut rx, PATIENCE).expect("the request");
            assert_eq!(&*inc.body, &body[..]);
            assert_eq!(
                matches!(inc.body.0, BodyRepr::Zmq(_)),
                body.len() > Body::COPY_MAX
            );
            server.reply(inc.peer.clone(), b"ok".to_vec()).unwrap();
            assert_eq!(client.join().unwrap().unwrap(), b"ok");
        }
    }
}
