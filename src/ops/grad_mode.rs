//! Grad mode: `torch.is_grad_enabled()` / `torch.set_grad_enabled(b)` / `with torch.no_grad()`.
//!
//! tsrun has no autograd, so the flag changes no arithmetic; it exists because archived code
//! reads it (`torch.is_grad_enabled()`) and toggles it (the scripted `no_grad.__enter__` calls
//! `torch.set_grad_enabled(False)`). As in PyTorch it is thread-local and starts enabled; the
//! interpreter runs a call on the calling thread, so a call sees the mode of its caller.

#![deny(missing_docs)]

use std::cell::Cell;

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// `torch.is_grad_enabled()` on this thread.
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(Cell::get)
}

/// `torch.set_grad_enabled(enabled)` on this thread.
pub fn set_grad_enabled(enabled: bool) {
    GRAD_ENABLED.with(|g| g.set(enabled));
}

/// `with torch.no_grad(): f()`: runs `f` with grad mode off, restoring the previous mode after
/// (also when `f` panics).
pub fn no_grad<T>(f: impl FnOnce() -> T) -> T {
    with_grad_enabled(false, f)
}

/// `with torch.set_grad_enabled(enabled): f()`.
pub fn with_grad_enabled<T>(enabled: bool, f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            set_grad_enabled(self.0);
        }
    }
    let _restore = Restore(is_grad_enabled());
    set_grad_enabled(enabled);
    f()
}
