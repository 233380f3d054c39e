//! The ZeroMQ server transport: ROUTER on `ret_port`, PUB on `publish_port`.
//!
//! One thread owns both sockets plus an `inproc` PULL socket that carries replies and
//! publishes from tokio tasks (ZeroMQ sockets are not thread-safe; the inproc PUSH side is
//! guarded by a mutex and never blocks). Incoming requests go to tokio over a bounded
//! channel: when it is full the thread waits, libzmq queues on the ROUTER (up to its HWM) and
//! minions see back-pressure instead of the master growing without bound.
//!
//! Socket options follow Salt (`salt/transport/zeromq.py`): ROUTER_HANDOVER, TCP keepalive
//! 60/15/3 on the ROUTER, backlog `zmq_backlog`, `pub_hwm` on the PUB, one frame per publish
//! (no topic filtering), ZMTP heartbeats when `zmq_heartbeat_ivl` is set.
//!
//! Deviation: Salt 3008.3 turns ZMTP heartbeats on by default (10 s / 30 s); Halite leaves
//! them off unless configured. libzmq keeps each I/O thread's timers in one multimap and
//! cancels a heartbeat timer with a linear scan on every PONG, so with N connections the
//! cost grows as N²: at 10,000 minions it took ~70 % of a core continuously on the PUB's I/O
//! thread (BENCHMARKS.md). TCP keepalive (on both sockets) still detects dead peers.

use crate::{Error, Incoming, PeerId, ServerTransport};
use std::sync::Mutex;
use std::thread::JoinHandle;
use tokio::sync::mpsc;

/// Capacity of the incoming-request channel. When full, the socket thread waits (requests
/// queue inside libzmq) — back-pressure, nothing is dropped.
pub const INCOMING_CAPACITY: usize = 4096;

const CMD_REPLY: &[u8] = b"R";
const CMD_PUBLISH: &[u8] = b"P";
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
    /// `zmq_heartbeat_ivl` in ms; 0 (Halite's default, Salt's is 10000) turns heartbeats off.
    pub heartbeat_ivl_ms: i32,
    /// `zmq_heartbeat_timeout` in ms (Salt default 30000).
    pub heartbeat_timeout_ms: i32,
    /// Hard cap on one incoming message; libzmq disconnects a peer that sends more.
    pub max_msg_size: i64,
}

