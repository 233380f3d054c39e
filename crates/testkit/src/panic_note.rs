//! Remembers the message of a test thread's panic so that [`TempRoot`](crate::TempRoot)
//! can print it again after the daemon logs it dumps while unwinding.

use std::cell::RefCell;
use std::sync::Once;

thread_local! {
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Chains a hook in front of the current panic hook (once per process) that records the
/// panic's message and location for the panicking thread.
pub(crate) fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "<non-string panic payload>".to_owned());
            let at = info
                .location()
                .map(|l| format!(" at {}:{}", l.file(), l.line()))
                .unwrap_or_default();
            LAST.with(|last| *last.borrow_mut() = Some(format!("{message}{at}")));
            previous(info);
        }));
    });
}

/// The recorded message of this thread's last panic, if any.
pub(crate) fn take() -> Option<String> {
    LAST.with(|last| last.borrow_mut().take())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_message_and_its_location_are_kept_for_the_thread() {
        install();
        let got = std::thread::spawn(|| {
            let caught = std::panic::catch_unwind(|| panic!("boom {}", 7));
            assert!(caught.is_err());
            take()
        })
        .join()
        .unwrap();
        let got = got.expect("the hook recorded the panic");
        assert!(got.starts_with("boom 7 at "), "{got}");
        assert!(got.contains("panic_note.rs:"), "{got}");
        assert_eq!(take(), None, "another thread's panic is not this one's");
    }
}
