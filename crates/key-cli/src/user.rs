//! `salt.utils.verify.check_user`: run as the configured `user`, switching to it when
//! started as someone else (normally root). This is the only module with `unsafe` code:
//! calls into the C library's password database and credential functions.

use std::ffi::{CStr, CString};

/// An entry of the password database.
struct Passwd {
    name: String,
    uid: libc::uid_t,
    gid: libc::gid_t,
}

/// The outcome of [`check_user`].
#[derive(Debug, PartialEq, Eq)]
pub enum UserCheck {
    /// Running as `user` (already, or after switching).
    Ok,
    /// The switch failed; salt-key then does nothing and exits 0.
    CannotSwitch,
    /// `user` does not exist; salt-key exits with `EX_NOUSER`.
    NoSuchUser,
}

/// Ensures the process runs as `user`, as salt-key does before touching any key.
pub fn check_user(user: &str) -> UserCheck {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if lookup(Lookup::Uid(euid)).is_some_and(|p| p.name == user) {
        return UserCheck::Ok;
    }
    let Some(pw) = lookup(Lookup::Name(user)) else {
        return UserCheck::NoSuchUser;
    };
    let Ok(cname) = CString::new(user) else {
        return UserCheck::NoSuchUser;
    };
    // SAFETY: `cname` is a valid NUL-terminated string; these calls only change the
    // process credentials and report failure through their return values.
    let switched = unsafe {
        libc::initgroups(cname.as_ptr(), pw.gid) == 0
            && libc::setgid(pw.gid) == 0
            && libc::setuid(pw.uid) == 0
    };
    if switched {
        UserCheck::Ok
    } else {
        UserCheck::CannotSwitch
    }
}

enum Lookup<'a> {
    Name(&'a str),
    Uid(libc::uid_t),
}

/// `getpwnam_r`/`getpwuid_r` with a growing buffer.
fn lookup(key: Lookup<'_>) -> Option<Passwd> {
    let cname = match &key {
        Lookup::Name(n) => Some(CString::new(*n).ok()?),
        Lookup::Uid(_) => None,
    };
    let mut buf_len = 1024usize;
    loop {
        let mut buf = vec![0 as libc::c_char; buf_len];
        // SAFETY: an all-zero `passwd` is a valid value (null pointers, zero ids); it is only
        // read after a successful call filled it.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer refers to live, correctly sized storage owned by this frame.
        let rc = unsafe {
            match (&key, &cname) {
                (Lookup::Name(_), Some(c)) => libc::getpwnam_r(
                    c.as_ptr(),
                    &mut pwd,
                    buf.as_mut_ptr(),
                    buf.len(),
                    &mut result,
                ),
                (Lookup::Uid(uid), _) => {
                    libc::getpwuid_r(*uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut result)
                }
                (Lookup::Name(_), None) => return None,
            }
        };
        if rc == libc::ERANGE && buf_len < 1 << 20 {
            buf_len *= 4;
            continue;
        }
        if rc != 0 || result.is_null() || pwd.pw_name.is_null() {
            return None;
        }
        // SAFETY: on success `pw_name` points to a NUL-terminated string inside `buf`.
        let name = unsafe { CStr::from_ptr(pwd.pw_name) }
            .to_string_lossy()
            .into_owned();
        return Some(Passwd {
            name,
            uid: pwd.pw_uid,
            gid: pwd.pw_gid,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_user_needs_no_switch() {
        // SAFETY: geteuid has no preconditions.
        let me = lookup(Lookup::Uid(unsafe { libc::geteuid() })).expect("current user in passwd");
        assert_eq!(check_user(&me.name), UserCheck::Ok);
    }

    #[test]
    fn unknown_user_is_reported() {
        assert_eq!(
            check_user("no-such-user-halite-test"),
            UserCheck::NoSuchUser
        );
    }
}
