//! idx
