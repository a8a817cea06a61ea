//! MT-HFL (Ali & Arafa, "Data similarity-based one-shot clustering for multi-task hierarchical
//! federated learning"): one-shot clustering of clients from the eigenvectors of their data's Gram
//! matrix. The signature and relevance (steps 1 to 3) are in [`crate::cluster::spectral`], the
//! HAC and the placement of newcomers (step 4) here; the LPS/GPS training and the message
//! exchange live in the runtimes.
//!
//! # The pipeline
//!
//! 1. **Signature, on the client** ([`Gram`], [`Signature`]). Client `i` with `nᵢ` feature rows
//!    `Φ(Xᵢ)` (here the raw pixels scaled to `[0, 1]`, `d = 784`; the paper needs no feature map
//!    for Fashion-MNIST) forms the Gram matrix of eq. (1),
//!    `Gᵢ = (1/nᵢ) Φ(Xᵢ)ᵀ Φ(Xᵢ)` (`d × d`, symmetric, positive semi-definite, in `f64`),
//!    decomposes it, and keeps the `k` eigenpairs of largest eigenvalue `λ₁⁽ⁱ⁾ ≥ … ≥ λₖ⁽ⁱ⁾`
//!    with unit eigenvectors `v₁⁽ⁱ⁾ … vₖ⁽ⁱ⁾` ([`Gram::signature`]). That is what it uploads:
//!    `k·d + k` floats (`f32`, or `f16` via [`Signature::rounded`]). The paper shows `k = 5` of
//!    784 suffices (§III, "Communication improvement", Fig. 4).
//! 2. **Relevance, the paper's way, on every client** ([`client_row`]). The eigenvectors of every
//!    client are relayed to every client. Client `i` projects client `j`'s eigenvectors on its own
//!    exact Gram matrix, eq. (2):
//!    `λ̂ₘ⁽ʲ⁾ = ‖Gᵢ vₘ⁽ʲ⁾‖`, compares them with its own eigenvalues, eq. (3):
//!    `λₘ⁽ⁱ'ʲ⁾ = min(λₘ⁽ⁱ⁾, λ̂ₘ⁽ʲ⁾) / max(λₘ⁽ⁱ⁾, λ̂ₘ⁽ʲ⁾)`, and takes the geometric mean, eq. (4):
//!    `r(i, j) = (Π_{m ≤ k} λₘ⁽ⁱ'ʲ⁾)^(1/k)`
//!    (the paper writes the product over all `d`; with `k` kept eigenpairs the exponent is `1/k`).
//!    Client `i` uploads its row `r(i, ·)`.
//! 3. **Symmetrisation** ([`symmetrise`]), eq. (5): `R(i, j) = (r(i, j) + r(j, i)) / 2`, `R(i, i) = 1`.
//! 4. **Clustering** ([`cluster`]): agglomerative HC on the distance `1 − R` (the paper's HAC),
//!    cut by the automatic rule ([`Lambda::Auto`]: the best mean silhouette), at the number
//!    of tasks `T` ([`Lambda::Clusters`]) or at a height; the same
//!    [`Clustering`] as FedClust's, with no centroids (newcomers: [`newcomer_relevance`],
//!    [`assign_newcomer`]).
//!
//! **Relevance, server-side** ([`server_rows`]): instead of relaying `N·k·d` floats to each client
//! and having each one multiply them by its `d × d` matrix, the coordinator rebuilds each Gram
//! matrix from the upload, `Gᵢ ≈ Vᵢ Λᵢ Vᵢᵀ` (rank `k`), so that
//! `‖Gᵢ v‖² ≈ Σ_{a ≤ k} (λₐ⁽ⁱ⁾)² (vₐ⁽ⁱ⁾ · v)²`, and computes every `r(i, j)` from the `Nk × Nk`
//! matrix of eigenvector dot products (its upper half: one pair's products give `r(i, j)` and
//! `r(j, i)`), in tiles of batched matrix products on a burn [`Device`] (so a GPU coordinator
//! runs it on the GPU; on flex the tiles go to all cores). The terms it drops, `Σ_{a > k} λₐ² (vₐ · v)²`,
//! carry the squares of the small eigenvalues only; at `k = d` the reconstruction is exact and
//! the result equals the paper's (up to `f32` rounding). It saves each client the download of all
//! signatures (`N (k·d + k)` floats), `N·k·d²` multiply-adds and a second upload round.
//!
//! [`Estimate::Rayleigh`] replaces eq. (2)'s norm by the Rayleigh quotient `vᵀ Gᵢ v` (the data's
//! variance along `v`, which is what "how much their data vary in the direction of each column"
//! describes); both equal `λₘ` when `v` is an eigenvector of `Gᵢ`, and `‖Gᵢ v‖ ≥ vᵀ Gᵢ v` in general.
//! [`Estimate::Norm`], eq. (2) as printed, is the default. Server-side, the Rayleigh quotient is
//! `Σ_a λₐ (vₐ · v)²`.
//!
//!
//! The numerical conventions, and why nalgebra decomposes, are in [`crate::cluster::spectral`].
//!
//! [`Gram`]: crate::cluster::spectral::Gram
//! [`Gram::signature`]: crate::cluster::spectral::Gram::signature
//! [`client_row`]: crate::cluster::spectral::client_row

