//! LPS ⇄ GPS: MT-HFL's hierarchy across processes.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

use super::{Encoding, Id, ModelKind, ProtocolError, Tensor, Text, id};

// ───────────────────────────── LPS ⇄ GPS: MT-HFL's hierarchy across processes ─────────────────────────────
//
// A local parameter server (LPS, `coordinator lps`) runs FedAvg with the clients of one cluster
// and exchanges only the common layers with the global parameter server (GPS, `coordinator serve
// --lps remote`), which may run on another machine behind the same broker:
//
//  LPS                                                     GPS
//   │ ── lps/<id>/status: Hello (retained) ───────────────▶ │  (last will: Gone, retained)
//   │ ◀── lps/<id>/down: Assign{cluster, members, θ⁰, …} ── │  after round 0 (clustering)
//   │     FedAvg with the members for L rounds (their own client topics)
//   │ ── lps/<id>/up: Common{samples, accuracy, values} ──▶ │  round = GPS round g (1, 2, …)
//   │ ◀── lps/<id>/down: Common{values} ─────────────────── │  Σ_c N_c θ_c / Σ_c N_c
//   │     … every L rounds …
//   │ ── lps/<id>/up: Done{…} ────────────────────────────▶ │
//   │ ◀── lps/<id>/down: Finish ─────────────────────────── │
//
// `values` holds the common layers only (`hierarchy::CommonLayers`), in f32: both directions of
// one GPS round move `common_len × 4` bytes of tensor plus the envelope.

/// One LPS's job, sent by the GPS after round 0: the cluster it serves, its members (client ids,
/// in the GPS's client order), the starting model θ⁰, and the settings of its FedAvg loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LpsAssignment {
    /// The cluster (0-based).
    pub cluster: u32,
    /// Clusters in the run (each has its own LPS).
    pub clusters: u32,
    /// The cluster's clients.
    pub members: Vec<Id>,
    /// Architecture.
    pub model: ModelKind,
    /// θ⁰, the model every cluster starts from (f32).
    pub initial: Tensor,
    /// The common layers, as `LayerSet` text (`fc1`, `conv1,conv2`).
    pub common_layers: Text,
    /// Training rounds of the LPS.
    pub rounds: u32,
    /// FedAvg rounds between two GPS rounds.
    pub lps_rounds: u32,
    /// Evaluate every this many rounds (and after the last).
    pub eval_every: u32,
    /// Fraction of the members sampled per round, in (0, 1].
    pub frac: f64,
    /// Local epochs.
    pub epochs: u32,
    /// Mini-batch size.
    pub batch_size: u32,
    /// Learning rate.
    pub lr: f64,
    /// SGD momentum.
    pub momentum: f64,
    /// Seed of the LPS's client sampling and its clients' sample order (the GPS derives one per
    /// cluster).
    pub seed: u64,
    /// Encoding of the members' model uploads.
    pub upload: Encoding,
    /// Weigh every member's update equally in the cluster's FedAvg (`--weighting equal`) instead
    /// of by its training samples.
    pub equal_weights: bool,
    /// Drop a member's update whose change from the model it was sent is above this bound
    /// (`--max-update-norm`; at an LPS a `median:M` bound is M times the median of its own
    /// cluster's updates).
    pub max_update_norm: NormBound,
}

/// The bound on an update's change ‖θ_client − θ_sent‖₂ above which it is dropped and reported
/// (`--max-update-norm off|B|median:M`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum NormBound {
    /// No bound.
    Off,
    /// A fixed bound `B` (> 0, finite).
    Fixed(f64),
    /// `M` (≥ 1, finite) times the median change norm of the updates of the round's call (every
    /// sampled client of every cluster in a run; a remote LPS's own cluster there), so that a
    /// cluster of two is bounded by the fleet's statistics and no number is set by hand.
    Median(f64),
}

impl NormBound {
    /// The default: [`NormBound::Median`] of [`NormBound::DEFAULT_MULTIPLE`].
    pub const DEFAULT: NormBound = NormBound::Median(NormBound::DEFAULT_MULTIPLE);

