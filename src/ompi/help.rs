//! User-facing errors as Open MPI help messages (topics of `help-mpi-btl-usnic-rs.txt`, rendered by
//! Open MPI's show_help and printed by the process, once per process), with a fallback through
//! [`log::error`](super::log::error) when the help file is not installed beside the plugin.
use core::ffi::c_char;
use std::ffi::CString;

/// Keeps the C strings of one help call alive until the call returned.
#[derive(Default)]
pub struct Hold(Vec<CString>);

impl Hold {
    pub fn s(&mut self, v: impl std::fmt::Display) -> *const c_char {
        let c = CString::new(v.to_string().replace('\0', "?")).unwrap_or_default();
        // The heap buffer does not move when the CString is moved into the vector.
        let p = c.as_ptr();
        self.0.push(c);
        p
    }
}

/// `try_show_help!("topic"; s(string arg), i(int arg), ...)`: true when Open MPI showed the
/// topic, false when it could not (help file not installed, or a unit test, which never calls
/// into Open MPI). The arguments in the order and with the types (`%s` = `s`, `%d` = `i`) of the
/// topic's text. This process prints the text, once: the same text again prints nothing (why
/// not through mpirun's aggregation: `usnic_shim_show_help` in the shim).
macro_rules! try_show_help {
    (@call $f:ident, $topic:literal; $($kind:ident($arg:expr)),* $(,)?) => {{
        let mut _hold = $crate::ompi::help::Hold::default();
        !cfg!(test) && {
            // SAFETY: a NUL-terminated topic, then exactly the arguments the topic's text
            // consumes, each of the C type its conversion expects (`s` -> `const char *` held
            // alive by `_hold`, `i` -> `int`).
            let rc = unsafe {
                $crate::ompi::sys::$f(
                    concat!($topic, "\0").as_ptr().cast()
                    $(, $crate::ompi::help::try_show_help!(@arg _hold $kind $arg))*
                )
            };
            rc == $crate::ompi::status::OPAL_SUCCESS
        }
    }};
    (@arg $h:ident s $a:expr) => { $h.s($a) };
    (@arg $h:ident i $a:expr) => { ($a) as core::ffi::c_int };
    ($topic:literal; $($rest:tt)*) => {
        $crate::ompi::help::try_show_help!(@call usnic_shim_show_help, $topic; $($rest)*)
    };
}
pub(crate) use try_show_help;

/// `show_help!("topic", fallback_line; s(string arg), i(int arg), ...)`: [`try_show_help!`],
/// and the one-line fallback through the log when the topic could not be shown.
macro_rules! show_help {
    ($topic:literal, $fallback:expr; $($args:tt)*) => {{
        if !$crate::ompi::help::try_show_help!($topic; $($args)*) {
            $crate::ompi::log::error(&$fallback);
        }
    }};
}
pub(crate) use show_help;

/// The resource a failed libfabric call was asking for, when its error says the system or the
/// provider ran out (ENOMEM, EAGAIN, ENOSPC, ENOBUFS, EMFILE/ENFILE): such a failure is shown
/// as `resource exhausted` (what to lower or raise), not as a generic `libfabric API failed`.
pub fn exhausted_resource(call: &str, code: i32) -> Option<&'static str> {
    let exhausted = [
        libc::ENOMEM,
        libc::EAGAIN,
        libc::ENOSPC,
        libc::ENOBUFS,
        libc::EMFILE,
        libc::ENFILE,
    ];
    if !exhausted.contains(&code) {
        return None;
    }
    Some(match call {
        "fi_cq_open" => "completion queue (btl_usnic_cq_num)",
        "fi_endpoint" | "fi_enable" => "endpoint (btl_usnic_sd_num / btl_usnic_rd_num)",
        "fi_av_open" | "fi_av_insert" => "address vector",
        "fi_mr_reg" => "registered memory (locked-memory limit)",
        "fi_recv" | "fi_recvmsg" => "receive buffers (btl_usnic_rd_num)",
        "fi_fabric" | "fi_domain" => "fabric/domain",
        "mmap" => "buffer memory (btl_usnic_sd_num / btl_usnic_rd_num; \"ulimit -v\")",
        _ => "memory or queue space",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exhaustion_errors_name_a_resource() {
        assert_eq!(
            exhausted_resource("fi_cq_open", libc::ENOMEM),
            Some("completion queue (btl_usnic_cq_num)")
        );
        assert_eq!(
            exhausted_resource("fi_mr_reg", libc::EAGAIN),
            Some("registered memory (locked-memory limit)")
        );
        assert_eq!(
            exhausted_resource("mmap", libc::ENOMEM),
            Some("buffer memory (btl_usnic_sd_num / btl_usnic_rd_num; \"ulimit -v\")")
        );
        assert_eq!(exhausted_resource("fi_cq_open", libc::EINVAL), None);
        assert_eq!(exhausted_resource("fi_getname", libc::ENOENT), None);
    }
}
