//! ZeroMQ sockets toward the master, set up as Salt's minion sets them up
//! (`salt/transport/zeromq.py`): a REQ socket to `ret_port` that is thrown away after a
//! timeout (so a late reply can never answer the next request), and a SUB socket to
//! `publish_port` with a socket monitor that reports disconnects. Also the name resolution
//! of a master (`resolve_dns`) and the clear `ping` of `status.ping_master`.
//!
//! Deviation: the REQ socket has a monitor too, and a request whose connection closes
//! before the reply fails at once ([`Error::Disconnected`]) and is sent again by its
//! caller, where Salt's waits out its timeout (60 s for a pillar fetch) for a reply a
//! stopped master will never send. A timeout names the address after Salt's
//! `SaltReqTimeoutError: Message timed out`.
//!
//! Liveness: the SUB socket sends ZMTP heartbeats ([`Heartbeat`], from
//! `master_alive_interval`), and a heartbeat left unanswered closes the connection, which
//! the monitor reports like any disconnect. So a master is judged on the connection itself:
//! a frozen master whose TCP connections stay open, or one cut off from the network, is
//! noticed. Salt's minion instead looks for an established TCP connection to
//! `publish_port` in the OS socket table (`status.master`), which a frozen master passes
//! and a master on another port fails.

use crate::settings::Settings;
use crate::shutdown::Shutdown;
use crate::Error;
use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often a waiting request checks whether it should give up.
pub const ABORT_CHECK: Duration = Duration::from_millis(100);

/// Interval of the ZMTP heartbeats the publish socket sends (Salt's master default
/// `zmq_heartbeat_ivl`).
pub const HEARTBEAT_IVL_MS: i32 = 10_000;
/// Silence after which the publish connection counts as lost (Salt's master default
/// `zmq_heartbeat_timeout`).
pub const HEARTBEAT_TIMEOUT_MS: i32 = 30_000;

/// libzmq's `maxmsgsize` on the publish (SUB) socket: a master's publish is at most a
/// request it took (its `max_request_size`, 64 MiB by default) plus the envelope; a
/// larger frame, which no master sends, ends the connection before anything is allocated
/// for it (libzmq reconnects).
pub const PUBLISH_MAX_MSG_SIZE: i64 = halite_config::DEFAULT_MAX_REQUEST_SIZE as i64 + (1 << 20);

/// Where the master is, after name resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasterAddr {
    /// The master's IP address.
    pub ip: IpAddr,
    /// The request port (`master_port`, or the port written in `master`).
    pub ret_port: u16,
}

impl MasterAddr {
    /// `tcp://ip:port`, with brackets around IPv6 addresses.
    pub fn uri(&self, port: u16) -> String {
        match self.ip {
            IpAddr::V4(ip) => format!("tcp://{ip}:{port}"),
            IpAddr::V6(ip) => format!("tcp://[{ip}]:{port}"),
        }
    }
}

/// Splits Salt's `master` value into host and port (`prep_ip_port`): `host`, `host:port`,
/// `[v6]` or `[v6]:port`; a bare IPv6 address keeps `default_port`.
pub fn split_master(master: &str, default_port: u16) -> (String, u16) {
    let master = master.trim();
    if let Some(rest) = master.strip_prefix('[') {
        if let Some((host, tail)) = rest.split_once(']') {
            let port = tail
                .strip_prefix(':')
                .and_then(|p| p.parse().ok())
                .unwrap_or(default_port);
            return (host.to_owned(), port);
        }
    }
    match master.split_once(':') {
        Some((host, port)) if !port.contains(':') => match port.parse() {
            Ok(port) => (host.to_owned(), port),
            Err(_) => (master.to_owned(), default_port),
        },
        _ => (master.to_owned(), default_port),
    }
}

/// What resolving a master's name came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// The master's address.
    Found(MasterAddr),
    /// The name did not resolve (after the retries `retry_dns` and `retry_dns_count` allow).
    Unresolvable,
    /// `stop` fired while waiting to retry.
    Stopped,
}

fn lookup(host: &str, port: u16, ipv6: Option<bool>) -> Option<MasterAddr> {
    let addrs: Vec<_> = (host, port).to_socket_addrs().ok()?.collect();
    let want_v6 = ipv6 == Some(true);
    let addr = addrs
        .iter()
        .find(|a| a.is_ipv6() == want_v6)
        .or(addrs.first())?;
    Some(MasterAddr {
        ip: addr.ip(),
        ret_port: port,
    })
}

