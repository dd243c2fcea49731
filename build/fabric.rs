//! libfabric bindings (owned by the fabric edge).
//!
//! Generates Rust declarations for the SYSTEM libfabric (Debian 12 `libfabric-dev`, API 1.17)
//! from its own headers, so every struct layout comes from them and never from a hand copy,
//! and links `libfabric.so` (the same library Open MPI itself loads).
//!
//! Most libfabric calls (`fi_domain`, `fi_send`, `fi_cq_read`, `fi_close`, ...) are
//! `static inline` functions that only jump through the ops tables stored in every `fid`.
//! We call through those same tables from Rust (see `src/fabric/sys.rs`) instead of compiling
//! C wrappers: the tables are part of the public ABI, the generated structs give their exact
//! layout, and it needs neither bindgen's experimental `wrap_static_fns` nor a C file.
use std::env;
use std::path::PathBuf;

/// The wrapper header: the public libfabric headers the fabric edge uses, and `<netinet/udp.h>`
/// for the constants of batched sends and reads on the udp provider's socket.
const WRAPPER: &str = r#"
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <netinet/udp.h>
"#;

pub fn generate() {
    println!("cargo:rerun-if-changed=build/fabric.rs");
    println!("cargo:rustc-link-lib=fabric");

    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let bindings = bindgen::Builder::default()
        .header_contents("usnic_fabric_wrapper.h", WRAPPER)
        .allowlist_function("fi_(getinfo|freeinfo|dupinfo|fabric|strerror|version)")
        .allowlist_type("fi_.*|fid_.*|fid")
        .allowlist_var("FI_.*")
        // For the udp provider's socket: batches sent with generic segmentation (fabric/gso.rs)
        // and read with generic receive offload (fabric/gro.rs).
        .allowlist_var("SOL_UDP|UDP_SEGMENT|UDP_GRO")
        // Static inline functions are reached through the ops tables, not as symbols.
        .generate_inline_functions(false)
        .layout_tests(true)
        .derive_default(true)
        .prepend_enum_name(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .expect("bindgen failed on <rdma/fabric.h> (is libfabric-dev installed?)");
    bindings
        .write_to_file(out.join("fabric_sys.rs"))
        .expect("cannot write fabric_sys.rs");
}
