//! offline
