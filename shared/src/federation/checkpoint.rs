//! Checkpoints of the round driver: everything [`super::run_resumable`] needs to continue a run
//! after its last completed round as if it had never stopped (the sampling and the clients' seeds
//! are derived from the seed and the round, so no generator state is kept).
//!
//! Written as JSON by the runtime after every round ([`Checkpoint::to_json`]); a NaN accuracy
//! (a client never evaluated) is kept as `null`. JSON parsers may round a decimal float by one
//! unit in the last place, so every non-integer number is written as the string `"f64:0x…"`
//! of its bits ([`to_exact_json`], [`from_exact_json`]): a resumed run reads back every value bit
//! for bit.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};

use super::{
    Clusters, DroppedNewcomer, DroppedUpdate, FederationConfig, FederationError, Newcomer,
    RoundRecord,
};
use crate::cluster::clustering::Clustering;
use crate::cluster::distance::CondensedMatrix;
use crate::federation::ClientInfo;
use crate::model::Params;
use crate::train::EvalReport;

/// Format version of [`Checkpoint`].
pub const CHECKPOINT_VERSION: u32 = 1;

/// The driver's state after round `round` (0: after the clustering round).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Checkpoint {
    /// [`CHECKPOINT_VERSION`].
    pub version: u32,
    /// The run's whole configuration as written, method and method settings included
    /// ([`super::Plan::config`]): a resumed run must bring the same.
    pub config: serde_json::Value,
    /// Rounds completed.
    pub round: usize,
    /// The run's clients (round 0's, then placed newcomers), by position.
    pub clients: Vec<ClientInfo>,
    /// Cluster of each client, by position.
    pub assignment: Vec<usize>,
    /// The cluster models.
    pub models: Vec<Params>,
    /// Each cluster model's version (evaluations are tagged with it).
    pub model_versions: Vec<u64>,
    /// The next version number.
    pub next_version: u64,
    /// Each client's last evaluation, with the (cluster, model version) it was made under.
    pub last_eval: Vec<Option<(EvalReport, (usize, u64))>>,
    /// The records of the completed rounds.
    pub rounds: Vec<RoundRecord>,
    /// Accuracy of each client at the last evaluation (`None`: never evaluated).
    pub final_client_accuracy: Vec<Option<f64>>,
    /// Best accuracy of each client over the evaluations so far (`None`: never evaluated).
    #[serde(default)]
    pub best_client_accuracy: Vec<Option<f64>>,
    /// GPS rounds done.
    pub gps_rounds: usize,
    /// Newcomers placed so far.
    pub newcomers: Vec<Newcomer>,
    /// Newcomers turned away so far.
    pub dropped_newcomers: Vec<DroppedNewcomer>,
    /// Round-0 clients left out of the run (no round-0 upload).
    #[serde(default)]
    pub left_out: Vec<ClientInfo>,
    /// Trained models dropped so far.
    pub dropped_updates: Vec<DroppedUpdate>,
    /// Floats sent down so far.
    pub floats_down: u64,
    /// Floats sent up so far.
    pub floats_up: u64,
    /// Message bytes sent down so far (the jobs' messages, [`crate::jobs::JobKind::command`]).
    #[serde(default)]
    pub bytes_down: u64,
    /// Message bytes sent up so far.
    #[serde(default)]
    pub bytes_up: u64,
    /// Round 0's clustering (FedClust).
    pub clustering: Option<Clustering>,
    /// Round 0's distances (condensed upper triangle).
    pub distances: Option<Vec<f64>>,
    /// MT-HFL's relevance matrix.
    pub relevance: Option<Vec<Vec<f64>>>,
    /// Round 0's ARI.
    pub ari: Option<f64>,
    /// Whether round 0's assignment is a clustering to score.
    pub clusters_found: bool,
    /// Floats each client uploaded for clustering.
    pub signature_len: usize,
    /// Bytes of that upload.
    pub signature_bytes: usize,
    /// The method's own state ([`super::Strategy::save`]).
    pub strategy: serde_json::Value,
    /// Wall-clock seconds run so far.
    pub wall_seconds: f64,
}

/// Checks that a checkpoint's configuration `saved` is the run's `now` ([`super::Plan::config`]).
///
/// # Errors
///
/// [`FederationError::Config`] naming every setting that differs, with both values
/// ([`config_differences`]).
pub fn same_config(saved: &Value, now: &Value) -> Result<(), FederationError> {
    let differences = config_differences(saved, now);
    if differences.is_empty() {
        return Ok(());
    }
    Err(FederationError::Config(format!(
        "the checkpoint is of another configuration: {} (the run must be resumed with the \
         settings it was started with)",
        differences.join("; ")
    )))
}

