//! Build script: generates bindings from the installed libfabric and Open MPI headers and
//! compiles the C shim. Each edge keeps its own part in `build/`.
#[path = "build/fabric.rs"]
mod fabric;
#[path = "build/ompi.rs"]
mod ompi;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    fabric::generate();
    ompi::generate();
}
