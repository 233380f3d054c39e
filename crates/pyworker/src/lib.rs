//! Child Python processes that run Salt's own code, talked to over a framed msgpack pipe.
//!
//! Where Salt's Python is the specification (pillar compilation on the master, execution
//! and state modules on a minion), Halite runs it in a child process rather than
//! re-implementing it. This crate is the plumbing those users share:
//!
//! - [`find_salt_python`]: which interpreter has Salt — a configured interpreter or
//!   `salt-call`/`salt-master` script (its `#!` line names the interpreter), else
//!   `salt-call` on `PATH` — checked by running `<python> -c "import salt, msgpack"`.
//! - [`write_frame`] / [`read_frame`]: one frame is a 4-byte big-endian length and a
//!   msgpack body. Bodies are encoded with [`halite_proto::value`]'s rules (text as `str`,
//!   blobs as `bin`) and decoded within its budget, so a confused or hostile child costs
//!   at most a small multiple of the frame size, capped by the caller's `max`.
//! - [`FRAMING_PY`]: the Python side of the same framing (`read_frame(f)`,
//!   `write_frame(f, obj)`, and `take_frame_streams()`, which moves `sys.stdout` onto
//!   stderr so a stray `print` cannot corrupt the frame stream), for scripts to prepend.
//! - [`Worker`]: one child interpreter running a script given as text, stdin/stdout
//!   piped for frames, its stderr logged line by line through `tracing`; killed (with its
//!   process group) and reaped when dropped. [`Worker::recv_timeout`] bounds the wait for
//!   a reply (a hung worker is an [`Error::Timeout`], never a blocked caller forever).
//!
//! # What it does not do
//!
//! No pooling, no restart policy and no protocol beyond frames: the callers (the master's
//! pillar pool, the minion's fallback executor) decide what a frame means, how many workers
//! to keep and what to do when one dies. Nothing here imports Salt in the calling process.
//!
//! # Deviations and choices
//!
//! - The script runs with `python -c`; the empty entry that `-c` puts first on
//!   `sys.path` (the current directory) is removed before the script runs, so a `salt.py`
//!   or `msgpack.py` in the daemon's working directory is never imported. The same holds
//!   for the discovery check.
//! - Strings that are not UTF-8 cross the pipe intact: the Python side decodes and encodes
//!   `str` with `surrogateescape`.
//!
//! # Invariants
//!
//! - Nothing a child writes can panic the caller or make it allocate more than `max`
//!   bytes per frame (plus the bounded decode tree).
//! - A [`Worker`] never outlives its owner: drop kills its process group with `SIGKILL`
//!   and waits for the child, so no zombie is left. The process id stays valid (not
//!   reused) as long as the `Worker` exists.
//! - After a frame error or a timeout the stream position is unknown; the worker refuses
//!   further [`Worker::send`]/[`Worker::recv`] with [`Error::Broken`] (drop it, spawn
//!   another).

mod find;
mod frame;
mod worker;

pub use find::{find_salt_python, interpreter_of_script, IMPORT_CHECK};
pub use frame::{read_frame, write_frame, FRAMING_PY};
pub use rmpv::Value;
pub use worker::Worker;

use std::path::PathBuf;
use std::time::Duration;

/// What can go wrong finding Salt's Python or talking to a worker.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No interpreter was found; the message says what was looked for, and where.
    #[error("no Salt Python found: {looked_for}")]
    NotFound {
        /// What was looked for, and where.
        looked_for: String,
    },
    /// The interpreter was found but cannot import Salt (or msgpack).
    #[error("{} cannot import salt and msgpack ({why})", .python.display())]
    NotSalt {
        /// The interpreter.
        python: PathBuf,
        /// Its exit status and the end of its stderr.
        why: String,
    },
    /// An I/O error, with what was being done.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A frame declared more bytes than the caller allows.
    #[error("frame of {size} bytes is over the limit of {max} bytes")]
    FrameTooLarge {
        /// The declared body size.
        size: usize,
        /// The caller's limit.
        max: usize,
    },
    /// The stream ended inside a frame.
    #[error("the stream ended inside a frame ({got} of {want} bytes of the {part})")]
    Truncated {
        /// `header` or `body`.
        part: &'static str,
        /// Bytes received.
        got: usize,
        /// Bytes expected.
        want: usize,
    },
    /// A frame body is not one valid msgpack value.
    #[error("bad frame body: {0}")]
    BadFrame(String),
    /// No complete frame arrived within the time given.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// The script text is longer than one command-line argument may be.
    #[error("script of {0} bytes is over the {max} bytes one argument may hold", max = worker::MAX_SCRIPT)]
    ScriptTooLong(usize),
    /// An earlier error left the stream at an unknown position.
    #[error("worker {0} is unusable after an earlier error")]
    Broken(String),
}

impl Error {
    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }
}
