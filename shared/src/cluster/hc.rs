//! hc
