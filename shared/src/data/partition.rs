//! Splitting a training set over federated clients: NIID-Bench's label-skew and Dirichlet
//! partitions, StoCFL's pathological label groups, rotated groups, shifted labels and
//! rotation × label-group products, AdaCFL's dominant-class and label-pair splits, MT-HFL's
//! three-task Fashion-MNIST split, and the local test sets.
//!
//! A [`PartitionSpec`] is written as a short string (command line, config files, serde):
//!
//! | string | scheme |
//! | --- | --- |
//! | `iid` | shuffle all samples, cut into `n` near-equal parts |
//! | `label:K` | NIID-Bench "#C=K" label skew: every client holds exactly `K` of the data set's labels |
//! | `dir:BETA` | NIID-Bench Dirichlet(β) label skew, β > 0 |
//! | `groups:012-34-56-789` | StoCFL "pathological" split: disjoint label groups, one cluster each (labels from 10 on with commas: `groups:0,1,2-10,11`) |
//! | `rotate:G` | iid split, client `i` in group `i % G`, images turned `i % G` quarter turns |
//! | `shift:G` | StoCFL shifted labels: iid split, client `i` in group `g = i % G` sees every label `y` as `(y + 3g) mod 10` (`G ≤ 4`) |
//! | `rotate:R*BASE` | product: `BASE` (`groups:…`, `pairs`, `dominant:ALPHA` or `shift:G`, `G` groups) with client `i` also turned `(i / G) % R` quarter turns; `G·R` groups (StoCFL §4.1: `rotate:2*groups:012-34-56-789`) |
//! | `dominant:ALPHA` | AdaCFL α: 5 groups, a fraction α ∈ (0, 1] of each client's samples from its group's class `0, 2, 4, 6, 8`, the rest spread over the other 9 |
//! | `pairs` | AdaCFL "α = B": 10 groups, client `i` holds labels `g` and `g + 1 mod 10`, `g = i % 10` |
//! | `tasks:fmnist3` | MT-HFL: clothes / shoes / bags tasks over 5 / 3 / 2 users (of 10), ~10 % of each user's samples from the other tasks |
//! | `writers` | FEMNIST's natural clients (LEAF): client `i` is the `i`-th writer that has training and test samples, tested on its own test samples |
//!
//! Every scheme works on any class count ([`partition_of`]; [`partition`] is the ten-class case);
//! `pairs`, `dominant:` and `tasks:fmnist3` are made of the labels `0..10` (on a larger data set
//! the other labels go to no client, and `coordinator` says so), and `shift:` shifts labels
//! modulo 10, so it takes only ten-class data sets ([`PartitionSpec::check_classes`]). The
//! procedures below are written for ten classes; `label:K`, `dir:`, `groups:` and the other
//! classes of `dominant:` run over all `C` classes of the data set where they say `0..10`.
//!
//! All schemes draw from one [`ChaCha8Rng`] seeded with the caller's seed, in a fixed order, so a
//! `(spec, labels, n_clients, seed)` gives the same partition on every run and every platform
//! (rand 0.9 samples indices through `u32` when they fit, so 32- and 64-bit targets agree; `dir:`
//! also depends on `f64` `ln`/`exp`, which agree in practice).
//!
//! ## The procedures
//!
//! `array_split(v, m)` below cuts `v` into `m` consecutive parts whose sizes differ by at most one,
//! the earlier parts taking the extra samples (numpy's `array_split`). "Split label `l` over its
//! owners" means: shuffle the indices of label `l`'s samples and `array_split` them over the
//! clients owning `l`, in increasing client id; this is done for `l` in `0..10`, skipping (and
//! drawing nothing for) labels that nobody owns.
//!
//! - **`iid`**: shuffle the indices `0..N`, `array_split` into `n` parts; client `i` gets part `i`.
//! - **`label:K`** (NIID-Bench `partition_data`, `noniid-#label`): for each client `i` in order,
//!   `current = [i % C]` (`C` the data set's classes, 10 in NIID-Bench), then draw labels
//!   uniformly from `0..C` until `current` holds `K` distinct ones; `times[l]` counts the clients
//!   owning label `l`. Then each label is split over its owners. With `K = C` no labels are drawn
//!   and every label is split over all clients. **A label no client owns is left unused** (its
//!   samples go to nobody); this can happen for `K < C` when `n < C`. Every owned label must have at least `times[l]` samples, so that
//!   each client really holds `K` labels.
//! - **`dir:BETA`** (NIID-Bench `noniid-labeldir`): repeat until every client holds at least
//!   [`DIRICHLET_MIN_SIZE`] samples, at most [`DIRICHLET_MAX_TRIES`] times: start from empty
//!   clients; for each label, shuffle its indices, draw `p ~ Dir(β·1ₙ)`, set `p_j = 0` for every
//!   client already holding `≥ N/n` samples, renormalise, cut the label's indices at
//!   `floor(cumsum(p)·len)` and append part `j` to client `j`. At the end shuffle each client's
//!   list. `p` is drawn as normalised Gamma(β) variates computed in log space, so very small β
//!   cannot underflow to `0/0`.
//! - **`groups:…`** (StoCFL's "pathological" split, e.g. `{0,1,2},{3,4},{5,6},{7,8,9}`): client `i`
//!   belongs to group `i % G` and owns the labels of its group; each label is split over its
//!   owners; labels in no group are unused. The ground truth of client `i` is `i % G`.
//! - **`rotate:G`** (StoCFL's rotated data, `1 ≤ G ≤ 4`): the `iid` split; client `i` belongs to
//!   group `g = i % G` and sees every image (training and test) turned `g` quarter turns
//!   counter-clockwise (0°, 90°, 180°, 270° for `G = 4`); see [`rotate_image`]. Ground truth `g`.
//! - **`shift:G`** (StoCFL's shifted labels, `1 ≤ G ≤ `[`MAX_SHIFT_GROUPS`]): the `iid` split
//!   (the same shards as `iid` with the same seed); client `i` belongs to group `g = i % G` and
//!   every label it trains and is tested on is `y' = (y + s) mod 10` with `s = `[`SHIFT_STEP`]`·g`
//!   (`s ∈ {0, 3, 6, 9}` for `G = 4`), recorded in [`ClientShard::label_shift`]; see
//!   [`shift_label`]. [`ClientShard::labels`] holds the shifted labels. Ground truth `g`.
//! - **`rotate:R*BASE`** (StoCFL §4.1's "2 rotations × 4 label groups"): `BASE` must be one of
//!   `groups:…`, `pairs`, `dominant:ALPHA`, `shift:G`: the schemes whose client `i` is in
//!   ground-truth group `i % G` (`G` = `BASE`'s number of groups), so that the rotation index
//!   `r = (i / G) % R` crosses every base group with every rotation. The shards (and label shifts)
//!   are exactly `BASE`'s with the same seed, drawn in the same order; client `i` is also turned
//!   `r` quarter turns; its ground truth is `BASE`'s group plus `G·r`. `1 ≤ R ≤ 4`, and
//!   `n ≥ G·R` so that every group has a client. Other bases are refused
//!   ([`SpecError::ProductBase`]): `iid` is `rotate:R` already, `label:` and `dir:` have no ground
//!   truth, `rotate:` would stack two rotations, and `tasks:` numbers its clients by task.
//! - **`dominant:ALPHA`** (AdaCFL's α ∈ {0.5, 0.8, 1.0}; `0 < α ≤ 1`): 5 groups; client `i`
//!   belongs to group `g = i % 5` with dominant class `c = `[`DOMINANT_CLASSES`]`[g] = 2g`. Every
//!   client gets the same number `m` of samples: `d = round(α·m)` (half away from zero) of class
//!   `c` and `r = m − d` of the other 9 classes, spread as evenly as possible: the other classes
//!   in increasing order, rotated left by `(i / 5) mod 9`, get `floor(r / 9)` each and the first
//!   `r mod 9` of them one more (the rotation spreads the extra samples over the classes).
//!   `m` is the largest value `≤ floor(N / n)` for which every class has enough samples for all
//!   clients' counts (the dominant classes run out first: on the full Fashion-MNIST training set
//!   with 100 clients `m` is 300 for α = 1, 337 for α = 0.8, 415 for α = 0.5; on the bundled
//!   subset 15, 16, 20). Drawing: the indices of each label `0..10` are shuffled in label order;
//!   clients in increasing id take their count of each label `0..10` (in label order) from the
//!   front of that label's list, so no sample is used twice; finally each client's list is
//!   shuffled.
//!   Ground truth `g`. Fewer than 5 clients, or data so small that `d = 0`, is an error.
//! - **`pairs`** (AdaCFL's "α = B", 2 classes per client and 10 groups): client `i` belongs to
//!   group `g = i % 10` and owns labels `g` and `(g + 1) mod 10`; each label is split over its
//!   owners (its two groups' clients, in increasing id). `n ≥ 10`. Ground truth `g`.
//! - **`tasks:fmnist3`** (MT-HFL's Fashion-MNIST experiment, Ali & Arafa §III): three tasks,
//!   [`FMNIST3_TASKS`] = clothes `{0, 1, 2, 3, 4, 6}`, shoes `{5, 7, 9}`, bags `{8}`. The paper
//!   gives no sample counts, only that each user has "the majority" of its samples from its task
//!   and "a minority" from the others (10 % in its CIFAR-10 experiment), that task 1 has
//!   "significantly" more samples than task 2 and task 3 the fewest, and 5 / 3 / 2 users of 10.
//!   The split below gives exactly that, and on the full training set (6 000 images per label)
//!   users of 6 400 (clothes), 5 333 (shoes) and 2 667 (bags) samples, task totals 32 000 /
//!   16 000 / 5 333:
//!   1. Users per task: `n × (5, 3, 2) / 10` rounded by largest remainder (ties to the earlier
//!      task), so 5 / 3 / 2 for `n = 10`; `n ≥ 3`. Clients `0..n₀` learn clothes, the next `n₁`
//!      shoes, the last `n₂` bags (the paper's Fig. 4 numbering: users 0 and 3 task 1, user 6 task
//!      2, user 9 task 3). The ground truth is the task.
//!   2. For each task in order, its pool (every training index whose label is in the task, in
//!      index order) is shuffled; the first `floor(`[`TASKS_MAJORITY_USE`]` × len)` indices are
//!      `array_split` over the task's users in increasing id; the rest is the task's leftover.
//!   3. For each client in increasing id, `m = round(majority × ρ / (1 − ρ))` with
//!      ρ = [`TASKS_MINORITY`] (so the minority is 10 % of the client's samples) indices are drawn
//!      uniformly without replacement from the concatenated, not yet taken leftovers of the
//!      *other* tasks (task order, `partial_shuffle`), i.e. in proportion to what is left of them.
//!   4. Each client's list is shuffled.
//!
//!   Samples are used at most once; the rest of the leftovers is unused.
//!   [`PartitionSpec::task_labels`] gives the labels of each task (for per-task accuracy).
//! - **`writers`** (FEMNIST's clients in LEAF, StoCFL and FeSEM): the data set's [`Writers`]
//!   say who wrote each sample. The writers with at least one training and one test sample, in
//!   the order [`Writers::names`] lists them (file order, then each file's `users`), are the
//!   candidates; client `i` gets every training sample of candidate `i` (in reading order) and
//!   is tested on that writer's test samples ([`ClientShard::test`]). `n` may not exceed the
//!   candidates; the later writers are unused. Nothing is drawn; no ground truth.
//!
//! ## Local test sets
//!
//! [`local_test_indices`] gives PACFL's "local view": a client is tested on every test sample whose
//! label occurs in its training shard (for `shift:`, whose *shifted* label is one the client
//! holds); under `writers`, on its writer's own test samples. [`client_datasets`] builds a client's training and local test [`Dataset`]s, rotation
//! and label shift applied to both.

