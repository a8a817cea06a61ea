//! Agreement between two flat clusterings: the (adjusted) Rand index.
//!
//! Both functions count pairs of observations exactly in integers, the way scikit-learn's
//! `pair_confusion_matrix` does, and return the same `f64` as `sklearn.metrics.rand_score` and
//! `adjusted_rand_score`, special cases included. Label values are arbitrary identifiers: only
//! which observations share a label matters.

use std::collections::HashMap;

/// Why two labelings cannot be compared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MetricsError {
    /// The two labelings cover different numbers of observations.
    #[error("labelings have different lengths ({0} and {1})")]
    LengthMismatch(usize, usize),
}

/// Pair counts over ordered pairs of distinct observations: `(tn, fp, fn, tp)` where "positive"
/// means "same cluster in `b`" and "true" means "same cluster in `a`" (scikit-learn's
/// `pair_confusion_matrix`, whose counts are twice the unordered ones).
fn pair_confusion(a: &[usize], b: &[usize]) -> (i128, i128, i128, i128) {
    let n = a.len() as i128;
    let mut cells: HashMap<(usize, usize), i128> = HashMap::new();
    let mut rows: HashMap<usize, i128> = HashMap::new();
    let mut cols: HashMap<usize, i128> = HashMap::new();
    for (&x, &y) in a.iter().zip(b) {
        *cells.entry((x, y)).or_insert(0) += 1;
        *rows.entry(x).or_insert(0) += 1;
        *cols.entry(y).or_insert(0) += 1;
    }
    let sum_squares: i128 = cells.values().map(|c| c * c).sum();
    let sum_rows_sq: i128 = rows.values().map(|c| c * c).sum();
    let sum_cols_sq: i128 = cols.values().map(|c| c * c).sum();
    let tp = sum_squares - n;
    // Pairs together in b but not in a, and together in a but not in b.
    let fp = sum_cols_sq - sum_squares;
    let fn_ = sum_rows_sq - sum_squares;
    let tn = n * n - fp - fn_ - sum_squares;
    (tn, fp, fn_, tp)
}

/// Adjusted Rand index (Hubert & Arabie 1985) of two labelings of the same observations, or an
/// error when their lengths differ. Equals `sklearn.metrics.adjusted_rand_score(a, b)`:
///
/// `ARI = 2 (tp·tn − fn·fp) / ((tp + fn)(fn + tn) + (tp + fp)(fp + tn))` over pair counts, and
/// exactly `1.0` when no pair is split differently (`fn = fp = 0`: identical partitions up to
/// renaming, fewer than two observations, or both labelings all-singletons or all-one-cluster).
/// It is 1 for identical partitions, about 0 for independent ones, and can be negative.
pub fn try_adjusted_rand_index(a: &[usize], b: &[usize]) -> Result<f64, MetricsError> {
    if a.len() != b.len() {
        return Err(MetricsError::LengthMismatch(a.len(), b.len()));
    }
    let (tn, fp, fn_, tp) = pair_confusion(a, b);
    if fn_ == 0 && fp == 0 {
        return Ok(1.0);
    }
    let num = tp * tn - fn_ * fp;
    let den = (tp + fn_) * (fn_ + tn) + (tp + fp) * (fp + tn);
    Ok(2.0 * (num as f64) / (den as f64))
}

/// [`try_adjusted_rand_index`] for labelings known to have the same length; returns NaN when
/// the lengths differ (it never panics).
pub fn adjusted_rand_index(a: &[usize], b: &[usize]) -> f64 {
    try_adjusted_rand_index(a, b).unwrap_or(f64::NAN)
}

/// Rand index: the fraction of pairs of observations on which the two labelings agree (both
/// together or both apart). Equals `sklearn.metrics.rand_score(a, b)`, which is `1.0` for fewer
/// than two observations. Returns NaN when the lengths differ.
pub fn rand_index(a: &[usize], b: &[usize]) -> f64 {
    if a.len() != b.len() {
        return f64::NAN;
    }
    let (tn, fp, fn_, tp) = pair_confusion(a, b);
    let agree = tn + tp;
    let total = tn + fp + fn_ + tp;
    if agree == total || total == 0 {
        return 1.0;
    }
    agree as f64 / total as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_and_permuted() {
        let a = [0, 0, 1, 1, 2, 2, 2];
        assert_eq!(adjusted_rand_index(&a, &a), 1.0);
        let p = [5, 5, 9, 9, 0, 0, 0];
        assert_eq!(adjusted_rand_index(&a, &p), 1.0);
        assert_eq!(rand_index(&a, &p), 1.0);
    }

    #[test]
    fn degenerate_cases() {
        assert_eq!(adjusted_rand_index(&[], &[]), 1.0);
        assert_eq!(adjusted_rand_index(&[3], &[7]), 1.0);
        assert_eq!(adjusted_rand_index(&[0; 4], &[1; 4]), 1.0);
        assert_eq!(adjusted_rand_index(&[0, 1, 2, 3], &[3, 2, 1, 0]), 1.0);
        // One cluster against all singletons: every pair disagrees, ARI 0 (sklearn: 0.0).
        assert_eq!(adjusted_rand_index(&[0; 4], &[0, 1, 2, 3]), 0.0);
        assert_eq!(rand_index(&[0; 4], &[0, 1, 2, 3]), 0.0);
        assert_eq!(rand_index(&[], &[]), 1.0);
        assert!(adjusted_rand_index(&[0, 1], &[0]).is_nan());
        assert_eq!(
            try_adjusted_rand_index(&[0, 1], &[0]),
            Err(MetricsError::LengthMismatch(2, 1))
        );
    }

    #[test]
    fn worked_example() {
        // a = [0,0,0,1,1,1], b = [0,0,1,1,2,2]; contingency (rows a, columns b):
        //   a=0: b0 2, b1 1, b2 0
        //   a=1: b0 0, b1 1, b2 2
        // Σ C(n_ij,2) = 1 + 0 + 0 + 0 + 0 + 1 = 2
        // rows 3,3: Σ C(a_i,2) = 3 + 3 = 6; columns 2,2,2: Σ C(b_j,2) = 3; C(6,2) = 15.
        // expected = 6·3/15 = 1.2; max = (6+3)/2 = 4.5
        // ARI = (2 − 1.2) / (4.5 − 1.2) = 0.8 / 3.3 = 8/33
        // Rand: pairs agreeing = together in both (2) + apart in both (15 − 6 − 3 + 2 = 8) = 10
        //   → 10/15 = 2/3.
        let a = [0, 0, 0, 1, 1, 1];
        let b = [0, 0, 1, 1, 2, 2];
        assert!((adjusted_rand_index(&a, &b) - 8.0 / 33.0).abs() < 1e-15);
        assert!((adjusted_rand_index(&b, &a) - 8.0 / 33.0).abs() < 1e-15);
        assert!((rand_index(&a, &b) - 2.0 / 3.0).abs() < 1e-15);
    }

    #[test]
    fn negative_ari() {
        // a = [0,0,1,1], b = [0,1,0,1]: no pair together in both.
        // Σ C(n_ij,2) = 0; Σ C(a,2) = 2; Σ C(b,2) = 2; C(4,2) = 6; expected = 4/6 = 2/3;
        // max = 2; ARI = (0 − 2/3) / (2 − 2/3) = −1/2.
        assert!((adjusted_rand_index(&[0, 0, 1, 1], &[0, 1, 0, 1]) + 0.5).abs() < 1e-15);
    }
}
