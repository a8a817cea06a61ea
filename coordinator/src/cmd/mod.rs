//! The subcommands of `coordinator`, one module each, named as on the command line.

pub mod bench;
pub mod cluster;
pub mod credentials;
pub mod demo;
pub mod export;
pub mod lps;
pub mod partition;
pub mod serve;
pub mod simulate;
