//! fedclust
