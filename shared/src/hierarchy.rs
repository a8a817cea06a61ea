//! MT-HFL's hierarchy (Ali & Arafa, §II-D, Algorithm 1): local parameter servers (LPSs), one per
//! cluster, and the global parameter server (GPS) that shares the *common layers* between them.
//!
//! ```text
//!            GPS: θ_common ← Σ_c N_c θ_common^(c) / Σ_c N_c        (eq. GPS below)
//!         ▲ common layers ▲            │ averaged common layers
//!         │ of every LPS  │            ▼ back to every LPS
//!   ┌─────┴───┐     ┌─────┴───┐     ┌─────────┐
//!   │ LPS 0   │     │ LPS 1   │ ... │ LPS C−1 │   each: FedAvg with its own clients for
//!   └─┬─────┬─┘     └─┬─────┬─┘     └─┬─────┬─┘   L local rounds, then one GPS exchange
//!    clients         clients           clients
//! ```
//!
//! Each LPS `c` runs FedAvg with the clients of its cluster for `L` rounds (Algorithm 1, line 5;
//! the round loop in [`federation`](crate::federation) does that). Then every LPS sends only the
//! parameters of the common layers to the GPS (line 6), which averages them weighted by the
//! LPSs' sample counts `N_c` (the training samples of the cluster's members) and sends the result
//! back (line 7):
//!
//! **eq. GPS**: `θ_common ← Σ_c N_c · θ_common^(c) / Σ_c N_c`,
//!
//! and every LPS continues from the averaged common layers combined with its own last values of
//! the other layers ("these weighted average weights, combined with the LPSs' last weights for
//! the remaining layers, serve as the starting point for the subsequent iteration"). The paper
//! says "weighted average" without naming the weights; sample counts are FedAvg's weights one
//! level up, so that the GPS average equals FedAvg over all clients when every LPS holds the same
//! model.
//!
//! Which layers are common ([`default_common_layers`]): the paper shares the two convolution
//! layers of its CIFAR-10 CNN; for its FMNIST MLP (784 → 32 → 10) it does not say, and we share
//! the first (feature) layer, `fc1`, so each task keeps its own classifier head. A layer is shared
//! whole (weight and bias).
//!
//! The functions are split along the wire: an LPS [`CommonLayers::extract`]s its common part, the
//! GPS [`gps_average`]s the parts it received, and each LPS [`CommonLayers::insert`]s the average;
//! [`gps_round`] does the three in one process.

use crate::aggregate::{Aggregate, AggregateError, aggregate, median};
use crate::model::{LayerSet, ModelError, ModelKind, ParamLayout, Params, Selection};

/// Errors of the GPS step.
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum HierarchyError {
    /// A named common layer is not a layer of the model.
    #[error("model {model} has no layer {layer:?} (its layers: {available})")]
    UnknownLayer {
        /// The model.
        model: ModelKind,
        /// The name that was asked for.
        layer: String,
        /// The model's layers, comma-separated.
        available: String,
    },
    /// The layer set selects nothing, or is otherwise unusable.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// No LPS model to average.
    #[error("no LPS model to average")]
    NoLps,
    /// An LPS model of another architecture than the common layers were chosen for.
    #[error("LPS {index} holds a {got} model, the common layers are of {expected}")]
    WrongModel {
        /// Which LPS.
        index: usize,
        /// The model of the common layers.
        expected: ModelKind,
        /// The LPS's model.
        got: ModelKind,
    },
    /// A common part or a model of the wrong length.
    #[error("LPS {index}: {got} floats, expected {expected}")]
    WrongLength {
        /// Which LPS.
        index: usize,
        /// Expected floats.
        expected: usize,
        /// Floats given.
        got: usize,
    },
    /// Weights and models differ in number.
    #[error("{models} LPS models but {weights} sample counts")]
    WeightCount {
        /// Models.
        models: usize,
        /// Weights.
        weights: usize,
    },
    /// The weighted average failed (all weights zero).
    #[error("GPS average: {0}")]
    Aggregate(#[from] AggregateError),
    /// A value that is NaN or infinite.
    #[error("LPS {index}: common-layer value {at} is not finite")]
    NotFinite {
        /// Which LPS.
        index: usize,
        /// Position in the common part.
        at: usize,
    },
}

/// The common layers MT-HFL shares through the GPS by default: the two convolution layers of
/// LeNet-5 and AdaCFL's CNNs (`conv1,conv2`, as the paper's CNN), the first layer of the MLP
/// (`fc1`), every block of ResNet-9 but its classifier.
pub fn default_common_layers(model: ModelKind) -> LayerSet {
    let names: &[&str] = match model {
        ModelKind::LeNet5
        | ModelKind::LeNet5Rgb
        | ModelKind::MnistCnn
        | ModelKind::CifarCnn
        | ModelKind::FmnistCnn => &["conv1", "conv2"],
        ModelKind::Mlp => &["fc1"],
        // Every block, the classifier apart (as the CNNs share their convolutions).
        ModelKind::ResNet9 => &["conv1", "conv2", "res1", "conv3", "conv4", "res2"],
    };
    LayerSet::Named(names.iter().map(|s| (*s).to_string()).collect())
}

/// The common layers of one model: which floats of a [`Params`] vector the GPS averages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommonLayers {
    model: ModelKind,
    /// The model's parameter count (of its class count).
    len: usize,
    set: LayerSet,
    selection: Selection,
}

