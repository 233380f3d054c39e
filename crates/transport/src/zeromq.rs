//! The master's server transport: libzmq's ROUTER on `ret_port`, Halite's own ZMTP PUB
//! engine ([`crate::pubserver`]) on `publish_port`.
//!
//! One thread owns the ROUTER plus an `inproc` PULL socket that carries replies from tokio
//! tasks (ZeroMQ sockets are not thread-safe; the inproc PUSH side is guarded by a mutex and
//! never blocks). Incoming requests go to tokio over a bounded channel: when it is full the
//! thread waits, libzmq queues on the ROUTER (up to its HWM) and minions see back-pressure
//! instead of the master growing without bound. Publishes go straight to the publish
//! server's thread.
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
use crate::{Error, Incoming, PeerId, ServerTransport};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::mpsc;

/// Capacity of the incoming-request channel. When full, the socket thread waits (requests
/// queue inside libzmq) — back-pressure, nothing is dropped.
pub const INCOMING_CAPACITY: usize = 4096;

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
    /// Hard cap on one incoming message; libzmq disconnects a peer that sends more.
    pub max_msg_size: i64,
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
        let thread = std::thread::Builder::new()
            .name("zmq-server".into())
            .spawn(move || socket_loop(router, pull, monitor, tx))
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

    /// Stops the socket threads and closes the sockets. Idempotent.
    pub fn shutdown(&self) {
        self.publisher.shutdown();
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

fn socket_loop(
    router: zmq::Socket,
    pull: zmq::Socket,
    monitor: zmq::Socket,
    tx: mpsc::Sender<Incoming>,
) {
    loop {
        let (router_ready, cmd_ready) = {
            let mut items = [
                router.as_poll_item(zmq::POLLIN),
                pull.as_poll_item(zmq::POLLIN),
                monitor.as_poll_item(zmq::POLLIN),
            ];
            if let Err(e) = zmq::poll(&mut items, -1) {
                if e == zmq::Error::EINTR {
                    continue;
                }
                tracing::error!(error = %e, "ZeroMQ poll failed; stopping the socket thread");
                return;
            }
            if items[2].is_readable() {
                log_monitor_event(&monitor, "request");
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
