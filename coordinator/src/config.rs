//! Run configuration: a TOML file (the default is embedded and printed by
//! `coordinator generate-config`), overridden by command-line flags, then validated.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use edgecfl_shared::algorithms::{Algorithm, MethodConfig, MethodSettings};
use edgecfl_shared::data::partition::PartitionSpec;
use edgecfl_shared::federation::FederationFlags;
use edgecfl_shared::model::ModelKind;
use edgecfl_shared::train::Backend;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The default configuration file: FedClust's Fashion-MNIST settings.
pub const DEFAULT_CONFIG: &str = include_str!("../default-config.toml");

/// A whole experiment: data, partition, federation settings and where the results go.
///
/// Each setting is declared here once, as in [`edgecfl_shared::federation::FederationConfig`]:
/// its doc comment is its flag's help, and `#[setting(flag)]` derives the flag
/// ([`RunConfigFlags`]; the `simulate`-only ones in [`SimFlags`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, edgecfl_shared::Settings)]
#[settings(flags = RunConfigFlags)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// The directory of the data set (`[federation] dataset`; None: for Fashion-MNIST
    /// `EDGECFL_FMNIST_DIR`, the Debian package, then the bundled subset; the others need one).
    #[setting(flag(long, value_name = "DIR", help = edgecfl_shared::data::catalog::data_flag_help()))]
    pub data: Option<PathBuf>,
    /// iid | label:K | dir:BETA | groups:012-34-56-789 | rotate:G | shift:G | rotate:R*BASE |
    /// dominant:ALPHA | pairs | tasks:fmnist3 | writers (FEMNIST: one writer a client; labels
    /// from 10 on with commas: groups:0,1,2-10,11). How the training data are split over
    /// clients.
    #[setting(flag)]
    pub partition: PartitionSpec,
    /// Number of clients.
    #[setting(flag)]
    pub clients: usize,
    /// Where the coordinator's tensor work (simulated clients, MT-HFL server-side relevance)
    /// runs: cpu (= flex) | ndarray | vulkan[:N|:igpu[:N]|:cpu] | tch[:cpu|:cuda[:N]] |
    /// cuda[:N]. All but cpu need the cargo feature of the same name (`--backend` is an alias;
    /// the key `backend`, its name before, is read too).
    #[serde(rename = "device", alias = "backend")]
    #[setting(flag(long = "device", visible_alias = "backend", value_name = "DEVICE"))]
    pub backend: Backend,
    /// Train up to N sampled clients together as one batched model (a cohort; 1: each alone).
    /// Same models up to float rounding. Unset: all sampled clients on a GPU; on the CPU 10 for
    /// the MLP, 1 for LeNet-5.
    ///
    /// See `edgecfl_shared::cohort` and [`default_cohort`]. Written into `summary.json` only when
    /// given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[setting(flag(long, value_name = "N"), flags = SimFlags)]
    pub cohort: Option<usize>,
    /// Output directory.
    #[setting(flag)]
    pub out: PathBuf,
    /// Hold the last N clients out of round 0; they join at `--join-round` as newcomers
    /// (FedClust Algorithm 2: warm-up on θ⁰, nearest round-0 centroid). 0: everyone is in
    /// round 0.
    #[serde(default)]
    #[setting(flag(long, value_name = "N"), flags = SimFlags)]
    pub newcomers: usize,
    /// The training round (≥ 1) the newcomers join at.
    #[serde(default = "default_join_round")]
    #[setting(flag(long, value_name = "ROUND"), flags = SimFlags)]
    pub join_round: usize,
    /// The federation itself: the method, the round loop's settings and the methods' own (the
    /// `[federation]` table).
    #[serde(rename = "federation")]
    pub method: MethodConfig,
}

fn default_join_round() -> usize {
    1
}

/// The cohort size `simulate` uses on `backend` for `model` when none is given, the fastest
/// measured (BENCHMARKS.md §13): on a GPU every sampled client in one cohort (one small model at a
/// time leaves a GPU idle between kernel launches); on the CPU backends cohorts of 10 for the MLP
/// (2.09× one client per core on 2 cores) and 1 for LeNet-5 (its grouped convolution runs group
/// by group there: a cohort saves nothing and gives up the other cores) and the other CNNs.
pub fn default_cohort(backend: Backend, model: ModelKind) -> usize {
    match (backend.is_cpu(), model) {
        (false, _) => usize::MAX,
        (true, ModelKind::Mlp) => 10,
        (true, _) => 1,
    }
}