use super::MethodConfig;
use crate::cluster::clustering::{Clustering, Lambda, cluster_distances};
use crate::cluster::distance::CondensedMatrix;
use crate::cluster::hc::Linkage;
use crate::cluster::robust::Guard;
use crate::cluster::spectral::{
    DEFAULT_EIGENVECTORS, Estimate, Relevance, Signature, SpectralError, distances,
    server_row_and_column, server_rows, symmetrise,
};
use crate::federation::{
    Answer, ClientInfo, Clusters, Env, FederationError, Init, Job, NewcomerError, Placement,
    Strategy, Target, round0_uploads,
};
use crate::jobs::{GramJob, RelevanceJob};
use crate::protocol::Encoding;
use crate::train::Device;
use serde::{Deserialize, Serialize};

/// MT-HFL's own settings: `[federation]` keys and run flags of the same names (the cut is the
/// shared `threshold`/`clusters` and `linkage`, the LPS/GPS the shared `lps_rounds` and
/// `common_layers`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", group(skip))]
pub struct Settings {
    /// MT-HFL: eigenvectors (k) each client uploads (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub eigenvectors: Option<usize>,
    /// MT-HFL: relevance rows on the clients (the paper's way) or on the server: client | server
    /// (default client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub relevance: Option<Relevance>,
    /// MT-HFL: eigenvalue estimate of eq. (2): norm (the paper's; the default) | rayleigh
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub estimate: Option<Estimate>,
    /// MT-HFL: encoding of the uploaded eigenpairs: f32 (the default) | f16 (half the bytes)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub signature_encoding: Option<Encoding>,
}

impl Settings {
    /// k, or [`DEFAULT_EIGENVECTORS`].
    pub fn eigenvectors(&self) -> usize {
        self.eigenvectors.unwrap_or(DEFAULT_EIGENVECTORS)
    }

    /// Where the relevance rows are computed (default on the clients).
    pub fn relevance(&self) -> Relevance {
        self.relevance.unwrap_or_default()
    }

    /// Eq. (2)'s estimate (default the paper's norm).
    pub fn estimate(&self) -> Estimate {
        self.estimate.unwrap_or_default()
    }

    /// The eigenpairs' encoding (default f32).
    pub fn signature_encoding(&self) -> Encoding {
        self.signature_encoding.unwrap_or(Encoding::F32)
    }
}

/// The linkage [`cluster`] uses unless told otherwise: average (UPGMA). The paper does not name
/// one; average is the usual choice on a precomputed dissimilarity (ward needs Euclidean
/// distances between points).
pub const DEFAULT_LINKAGE: Linkage = Linkage::Average;

/// HAC on `1 − R` (R from [`symmetrise`]), cut by `lambda` (`k=T` for `T` tasks). The result
/// is FedClust's [`Clustering`] with empty `centroids` (place newcomers with
/// [`assign_newcomer`]); the distances come back too, for plots. Under [`Guard::Robust`],
/// isolated clients (a row unlike every other, as eigenvectors unrelated to anybody's give) are
/// set apart as clusters of their own and the cut is chosen on the others
/// ([`crate::cluster::robust`]); relevance is bounded, so there is no norm to rescale.
///
/// # Errors
///
/// [`SpectralError::Empty`] without clients; [`SpectralError::BadRows`].
pub fn cluster(
    relevance: &[Vec<f64>],
    method: Linkage,
    lambda: Lambda,
    guard: Guard,
) -> Result<(Clustering, CondensedMatrix), SpectralError> {
    if relevance.is_empty() {
        return Err(SpectralError::Empty);
    }
    let d = distances(relevance)?;
    Ok((cluster_distances(&d, method, lambda, guard), d))
}

