//! Sample-count-weighted federated averaging (FedAvg, McMahan et al. 2017), and the robust
//! aggregates a run may choose instead (`--aggregate`, [`Aggregate`]): the coordinate-wise median
//! and trimmed mean (Yin et al. 2018; Flower's FedMedian and FedTrimmedAvg), the mean of
//! updates clipped to the round's median update norm, and multi-Krum (Blanchard et al. 2017;
//! Flower's Krum).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::model::Params;

/// How a cluster's updates become its model.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Aggregate {
    /// FedAvg: the mean weighted as `--weighting` says. The default.
    #[default]
    Mean,
    /// The coordinate-wise median of the updates (unweighted): one update cannot move any
    /// coordinate past the others.
    Median,
    /// The coordinate-wise mean after dropping the ⌊F·n⌋ lowest and highest values of each
    /// coordinate (unweighted), `0 ≤ F < 0.5`; at least one at each end when `F > 0` and there
    /// are 3 or more updates (a cluster of 3 to 4 members at `F = 0.2` would trim nothing by
    /// ⌊F·n⌋ alone), at most ⌊(n − 1)/2⌋.
    Trimmed(f64),
    /// Each update's change from the model it was sent is clipped to the median change norm of
    /// the round, then the weighted mean is taken: no update moves the model further than a
    /// typical one, and no bound is set by hand.
    NormClip,
    /// Multi-Krum for at most `f` bad updates: each update is scored by the sum of its squared
    /// distances to its `n − f − 2` nearest others, and the weighted mean is taken over the
    /// `n − f` of lowest score: an update far from every other is left out whole. Krum's
    /// guarantee needs `n > 2f + 2` updates (Blanchard et al. 2017, Prop. 1); a cluster with
    /// fewer (but at least 3) is aggregated by the coordinate-wise median instead, which bounds
    /// up to ⌊(n − 1)/2⌋ bad updates, and one of 1 or 2 by the mean (nothing can outvote a
    /// lone bad update there).
    Krum(usize),
}

impl fmt::Display for Aggregate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Aggregate::Mean => f.write_str("mean"),
            Aggregate::Median => f.write_str("median"),
            Aggregate::Trimmed(x) => write!(f, "trimmed:{x}"),
            Aggregate::NormClip => f.write_str("norm-clip"),
            Aggregate::Krum(n) => write!(f, "krum:{n}"),
        }
    }
}

impl FromStr for Aggregate {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || {
            format!(
                "unknown aggregate {s:?} (expected mean, median, trimmed:F with 0 ≤ F < 0.5, norm-clip, or krum:F with F ≥ 1 bad updates)"
            )
        };
        match s {
            "mean" => Ok(Aggregate::Mean),
            "median" => Ok(Aggregate::Median),
            "norm-clip" => Ok(Aggregate::NormClip),
            _ => {
                if let Some(f) = s.strip_prefix("krum:") {
                    return match f.parse::<usize>() {
                        Ok(f) if f >= 1 => Ok(Aggregate::Krum(f)),
                        _ => Err(err()),
                    };
                }
                match s.strip_prefix("trimmed:").map(str::parse::<f64>) {
                    Some(Ok(f)) if (0.0..0.5).contains(&f) => Ok(Aggregate::Trimmed(f)),
                    _ => Err(err()),
                }
            }
        }
    }
}

impl From<Aggregate> for String {
    fn from(a: Aggregate) -> String {
        a.to_string()
    }
}

