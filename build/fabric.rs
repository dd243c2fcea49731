//! libfabric bindings (owned by the fabric edge).
pub fn generate() {}