impl ZmqServerConfig {
    /// Salt's defaults for the given addresses, except ZMTP heartbeats (off; see the module
    /// documentation).
    pub fn new(interface: &str, ipv6: bool, ret_port: u16, publish_port: u16) -> Self {
        Self {
            interface: interface.to_owned(),
            ipv6,
            ret_port,
            publish_port,
            pub_hwm: 1000,
            backlog: 1000,
            heartbeat_ivl_ms: 0,
            heartbeat_timeout_ms: 30_000,
            max_msg_size: 256 << 20,
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
    cmd: Mutex<zmq::Socket>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl ZmqServer {
    /// Binds both sockets and starts the socket thread. Returns the transport and the
    /// receiver of incoming requests. Binding errors (port in use) are returned here.
    pub fn bind(cfg: &ZmqServerConfig) -> Result<(Self, mpsc::Receiver<Incoming>), Error> {
        // Two I/O threads: the ROUTER's connections on one, the PUB's on the other. Besides
        // using both cores, it keeps the PUB's per-connection timers out of the ROUTER's
        // poller, where libzmq cancels a heartbeat timer on every received message with a
        // linear scan of all timers of that I/O thread.
        let ctx = zmq::Context::new();
        ctx.set_io_threads(2).map_err(Error::zmq("io threads"))?;
        let router = ctx
            .socket(zmq::ROUTER)
            .map_err(Error::zmq("create ROUTER"))?;
        router
            .set_affinity(1)
            .map_err(Error::zmq("ROUTER affinity"))?;
        let publisher = ctx.socket(zmq::PUB).map_err(Error::zmq("create PUB"))?;
        publisher
            .set_affinity(2)
            .map_err(Error::zmq("PUB affinity"))?;
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
            .set_heartbeat_ivl(cfg.heartbeat_ivl_ms)
            .map_err(Error::zmq("heartbeat"))?;
        router
            .set_heartbeat_timeout(cfg.heartbeat_timeout_ms)
            .map_err(Error::zmq("heartbeat"))?;

        publisher.set_linger(1).map_err(Error::zmq("PUB linger"))?;
        publisher
            .set_sndhwm(cfg.pub_hwm)
            .map_err(Error::zmq("PUB hwm"))?;
        publisher
            .set_rcvhwm(cfg.pub_hwm)
            .map_err(Error::zmq("PUB hwm"))?;
        publisher
            .set_backlog(cfg.backlog)
            .map_err(Error::zmq("backlog"))?;
        publisher.set_ipv6(cfg.ipv6).map_err(Error::zmq("ipv6"))?;
        publisher
            .set_tcp_keepalive(1)
            .map_err(Error::zmq("keepalive"))?;
        publisher
            .set_tcp_keepalive_idle(300)
            .map_err(Error::zmq("keepalive idle"))?;
        publisher
            .set_heartbeat_ivl(cfg.heartbeat_ivl_ms)
            .map_err(Error::zmq("heartbeat"))?;
        publisher
            .set_heartbeat_timeout(cfg.heartbeat_timeout_ms)
            .map_err(Error::zmq("heartbeat"))?;

        let ret_ep = cfg.endpoint(cfg.ret_port);
        let pub_ep = cfg.endpoint(cfg.publish_port);
        router
            .bind(&ret_ep)
            .map_err(Error::zmq(format!("bind {ret_ep}")))?;
        publisher
            .bind(&pub_ep)
            .map_err(Error::zmq(format!("bind {pub_ep}")))?;
        pull.bind(&inproc).map_err(Error::zmq("bind inproc"))?;
        let push = ctx.socket(zmq::PUSH).map_err(Error::zmq("create PUSH"))?;
        push.set_sndhwm(0).map_err(Error::zmq("PUSH hwm"))?;
        push.connect(&inproc)
            .map_err(Error::zmq("connect inproc"))?;

        // Handshake failures (garbage on a port) are only visible through socket monitors.
        let failures = (zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL as i32)
            | (zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL as i32);
        let tag = format!("{:p}", &router as *const _);
        let mut monitors = Vec::new();
        for (sock, port) in [(&router, "request"), (&publisher, "publish")] {
            let ep = format!("inproc://halite-mon-{port}-{tag}");
            sock.monitor(&ep, failures).map_err(Error::zmq("monitor"))?;
            let mon = ctx
                .socket(zmq::PAIR)
                .map_err(Error::zmq("create monitor"))?;
            mon.connect(&ep).map_err(Error::zmq("connect monitor"))?;
            monitors.push((mon, port));
        }

        let (tx, rx) = mpsc::channel(INCOMING_CAPACITY);
        let thread = std::thread::Builder::new()
            .name("zmq-server".into())
            .spawn(move || socket_loop(router, publisher, pull, monitors, tx))
            .map_err(|e| Error::Zmq {
                op: format!("spawn thread: {e}"),
                source: zmq::Error::EFAULT,
            })?;
        tracing::info!(ret = %ret_ep, publish = %pub_ep, "Request and publish sockets bound");
        Ok((
            Self {
                ctx,
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

    /// Stops the socket thread and closes the sockets. Idempotent.
    pub fn shutdown(&self) {
        let _ = self.send_cmd(&[CMD_STOP]);
        let handle = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(h) = handle {
            let _ = h.join();
        }
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
        self.send_cmd(&[CMD_PUBLISH, &frame])
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

fn socket_loop(
    router: zmq::Socket,
    publisher: zmq::Socket,
    pull: zmq::Socket,
    monitors: Vec<(zmq::Socket, &'static str)>,
    tx: mpsc::Sender<Incoming>,
) {
    loop {
        let (router_ready, cmd_ready) = {
            let mut items = vec![
                router.as_poll_item(zmq::POLLIN),
                pull.as_poll_item(zmq::POLLIN),
            ];
            items.extend(monitors.iter().map(|(m, _)| m.as_poll_item(zmq::POLLIN)));
            if let Err(e) = zmq::poll(&mut items, -1) {
                if e == zmq::Error::EINTR {
                    continue;
                }
                tracing::error!(error = %e, "ZeroMQ poll failed; stopping the socket thread");
                return;
            }
            for (i, (mon, port)) in monitors.iter().enumerate() {
                if items[2 + i].is_readable() {
                    log_monitor_event(mon, port);
                }
            }
            (items[0].is_readable(), items[1].is_readable())
        };
        if cmd_ready {
            while let Ok(parts) = pull.recv_multipart(zmq::DONTWAIT) {
                match parts.first().map(Vec::as_slice) {
                    Some(CMD_REPLY) if parts.len() == 3 => {
                        let msg: [&[u8]; 3] = [&parts[1], b"", &parts[2]];
                        if let Err(e) = router.send_multipart(msg, zmq::DONTWAIT) {
                            tracing::debug!(error = %e, "Reply to a disconnected peer dropped");
                        }
                    }
                    Some(CMD_PUBLISH) if parts.len() == 2 => {
                        if let Err(e) = publisher.send(&parts[1], zmq::DONTWAIT) {
                            tracing::warn!(error = %e, "Publish dropped by the PUB socket");
                        }
                    }
                    Some(CMD_STOP) => return,
                    _ => tracing::error!("Malformed internal transport command ignored"),
                }
            }
        }
        if router_ready {
            while let Ok(parts) = router.recv_multipart(zmq::DONTWAIT) {
                // REQ peers send [id, "", body]; anything else is not a Salt request.
                let mut parts = parts.into_iter();
                let (Some(id), Some(second)) = (parts.next(), parts.next()) else {
                    tracing::warn!("Request with no body on the request port dropped");
                    continue;
                };
                let (delim, body) = match parts.next() {
                    Some(body) => (second, body),
                    None => (Vec::new(), second),
                };
                if !delim.is_empty() || parts.next().is_some() {
                    tracing::warn!(
                        "Request with an unexpected frame layout on the request port dropped"
                    );
                    continue;
                }
                if tx
                    .blocking_send(Incoming {
                        peer: PeerId(id),
                        body,
                    })
                    .is_err()
                {
                    return;
                }
            }
        }
    }
}