use std::fmt;
use std::str::FromStr;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Gamma};
use serde::{Deserialize, Serialize};

use super::catalog::{DEFAULT_CLASSES, DatasetKind, ImageShape, MAX_CLASSES};
use super::dataset::{Dataset, Splits};
use super::femnist::Writers;

/// The minimum number of samples every client must get from a `dir:` partition (NIID-Bench's
/// `min_require_size`).
pub const DIRICHLET_MIN_SIZE: usize = 10;

/// How many times a `dir:` partition is redrawn before [`PartitionError::DirichletGaveUp`].
pub const DIRICHLET_MAX_TRIES: usize = 1000;

/// The most groups `rotate:G` allows (four quarter turns).
pub const MAX_ROTATE_GROUPS: usize = 4;

/// The most groups `shift:G` allows (shifts 0, 3, 6, 9).
pub const MAX_SHIFT_GROUPS: usize = 4;

/// The label shift between consecutive `shift:` groups: group `g` sees label `y` as
/// `(y + SHIFT_STEP·g) mod 10`.
pub const SHIFT_STEP: u8 = 3;

/// The dominant class of each `dominant:` group: group `g` (clients `i` with `i % 5 == g`) has
/// most of its samples from class `DOMINANT_CLASSES[g] = 2g` (T-shirt, pullover, coat, shirt,
/// bag on Fashion-MNIST).
pub const DOMINANT_CLASSES: [u8; 5] = [0, 2, 4, 6, 8];

/// The number of groups (label pairs) of `pairs`.
pub const PAIRS_GROUPS: usize = 10;

/// The tasks of `tasks:fmnist3` (MT-HFL): clothes (T-shirt, trouser, pullover, dress, coat,
/// shirt), shoes (sandal, sneaker, ankle boot), bags.
pub const FMNIST3_TASKS: [&[u8]; 3] = [&[0, 1, 2, 3, 4, 6], &[5, 7, 9], &[8]];

/// Users per task of `tasks:fmnist3` out of 10 (scaled to other client counts).
pub const FMNIST3_USERS: [usize; 3] = [5, 3, 2];

/// The fraction ρ of a `tasks:` client's samples drawn from the other tasks.
pub const TASKS_MINORITY: f64 = 0.1;

/// The fraction of each task's samples that `tasks:` hands to the task's own users; the rest is the
/// reserve the other tasks' users draw their minority from.
pub const TASKS_MAJORITY_USE: f64 = 0.8;

/// How the training set is split over clients; written and parsed as `iid`, `label:2`, `dir:0.1`,
/// `groups:012-34-56-789`, `rotate:4`, `shift:4`, `rotate:2*groups:012-34-56-789`,
/// `dominant:0.8`, `pairs` or `tasks:fmnist3` (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum PartitionSpec {
    /// Uniformly random near-equal shards.
    Iid,
    /// NIID-Bench "#C=k": each client holds `k` labels (`1 ≤ k ≤ 10`).
    Label {
        /// Labels per client.
        k: usize,
    },
    /// NIID-Bench Dirichlet label skew with concentration `beta` (`> 0`, finite; smaller = more
    /// skewed).
    Dirichlet {
        /// The Dirichlet concentration β.
        beta: f64,
    },
    /// StoCFL pathological split: disjoint, non-empty label groups; group `g` is one cluster.
    Groups(Vec<Vec<u8>>),
    /// Iid shards, client `i` in group `i % groups` with `i % groups` quarter turns of rotation
    /// (`1 ≤ groups ≤ 4`).
    Rotate {
        /// Number of rotation groups.
        groups: usize,
    },
    /// MT-HFL's three-task Fashion-MNIST split (`tasks:fmnist3`): clothes / shoes / bags users,
    /// each with ~10 % of its samples from the other tasks; task `t` is cluster `t`.
    TasksFmnist3,
    /// StoCFL shifted labels (`shift:G`): iid shards, client `i` in group `g = i % groups` sees
    /// label `y` as `(y + 3g) mod 10` (`1 ≤ groups ≤ 4`).
    Shift {
        /// Number of shift groups.
        groups: usize,
    },
    /// The product `rotate:R*BASE`: `base`'s shards, client `i` also turned
    /// `(i / G) % rotations` quarter turns, `G` being `base`'s number of groups
    /// (`1 ≤ rotations ≤ 4`; `base` is `groups:`, `pairs`, `dominant:` or `shift:`).
    Rotated {
        /// Number of rotations `R`.
        rotations: usize,
        /// The scheme that gives the shards and the first factor of the ground truth.
        base: Box<PartitionSpec>,
    },
    /// AdaCFL's dominant-class split (`dominant:ALPHA`): 5 groups, a fraction `alpha` of each
    /// client's samples from its group's class, the rest spread over the other 9 classes.
    Dominant {
        /// The dominant fraction α, `0 < α ≤ 1`.
        alpha: f64,
    },
    /// AdaCFL's "α = B" split (`pairs`): client `i` holds labels `i % 10` and `(i + 1) % 10`;
    /// 10 groups.
    Pairs,
    /// One writer a client (`writers`, FEMNIST): client `i` gets every training sample of the
    /// `i`-th writer with both training and test samples, and that writer's test samples as its
    /// local test set; needs a data set that records its writers.
    Writers,
}