/// `resolve_dns` for one master (`host`, its request port `port`): while the name does not
/// resolve, logs Salt's `dns_check` error and retries every `retry_dns` seconds, at most
/// `retry_dns_count` times. With `retry_dns: 0` it falls back to 127.0.0.1 when `fallback`
/// (Salt's single-master path) and gives up otherwise (failover skips the master).
pub fn resolve(
    host: &str,
    port: u16,
    settings: &Settings,
    stop: &Shutdown,
    fallback: bool,
) -> Resolved {
    let mut retries_left = settings.retry_dns_count;
    loop {
        if let Some(addr) = lookup(host, port, settings.ipv6) {
            return Resolved::Found(addr);
        }
        tracing::error!("DNS lookup or connection check of '{host}' failed.");
        if settings.retry_dns.is_zero() {
            if !fallback {
                return Resolved::Unresolvable;
            }
            tracing::error!("Master hostname: '{host}' not found. Falling back to 127.0.0.1");
            return Resolved::Found(MasterAddr {
                ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
                ret_port: port,
            });
        }
        match retries_left.as_mut() {
            Some(0) => return Resolved::Unresolvable,
            Some(n) => *n -= 1,
            None => {}
        }
        tracing::error!(
            "Master hostname: '{host}' not found or not responsive. Retrying in {} seconds",
            crate::auth::secs(settings.retry_dns)
        );
        if stop.sleep(settings.retry_dns) {
            return Resolved::Stopped;
        }
    }
}

/// `resolve_dns` for the first configured master, falling back to 127.0.0.1 with
/// `retry_dns: 0` as Salt does. `None` when `stop` fired while waiting, or when
/// `retry_dns_count` retries did not resolve it (then Salt's error is logged).
pub fn resolve_master(settings: &Settings, stop: &Shutdown) -> Option<MasterAddr> {
    let (host, port) = split_master(&settings.master, settings.master_port);
    match resolve(&host, port, settings, stop, true) {
        Resolved::Found(addr) => Some(addr),
        Resolved::Unresolvable => {
            tracing::error!("{}", unresolvable_message(&host));
            None
        }
        Resolved::Stopped => None,
    }
}

/// Salt's message for a master name that cannot be resolved (`SaltMasterUnresolvableError`
/// and the empty `master`).
pub fn unresolvable_message(host: &str) -> String {
    let host = if host.is_empty() {
        "unknown address"
    } else {
        host
    };
    format!("Master address: '{host}' could not be resolved. Invalid or unresolveable address. Set 'master' value in minion config.")
}

/// `status.ping_master`: a clear `{"cmd": "ping"}` to the request port at `uri`, one try of
/// `timeout`; true when the master answered anything. Gives up as soon as `abort` is true.
pub fn ping_master(
    ctx: &zmq::Context,
    uri: String,
    settings: &Settings,
    timeout: Duration,
    abort: &dyn Fn() -> bool,
) -> bool {
    use halite_proto::value::{self, map, s};
    let body = value::encode(&map([
        ("enc", s("clear")),
        ("load", map([("cmd", s("ping"))])),
        ("version", halite_proto::Value::from(3)),
    ]));
    let mut req = ReqSocket::new(ctx, uri, settings);
    req.request_until(&body, timeout, abort).is_ok()
}

/// ZMTP heartbeats on the publish connection: the minion sends `PING` every `ivl`, which
/// every ZMTP 3.1 peer answers (libzmq whatever its own heartbeat options, Halite's publish
/// engine too), and counts the connection lost when nothing at all came back for `timeout`
/// after a `PING`. A master that is gone, frozen or cut off is thus noticed on the
/// connection itself, within `ivl + timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat {
    /// Interval between `PING`s.
    pub ivl: Duration,
    /// Silence after a `PING` after which the connection counts as lost.
    pub timeout: Duration,
}

impl Heartbeat {
    /// The heartbeat for `master_alive_interval` `alive`: a `PING` every `alive / 3`, lost
    /// after `2 × alive / 3` of silence, so a hung master is noticed within `alive` (Salt
    /// never notices one: its check looks for the TCP connection in the OS table), which
    /// leaves the other `alive` of the 2 × `alive` goal to reach the next master. With
    /// `alive` 0 (off), Salt's master-side defaults: every 10 s, lost after 30 s.
    pub fn for_alive_interval(alive: Duration) -> Heartbeat {
        if alive.is_zero() {
            return Heartbeat {
                ivl: Duration::from_millis(HEARTBEAT_IVL_MS as u64),
                timeout: Duration::from_millis(HEARTBEAT_TIMEOUT_MS as u64),
            };
        }
        let alive = alive.max(MIN_ALIVE);
        Heartbeat {
            ivl: alive / 3,
            timeout: alive * 2 / 3,
        }
    }