/// A newcomer's cluster: the one whose members have the highest mean relevance `R` to it
/// (`relevance[j]` = `R(new, j)` for every clustered client `j`). Ties go to the lower index.
///
/// # Errors
///
/// [`SpectralError::BadRows`] if `relevance` does not have one entry per clustered client or holds
/// a non-finite value; [`SpectralError::Empty`] without clusters.
pub fn assign_newcomer(relevance: &[f64], clustering: &Clustering) -> Result<usize, SpectralError> {
    if relevance.len() != clustering.assignment.len() {
        return Err(SpectralError::BadRows(format!(
            "{} relevances for {} clients",
            relevance.len(),
            clustering.assignment.len()
        )));
    }
    if relevance.iter().any(|v| !v.is_finite()) {
        return Err(SpectralError::BadRows("a relevance is not finite".into()));
    }
    let mut sum = vec![0.0; clustering.n_clusters];
    let mut count = vec![0usize; clustering.n_clusters];
    for (&r, &c) in relevance.iter().zip(&clustering.assignment) {
        sum[c] += r;
        count[c] += 1;
    }
    let mut best: Option<(usize, f64)> = None;
    for c in 0..clustering.n_clusters {
        if count[c] == 0 {
            continue;
        }
        let mean = sum[c] / count[c] as f64;
        if best.is_none_or(|(_, b)| mean > b) {
            best = Some((c, mean));
        }
    }
    best.map(|(c, _)| c).ok_or(SpectralError::Empty)
}

/// MT-HFL's largest upload: the k eigenpairs (k × (d + 1)) or a relevance row (one value per
/// client), whichever is longer.
pub(crate) fn largest_upload_floats(cfg: &MethodConfig, clients: usize) -> usize {
    (cfg.methods.mthfl.eigenvectors() * (image_dim(cfg) + 1)).max(clients)
}

/// MT-HFL's own keys of `summary.json`, in the order of [`summary_fields`].
pub(crate) const SUMMARY_KEYS: [&str; 5] = [
    "eigenvectors",
    "relevance",
    "signature_encoding",
    "relevance_download_bytes_per_client",
    "relevance_row_floats_per_client",
];

/// The values of [`SUMMARY_KEYS`] for a run of `cfg` with `clients` clients whose signatures
/// took `signature_bytes` each: k, where the relevance was computed, the signatures' encoding,
/// and with relevance on the clients, what the paper's way costs each of them (the relay of every
/// signature down, one row up).
pub(crate) fn summary_fields(
    cfg: &MethodConfig,
    clients: usize,
    signature_bytes: usize,
) -> Vec<(&'static str, serde_json::Value)> {
    let own = &cfg.methods.mthfl;
    let on_clients = own.relevance() == Relevance::Client;
    let values = [
        serde_json::json!(own.eigenvectors()),
        serde_json::json!(own.relevance().to_string()),
        serde_json::json!(own.signature_encoding().to_string()),
        serde_json::json!(on_clients.then(|| clients * signature_bytes)),
        serde_json::json!(on_clients.then_some(clients)),
    ];
    SUMMARY_KEYS.into_iter().zip(values).collect()
}

/// The dimension of the data signatures: the pixels of one of the model's input images (Φ is the
/// identity, the paper's FMNIST mode: 784 for 1×28×28, 3 072 for 3×32×32).
fn image_dim(cfg: &MethodConfig) -> usize {
    cfg.federation.model.input().pixels()
}

/// Checks MT-HFL's settings: 1 ≤ k ≤ d eigenpairs (d pixels an image).
pub(crate) fn check(cfg: &MethodConfig) -> Result<(), FederationError> {
    let k = cfg.methods.mthfl.eigenvectors();
    let d = image_dim(cfg);
    if !(1..=d).contains(&k) {
        return Err(FederationError::Config(format!(
            "eigenvectors must be between 1 and {d} (the pixels of an image), got {k}"
        )));
    }
    Ok(())
}