/// An invalid [`PartitionSpec`], from parsing a string or from [`PartitionSpec::validate`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// The string does not start with a known scheme.
    #[error(
        "unknown partition `{input}`: expected iid, label:K, dir:BETA, groups:012-34-…, rotate:G, \
         shift:G, rotate:R*BASE, dominant:ALPHA, pairs or tasks:fmnist3"
    )]
    UnknownScheme {
        /// The whole input.
        input: String,
    },
    /// The number after the colon does not parse.
    #[error("partition `{input}`: `{value}` is not a valid number")]
    BadNumber {
        /// The whole input.
        input: String,
        /// The text that should have been a number.
        value: String,
    },
    /// `label:K` with `K` outside `1..=classes`.
    #[error("label:{k}: the number of labels per client must be between 1 and {classes}")]
    LabelCount {
        /// The requested labels per client.
        k: usize,
        /// The data set's classes (256 when the data set is not known yet).
        classes: usize,
    },
    /// `dir:BETA` with β not positive and finite.
    #[error("dir:{beta}: beta must be positive and finite")]
    Beta {
        /// The requested β.
        beta: f64,
    },
    /// `rotate:G` with `G` outside `1..=4`.
    #[error("rotate:{groups}: the number of rotation groups must be between 1 and 4")]
    RotateGroups {
        /// The requested number of groups.
        groups: usize,
    },
    /// `groups:` with no group at all.
    #[error("groups: at least one label group is needed, e.g. groups:012-34-56-789")]
    NoGroups,
    /// A label group is empty (e.g. `groups:01--23`).
    #[error("label group {index} is empty")]
    EmptyGroup {
        /// The position of the empty group.
        index: usize,
    },
    /// A group holds something that is not a digit `0`–`9` (or, written with commas, not a
    /// label number).
    #[error(
        "partition `{input}`: `{found}` is not a label digit 0-9 (labels from 10 on are written \
         with commas: groups:0,1,2-10,11)"
    )]
    BadGroupChar {
        /// The whole input.
        input: String,
        /// The offending character.
        found: char,
    },
    /// A group holds a label that is not one of the data set's classes.
    #[error("label {label} in group {group} is not one of the data set's classes")]
    LabelOutOfRange {
        /// The group index.
        group: usize,
        /// The offending label.
        label: u8,
    },
    /// `shift:G` with `G` outside `1..=4`.
    #[error("shift:{groups}: the number of shift groups must be between 1 and 4")]
    ShiftGroups {
        /// The requested number of groups.
        groups: usize,
    },
    /// `dominant:ALPHA` with α not in `(0, 1]`.
    #[error("dominant:{alpha}: the dominant fraction alpha must be in (0, 1]")]
    Alpha {
        /// The requested α.
        alpha: f64,
    },
    /// A product `A*B` whose first factor is not `rotate:R`.
    #[error("partition `{input}`: a product must be written rotate:R*BASE")]
    ProductOuter {
        /// The whole input.
        input: String,
    },
    /// `rotate:R*BASE` with a base that has no ground truth of the form `i % G`.
    #[error(
        "rotate:R*{base}: the base must be groups:…, pairs, dominant:ALPHA or shift:G (client i in \
         ground-truth group i % G)"
    )]
    ProductBase {
        /// The refused base, as a string.
        base: String,
    },
    /// A scheme made for ten-class data sets on a data set of another class count.
    #[error(
        "partition {scheme} is made of the labels 0-9 and needs {} classes; this data set has \
         {classes}",
        if scheme == "shift:" { "exactly 10" } else { "at least 10" }
    )]
    Classes {
        /// The scheme.
        scheme: String,
        /// The data set's classes.
        classes: usize,
    },
    /// A label appears twice (in one group or in two).
    #[error("label {label} appears in more than one place; label groups must be disjoint")]
    DuplicateLabel {
        /// The repeated label.
        label: u8,
    },
    /// `writers` on a data set whose files do not say who wrote each sample.
    #[error("writers needs a data set that records its writers (femnist); {dataset} does not")]
    NoWriters {
        /// The data set's name.
        dataset: String,
    },
}

impl PartitionSpec {
    /// Checks the parameters that do not depend on the data set: `1 ≤ k ≤ 256`, β positive and
    /// finite, groups non-empty and disjoint, `1 ≤ G ≤ 4` for `rotate:` and `shift:`,
    /// `0 < α ≤ 1`, and for a product `1 ≤ R ≤ 4` and a valid base of an allowed kind
    /// ([`PartitionSpec::check_classes`] checks the rest against a data set). Parsing validates
    /// already; this is for specs built in code.
    ///
    /// # Errors
    ///
    /// The [`SpecError`] describing the first problem found.
    pub fn validate(&self) -> Result<(), SpecError> {
        match self {
            PartitionSpec::Iid => Ok(()),
            PartitionSpec::Label { k } => {
                if (1..=MAX_CLASSES).contains(k) {
                    Ok(())
                } else {
                    Err(SpecError::LabelCount {
                        k: *k,
                        classes: MAX_CLASSES,
                    })
                }
            }
            PartitionSpec::Dirichlet { beta } => {
                if beta.is_finite() && *beta > 0.0 {
                    Ok(())
                } else {
                    Err(SpecError::Beta { beta: *beta })
                }
            }
            PartitionSpec::Groups(groups) => {
                if groups.is_empty() {
                    return Err(SpecError::NoGroups);
                }
                let mut seen = [false; MAX_CLASSES];
                for (g, group) in groups.iter().enumerate() {
                    if group.is_empty() {
                        return Err(SpecError::EmptyGroup { index: g });
                    }
                    for &label in group {
                        let slot = &mut seen[usize::from(label)];
                        if *slot {
                            return Err(SpecError::DuplicateLabel { label });
                        }
                        *slot = true;
                    }
                }
                Ok(())
            }
            PartitionSpec::Rotate { groups } => {
                if (1..=MAX_ROTATE_GROUPS).contains(groups) {
                    Ok(())
                } else {
                    Err(SpecError::RotateGroups { groups: *groups })
                }
            }
            PartitionSpec::TasksFmnist3 | PartitionSpec::Pairs | PartitionSpec::Writers => Ok(()),
            PartitionSpec::Shift { groups } => {
                if (1..=MAX_SHIFT_GROUPS).contains(groups) {
                    Ok(())
                } else {
                    Err(SpecError::ShiftGroups { groups: *groups })
                }
            }
            PartitionSpec::Dominant { alpha } => {
                if *alpha > 0.0 && *alpha <= 1.0 {
                    Ok(())
                } else {
                    Err(SpecError::Alpha { alpha: *alpha })
                }
            }
            PartitionSpec::Rotated { rotations, base } => {
                if !(1..=MAX_ROTATE_GROUPS).contains(rotations) {
                    return Err(SpecError::RotateGroups { groups: *rotations });
                }
                match **base {
                    PartitionSpec::Groups(_)
                    | PartitionSpec::Pairs
                    | PartitionSpec::Dominant { .. }
                    | PartitionSpec::Shift { .. } => base.validate(),
                    _ => Err(SpecError::ProductBase {
                        base: base.to_string(),
                    }),
                }
            }
        }
    }

    /// Checks that the scheme can be dealt to `clients` clients, before any data is read: one
    /// client at least per ground-truth group (`groups:`, `pairs`, `dominant:`, `tasks:fmnist3`,
    /// a rotated product's groups × rotations).
    ///
    /// # Errors
    ///
    /// [`PartitionError::TooFewClients`].
    pub fn check_clients(&self, clients: usize) -> Result<(), PartitionError> {
        let groups = match self {
            PartitionSpec::Groups(groups) => groups.len(),
            PartitionSpec::Pairs => PAIRS_GROUPS,
            PartitionSpec::Dominant { .. } => DOMINANT_CLASSES.len(),
            PartitionSpec::Rotated { rotations, base } => {
                base.num_groups().unwrap_or(1) * rotations
            }
            PartitionSpec::TasksFmnist3 => FMNIST3_TASKS.len(),
            _ => 1,
        };
        if clients < groups {
            return Err(PartitionError::TooFewClients { clients, groups });
        }
        Ok(())
    }

