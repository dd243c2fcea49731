//! `Fid<T>`: an open libfabric object, closed with `fi_close` when dropped.
use super::sys;
use std::ptr::NonNull;

/// libfabric object types: every one starts with `struct fid fid`.
pub(crate) trait FidObject {
    fn fid(p: *mut Self) -> *mut sys::fid;
}

macro_rules! fid_object {
    ($($t:ident),*) => {$(
        impl FidObject for sys::$t {
            fn fid(p: *mut Self) -> *mut sys::fid {
                // SAFETY: only the field address is computed (no read); p is a live object.
                unsafe { std::ptr::addr_of_mut!((*p).fid) }
            }
        }
    )*};
}
fid_object!(fid_fabric, fid_domain, fid_av, fid_cq, fid_ep, fid_mr);

/// Owner of one open libfabric object.
pub(crate) struct Fid<T: FidObject> {
    ptr: NonNull<T>,
    what: &'static str,
}

impl<T: FidObject> Fid<T> {
    /// Takes ownership of an object a successful `fi_*open*` call returned.
    pub(crate) fn new(p: *mut T, what: &'static str) -> Option<Fid<T>> {
        NonNull::new(p).map(|ptr| Fid { ptr, what })
    }

    pub(crate) fn ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }

    pub(crate) fn fid(&self) -> *mut sys::fid {
        T::fid(self.ptr.as_ptr())
    }
}

impl<T: FidObject> Drop for Fid<T> {
    fn drop(&mut self) {
        // SAFETY: the object is open and owned by self; it is closed exactly once. Owners
        // declare their fields so that objects bound to others close first.
        let ret = unsafe { sys::close(self.fid()) };
        if ret != 0 {
            tracing::warn!(
                "fi_close({}) failed: {}",
                self.what,
                super::error::strerror(-ret as i32)
            );
        }
    }
}