    fn millis(d: Duration) -> i32 {
        i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
    }
}

/// Shortest liveness period honoured: below it, a busy machine's scheduling alone could
/// make a live master look dead.
pub const MIN_ALIVE: Duration = Duration::from_millis(200);

fn zerr(op: &str) -> impl FnOnce(zmq::Error) -> Error + '_ {
    move |source| Error::Zmq {
        op: op.to_owned(),
        source,
    }
}

fn keepalive(sock: &zmq::Socket, s: &Settings) -> Result<(), Error> {
    let (on, idle, cnt, intvl) = s.tcp_keepalive;
    sock.set_tcp_keepalive(i32::from(on))
        .map_err(zerr("tcp keepalive"))?;
    if on {
        sock.set_tcp_keepalive_idle(idle)
            .map_err(zerr("tcp keepalive"))?;
        sock.set_tcp_keepalive_cnt(cnt)
            .map_err(zerr("tcp keepalive"))?;
        sock.set_tcp_keepalive_intvl(intvl)
            .map_err(zerr("tcp keepalive"))?;
    }
    Ok(())
}

/// A REQ socket to the master's request port, created on first use and dropped after any
/// failure (`RequestClient._reconnect`).
///
/// A socket monitor reports when the connection carrying a request closes: the request
/// is then lost (libzmq does not send it again), so the wait ends at once with
/// [`Error::Disconnected`] instead of running to its timeout. Salt's minion waits the
/// whole timeout (60 s for a pillar fetch): after a master restart it sat silent that long
/// on a request the old master took and never answered.
pub struct ReqSocket {
    ctx: zmq::Context,
    uri: String,
    ipv6: bool,
    keepalive: Settings,
    sock: Option<Connected>,
}

/// An open REQ socket and the monitor that reports its disconnects.
struct Connected {
    sock: zmq::Socket,
    monitor: zmq::Socket,
}

/// Stops `sock`'s socket monitor. libzmq reports a closing socket's disconnect to its
/// monitor with a blocking send; once the reading end is gone that send never returns, the
/// context's I/O thread hangs with it and no socket of the context connects again (seen as a
/// minion whose sign-ins time out forever after a master restart). So a monitored socket's
/// monitor is stopped before the two are dropped.
fn stop_monitor(sock: &mut zmq::Socket) {
    // SAFETY: `sock` is a live socket used only by this thread; a null address is libzmq's
    // documented way to stop monitoring (`zmq_socket_monitor(3)`), and the call reads
    // nothing else.
    let rc = unsafe { zmq_sys::zmq_socket_monitor(sock.as_mut_ptr(), std::ptr::null(), 0) };
    if rc != 0 {
        // SAFETY: zmq_errno only reads the calling thread's errno.
        let errno = unsafe { zmq_sys::zmq_errno() };
        tracing::debug!(
            "Could not stop a socket monitor: {}",
            zmq::Error::from_raw(errno)
        );
    }
}

impl Drop for Connected {
    fn drop(&mut self) {
        stop_monitor(&mut self.sock);
    }
}

/// A fresh `inproc://` name for a socket monitor: libzmq releases a name only once the
/// monitored socket is reaped, after a new socket may need one.
fn monitor_endpoint() -> String {
    static MONITORS: AtomicU64 = AtomicU64::new(0);
    let n = MONITORS.fetch_add(1, Ordering::Relaxed);
    format!("inproc://halite-minion-monitor-{n}")
}

/// The event number of one monitor message (its first frame starts with it).
fn monitor_event(parts: &[Vec<u8>]) -> Option<u16> {
    parts
        .first()
        .and_then(|f| f.get(..2))
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
}

/// Reads what `monitor` holds without waiting; true if a disconnect was among it.
fn drain_disconnects(monitor: &zmq::Socket) -> bool {
    let mut disconnected = false;
    while let Ok(parts) = monitor.recv_multipart(zmq::DONTWAIT) {
        disconnected |= monitor_event(&parts) == Some(zmq::SocketEvent::DISCONNECTED as u16);
    }
    disconnected
}