impl CommonLayers {
    /// The common layers `set` of `model` (`None`: [`default_common_layers`]). Every name of a
    /// [`LayerSet::Named`] must be a layer of the model (a typo must not silently share less).
    ///
    /// # Errors
    ///
    /// [`HierarchyError::UnknownLayer`], or [`HierarchyError::Model`] for a set that selects
    /// nothing.
    pub fn new(model: ModelKind, set: Option<&LayerSet>) -> Result<Self, HierarchyError> {
        CommonLayers::of(&ParamLayout::of(model), set)
    }

    /// [`CommonLayers::new`] for the model of `layout` (and its class count).
    ///
    /// # Errors
    ///
    /// As [`CommonLayers::new`].
    pub fn of(layout: &ParamLayout, set: Option<&LayerSet>) -> Result<Self, HierarchyError> {
        let model = layout.model;
        let set = set.cloned().unwrap_or_else(|| default_common_layers(model));
        if let LayerSet::Named(names) = &set {
            let layers = layout.layers();
            if let Some(bad) = names.iter().find(|n| !layers.contains(&n.as_str())) {
                return Err(HierarchyError::UnknownLayer {
                    model,
                    layer: bad.clone(),
                    available: layers.join(","),
                });
            }
        }
        let selection = layout.select(&set)?;
        Ok(CommonLayers {
            model,
            len: layout.len(),
            set,
            selection,
        })
    }

    /// The model.
    pub fn model(&self) -> ModelKind {
        self.model
    }

    /// The layer set.
    pub fn set(&self) -> &LayerSet {
        &self.set
    }

    /// The selected tensors.
    pub fn selection(&self) -> &Selection {
        &self.selection
    }

    /// Floats of the common part (what one LPS sends to the GPS and receives back).
    pub fn len(&self) -> usize {
        self.selection.len()
    }

    /// True when nothing is shared (never for a set [`CommonLayers::new`] accepted).
    pub fn is_empty(&self) -> bool {
        self.selection.is_empty()
    }

    fn check_model(&self, index: usize, p: &Params) -> Result<(), HierarchyError> {
        if p.model != self.model {
            return Err(HierarchyError::WrongModel {
                index,
                expected: self.model,
                got: p.model,
            });
        }
        let expected = self.len;
        if p.values.len() != expected {
            return Err(HierarchyError::WrongLength {
                index,
                expected,
                got: p.values.len(),
            });
        }
        Ok(())
    }

    /// The common part of an LPS model (Algorithm 1, line 6: what the LPS sends to the GPS).
    ///
    /// # Errors
    ///
    /// [`HierarchyError::WrongModel`] / [`HierarchyError::WrongLength`].
    pub fn extract(&self, model: &Params) -> Result<Vec<f32>, HierarchyError> {
        self.check_model(0, model)?;
        Ok(self.selection.extract(&model.values))
    }

    /// Writes the GPS average into an LPS model, keeping its other layers (line 7).
    ///
    /// # Errors
    ///
    /// [`HierarchyError::WrongModel`] / [`HierarchyError::WrongLength`] for a model or a part
    /// that does not fit, [`HierarchyError::NotFinite`].
    pub fn insert(&self, model: &mut Params, common: &[f32]) -> Result<(), HierarchyError> {
        self.check_model(0, model)?;
        self.check_part(0, common)?;
        self.selection.insert(&mut model.values, common);
        Ok(())
    }

    fn check_part(&self, index: usize, part: &[f32]) -> Result<(), HierarchyError> {
        if part.len() != self.len() {
            return Err(HierarchyError::WrongLength {
                index,
                expected: self.len(),
                got: part.len(),
            });
        }
        if let Some(at) = part.iter().position(|v| !v.is_finite()) {
            return Err(HierarchyError::NotFinite { index, at });
        }
        Ok(())
    }
}

