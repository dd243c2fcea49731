//! Loads the built plugin the way Open MPI's MCA loader does (dlopen + dlsym of
//! `mca_btl_usnic_component`) and checks what the loader and `ompi_info` read from it.
use std::ffi::{CStr, CString};

use usnic_rs::ompi::sys;

mod plugin_path;
use plugin_path::plugin_path;

fn cstr(bytes: &[core::ffi::c_char]) -> String {
    // SAFETY: the fixed-size name arrays of mca_base_component_t are NUL-terminated.
    unsafe { CStr::from_ptr(bytes.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn component_symbol_names_and_versions() {
    let path = CString::new(plugin_path().to_str().unwrap()).unwrap();
    // SAFETY: dlopen of our own plugin; RTLD_NOW makes any unresolved symbol fail here, the
    // way Open MPI would report "perhaps a missing symbol".
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns a message after a failed dlopen.
        let err = unsafe { CStr::from_ptr(libc::dlerror()) };
        panic!("dlopen failed: {}", err.to_string_lossy());
    }
    let name = CString::new("mca_btl_usnic_component").unwrap();
    // SAFETY: handle is live; the symbol name is NUL-terminated.
    let sym = unsafe { libc::dlsym(handle, name.as_ptr()) };
    assert!(!sym.is_null(), "mca_btl_usnic_component is not exported");
    // SAFETY: the shim defines this symbol with exactly this type (from the same headers).
    let comp = unsafe { &*(sym as *const sys::mca_btl_base_component_3_0_0_t) };
    let v = &comp.btl_version;
    assert_eq!(
        (
            v.mca_major_version,
            v.mca_minor_version,
            v.mca_release_version
        ),
        (2, 1, 0)
    );
    assert_eq!(cstr(&v.mca_type_name), "btl");
    assert_eq!(
        (
            v.mca_type_major_version,
            v.mca_type_minor_version,
            v.mca_type_release_version
        ),
        (3, 1, 0)
    );
    assert_eq!(cstr(&v.mca_component_name), "usnic");
    assert_eq!(cstr(&v.mca_project_name), "opal");
    assert_eq!(
        (
            v.mca_component_major_version,
            v.mca_component_minor_version,
            v.mca_component_release_version
        ),
        (
            sys::OPAL_MAJOR_VERSION as i32,
            sys::OPAL_MINOR_VERSION as i32,
            sys::OPAL_RELEASE_VERSION as i32
        )
    );
    assert!(v.mca_open_component.is_some());
    assert!(v.mca_close_component.is_some());
    assert!(v.mca_register_component_params.is_some());
    assert!(v.mca_query_component.is_none());
    assert!(comp.btl_init.is_some());
    assert!(comp.btl_progress.is_some());
    // The Rust entry points the shim forwards to are reachable too.
    for f in [
        "usnic_rs_component_init",
        "usnic_rs_progress",
        "usnic_rs_send",
    ] {
        let n = CString::new(f).unwrap();
        // SAFETY: as above.
        assert!(!unsafe { libc::dlsym(handle, n.as_ptr()) }.is_null(), "{f}");
    }
    // Nothing else leaks into the dynamic symbol table but the component and usnic_rs_*.
    let out = std::process::Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(plugin_path())
        .output()
        .expect("nm (binutils) must be installed");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("mca_btl_usnic_component"), "{text}");
    for line in text.lines() {
        let sym = line.split_whitespace().last().unwrap_or("");
        assert!(
            sym == "mca_btl_usnic_component" || sym.starts_with("usnic_rs_"),
            "unexpected export {sym}"
        );
    }
}