impl RunConfig {
    /// Reads a TOML file; `None` gives the embedded default.
    pub fn load(path: Option<&Path>) -> anyhow::Result<Self> {
        match path {
            Some(p) => Self::parse(
                &std::fs::read_to_string(p)
                    .with_context(|| format!("cannot read config file {}", p.display()))?,
                &p.display().to_string(),
            ),
            None => Self::parse(DEFAULT_CONFIG, "<default config>"),
        }
    }

    /// Parses TOML text (`name` is for the error message). The file holds the keys it changes:
    /// each is put over the embedded default ([`DEFAULT_CONFIG`]), so the default file is the one
    /// place the defaults are written. A key that cannot be read is named with its line; one in
    /// the wrong table says which table it belongs in.
    pub fn parse(text: &str, name: &str) -> anyhow::Result<Self> {
        let given: toml::Table = text
            .parse()
            .with_context(|| format!("invalid config file {name}"))?;
        let federation = given.get("federation").and_then(toml::Value::as_table);
        for (table, place, names) in [
            (Some(&given), "at the top level", OLD_TOP_KEYS),
            (federation, "in [federation]", OLD_FEDERATION_KEYS),
        ] {
            for (old, new) in names {
                if table.is_some_and(|t| t.contains_key(*old)) {
                    tracing::warn!(
                        "{name}: `{old}` is the old name of `{new}` {place}, kept for one release"
                    );
                }
            }
        }
        over_defaults(&given).map_err(|e| explain(text, name, &given, e))
    }

    /// Checks every field; the error names the bad one.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.clients >= 1, "clients must be ≥ 1");
        self.partition
            .check_clients(self.clients)
            .with_context(|| {
                format!(
                    "partition {} over --clients {}",
                    self.partition, self.clients
                )
            })?;
        if self.newcomers > 0 {
            anyhow::ensure!(
                self.newcomers + 2 <= self.clients,
                "newcomers ({}) must leave at least 2 of the {} clients for round 0",
                self.newcomers,
                self.clients
            );
            // With personalisation, rounds + 1 joins after the federation.
            let last = self.method.federation.rounds
                + usize::from(self.method.federation.personalize_epochs.is_some());
            anyhow::ensure!(
                (1..=last).contains(&self.join_round),
                "join-round must be between 1 and {last} (rounds, + 1 with --personalize), got {}",
                self.join_round
            );
        }
        anyhow::ensure!(self.cohort != Some(0), "cohort must be ≥ 1");
        let dataset = self.method.federation.dataset;
        self.partition
            .check_dataset(dataset)
            .with_context(|| format!("partition {} on {}", self.partition, dataset.info().name))?;
        let unused = self.partition.unused_labels(dataset.info().classes());
        if !unused.is_empty() {
            tracing::warn!(
                "--partition {}: labels {unused:?} are in no group, so their samples go to no \
                 client",
                self.partition
            );
        }
        self.backend.check_compiled()?;
        self.method.validate()?;
        Ok(())
    }
}

/// Flags shared by `simulate` (and later `serve`/`demo`) that override the config file.
#[derive(Debug, Clone, Default, Args)]
pub struct RunFlags {
    /// TOML configuration file holding the keys it changes (see `coordinator generate-config`;
    /// each key is a flag's name); flags override it.
    #[arg(long, short = 'c', help_heading = "Common options")]
    pub config: Option<PathBuf>,
    /// fedclust | mthfl | adacfl | stocfl | fesem | ifca | cfl | fedprox | fedavg | local | random
    #[arg(long)]
    pub algorithm: Option<Algorithm>,
    /// The run's own flags (data, partition, clients, device, out).
    #[command(flatten)]
    pub run: RunConfigFlags,
    /// The federation's flags (the round loop's and the settings several methods share).
    #[command(flatten)]
    pub federation: FederationFlags,
    /// Each method's own flags (declared in the method's file).
    #[command(flatten)]
    pub methods: MethodSettings,
}

impl RunFlags {
    /// The config file (or default) with these flags applied, validated.
    pub fn resolve(&self) -> anyhow::Result<RunConfig> {
        self.apply(RunConfig::load(self.config.as_deref())?)
    }

