//! The master's publish port: a ZMTP 3 PUB socket of our own, on tokio, that libzmq SUB
//! sockets (stock salt-minion through pyzmq, Halite's minion) connect to as they would to
//! libzmq's PUB.
//!
//! Why not libzmq's PUB (BENCHMARKS.md): libzmq keeps ~29 KiB per connection (encoder and
//! decoder batch buffers, two pipes of 256-message chunks), scans all of an I/O thread's
//! timers linearly to cancel one (so handshakes and heartbeats cost O(N) each at N minions),
//! and copies each publish into every pipe. Here a connection is one task with a small read
//! buffer, and its queue is a deque of shared frames in the registry, empty and unallocated
//! while nothing waits: a publish is encoded once and every subscriber's queue holds an
//! `Arc` of it.
//!
//! Semantics kept from libzmq's PUB: a message goes to every subscriber with a matching
//! prefix subscription (ZMTP 3.0 `0x01`-messages and 3.1 `SUBSCRIBE` commands); a subscriber
//! whose queue holds `hwm` frames loses the new ones (`pub_hwm`) and nobody else waits for
//! it; messages sent by subscribers other than subscriptions are ignored; `PING` is answered
//! with `PONG`. When heartbeats are configured, each connection sends `PING` every interval
//! and is closed when nothing arrived for the timeout: with tokio's timer wheel that costs
//! O(1) per connection. TCP keepalive (idle 300 s, as Salt sets on its PUB) stays on.
//!
//! Threads: one, named `zmtp-pub`, running a current-thread tokio runtime: the accept loop,
//! one task per connection and the fan-out task. [`PubServer::publish`] may be called from
//! any thread; publishes leave in the order of the calls.

use crate::zmtp::{self, FrameBuf, SocketType, Subscription};
use crate::Error;
use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, TcpListener as StdListener, ToSocketAddrs};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Poll, Waker};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// Largest frame a subscriber may send (subscriptions and commands are a few bytes).
const MAX_INCOMING_FRAME: usize = 64 * 1024;

/// Most subscriptions one subscriber may hold (a Salt minion holds one or two); more is a
/// protocol error, so a peer cannot grow the master's memory by subscribing.
const MAX_TOPICS: usize = 256;

/// How long a connecting peer has to finish the greeting and `READY` (libzmq's
/// `ZMQ_HANDSHAKE_IVL` default).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// TCP keepalive idle time on subscriber connections (Salt's PUB: `tcp_keepalive_idle` 300).
const KEEPALIVE_IDLE: Duration = Duration::from_secs(300);

/// Where and how the publish port listens.
#[derive(Debug, Clone)]
pub struct PubServerConfig {
    /// The address to listen on.
    pub addr: SocketAddr,
    /// Listen backlog (`zmq_backlog`).
    pub backlog: u32,
    /// Frames queued per subscriber before new ones are dropped for it (`pub_hwm`; at least 1).
    pub hwm: usize,
    /// `PING` interval; `None`: no heartbeats.
    pub heartbeat_ivl: Option<Duration>,
    /// A connection that sent nothing for this long after a `PING` is closed.
    pub heartbeat_timeout: Duration,
}

impl PubServerConfig {
    /// Resolves `interface` (an IP address, `0.0.0.0` or `::`) and `port`. With `ipv6`, the
    /// IPv4 wildcard listens on the IPv6 wildcard (both families), as libzmq does.
    pub fn resolve(interface: &str, ipv6: bool, port: u16) -> Result<SocketAddr, Error> {
        let addr = (interface, port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut addrs| addrs.next())
            .ok_or_else(|| Error::Bind {
                addr: format!("{interface}:{port}"),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "not an address of this host",
                ),
            })?;
        if ipv6 && addr.ip() == std::net::Ipv4Addr::UNSPECIFIED {
            return Ok(SocketAddr::new(
                std::net::Ipv6Addr::UNSPECIFIED.into(),
                port,
            ));
        }
        Ok(addr)
    }
}

/// A queue that emptied keeps at most this many slots; a larger one (left by a burst) is
/// freed, so 10,000 idle subscribers hold no queue memory.
const IDLE_QUEUE_SLOTS: usize = 4;

/// One subscriber: what the fan-out task fills and its connection task drains.
struct Subscriber {
    /// The peer's address (Salt's `connected_ids` matches these against minion grains).
    peer: std::net::IpAddr,
    /// Prefixes subscribed to, one entry per `SUBSCRIBE` (libzmq counts duplicates too).
    topics: Vec<Vec<u8>>,
    /// Frames not yet written, at most `pub_hwm`.
    queue: VecDeque<Arc<[u8]>>,
    /// The connection task, while it waits for `queue`.
    waker: Option<Waker>,
}

