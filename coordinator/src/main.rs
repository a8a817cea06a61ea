//! `coordinator` binary: argument parsing only.
fn main() {}