    /// The labels of `0..classes` that no client gets: those in no group of a `groups:` spec
    /// (also as the base of `rotate:R*groups:…`), and for `pairs`, `dominant:` and
    /// `tasks:fmnist3`, whose groups are made of the labels `0..10`, every label from 10 on.
    /// Empty for every other spec, which uses every label.
    pub fn unused_labels(&self, classes: usize) -> Vec<u8> {
        let all = 0..classes.min(MAX_CLASSES) as u16;
        match self {
            PartitionSpec::Groups(groups) => all
                .map(|l| l as u8)
                .filter(|l| !groups.iter().any(|g| g.contains(l)))
                .collect(),
            PartitionSpec::Pairs | PartitionSpec::TasksFmnist3 => {
                all.skip(DEFAULT_CLASSES).map(|l| l as u8).collect()
            }
            PartitionSpec::Rotated { base, .. } => base.unused_labels(classes),
            _ => Vec::new(),
        }
    }

    /// Checks the spec against a data set of `classes` classes: `label:K` needs `K ≤ classes`,
    /// `groups:` labels below `classes`, `pairs`, `dominant:` and `tasks:fmnist3` (made of the
    /// labels `0..10`) at least 10 classes, and `shift:` (labels shifted modulo 10) exactly 10.
    ///
    /// # Errors
    ///
    /// The [`SpecError`] naming the first problem.
    pub fn check_classes(&self, classes: usize) -> Result<(), SpecError> {
        let tens = |scheme: &str, exact: bool| {
            let ok = if exact {
                classes == DEFAULT_CLASSES
            } else {
                classes >= DEFAULT_CLASSES
            };
            if ok {
                Ok(())
            } else {
                Err(SpecError::Classes {
                    scheme: scheme.to_string(),
                    classes,
                })
            }
        };
        match self {
            PartitionSpec::Label { k } if *k > classes => {
                Err(SpecError::LabelCount { k: *k, classes })
            }
            PartitionSpec::Groups(groups) => {
                for (g, group) in groups.iter().enumerate() {
                    if let Some(&label) = group.iter().find(|&&l| usize::from(l) >= classes) {
                        return Err(SpecError::LabelOutOfRange { group: g, label });
                    }
                }
                Ok(())
            }
            PartitionSpec::Pairs => tens("pairs", false),
            PartitionSpec::Dominant { .. } => tens("dominant:", false),
            PartitionSpec::TasksFmnist3 => tens("tasks:fmnist3", false),
            PartitionSpec::Shift { .. } => tens("shift:", true),
            PartitionSpec::Rotated { base, .. } => base.check_classes(classes),
            _ => Ok(()),
        }
    }

    /// [`check_classes`](Self::check_classes) against `dataset`'s classes, and that `writers`
    /// has a data set that records its writers ([`DatasetKind::has_writers`]).
    ///
    /// # Errors
    ///
    /// The [`SpecError`] naming the first problem ([`SpecError::NoWriters`]).
    pub fn check_dataset(&self, dataset: DatasetKind) -> Result<(), SpecError> {
        self.check_classes(dataset.info().classes())?;
        if *self == PartitionSpec::Writers && !dataset.has_writers() {
            return Err(SpecError::NoWriters {
                dataset: dataset.info().name.to_string(),
            });
        }
        Ok(())
    }

    /// The number of ground-truth groups: the label groups of `groups:`, `G` for `rotate:G` and
    /// `shift:G`, 3 for `tasks:fmnist3`, 5 for `dominant:`, 10 for `pairs`, `G·R` for
    /// `rotate:R*BASE`; `None` for `iid`, `label:` and `dir:`.
    pub fn num_groups(&self) -> Option<usize> {
        match self {
            PartitionSpec::Groups(g) => Some(g.len()),
            PartitionSpec::Rotate { groups } | PartitionSpec::Shift { groups } => Some(*groups),
            PartitionSpec::TasksFmnist3 => Some(FMNIST3_TASKS.len()),
            PartitionSpec::Dominant { .. } => Some(DOMINANT_CLASSES.len()),
            PartitionSpec::Pairs => Some(PAIRS_GROUPS),
            PartitionSpec::Rotated { rotations, base } => base.num_groups().map(|g| g * rotations),
            PartitionSpec::Iid
            | PartitionSpec::Label { .. }
            | PartitionSpec::Dirichlet { .. }
            | PartitionSpec::Writers => None,
        }
    }

    /// The labels of each ground-truth group when groups are defined by labels (group `g` at
    /// index `g`): the label groups of `groups:`, the tasks of `tasks:fmnist3`, the sorted pairs
    /// `{g, g + 1 mod 10}` of `pairs`, and for `rotate:R*BASE` the base's label sets repeated `R`
    /// times (group `g + G·r` has the labels of base group `g`). `None` otherwise, in particular
    /// for `rotate:`, `shift:` and `dominant:`, whose groups share their label sets.
    pub fn task_labels(&self) -> Option<Vec<Vec<u8>>> {
        match self {
            PartitionSpec::Groups(g) => Some(g.clone()),
            PartitionSpec::TasksFmnist3 => Some(FMNIST3_TASKS.iter().map(|t| t.to_vec()).collect()),
            PartitionSpec::Pairs => Some(
                (0..PAIRS_GROUPS as u8)
                    .map(|g| {
                        let mut pair = vec![g, (g + 1) % PAIRS_GROUPS as u8];
                        pair.sort_unstable();
                        pair
                    })
                    .collect(),
            ),
            PartitionSpec::Rotated { rotations, base } => {
                let sets = base.task_labels()?;
                let g = sets.len();
                Some(sets.into_iter().cycle().take(g * rotations).collect())
            }
            PartitionSpec::Iid
            | PartitionSpec::Label { .. }
            | PartitionSpec::Dirichlet { .. }
            | PartitionSpec::Rotate { .. }
            | PartitionSpec::Shift { .. }
            | PartitionSpec::Dominant { .. }
            | PartitionSpec::Writers => None,
        }
    }
}

impl fmt::Display for PartitionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PartitionSpec::Iid => f.write_str("iid"),
            PartitionSpec::Label { k } => write!(f, "label:{k}"),
            PartitionSpec::Dirichlet { beta } => write!(f, "dir:{beta}"),
            PartitionSpec::Groups(groups) => {
                // Digits while every label is one; label numbers with commas from 10 on.
                let commas = groups.iter().flatten().any(|&l| l >= 10);
                f.write_str("groups:")?;
                for (i, group) in groups.iter().enumerate() {
                    if i > 0 {
                        f.write_str("-")?;
                    }
                    for (j, label) in group.iter().enumerate() {
                        if commas && j > 0 {
                            f.write_str(",")?;
                        }
                        write!(f, "{label}")?;
                    }
                }
                Ok(())
            }
            PartitionSpec::Rotate { groups } => write!(f, "rotate:{groups}"),
            PartitionSpec::TasksFmnist3 => f.write_str("tasks:fmnist3"),
            PartitionSpec::Shift { groups } => write!(f, "shift:{groups}"),
            PartitionSpec::Rotated { rotations, base } => write!(f, "rotate:{rotations}*{base}"),
            PartitionSpec::Dominant { alpha } => write!(f, "dominant:{alpha}"),
            PartitionSpec::Pairs => f.write_str("pairs"),
            PartitionSpec::Writers => f.write_str("writers"),
        }
    }
}