impl TryFrom<String> for Aggregate {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// Errors of aggregation.
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum AggregateError {
    /// Nothing to average.
    #[error("no update to aggregate")]
    Empty,
    /// Updates of different models or sizes.
    #[error("update {index} has {got} parameters, expected {expected}")]
    Mismatch {
        /// Position of the offending update.
        index: usize,
        /// Expected length.
        expected: usize,
        /// Its length.
        got: usize,
    },
    /// Every weight is zero.
    #[error("all sample counts are zero")]
    ZeroWeight,
}

/// Averages vectors weighted by `weights` (sample counts): `Σ wᵢ·xᵢ / Σ wᵢ`, accumulated in f64.
pub fn weighted_average(items: &[(&[f32], u64)]) -> Result<Vec<f32>, AggregateError> {
    let (first, _) = items.first().ok_or(AggregateError::Empty)?;
    let len = first.len();
    let total: f64 = items.iter().map(|(_, w)| *w as f64).sum();
    if total <= 0.0 {
        return Err(AggregateError::ZeroWeight);
    }
    let mut acc = vec![0f64; len];
    for (index, (v, w)) in items.iter().enumerate() {
        if v.len() != len {
            return Err(AggregateError::Mismatch {
                index,
                expected: len,
                got: v.len(),
            });
        }
        let w = *w as f64 / total;
        for (a, x) in acc.iter_mut().zip(v.iter()) {
            *a += w * f64::from(*x);
        }
    }
    Ok(acc.into_iter().map(|a| a as f32).collect())
}

/// FedAvg of full models: every update must be of the same model.
pub fn fedavg(updates: &[(&Params, u64)]) -> Result<Params, AggregateError> {
    let (model, items) = model_items(updates)?;
    Ok(Params {
        model,
        values: weighted_average(&items)?,
    })
}

/// `how` over whole models (`(model, weight)`), each trained from `reference` (the values
/// [`Aggregate::NormClip`] measures changes from): [`fedavg`] for [`Aggregate::Mean`], bit for
/// bit, else [`aggregate`] of their values. Every model must be of the same kind.
///
/// # Errors
///
/// [`AggregateError`] for none, or models of different kinds or sizes.
pub fn aggregate_models(
    models: &[(&Params, u64)],
    how: Aggregate,
    reference: &[f32],
) -> Result<Params, AggregateError> {
    let (model, items) = model_items(models)?;
    Ok(Params {
        model,
        values: aggregate(&items, how, reference)?,
    })
}

/// Values with their weights, as [`aggregate`] takes them.
type Items<'a> = Vec<(&'a [f32], u64)>;

