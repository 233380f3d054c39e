//! The request pool: a fixed number of REQ connections to the master's request port shared
//! by every simulated minion.
//!
//! Each connection carries one request at a time, like a REQ socket; a request that times
//! out or fails drops its connection (a late reply must never answer the next request) and
//! the next request on that slot reconnects with a fresh routing identity (with
//! `ROUTER_HANDOVER` a reused identity would inherit the stale reply).
//!
//! Deviation from a real minion, for scale: a stock minion opens a request connection per
//! request channel, so the master sees a TCP connection (and a ZMTP handshake) per minion
//! and often per return. Here the master sees at most `size` request connections; it
//! receives exactly the same requests. The master's listening socket and connection
//! handling are therefore exercised less than by real minions, its request handling the
//! same.

use crate::zmtp::{Conn, SocketType};
use crate::Error;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, Mutex};

/// How long a connection attempt (TCP + ZMTP handshake) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Pause after a failed connection attempt before the slot takes the next request.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);

struct Job {
    body: Vec<u8>,
    timeout: Duration,
    reply: oneshot::Sender<Result<Vec<u8>, Error>>,
}

/// A handle to the pool; cheap to clone.
#[derive(Clone)]
pub struct ReqPool {
    tx: mpsc::Sender<Job>,
}

impl ReqPool {
    /// Starts `size` connection slots to `addr` (`host:port`). Connections are opened on
    /// first use. Must be called inside a tokio runtime.
    pub fn start(addr: String, size: usize) -> ReqPool {
        let (tx, rx) = mpsc::channel::<Job>(size.max(1) * 4);
        let rx = Arc::new(Mutex::new(rx));
        let addr = Arc::new(addr);
        for slot in 0..size.max(1) {
            tokio::spawn(run_slot(addr.clone(), slot, rx.clone()));
        }
        ReqPool { tx }
    }

    /// Sends `body` and waits for the reply; `timeout` runs from the moment the request is
    /// on the wire (waiting for a free connection is not counted).
    pub async fn request(&self, body: Vec<u8>, timeout: Duration) -> Result<Vec<u8>, Error> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job {
                body,
                timeout,
                reply,
            })
            .await
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }
}

async fn run_slot(addr: Arc<String>, slot: usize, rx: Arc<Mutex<mpsc::Receiver<Job>>>) {
    let mut conn: Option<Conn> = None;
    let mut generation = 0u64;
    loop {
        let job = { rx.lock().await.recv().await };
        let Some(job) = job else { return };
        if job.reply.is_closed() {
            continue;
        }
        if conn.is_none() {
            generation += 1;
            let identity = format!(
                "salt-req/minion/halite-swarm/{}/{slot}/{generation}",
                std::process::id()
            );
            match Conn::connect(&addr, SocketType::Req, identity.as_bytes(), CONNECT_TIMEOUT).await
            {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    let _ = job.reply.send(Err(e));
                    tokio::time::sleep(RECONNECT_PAUSE).await;
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        let result = exchange(c, &job.body, job.timeout).await;
        if result.is_err() {
            conn = None;
        }
        let _ = job.reply.send(result);
    }
}

/// One REQ exchange: `["", body]` out, `["", reply]` back.
async fn exchange(conn: &mut Conn, body: &[u8], timeout: Duration) -> Result<Vec<u8>, Error> {
    conn.send(&[b"", body]).await?;
    let mut frames = tokio::time::timeout(timeout, conn.recv())
        .await
        .map_err(|_| Error::Timeout(timeout))??;
    match frames.len() {
        2 if frames[0].is_empty() => Ok(frames.swap_remove(1)),
        n => Err(Error::Zmtp(format!(
            "a reply of {n} frames is not a REQ reply"
        ))),
    }
}
