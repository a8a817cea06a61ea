//! `edge-client` binary.
fn main() {}
