//! Talking to a running bus from outside the daemon, as `salt.utils.event` does:
//! subscribe to the pub socket (`get_event`) or push one event into the pull socket
//! (`fire_event`).

use crate::event::{frame_limit, prepare, Event, DEFAULT_MAX_EVENT_SIZE};
use crate::socket::Conn;
use crate::{BusAddr, Error, Result, GAP_TAG};
use chrono::Utc;
use halite_proto::event::{decode_pub_stream, frame_pull, unpack_event, Frame};
use halite_proto::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::warn;

/// Bytes asked of the kernel per read.
const READ_CHUNK: usize = 64 * 1024;

/// Client settings for one bus; the default uses Salt's default `max_event_size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusClient {
    max_event_size: usize,
}

impl Default for BusClient {
    fn default() -> Self {
        BusClient {
            max_event_size: DEFAULT_MAX_EVENT_SIZE,
        }
    }
}

impl BusClient {
    /// A client for a bus configured with this `max_event_size`: fired data is trimmed to
    /// it, and received frames over [`frame_limit`]`(max_event_size)` are refused.
    pub fn new(max_event_size: usize) -> Self {
        BusClient { max_event_size }
    }

    /// Connects to a pub socket and yields the events whose tag starts with `tag_prefix`
    /// (Salt's default `startswith` match; `""` matches everything), and every [`GAP_TAG`]
    /// event whatever its tag: the bus's word that this listener fell behind and lost
    /// `{"dropped": n}` events right there.
    pub async fn listen(&self, addr: &BusAddr, tag_prefix: &str) -> Result<Listener> {
        let conn = Conn::connect(addr).await?;
        Ok(Listener {
            conn,
            addr: addr.clone(),
            prefix: tag_prefix.to_owned(),
            limit: frame_limit(self.max_event_size),
            buf: Vec::new(),
            pos: 0,
        })
    }

    /// Connects to a pull socket, sends one event and closes, as `fire_event`: the tag must be
    /// non-empty without `"\n\n"`, data a map; `_stamp` is set and data trimmed.
    pub async fn fire(&self, addr: &BusAddr, tag: &str, data: Value) -> Result<()> {
        let event = prepare(tag, data, Utc::now(), self.max_event_size)?;
        let limit = frame_limit(self.max_event_size);
        if event.frame().len() > limit {
            return Err(Error::EventTooLarge {
                size: event.frame().len(),
                limit,
            });
        }
        let mut conn = Conn::connect(addr).await?;
        let io = |source| Error::Io {
            addr: addr.clone(),
            source,
        };
        conn.write_all(&frame_pull(event.body()))
            .await
            .map_err(io)?;
        conn.shutdown().await.map_err(io)
    }
}

/// A subscription to a pub socket.
pub struct Listener {
    conn: Conn,
    addr: BusAddr,
    prefix: String,
    limit: usize,
    /// Bytes read but not yet consumed start at `buf[pos]`.
    buf: Vec<u8>,
    pos: usize,
}

impl Listener {
    /// The next matching event; `Ok(None)` when the bus closed the connection cleanly.
    ///
    /// An event whose body does not decode is skipped with a warning. An error means the
    /// stream itself is broken (bad framing, closed mid-frame, I/O): drop the listener and
    /// reconnect. Cancel-safe: a cancelled call loses no bytes.
    pub async fn recv(&mut self) -> Result<Option<Event>> {
        loop {
            while let Frame::Complete { event, consumed } =
                decode_pub_stream(&self.buf[self.pos..], self.limit)?
            {
                self.pos += consumed;
                match unpack_event(&event) {
                    Ok((tag, data)) if tag.starts_with(&self.prefix) || tag == GAP_TAG => {
                        return Ok(Some(Event::from_body(tag, data, &event)));
                    }
                    Ok(_) => {}
                    Err(e) => {
                        warn!(bus = %self.addr, error = %e, "Skipping malformed event from the event bus")
                    }
                }
            }
            self.buf.drain(..self.pos);
            self.pos = 0;
            if self.buf.is_empty() && self.buf.capacity() > 4 * READ_CHUNK {
                self.buf = Vec::new();
            }
            self.buf.reserve(READ_CHUNK);
            let n = self
                .conn
                .read_buf(&mut self.buf)
                .await
                .map_err(|source| Error::Io {
                    addr: self.addr.clone(),
                    source,
                })?;
            if n == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(Error::Truncated {
                        addr: self.addr.clone(),
                    })
                };
            }
        }
    }
}
