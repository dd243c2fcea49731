//! Messages through Open MPI's output (so they interleave with its own), one line each (opal_output
//! prefixes `[host:pid]`). Level 0 always prints; level n prints when the larger of
//! `btl_usnic_verbose` and `btl_base_verbose` is at least n.
use std::ffi::CString;
use std::sync::atomic::{AtomicU32, Ordering};

use super::sys;

static VERBOSE: AtomicU32 = AtomicU32::new(0);

pub fn set_verbosity(v: u32) {
    VERBOSE.store(v, Ordering::Relaxed);
}

pub fn verbosity() -> u32 {
    let framework = if cfg!(test) {
        0
    } else {
        // SAFETY: reads an int of the btl framework, valid once Open MPI opened the framework
        // (always true when the component runs).
        unsafe { sys::usnic_shim_verbose_level() }.max(0) as u32
    };
    VERBOSE.load(Ordering::Relaxed).max(framework)
}

pub fn enabled(level: u32) -> bool {
    level == 0 || verbosity() >= level
}

fn emit(line: &str) {
    if cfg!(test) {
        eprintln!("{line}");
        return;
    }
    let Ok(c) = CString::new(line.replace('\0', "?")) else {
        return;
    };
    // SAFETY: c is a valid NUL-terminated string for the duration of the call.
    unsafe { sys::usnic_shim_output(0, c.as_ptr()) };
}

/// opal_output already starts the line with `[host:pid]`.
fn prefix() -> &'static str {
    "btl:usnic:"
}

/// An error or warning the user must see.
pub fn error(msg: &str) {
    emit(&format!("{} {msg}", prefix()));
}

/// A message shown at verbosity `level` and above.
pub fn verbose(level: u32, msg: impl FnOnce() -> String) {
    if enabled(level) {
        emit(&format!("{} {}", prefix(), msg()));
    }
}
