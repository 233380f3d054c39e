//! Client side of the request channel: one REQ exchange, as Salt's `RequestClient` does it.
//!
//! Blocking by design: the CLIs make one request and wait; async callers run it on
//! `tokio::task::spawn_blocking`. Each call uses a fresh socket so a late reply to a
//! timed-out request can never be mistaken for the next one (Salt recreates its socket on
//! timeout for the same reason).

use crate::Error;
use std::time::Duration;

/// Sends `body` to `endpoint` (`tcp://host:port`) on a REQ socket and waits for the reply.
pub fn request(
    ctx: &zmq::Context,
    endpoint: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>, Error> {
    let sock = ctx.socket(zmq::REQ).map_err(Error::zmq("create REQ"))?;
    sock.set_linger(0).map_err(Error::zmq("linger"))?;
    if endpoint.contains('[') {
        sock.set_ipv6(true).map_err(Error::zmq("ipv6"))?;
    }
    sock.connect(endpoint)
        .map_err(Error::zmq(format!("connect {endpoint}")))?;
    sock.send(body, 0).map_err(Error::zmq("send"))?;
    let ms = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
    if sock.poll(zmq::POLLIN, ms).map_err(Error::zmq("poll"))? == 0 {
        return Err(Error::Timeout(timeout));
    }
    sock.recv_bytes(0).map_err(Error::zmq("recv"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zeromq::{ZmqServer, ZmqServerConfig};
    use crate::ServerTransport;

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn request_is_answered_and_publish_reaches_subscribers() {
        let (ret, publ) = (free_port(), free_port());
        let (server, mut rx) =
            ZmqServer::bind(&ZmqServerConfig::new("127.0.0.1", false, ret, publ)).unwrap();
        let ctx = zmq::Context::new();
        let sub = ctx.socket(zmq::SUB).unwrap();
        sub.set_subscribe(b"").unwrap();
        sub.connect(&format!("tcp://127.0.0.1:{publ}")).unwrap();

        let client_ctx = ctx.clone();
        let req = tokio::task::spawn_blocking(move || {
            request(
                &client_ctx,
                &format!("tcp://127.0.0.1:{ret}"),
                b"ping",
                Duration::from_secs(10),
            )
        });
        let inc = rx.recv().await.unwrap();
        assert_eq!(&*inc.body, b"ping");
        server.reply(inc.peer, b"pong".to_vec()).unwrap();
        assert_eq!(req.await.unwrap().unwrap(), b"pong");

        // PUB/SUB joins asynchronously: publish until the subscriber sees a frame.
        let got = tokio::task::spawn_blocking(move || {
            sub.set_rcvtimeo(100).unwrap();
            for _ in 0..100 {
                if let Ok(m) = sub.recv_bytes(0) {
                    return Some(m);
                }
            }
            None
        });
        for _ in 0..100 {
            server.publish(b"frame".to_vec()).unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            if got.is_finished() {
                break;
            }
        }
        assert_eq!(got.await.unwrap().as_deref(), Some(&b"frame"[..]));
        server.shutdown();
    }

    #[test]
    fn request_to_a_silent_port_times_out() {
        let ctx = zmq::Context::new();
        let port = free_port();
        let err = request(
            &ctx,
            &format!("tcp://127.0.0.1:{port}"),
            b"x",
            Duration::from_millis(200),
        )
        .unwrap_err();
        assert!(matches!(err, Error::Timeout(_)));
    }
}