impl Subscriber {
    fn wants(&self, body: &[u8]) -> bool {
        self.topics.iter().any(|t| body.starts_with(t))
    }
}

/// What the fan-out task and the connection tasks share.
#[derive(Default)]
struct Registry {
    next_id: u64,
    subscribers: HashMap<u64, Subscriber>,
}

/// The next frame queued for subscriber `id`, or `None` once it is unregistered.
/// Cancel-safe: a frame is taken only by the poll that returns it.
async fn next_queued(registry: &Shared, id: u64) -> Option<Arc<[u8]>> {
    std::future::poll_fn(|cx| {
        let mut reg = lock(registry);
        let Some(sub) = reg.subscribers.get_mut(&id) else {
            return Poll::Ready(None);
        };
        match sub.queue.pop_front() {
            Some(frame) => {
                if sub.queue.is_empty() && sub.queue.capacity() > IDLE_QUEUE_SLOTS {
                    sub.queue = VecDeque::new();
                }
                Poll::Ready(Some(frame))
            }
            None => {
                match &mut sub.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    slot => *slot = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        }
    })
    .await
}

type Shared = Arc<Mutex<Registry>>;

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Registry> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The running publish server. Dropping it closes every connection.
pub struct PubServer {
    local_addr: SocketAddr,
    publishes: mpsc::UnboundedSender<Vec<u8>>,
    registry: Shared,
    stop: Mutex<Option<oneshot::Sender<()>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl PubServer {
    /// Binds the port (errors such as "address in use" are returned here) and starts the
    /// server thread.
    pub fn bind(cfg: PubServerConfig) -> Result<Self, Error> {
        let listener = listen(cfg.addr, cfg.backlog).map_err(|source| Error::Bind {
            addr: cfg.addr.to_string(),
            source,
        })?;
        let local_addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: cfg.addr.to_string(),
            source,
        })?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| Error::Bind {
                addr: cfg.addr.to_string(),
                source,
            })?;
        let registry = Shared::default();
        let (publishes, publish_rx) = mpsc::unbounded_channel();
        let (stop, stop_rx) = oneshot::channel();
        let shared = registry.clone();
        let thread = std::thread::Builder::new()
            .name("zmtp-pub".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::error!(error = %e, "Publish port listener failed");
                            return;
                        }
                    };
                    let hwm = cfg.hwm.max(1);
                    let cfg = Arc::new(cfg);
                    tokio::select! {
                        () = accept_loop(listener, shared.clone(), cfg) => {}
                        () = fan_out(publish_rx, shared, hwm) => {}
                        _ = stop_rx => {}
                    }
                });
                // Dropping the runtime drops every connection task and closes its socket.
            })
            .map_err(|source| Error::Bind {
                addr: "publish server thread".into(),
                source,
            })?;
        Ok(Self {
            local_addr,
            publishes,
            registry,
            stop: Mutex::new(Some(stop)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The address the port is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Queues `body` as one single-frame message for every subscriber whose subscriptions
    /// match it. Never blocks; fails only after [`PubServer::shutdown`].
    pub fn publish(&self, body: Vec<u8>) -> Result<(), Error> {
        self.publishes.send(body).map_err(|_| Error::Closed)
    }

    /// Connections that finished the handshake and are still open: the minions that are
    /// listening, subscribed or not.
    pub fn subscribers(&self) -> usize {
        lock(&self.registry).subscribers.len()
    }

    /// The addresses of the connections [`PubServer::subscribers`] counts, de-duplicated.
    pub fn subscriber_addrs(&self) -> Vec<std::net::IpAddr> {
        let mut addrs: Vec<_> = lock(&self.registry)
            .subscribers
            .values()
            .map(|s| s.peer)
            .collect();
        addrs.sort_unstable();
        addrs.dedup();
        addrs
    }

    /// Closes the port and every connection, and stops the thread. Idempotent.
    pub fn shutdown(&self) {
        if let Some(stop) = take(&self.stop) {
            let _ = stop.send(());
        }
        if let Some(t) = take(&self.thread) {
            let _ = t.join();
        }
    }
}

fn take<T>(slot: &Mutex<Option<T>>) -> Option<T> {
    slot.lock().unwrap_or_else(PoisonError::into_inner).take()
}

impl Drop for PubServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A non-blocking listener with `backlog`, `SO_REUSEADDR` (as libzmq) and, for the IPv6
/// wildcard, both address families.
fn listen(addr: SocketAddr, backlog: u32) -> std::io::Result<StdListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(false)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

async fn accept_loop(listener: TcpListener, registry: Shared, cfg: Arc<PubServerConfig>) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                tokio::spawn(serve(stream, peer, registry.clone(), cfg.clone()));
            }
            Err(e) => {
                // Out of file descriptors and the like: the listener stays, try again soon.
                tracing::error!(error = %e, "Accepting a connection on the publish port failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Encodes each publish once and queues it for every matching subscriber.
async fn fan_out(mut publishes: mpsc::UnboundedReceiver<Vec<u8>>, registry: Shared, hwm: usize) {
    while let Some(body) = publishes.recv().await {
        let mut frame = Vec::with_capacity(body.len() + 9);
        zmtp::encode_frame(&mut frame, &body, false, false);
        let frame: Arc<[u8]> = frame.into();
        let mut full = 0usize;
        for sub in lock(&registry).subscribers.values_mut() {
            if !sub.wants(&body) {
                continue;
            }
            if sub.queue.len() >= hwm {
                full += 1;
                continue;
            }
            sub.queue.push_back(frame.clone());
            if let Some(w) = sub.waker.take() {
                w.wake();
            }
        }
        if full > 0 {
            tracing::warn!(
                subscribers = full,
                "Publish dropped for subscribers whose queue is at pub_hwm"
            );
        }
    }
}

/// Why a connection ended.
enum End {
    /// The peer closed it.
    Closed,
    /// The peer broke the protocol (or failed the handshake).
    Protocol(zmtp::ProtocolError),
    /// Reading or writing failed.
    Io(std::io::Error),
    /// The handshake or a heartbeat timed out.
    Timeout(&'static str),
}

impl From<std::io::Error> for End {
    fn from(e: std::io::Error) -> Self {
        End::Io(e)
    }
}

impl From<zmtp::ProtocolError> for End {
    fn from(e: zmtp::ProtocolError) -> Self {
        End::Protocol(e)
    }
}

/// Reads more bytes into `rbuf` (cancel-safe: `read_buf` either appends or does nothing).
async fn fill<R: AsyncReadExt + Unpin>(rbuf: &mut FrameBuf, r: &mut R) -> Result<(), End> {
    match r.read_buf(rbuf.spare(256)).await? {
        0 => Err(End::Closed),
        _ => Ok(()),
    }
}

async fn serve(
    mut stream: TcpStream,
    peer: SocketAddr,
    registry: Shared,
    cfg: Arc<PubServerConfig>,
) {
    let _ = stream.set_nodelay(true);
    let keepalive = socket2::TcpKeepalive::new().with_time(KEEPALIVE_IDLE);
    let _ = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive);
    let mut rbuf = FrameBuf::new(MAX_INCOMING_FRAME);
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(&mut stream, &mut rbuf)).await {
        Ok(Ok(())) => {}
        Ok(Err(End::Protocol(e))) => {
            tracing::warn!(
                "ZMTP handshake with a peer on the publish port {peer} failed (protocol error: {e}); connection dropped"
            );
            return;
        }
        Ok(Err(_)) | Err(_) => {
            // Port probes and health checks connect and leave without a greeting.
            tracing::debug!("A peer on the publish port {peer} left before the ZMTP handshake");
            return;
        }
    }
    let id = {
        let mut reg = lock(&registry);
        reg.next_id += 1;
        let id = reg.next_id;
        reg.subscribers.insert(
            id,
            Subscriber {
                peer: peer.ip(),
                topics: Vec::new(),
                queue: VecDeque::new(),
                waker: None,
            },
        );
        id
    };
    tracing::trace!("Subscriber {peer} connected to the publish port");
    let end = subscribed(&mut stream, &mut rbuf, &registry, id, &cfg).await;
    lock(&registry).subscribers.remove(&id);
    match end {
        End::Closed => tracing::trace!("Subscriber {peer} disconnected"),
        End::Io(e) => tracing::debug!("Subscriber {peer} dropped: {e}"),
        End::Timeout(what) => tracing::debug!("Subscriber {peer} dropped: {what} timed out"),
        End::Protocol(e) => {
            tracing::warn!("Subscriber {peer} broke the ZMTP protocol ({e}); connection dropped")
        }
    }
}

/// Greeting and `READY` exchange; leaves anything the peer sent after its `READY` in `rbuf`.
async fn handshake(stream: &mut TcpStream, rbuf: &mut FrameBuf) -> Result<(), End> {
    stream.write_all(&zmtp::greeting()).await?;
    let mut theirs = [0u8; zmtp::GREETING_LEN];
    stream.read_exact(&mut theirs).await?;
    zmtp::check_greeting(&theirs)?;
    let mut ready = Vec::with_capacity(32);
    zmtp::encode_frame(
        &mut ready,
        &zmtp::ready_body(SocketType::Pub, b""),
        false,
        true,
    );
    stream.write_all(&ready).await?;
    loop {
        if let Some(frame) = rbuf.next_frame()? {
            if !frame.command {
                return Err(zmtp::ProtocolError("a message before READY".into()).into());
            }
            if let Err(e) = zmtp::check_ready(SocketType::Pub, frame.body) {
                let mut out = Vec::new();
                zmtp::encode_frame(&mut out, &zmtp::error_body(&e.0), false, true);
                let _ = stream.write_all(&out).await;
                return Err(e.into());
            }
            return Ok(());
        }
        fill(rbuf, stream).await?;
    }
}

/// Serves a handshaken subscriber until it leaves: writes queued frames, applies its
/// subscriptions, answers and sends heartbeats.
async fn subscribed(
    stream: &mut TcpStream,
    rbuf: &mut FrameBuf,
    registry: &Shared,
    id: u64,
    cfg: &PubServerConfig,
) -> End {
    let (mut rd, mut wr) = stream.split();
    let mut last_heard = Instant::now();
    let mut next_ping = cfg.heartbeat_ivl.map(|ivl| Instant::now() + ivl);
    // Inside a multipart message from the subscriber (never a subscription; skipped).
    let mut in_multipart = false;
    loop {
        // Frames already buffered (the handshake may have read some).
        loop {
            let frame = match rbuf.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return e.into(),
            };
            let skip = in_multipart;
            in_multipart = frame.more;
            if frame.command {
                match zmtp::pong_for(frame.body) {
                    Ok(Some(pong)) => {
                        if let Err(e) = wr.write_all(&pong).await {
                            return e.into();
                        }
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => return e.into(),
                }
            }
            if skip || frame.more {
                continue;
            }
            match zmtp::subscription(&frame) {
                Some(Subscription::Subscribe(topic)) => {
                    if let Some(s) = lock(registry).subscribers.get_mut(&id) {
                        if s.topics.len() >= MAX_TOPICS {
                            return End::Protocol(zmtp::ProtocolError(format!(
                                "more than {MAX_TOPICS} subscriptions"
                            )));
                        }
                        s.topics.push(topic.to_vec());
                    }
                }
                Some(Subscription::Cancel(topic)) => {
                    if let Some(s) = lock(registry).subscribers.get_mut(&id) {
                        if let Some(i) = s.topics.iter().position(|t| t == topic) {
                            s.topics.swap_remove(i);
                        }
                    }
                }
                None => {}
            }
        }
        let ping_at = next_ping;
        tokio::select! {
            frame = next_queued(registry, id) => {
                let Some(frame) = frame else { return End::Closed };
                if let Err(e) = wr.write_all(&frame).await {
                    return e.into();
                }
            }
            read = fill(rbuf, &mut rd) => {
                if let Err(e) = read {
                    return e;
                }
                last_heard = Instant::now();
            }
            () = sleep_until(ping_at) => {
                if last_heard.elapsed() > cfg.heartbeat_timeout {
                    return End::Timeout("heartbeat");
                }
                if let Err(e) = wr.write_all(&zmtp::ping_frame(0)).await {
                    return e.into();
                }
                next_ping = cfg.heartbeat_ivl.map(|ivl| Instant::now() + ivl);
            }
        }
    }
}

/// Sleeps until `at`, or forever for `None`.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry_with_one_subscriber() -> Shared {
        let registry = Shared::default();
        lock(&registry).subscribers.insert(
            1,
            Subscriber {
                peer: std::net::Ipv4Addr::LOCALHOST.into(),
                topics: vec![Vec::new()],
                queue: VecDeque::new(),
                waker: None,
            },
        );
        registry
    }

    #[tokio::test]
    async fn a_drained_queue_gives_back_the_memory_of_a_burst() {
        let registry = registry_with_one_subscriber();
        let frames: Vec<Arc<[u8]>> = (0..100u8).map(|i| Arc::from(vec![i])).collect();
        lock(&registry)
            .subscribers
            .get_mut(&1)
            .unwrap()
            .queue
            .extend(frames.iter().cloned());
        for want in &frames {
            assert_eq!(next_queued(&registry, 1).await.as_ref(), Some(want));
        }
        assert_eq!(lock(&registry).subscribers[&1].queue.capacity(), 0);
        // The next publish waits for the fan-out; an unregistered subscriber gets `None`.
        let waiting = tokio::time::timeout(Duration::from_millis(20), next_queued(&registry, 1));
        assert!(waiting.await.is_err());
        assert!(lock(&registry).subscribers[&1].waker.is_some());
        lock(&registry).subscribers.remove(&1);
        assert_eq!(next_queued(&registry, 1).await, None);
    }
}
