//! Open MPI bindings and the C shim (owned by the Open MPI edge).
pub fn generate() {}
