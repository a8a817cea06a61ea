//! Data: the Fashion-MNIST IDX reader, the bundled subset and the NIID-Bench partitions.

pub mod fmnist;
pub mod idx;
pub mod partition;
