//! Host facts and process set-up through libc: the only `unsafe` code in the crate
//! besides the process-group signal in `job.rs`.
//!
//! Each wrapper returns owned Rust data and `None`/empty on failure; nothing here
//! panics.

use std::ffi::{CStr, CString};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// `os.uname()`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Uname {
    pub sysname: String,
    pub nodename: String,
    pub release: String,
    pub version: String,
    pub machine: String,
}

fn cstr_field(field: &[libc::c_char]) -> String {
    let bytes: Vec<u8> = field
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `os.uname()`, or empty fields if it fails.
pub(crate) fn uname() -> Uname {
    // SAFETY: an all-zero utsname is a valid out-parameter.
    let mut buf: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `buf` is a valid, writable utsname.
    if unsafe { libc::uname(&mut buf) } != 0 {
        return Uname::default();
    }
    Uname {
        sysname: cstr_field(&buf.sysname),
        nodename: cstr_field(&buf.nodename),
        release: cstr_field(&buf.release),
        version: cstr_field(&buf.version),
        machine: cstr_field(&buf.machine),
    }
}

/// Walks a `getaddrinfo` result list, freeing it afterwards.
fn with_addrinfo<T>(
    host: &str,
    hints: libc::addrinfo,
    mut each: impl FnMut(&libc::addrinfo) -> Option<T>,
) -> Vec<T> {
    let Ok(node) = CString::new(host) else {
        return Vec::new();
    };
    let mut result: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: `node` is NUL-terminated, `hints` initialised, `result` an out-pointer.
    let rc = unsafe { libc::getaddrinfo(node.as_ptr(), std::ptr::null(), &hints, &mut result) };
    if rc != 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut cur = result;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getaddrinfo returned, not yet freed.
        let info = unsafe { &*cur };
        if let Some(v) = each(info) {
            out.push(v);
        }
        cur = info.ai_next;
    }
    // SAFETY: `result` is the head getaddrinfo allocated; it is freed exactly once.
    unsafe { libc::freeaddrinfo(result) };
    out
}

fn zero_hints() -> libc::addrinfo {
    // SAFETY: an all-zero addrinfo is the "no hints" value.
    unsafe { std::mem::zeroed() }
}

/// The canonical name `getaddrinfo(host, 0, AF_UNSPEC, SOCK_STREAM, SOL_TCP,
/// AI_CANONNAME)` reports (the last non-empty one, as Salt's loop keeps it).
pub(crate) fn canonical_name(host: &str) -> Option<String> {
    let mut hints = zero_hints();
    hints.ai_flags = libc::AI_CANONNAME;
    hints.ai_socktype = libc::SOCK_STREAM;
    hints.ai_protocol = libc::IPPROTO_TCP;
    with_addrinfo(host, hints, |info| {
        if info.ai_canonname.is_null() {
            return None;
        }
        // SAFETY: a non-null `ai_canonname` is a NUL-terminated string in the list.
        let name = unsafe { CStr::from_ptr(info.ai_canonname) }
            .to_string_lossy()
            .into_owned();
        (!name.is_empty()).then_some(name)
    })
    .pop()
}

/// The addresses `host` resolves to in one family (`socket.getaddrinfo(host, None,
/// family)`), without duplicates.
pub(crate) fn resolve(host: &str, v6: bool) -> Vec<IpAddr> {
    let mut hints = zero_hints();
    hints.ai_family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    let mut out: Vec<IpAddr> = Vec::new();
    for addr in with_addrinfo(host, hints, |info| sockaddr_ip(info.ai_addr)) {
        if !out.contains(&addr) {
            out.push(addr);
        }
    }
    out
}

/// The IP address in a `sockaddr`, if it is IPv4 or IPv6.
fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: `sa` points to a sockaddr whose family says which struct it is.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let sin = &*(sa.cast::<libc::sockaddr_in>());
                Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    sin.sin_addr.s_addr,
                ))))
            }
            libc::AF_INET6 => {
                let sin6 = &*(sa.cast::<libc::sockaddr_in6>());
                Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
            }
            _ => None,
        }
    }
}

