//! Where the plugin tests find the plugin, and a check that it is not older than its sources.
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// `target/<profile>/libusnic_rs.so`, the cdylib of the crate. `cargo test` builds the
/// tests against the crate but does not relink this file, so after an edit it can be the
/// plugin of an older tree: the tests would pass or fail for code that is no longer there.
/// `cargo build --release` first (as `./test.sh` does); this refuses a plugin older than any
/// source it is built from.
pub fn plugin_path() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>");
    let p = dir.join("libusnic_rs.so");
    assert!(p.exists(), "plugin not built at {}", p.display());
    let built = modified(&p);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources = Vec::new();
    for d in ["src", "build"] {
        collect(&root.join(d), &mut sources);
    }
    for f in [
        "build.rs",
        "Cargo.toml",
        "mca_btl_usnic.c.shim",
        "help-mpi-btl-usnic-rs.txt",
    ] {
        sources.push(root.join(f));
    }
    if let Some(newer) = sources.iter().find(|s| s.exists() && modified(s) > built) {
        panic!(
            "{} is older than {}: `cargo test` does not relink the plugin; run `cargo build \
             --release` first (./test.sh does)",
            p.display(),
            newer.display()
        );
    }
    p
}

fn modified(p: &Path) -> SystemTime {
    std::fs::metadata(p)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out);
        } else {
            out.push(p);
        }
    }
}
