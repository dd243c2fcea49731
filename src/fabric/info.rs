//! Owned `fi_info` lists and entries (`fi_getinfo`, `fi_dupinfo`, `fi_freeinfo`).
use super::error::{check, FabricError};
use super::sys;
use std::ffi::{CStr, CString};
use std::ptr::NonNull;

/// The API version this edge is written against: the installed header's (1.17), so the
/// structs libfabric fills in have exactly the generated layout.
pub(crate) fn api_version() -> u32 {
    (sys::FI_MAJOR_VERSION << 16) | sys::FI_MINOR_VERSION
}

/// One `fi_info` entry owned by Rust (a `fi_dupinfo` copy, `next` cleared), freed on drop.
pub(crate) struct OwnedInfo(NonNull<sys::fi_info>);

// SAFETY: an OwnedInfo is never mutated after creation except through `&mut self`, and
// libfabric does not keep pointers into it; moving or sharing it between threads is fine.
unsafe impl Send for OwnedInfo {}
// SAFETY: see Send: shared access is read-only.
unsafe impl Sync for OwnedInfo {}

impl OwnedInfo {
    /// Deep copy of one entry (its `next` is cleared so the copy is a single entry).
    pub(crate) fn dup(info: &sys::fi_info) -> Result<OwnedInfo, FabricError> {
        // SAFETY: `info` is a valid fi_info (a reference into a list libfabric gave us or one
        // we own); fi_dupinfo deep-copies only that entry and returns NULL on ENOMEM.
        let p = unsafe { sys::fi_dupinfo(info) };
        let p = NonNull::new(p)
            .ok_or_else(|| FabricError::from_ret("fi_dupinfo", -(sys::FI_ENOMEM as i64)))?;
        Ok(OwnedInfo(p))
    }

    /// An empty entry to fill in as hints (`fi_allocinfo`).
    pub(crate) fn alloc() -> Result<OwnedInfo, FabricError> {
        // SAFETY: fi_dupinfo(NULL) is what the inline fi_allocinfo does: a zeroed entry with
        // all attribute structs allocated, or NULL on ENOMEM.
        let p = unsafe { sys::fi_dupinfo(std::ptr::null()) };
        let p = NonNull::new(p)
            .ok_or_else(|| FabricError::from_ret("fi_allocinfo", -(sys::FI_ENOMEM as i64)))?;
        Ok(OwnedInfo(p))
    }

    pub(crate) fn get(&self) -> &sys::fi_info {
        // SAFETY: the pointer is valid and owned by self for self's lifetime.
        unsafe { self.0.as_ref() }
    }

    pub(crate) fn get_mut(&mut self) -> &mut sys::fi_info {
        // SAFETY: the pointer is valid and uniquely owned by self.
        unsafe { self.0.as_mut() }
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::fi_info {
        self.0.as_ptr()
    }
}

impl Clone for OwnedInfo {
    fn clone(&self) -> Self {
        OwnedInfo::dup(self.get()).expect("fi_dupinfo: out of memory")
    }
}

impl Drop for OwnedInfo {
    fn drop(&mut self) {
        // SAFETY: we own this single entry (allocated by fi_dupinfo); freed exactly once.
        unsafe { sys::fi_freeinfo(self.0.as_ptr()) }
    }
}

/// A list returned by `fi_getinfo`, freed on drop.
pub(crate) struct InfoList(*mut sys::fi_info);

impl InfoList {
    /// `fi_getinfo` for FI_EP_DGRAM + FI_MSG endpoints of `provider` with IPv4 addresses.
    /// No matching provider (`-FI_ENODATA`) is an empty list, not an error.
    pub(crate) fn datagram(provider: &str) -> Result<InfoList, FabricError> {
        let prov = CString::new(provider)
            .map_err(|_| FabricError::invalid("fi_getinfo", "provider name contains NUL"))?;
        let mut hints = OwnedInfo::alloc()?;
        let h = hints.get_mut();
        h.caps = sys::FI_MSG as u64 | sys::FI_SEND as u64 | sys::FI_RECV as u64;
        // The modes this edge honours: a message prefix before every payload, and local
        // registration of send/receive buffers.
        h.mode = sys::FI_MSG_PREFIX | sys::FI_LOCAL_MR;
        h.addr_format = sys::FI_SOCKADDR_IN;
        // SAFETY: fi_allocinfo allocated ep_attr, domain_attr and fabric_attr; prov_name must
        // be malloc'ed because fi_freeinfo frees it.
        unsafe {
            (*h.ep_attr).type_ = sys::FI_EP_DGRAM;
            (*h.domain_attr).mr_mode = (sys::FI_MR_LOCAL
                | sys::FI_MR_ALLOCATED
                | sys::FI_MR_PROV_KEY
                | sys::FI_MR_VIRT_ADDR) as i32;
            (*h.fabric_attr).prov_name = libc::strdup(prov.as_ptr());
            // A Module owns its domain and every object in it and needs &mut self for each
            // call, so calls are serialized, as FI_THREAD_DOMAIN asks; the provider can then
            // skip its own locks (a dozen mutex pairs per message in the udp provider).
            (*h.domain_attr).threading = sys::FI_THREAD_DOMAIN;
        }
        let mut list: *mut sys::fi_info = std::ptr::null_mut();
        // SAFETY: hints is a valid fi_info; node/service NULL; list receives a list we own.
        let ret = unsafe {
            sys::fi_getinfo(
                api_version(),
                std::ptr::null(),
                std::ptr::null(),
                0,
                hints.as_ptr(),
                &mut list,
            )
        };
        if ret == -(sys::FI_ENODATA as i32) {
            return Ok(InfoList(std::ptr::null_mut()));
        }
        check("fi_getinfo", ret.into())?;
        Ok(InfoList(list))
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &sys::fi_info> {
        let mut cur = self.0;
        std::iter::from_fn(move || {
            // SAFETY: cur is NULL or an entry of the list we own, alive as long as &self.
            let e = unsafe { cur.as_ref()? };
            cur = e.next;
            Some(e)
        })
    }
}

impl Drop for InfoList {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the whole list came from fi_getinfo and is freed exactly once.
            unsafe { sys::fi_freeinfo(self.0) }
        }
    }
}

/// A C string field of an fi_info attribute, or "" when NULL.
pub(crate) fn cstr(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: libfabric's attribute strings are NUL-terminated and live as long as the info.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}