impl ReqSocket {
    /// A socket for `uri` (`tcp://master:ret_port`); nothing connects until the first request.
    pub fn new(ctx: &zmq::Context, uri: String, settings: &Settings) -> ReqSocket {
        ReqSocket {
            ctx: ctx.clone(),
            ipv6: uri.contains('['),
            uri,
            keepalive: settings.clone(),
            sock: None,
        }
    }

    /// A new socket to the same address with the same options, not connected yet.
    pub fn sibling(&self) -> ReqSocket {
        ReqSocket {
            ctx: self.ctx.clone(),
            uri: self.uri.clone(),
            ipv6: self.ipv6,
            keepalive: self.keepalive.clone(),
            sock: None,
        }
    }

    fn open(&self) -> Result<Connected, Error> {
        let sock = self.ctx.socket(zmq::REQ).map_err(zerr("create REQ"))?;
        sock.set_linger(0).map_err(zerr("linger"))?;
        sock.set_reconnect_ivl_max(5000)
            .map_err(zerr("reconnect"))?;
        sock.set_ipv6(self.ipv6).map_err(zerr("ipv6"))?;
        keepalive(&sock, &self.keepalive)?;
        let ep = monitor_endpoint();
        sock.monitor(&ep, zmq::SocketEvent::DISCONNECTED as i32)
            .map_err(zerr("monitor"))?;
        let monitor = self.ctx.socket(zmq::PAIR).map_err(zerr("create monitor"))?;
        monitor.connect(&ep).map_err(zerr("connect monitor"))?;
        sock.connect(&self.uri).map_err(zerr("connect"))?;
        Ok(Connected { sock, monitor })
    }

    /// Sends one request body and waits up to `timeout` for the reply.
    pub fn request(&mut self, body: &[u8], timeout: Duration) -> Result<Vec<u8>, Error> {
        self.request_until(body, timeout, &|| false)
    }

    /// [`request`](Self::request), giving up with [`Error::Interrupted`] as soon as
    /// `abort` returns true (checked every [`ABORT_CHECK`] while waiting).
    pub fn request_until(
        &mut self,
        body: &[u8],
        timeout: Duration,
        abort: &dyn Fn() -> bool,
    ) -> Result<Vec<u8>, Error> {
        let result = self.exchange(body, timeout, abort);
        if result.is_err() {
            self.sock = None;
        }
        result
    }

    fn exchange(
        &mut self,
        body: &[u8],
        timeout: Duration,
        abort: &dyn Fn() -> bool,
    ) -> Result<Vec<u8>, Error> {
        if self.sock.is_none() {
            self.sock = Some(self.open()?);
        }
        let timed_out = || Error::Timeout {
            uri: self.uri.clone(),
            after: timeout,
        };
        let Some(Connected { sock, monitor }) = self.sock.as_ref() else {
            return Err(timed_out());
        };
        // A disconnect reported before this request concerns an earlier one; libzmq
        // connects again and sends this request on the new connection.
        drain_disconnects(monitor);
        sock.send(body, 0).map_err(zerr("send"))?;
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if abort() {
                return Err(Error::Interrupted);
            }
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => ABORT_CHECK,
            };
            if left.is_zero() {
                return Err(timed_out());
            }
            let ms = i64::try_from(left.min(ABORT_CHECK).as_millis()).unwrap_or(i64::MAX);
            let mut items = [
                sock.as_poll_item(zmq::POLLIN),
                monitor.as_poll_item(zmq::POLLIN),
            ];
            zmq::poll(&mut items, ms).map_err(zerr("poll"))?;
            if items[0].is_readable() {
                return sock.recv_bytes(0).map_err(zerr("recv"));
            }
            if items[1].is_readable() && drain_disconnects(monitor) {
                return Err(Error::Disconnected {
                    uri: self.uri.clone(),
                });
            }
        }
    }
}

/// What the publish socket had to say.
#[derive(Debug)]
pub enum PubEvent {
    /// One frame from the master.
    Frame(Vec<u8>),
    /// The connection to the master dropped (socket monitor `EVENT_DISCONNECTED`).
    Disconnected,
}

/// The SUB socket to the master's publish port, subscribed to everything.
pub struct Subscription {
    sub: zmq::Socket,
    monitor: Option<zmq::Socket>,
    /// A disconnect [`Subscription::wait_ready`] read off the monitor, for the next poll.
    lost_early: std::cell::Cell<bool>,
}

/// How [`Subscription::wait_ready`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// The ZMTP handshake with the publisher completed: publishes from now on arrive.
    Ready,
    /// Not known to be up within the wait (or no monitor to tell).
    Unknown,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if self.monitor.is_some() {
            stop_monitor(&mut self.sub);
        }
    }
}