    /// `text` (a TOML configuration, e.g. the demo's) with these flags applied, validated.
    pub fn resolve_from(&self, text: &str, name: &str) -> anyhow::Result<RunConfig> {
        self.apply(RunConfig::parse(text, name)?)
    }

    /// `base` (e.g. a checkpoint's configuration) with these flags applied, validated.
    pub fn resolve_over(&self, base: RunConfig) -> anyhow::Result<RunConfig> {
        self.apply(base)
    }

    fn apply(&self, mut c: RunConfig) -> anyhow::Result<RunConfig> {
        let (algorithm, f, methods) = (
            &mut c.method.algorithm,
            &mut c.method.federation,
            &mut c.method.methods,
        );
        if let Some(v) = self.algorithm {
            *algorithm = v;
        }
        self.federation.apply(f);
        if let (Some(dataset), None) = (self.federation.dataset, self.federation.model) {
            // The data set's own model unless --model says otherwise.
            f.model = ModelKind::default_for(dataset);
        }
        // The file's and the flags' method settings, each checked before the flags are put over
        // the file's keys (a NaN would otherwise read as unset on the way through JSON).
        methods.check()?;
        self.methods.check()?;
        *methods = overlay(methods, &self.methods)?;
        self.run.apply(&mut c);
        c.validate()?;
        Ok(c)
    }
}

impl SimFlags {
    /// `run`'s configuration with these flags applied too, validated.
    pub fn resolve(&self, run: &RunFlags) -> anyhow::Result<RunConfig> {
        let mut base = RunConfig::load(run.config.as_deref())?;
        self.apply(&mut base);
        run.resolve_over(base)
    }
}

/// `cmd` (a command taking [`RunFlags`]) with each run flag's default, the value of the key of
/// the same name in `defaults` (the configuration the command starts from), appended to its help
/// as `[default: V]`. Unset keys (a method's own default) are left to the flag's text.
pub fn with_defaults(cmd: clap::Command, defaults: &RunConfig) -> clap::Command {
    let Ok(Value::Object(mut keys)) = serde_json::to_value(defaults) else {
        return cmd;
    };
    if let Some(Value::Object(federation)) = keys.remove("federation") {
        keys.extend(federation);
    }
    let shown: Vec<(clap::Id, String)> = cmd
        .get_arguments()
        .filter_map(|a| {
            let value = keys.get(&a.get_long()?.replace('-', "_"))?;
            let text = match value {
                Value::Null => return None,
                Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            Some((a.get_id().clone(), text))
        })
        .collect();
    shown.into_iter().fold(cmd, |cmd, (id, value)| {
        cmd.mut_arg(id, |a| {
            let add = |h: Option<&clap::builder::StyledStr>| {
                format!(
                    "{} [default: {value}]",
                    h.map(|h| h.to_string()).unwrap_or_default()
                )
            };
            let long = a.get_long_help().map(|h| add(Some(h)));
            let a = a.clone().help(add(a.get_help()));
            match long {
                Some(l) => a.long_help(l),
                None => a,
            }
        })
    })
}

/// `given` (a configuration file's tables) put over the embedded default, key by key (the
/// `[federation]` table too), then read.
fn over_defaults(given: &toml::Table) -> Result<RunConfig, toml::de::Error> {
    let mut merged: toml::Table = DEFAULT_CONFIG
        .parse()
        .expect("the embedded default configuration parses");
    for (key, value) in renamed(given, OLD_TOP_KEYS) {
        match (value, merged.get_mut(&key)) {
            (toml::Value::Table(table), Some(toml::Value::Table(base))) => {
                base.extend(renamed(&table, OLD_FEDERATION_KEYS));
            }
            (value, _) => {
                merged.insert(key, value);
            }
        }
    }
    toml::Value::Table(merged).try_into()
}

/// Keys read under an earlier name, (old, new): at the top level and in `[federation]`.
const OLD_TOP_KEYS: &[(&str, &str)] = &[("backend", "device")];
const OLD_FEDERATION_KEYS: &[(&str, &str)] = &[
    ("threshold", "lambda"),
    ("batch_size", "batch"),
    ("personalize_epochs", "personalize"),
];

/// `table` with each old key of `names` under its new name, unless the new one is there too
/// (then both stay, and reading them fails on the duplicate).
fn renamed(table: &toml::Table, names: &[(&str, &str)]) -> toml::Table {
    table
        .iter()
        .map(|(k, v)| match names.iter().find(|(old, _)| old == k) {
            Some((_, new)) if !table.contains_key(*new) => ((*new).to_owned(), v.clone()),
            _ => (k.clone(), v.clone()),
        })
        .collect()
}

/// The error of a configuration file that does not read (`error`): the first of its keys that
/// fails alone over the defaults, with its line and table, and where a key in the wrong table
/// belongs; `error` itself when no single key fails.
fn explain(text: &str, name: &str, given: &toml::Table, error: toml::de::Error) -> anyhow::Error {
    let fed = "federation";
    let alone = |table: Option<&str>, key: &str, value: &toml::Value| {
        let mut one = toml::Table::new();
        match table {
            None => one.insert(key.to_owned(), value.clone()),
            Some(t) => one.insert(
                t.to_owned(),
                toml::Value::Table([(key.to_owned(), value.clone())].into_iter().collect()),
            ),
        };
        over_defaults(&one)
    };
    let mut keys: Vec<(Option<&str>, &str, &toml::Value)> = Vec::new();
    for (key, value) in given {
        match value {
            toml::Value::Table(t) if key == fed => {
                keys.extend(t.iter().map(|(k, v)| (Some(fed), k.as_str(), v)));
            }
            _ => keys.push((None, key.as_str(), value)),
        }
    }
    for (table, key, value) in keys {
        let Err(e) = alone(table, key, value) else {
            continue;
        };
        let unknown = e.message().contains("unknown");
        let hint = match table {
            None if unknown && alone(Some(fed), key, value).is_ok() => {
                "; it belongs in the [federation] table"
            }
            Some(_) if unknown && alone(None, key, value).is_ok() => {
                "; it belongs at the top level, before [federation]"
            }
            _ => "",
        };
        let place = line_of(text, table, key).map_or(String::new(), |l| format!(", line {l}"));
        let table = table.map_or("the top level".to_owned(), |t| format!("[{t}]"));
        return anyhow::anyhow!(
            "invalid config file {name}{place}: key `{key}` in {table}: {}{hint}",
            e.message().trim_end()
        );
    }
    anyhow::Error::new(error).context(format!("invalid config file {name}"))
}

/// The line (from 1) of `key = ...` in `table` (None: the top level) of the TOML `text`.
fn line_of(text: &str, table: Option<&str>, key: &str) -> Option<usize> {
    let mut current: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            current = Some(header.trim_end_matches(']').trim().to_owned());
            continue;
        }
        let name = line
            .split('=')
            .next()
            .unwrap_or("")
            .trim()
            .trim_matches('"');
        if line.contains('=') && name == key && current.as_deref() == table {
            return Some(i + 1);
        }
    }
    None
}

