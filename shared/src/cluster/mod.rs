//! Clustering: agglomerative hierarchical clustering, distances and scoring.

pub mod distance;
pub mod hc;
pub mod metrics;
