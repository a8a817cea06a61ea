//! Clustering: agglomerative hierarchical clustering, distances and scoring.
//!
//! | module | what it holds |
//! | --- | --- |
//! | [`distance`] | [`CondensedMatrix`] (scipy's condensed layout), Euclidean and cosine distances |
//! | [`hc`] | [`linkage`] equal to `scipy.cluster.hierarchy.linkage` (single, complete, average, weighted, ward), [`Dendrogram`] cuts |
//! | [`clustering`] | the one-shot clustering of signatures the methods share: [`Lambda`], the tree cut, centroids, [`Clustering`] |
//! | [`cut`] | the automatic cut: [`silhouette_cut`] (best mean silhouette over the candidate cuts, the default `auto`) and [`gap_cut`] (largest gap) |
//! | [`subspace`] | PACFL's data signature (each class's top left singular vectors) and the angles between two clients' subspaces |
//! | [`spectral`] | MT-HFL's data signature (leading eigenpairs of the Gram matrix) and the relevance between clients |
//! | [`metrics`] | [`adjusted_rand_index`] and [`rand_index`] equal to scikit-learn's |
//! | [`robust`] | the guards of the one-shot cut against one client's upload: norm outliers rescaled, isolated clients quarantined |
//!
//! ```
//! use edgecfl_shared::cluster::{
//!     CondensedMatrix, Linkage, adjusted_rand_index, linkage, silhouette_cut,
//! };
//!
//! let points = vec![vec![0.0f32, 0.0], vec![0.0, 1.0], vec![10.0, 0.0], vec![10.0, 1.5]];
//! let d = CondensedMatrix::euclidean(&points).unwrap();
//! let tree = linkage(&d, Linkage::Average);
//! let labels = tree.cut_distance(silhouette_cut(&tree, &d).unwrap().threshold());
//! assert_eq!(labels, vec![0, 0, 1, 1]);
//! assert_eq!(tree.cut_distance(tree.auto_threshold()), labels);
//! assert_eq!(tree.cut_k(2), labels);
//! assert_eq!(adjusted_rand_index(&labels, &[7, 7, 3, 3]), 1.0);
//! ```

pub mod clustering;
pub mod cut;
pub mod distance;
pub mod hc;
pub mod metrics;
pub mod robust;
pub mod spectral;
pub mod subspace;

pub use clustering::{
    Clustering, ClusteringError, Lambda, LambdaParseError, centroids, cluster_distances,
    cluster_signatures, cut_tree, guarded_cut, nearest_centroid,
};
pub use cut::{
    CutCandidate, CutError, CutRule, CutScores, MIN_SILHOUETTE, SILHOUETTE_TIE, gap_cut,
    silhouette_cut, silhouette_score,
};
pub use distance::{CondensedMatrix, DistanceError};
pub use hc::{Dendrogram, HcError, Linkage, Merge, ParseLinkageError, linkage};
pub use metrics::{MetricsError, adjusted_rand_index, rand_index, try_adjusted_rand_index};