/// Each setting that differs between two configurations, as `key: checkpoint A, now B` (nested
/// tables by dotted path, `-` for a key that one of them lacks), in key order.
pub fn config_differences(saved: &Value, now: &Value) -> Vec<String> {
    fn walk(path: &str, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<String>) {
        match (a, b) {
            (Some(Value::Object(a)), Some(Value::Object(b))) => {
                let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
                for k in keys {
                    let sub = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(&sub, a.get(k), b.get(k), out);
                }
            }
            (a, b) if a == b => {}
            (a, b) => {
                let show = |v: Option<&Value>| v.map_or_else(|| "-".to_string(), Value::to_string);
                let name = if path.is_empty() {
                    "configuration"
                } else {
                    path
                };
                out.push(format!("{name}: checkpoint {}, now {}", show(a), show(b)));
            }
        }
    }
    let mut out = Vec::new();
    walk("", Some(saved), Some(now), &mut out);
    out
}

impl Checkpoint {
    /// The JSON text.
    ///
    /// # Errors
    ///
    /// Only if a value cannot be written (never for these types).
    pub fn to_json(&self) -> Result<String, FederationError> {
        to_exact_json(self).map_err(|e| FederationError::Config(format!("checkpoint: {e}")))
    }

    /// Reads and checks a checkpoint.
    ///
    /// # Errors
    ///
    /// [`FederationError::Config`] for bad JSON, another version, or parts that do not fit
    /// together.
    pub fn from_json(text: &str) -> Result<Self, FederationError> {
        let c: Checkpoint = from_exact_json(text)
            .map_err(|e| FederationError::Config(format!("checkpoint: {e}")))?;
        c.check()?;
        Ok(c)
    }

    /// The round loop's settings in [`Checkpoint::config`] (the method's keys left out).
    ///
    /// # Errors
    ///
    /// [`FederationError::Config`] when `config` does not hold them.
    pub fn federation(&self) -> Result<FederationConfig, FederationError> {
        FederationConfig::deserialize(&self.config)
            .map_err(|e| FederationError::Config(format!("checkpoint: configuration: {e}")))
    }

    /// Checks that the parts fit together (a resumed run must never panic on a bad file).
    ///
    /// # Errors
    ///
    /// [`FederationError::Config`] naming what does not fit.
    pub fn check(&self) -> Result<(), FederationError> {
        let bad = |what: &str| Err(FederationError::Config(format!("checkpoint: {what}")));
        if self.version != CHECKPOINT_VERSION {
            return bad(&format!(
                "version {} (this build reads {CHECKPOINT_VERSION})",
                self.version
            ));
        }
        let n = self.clients.len();
        let k = self.models.len();
        if n == 0 || self.assignment.len() != n || self.last_eval.len() != n {
            return bad("the per-client lists do not have one entry per client");
        }
        if self.final_client_accuracy.len() > n || self.best_client_accuracy.len() > n {
            return bad("more accuracies than clients");
        }
        if self.model_versions.len() != k || self.assignment.iter().any(|&c| c >= k) {
            return bad("the assignment names a cluster without a model");
        }
        let cfg = self.federation()?;
        if self.models.iter().any(|m| m.model != cfg.model) {
            return bad("a cluster model of another architecture");
        }
        if self.rounds.len() != self.round || self.round > cfg.rounds {
            return bad("the round records do not match the round");
        }
        if let Some(d) = &self.distances
            && CondensedMatrix::from_condensed(d.clone()).is_err()
        {
            return bad("bad distance matrix");
        }
        Ok(())
    }

    /// The cluster state.
    pub(crate) fn clusters(&self) -> Clusters {
        Clusters::from_parts(
            self.assignment.clone(),
            self.models.clone(),
            self.model_versions.clone(),
            self.next_version,
        )
    }
}

/// Reads a method's own state ([`super::Strategy::restore`]) as a `T`.
///
/// # Errors
///
/// [`FederationError::Config`] naming `method` when `state` is not a `T`.
pub(crate) fn strategy_state<T: DeserializeOwned>(
    method: &str,
    state: Value,
) -> Result<T, FederationError> {
    serde_json::from_value(state).map_err(|e| bad_state(method, e))
}

/// [`FederationError::Config`] for a method's state that does not fit (`method`'s checkpoint).
pub(crate) fn bad_state(method: &str, what: impl std::fmt::Display) -> FederationError {
    FederationError::Config(format!("{method}'s checkpoint: {what}"))
}