impl FromStr for PartitionSpec {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, SpecError> {
        let input = s.trim();
        let number = |value: &str| -> Result<usize, SpecError> {
            value.parse().map_err(|_| SpecError::BadNumber {
                input: input.to_string(),
                value: value.to_string(),
            })
        };
        let float = |value: &str| -> Result<f64, SpecError> {
            value.parse().map_err(|_| SpecError::BadNumber {
                input: input.to_string(),
                value: value.to_string(),
            })
        };
        let spec = if let Some((outer, base)) = input.split_once('*') {
            let Some(r) = outer.strip_prefix("rotate:") else {
                return Err(SpecError::ProductOuter {
                    input: input.to_string(),
                });
            };
            PartitionSpec::Rotated {
                rotations: number(r)?,
                base: Box::new(base.parse()?),
            }
        } else if input == "iid" {
            PartitionSpec::Iid
        } else if input == "pairs" {
            PartitionSpec::Pairs
        } else if input == "writers" {
            PartitionSpec::Writers
        } else if input == "tasks:fmnist3" {
            PartitionSpec::TasksFmnist3
        } else if let Some(v) = input.strip_prefix("label:") {
            PartitionSpec::Label { k: number(v)? }
        } else if let Some(v) = input.strip_prefix("dir:") {
            PartitionSpec::Dirichlet { beta: float(v)? }
        } else if let Some(v) = input.strip_prefix("dominant:") {
            PartitionSpec::Dominant { alpha: float(v)? }
        } else if let Some(v) = input.strip_prefix("shift:") {
            PartitionSpec::Shift { groups: number(v)? }
        } else if let Some(v) = input.strip_prefix("rotate:") {
            PartitionSpec::Rotate { groups: number(v)? }
        } else if let Some(v) = input.strip_prefix("groups:") {
            let mut groups = Vec::new();
            if !v.is_empty() {
                // Digits (`012-34`), or with any comma label numbers (`0,1,2-10,11`).
                let commas = v.contains(',');
                for part in v.split('-') {
                    let mut group = Vec::with_capacity(part.len());
                    if commas {
                        for label in part.split(',').filter(|l| !l.is_empty()) {
                            group.push(label.parse().map_err(|_| SpecError::BadNumber {
                                input: input.to_string(),
                                value: label.to_string(),
                            })?);
                        }
                    } else {
                        for c in part.chars() {
                            let d = c.to_digit(10).ok_or_else(|| SpecError::BadGroupChar {
                                input: input.to_string(),
                                found: c,
                            })?;
                            group.push(d as u8);
                        }
                    }
                    groups.push(group);
                }
            }
            PartitionSpec::Groups(groups)
        } else {
            return Err(SpecError::UnknownScheme {
                input: input.to_string(),
            });
        };
        spec.validate()?;
        Ok(spec)
    }
}

impl TryFrom<String> for PartitionSpec {
    type Error = SpecError;

    fn try_from(s: String) -> Result<Self, SpecError> {
        s.parse()
    }
}

impl From<PartitionSpec> for String {
    fn from(spec: PartitionSpec) -> String {
        spec.to_string()
    }
}

/// One client's share of the training set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientShard {
    /// Indices into the training set.
    pub train: Vec<usize>,
    /// The distinct labels the client trains on, sorted: those present in `train`, shifted by
    /// `label_shift` ([`shift_label`]).
    pub labels: Vec<u8>,
    /// Quarter turns (counter-clockwise, `0..4`) applied to this client's images; non-zero only
    /// for `rotate:` and `rotate:R*…`.
    pub rotation: u8,
    /// The client sees every label `y` (training and local test) as `(y + label_shift) mod 10`;
    /// non-zero only for `shift:`. Missing in older serialised shards, hence `0` by default.
    #[serde(default)]
    pub label_shift: u8,
    /// Indices into the test set of the client's own test samples (`writers`: its writer's);
    /// `None` for every other scheme, whose local test set is chosen by label
    /// ([`local_test_indices`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<Vec<usize>>,
}

/// A partition of the training set over clients.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Partition {
    /// The scheme that produced it.
    pub spec: PartitionSpec,
    /// One shard per client, client `i` at index `i`.
    pub clients: Vec<ClientShard>,
    /// The ground-truth group of each client for the schemes with groups
    /// ([`PartitionSpec::num_groups`] is `Some`); `None` otherwise.
    pub truth: Option<Vec<usize>>,
}

/// Errors from [`partition`] and [`client_datasets`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PartitionError {
    /// The spec is invalid.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// `n_clients` is zero.
    #[error("the number of clients must be at least 1")]
    NoClients,
    /// A training label is not in `0..classes`.
    #[error("training label {label} of sample {index} is not in 0..{classes}")]
    LabelOutOfRange {
        /// The sample index.
        index: usize,
        /// The offending label.
        label: u8,
        /// The data set's classes.
        classes: usize,
    },
    /// Too few training samples for the number of clients.
    #[error(
        "{spec} over {clients} clients needs at least {needed} training samples, there are {available}"
    )]
    TooFewSamples {
        /// The scheme, as a string.
        spec: String,
        /// The number of clients.
        clients: usize,
        /// Samples needed.
        needed: usize,
        /// Samples available.
        available: usize,
    },
    /// A label has fewer samples than the clients it must be split over.
    #[error(
        "label {label} must be split over {needed} clients but has only {available} training samples"
    )]
    TooFewLabelSamples {
        /// The label.
        label: u8,
        /// The number of clients sharing it.
        needed: usize,
        /// Its number of samples.
        available: usize,
    },
    /// `groups:` with fewer clients than groups (some group would get no client).
    #[error("{groups} label groups need at least {groups} clients, got {clients}")]
    TooFewClients {
        /// The number of clients.
        clients: usize,
        /// The number of groups.
        groups: usize,
    },
    /// A `tasks:` task has too few samples: its users would get no majority sample, or a user's
    /// minority cannot be drawn from what is left of the other tasks.
    #[error("task {task} needs {needed} more training samples, only {available} are available")]
    TooFewTaskSamples {
        /// The task (0-based) whose users are short.
        task: usize,
        /// Samples needed.
        needed: usize,
        /// Samples available.
        available: usize,
    },
    /// `dominant:` on a training set whose classes are too small to give every client one sample
    /// of its dominant class.
    #[error(
        "dominant:{alpha} over {clients} clients: the classes are too small to give every client \
         a sample of its dominant class"
    )]
    DominantTooSmall {
        /// The α used.
        alpha: f64,
        /// The number of clients.
        clients: usize,
    },
    /// `dir:` did not give every client [`DIRICHLET_MIN_SIZE`] samples within
    /// [`DIRICHLET_MAX_TRIES`] draws.
    #[error(
        "dir:{beta}: no draw in {tries} gave every client at least {DIRICHLET_MIN_SIZE} samples \
         (best smallest client: {best_min_size}); use a larger beta or fewer clients"
    )]
    DirichletGaveUp {
        /// The β used.
        beta: f64,
        /// Draws tried.
        tries: usize,
        /// The largest smallest-client size seen over all draws.
        best_min_size: usize,
    },
    /// `writers` over more clients than there are writers with training and test samples.
    #[error(
        "writers over {clients} clients: only {writers} writers have both training and test \
         samples (LEAF's sample split, -t sample, gives every writer both)"
    )]
    TooFewWriters {
        /// The number of clients.
        clients: usize,
        /// The writers that could be clients.
        writers: usize,
    },
    /// A shard index is outside the training set ([`client_datasets`] with a partition of another
    /// dataset).
    #[error("sample index {index} is out of range for a set of {len} samples")]
    IndexOutOfRange {
        /// The offending index.
        index: usize,
        /// The size of the set.
        len: usize,
    },
}

/// [`partition_of`] a ten-class data set ([`DEFAULT_CLASSES`]: MNIST, Fashion-MNIST, CIFAR-10,
/// SVHN).
///
/// # Errors
///
/// As [`partition_of`].
pub fn partition(
    spec: &PartitionSpec,
    train_labels: &[u8],
    n_clients: usize,
    seed: u64,
) -> Result<Partition, PartitionError> {
    partition_of(spec, train_labels, DEFAULT_CLASSES, None, n_clients, seed)
}