/// A newcomer's symmetrised relevance `R(new, j) = (r(new, j) + r(j, new)) / 2` to every
/// clustered client `j`, both directions estimated server-side from the uploads
/// ([`server_row_and_column`]: the clustered clients' pairs among themselves are not recomputed).
///
/// # Errors
///
/// [`SpectralError::BadSignature`] / [`SpectralError::Mismatch`] for a signature of another `k` or `d`
/// or with non-finite values.
pub fn newcomer_relevance(
    clustered: &[Signature],
    newcomer: &Signature,
    estimate: Estimate,
    device: &Device,
) -> Result<Vec<f64>, SpectralError> {
    let (row, column) = server_row_and_column(clustered, newcomer, estimate, device)?;
    Ok(row
        .iter()
        .zip(&column)
        .map(|(a, b)| ((a + b) / 2.0).clamp(0.0, 1.0))
        .collect())
}

/// MT-HFL as a [`Strategy`]: Algorithm 2's round 0 (signatures, relevance rows (eq. 2-4) on the
/// clients or the server, `R` (eq. 5), HAC on `1 − R`) in [`Strategy::init`]; then every
/// cluster is an LPS running FedAvg, and the driver's GPS step averages the common layers
/// (MT-HFL runs are always hierarchical).
///
/// Newcomers (the paper has none; a choice of ours): the newcomer uploads its signature as in
/// round 0, the server estimates its relevance to every round-0 client in both directions from
/// the uploads ([`newcomer_relevance`]; with `--relevance client` too, so no client computes or
/// downloads anything more), and it joins the cluster of highest mean `R` ([`assign_newcomer`]).
/// The reported distance is `1 −` that mean. The round-0 clustering does not change.
#[derive(Debug, Clone, Default)]
pub struct MtHfl {
    /// Its settings.
    settings: Settings,
    /// The signatures' dimension, [`image_dim`].
    d: usize,
    /// The round-0 clients' signatures, by position.
    signatures: Vec<Signature>,
    /// The round-0 clustering.
    clustering: Option<Clustering>,
}

impl MtHfl {
    /// The method for a run with `cfg`.
    pub fn new(cfg: &MethodConfig) -> Self {
        MtHfl {
            settings: cfg.methods.mthfl.clone(),
            d: image_dim(cfg),
            ..MtHfl::default()
        }
    }
}

/// The signature job of round 0 (and of a newcomer), for signatures of dimension `d`.
fn signature_job<'a>(settings: &Settings, d: usize) -> Job<'a> {
    Job::GramSignature(GramJob {
        k: settings.eigenvectors(),
        d,
        encoding: settings.signature_encoding(),
    })
}

/// The signatures among `answers`, by position.
fn signatures_of(answers: Vec<(usize, Answer)>) -> Vec<(usize, Signature)> {
    let mut sigs: Vec<(usize, Signature)> = answers
        .into_iter()
        .filter_map(|(p, a)| match a {
            Answer::Eigenpairs(s) => Some((p, s)),
            _ => None,
        })
        .collect();
    sigs.sort_by_key(|(p, _)| *p);
    sigs
}

impl Strategy for MtHfl {
    /// The state: the round-0 signatures and clustering (they place newcomers).
    fn save(&self) -> Option<serde_json::Value> {
        serde_json::to_value((&self.signatures, &self.clustering)).ok()
    }

    fn restore(&mut self, state: serde_json::Value) -> Result<(), FederationError> {
        let bad = |e: String| FederationError::Config(format!("MT-HFL's checkpoint: {e}"));
        let (signatures, clustering): (Vec<Signature>, Option<Clustering>) =
            serde_json::from_value(state).map_err(|e| bad(e.to_string()))?;
        if let Some(s) = signatures
            .iter()
            .find(|s| s.values.len() != s.k || s.vectors.len() != s.k.saturating_mul(s.d))
        {
            return Err(bad(format!(
                "a signature of k = {} and d = {} with {} values and {} vector floats",
                s.k,
                s.d,
                s.values.len(),
                s.vectors.len()
            )));
        }
        self.signatures = signatures;
        self.clustering = clustering;
        Ok(())
    }