/// The name `ip` reverse-resolves to (`socket.gethostbyaddr(ip)[0]`), if any.
pub(crate) fn reverse_lookup(ip: IpAddr) -> Option<String> {
    let mut host = [0u8; 1025];
    let rc = match ip {
        IpAddr::V4(v4) => {
            // SAFETY: zeroed sockaddr_in is valid; fields are set below.
            let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_addr.s_addr = u32::from(v4).to_be();
            // SAFETY: the sockaddr and the host buffer are valid for the given sizes.
            unsafe {
                libc::getnameinfo(
                    (&sin as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                    host.as_mut_ptr().cast(),
                    host.len() as libc::socklen_t,
                    std::ptr::null_mut(),
                    0,
                    libc::NI_NAMEREQD,
                )
            }
        }
        IpAddr::V6(v6) => {
            // SAFETY: zeroed sockaddr_in6 is valid; fields are set below.
            let mut sin6: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_addr.s6_addr = v6.octets();
            // SAFETY: the sockaddr and the host buffer are valid for the given sizes.
            unsafe {
                libc::getnameinfo(
                    (&sin6 as *const libc::sockaddr_in6).cast(),
                    std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
                    host.as_mut_ptr().cast(),
                    host.len() as libc::socklen_t,
                    std::ptr::null_mut(),
                    0,
                    libc::NI_NAMEREQD,
                )
            }
        }
    };
    if rc != 0 {
        return None;
    }
    CStr::from_bytes_until_nul(&host)
        .ok()
        .map(|c| c.to_string_lossy().into_owned())
}

/// One network interface and its addresses, in kernel order.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Interface {
    pub name: String,
    /// The link-layer address, colon-separated lowercase hex.
    pub hwaddr: Option<String>,
    pub inet: Vec<Ipv4Addr>,
    pub inet6: Vec<Ipv6Addr>,
}

/// Every interface, from `getifaddrs`. An IPv4 label (`eth0:1`) counts as its base
/// interface, as in `ip addr`.
pub(crate) fn interfaces() -> Vec<Interface> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `head` is an out-pointer for the list.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Vec::new();
    }
    let mut raw: Vec<(String, Option<String>, Option<IpAddr>)> = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: `ifa_name` is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let addr = ifa.ifa_addr;
        if addr.is_null() {
            raw.push((name, None, None));
            continue;
        }
        // SAFETY: `addr` is non-null and its family says which struct it is.
        let family = i32::from(unsafe { (*addr).sa_family });
        if family == libc::AF_PACKET {
            // SAFETY: AF_PACKET addresses from getifaddrs are sockaddr_ll.
            let ll = unsafe { &*(addr.cast::<libc::sockaddr_ll>()) };
            let len = usize::from(ll.sll_halen).min(ll.sll_addr.len());
            let hw = (len > 0).then(|| {
                ll.sll_addr[..len]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(":")
            });
            raw.push((name, hw, None));
        } else {
            raw.push((name, None, sockaddr_ip(addr)));
        }
    }
    // SAFETY: `head` is the list getifaddrs allocated; it is freed exactly once.
    unsafe { libc::freeifaddrs(head) };

    let mut out: Vec<Interface> = Vec::new();
    let known: Vec<String> = raw
        .iter()
        .filter(|r| r.2.is_none())
        .map(|r| r.0.clone())
        .collect();
    for (name, hw, ip) in raw {
        let name = match name.split_once(':') {
            Some((base, _)) if !known.contains(&name) && known.iter().any(|k| k == base) => {
                base.to_owned()
            }
            _ => name,
        };
        let pos = match out.iter().position(|i| i.name == name) {
            Some(pos) => pos,
            None => {
                out.push(Interface {
                    name,
                    ..Interface::default()
                });
                out.len() - 1
            }
        };
        let iface = &mut out[pos];
        if hw.is_some() {
            iface.hwaddr = hw;
        }
        match ip {
            Some(IpAddr::V4(a)) => iface.inet.push(a),
            Some(IpAddr::V6(a)) => iface.inet6.push(a),
            None => {}
        }
    }
    out
}

/// A user database entry.
#[derive(Debug, Clone)]
pub(crate) struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: String,
    pub shell: String,
}