impl Subscription {
    /// Connects to `uri` as `PublishClient._legacy_setup/connect` does: identity = the
    /// minion id, reconnect interval `recon_default` (randomised up to `recon_max`),
    /// keepalive, and a monitor when `zmq_monitor` is on.
    pub fn connect(
        ctx: &zmq::Context,
        uri: &str,
        settings: &Settings,
    ) -> Result<Subscription, Error> {
        let sub = ctx.socket(zmq::SUB).map_err(zerr("create SUB"))?;
        sub.set_linger(1).map_err(zerr("linger"))?;
        sub.set_identity(settings.id.as_bytes())
            .map_err(zerr("identity"))?;
        let recon = if settings.recon_randomize && settings.recon_max > 0 {
            settings
                .recon_default
                .saturating_add(crate::random_below(settings.recon_max as u64) as i32)
        } else {
            settings.recon_default
        };
        sub.set_reconnect_ivl(recon.max(0))
            .map_err(zerr("reconnect"))?;
        sub.set_reconnect_ivl_max(settings.recon_max.max(0))
            .map_err(zerr("reconnect"))?;
        sub.set_ipv6(uri.contains('[')).map_err(zerr("ipv6"))?;
        keepalive(&sub, settings)?;
        // ZMTP heartbeats: a master that vanished, hung or was cut off without closing
        // the connection is detected, and reported as a disconnect.
        let beat = Heartbeat::for_alive_interval(settings.master_alive_interval);
        sub.set_heartbeat_ivl(Heartbeat::millis(beat.ivl))
            .map_err(zerr("heartbeat"))?;
        sub.set_heartbeat_timeout(Heartbeat::millis(beat.timeout))
            .map_err(zerr("heartbeat"))?;
        sub.set_subscribe(b"").map_err(zerr("subscribe"))?;
        sub.set_maxmsgsize(PUBLISH_MAX_MSG_SIZE)
            .map_err(zerr("maxmsgsize"))?;
        let monitor = if settings.zmq_monitor {
            let ep = monitor_endpoint();
            let events = zmq::SocketEvent::DISCONNECTED as i32
                | zmq::SocketEvent::HANDSHAKE_SUCCEEDED as i32;
            sub.monitor(&ep, events).map_err(zerr("monitor"))?;
            let mon = ctx.socket(zmq::PAIR).map_err(zerr("create monitor"))?;
            mon.connect(&ep).map_err(zerr("connect monitor"))?;
            Some(mon)
        } else {
            None
        };
        sub.connect(uri).map_err(zerr("connect"))?;
        Ok(Subscription {
            sub,
            monitor,
            lost_early: std::cell::Cell::new(false),
        })
    }

