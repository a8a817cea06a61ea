//! federation