fn passwd_lookup(
    lookup: impl Fn(&mut libc::passwd, &mut [u8], &mut *mut libc::passwd) -> libc::c_int,
) -> Option<User> {
    let mut buf = vec![0u8; 16384];
    // SAFETY: an all-zero passwd is a valid out-parameter.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    if lookup(&mut pwd, &mut buf, &mut result) != 0 || result.is_null() {
        return None;
    }
    let field = |p: *const libc::c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: non-null passwd fields are NUL-terminated strings inside `buf`.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    Some(User {
        name: field(pwd.pw_name),
        uid: pwd.pw_uid,
        gid: pwd.pw_gid,
        home: field(pwd.pw_dir),
        shell: field(pwd.pw_shell),
    })
}

/// `pwd.getpwnam(name)`.
pub(crate) fn user_by_name(name: &str) -> Option<User> {
    let cname = CString::new(name).ok()?;
    passwd_lookup(|pwd, buf, result| {
        // SAFETY: every pointer is valid for the call; `buf` outlives the result.
        unsafe {
            libc::getpwnam_r(
                cname.as_ptr(),
                pwd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                result,
            )
        }
    })
}

/// `pwd.getpwuid(uid)`.
pub(crate) fn user_by_uid(uid: u32) -> Option<User> {
    passwd_lookup(|pwd, buf, result| {
        // SAFETY: every pointer is valid for the call; `buf` outlives the result.
        unsafe { libc::getpwuid_r(uid, pwd, buf.as_mut_ptr().cast(), buf.len(), result) }
    })
}

fn group_lookup(
    lookup: impl Fn(&mut libc::group, &mut [u8], &mut *mut libc::group) -> libc::c_int,
) -> Option<(String, u32)> {
    let mut buf = vec![0u8; 65536];
    // SAFETY: an all-zero group is a valid out-parameter.
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::group = std::ptr::null_mut();
    if lookup(&mut grp, &mut buf, &mut result) != 0 || result.is_null() || grp.gr_name.is_null() {
        return None;
    }
    // SAFETY: `gr_name` is a NUL-terminated string inside `buf`.
    let name = unsafe { CStr::from_ptr(grp.gr_name) }
        .to_string_lossy()
        .into_owned();
    Some((name, grp.gr_gid))
}

/// `grp.getgrgid(gid).gr_name`.
pub(crate) fn group_name(gid: u32) -> Option<String> {
    group_lookup(|grp, buf, result| {
        // SAFETY: every pointer is valid for the call; `buf` outlives the result.
        unsafe { libc::getgrgid_r(gid, grp, buf.as_mut_ptr().cast(), buf.len(), result) }
    })
    .map(|(name, _)| name)
}

/// `grp.getgrnam(name).gr_gid`.
pub(crate) fn group_id(name: &str) -> Option<u32> {
    let cname = CString::new(name).ok()?;
    group_lookup(|grp, buf, result| {
        // SAFETY: every pointer is valid for the call; `buf` outlives the result.
        unsafe {
            libc::getgrnam_r(
                cname.as_ptr(),
                grp,
                buf.as_mut_ptr().cast(),
                buf.len(),
                result,
            )
        }
    })
    .map(|(_, gid)| gid)
}

/// Every group `user` belongs to, its primary group `gid` included.
pub(crate) fn group_list(user: &str, gid: u32) -> Vec<u32> {
    let Ok(cname) = CString::new(user) else {
        return vec![gid];
    };
    let mut n: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; usize::try_from(n).unwrap_or(64)];
        let mut count = n;
        // SAFETY: `groups` holds `count` entries; getgrouplist writes at most that many
        // and reports the real count.
        let rc =
            unsafe { libc::getgrouplist(cname.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
        if rc >= 0 {
            groups.truncate(usize::try_from(count).unwrap_or(0));
            return groups;
        }
        if count <= n || n > 65536 {
            return vec![gid];
        }
        n = count;
    }
}

/// The real user id.
pub(crate) fn uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

/// The effective user id.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// The real group id.
pub(crate) fn gid() -> u32 {
    // SAFETY: getgid has no preconditions.
    unsafe { libc::getgid() }
}

/// The effective group id.
pub(crate) fn egid() -> u32 {
    // SAFETY: getegid has no preconditions.
    unsafe { libc::getegid() }
}

/// `os.access(path, mode)`.
fn access(path: &str, mode: libc::c_int) -> bool {
    let Ok(cpath) = CString::new(path) else {
        return false;
    };
    // SAFETY: `cpath` is NUL-terminated.
    unsafe { libc::access(cpath.as_ptr(), mode) == 0 }
}

