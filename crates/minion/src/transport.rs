//! ZeroMQ sockets toward the master, set up as Salt's minion sets them up
//! (`salt/transport/zeromq.py`): a REQ socket to `ret_port` that is thrown away after a
//! timeout (so a late reply can never answer the next request), and a SUB socket to
//! `publish_port` with a socket monitor that reports disconnects.

use crate::settings::Settings;
use crate::shutdown::Shutdown;
use crate::Error;
use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs};
use std::time::{Duration, Instant};

/// How often a waiting request checks whether it should give up.
pub const ABORT_CHECK: Duration = Duration::from_millis(100);

/// Interval of the ZMTP heartbeats the publish socket sends (Salt's master default
/// `zmq_heartbeat_ivl`).
pub const HEARTBEAT_IVL_MS: i32 = 10_000;
/// Silence after which the publish connection counts as lost (Salt's master default
/// `zmq_heartbeat_timeout`).
pub const HEARTBEAT_TIMEOUT_MS: i32 = 30_000;

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

/// `resolve_dns`: resolves the first configured master, retrying every `retry_dns` seconds
/// while the name does not resolve; with `retry_dns: 0` falls back to 127.0.0.1 as Salt
/// does. `None` when `stop` fired while waiting.
pub fn resolve_master(settings: &Settings, stop: &Shutdown) -> Option<MasterAddr> {
    let (host, port) = split_master(&settings.master, settings.master_port);
    loop {
        let found = (host.as_str(), port)
            .to_socket_addrs()
            .ok()
            .and_then(|addrs| {
                let addrs: Vec<_> = addrs.collect();
                let want_v6 = settings.ipv6 == Some(true);
                addrs
                    .iter()
                    .find(|a| a.is_ipv6() == want_v6)
                    .or(addrs.first())
                    .copied()
            });
        if let Some(addr) = found {
            return Some(MasterAddr {
                ip: addr.ip(),
                ret_port: port,
            });
        }
        if settings.retry_dns.is_zero() {
            tracing::error!("Master hostname: '{host}' not found. Falling back to 127.0.0.1");
            return Some(MasterAddr {
                ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
                ret_port: port,
            });
        }
        tracing::error!(
            "Master hostname: '{host}' not found or not responsive. Retrying in {} seconds",
            settings.retry_dns.as_secs()
        );
        if stop.sleep(settings.retry_dns) {
            return None;
        }
    }
}

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
pub struct ReqSocket {
    ctx: zmq::Context,
    uri: String,
    ipv6: bool,
    keepalive: Settings,
    sock: Option<zmq::Socket>,
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

    fn open(&self) -> Result<zmq::Socket, Error> {
        let sock = self.ctx.socket(zmq::REQ).map_err(zerr("create REQ"))?;
        sock.set_linger(0).map_err(zerr("linger"))?;
        sock.set_reconnect_ivl_max(5000)
            .map_err(zerr("reconnect"))?;
        sock.set_ipv6(self.ipv6).map_err(zerr("ipv6"))?;
        keepalive(&sock, &self.keepalive)?;
        sock.connect(&self.uri).map_err(zerr("connect"))?;
        Ok(sock)
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
        let Some(sock) = self.sock.as_ref() else {
            return Err(Error::Timeout(timeout));
        };
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
                return Err(Error::Timeout(timeout));
            }
            let ms = i64::try_from(left.min(ABORT_CHECK).as_millis()).unwrap_or(i64::MAX);
            if sock.poll(zmq::POLLIN, ms).map_err(zerr("poll"))? > 0 {
                return sock.recv_bytes(0).map_err(zerr("recv"));
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
        // ZMTP heartbeats: a master that vanished without closing the connection is
        // detected (and reported as a disconnect) after HEARTBEAT_TIMEOUT_MS.
        sub.set_heartbeat_ivl(HEARTBEAT_IVL_MS)
            .map_err(zerr("heartbeat"))?;
        sub.set_heartbeat_timeout(HEARTBEAT_TIMEOUT_MS)
            .map_err(zerr("heartbeat"))?;
        sub.set_subscribe(b"").map_err(zerr("subscribe"))?;
        let monitor = if settings.zmq_monitor {
            let ep = format!("inproc://halite-minion-monitor-{:p}", &sub as *const _);
            sub.monitor(&ep, zmq::SocketEvent::DISCONNECTED as i32)
                .map_err(zerr("monitor"))?;
            let mon = ctx.socket(zmq::PAIR).map_err(zerr("create monitor"))?;
            mon.connect(&ep).map_err(zerr("connect monitor"))?;
            Some(mon)
        } else {
            None
        };
        sub.connect(uri).map_err(zerr("connect"))?;
        Ok(Subscription { sub, monitor })
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
            while let Ok(parts) = mon.recv_multipart(zmq::DONTWAIT) {
                let event = parts
                    .first()
                    .and_then(|f| f.get(..2))
                    .map(|b| u16::from_le_bytes([b[0], b[1]]));
                if event == Some(zmq::SocketEvent::DISCONNECTED as u16) {
                    out.push(PubEvent::Disconnected);
                }
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
        assert!(matches!(
            req.request(b"x", Duration::from_millis(100)),
            Err(Error::Timeout(_))
        ));
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
}
