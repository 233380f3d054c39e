//! The `pam` backend (Salt's `salt/auth/pam.py`): the system's PAM stack, and the user's
//! OS groups.

use std::ffi::{c_void, CStr, CString};
use std::ptr;

use libc::{c_char, c_int, c_uint};
use nix::unistd::{getgrouplist, Group, User};
use pam_sys::raw::{
    pam_acct_mgmt, pam_authenticate, pam_end, pam_set_item, pam_start, pam_strerror,
};
use pam_sys::types::{PamConversation, PamHandle, PamMessage, PamResponse};

use crate::{Backend, Error, Identity};

// Linux-PAM's <security/_pam_types.h>.
const PAM_SUCCESS: c_int = 0;
const PAM_BUF_ERR: c_int = 5;
const PAM_CONV_ERR: c_int = 19;
const PAM_PROMPT_ECHO_OFF: c_int = 1;
const PAM_PROMPT_ECHO_ON: c_int = 2;
const PAM_SILENT: c_int = 0x8000;
const PAM_DISALLOW_NULL_AUTHTOK: c_int = 0x0001;
/// Linux-PAM's `PAM_FAIL_DELAY` item: a function PAM calls after a failure instead of
/// sleeping (`_pam_types.h`).
const PAM_FAIL_DELAY: c_int = 10;
/// Linux-PAM's `PAM_MAX_NUM_MSG`: a conversation asking more is refused.
const PAM_MAX_NUM_MSG: c_int = 32;
/// Return codes that mean "these credentials do not log in" (a wrong password, an unknown,
/// locked or expired account), as opposed to "PAM could not decide".
const REFUSALS: [c_int; 9] = [
    6,  // PAM_PERM_DENIED
    7,  // PAM_AUTH_ERR
    8,  // PAM_CRED_INSUFFICIENT
    10, // PAM_USER_UNKNOWN
    11, // PAM_MAXTRIES
    12, // PAM_NEW_AUTHTOK_REQD
    13, // PAM_ACCT_EXPIRED
    16, // PAM_CRED_EXPIRED
    27, // PAM_AUTHTOK_EXPIRED
];

/// The PAM service Salt uses by default (`auth.pam.service`).
pub(crate) const DEFAULT_SERVICE: &str = "login";

/// `pam`: the user name and password through the PAM service `auth.pam.service`
/// (default `login`); the identity's groups are its OS groups ([`os_groups`]).
///
/// Each attempt opens its own PAM handle (`pam_start` … `pam_end`; a handle is never shared
/// between threads) and runs `pam_authenticate` **and then** `pam_acct_mgmt`, so a locked,
/// expired or password-expired account is refused even with the right password (Salt before
/// 3004.2 skipped the account check: CVE-2022-22967). The conversation answers hidden
/// prompts with the password and visible prompts with the user name, as Salt's does, and
/// ignores informational messages.
///
/// Deviations from Salt: it runs in the master's process (Salt forks a Python helper per
/// attempt, so `auth.pam.python` is not read), both calls get `PAM_SILENT` and
/// `PAM_DISALLOW_NULL_AUTHTOK` (Salt passes no flags, so with Debian's `nullok` an account
/// without a password logs in with the empty password; here it does not), and an empty
/// user name, or a name or password containing NUL, is refused without asking PAM.
///
/// Like Salt's, it needs a master that may read `/etc/shadow` (root) to check users other
/// than the master's own. PAM's own fail delay (`pam_faildelay`, 3 s in Debian's `login`) is
/// not slept on the login thread: the handle's `PAM_FAIL_DELAY` item is a function that
/// does nothing, so a failure returns at once and the master pads it with
/// [`crate::FailureDelay`] without holding a thread (a flood of wrong passwords would
/// otherwise keep every login thread asleep).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PamBackend {
    service: String,
}

impl Default for PamBackend {
    fn default() -> Self {
        PamBackend::new(DEFAULT_SERVICE)
    }
}