/// `os.access(path, os.X_OK)`.
pub(crate) fn executable(path: &str) -> bool {
    access(path, libc::X_OK)
}

/// `os.access(path, os.R_OK)`.
pub(crate) fn readable(path: &str) -> bool {
    access(path, libc::R_OK)
}

/// `os.statvfs(path)`: block size, available blocks, total blocks.
pub(crate) fn statvfs(path: &str) -> io::Result<(u64, u64, u64)> {
    let cpath = CString::new(path).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: an all-zero statvfs is a valid out-parameter.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `cpath` is NUL-terminated and `st` writable.
    if unsafe { libc::statvfs(cpath.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.f_bsize, st.f_bavail, st.f_blocks))
}

/// `os.getloadavg()`.
pub(crate) fn loadavg() -> Option<[f64; 3]> {
    let mut avg = [0f64; 3];
    // SAFETY: `avg` holds the three entries asked for.
    let n = unsafe { libc::getloadavg(avg.as_mut_ptr(), 3) };
    (n == 3).then_some(avg)
}

extern "C" {
    fn tzset();
}

/// The local time zone's abbreviation now (`time.tzname[isdst]`).
pub(crate) fn tz_abbrev() -> Option<String> {
    // SAFETY: tzset only reads the environment and zone files.
    unsafe { tzset() };
    // SAFETY: time(NULL) has no preconditions.
    let now = unsafe { libc::time(std::ptr::null_mut()) };
    // SAFETY: an all-zero tm is a valid out-parameter.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: `now` and `tm` are valid for the call.
    if unsafe { libc::localtime_r(&now, &mut tm) }.is_null() || tm.tm_zone.is_null() {
        return None;
    }
    // SAFETY: `tm_zone` points to a NUL-terminated static zone name.
    Some(
        unsafe { CStr::from_ptr(tm.tm_zone) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// What a child process changes before it runs the command.
#[derive(Debug, Clone, Default)]
pub(crate) struct ChildSetup {
    /// Switch to this uid, gid and supplementary group list.
    pub user: Option<(u32, u32, Vec<u32>)>,
    /// Set this umask.
    pub umask: Option<u32>,
}

/// Puts the child in its own process group (so cancellation and timeouts reach its
/// whole tree) and applies `setup` between fork and exec.
pub(crate) fn prepare_child(cmd: &mut Command, setup: ChildSetup) {
    cmd.process_group(0);
    if setup.user.is_none() && setup.umask.is_none() {
        return;
    }
    let closure = move || -> io::Result<()> {
        // Only async-signal-safe calls below: the list was computed before the fork.
        if let Some(mask) = setup.umask {
            // SAFETY: umask has no preconditions.
            unsafe { libc::umask(mask as libc::mode_t) };
        }
        if let Some((uid, gid, groups)) = &setup.user {
            // SAFETY: `groups` is a valid array of `len` gids.
            if unsafe { libc::setgroups(groups.len(), groups.as_ptr()) } != 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: setgid/setuid have no memory preconditions.
            if unsafe { libc::setgid(*gid) } != 0 || unsafe { libc::setuid(*uid) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    };
    // SAFETY: the closure only makes async-signal-safe calls and touches no locks or
    // allocations.
    unsafe {
        cmd.pre_exec(closure);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_facts_are_available_on_linux() {
        let u = uname();
        assert_eq!(u.sysname, "Linux");
        assert!(!u.release.is_empty());
        let ifaces = interfaces();
        assert!(ifaces
            .iter()
            .any(|i| i.name == "lo" && i.inet.contains(&Ipv4Addr::LOCALHOST)));
        assert!(loadavg().is_some());
        assert!(statvfs("/").is_ok());
        assert!(statvfs("/definitely/not/here").is_err());
    }

    #[test]
    fn user_lookups_find_root() {
        let root = user_by_name("root").expect("root exists");
        assert_eq!(root.uid, 0);
        assert_eq!(user_by_uid(0).map(|u| u.name), Some("root".to_owned()));
        assert_eq!(group_name(0).as_deref(), Some("root"));
        assert_eq!(group_id("root"), Some(0));
        assert!(group_list("root", 0).contains(&0));
        assert!(user_by_name("no such user\0").is_none());
    }
}