/// Splits the training set with labels `train_labels` (of a data set of `classes` classes, whose
/// samples' `writers` are known for FEMNIST) over `n_clients` clients by `spec`, drawing from
/// `ChaCha8Rng::seed_from_u64(seed)`; see the [module docs](self) for each procedure.
///
/// Every training sample goes to at most one client; for `iid`, `label:K` with `K = classes`,
/// `groups:` covering all labels, `rotate:` and `shift:`, to exactly one.
///
/// # Errors
///
/// [`PartitionError::Spec`] for an invalid spec or one the class count refuses
/// ([`PartitionSpec::check_classes`]), [`PartitionError::NoClients`],
/// [`PartitionError::LabelOutOfRange`] for a label outside `0..classes`, [`PartitionError::TooFewSamples`]
/// / [`PartitionError::TooFewLabelSamples`] / [`PartitionError::TooFewClients`] when the data cannot
/// give every client what the scheme promises, [`PartitionError::TooFewTaskSamples`] for a
/// `tasks:` split on too small a set, [`PartitionError::DominantTooSmall`],
/// [`PartitionError::DirichletGaveUp`]; for `writers`, [`SpecError::NoWriters`] without
/// `writers` and [`PartitionError::TooFewWriters`].
pub fn partition_of(
    spec: &PartitionSpec,
    train_labels: &[u8],
    classes: usize,
    writers: Option<&Writers>,
    n_clients: usize,
    seed: u64,
) -> Result<Partition, PartitionError> {
    spec.validate()?;
    spec.check_classes(classes)?;
    if n_clients == 0 {
        return Err(PartitionError::NoClients);
    }
    if let Some((index, &label)) = train_labels
        .iter()
        .enumerate()
        .find(|&(_, &l)| l as usize >= classes)
    {
        return Err(PartitionError::LabelOutOfRange {
            index,
            label,
            classes,
        });
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut built = build(spec, train_labels, classes, writers, n_clients, &mut rng)?;
    let mut tests = built.test.take().map(Vec::into_iter);
    let clients = built
        .shards
        .into_iter()
        .zip(built.rotation)
        .zip(built.shift)
        .map(|((train, rotation), label_shift)| {
            let mut present = [false; MAX_CLASSES];
            for &i in &train {
                present[shift_label(train_labels[i], label_shift) as usize] = true;
            }
            let labels = (0..classes)
                .filter(|&l| present[l])
                .map(|l| l as u8)
                .collect();
            ClientShard {
                train,
                labels,
                rotation,
                label_shift,
                test: tests.as_mut().and_then(Iterator::next),
            }
        })
        .collect();
    Ok(Partition {
        spec: spec.clone(),
        clients,
        truth: built.truth,
    })
}

/// What one scheme produces: per client its training indices, rotation and label shift (and
/// for `writers` its test indices), and the ground truth.
struct Built {
    shards: Vec<Vec<usize>>,
    rotation: Vec<u8>,
    shift: Vec<u8>,
    test: Option<Vec<Vec<usize>>>,
    truth: Option<Vec<usize>>,
}

impl Built {
    /// Shards with neither rotation nor label shift.
    fn plain(shards: Vec<Vec<usize>>, truth: Option<Vec<usize>>) -> Self {
        let n = shards.len();
        Built {
            shards,
            rotation: vec![0; n],
            shift: vec![0; n],
            test: None,
            truth,
        }
    }
}

/// `writers`: client `i` is the `i`-th writer (in the order [`Writers::names`] lists them) with
/// both training and test samples; it gets all of that writer's samples of each split.
fn by_writers(writers: Option<&Writers>, n: usize) -> Result<Built, PartitionError> {
    let writers = writers.ok_or_else(|| SpecError::NoWriters {
        dataset: "the data given".to_string(),
    })?;
    let mut samples = vec![[Vec::new(), Vec::new()]; writers.names.len()];
    for (split, owners) in [&writers.train, &writers.test].into_iter().enumerate() {
        for (i, &w) in owners.iter().enumerate() {
            samples[w as usize][split].push(i);
        }
    }
    let eligible: Vec<[Vec<usize>; 2]> = samples
        .into_iter()
        .filter(|[train, test]| !train.is_empty() && !test.is_empty())
        .collect();
    if eligible.len() < n {
        return Err(PartitionError::TooFewWriters {
            clients: n,
            writers: eligible.len(),
        });
    }
    let (shards, test) = eligible
        .into_iter()
        .take(n)
        .map(|[train, test]| (train, test))
        .unzip();
    Ok(Built {
        test: Some(test),
        ..Built::plain(shards, None)
    })
}

/// The scheme `spec` (validated, labels checked below `classes`) over `n ≥ 1` clients.
fn build(
    spec: &PartitionSpec,
    train_labels: &[u8],
    classes: usize,
    writers: Option<&Writers>,
    n: usize,
    rng: &mut ChaCha8Rng,
) -> Result<Built, PartitionError> {
    let too_few = |needed: usize| PartitionError::TooFewSamples {
        spec: spec.to_string(),
        clients: n,
        needed,
        available: train_labels.len(),
    };
    spec.check_clients(n)?;
    let modulo = |groups: usize| -> Vec<usize> { (0..n).map(|i| i % groups).collect() };

    Ok(match spec {
        PartitionSpec::Iid => {
            if train_labels.len() < n {
                return Err(too_few(n));
            }
            Built::plain(iid(train_labels.len(), n, rng), None)
        }
        PartitionSpec::Rotate { groups } => {
            if train_labels.len() < n {
                return Err(too_few(n));
            }
            let truth = modulo(*groups);
            // `validate` keeps `groups` ≤ 4, so the group fits in a u8.
            let rotation = truth.iter().map(|&g| g as u8).collect();
            Built {
                rotation,
                ..Built::plain(iid(train_labels.len(), n, rng), Some(truth))
            }
        }
        PartitionSpec::Shift { groups } => {
            if train_labels.len() < n {
                return Err(too_few(n));
            }
            let truth = modulo(*groups);
            // `validate` keeps `groups` ≤ 4, so the shift is at most 9.
            let shift = truth.iter().map(|&g| SHIFT_STEP * g as u8).collect();
            Built {
                shift,
                ..Built::plain(iid(train_labels.len(), n, rng), Some(truth))
            }
        }
        PartitionSpec::Label { k } => {
            Built::plain(label_skew(*k, train_labels, classes, n, rng)?, None)
        }
        PartitionSpec::Writers => by_writers(writers, n)?,
        PartitionSpec::Dirichlet { beta } => {
            let needed = DIRICHLET_MIN_SIZE.saturating_mul(n);
            if train_labels.len() < needed {
                return Err(too_few(needed));
            }
            Built::plain(dirichlet(*beta, train_labels, classes, n, rng)?, None)
        }
        PartitionSpec::Groups(groups) => Built::plain(
            label_groups(groups, train_labels, classes, n, rng)?,
            Some(modulo(groups.len())),
        ),
        PartitionSpec::Pairs => {
            let owns: Vec<Vec<bool>> = (0..n)
                .map(|i| {
                    let mut own = vec![false; classes];
                    own[i % PAIRS_GROUPS] = true;
                    own[(i + 1) % PAIRS_GROUPS] = true;
                    own
                })
                .collect();
            Built::plain(
                split_over_owners(&owns, train_labels, classes, rng)?,
                Some(modulo(PAIRS_GROUPS)),
            )
        }
        PartitionSpec::Dominant { alpha } => Built::plain(
            dominant(*alpha, train_labels, classes, n, rng)?,
            Some(modulo(DOMINANT_CLASSES.len())),
        ),
        PartitionSpec::Rotated { rotations, base } => {
            // `validate` admits only bases with groups (client i in group i % G).
            let g = base.num_groups().unwrap_or(1);
            let inner = build(base, train_labels, classes, writers, n, rng)?;
            let rotation: Vec<usize> = (0..n).map(|i| (i / g) % rotations).collect();
            let truth = inner.truth.as_ref().map(|t| {
                t.iter()
                    .zip(&rotation)
                    .map(|(&group, &r)| group + g * r)
                    .collect()
            });
            Built {
                // `validate` keeps `rotations` ≤ 4.
                rotation: rotation.iter().map(|&r| r as u8).collect(),
                truth,
                ..inner
            }
        }
        PartitionSpec::TasksFmnist3 => {
            let users = users_per_task(n, &FMNIST3_USERS);
            let truth: Vec<usize> = users
                .iter()
                .enumerate()
                .flat_map(|(t, &u)| std::iter::repeat_n(t, u))
                .collect();
            Built::plain(
                tasks(&FMNIST3_TASKS, &truth, train_labels, classes, rng)?,
                Some(truth),
            )
        }
    })
}

/// numpy `array_split` boundaries: part `j` of `len` items cut into `parts` is
/// `start(j)..start(j + 1)`, earlier parts one longer when `len % parts != 0`.
fn array_split<T: Clone>(items: &[T], parts: usize) -> Vec<Vec<T>> {
    let (q, r) = (items.len() / parts, items.len() % parts);
    let mut out = Vec::with_capacity(parts);
    let mut start = 0;
    for j in 0..parts {
        let len = q + usize::from(j < r);
        out.push(items[start..start + len].to_vec());
        start += len;
    }
    out
}

/// Sample indices of each label of `0..classes`, in index order.
fn indices_by_label(train_labels: &[u8], classes: usize) -> Vec<Vec<usize>> {
    let mut by_label = vec![Vec::new(); classes];
    for (i, &l) in train_labels.iter().enumerate() {
        by_label[l as usize].push(i);
    }
    by_label
}

fn iid(len: usize, n: usize, rng: &mut ChaCha8Rng) -> Vec<Vec<usize>> {
    let mut idx: Vec<usize> = (0..len).collect();
    idx.shuffle(rng);
    array_split(&idx, n)
}

fn label_skew(
    k: usize,
    train_labels: &[u8],
    classes: usize,
    n: usize,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<Vec<usize>>, PartitionError> {
    // Which labels each client owns (NIID-Bench `contain`).
    let mut owns = vec![vec![false; classes]; n];
    for (i, own) in owns.iter_mut().enumerate() {
        if k == classes {
            // NIID-Bench's k = 10 branch draws nothing: every client owns every label.
            own.fill(true);
        } else {
            own[i % classes] = true;
            let mut distinct = 1;
            while distinct < k {
                let l = rng.random_range(0..classes);
                if !own[l] {
                    own[l] = true;
                    distinct += 1;
                }
            }
        }
    }
    split_over_owners(&owns, train_labels, classes, rng)
}

/// For each label `l` in `0..classes` owned by some client: shuffle its sample indices and
/// `array_split` them over its owners in increasing client id (`owns[c][l]`: client `c` owns
/// `l`). Labels nobody owns are unused and draw nothing. Every owned label must have at least
/// as many samples as owners (checked before any draw).
fn split_over_owners(
    owns: &[Vec<bool>],
    train_labels: &[u8],
    classes: usize,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<Vec<usize>>, PartitionError> {
    let mut times = vec![0usize; classes];
    for own in owns {
        for (t, &o) in times.iter_mut().zip(own.iter()) {
            *t += usize::from(o);
        }
    }
    let mut by_label = indices_by_label(train_labels, classes);
    for (l, idx) in by_label.iter().enumerate() {
        if times[l] > idx.len() {
            return Err(PartitionError::TooFewLabelSamples {
                label: l as u8,
                needed: times[l],
                available: idx.len(),
            });
        }
    }
    let mut shards = vec![Vec::new(); owns.len()];
    for (l, idx) in by_label.iter_mut().enumerate() {
        if times[l] == 0 {
            continue; // owned by nobody: unused
        }
        idx.shuffle(rng);
        let mut parts = array_split(idx, times[l]).into_iter();
        for (shard, own) in shards.iter_mut().zip(owns) {
            if own[l]
                && let Some(part) = parts.next()
            {
                shard.extend(part);
            }
        }
    }
    Ok(shards)
}

/// `ln` of a Gamma(β, 1) variate. For β < 1 it uses Gamma(β) = Gamma(β + 1) · U^(1/β), whose
/// logarithm stays finite where the variate itself would underflow to zero.
fn ln_gamma_variate(gamma: &Gamma<f64>, beta: f64, rng: &mut ChaCha8Rng) -> f64 {
    let g = gamma.sample(rng);
    if beta < 1.0 {
        // 1 - U lies in (0, 1], so its logarithm is finite.
        let u: f64 = rng.random();
        g.ln() + (1.0 - u).ln() / beta
    } else {
        g.ln()
    }
}

fn dirichlet(
    beta: f64,
    train_labels: &[u8],
    classes: usize,
    n: usize,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<Vec<usize>>, PartitionError> {
    let spec_err = || PartitionError::Spec(SpecError::Beta { beta });
    let shape = if beta < 1.0 { beta + 1.0 } else { beta };
    let gamma = Gamma::new(shape, 1.0).map_err(|_| spec_err())?;
    let by_label = indices_by_label(train_labels, classes);
    let cap = train_labels.len() as f64 / n as f64;
    let mut best_min_size = 0;
    let mut log_p = vec![0.0f64; n];
    let mut p = vec![0.0f64; n];
    for _ in 0..DIRICHLET_MAX_TRIES {
        let mut shards: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut degenerate = false;
        for idx in &by_label {
            let mut idx = idx.clone();
            idx.shuffle(rng);
            for lp in log_p.iter_mut() {
                *lp = ln_gamma_variate(&gamma, beta, rng);
            }
            // Zero full clients, then normalise (softmax over the others).
            let open = |j: usize| (shards[j].len() as f64) < cap;
            let max = (0..n)
                .filter(|&j| open(j))
                .map(|j| log_p[j])
                .fold(f64::NEG_INFINITY, f64::max);
            if !max.is_finite() {
                degenerate = true;
                break;
            }
            let mut sum = 0.0;
            for j in 0..n {
                p[j] = if open(j) { (log_p[j] - max).exp() } else { 0.0 };
                sum += p[j];
            }
            // Cut at floor(cumsum(p) * len), dropping the last cut (numpy `split`).
            let len = idx.len();
            let mut start = 0;
            let mut cum = 0.0;
            for j in 0..n {
                let end = if j + 1 == n {
                    len
                } else {
                    cum += p[j] / sum;
                    ((cum * len as f64) as usize).clamp(start, len)
                };
                shards[j].extend_from_slice(&idx[start..end]);
                start = end;
            }
        }
        if degenerate {
            continue;
        }
        let min_size = shards.iter().map(Vec::len).min().unwrap_or(0);
        best_min_size = best_min_size.max(min_size);
        if min_size >= DIRICHLET_MIN_SIZE {
            for shard in &mut shards {
                shard.shuffle(rng);
            }
            return Ok(shards);
        }
    }
    Err(PartitionError::DirichletGaveUp {
        beta,
        tries: DIRICHLET_MAX_TRIES,
        best_min_size,
    })
}

fn label_groups(
    groups: &[Vec<u8>],
    train_labels: &[u8],
    classes: usize,
    n: usize,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<Vec<usize>>, PartitionError> {
    // Client i owns the labels of group i % G.
    let owns: Vec<Vec<bool>> = (0..n)
        .map(|i| {
            let mut own = vec![false; classes];
            for &l in &groups[i % groups.len()] {
                own[l as usize] = true;
            }
            own
        })
        .collect();
    split_over_owners(&owns, train_labels, classes, rng)
}

/// `dominant:` sample counts of client `i` for `m` samples per client (module docs): `d` of its
/// dominant class, `r = m − d` spread over the other `classes − 1` classes.
fn dominant_counts(alpha: f64, i: usize, m: usize, classes: usize) -> Vec<usize> {
    let groups = DOMINANT_CLASSES.len();
    let c = DOMINANT_CLASSES[i % groups] as usize;
    let d = dominant_count(alpha, m);
    let r = m - d;
    let others: Vec<usize> = (0..classes).filter(|&l| l != c).collect();
    let k = (i / groups) % others.len();
    let mut counts = vec![0usize; classes];
    counts[c] = d;
    for j in 0..others.len() {
        counts[others[(j + k) % others.len()]] =
            r / others.len() + usize::from(j < r % others.len());
    }
    counts
}

/// `d = round(α·m)` (half away from zero), at most `m`.
fn dominant_count(alpha: f64, m: usize) -> usize {
    ((alpha * m as f64).round() as usize).min(m)
}

/// The `dominant:` procedure (module docs).
fn dominant(
    alpha: f64,
    train_labels: &[u8],
    classes: usize,
    n: usize,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<Vec<usize>>, PartitionError> {
    let mut by_label = indices_by_label(train_labels, classes);
    let available: Vec<usize> = by_label.iter().map(Vec::len).collect();
    // Every count grows with m (d and r never decrease), so whether m fits is monotone in m.
    let fits = |m: usize| -> bool {
        let mut demand = vec![0usize; classes];
        for i in 0..n {
            for (total, c) in demand.iter_mut().zip(dominant_counts(alpha, i, m, classes)) {
                *total += c;
            }
        }
        demand.iter().zip(&available).all(|(d, a)| d <= a)
    };
    // The largest m ≤ N / n that fits (m = 0 always does).
    let (mut lo, mut hi) = (0, train_labels.len() / n);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let m = lo;
    if dominant_count(alpha, m) == 0 {
        return Err(PartitionError::DominantTooSmall { alpha, clients: n });
    }
    for idx in by_label.iter_mut() {
        idx.shuffle(rng);
    }
    let mut next = vec![0usize; classes];
    let mut shards = Vec::with_capacity(n);
    for i in 0..n {
        let counts = dominant_counts(alpha, i, m, classes);
        let mut shard = Vec::with_capacity(m);
        for (l, &count) in counts.iter().enumerate() {
            shard.extend_from_slice(&by_label[l][next[l]..next[l] + count]);
            next[l] += count;
        }
        shards.push(shard);
    }
    for shard in &mut shards {
        shard.shuffle(rng);
    }
    Ok(shards)
}

/// Splits `n` users over tasks in proportion to `shares` (largest remainder, ties to the earlier
/// task), at least one user per task when `n ≥ shares.len()`.
fn users_per_task(n: usize, shares: &[usize]) -> Vec<usize> {
    let total: usize = shares.iter().sum();
    let mut users: Vec<usize> = shares.iter().map(|&s| n * s / total).collect();
    let mut order: Vec<usize> = (0..shares.len()).collect();
    // Descending remainder; `sort_by_key` is stable, so ties keep the task order.
    order.sort_by_key(|&t| std::cmp::Reverse(n * shares[t] % total));
    let assigned: usize = users.iter().sum();
    for &t in order.iter().cycle().take(n - assigned) {
        users[t] += 1;
    }
    // Never leave a task without a user (only matters for tiny `n`): take one from the largest.
    for t in 0..users.len() {
        if users[t] == 0 {
            let big = (0..users.len()).max_by_key(|&u| users[u]).unwrap_or(0);
            if users[big] > 1 {
                users[big] -= 1;
                users[t] += 1;
            }
        }
    }
    users
}

/// The `tasks:` procedure (module docs): `task_of[c]` is client `c`'s task, clients of a task
/// contiguous and in task order.
fn tasks(
    task_sets: &[&[u8]],
    task_of: &[usize],
    train_labels: &[u8],
    classes: usize,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<Vec<usize>>, PartitionError> {
    let mut task_of_label = vec![None; classes];
    for (t, set) in task_sets.iter().enumerate() {
        for &l in *set {
            task_of_label[l as usize] = Some(t);
        }
    }
    let n = task_of.len();
    let mut shards: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut leftovers: Vec<Vec<usize>> = Vec::with_capacity(task_sets.len());
    for t in 0..task_sets.len() {
        let mut pool: Vec<usize> = (0..train_labels.len())
            .filter(|&i| task_of_label[train_labels[i] as usize] == Some(t))
            .collect();
        pool.shuffle(rng);
        let members: Vec<usize> = (0..n).filter(|&c| task_of[c] == t).collect();
        let majority = ((pool.len() as f64 * TASKS_MAJORITY_USE) as usize).min(pool.len());
        if majority < members.len() {
            return Err(PartitionError::TooFewTaskSamples {
                task: t,
                needed: members.len(),
                available: majority,
            });
        }
        for (&c, part) in members
            .iter()
            .zip(array_split(&pool[..majority], members.len()))
        {
            shards[c] = part;
        }
        leftovers.push(pool[majority..].to_vec());
    }
    let mut taken = vec![false; train_labels.len()];
    for c in 0..n {
        let t = task_of[c];
        let m = (shards[c].len() as f64 * TASKS_MINORITY / (1.0 - TASKS_MINORITY)).round() as usize;
        let mut candidates: Vec<usize> = leftovers
            .iter()
            .enumerate()
            .filter(|&(s, _)| s != t)
            .flat_map(|(_, l)| l.iter().copied())
            .filter(|&i| !taken[i])
            .collect();
        if candidates.len() < m {
            return Err(PartitionError::TooFewTaskSamples {
                task: t,
                needed: m,
                available: candidates.len(),
            });
        }
        let (chosen, _) = candidates.partial_shuffle(rng, m);
        for &i in chosen.iter() {
            taken[i] = true;
        }
        shards[c].extend_from_slice(chosen);
    }
    for shard in &mut shards {
        shard.shuffle(rng);
    }
    Ok(shards)
}

/// The label a client with label shift `shift` sees for `label`: `(label + shift) mod 10`
/// ([`ClientShard::label_shift`], `shift:`). A shift that is a multiple of 10, and a label outside
/// `0..10`, leave the label as it is.
pub fn shift_label(label: u8, shift: u8) -> u8 {
    let classes = DEFAULT_CLASSES as u8;
    if shift.is_multiple_of(classes) || label >= classes {
        label
    } else {
        (label + shift % classes) % classes
    }
}

/// The local test set of a client (PACFL's "local view"): the indices of every test sample whose
/// label, shifted by the client's [`ClientShard::label_shift`], is among the client's training
/// labels ([`ClientShard::labels`]), in increasing order. The client sees these samples with
/// shifted labels ([`shift_label`]).
pub fn local_test_indices(shard: &ClientShard, test_labels: &[u8]) -> Vec<usize> {
    if let Some(own) = &shard.test {
        return own.clone();
    }
    let mut wanted = [false; 256];
    for &l in &shard.labels {
        wanted[l as usize] = true;
    }
    test_labels
        .iter()
        .enumerate()
        .filter(|&(_, &l)| wanted[shift_label(l, shard.label_shift) as usize])
        .map(|(i, _)| i)
        .collect()
}

/// Turns an image of `shape` `quarter_turns` quarter turns **counter-clockwise** (`quarter_turns`
/// is taken modulo 4), each channel alike. One turn moves the top-right pixel to the top-left
/// corner: pixel `(r, c)` of an `s × s` plane goes to `(s − 1 − c, r)`.
///
/// Every data set of the catalog has square images. A plane that is not square is turned only by
/// half turns (odd turns leave it as it is: a quarter turn would change its shape), and a slice
/// that is not `shape.pixels()` long is returned unchanged.
pub fn rotate_image(img: &[u8], shape: ImageShape, quarter_turns: u8) -> Vec<u8> {
    let (h, w) = (shape.height, shape.width);
    let turns = quarter_turns % 4;
    if img.len() != shape.pixels() || turns == 0 || (h != w && turns != 2) {
        return img.to_vec();
    }
    let mut out = vec![0u8; img.len()];
    for (plane, dst) in img.chunks_exact(h * w).zip(out.chunks_exact_mut(h * w)) {
        for r in 0..h {
            for c in 0..w {
                let (nr, nc) = match turns {
                    1 => (w - 1 - c, r),
                    2 => (h - 1 - r, w - 1 - c),
                    _ => (c, h - 1 - r),
                };
                dst[nr * w + nc] = plane[r * w + c];
            }
        }
    }
    out
}

/// A client's training set and local test set ([`local_test_indices`]), with the shard's
/// rotation applied to every image and its label shift to every label.
///
/// # Errors
///
/// [`PartitionError::IndexOutOfRange`] if the shard was made for a different (larger) training
/// set.
pub fn client_datasets(
    data: &Splits,
    shard: &ClientShard,
) -> Result<(Dataset, Dataset), PartitionError> {
    let len = data.train.len();
    if let Some(&index) = shard.train.iter().find(|&&i| i >= len) {
        return Err(PartitionError::IndexOutOfRange { index, len });
    }
    let mut train = data.train.select(&shard.train);
    let mut test = data
        .test
        .select(&local_test_indices(shard, &data.test.labels));
    if !shard.rotation.is_multiple_of(4) {
        for set in [&mut train, &mut test] {
            let rotated: Vec<u8> = set
                .images
                .chunks_exact(set.shape.pixels())
                .flat_map(|img| rotate_image(img, set.shape, shard.rotation))
                .collect();
            set.images = rotated;
        }
    }
    if !shard.label_shift.is_multiple_of(DEFAULT_CLASSES as u8) {
        for set in [&mut train, &mut test] {
            for l in &mut set.labels {
                *l = shift_label(*l, shard.label_shift);
            }
        }
    }
    Ok((train, test))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `groups:` spec that leaves labels out names them (so that a run can say so); the
    /// other specs use every label.
    #[test]
    fn unused_labels_of_a_groups_spec() {
        let spec = |t: &str| t.parse::<PartitionSpec>().unwrap();
        assert_eq!(spec("groups:012-34-56-78").unused_labels(10), [9]);
        assert_eq!(
            spec("groups:0-5").unused_labels(10),
            [1, 2, 3, 4, 6, 7, 8, 9]
        );
        assert!(spec("groups:012-34-56-789").unused_labels(10).is_empty());
        assert_eq!(
            spec("rotate:2*groups:01-23").unused_labels(10),
            [4, 5, 6, 7, 8, 9]
        );
        for full in [
            "iid",
            "label:2",
            "dir:0.5",
            "rotate:4",
            "tasks:fmnist3",
            "pairs",
        ] {
            assert!(spec(full).unused_labels(10).is_empty(), "{full}");
        }
    }

    #[test]
    fn array_split_matches_numpy() {
        let v: Vec<usize> = (0..10).collect();
        let parts = array_split(&v, 3);
        assert_eq!(parts, vec![vec![0, 1, 2, 3], vec![4, 5, 6], vec![7, 8, 9]]);
        let parts = array_split(&v[..2], 4);
        assert_eq!(parts.iter().map(Vec::len).collect::<Vec<_>>(), [1, 1, 0, 0]);
    }
}