/// The GPS average (eq. GPS) of the common parts the LPSs sent, each with its sample count
/// `N_c`, as `how` says (`--aggregate`): [`Aggregate::Mean`], the paper's
/// `Σ_c N_c · part_c / Σ_c N_c` accumulated in `f64`; the coordinate-wise median or trimmed mean
/// (unweighted); [`Aggregate::NormClip`], each part's distance from the parts' coordinate-wise
/// median clipped to the median of those distances, then the weighted mean (the GPS has no
/// earlier model common to all parts to measure changes from). Every part must have
/// `common.len()` finite floats.
///
/// # Errors
///
/// [`HierarchyError::NoLps`], [`HierarchyError::WrongLength`], [`HierarchyError::NotFinite`],
/// [`HierarchyError::Aggregate`] when every weight is zero.
pub fn gps_average(
    common: &CommonLayers,
    parts: &[(&[f32], u64)],
    how: Aggregate,
) -> Result<Vec<f32>, HierarchyError> {
    if parts.is_empty() {
        return Err(HierarchyError::NoLps);
    }
    for (index, (part, _)) in parts.iter().enumerate() {
        common.check_part(index, part)?;
    }
    let reference = match how {
        Aggregate::NormClip => median(parts)?,
        _ => Vec::new(),
    };
    Ok(aggregate(parts, how, &reference)?)
}