impl PamBackend {
    /// A backend for the PAM service `service` (a file in `/etc/pam.d`).
    pub fn new(service: &str) -> PamBackend {
        PamBackend {
            service: service.to_owned(),
        }
    }

    /// The PAM service.
    pub fn service(&self) -> &str {
        &self.service
    }
}

impl Backend for PamBackend {
    fn authenticate(&self, username: &str, password: &str) -> Result<Option<Identity>, Error> {
        if username.is_empty() {
            return Ok(None);
        }
        let (Ok(user), Ok(secret)) = (CString::new(username), CString::new(password)) else {
            return Ok(None);
        };
        let service = CString::new(self.service.as_str()).map_err(|_| Error::Pam {
            call: "pam_start",
            service: self.service.clone(),
            code: 0,
            message: "the service name contains NUL".to_owned(),
        })?;
        let answers = Answers { user, secret };
        if !self.run(&service, &answers)? {
            return Ok(None);
        }
        Ok(Some(Identity {
            name: username.to_owned(),
            groups: Some(os_groups(username)),
        }))
    }
}

impl PamBackend {
    /// One PAM transaction: whether the account may log in.
    fn run(&self, service: &CStr, answers: &Answers) -> Result<bool, Error> {
        let conversation = PamConversation {
            conv: Some(converse),
            data_ptr: ptr::from_ref(answers).cast_mut().cast::<c_void>(),
        };
        let mut raw_handle: *const PamHandle = ptr::null();
        // SAFETY: every pointer is valid for the call; `conversation` and `answers` outlive
        // the handle, which `Transaction` ends before they are dropped.
        let code = unsafe {
            pam_start(
                service.as_ptr(),
                answers.user.as_ptr(),
                &conversation,
                &mut raw_handle,
            )
        };
        let handle = raw_handle.cast_mut();
        if code != PAM_SUCCESS || handle.is_null() {
            if !handle.is_null() {
                // SAFETY: a handle pam_start returned, ended once.
                unsafe { pam_end(handle, code) };
            }
            return Err(Error::Pam {
                call: "pam_start",
                service: self.service.clone(),
                code,
                message: strerror(ptr::null_mut(), code),
            });
        }
        let mut tx = Transaction {
            handle,
            status: PAM_SUCCESS,
        };
        let no_delay: extern "C" fn(c_int, c_uint, *mut c_void) = no_fail_delay;
        // SAFETY: the handle is live; PAM keeps the function pointer, which is 'static.
        let code = unsafe { pam_set_item(tx.handle, PAM_FAIL_DELAY, no_delay as *const c_void) };
        if code != PAM_SUCCESS {
            return Err(Error::Pam {
                call: "pam_set_item",
                service: self.service.clone(),
                code,
                message: strerror(tx.handle, code),
            });
        }
        let flags = PAM_SILENT | PAM_DISALLOW_NULL_AUTHTOK;
        for (call, step) in [
            (
                "pam_authenticate",
                pam_authenticate as unsafe extern "C" fn(_, _) -> _,
            ),
            ("pam_acct_mgmt", pam_acct_mgmt),
        ] {
            // SAFETY: the handle is live until `tx` drops.
            let code = unsafe { step(tx.handle, flags) };
            tx.status = code;
            if code == PAM_SUCCESS {
                continue;
            }
            let message = strerror(tx.handle, code);
            if REFUSALS.contains(&code) {
                tracing::info!(
                    "PAM service '{}' refused user {:?} at {call}: {message}",
                    self.service,
                    answers.user
                );
                return Ok(false);
            }
            return Err(Error::Pam {
                call,
                service: self.service.clone(),
                code,
                message,
            });
        }
        Ok(true)
    }
}

/// PAM's fail-delay hook: the master pads failures itself (see [`PamBackend`]).
extern "C" fn no_fail_delay(_status: c_int, _delay_usec: c_uint, _appdata: *mut c_void) {}