    /// The default multiple of the median: honest updates of 100 clients on Fashion-MNIST
    /// reached 15.2× the median of their round (FedClust, `label:2`, round 13: a cluster still
    /// learning beside converged ones; BENCHMARKS §12), an update moved by 10 per coordinate is
    /// ~10 000× it.
    pub const DEFAULT_MULTIPLE: f64 = 100.0;

    /// The bound for a call whose updates' change norms have median `median`: `None` without
    /// one.
    pub fn bound(self, median: f64) -> Option<f64> {
        match self {
            NormBound::Off => None,
            NormBound::Fixed(b) => Some(b),
            NormBound::Median(m) => Some(m * median),
        }
    }

    /// Whether the number is in range (`B > 0`, `M ≥ 1`, finite); `Off` is.
    pub fn is_valid(self) -> bool {
        match self {
            NormBound::Off => true,
            NormBound::Fixed(b) => b.is_finite() && b > 0.0,
            NormBound::Median(m) => m.is_finite() && m >= 1.0,
        }
    }
}

impl Default for NormBound {
    fn default() -> Self {
        NormBound::DEFAULT
    }
}

impl core::fmt::Display for NormBound {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            NormBound::Off => f.write_str("off"),
            NormBound::Fixed(b) => write!(f, "{b}"),
            NormBound::Median(m) => write!(f, "median:{m}"),
        }
    }
}

impl core::str::FromStr for NormBound {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let b =
            match s.strip_prefix("median:") {
                _ if s == "off" => NormBound::Off,
                Some(m) => NormBound::Median(
                    m.parse()
                        .map_err(|_| format!("{s:?}: the multiple {m:?} is not a number"))?,
                ),
                None => NormBound::Fixed(s.parse().map_err(|_| {
                    format!("{s:?} is not off, a bound B > 0 or median:M with M ≥ 1")
                })?),
            };
        if b.is_valid() {
            Ok(b)
        } else {
            Err(format!(
                "{s:?}: the bound B must be a finite number > 0 and the multiple M of median:M \
                 finite and ≥ 1"
            ))
        }
    }
}

/// Errors of validating an LPS/GPS message beyond its decoding.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LpsMessageError {
    /// A tensor or an id that does not decode or check.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// An assignment without members.
    #[error("assignment without members")]
    NoMembers,
    /// A client listed twice.
    #[error("member {0:?} is listed twice")]
    DuplicateMember(String),
    /// A setting out of its range.
    #[error("{name} = {value} is out of range")]
    Setting {
        /// The setting.
        name: &'static str,
        /// Its value.
        value: String,
    },
    /// A `Common` upload with zero samples (its weight in the GPS average).
    #[error("common layers with zero samples")]
    ZeroSamples,
    /// An accuracy that is not a number in [0, 1].
    #[error("accuracy {0} is not in [0, 1]")]
    BadAccuracy(f64),
}

impl LpsAssignment {
    /// Checks what the LPS relies on: member ids (safe topic levels, unique), cluster index,
    /// settings in range, θ⁰ finite. The length of θ⁰ against the model's layout and the common
    /// layer names are checked by the LPS, which knows the models.
    ///
    /// # Errors
    ///
    /// The first problem found.
    pub fn validate(&self) -> Result<Vec<f32>, LpsMessageError> {
        if self.members.is_empty() {
            return Err(LpsMessageError::NoMembers);
        }
        for (i, m) in self.members.iter().enumerate() {
            id(m)?;
            if self.members[..i].contains(m) {
                return Err(LpsMessageError::DuplicateMember(m.as_str().into()));
            }
        }
        let setting = |name: &'static str, ok: bool, value: String| {
            if ok {
                Ok(())
            } else {
                Err(LpsMessageError::Setting { name, value })
            }
        };
        setting(
            "cluster",
            self.cluster < self.clusters,
            format!("{} of {}", self.cluster, self.clusters),
        )?;
        setting(
            "lps_rounds",
            self.lps_rounds >= 1,
            format!("{}", self.lps_rounds),
        )?;
        setting(
            "eval_every",
            self.eval_every >= 1,
            format!("{}", self.eval_every),
        )?;
        setting("epochs", self.epochs >= 1, format!("{}", self.epochs))?;
        setting(
            "batch_size",
            self.batch_size >= 1,
            format!("{}", self.batch_size),
        )?;
        setting(
            "frac",
            self.frac > 0.0 && self.frac <= 1.0,
            format!("{}", self.frac),
        )?;
        setting(
            "lr",
            self.lr.is_finite() && self.lr > 0.0,
            format!("{}", self.lr),
        )?;
        setting(
            "momentum",
            self.momentum.is_finite() && (0.0..1.0).contains(&self.momentum),
            format!("{}", self.momentum),
        )?;
        setting(
            "max_update_norm",
            self.max_update_norm.is_valid(),
            format!("{}", self.max_update_norm),
        )?;
        Ok(self.initial.decode(None)?)
    }
}