/// `base` with every setting that `over` gives put over it: both as JSON objects, where an unset
/// (`None`) setting is absent ([`MethodSettings`] skips them), so one function serves every
/// method's settings.
fn overlay<T: Serialize + DeserializeOwned>(base: &T, over: &T) -> anyhow::Result<T> {
    let (Value::Object(mut merged), Value::Object(given)) =
        (serde_json::to_value(base)?, serde_json::to_value(over)?)
    else {
        anyhow::bail!("settings are not a map");
    };
    merged.extend(given);
    Ok(serde_json::from_value(Value::Object(merged))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgecfl_shared::aggregate::Aggregate;
    use edgecfl_shared::algorithms::fedclust::ClusterStart;
    use edgecfl_shared::cluster::clustering::Lambda;
    use edgecfl_shared::cluster::robust::Guard;
    use edgecfl_shared::cluster::spectral::{Estimate, Relevance};
    use edgecfl_shared::federation::{FederationConfig, LocalTest, NormBound, Sampling, Weighting};
    use edgecfl_shared::model::LayerSet;
    use edgecfl_shared::protocol::Encoding;

    #[test]
    fn a_config_file_holds_only_the_keys_it_changes() {
        let c = RunConfig::parse("partition = \"iid\"\nclients = 8\n", "t").unwrap();
        let mut want = RunConfig::load(None).unwrap();
        want.partition = "iid".parse().unwrap();
        want.clients = 8;
        assert_eq!(c, want);
        // A partial [federation] table keeps the default's other keys.
        let c = RunConfig::parse("[federation]\nrounds = 3\nbatch = 32\n", "t").unwrap();
        assert_eq!(c.method.federation.rounds, 3);
        assert_eq!(c.method.federation.batch_size, 32);
        assert_eq!(c.method.federation.epochs, 10);
        // The keys' old names still read; `threshold` replaces the default's `lambda`.
        let c = RunConfig::parse(
            "backend = \"ndarray\"\n[federation]\nbatch_size = 5\npersonalize_epochs = 2\nthreshold = \"0.5\"\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.backend, Backend::Ndarray);
        assert_eq!(c.method.federation.batch_size, 5);
        assert_eq!(c.method.federation.personalize_epochs, Some(2));
        assert_eq!(c.method.federation.lambda, "0.5".parse().unwrap());
    }

    #[test]
    fn a_bad_key_is_named_with_its_line_and_table() {
        let err = |text: &str| format!("{:#}", RunConfig::parse(text, "f.toml").unwrap_err());
        let e = err("clients = 4\nrounds = 3\n");
        assert!(
            e.contains("f.toml, line 2: key `rounds` in the top level"),
            "{e}"
        );
        assert!(e.contains("it belongs in the [federation] table"), "{e}");
        let e = err("[federation]\nepochs = 2\nclients = 3\n");
        assert!(e.contains("line 3: key `clients` in [federation]"), "{e}");
        assert!(e.contains("it belongs at the top level"), "{e}");
        let e = err("clients = 4\n\n[federation]\nrounds = 2\nepochs = \"x\"\n");
        assert!(
            e.contains("line 5: key `epochs` in [federation]: invalid type"),
            "{e}"
        );
        assert!(!e.contains("belongs"), "{e}");
        let e = err("nonsense = 1\n");
        assert!(
            e.contains("key `nonsense` in the top level: unknown field"),
            "{e}"
        );
        assert!(!e.contains("belongs"), "{e}");
    }

    #[test]
    fn every_run_flag_that_has_a_key_shows_its_default() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            run: RunFlags,
        }
        let defaults = RunConfig::load(None).unwrap();
        let cmd = with_defaults(<Cli as clap::CommandFactory>::command(), &defaults);
        let help = |long: &str| {
            let a = cmd
                .get_arguments()
                .find(|a| a.get_long() == Some(long))
                .unwrap();
            a.get_help().map(|h| h.to_string()).unwrap_or_default()
        };
        for (flag, default) in [
            ("algorithm", "fedclust"),
            ("partition", "label:2"),
            ("clients", "100"),
            ("frac", "0.1"),
            ("rounds", "50"),
            ("epochs", "10"),
            ("lr", "0.01"),
            ("batch", "10"),
            ("device", "flex"),
            ("out", "results/simulate"),
            ("max-update-norm", "median:100"),
        ] {
            assert!(
                help(flag).ends_with(&format!("[default: {default}]")),
                "--{flag}: {}",
                help(flag)
            );
        }
        // A key the configuration leaves unset (the method's default) shows none.
        assert!(!help("mu").contains("[default:"));
    }

    #[test]
    fn default_config_parses_and_is_valid() {
        let c = RunConfig::load(None).unwrap();
        c.validate().unwrap();
        assert_eq!(c.clients, 100);
        assert_eq!(c.method.federation.batch_size, 10);
    }

    /// The default file's `[federation]` keys are the library's defaults (so `edge-client`, the
    /// library's users and `coordinator` start from the same settings).
    #[test]
    fn default_config_is_the_federation_default() {
        let c = RunConfig::load(None).unwrap();
        assert_eq!(c.method.federation, FederationConfig::default());
    }

    #[test]
    fn flags_override_and_validate() {
        let flags = RunFlags {
            federation: FederationFlags {
                rounds: Some(3),
                frac: Some(0.5),
                ..Default::default()
            },
            ..Default::default()
        };
        let c = flags.resolve().unwrap();
        assert_eq!(c.method.federation.rounds, 3);
        assert_eq!(c.method.federation.frac, 0.5);
        let bad = RunFlags {
            federation: FederationFlags {
                frac: Some(1.5),
                ..Default::default()
            },
            ..Default::default()
        };
        let err = format!("{:#}", bad.resolve().unwrap_err());
        assert!(err.contains("frac"), "{err}");
    }

    #[test]
    fn newcomer_flags_and_keys() {
        let flags = RunFlags {
            run: RunConfigFlags {
                clients: Some(10),
                ..Default::default()
            },
            federation: FederationFlags {
                rounds: Some(3),
                ..Default::default()
            },
            ..Default::default()
        };
        let sim = SimFlags {
            newcomers: Some(2),
            join_round: Some(2),
            ..Default::default()
        };
        let c = sim.resolve(&flags).unwrap();
        assert_eq!((c.newcomers, c.join_round), (2, 2));
        let text = DEFAULT_CONFIG.replace("# newcomers = 0", "newcomers = 3");
        let c = RunConfig::parse(&text, "t").unwrap();
        assert_eq!((c.newcomers, c.join_round), (3, 1));
        for (n, join) in [(9, 1), (2, 0), (2, 4)] {
            let bad = SimFlags {
                newcomers: Some(n),
                join_round: Some(join),
                ..Default::default()
            };
            let err = format!("{:#}", bad.resolve(&flags).unwrap_err());
            assert!(
                err.contains("newcomers") || err.contains("join-round"),
                "{err}"
            );
        }
    }

    #[test]
    fn mthfl_flags() {
        let mut flags = RunFlags {
            algorithm: Some(Algorithm::MtHfl),
            federation: FederationFlags {
                model: Some(ModelKind::Mlp),
                lps_rounds: Some(2),
                ..Default::default()
            },
            ..Default::default()
        };
        let own = &mut flags.methods.mthfl;
        own.eigenvectors = Some(3);
        own.relevance = Some(Relevance::Server);
        own.signature_encoding = Some(Encoding::F16);
        let c = flags.resolve().unwrap();
        let f = &c.method;
        let own = &f.methods.mthfl;
        assert_eq!(
            (own.eigenvectors(), own.relevance(), f.federation.lps_rounds),
            (3, Relevance::Server, 2)
        );
        assert_eq!(own.signature_encoding(), Encoding::F16);
        // The file's other keys stay under the flags: the default file's estimate.
        assert_eq!(own.estimate, Some(Estimate::Norm));
        assert!(f.hierarchical() && !f.federation.hierarchy);
        assert_eq!(f.federation.common().unwrap().set().to_string(), "fc1");
        // A TOML file with the new keys.
        let text = DEFAULT_CONFIG
            .replace("hierarchy = false", "hierarchy = true")
            .replace("# common_layers = ", "common_layers = \"conv1\" # ")
            .replace("relevance = \"client\"", "relevance = \"server\"");
        let c = RunConfig::parse(&text, "t").unwrap();
        assert!(c.method.federation.hierarchy);
        assert_eq!(c.method.methods.mthfl.relevance(), Relevance::Server);
        assert_eq!(c.method.federation.common().unwrap().len(), 156);
        let bad = RunFlags {
            federation: FederationFlags {
                common_layers: Some("conv9".parse().unwrap()),
                hierarchy: true,
                ..Default::default()
            },
            ..Default::default()
        };
        let err = format!("{:#}", bad.resolve().unwrap_err());
        assert!(err.contains("conv9"), "{err}");
    }

    /// A method's settings are `[federation]` keys and flags of the same names (declared once, in
    /// its file): a flag wins over the file's key, another method's key in the file stays, an
    /// unknown key or a bad flag value fails with its name, and `summary.json`'s `config` keeps
    /// them flat, as before they moved into their methods' files.
    #[test]
    fn method_settings_are_file_keys_and_flags() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            run: RunFlags,
        }
        let text = DEFAULT_CONFIG.replace(
            "[federation]",
            "[federation]
tau = 0.3
eps1 = 2.0",
        );
        let cli = Cli::try_parse_from([
            "coordinator",
            "--algorithm",
            "stocfl",
            "--tau",
            "0.7",
            "--pre-cluster",
            "off",
            "--fesem-layers",
            "final",
        ])
        .unwrap();
        let c = cli.run.resolve_from(&text, "t").unwrap();
        let own = &c.method.methods;
        assert_eq!(own.stocfl.tau, Some(0.7));
        assert_eq!(own.cfl.eps1, Some(2.0));
        assert_eq!(own.adacfl.pre_cluster, Some(false));
        assert_eq!(own.fesem.fesem_layers, Some(LayerSet::Final));
        assert_eq!(own.mthfl.eigenvectors, Some(5), "the default file's key");
        let v = serde_json::to_value(&c.method).unwrap();
        assert_eq!(
            (v["tau"].as_f64(), v["eps1"].as_f64()),
            (Some(0.7), Some(2.0))
        );
        assert_eq!(v["pre_cluster"], Value::Bool(false));
        assert!(
            v.get("methods").is_none() && v.get("unknown").is_none(),
            "{v}"
        );
        assert!(v.get("epsilon").is_none(), "unset stays absent: {v}");
        // ... and reads back.
        let back: MethodConfig = serde_json::from_value(v).unwrap();
        assert_eq!(back, c.method);

        let bad = DEFAULT_CONFIG.replace(
            "[federation]",
            "[federation]
taux = 0.3",
        );
        let err = format!("{:#}", RunConfig::parse(&bad, "t").unwrap_err());
        assert!(err.contains("unknown key `taux`"), "{err}");
        let nan = DEFAULT_CONFIG.replace("[federation]", "[federation]\ntau = nan");
        let err = format!(
            "{:#}",
            RunFlags::default().resolve_from(&nan, "t").unwrap_err()
        );
        assert!(err.contains("tau must be"), "{err}");
        // The cut's key before it was named as its flag is: read as `lambda`, not both at once.
        let old = DEFAULT_CONFIG.replace("lambda = \"auto\"", "threshold = \"k=3\"");
        assert_ne!(old, DEFAULT_CONFIG);
        let c = RunConfig::parse(&old, "t").unwrap();
        assert_eq!(c.method.federation.lambda, Lambda::Clusters(3));
        let both = DEFAULT_CONFIG.replace(
            "lambda = \"auto\"",
            "lambda = \"auto\"\nthreshold = \"k=2\"",
        );
        let err = format!("{:#}", RunConfig::parse(&both, "t").unwrap_err());
        assert!(err.contains("lambda"), "{err}");
        for (name, value) in [("tau", "NaN"), ("eps2", "-1"), ("epsilon", "inf")] {
            let cli = Cli::try_parse_from(["coordinator", &format!("--{name}={value}")]).unwrap();
            let err = format!("{:#}", cli.run.resolve().unwrap_err());
            assert!(err.contains(&format!("{name} must be")), "{err}");
        }
        let err = Cli::try_parse_from(["coordinator", "--pre-cluster", "maybe"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("expected on or off"), "{err}");
    }

    #[test]
    fn view_sampling_and_personalisation_flags_and_keys() {
        let c = RunFlags::default().resolve().unwrap();
        assert_eq!(c.method.federation.local_test, LocalTest::Labels);
        assert_eq!(c.method.federation.sampling, Sampling::Uniform);
        assert_eq!(c.method.federation.personalize_epochs, None);
        let mut flags = RunFlags {
            federation: FederationFlags {
                local_test: Some("proportional".parse().unwrap()),
                sampling: Some("per-cluster".parse().unwrap()),
                personalize_epochs: Some(5),
                rounds: Some(10),
                ..Default::default()
            },
            run: RunConfigFlags {
                clients: Some(10),
                ..Default::default()
            },
            ..Default::default()
        };
        flags.methods.fedclust.cluster_start = Some("members".parse().unwrap());
        let sim = SimFlags {
            newcomers: Some(2),
            join_round: Some(11),
            ..Default::default()
        };
        let c = sim.resolve(&flags).unwrap();
        // (resolve validates: join round 11 = rounds + 1 is allowed with --personalize)
        assert_eq!(c.method.federation.local_test, LocalTest::Proportional);
        assert_eq!(c.method.federation.sampling, Sampling::PerCluster);
        assert_eq!(c.method.federation.personalize_epochs, Some(5));
        assert_eq!(
            c.method.methods.fedclust.cluster_start,
            Some(ClusterStart::Members)
        );
        let mut late = flags;
        late.federation.personalize_epochs = None;
        let err = sim.resolve(&late).unwrap_err().to_string();
        assert!(err.contains("between 1 and 10"), "{err}");
        let text = DEFAULT_CONFIG.replace(
            "[federation]",
            "[federation]\nlocal_test = \"proportional\"\nsampling = \"per-cluster\"\npersonalize_epochs = 3\ncluster_start = \"members\"",
        );
        let c = RunConfig::parse(&text, "t").unwrap();
        c.validate().unwrap();
        assert_eq!(c.method.federation.local_test, LocalTest::Proportional);
        assert_eq!(c.method.federation.sampling, Sampling::PerCluster);
        assert_eq!(c.method.federation.personalize_epochs, Some(3));
        assert_eq!(
            c.method.methods.fedclust.cluster_start,
            Some(ClusterStart::Members)
        );
        assert!(
            "mean"
                .parse::<ClusterStart>()
                .unwrap_err()
                .contains("initial or members")
        );
        assert!(
            "per_cluster"
                .parse::<Sampling>()
                .unwrap_err()
                .contains("per-cluster")
        );
    }

    #[test]
    fn signature_guard_flag_and_key() {
        let c = RunFlags::default().resolve().unwrap();
        assert_eq!(c.method.federation.signature_guard, Guard::Robust);
        let flags = RunFlags {
            federation: FederationFlags {
                signature_guard: Some("paper".parse().unwrap()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(
            flags.resolve().unwrap().method.federation.signature_guard,
            Guard::Paper
        );
        let text =
            DEFAULT_CONFIG.replace("[federation]", "[federation]\nsignature_guard = \"paper\"");
        let c = RunConfig::parse(&text, "t").unwrap();
        assert_eq!(c.method.federation.signature_guard, Guard::Paper);
        let err = "strict".parse::<Guard>().unwrap_err();
        assert!(err.contains("robust or paper"), "{err}");
    }

    #[test]
    fn aggregate_flag_and_key() {
        let c = RunFlags::default().resolve().unwrap();
        assert_eq!(c.method.federation.aggregate, Aggregate::Mean);
        let flags = RunFlags {
            federation: FederationFlags {
                aggregate: Some("trimmed:0.2".parse().unwrap()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(
            flags.resolve().unwrap().method.federation.aggregate,
            Aggregate::Trimmed(0.2)
        );
        let text = DEFAULT_CONFIG.replace("[federation]", "[federation]\naggregate = \"median\"");
        let c = RunConfig::parse(&text, "t").unwrap();
        assert_eq!(c.method.federation.aggregate, Aggregate::Median);
        let text = DEFAULT_CONFIG.replace("[federation]", "[federation]\naggregate = \"krum\"");
        assert!(RunConfig::parse(&text, "t").is_err());
    }

    #[test]
    fn weighting_and_norm_bound_flags_and_keys() {
        let c = RunFlags::default().resolve().unwrap();
        assert_eq!(c.method.federation.weighting, Weighting::Samples);
        assert_eq!(
            c.method.federation.max_update_norm,
            NormBound::Median(100.0)
        );
        let flags = RunFlags {
            federation: FederationFlags {
                weighting: Some("equal".parse().unwrap()),
                max_update_norm: Some("2.5".parse().unwrap()),
                ..Default::default()
            },
            ..Default::default()
        };
        let c = flags.resolve().unwrap();
        assert_eq!(c.method.federation.weighting, Weighting::Equal);
        assert_eq!(c.method.federation.max_update_norm, NormBound::Fixed(2.5));
        for (text, want) in [
            ("off", NormBound::Off),
            ("median:4", NormBound::Median(4.0)),
            ("0.5", NormBound::Fixed(0.5)),
        ] {
            assert_eq!(text.parse::<NormBound>().unwrap(), want);
            assert_eq!(want.to_string(), text);
        }
        // The same as TOML keys: a number, or the text form.
        for (value, want) in [
            ("3.0", NormBound::Fixed(3.0)),
            ("\"median:4\"", NormBound::Median(4.0)),
            ("\"off\"", NormBound::Off),
        ] {
            let text = DEFAULT_CONFIG.replace(
                "[federation]",
                &format!("[federation]\nweighting = \"equal\"\nmax_update_norm = {value}"),
            );
            let c = RunConfig::parse(&text, "t").unwrap();
            c.validate().unwrap();
            assert_eq!(c.method.federation.weighting, Weighting::Equal);
            assert_eq!(c.method.federation.max_update_norm, want);
            // And back: what summary.json and checkpoints hold reads as the same bound.
            let json = serde_json::to_value(&c.method.federation).unwrap();
            let back: edgecfl_shared::federation::FederationConfig =
                serde_json::from_value(json).unwrap();
            assert_eq!(back.max_update_norm, want);
        }
        let err = "uniform".parse::<Weighting>().unwrap_err();
        assert!(err.contains("samples or equal"), "{err}");
        for bound in ["0", "-1", "NaN", "inf", "median:0.5", "median:x", "twice"] {
            let err = bound.parse::<NormBound>().unwrap_err();
            assert!(err.contains(bound), "{err}");
        }
    }
}