    /// Waits up to `wait` for the handshake with the publisher, so that what the minion
    /// announces next (`salt/minion/<id>/start`) means its publishes reach it: a publish
    /// sent before a subscriber's connection is up is not delivered to it (PUB/SUB). Without
    /// a monitor (`zmq_monitor: False`) there is nothing to wait on.
    pub fn wait_ready(&self, wait: Duration) -> Readiness {
        let Some(mon) = &self.monitor else {
            return Readiness::Unknown;
        };
        let deadline = Instant::now() + wait;
        loop {
            while let Ok(parts) = mon.recv_multipart(zmq::DONTWAIT) {
                match monitor_event(&parts) {
                    Some(e) if e == zmq::SocketEvent::HANDSHAKE_SUCCEEDED as u16 => {
                        return Readiness::Ready
                    }
                    Some(e) if e == zmq::SocketEvent::DISCONNECTED as u16 => {
                        self.lost_early.set(true);
                        return Readiness::Unknown;
                    }
                    _ => {}
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Readiness::Unknown;
            }
            let ms = i64::try_from(left.as_millis()).unwrap_or(i64::MAX);
            let mut items = [mon.as_poll_item(zmq::POLLIN)];
            if zmq::poll(&mut items, ms).is_err() {
                return Readiness::Unknown;
            }
        }
    }

    /// Waits up to `wait` and returns what arrived (possibly nothing).
    pub fn poll(&self, wait: Duration) -> Result<Vec<PubEvent>, Error> {
        let ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
        let mut items = vec![self.sub.as_poll_item(zmq::POLLIN)];
        if let Some(mon) = &self.monitor {
            items.push(mon.as_poll_item(zmq::POLLIN));
        }
        zmq::poll(&mut items, ms).map_err(zerr("poll"))?;
        let mut out = Vec::new();
        if self.lost_early.take() {
            out.push(PubEvent::Disconnected);
        }
        if items[0].is_readable() {
            while let Ok(parts) = self.sub.recv_multipart(zmq::DONTWAIT) {
                // Salt's PublishClient reads frame by frame: a topic frame (zmq_filtering)
                // is handed to the decoder on its own and dropped there.
                out.extend(parts.into_iter().map(PubEvent::Frame));
            }
        }
        if let Some(mon) = self
            .monitor
            .as_ref()
            .filter(|_| items.get(1).is_some_and(|i| i.is_readable()))
        {
            if drain_disconnects(mon) {
                out.push(PubEvent::Disconnected);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn master_values_split_like_salts_prep_ip_port() {
        for (master, want) in [
            ("salt", ("salt", 4506)),
            ("10.0.0.1:4606", ("10.0.0.1", 4606)),
            ("[::1]:4606", ("::1", 4606)),
            ("[::1]", ("::1", 4506)),
            ("fe80::1", ("fe80::1", 4506)),
            ("host:notaport", ("host:notaport", 4506)),
        ] {
            let (h, p) = split_master(master, 4506);
            assert_eq!((h.as_str(), p), want, "{master}");
        }
    }

    #[test]
    fn uris_bracket_ipv6() {
        let v4 = MasterAddr {
            ip: "127.0.0.1".parse().unwrap(),
            ret_port: 1,
        };
        let v6 = MasterAddr {
            ip: "::1".parse().unwrap(),
            ret_port: 1,
        };
        assert_eq!(v4.uri(4505), "tcp://127.0.0.1:4505");
        assert_eq!(v6.uri(4505), "tcp://[::1]:4505");
    }

    #[test]
    fn request_to_a_silent_master_times_out_and_the_socket_is_replaced() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let cfg = halite_config::MinionConfig::from_yaml_str(
            "id: t\n",
            std::path::Path::new("/tmp/x/minion"),
        )
        .unwrap();
        let settings = Settings::from_config(&cfg).unwrap();
        let ctx = zmq::Context::new();
        let mut req = ReqSocket::new(&ctx, format!("tcp://127.0.0.1:{port}"), &settings);
        let err = req.request(b"x", Duration::from_millis(100)).unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!("SaltReqTimeoutError: Message timed out: no reply from tcp://127.0.0.1:{port} within 0.1 s")
        );
        assert!(req.sock.is_none());
    }

    #[test]
    fn a_request_is_abandoned_as_soon_as_its_caller_gives_up() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let cfg = halite_config::MinionConfig::from_yaml_str(
            "id: t\n",
            std::path::Path::new("/tmp/x/minion"),
        )
        .unwrap();
        let settings = Settings::from_config(&cfg).unwrap();
        let ctx = zmq::Context::new();
        let mut req = ReqSocket::new(&ctx, format!("tcp://127.0.0.1:{port}"), &settings);
        let start = Instant::now();
        let give_up = start + Duration::from_millis(150);
        let result = req.request_until(b"x", Duration::from_secs(60), &|| Instant::now() > give_up);
        assert!(matches!(result, Err(Error::Interrupted)), "{result:?}");
        assert!(start.elapsed() < Duration::from_secs(5));
        assert!(req.sock.is_none());
    }

    #[test]
    fn a_request_whose_connection_closes_fails_at_once_and_the_next_one_goes_through() {
        let s = settings("");
        let ctx = zmq::Context::new();
        let router = ctx.socket(zmq::ROUTER).unwrap();
        router.set_linger(0).unwrap();
        router.bind("tcp://127.0.0.1:*").unwrap();
        let uri = router.get_last_endpoint().unwrap().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let master = std::thread::spawn(move || {
            // Takes the request and goes away without answering, as a stopping master.
            let got = router.recv_multipart(0).unwrap();
            tx.send(got.last().cloned().unwrap()).unwrap();
            drop(router);
        });
        let mut req = ReqSocket::new(&ctx, uri.clone(), &s);
        let start = Instant::now();
        let err = req.request(b"lost", Duration::from_secs(60)).unwrap_err();
        let took = start.elapsed();
        assert!(
            matches!(&err, Error::Disconnected { uri: u } if *u == uri),
            "{err:?}"
        );
        assert!(took < Duration::from_secs(30), "waited {took:?}");
        assert_eq!(rx.recv().unwrap(), b"lost");
        master.join().unwrap();
        eprintln!("MEASURED a lost request failed after {took:?}");

        // A master on the same address again: the same ReqSocket reaches it.
        let router = ctx.socket(zmq::ROUTER).unwrap();
        router.set_linger(0).unwrap();
        router.bind(&uri).unwrap();
        let master = std::thread::spawn(move || {
            let got = router.recv_multipart(0).unwrap();
            router.send_multipart(&got, 0).unwrap();
        });
        assert_eq!(
            req.request(b"again", Duration::from_secs(60)).unwrap(),
            b"again"
        );
        master.join().unwrap();
    }

    fn settings(yaml: &str) -> Settings {
        let cfg = halite_config::MinionConfig::from_yaml_str(
            &format!("id: t\n{yaml}"),
            std::path::Path::new("/tmp/x/minion"),
        )
        .unwrap();
        Settings::from_config(&cfg).unwrap()
    }

    #[test]
    fn heartbeats_follow_master_alive_interval() {
        assert_eq!(
            Heartbeat::for_alive_interval(Duration::from_secs(3)),
            Heartbeat {
                ivl: Duration::from_secs(1),
                timeout: Duration::from_secs(2)
            }
        );
        assert_eq!(
            Heartbeat::for_alive_interval(Duration::ZERO),
            Heartbeat {
                ivl: Duration::from_secs(10),
                timeout: Duration::from_secs(30)
            }
        );
        assert_eq!(
            Heartbeat::for_alive_interval(Duration::from_millis(1)).timeout,
            MIN_ALIVE * 2 / 3
        );
    }

    #[test]
    fn unresolvable_names_fall_back_retry_or_give_up_as_configured() {
        let stop = Shutdown::new();
        let host = "no-such-master.invalid";
        let s = settings("retry_dns: 0\n");
        assert_eq!(
            resolve(host, 4506, &s, &stop, true),
            Resolved::Found(MasterAddr {
                ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
                ret_port: 4506
            })
        );
        assert_eq!(
            resolve(host, 4506, &s, &stop, false),
            Resolved::Unresolvable
        );
        let s = settings("retry_dns: 0.05\nretry_dns_count: 2\n");
        let start = Instant::now();
        assert_eq!(resolve(host, 4506, &s, &stop, true), Resolved::Unresolvable);
        assert!(start.elapsed() >= Duration::from_millis(100));
        assert_eq!(resolve_master(&s, &stop), None);
        let s = settings("retry_dns: 60\n");
        stop.stop();
        assert_eq!(resolve(host, 4506, &s, &stop, true), Resolved::Stopped);
        assert!(matches!(
            resolve("127.0.0.1", 4606, &s, &stop, false),
            Resolved::Found(MasterAddr { ret_port: 4606, .. })
        ));
        assert_eq!(
            unresolvable_message(""),
            "Master address: 'unknown address' could not be resolved. Invalid or unresolveable address. Set 'master' value in minion config."
        );
    }

    #[test]
    fn ping_master_is_true_only_when_the_master_answers() {
        let s = settings("");
        let ctx = zmq::Context::new();
        let rep = ctx.socket(zmq::REP).unwrap();
        rep.bind("tcp://127.0.0.1:*").unwrap();
        let uri = rep.get_last_endpoint().unwrap().unwrap();
        let server = std::thread::spawn(move || {
            let got = rep.recv_bytes(0).unwrap();
            rep.send(&got, 0).unwrap();
            halite_proto::value::decode(&got).unwrap()
        });
        assert!(ping_master(
            &ctx,
            uri.clone(),
            &s,
            Duration::from_secs(10),
            &|| false
        ));
        let load = server.join().unwrap();
        assert_eq!(
            halite_proto::value::get(&load, "load")
                .and_then(|l| halite_proto::value::get_str(l, "cmd")),
            Some("ping")
        );
        // Nothing answers any more.
        assert!(!ping_master(
            &ctx,
            uri,
            &s,
            Duration::from_millis(200),
            &|| false
        ));
    }

    /// A TCP relay between a subscriber and a publisher that can freeze: it stops moving
    /// bytes but keeps both connections open, as a master stopped with SIGSTOP does.
    struct Relay {
        port: u16,
        frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
    }

    impl Relay {
        fn start(to: u16) -> Relay {
            use std::io::{Read, Write};
            use std::sync::atomic::AtomicBool;
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            let frozen = std::sync::Arc::new(AtomicBool::new(false));
            let f = frozen.clone();
            std::thread::spawn(move || {
                for client in listener.incoming() {
                    let Ok(client) = client else { return };
                    let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", to)) else {
                        return;
                    };
                    for (mut from, mut into) in [
                        (client.try_clone().unwrap(), server.try_clone().unwrap()),
                        (server, client),
                    ] {
                        let f = f.clone();
                        std::thread::spawn(move || {
                            let mut buf = [0u8; 4096];
                            loop {
                                let n = match from.read(&mut buf) {
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => n,
                                };
                                while f.load(Ordering::SeqCst) {
                                    std::thread::sleep(Duration::from_millis(10));
                                }
                                if into.write_all(&buf[..n]).is_err() {
                                    return;
                                }
                            }
                        });
                    }
                }
            });
            Relay { port, frozen }
        }
    }