/// GPS → LPS, on `<prefix>/lps/<id>/down`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToLps {
    /// Serve this cluster (envelope round 0).
    Assign(alloc::boxed::Box<LpsAssignment>),
    /// The GPS average of the common layers of GPS round `g` (the envelope's round): insert it
    /// and go on.
    Common {
        /// The averaged common layers (f32).
        values: Tensor,
    },
    /// The run is over (also sent to an LPS that got no cluster).
    Finish,
    /// Sent by a GPS resumed from its checkpoint (`serve --resume` with `--lps remote`): "send
    /// again what you last sent me". An LPS waiting for the average of GPS round `g` (the
    /// envelope's round) publishes its `Common` of round `g` again; one that has sent its `Done`
    /// report sends that again, whatever the round; any other ignores it
    /// (its next upload is still to come).
    Resend,
}

/// What an LPS reports at the end of its loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LpsDone {
    /// Training rounds done.
    pub rounds: u32,
    /// GPS rounds done.
    pub gps_rounds: u32,
    /// Members with an evaluation.
    pub evaluated: u32,
    /// Mean local test accuracy over those members after the last round.
    pub final_accuracy: Option<f64>,
    /// Seconds from the assignment to the end.
    pub wall_seconds: f64,
}

/// LPS → GPS: `Hello` / `Gone` on `<prefix>/lps/<id>/status` (retained), the rest on
/// `<prefix>/lps/<id>/up`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToGps {
    /// "I am here, give me a cluster" (retained status message).
    Hello,
    /// The LPS's common layers after GPS round `g`'s local rounds (the envelope's round).
    Common {
        /// The cluster's training samples: the LPS's weight in the GPS average.
        samples: u64,
        /// The LPS's latest mean local test accuracy (None before its first evaluation).
        accuracy: Option<f64>,
        /// The common layers only (f32).
        values: Tensor,
    },
    /// The LPS finished its rounds.
    Done(LpsDone),
    /// The LPS cannot go on (the reason is for the log).
    Failed {
        /// Why.
        reason: Text,
    },
    /// The LPS is gone (last will, or a clean exit).
    Gone,
}

impl ToGps {
    /// Checks a `Common` upload and decodes its layers: `common_len` finite floats, samples ≥ 1,
    /// accuracy in [0, 1].
    ///
    /// # Errors
    ///
    /// [`LpsMessageError::Protocol`] for a tensor of the wrong length or with NaN, and the
    /// others as named. `Ok(None)` for a message that is not `Common`.
    pub fn common(&self, common_len: usize) -> Result<Option<(u64, Vec<f32>)>, LpsMessageError> {
        let ToGps::Common {
            samples,
            accuracy,
            values,
        } = self
        else {
            return Ok(None);
        };
        if *samples == 0 {
            return Err(LpsMessageError::ZeroSamples);
        }
        if let Some(a) = accuracy
            && !(0.0..=1.0).contains(a)
        {
            return Err(LpsMessageError::BadAccuracy(*a));
        }
        Ok(Some((*samples, values.decode(Some(common_len))?)))
    }
}
