//! Free TCP ports on 127.0.0.1 that no other test will be handed.
//!
//! Binding to port 0 and releasing the socket is not enough on its own: nextest runs every
//! test in its own process, so a process-wide set cannot see what another test took, and the
//! kernel picks port-0 ports from the ephemeral range, which is also where every outgoing
//! connection (a minion dialling its master) takes its source port. So ports are picked
//! below the ephemeral range, from a random start, and each one is reserved across
//! processes by an exclusive `flock` on `/tmp/halite-testkit-ports/<port>.lock`, held until
//! the process exits. A port is handed out only if 127.0.0.1:port can be bound at that
//! moment (which rules out listeners of unrelated programs).

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// Directory of the cross-process port reservation lock files.
const LOCK_DIR: &str = "/tmp/halite-testkit-ports";
/// Lowest port handed out.
const LOW: u16 = 20000;
/// Used as the upper bound when the ephemeral range cannot be read or leaves too little room.
const FALLBACK_HIGH: u16 = 32768;

/// Ports reserved by this process, with the lock files that keep them reserved.
static RESERVED: Mutex<Option<Reserved>> = Mutex::new(None);

struct Reserved {
    ports: HashSet<u16>,
    locks: Vec<File>,
    rng: u64,
}

/// `n` distinct free TCP ports on 127.0.0.1, reserved for this process until it exits.
///
/// # Panics
/// When fewer than `n` ports can be found (the range is exhausted).
pub fn free_ports(n: usize) -> Vec<u16> {
    let mut guard = RESERVED.lock().unwrap_or_else(|e| e.into_inner());
    let reserved = guard.get_or_insert_with(|| Reserved {
        ports: HashSet::new(),
        locks: Vec::new(),
        rng: seed(),
    });
    if let Err(e) = std::fs::create_dir_all(LOCK_DIR) {
        panic!("cannot create port lock directory {LOCK_DIR}: {e}");
    }
    let high = ephemeral_low().unwrap_or(FALLBACK_HIGH);
    let span = u32::from(high - LOW);
    let start = (next_random(&mut reserved.rng) % u64::from(span)) as u32;
    let mut out = Vec::with_capacity(n);
    for i in 0..span {
        if out.len() == n {
            break;
        }
        let port = LOW + ((start + i) % span) as u16;
        if reserved.ports.contains(&port) {
            continue;
        }
        let Some(lock) = try_reserve(port) else {
            continue;
        };
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_err() {
            // Keep the lock: the port is busy, no other test should try it either.
            reserved.locks.push(lock);
            reserved.ports.insert(port);
            continue;
        }
        reserved.locks.push(lock);
        reserved.ports.insert(port);
        out.push(port);
    }
    if out.len() < n {
        panic!(
            "only {} of {n} free ports found in {LOW}..{high}",
            out.len()
        );
    }
    out
}

/// Takes the cross-process lock for `port`, or `None` if another process holds it.
fn try_reserve(port: u16) -> Option<File> {
    let path = Path::new(LOCK_DIR).join(format!("{port}.lock"));
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .ok()?;
    file.try_lock().ok()?;
    Some(file)
}

/// Lower bound of the kernel's ephemeral port range, if it leaves at least 1000 ports above
/// [`LOW`].
fn ephemeral_low() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let low: u16 = range.split_whitespace().next()?.parse().ok()?;
    (low >= LOW + 1000).then_some(low)
}

fn seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    (nanos ^ (u64::from(std::process::id()) << 32)) | 1
}

/// xorshift64: enough to spread the start points of concurrent test processes.
fn next_random(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct_and_bindable() {
        let ports = free_ports(8);
        let unique: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(unique.len(), 8);
        let high = ephemeral_low().unwrap_or(FALLBACK_HIGH);
        for port in ports {
            assert!((LOW..high).contains(&port), "{port} outside {LOW}..{high}");
            TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap();
        }
    }

    #[test]
    fn free_ports_never_repeats_within_a_process() {
        let a = free_ports(4);
        let b = free_ports(4);
        assert!(a.iter().all(|p| !b.contains(p)), "{a:?} vs {b:?}");
    }

    #[test]
    fn reserved_port_cannot_be_locked_by_another_open_file() {
        let port = free_ports(1)[0];
        // flock locks belong to the open file description: a second open in the same
        // process behaves like another process.
        assert!(try_reserve(port).is_none());
    }
}
