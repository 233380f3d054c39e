//! The HTTP side of the API benchmark: where the API is, one keep-alive HTTP/1.1
//! connection per simulated client (hyper's low-level client: no pool, so a client's
//! requests go one after another on its own connection, as a script's or a dashboard's
//! would), `/login`, and the check of a `local` reply.

use crate::Error;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1;
use hyper::{header, Method, Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value as Json};
use std::net::SocketAddr;
use tokio::net::TcpStream;

/// An API base URL: `http://HOST:PORT[/prefix]` (plain HTTP only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The address connected to.
    pub addr: SocketAddr,
    /// The `Host` header.
    pub host: String,
    /// The path prefix without its trailing `/` (`""` for the root).
    pub prefix: String,
}

impl Target {
    /// Parses `http://HOST:PORT[/prefix]`; HOST must be an IP address (the benchmark only
    /// talks to loopback, and a name lookup would be one more thing to time).
    pub fn parse(url: &str) -> Result<Target, Error> {
        let bad = |why: &str| Error::Usage(format!("--url {url:?}: {why}"));
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| bad("expected http://HOST:PORT (https is not supported)"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let addr: SocketAddr = authority
            .parse()
            .map_err(|_| bad("expected an IP address and a port"))?;
        Ok(Target {
            addr,
            host: authority.to_owned(),
            prefix: path.trim_end_matches('/').to_owned(),
        })
    }

    /// A request to `path` (starting with `/`) below the prefix.
    pub fn request(&self, method: Method, path: &str) -> hyper::http::request::Builder {
        Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.prefix))
            .header(header::HOST, &self.host)
    }
}

/// One HTTP/1.1 connection; requests on it go one at a time.
pub struct Conn {
    tx: http1::SendRequest<Full<Bytes>>,
}

fn http_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Bench(format!("{what}: {e}"))
}

impl Conn {
    /// Connects (TCP_NODELAY, as browsers and curl do) and runs the connection in a task.
    pub async fn open(target: &Target) -> Result<Conn, Error> {
        let tcp = TcpStream::connect(target.addr)
            .await
            .map_err(|e| Error::Io {
                what: format!("connecting to {}", target.addr),
                source: e,
            })?;
        let _ = tcp.set_nodelay(true);
        let (tx, conn) = http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| http_err("HTTP handshake", e))?;
        tokio::spawn(async move {
            // Ends when the peer closes or the request side is dropped.
            let _ = conn.await;
        });
        Ok(Conn { tx })
    }

    /// Sends one request and returns the response with its body unread.
    pub async fn send(&mut self, req: Request<Full<Bytes>>) -> Result<Response<Incoming>, Error> {
        self.tx
            .ready()
            .await
            .map_err(|e| http_err("connection", e))?;
        self.tx
            .send_request(req)
            .await
            .map_err(|e| http_err("request", e))
    }

    /// Sends one request and reads the whole body: the status and the body.
    pub async fn exchange(&mut self, req: Request<Full<Bytes>>) -> Result<(u16, Bytes), Error> {
        let resp = self.send(req).await?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| http_err("response body", e))?
            .to_bytes();
        Ok((status, body))
    }
}

/// A JSON `POST` to `path`, carrying `token` when given.
pub fn post_json(
    target: &Target,
    path: &str,
    token: Option<&str>,
    body: Bytes,
) -> Result<Request<Full<Bytes>>, Error> {
    let mut b = target
        .request(Method::POST, path)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json");
    if let Some(t) = token {
        b = b.header("X-Auth-Token", t);
    }
    b.body(Full::new(body))
        .map_err(|e| http_err("building a request", e))
}

/// The lowstate every `POST /` of the benchmark sends.
pub fn ping_lowstate() -> Bytes {
    Bytes::from(json!([{"client": "local", "tgt": "*", "fun": "test.ping"}]).to_string())
}

/// `POST /login` with an eauth login: the session token.
pub async fn login(
    target: &Target,
    username: &str,
    password: &str,
    eauth: &str,
) -> Result<String, Error> {
    let mut conn = Conn::open(target).await?;
    let body = json!({"username": username, "password": password, "eauth": eauth});
    let req = post_json(target, "/login", None, Bytes::from(body.to_string()))?;
    let (status, body) = conn.exchange(req).await?;
    let doc: Json = serde_json::from_slice(&body).unwrap_or(Json::Null);
    match (status, doc["return"][0]["token"].as_str()) {
        (200, Some(token)) => Ok(token.to_owned()),
        _ => Err(Error::Bench(format!(
            "login as {username} ({eauth}): {status} {}",
            String::from_utf8_lossy(&body)
                .chars()
                .take(300)
                .collect::<String>()
        ))),
    }
}

/// Whether a `local` reply holds exactly `minions` minions and every one said `true`.
pub fn all_true(body: &[u8], minions: usize) -> bool {
    let Ok(doc) = serde_json::from_slice::<Json>(body) else {
        return false;
    };
    match doc["return"][0].as_object() {
        Some(ret) => ret.len() == minions && ret.values().all(|v| *v == Json::Bool(true)),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_plain_http_with_an_ip_and_an_optional_prefix() {
        let t = Target::parse("http://127.0.0.1:8000").unwrap();
        assert_eq!(t.addr, "127.0.0.1:8000".parse().unwrap());
        assert_eq!((t.host.as_str(), t.prefix.as_str()), ("127.0.0.1:8000", ""));
        let t = Target::parse("http://127.0.0.1:8000/api/").unwrap();
        assert_eq!(t.prefix, "/api");
        let uri = t.request(Method::GET, "/events").body(()).unwrap();
        assert_eq!(uri.uri(), "/api/events");
        for bad in [
            "https://127.0.0.1:1",
            "127.0.0.1:1",
            "http://localhost:8000",
            "http://1.2.3.4",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_reply_counts_only_with_every_minion_true() {
        let ok = br#"{"return": [{"m1": true, "m2": true}]}"#;
        assert!(all_true(ok, 2));
        assert!(!all_true(ok, 3), "a minion missing");
        assert!(!all_true(br#"{"return": [{"m1": true, "m2": false}]}"#, 2));
        assert!(!all_true(
            br#"{"return": [{"m1": true, "m2": "Minion did not return"}]}"#,
            2
        ));
        assert!(!all_true(br#"{"return": ["x"]}"#, 0));
        assert!(!all_true(b"<html>500</html>", 0));
    }
}