/// One GPS round in one process: the common layers of every LPS model are replaced by their
/// average weighted by `samples` (`samples[c]` = training samples of cluster `c`'s members);
/// every other layer of every model is left as it was. Returns the average ([`gps_average`]).
///
/// # Errors
///
/// [`HierarchyError::WeightCount`], and as [`CommonLayers::extract`] and [`gps_average`].
pub fn gps_round(
    common: &CommonLayers,
    models: &mut [Params],
    samples: &[u64],
    how: Aggregate,
) -> Result<Vec<f32>, HierarchyError> {
    if models.len() != samples.len() {
        return Err(HierarchyError::WeightCount {
            models: models.len(),
            weights: samples.len(),
        });
    }
    for (index, m) in models.iter().enumerate() {
        common.check_model(index, m)?;
    }
    let parts: Vec<Vec<f32>> = models
        .iter()
        .map(|m| common.selection.extract(&m.values))
        .collect();
    let weighted: Vec<(&[f32], u64)> = parts
        .iter()
        .zip(samples)
        .map(|(p, &w)| (p.as_slice(), w))
        .collect();
    let average = gps_average(common, &weighted, how)?;
    for m in models.iter_mut() {
        common.selection.insert(&mut m.values, &average);
    }
    Ok(average)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_select_the_papers_layers() {
        let c = CommonLayers::new(ModelKind::LeNet5, None).unwrap();
        assert_eq!(c.set().to_string(), "conv1,conv2");
        // conv1: 6·1·5·5 + 6, conv2: 16·6·5·5 + 16
        assert_eq!(c.len(), 156 + 2416);
        let m = CommonLayers::new(ModelKind::Mlp, None).unwrap();
        assert_eq!(m.set().to_string(), "fc1");
        assert_eq!(m.len(), 784 * 32 + 32);
    }

    #[test]
    fn unknown_layers_are_refused() {
        let set: LayerSet = "fc1,conv9".parse().unwrap();
        let e = CommonLayers::new(ModelKind::Mlp, Some(&set)).unwrap_err();
        assert!(matches!(e, HierarchyError::UnknownLayer { ref layer, .. } if layer == "conv9"));
        assert!(e.to_string().contains("fc1,fc2"), "{e}");
    }

    /// An MLP whose `fc1` tensors are all `a` and `fc2` tensors all `b`.
    fn mlp(a: f32, b: f32) -> Params {
        let layout = ParamLayout::of(ModelKind::Mlp);
        let mut values = vec![0.0; layout.len()];
        for e in &layout.entries {
            let v = if e.layer() == "fc1" { a } else { b };
            values[e.range()].iter_mut().for_each(|x| *x = v);
        }
        Params::new(ModelKind::Mlp, values).unwrap()
    }

    #[test]
    fn gps_round_by_hand() {
        // fc1 = 1, 2, 3 with 1, 2, 1 samples: (1·1 + 2·2 + 1·3) / 4 = 2.
        let mut models = vec![mlp(1.0, 10.0), mlp(2.0, 20.0), mlp(3.0, 30.0)];
        let common = CommonLayers::new(ModelKind::Mlp, None).unwrap();
        let avg = gps_round(&common, &mut models, &[1, 2, 1], Aggregate::Mean).unwrap();
        assert_eq!(avg.len(), 784 * 32 + 32);
        assert!(avg.iter().all(|&x| x == 2.0));
        for (c, m) in models.iter().enumerate() {
            assert_eq!(*m, mlp(2.0, 10.0 * (c + 1) as f32), "LPS {c}");
        }
    }

    #[test]
    fn gps_averages_elementwise_and_keeps_lenet_heads() {
        // Two LeNet-5 LPSs: element i of the conv layers is i in LPS 0 and −i in LPS 1, weighted
        // 3 : 1, so the average is i·(3 − 1)/4 = i/2. Every fc float stays where it was.
        let layout = ParamLayout::of(ModelKind::LeNet5);
        let common = CommonLayers::new(ModelKind::LeNet5, None).unwrap();
        let conv_end = layout.entry("fc1.weight").unwrap().offset;
        assert_eq!(conv_end, common.len());
        let a: Vec<f32> = (0..layout.len()).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..layout.len()).map(|i| -(i as f32)).collect();
        let mut models = vec![
            Params::new(ModelKind::LeNet5, a.clone()).unwrap(),
            Params::new(ModelKind::LeNet5, b.clone()).unwrap(),
        ];
        gps_round(&common, &mut models, &[3, 1], Aggregate::Mean).unwrap();
        for i in 0..conv_end {
            let want = i as f32 / 2.0;
            assert_eq!(models[0].values[i], want, "float {i}");
            assert_eq!(models[1].values[i], want, "float {i}");
        }
        assert_eq!(models[0].values[conv_end..], a[conv_end..]);
        assert_eq!(models[1].values[conv_end..], b[conv_end..]);
    }

    #[test]
    fn the_wire_split_equals_the_in_process_round() {
        let common = CommonLayers::new(ModelKind::Mlp, None).unwrap();
        let mut models = vec![mlp(0.5, 1.0), mlp(-1.5, 2.0)];
        let parts: Vec<Vec<f32>> = models.iter().map(|m| common.extract(m).unwrap()).collect();
        let avg = gps_average(&common, &[(&parts[0], 1), (&parts[1], 3)], Aggregate::Mean).unwrap();
        // (0.5 − 3·1.5) / 4 = −1
        assert!(avg.iter().all(|&x| x == -1.0));
        let mut in_process = models.clone();
        gps_round(&common, &mut in_process, &[1, 3], Aggregate::Mean).unwrap();
        for m in &mut models {
            common.insert(m, &avg).unwrap();
        }
        assert_eq!(models, in_process);
    }

    #[test]
    fn bad_input_is_an_error() {
        let common = CommonLayers::new(ModelKind::Mlp, None).unwrap();
        let mut two = vec![mlp(1.0, 1.0), mlp(2.0, 2.0)];
        assert_eq!(
            gps_round(&common, &mut two, &[1], Aggregate::Mean),
            Err(HierarchyError::WeightCount {
                models: 2,
                weights: 1
            })
        );
        assert!(matches!(
            gps_round(&common, &mut two, &[0, 0], Aggregate::Mean),
            Err(HierarchyError::Aggregate(AggregateError::ZeroWeight))
        ));
        assert_eq!(
            gps_round(&common, &mut [], &[], Aggregate::Mean),
            Err(HierarchyError::NoLps)
        );
        let mut mixed = vec![mlp(1.0, 1.0), Params::init(ModelKind::LeNet5, 0)];
        assert!(matches!(
            gps_round(&common, &mut mixed, &[1, 1], Aggregate::Mean),
            Err(HierarchyError::WrongModel { index: 1, .. })
        ));
        let short = vec![0.0; common.len() - 1];
        assert!(matches!(
            gps_average(&common, &[(&short, 1)], Aggregate::Mean),
            Err(HierarchyError::WrongLength { index: 0, .. })
        ));
        let mut nan = vec![0.0; common.len()];
        nan[5] = f32::NAN;
        assert_eq!(
            common.insert(&mut two[0], &nan),
            Err(HierarchyError::NotFinite { index: 0, at: 5 })
        );
        // The failed insert left the model as it was.
        assert_eq!(two[0], mlp(1.0, 1.0));
    }

    /// A robust `--aggregate` at the GPS: one LPS sending a wild common part cannot move the
    /// median of three, nor pull the norm-clipped mean further than the others' spread.
    #[test]
    fn the_gps_average_as_aggregate_says() {
        let common = CommonLayers::new(ModelKind::Mlp, None).unwrap();
        let n = common.len();
        let a = vec![1.0f32; n];
        let b = vec![2.0f32; n];
        let wild = vec![1000.0f32; n];
        let parts = [(&a[..], 1), (&b[..], 1), (&wild[..], 1)];
        let mean = gps_average(&common, &parts, Aggregate::Mean).unwrap();
        assert!((mean[0] - 1003.0 / 3.0).abs() < 1e-3);
        assert_eq!(gps_average(&common, &parts, Aggregate::Median).unwrap(), b);
        // Distances from the median part (2): 1, 0 and 998 per coordinate, their median 1 per
        // coordinate: the wild part clipped to 3, so the mean is (1 + 2 + 3) / 3 = 2.
        let clipped = gps_average(&common, &parts, Aggregate::NormClip).unwrap();
        assert!(
            clipped.iter().all(|&x| (x - 2.0).abs() < 1e-4),
            "{}",
            clipped[0]
        );
    }
}
