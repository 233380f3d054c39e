//! Host facts Salt's defaults depend on: the host name, the generated minion id (Salt's
//! `salt.utils.network.generate_minion_id`, best effort), the effective user name
//! (`salt.utils.user.get_user`) and the system memory used for `ipc_write_buffer: dynamic`.
//!
//! The libc calls here (`gethostname`, `getaddrinfo`, `getpwuid_r`) are the only
//! `unsafe` code in the crate besides the YAML event parser.

use std::ffi::{CStr, CString};

/// Salt's `localhost_matchers`: names never used as a generated id (`re.match`, so a
/// prefix match).
fn is_localhost_name(name: &str) -> bool {
    let prefixes = [
        "localhost",
        "ip6-",
        "::1",
        "ipv6-",
        "fe00::",
        "fe02::",
        "0.0.0.0",
    ];
    if prefixes.iter().any(|p| name.starts_with(p)) {
        return true;
    }
    let b = name.as_bytes();
    // `127[.]\d`
    if b.len() >= 5 && b.starts_with(b"127.") && b[4].is_ascii_digit() {
        return true;
    }
    // `1.0.0.*.ip6.arpa`, where each `.` is a regex wildcard.
    b.len() >= 5
        && b[0] == b'1'
        && b[2] == b'0'
        && b[4] == b'0'
        && b[5..]
            .windows(9)
            .any(|w| &w[1..4] == b"ip6" && &w[5..9] == b"arpa")
}

/// The kernel's host name (`socket.gethostname()`), `None` when it is unset.
pub fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for `buf.len()` bytes; gethostname NUL-terminates
    // within it on success (the last byte stays 0 otherwise).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if rc != 0 {
        return None;
    }
    let name = CStr::from_bytes_until_nul(&buf)
        .ok()?
        .to_string_lossy()
        .into_owned();
    (!name.is_empty()).then_some(name)
}

/// The canonical name of `host` from the resolver (`getaddrinfo` with `AI_CANONNAME`),
/// standing in for Python's `socket.getfqdn`.
pub(crate) fn canonical_name(host: &str) -> Option<String> {
    let node = CString::new(host).ok()?;
    // SAFETY: an all-zero addrinfo is a valid "no hints" value.
    let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    hints.ai_flags = libc::AI_CANONNAME;
    hints.ai_socktype = libc::SOCK_STREAM;
    let mut result: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: `node` is NUL-terminated, `hints` is initialised, `result` receives a list
    // that we free below exactly once.
    let rc = unsafe { libc::getaddrinfo(node.as_ptr(), std::ptr::null(), &hints, &mut result) };
    if rc != 0 || result.is_null() {
        return None;
    }
    // SAFETY: `result` is a valid list head; `ai_canonname` is null or NUL-terminated.
    let name = unsafe {
        let canon = (*result).ai_canonname;
        let name = (!canon.is_null()).then(|| CStr::from_ptr(canon).to_string_lossy().into_owned());
        libc::freeaddrinfo(result);
        name
    };
    name.filter(|n| !n.is_empty())
}

/// Salt's `generate_minion_id()`: the first of (FQDN, node name, host name) that is not a
/// localhost-like name, else `localhost`.
///
/// Best effort: Salt falls back further to `/etc/hostname`, `/etc/hosts` and interface
/// addresses, which are not consulted here.
pub fn generate_minion_id() -> String {
    let host = hostname();
    let fqdn = host.as_deref().and_then(canonical_name);
    [fqdn, host.clone(), host]
        .into_iter()
        .flatten()
        .find(|name| !is_localhost_name(name))
        .unwrap_or_else(|| "localhost".to_owned())
}

/// The effective user's name (`pwd.getpwuid(os.geteuid()).pw_name`), `None` if the user
/// database has no entry.
pub fn current_user() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let mut buf = vec![0u8; 4096];
    // SAFETY: zeroed passwd is a valid out-parameter.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; on success `pw_name` points into `buf`.
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: `pw_name` is NUL-terminated inside `buf`, which is still alive.
    let name = unsafe { CStr::from_ptr(pwd.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

/// A local user's uid and gid (`pwd.getpwnam`), `None` when the user database has no such
/// user.
pub fn user_ids(name: &str) -> Option<(u32, u32)> {
    let cname = std::ffi::CString::new(name).ok()?;
    let mut buf = vec![0u8; 16384];
    // SAFETY: zeroed passwd is a valid out-parameter.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call and `buf` outlives it.
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() {
        return None;
    }
    Some((pwd.pw_uid, pwd.pw_gid))
}

/// Every user name in the user database (`pwd.getpwall()`), NSS sources included.
pub fn all_user_names() -> Vec<String> {
    // getpwent keeps its position in process-global state.
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut names = Vec::new();
    // SAFETY: setpwent/getpwent/endpwent are used under the lock; each entry's `pw_name` is
    // a NUL-terminated string valid until the next getpwent call, and is copied at once.
    unsafe {
        libc::setpwent();
        loop {
            let entry = libc::getpwent();
            if entry.is_null() {
                break;
            }
            if !(*entry).pw_name.is_null() {
                names.push(
                    CStr::from_ptr((*entry).pw_name)
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
        libc::endpwent();
    }
    names
}

/// Salt's `_DFLT_IPC_WBUFFER`: half of max(5% of RAM, 10 MiB).
pub(crate) fn dynamic_ipc_buffer() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("MemTotal:"))
                .and_then(|rest| {
                    rest.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
        })
        .map_or(0.0, |kib| kib as f64 * 1024.0);
    (total * 0.05).max(f64::from(10u32 << 20)) as u64 / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_in_the_user_database_and_unknown_users_are_not() {
        assert_eq!(user_ids("root"), Some((0, 0)));
        assert_eq!(user_ids("no-such-user-halite"), None);
        assert_eq!(user_ids("bad\0name"), None);
        assert!(all_user_names().iter().any(|n| n == "root"));
    }

    #[test]
    fn localhost_like_names_are_filtered() {
        for name in [
            "localhost",
            "localhost.localdomain",
            "ip6-localhost",
            "127.0.1.1",
            "::1",
            "0.0.0.0",
            "1.0.0.0.0.0.ip6.arpa",
        ] {
            assert!(is_localhost_name(name), "{name}");
        }
        for name in ["vm", "web1.example.com", "127x", "1270"] {
            assert!(!is_localhost_name(name), "{name}");
        }
    }

    #[test]
    fn generated_id_is_never_empty() {
        assert!(hostname().is_some());
        assert!(!generate_minion_id().is_empty());
        assert!(current_user().is_some_and(|u| !u.is_empty()));
    }
}