/// What the conversation answers. The password is overwritten when dropped.
struct Answers {
    user: CString,
    secret: CString,
}

impl Drop for Answers {
    fn drop(&mut self) {
        let secret = std::mem::take(&mut self.secret);
        let mut bytes = secret.into_bytes_with_nul();
        bytes.fill(0);
        std::hint::black_box(&bytes);
    }
}

/// A started PAM transaction, ended (with the last status) when dropped.
struct Transaction {
    handle: *mut PamHandle,
    status: c_int,
}

impl Drop for Transaction {
    fn drop(&mut self) {
        // SAFETY: the handle pam_start returned, ended exactly once, here.
        unsafe { pam_end(self.handle, self.status) };
    }
}

/// `pam_strerror`, or the bare code when PAM has no text.
fn strerror(handle: *mut PamHandle, code: c_int) -> String {
    // SAFETY: Linux-PAM's pam_strerror ignores the handle and returns a static string.
    let text = unsafe { pam_strerror(handle, code) };
    if text.is_null() {
        return format!("PAM error {code}");
    }
    // SAFETY: a NUL-terminated static string.
    unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned()
}

/// The conversation: one `pam_response` per message, allocated with `calloc` (PAM frees
/// them); hidden prompts get the password, visible prompts the user name, other messages
/// no answer.
extern "C" fn converse(
    count: c_int,
    messages: *mut *mut PamMessage,
    responses: *mut *mut PamResponse,
    data: *mut c_void,
) -> c_int {
    if !(1..=PAM_MAX_NUM_MSG).contains(&count)
        || messages.is_null()
        || responses.is_null()
        || data.is_null()
    {
        return PAM_CONV_ERR;
    }
    let n = usize::try_from(count).unwrap_or(0);
    // SAFETY: `data` is the `Answers` given to pam_start, alive for the transaction.
    let answers = unsafe { &*data.cast::<Answers>() };
    // SAFETY: calloc of n small structs; checked for NULL below.
    let replies =
        unsafe { libc::calloc(n, std::mem::size_of::<PamResponse>()) }.cast::<PamResponse>();
    if replies.is_null() {
        return PAM_BUF_ERR;
    }
    for i in 0..n {
        // SAFETY: Linux-PAM passes an array of `count` message pointers.
        let message = unsafe { *messages.add(i) };
        if message.is_null() {
            // SAFETY: `replies` holds `n` entries from calloc.
            unsafe { free_replies(replies, n) };
            return PAM_CONV_ERR;
        }
        // SAFETY: a message PAM passed.
        let style = unsafe { (*message).msg_style };
        let answer = match style {
            PAM_PROMPT_ECHO_OFF => &answers.secret,
            PAM_PROMPT_ECHO_ON => &answers.user,
            _ => continue,
        };
        // SAFETY: a NUL-terminated string; strdup's copy belongs to PAM afterwards.
        let copy = unsafe { libc::strdup(answer.as_ptr()) };
        if copy.is_null() {
            // SAFETY: as above.
            unsafe { free_replies(replies, n) };
            return PAM_BUF_ERR;
        }
        // SAFETY: i < n.
        unsafe {
            (*replies.add(i)).resp = copy;
            (*replies.add(i)).resp_retcode = 0;
        }
    }
    // SAFETY: `responses` is PAM's out-pointer.
    unsafe { *responses = replies };
    PAM_SUCCESS
}

/// Frees a reply array the conversation built, wiping the answers first.
///
/// # Safety
/// `replies` is a `calloc`ed array of `n` responses whose `resp` are NULL or `strdup`ed.
unsafe fn free_replies(replies: *mut PamResponse, n: usize) {
    for i in 0..n {
        // SAFETY: i < n, per the contract.
        let resp: *mut c_char = unsafe { (*replies.add(i)).resp };
        if !resp.is_null() {
            // SAFETY: a NUL-terminated strdup copy, wiped and freed once.
            unsafe {
                let len = libc::strlen(resp);
                ptr::write_bytes(resp, 0, len);
                libc::free(resp.cast());
            }
        }
    }
    // SAFETY: the calloc'ed array, freed once.
    unsafe { libc::free(replies.cast()) };
}