/// Checks that a model of a method's state has its architecture's length and finite values.
///
/// # Errors
///
/// [`FederationError::Config`] naming `method` and `what` model it is.
pub(crate) fn check_model(method: &str, what: &str, p: &Params) -> Result<(), FederationError> {
    if crate::model::ParamLayout::classes_for(p.model, p.values.len()).is_none() {
        let expected = crate::model::ParamLayout::of(p.model).len();
        return Err(bad_state(
            method,
            format!(
                "{what} has {} values, no class count of {} gives that ({expected} with 10)",
                p.values.len(),
                p.model
            ),
        ));
    }
    if p.values.iter().any(|v| !v.is_finite()) {
        return Err(bad_state(method, format!("{what} is not finite")));
    }
    Ok(())
}

/// The marker of a float written as its bits.
const BITS: &str = "f64:0x";

/// `value` as JSON text in which every non-integer number is the string `"f64:0x…"` of its
/// bits, so that [`from_exact_json`] reads it back exactly.
///
/// # Errors
///
/// A value serde_json cannot represent.
pub fn to_exact_json<T: Serialize>(value: &T) -> Result<String, serde_json::Error> {
    fn encode(v: &mut Value) {
        match v {
            Value::Number(n) if !(n.is_i64() || n.is_u64()) => {
                if let Some(x) = n.as_f64() {
                    *v = Value::String(format!("{BITS}{:016x}", x.to_bits()));
                }
            }
            Value::Array(a) => a.iter_mut().for_each(encode),
            Value::Object(o) => o.values_mut().for_each(encode),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(value)?;
    encode(&mut v);
    serde_json::to_string(&v)
}

/// Reads what [`to_exact_json`] wrote.
///
/// # Errors
///
/// Bad JSON, a bad `"f64:0x…"` string, or a value that is not a `T`.
pub fn from_exact_json<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    fn decode(v: &mut Value) -> Result<(), String> {
        match v {
            Value::String(s) if s.starts_with(BITS) => {
                let bits =
                    u64::from_str_radix(&s[BITS.len()..], 16).map_err(|e| format!("{s:?}: {e}"))?;
                // Non-finite values were written as null by serde_json already.
                *v = Number::from_f64(f64::from_bits(bits)).map_or(Value::Null, Value::Number);
            }
            Value::Array(a) => a.iter_mut().try_for_each(decode)?,
            Value::Object(o) => o.values_mut().try_for_each(decode)?,
            _ => {}
        }
        Ok(())
    }
    let mut v: Value = serde_json::from_str(text)?;
    decode(&mut v).map_err(serde::de::Error::custom)?;
    serde_json::from_value(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every differing setting is named by its dotted path with both values, in key order; a key
    /// only one side has shows `-` on the other; equal configurations have none.
    #[test]
    fn config_differences_name_each_setting() {
        let saved = serde_json::json!({
            "algorithm": "fedclust",
            "federation": {"frac": 0.5, "seed": 1, "rounds": 40},
            "tau": 0.3
        });
        let now = serde_json::json!({
            "algorithm": "fedclust",
            "federation": {"frac": 1.0, "seed": 1, "rounds": 40, "mu": 0.01}
        });
        assert_eq!(
            config_differences(&saved, &now),
            [
                "federation.frac: checkpoint 0.5, now 1.0",
                "federation.mu: checkpoint -, now 0.01",
                "tau: checkpoint 0.3, now -",
            ]
        );
        assert!(config_differences(&saved, &saved).is_empty());
        assert!(same_config(&now, &now).is_ok());
        let err = same_config(&saved, &now).unwrap_err().to_string();
        assert!(
            err.contains("federation.frac: checkpoint 0.5, now 1.0; "),
            "{err}"
        );
    }

    /// Floats come back bit for bit (the ones a decimal parser may round too); integers and
    /// strings stay as they are; a damaged bits string is an error, not a panic.
    #[test]
    fn exact_json_round_trips_floats_bit_for_bit() {
        let values = (
            vec![
                0.1 + 0.2,
                0.408_000_000_000_000_03,
                1e300,
                5e-324,
                -0.0,
                2.5,
            ],
            vec![0.415_000_000_000_000_04f64],
            7u64,
            "f64 in a string".to_string(),
            1.1f32,
        );
        let text = to_exact_json(&values).unwrap();
        let back: (Vec<f64>, Vec<f64>, u64, String, f32) = from_exact_json(&text).unwrap();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back.0), bits(&values.0));
        assert_eq!(bits(&back.1), bits(&values.1));
        assert_eq!((back.2, &back.3), (7, &values.3));
        assert_eq!(back.4.to_bits(), 1.1f32.to_bits());
        assert!(from_exact_json::<Vec<f64>>(r#"["f64:0xZZ"]"#).is_err());
        assert!(from_exact_json::<Vec<f64>>(r#"["f64:0x"]"#).is_err());
    }
}
