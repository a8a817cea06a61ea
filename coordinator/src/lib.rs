//! # edgecfl-coordinator
//!
//! The coordinator runtime. `main.rs` only parses arguments; each subcommand lives in a module here.

pub mod offline;