/// The models' kind and their values with their weights; every model must be of the first's
/// kind.
fn model_items<'a>(
    models: &[(&'a Params, u64)],
) -> Result<(crate::model::ModelKind, Items<'a>), AggregateError> {
    let (first, _) = models.first().ok_or(AggregateError::Empty)?;
    for (index, (p, _)) in models.iter().enumerate() {
        if p.model != first.model {
            return Err(AggregateError::Mismatch {
                index,
                expected: first.values.len(),
                got: p.values.len(),
            });
        }
    }
    Ok((
        first.model,
        models
            .iter()
            .map(|(p, w)| (p.values.as_slice(), *w))
            .collect(),
    ))
}

/// Checks that `items` is non-empty and of one length; returns it.
fn common_len(items: &[(&[f32], u64)]) -> Result<usize, AggregateError> {
    let (first, _) = items.first().ok_or(AggregateError::Empty)?;
    let len = first.len();
    for (index, (v, _)) in items.iter().enumerate() {
        if v.len() != len {
            return Err(AggregateError::Mismatch {
                index,
                expected: len,
                got: v.len(),
            });
        }
    }
    Ok(len)
}

/// The coordinate-wise trimmed mean: per coordinate, the mean of the values left after dropping
/// the `trim` lowest and the `trim` highest (`trim` < n/2; 0: the plain mean). Weights are
/// ignored.
fn trimmed_mean(items: &[(&[f32], u64)], trim: usize) -> Result<Vec<f32>, AggregateError> {
    let len = common_len(items)?;
    let n = items.len();
    let trim = trim.min((n - 1) / 2);
    let mut column = vec![0f32; n];
    Ok((0..len)
        .map(|j| {
            for (c, (v, _)) in column.iter_mut().zip(items) {
                *c = v[j];
            }
            column.sort_by(f32::total_cmp);
            let kept = &column[trim..n - trim];
            (kept.iter().map(|&x| f64::from(x)).sum::<f64>() / kept.len() as f64) as f32
        })
        .collect())
}

/// The coordinate-wise median (the mean of the middle two for an even count). Weights are
/// ignored.
pub fn median(items: &[(&[f32], u64)]) -> Result<Vec<f32>, AggregateError> {
    let n = items.len();
    trimmed_mean(items, n.saturating_sub(1) / 2)
}

/// [`Aggregate::NormClip`]: each `x − reference` clipped to the median of their L2 norms, then
/// the weighted mean of `reference + clipped`.
fn norm_clipped(items: &[(&[f32], u64)], reference: &[f32]) -> Result<Vec<f32>, AggregateError> {
    let len = common_len(items)?;
    if reference.len() != len {
        return Err(AggregateError::Mismatch {
            index: 0,
            expected: reference.len(),
            got: len,
        });
    }
    let deltas: Vec<Vec<f64>> = items
        .iter()
        .map(|(v, _)| {
            v.iter()
                .zip(reference)
                .map(|(x, r)| f64::from(*x) - f64::from(*r))
                .collect()
        })
        .collect();
    let norms: Vec<f64> = deltas
        .iter()
        .map(|d| d.iter().map(|x| x * x).sum::<f64>().sqrt())
        .collect();
    let bound = crate::cluster::robust::median(&norms);
    let clipped: Vec<Vec<f32>> = deltas
        .iter()
        .zip(&norms)
        .map(|(d, &n)| {
            let f = if n > bound && n > 0.0 { bound / n } else { 1.0 };
            d.iter()
                .zip(reference)
                .map(|(x, r)| (f64::from(*r) + f * x) as f32)
                .collect()
        })
        .collect();
    let items: Vec<(&[f32], u64)> = clipped
        .iter()
        .zip(items)
        .map(|(c, (_, w))| (c.as_slice(), *w))
        .collect();
    weighted_average(&items)
}

/// `how` over `items` (values and weights); `reference` is the model the updates were trained
/// from (needed by [`Aggregate::NormClip`]; the others ignore it).
pub fn aggregate(
    items: &[(&[f32], u64)],
    how: Aggregate,
    reference: &[f32],
) -> Result<Vec<f32>, AggregateError> {
    match how {
        Aggregate::Mean => weighted_average(items),
        Aggregate::Median => median(items),
        Aggregate::Trimmed(f) => trimmed_mean(items, trim_count(f, items.len())),
        Aggregate::NormClip => norm_clipped(items, reference),
        Aggregate::Krum(f) => krum(items, f),
    }
}

/// How many values [`Aggregate::Trimmed`]`(f)` drops at each end of `n`: ⌊f·n⌋, at least 1 when
/// `f > 0` and `n ≥ 3` (trimmed_mean caps it at ⌊(n − 1)/2⌋).
fn trim_count(f: f64, n: usize) -> usize {
    let t = (f * n as f64).floor() as usize;
    if f > 0.0 && n >= 3 { t.max(1) } else { t }
}

/// [`Aggregate::Krum`]: the weighted mean of the `n − f` updates whose summed squared distance
/// to their `n − f − 2` nearest others is lowest, when `n > 2f + 2`; otherwise the median (or,
/// for 1 or 2 updates, the mean), as [`Aggregate::Krum`] says.
fn krum(items: &[(&[f32], u64)], f: usize) -> Result<Vec<f32>, AggregateError> {
    common_len(items)?;
    let n = items.len();
    if n <= 2 {
        return weighted_average(items);
    }
    if n <= 2 * f + 2 {
        return median(items);
    }
    let neighbours = n - f - 2;
    let distance = |a: &[f32], b: &[f32]| -> f64 {
        a.iter()
            .zip(b)
            .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
            .sum()
    };
    let mut scores: Vec<(f64, usize)> = (0..n)
        .map(|i| {
            let mut d: Vec<f64> = (0..n)
                .filter(|&j| j != i)
                .map(|j| distance(items[i].0, items[j].0))
                .collect();
            d.sort_by(f64::total_cmp);
            (d[..neighbours].iter().sum(), i)
        })
        .collect();
    scores.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut kept: Vec<usize> = scores[..n.saturating_sub(f).max(1)]
        .iter()
        .map(|s| s.1)
        .collect();
    kept.sort_unstable();
    let chosen: Vec<(&[f32], u64)> = kept.iter().map(|&i| items[i]).collect();
    weighted_average(&chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_trimmed_mean_by_hand() {
        let (a, b, c, d, e) = (
            [1.0f32, 10.0],
            [2.0, 20.0],
            [3.0, 30.0],
            [4.0, 40.0],
            [1000.0, -1000.0],
        );
        let items = [
            (&a[..], 1),
            (&b[..], 1),
            (&c[..], 1),
            (&d[..], 1),
            (&e[..], 1_000_000),
        ];
        // Column 0: 1 2 3 4 1000 → 3; column 1: −1000 10 20 30 40 → 20. The weight is ignored.
        assert_eq!(median(&items).unwrap(), vec![3.0, 20.0]);
        // Even count: the middle two's mean.
        assert_eq!(median(&items[..4]).unwrap(), vec![2.5, 25.0]);
        // trimmed:0.2 of 5 drops one at each end: (2+3+4)/3, (10+20+30)/3.
        assert_eq!(
            aggregate(&items, Aggregate::Trimmed(0.2), &[0.0, 0.0]).unwrap(),
            vec![3.0, 20.0]
        );
        // trimmed:0.2 of 3 or 4 still drops one at each end (⌊0.6⌋ = ⌊0.8⌋ = 0): the median
        // of 3, (2+3)/2 and (20+30)/2 of 4.
        assert_eq!(
            aggregate(&items[2..], Aggregate::Trimmed(0.2), &[0.0, 0.0]).unwrap(),
            vec![4.0, 30.0]
        );
        assert_eq!(
            aggregate(&items[..4], Aggregate::Trimmed(0.2), &[0.0, 0.0]).unwrap(),
            vec![2.5, 25.0]
        );
        // trimmed:0 is the unweighted mean.
        assert_eq!(
            aggregate(&items[..2], Aggregate::Trimmed(0.0), &[0.0, 0.0]).unwrap(),
            vec![1.5, 15.0]
        );
        assert_eq!(median(&items[..1]).unwrap(), vec![1.0, 10.0]);
    }

    #[test]
    fn norm_clip_holds_an_update_to_the_median_change() {
        let reference = [0.0f32, 0.0];
        // Changes of norm 1, 1, 1 and 100 (the last in another direction): the median is 1, so
        // the last is scaled to [0, 1]; the mean is ([1,0]·3 + [0,1]) / 4.
        let (a, b, c, d) = ([1.0f32, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 100.0]);
        let items = [(&a[..], 1), (&b[..], 1), (&c[..], 1), (&d[..], 1)];
        assert_eq!(
            aggregate(&items, Aggregate::NormClip, &reference).unwrap(),
            vec![0.75, 0.25]
        );
        // Unclipped, the weighted mean as usual.
        assert_eq!(
            aggregate(&items[..3], Aggregate::NormClip, &reference).unwrap(),
            vec![1.0, 0.0]
        );
        assert!(aggregate(&items, Aggregate::NormClip, &[0.0]).is_err());
    }

    #[test]
    fn aggregate_names_parse_and_print() {
        for s in ["mean", "median", "trimmed:0.1", "norm-clip"] {
            assert_eq!(s.parse::<Aggregate>().unwrap().to_string(), s);
        }
        for bad in ["trimmed:0.5", "trimmed:-0.1", "trimmed:x", "krum", ""] {
            assert!(bad.parse::<Aggregate>().is_err(), "{bad}");
        }
    }

    #[test]
    fn weighted_mean_by_hand() {
        // (1·[1,2] + 3·[5,6]) / 4 = [4, 5]
        let a = [1.0f32, 2.0];
        let b = [5.0f32, 6.0];
        assert_eq!(
            weighted_average(&[(&a, 1), (&b, 3)]).unwrap(),
            vec![4.0, 5.0]
        );
    }

    #[test]
    fn errors() {
        assert_eq!(weighted_average(&[]), Err(AggregateError::Empty));
        let a = [1.0f32];
        let b = [1.0f32, 2.0];
        assert!(matches!(
            weighted_average(&[(&a, 1), (&b, 1)]),
            Err(AggregateError::Mismatch { index: 1, .. })
        ));
        assert_eq!(
            weighted_average(&[(&a, 0)]),
            Err(AggregateError::ZeroWeight)
        );
    }

    /// Multi-Krum by hand: four updates at the corners of a 1 × 2 rectangle and one far away,
    /// f = 1, n = 5 > 2f + 2. Each is scored by its squared distances to its n − f − 2 = 2
    /// nearest others: a, b, c, d 1 + 4 = 5 each, far 145 + 162 (to d and c); the n − f = 4
    /// lowest are averaged with their weights 1, 1, 2, 4: (0 + 1 + 0 + 4)/8, (0 + 0 + 4 + 8)/8.
    /// With n = 4 ≤ 2f + 2 Krum's guarantee does not hold: the coordinate-wise median,
    /// x (0 + 1)/2 and y (0 + 2)/2 (Krum itself would keep a, b, c: 0.25, 1.0).
    #[test]
    fn krum_leaves_out_the_update_far_from_the_others() {
        let (a, b, c, d, far) = (
            [0.0f32, 0.0],
            [1.0, 0.0],
            [0.0, 2.0],
            [1.0, 2.0],
            [9.0, 11.0],
        );
        let items = [
            (&a[..], 1),
            (&b[..], 1),
            (&c[..], 2),
            (&d[..], 4),
            (&far[..], 1_000),
        ];
        assert_eq!(
            aggregate(&items, Aggregate::Krum(1), &[]).unwrap(),
            vec![0.625, 1.5]
        );
        let four = [items[0], items[1], items[2], items[4]];
        assert_eq!(
            aggregate(&four, Aggregate::Krum(1), &[]).unwrap(),
            vec![0.5, 1.0]
        );
        assert_eq!("krum:1".parse::<Aggregate>(), Ok(Aggregate::Krum(1)));
        assert_eq!(Aggregate::Krum(2).to_string(), "krum:2");
        assert!("krum:0".parse::<Aggregate>().is_err());
        // Two updates: nothing to compare, the mean.
        assert_eq!(
            aggregate(&items[..2], Aggregate::Krum(1), &[]).unwrap(),
            vec![0.5, 0.0]
        );
    }
}
