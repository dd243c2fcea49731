//! Open MPI bindings and the C shim (owned by the Open MPI edge).
//!
//! - bindgen over `ompi-headers/ompi.h` (which includes the installed Open MPI 4.1 headers and the
//!   shim's helper prototypes) -> `$OUT_DIR/ompi_bindings.rs`, included by `src/ompi/sys.rs`;
//! - `cc` compiles `mca_btl_usnic.c.shim` as C against the same headers plus `include/usnic_rs.h`,
//!   linked whole so that `mca_btl_usnic_component` lands in the plugin;
//! - links `libopen-pal` (the plugin is loaded into processes that already have it).
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const DEFAULT_INCDIR: &str = "/usr/lib/x86_64-linux-gnu/openmpi/include";
const DEFAULT_LIBDIR: &str = "/usr/lib/x86_64-linux-gnu/openmpi/lib";

/// `mpicc --showme:<what>` split on whitespace, or nothing when mpicc is absent.
fn showme(what: &str) -> Vec<String> {
    let mpicc = env::var("MPICC").unwrap_or_else(|_| "mpicc".into());
    match Command::new(mpicc).arg(format!("--showme:{what}")).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// Include directories of the installed Open MPI: mpicc's, plus `<dir>/openmpi` where the
/// `opal/...` tree and `opal_config.h` live.
fn include_dirs() -> Vec<PathBuf> {
    // OMPI_INCDIR: one directory or a colon-separated list (an Open MPI build tree needs several).
    let mut dirs: Vec<PathBuf> = match env::var("OMPI_INCDIR") {
        Ok(d) => env::split_paths(&d).collect(),
        Err(_) => showme("incdirs").into_iter().map(PathBuf::from).collect(),
    };
    if dirs.is_empty() {
        dirs.push(PathBuf::from(DEFAULT_INCDIR));
    }
    let mut all = Vec::new();
    for d in dirs {
        let nested = d.join("openmpi");
        if !all.contains(&d) {
            all.push(d.clone());
        }
        if nested.join("opal_config.h").exists() && !all.contains(&nested) {
            all.push(nested);
        }
    }
    if !all.iter().any(|d| d.join("opal_config.h").exists()) {
        panic!(
            "Open MPI development headers not found (looked in {all:?}); install libopenmpi-dev \
             or set OMPI_INCDIR to the directory holding opal_config.h"
        );
    }
    all
}

fn lib_dirs() -> Vec<String> {
    let mut dirs = match env::var("OMPI_LIBDIR") {
        Ok(d) => env::split_paths(&d)
            .map(|p| p.to_string_lossy().into_owned())
            .collect(),
        Err(_) => showme("libdirs"),
    };
    if dirs.is_empty() {
        dirs.push(DEFAULT_LIBDIR.into());
    }
    dirs
}

pub fn generate() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let headers = root.join("ompi-headers");
    let shim = root.join("mca_btl_usnic.c.shim");
    for f in [
        "build/ompi.rs",
        "ompi-headers/ompi.h",
        "ompi-headers/usnic_shim.h",
        "ompi-headers/exports.map",
        "include/usnic_rs.h",
        "mca_btl_usnic.c.shim",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
    for v in ["MPICC", "OMPI_INCDIR", "OMPI_LIBDIR"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    let incs = include_dirs();

    bindings(&headers, &incs, &out);
    compile_shim(&root, &shim, &headers, &incs);

    for d in lib_dirs() {
        println!("cargo:rustc-link-search=native={d}");
    }
    println!("cargo:rustc-link-lib=dylib=open-pal");
    // The loader looks the component up by name with dlsym; rustc's export list only names Rust
    // items, so ask the linker to export the C data symbol as well.
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        root.join("ompi-headers/exports.map").display()
    );
}

fn bindings(headers: &Path, incs: &[PathBuf], out: &Path) {
    let mut b = bindgen::Builder::default()
        .header(headers.join("ompi.h").to_string_lossy())
        .clang_arg(format!("-I{}", headers.display()))
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .allowlist_function("usnic_shim_.*")
        .allowlist_type("usnic_shim_module_t")
        .allowlist_type("mca_btl_base_component_3_0_0_t")
        .allowlist_type("mca_btl_base_descriptor_t")
        .allowlist_type("mca_btl_base_segment_t")
        .allowlist_type("mca_btl_base_module_t")
        .allowlist_type("mca_btl_base_module_error_cb_fn_t")
        .allowlist_type("mca_btl_base_rdma_completion_fn_t")
        .allowlist_type("mca_btl_base_registration_handle_t")
        .allowlist_type("opal_proc_t")
        .allowlist_var("OPAL_SUCCESS")
        .allowlist_var("OPAL_ERR_.*")
        .allowlist_var("OPAL_ERROR")
        .allowlist_var("MCA_BTL_.*")
        .allowlist_var("OPAL_MAJOR_VERSION")
        .allowlist_var("OPAL_MINOR_VERSION")
        .allowlist_var("OPAL_RELEASE_VERSION")
        // Structures Rust only passes by pointer stay opaque: their layout is C's business.
        .opaque_type("opal_convertor_t")
        .opaque_type("opal_bitmap_t")
        .opaque_type("mca_mpool_base_module_t")
        .allowlist_type("mca_mpool_base_module_t")
        .opaque_type("opal_datatype_t")
        .derive_default(true)
        .layout_tests(true)
        .generate_comments(false);
    for d in incs {
        b = b.clang_arg(format!("-I{}", d.display()));
    }
    b.generate()
        .expect("bindgen over the Open MPI headers failed")
        .write_to_file(out.join("ompi_bindings.rs"))
        .expect("writing ompi_bindings.rs");
}

fn compile_shim(root: &Path, shim: &Path, headers: &Path, incs: &[PathBuf]) {
    let mut cc = cc::Build::new();
    cc.include(headers).include(root.join("include"));
    for d in incs {
        cc.include(d);
    }
    // The shim's name does not end in .c; tell the compiler its language explicitly.
    cc.flag("-x")
        .flag("c")
        .file(shim)
        .flag_if_supported("-std=gnu11")
        .warnings(true)
        .flag_if_supported("-Wno-unused-parameter")
        .link_lib_modifier("+whole-archive")
        .compile("usnic_shim");
}
