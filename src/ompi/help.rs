//! User-facing errors as Open MPI help messages (topics of `help-mpi-btl-usnic.txt`, shown with
//! `opal_show_help`, so mpirun aggregates identical ones), with a one-line fallback through
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
/// topic's text.
macro_rules! try_show_help {
    ($topic:literal; $($kind:ident($arg:expr)),* $(,)?) => {{
        let mut _hold = $crate::ompi::help::Hold::default();
        !cfg!(test) && {
            // SAFETY: a NUL-terminated topic, then exactly the arguments the topic's text
            // consumes, each of the C type its conversion expects (`s` -> `const char *` held
            // alive by `_hold`, `i` -> `int`).
            let rc = unsafe {
                $crate::ompi::sys::usnic_shim_show_help(
                    concat!($topic, "\0").as_ptr().cast()
                    $(, $crate::ompi::help::try_show_help!(@arg _hold $kind $arg))*
                )
            };
            rc == $crate::ompi::status::OPAL_SUCCESS
        }
    }};
    (@arg $h:ident s $a:expr) => { $h.s($a) };
    (@arg $h:ident i $a:expr) => { ($a) as core::ffi::c_int };
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