/// The names of the OS groups `user` is in, its primary group first (Salt's
/// `salt.utils.user.get_group_list`): `getgrouplist` over the user's passwd entry. Groups
/// without a name are left out; a user without a passwd entry has no groups.
pub fn os_groups(user: &str) -> Vec<String> {
    let Ok(Some(entry)) = User::from_name(user) else {
        return Vec::new();
    };
    let Ok(name) = CString::new(user) else {
        return Vec::new();
    };
    let gids = getgrouplist(&name, entry.gid).unwrap_or_else(|e| {
        tracing::warn!("getgrouplist({user:?}) failed ({e}); using the primary group only");
        vec![entry.gid]
    });
    let mut names: Vec<String> = Vec::with_capacity(gids.len());
    for gid in gids {
        if let Ok(Some(group)) = Group::from_gid(gid) {
            if !names.contains(&group.name) {
                names.push(group.name);
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_testkit::{running_as_root, ThrowawayUser};

    #[test]
    fn root_is_in_the_root_group() {
        assert_eq!(os_groups("root").first().map(String::as_str), Some("root"));
        assert!(os_groups("no-such-user-halite").is_empty());
        assert!(os_groups("nul\0user").is_empty());
    }

    #[test]
    fn names_pam_cannot_take_are_refused_without_asking_it() {
        let pam = PamBackend::new("halite-no-such-service");
        assert_eq!(pam.authenticate("", "x").unwrap(), None);
        assert_eq!(pam.authenticate("a\0b", "x").unwrap(), None);
        assert_eq!(pam.authenticate("root", "x\0y").unwrap(), None);
    }

    #[test]
    fn pam_authenticates_a_real_user_and_refuses_locked_and_expired_accounts() {
        if !running_as_root() {
            eprintln!("skipped: creating a local user with a password needs root");
            return;
        }
        let pam = PamBackend::default();
        let user = ThrowawayUser::create("halpam", "Corr3ct-horse");
        let name = user.name();
        let id = pam
            .authenticate(name, "Corr3ct-horse")
            .unwrap()
            .expect("the right password logs in");
        assert_eq!(id.name, name);
        let groups = id.groups.expect("pam reports groups");
        assert_eq!(groups.first().map(String::as_str), Some(name), "{groups:?}");

        // Debian's `login` service sleeps 3 s after a failure (pam_faildelay); the hook
        // returns at once instead (the master pads failures without holding a thread).
        let started = std::time::Instant::now();
        assert_eq!(pam.authenticate(name, "wrong").unwrap(), None);
        assert!(
            started.elapsed() < std::time::Duration::from_millis(2500),
            "a failure took {:?}",
            started.elapsed()
        );
        assert_eq!(
            pam.authenticate("halpam-nobody", "Corr3ct-horse").unwrap(),
            None
        );

        // An expired account authenticates but fails pam_acct_mgmt (CVE-2022-22967).
        user.expire_account();
        assert_eq!(pam.authenticate(name, "Corr3ct-horse").unwrap(), None);
        user.unexpire_account();
        assert!(pam.authenticate(name, "Corr3ct-horse").unwrap().is_some());

        user.lock_password();
        assert_eq!(pam.authenticate(name, "Corr3ct-horse").unwrap(), None);
    }

    #[test]
    fn pam_refuses_the_empty_password_of_an_account_without_one() {
        if !running_as_root() {
            eprintln!("skipped: creating a local user needs root");
            return;
        }
        let user = ThrowawayUser::create("halnul", "placeholder");
        user.delete_password();
        assert_eq!(
            PamBackend::default().authenticate(user.name(), "").unwrap(),
            None
        );
    }
}
