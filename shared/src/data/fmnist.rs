//! fmnist