    fn init(&mut self, env: &mut Env<'_>) -> Result<Init, FederationError> {
        let cfg = env.cfg;
        let n = env.clients.len();
        let jobs = (0..n)
            .map(|p| (p, signature_job(&self.settings, self.d)))
            .collect();
        let (mut sigs, mut absent) = round0_uploads(n, signatures_of(env.run(0, jobs)?))?;
        let rows = match self.settings.relevance() {
            Relevance::Server => {
                let device = env
                    .ctx
                    .backend
                    .device()
                    .map_err(|e| FederationError::Config(e.to_string()))?;
                server_rows(&sigs, self.settings.estimate(), &device)?
            }
            Relevance::Client => {
                // Signature `j` is that of the j-th present client.
                let present: Vec<usize> = (0..n).filter(|p| !absent.contains(p)).collect();
                let jobs = present
                    .iter()
                    .map(|&p| {
                        (
                            p,
                            Job::Relevance(RelevanceJob {
                                all: &sigs,
                                estimate: self.settings.estimate(),
                            }),
                        )
                    })
                    .collect();
                let got: Vec<(usize, Vec<f64>)> = env
                    .run(0, jobs)?
                    .into_iter()
                    .filter_map(|(p, a)| match a {
                        Answer::Row(r) => present.binary_search(&p).ok().map(|j| (j, r)),
                        _ => None,
                    })
                    .collect();
                let (rows, missing) = round0_uploads(present.len(), got).map_err(|e| match e {
                    FederationError::TooFewSignatures { expected, got } => {
                        FederationError::TooFewRows { expected, got }
                    }
                    e => e,
                })?;
                // A client without a row leaves too, with its column of the others' rows.
                fn kept<T>(v: Vec<T>, missing: &[usize]) -> Vec<T> {
                    v.into_iter()
                        .enumerate()
                        .filter(|(j, _)| !missing.contains(j))
                        .map(|(_, x)| x)
                        .collect()
                }
                let rows = rows.into_iter().map(|r| kept(r, &missing)).collect();
                sigs = kept(sigs, &missing);
                absent.extend(missing.iter().map(|&j| present[j]));
                absent.sort_unstable();
                rows
            }
        };
        let relevance = symmetrise(&rows)?;
        let (mut clustering, distances) =
            cluster(&relevance, cfg.linkage, cfg.cut(), cfg.signature_guard)?;
        let present: Vec<usize> = (0..n).filter(|p| !absent.contains(p)).collect();
        clustering.map_positions(&present);
        let floats = sigs[0].k * sigs[0].d + sigs[0].k;
        let mut init = Init::plain(clustering.assignment.clone(), env.initial, true);
        init.absent = absent;
        init.clustering = Some(clustering.clone());
        init.distances = Some(distances);
        init.relevance = Some(relevance);
        init.signature_len = floats;
        init.signature_bytes = floats * self.settings.signature_encoding().width();
        self.signatures = sigs;
        self.clustering = Some(clustering);
        Ok(init)
    }

    fn place(
        &mut self,
        env: &mut Env<'_>,
        _round: usize,
        fresh: &[ClientInfo],
        state: &Clusters,
    ) -> Result<Vec<Result<Placement, NewcomerError>>, FederationError> {
        let base = state.assignment().len();
        let jobs = (base..base + fresh.len())
            .map(|p| (p, signature_job(&self.settings, self.d)))
            .collect();
        let mut sigs: std::collections::HashMap<usize, Signature> =
            signatures_of(env.run(0, jobs)?).into_iter().collect();
        let device = env
            .ctx
            .backend
            .device()
            .map_err(|e| FederationError::Config(e.to_string()))?;
        let Some(clustering) = &self.clustering else {
            return Ok(fresh
                .iter()
                .map(|_| Err(NewcomerError::Assignment("no clustering".into())))
                .collect());
        };
        Ok((base..base + fresh.len())
            .map(|p| {
                let sig = sigs.remove(&p).ok_or(NewcomerError::NoSignature)?;
                let placed =
                    newcomer_relevance(&self.signatures, &sig, self.settings.estimate(), &device)
                        .and_then(|row| {
                            let c = assign_newcomer(&row, clustering)?;
                            let members = clustering.members(c);
                            let mean = members.iter().map(|&j| row[j]).sum::<f64>()
                                / members.len().max(1) as f64;
                            Ok((c, 1.0 - mean))
                        });
                placed
                    .map(|(c, d)| Placement {
                        target: Target::Cluster(c),
                        distance: Some(d),
                    })
                    .map_err(|e| NewcomerError::Assignment(e.to_string()))
            })
            .collect())
    }
}
