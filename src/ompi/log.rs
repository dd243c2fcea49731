//! Messages through Open MPI's output (so they interleave with its own), one line each, as
//! `[host:pid] btl:usnic: rank R: message` (opal_output prefixes `[host:pid]`; the rank is the
//! MPI_COMM_WORLD rank, `?` before Open MPI named the process). Level 0 always prints; level n
//! prints when the larger of `btl_usnic_verbose` and `btl_base_verbose` is at least n. The
//! statistics lines keep their own documented form (`btl:usnic: stats ... rank=R ...`).
//!
//! The fabric edge's `tracing` events go to stderr, one line each, as
//! `[host:pid] btl:usnic: rank R LEVEL target: message`; the level follows the same verbosity
//! (0: warnings and errors only, 1..9 info, 10..49 debug, 50+ trace).
//!
//! The plugin's own threads (the ACK helper, the connectivity agent) write their lines to
//! stderr themselves, in the same form: opal_output formats into one buffer shared by all its
//! callers and locks it only when Open MPI runs with MPI_THREAD_MULTIPLE, so a line from them
//! beside one from the MPI thread could corrupt both.
use std::cell::Cell;
use std::ffi::CString;
use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use super::sys;

static VERBOSE: AtomicU32 = AtomicU32::new(0);
/// This process's rank + 1 (0 = not known yet).
static RANK: AtomicU32 = AtomicU32::new(0);
/// Open MPI's name of this host, for the lines the plugin's threads write themselves.
static HOST: OnceLock<String> = OnceLock::new();

thread_local! {
    static OWN_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// The host name the plugin's threads put in their lines' `[host:pid]` (at component init).
pub fn set_host(host: &str) {
    let _ = HOST.set(host.to_string());
}

/// Marks the calling thread as one of the plugin's own: its lines bypass opal_output.
pub fn mark_own_thread() {
    OWN_THREAD.with(|t| t.set(true));
}

/// Whether the calling thread is one of the plugin's own (`mark_own_thread`).
pub fn on_own_thread() -> bool {
    OWN_THREAD.with(|t| t.get())
}

/// The rank every line names (from Open MPI's name of this process, at component init).
pub fn set_rank(rank: u32) {
    RANK.store(rank.saturating_add(1), Ordering::Relaxed);
}

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
    if on_own_thread() {
        direct(line);
        return;
    }
    let Ok(c) = CString::new(line.replace('\0', "?")) else {
        return;
    };
    // SAFETY: c is a valid NUL-terminated string for the duration of the call.
    unsafe { sys::usnic_shim_output(0, c.as_ptr()) };
}

/// A line written to stderr without Open MPI: opal_output's prefix, and one write so lines of
/// several threads do not interleave.
fn direct(line: &str) {
    let host = HOST.get().map_or("unknown", String::as_str);
    let text = format!("[{host}:{:05}] {line}\n", std::process::id());
    let _ = std::io::stderr().write_all(text.as_bytes());
}

/// `error` that never calls into Open MPI, for a thread that may not (a panic on any thread).
pub fn error_direct(msg: &str) {
    direct(&format!("{} {msg}", prefix()));
}

/// opal_output already starts the line with `[host:pid]`.
fn prefix() -> String {
    match RANK.load(Ordering::Relaxed) {
        0 => "btl:usnic: rank ?:".to_string(),
        r => format!("btl:usnic: rank {}:", r - 1),
    }
}

/// A line in a documented format of its own that names the rank itself (statistics).
pub fn plain(line: &str) {
    emit(&format!("btl:usnic: {line}"));
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

/// Level of the `tracing` events shown at verbosity `v`.
pub fn tracing_level(v: u32) -> tracing::Level {
    match v {
        0 => tracing::Level::WARN,
        1..=9 => tracing::Level::INFO,
        10..=49 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    }
}

/// One line per event, with the process and the rank (several ranks share one stderr).
struct RankFormat {
    prefix: String,
}

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for RankFormat
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut w: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let m = event.metadata();
        write!(w, "{} {} {}: ", self.prefix, m.level(), m.target())?;
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

/// Install the stderr subscriber for the fabric edge's events (once per process; later calls,
/// or another subscriber already installed by the application, leave it as it is).
pub fn init_tracing(host: &str, rank: u32) {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing_level(verbosity()))
        .event_format(RankFormat {
            prefix: format!("[{host}:{}] btl:usnic: rank {rank}", std::process::id()),
        })
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_names_the_rank() {
        assert_eq!(prefix(), "btl:usnic: rank ?:");
        set_rank(3);
        assert_eq!(prefix(), "btl:usnic: rank 3:");
    }

    #[test]
    fn levels_follow_verbosity() {
        assert_eq!(tracing_level(0), tracing::Level::WARN);
        assert_eq!(tracing_level(5), tracing::Level::INFO);
        assert_eq!(tracing_level(10), tracing::Level::DEBUG);
        assert_eq!(tracing_level(100), tracing::Level::TRACE);
    }
}
