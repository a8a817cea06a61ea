//! Sample-count-weighted federated averaging (FedAvg, McMahan et al. 2017).

use crate::model::Params;

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
    let (first, _) = updates.first().ok_or(AggregateError::Empty)?;
    let items: Vec<(&[f32], u64)> = updates
        .iter()
        .map(|(p, w)| (p.values.as_slice(), *w))
        .collect();
    for (index, (p, _)) in updates.iter().enumerate() {
        if p.model != first.model {
            return Err(AggregateError::Mismatch {
                index,
                expected: first.values.len(),
                got: p.values.len(),
            });
        }
    }
    Ok(Params {
        model: first.model,
        values: weighted_average(&items)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