    /// Publishes `hello` until `sub` receives it (up to 100 tries, 50 ms each).
    fn comes_through(publisher: &zmq::Socket, sub: &Subscription) -> bool {
        (0..100).any(|_| {
            publisher.send("hello", 0).unwrap();
            sub.poll(Duration::from_millis(50))
                .unwrap()
                .iter()
                .any(|e| matches!(e, PubEvent::Frame(f) if f == b"hello"))
        })
    }

    #[test]
    fn wait_ready_reports_the_publish_handshake_and_only_it() {
        let ctx = zmq::Context::new();
        // Nothing listens: not ready, however long the minion would wait.
        let closed = halite_testkit::free_ports(1)[0];
        let s = settings("");
        let sub = Subscription::connect(&ctx, &format!("tcp://127.0.0.1:{closed}"), &s).unwrap();
        assert_eq!(
            sub.wait_ready(Duration::from_millis(300)),
            Readiness::Unknown
        );
        // A publisher: ready once the handshake is done, and publishes come through.
        let publisher = ctx.socket(zmq::PUB).unwrap();
        publisher.bind("tcp://127.0.0.1:*").unwrap();
        let endpoint = publisher.get_last_endpoint().unwrap().unwrap();
        let sub = Subscription::connect(&ctx, &endpoint, &s).unwrap();
        let started = Instant::now();
        assert_eq!(sub.wait_ready(Duration::from_secs(30)), Readiness::Ready);
        eprintln!("MEASURED publish handshake after {:?}", started.elapsed());
        let through = comes_through(&publisher, &sub);
        assert!(through, "no publish came through");
        // Without a monitor there is nothing to wait on.
        let unmonitored = settings("zmq_monitor: false\n");
        let sub = Subscription::connect(&ctx, &endpoint, &unmonitored).unwrap();
        assert_eq!(sub.wait_ready(Duration::from_secs(30)), Readiness::Unknown);
    }

    #[test]
    fn a_frozen_publisher_is_reported_lost_by_the_heartbeat() {
        let ctx = zmq::Context::new();
        let publisher = ctx.socket(zmq::PUB).unwrap();
        publisher.bind("tcp://127.0.0.1:*").unwrap();
        let endpoint = publisher.get_last_endpoint().unwrap().unwrap();
        let pub_port: u16 = endpoint.rsplit(':').next().unwrap().parse().unwrap();
        let relay = Relay::start(pub_port);
        let s = settings("master_alive_interval: 1.5\n");
        let sub =
            Subscription::connect(&ctx, &format!("tcp://127.0.0.1:{}", relay.port), &s).unwrap();
        // The link works: a publish comes through.
        let through = comes_through(&publisher, &sub);
        assert!(through, "no publish came through the relay");
        // Several heartbeat periods pass without a false alarm.
        let quiet_until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < quiet_until {
            let events = sub.poll(Duration::from_millis(100)).unwrap();
            assert!(!events.iter().any(|e| matches!(e, PubEvent::Disconnected)));
        }
        relay.frozen.store(true, Ordering::SeqCst);
        let frozen_at = Instant::now();
        let lost = loop {
            let events = sub.poll(Duration::from_millis(50)).unwrap();
            if events.iter().any(|e| matches!(e, PubEvent::Disconnected)) {
                break frozen_at.elapsed();
            }
            assert!(
                frozen_at.elapsed() < Duration::from_secs(10),
                "never reported"
            );
        };
        // PING every 0.5 s, lost after 1 s of silence: within 1.5 s (plus scheduling).
        relay.frozen.store(false, Ordering::SeqCst);
        assert!(lost <= Duration::from_millis(1800), "{lost:?}");
        assert!(lost >= Duration::from_millis(900), "{lost:?}");
        eprintln!("frozen publisher reported lost after {lost:?}");
    }
}
