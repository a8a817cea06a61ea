//! Checkpoints after every round and `serve --resume`: the pool's part of `checkpoint.json`,
//! and the rejoin of a resumed run's clients.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use anyhow::Context;
use edgecfl_shared::atomic_file;
use edgecfl_shared::federation::{self, PoolError};
use edgecfl_shared::mqtt::{Inbound, Link};
use edgecfl_shared::protocol::{Envelope, Hello, Id, ToClient, ToCoordinator, TopicKind, Topics};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::config::RunConfig;
use crate::rounds::{Tally, until, wait};

use super::NetFlags;
use super::join::stray;
use super::pool::{Dropout, Member, MqttPool, WireStats};

/// The file a checkpoint is written to, in `--out`.
pub const CHECKPOINT_FILE: &str = "checkpoint.json";

/// A client in a checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct SavedMember {
    pub(super) id: Id,
    pub(super) hello: Hello,
    pub(super) alive: bool,
}

/// The pool's part of a checkpoint: who the clients are, and the counts `summary.json` reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct SavedPool {
    pub(super) run_id: Id,
    /// Round-0 clients (the first members; the rest joined later).
    pub(super) round0: usize,
    pub(super) members: Vec<SavedMember>,
    pub(super) tally: Tally,
    pub(super) per_client: BTreeMap<String, Tally>,
    pub(super) wire: WireStats,
    pub(super) timeouts: u64,
    pub(super) dropouts: Vec<Dropout>,
}

/// `checkpoint.json`: the pool's state and the round driver's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct SavedRun {
    pub(super) serve: SavedPool,
    pub(super) federation: federation::Checkpoint,
    /// The run's settings ([`RunConfig`] without `out`: the method's, and the partition, the
    /// clients, the data…), so that `serve --resume DIR` alone goes on with them; absent in
    /// checkpoints of older versions, whose resume needs the flags the run was started with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) run: Option<serde_json::Value>,
}

/// Where a pool checkpoints, and what a resumed run needs besides the round driver's state.
#[derive(Debug, Clone)]
pub(super) struct CheckpointTo {
    /// The results directory (`--out`).
    pub(super) dir: std::path::PathBuf,
    /// Round-0 clients.
    pub(super) round0: usize,
    /// [`SavedRun::run`].
    pub(super) run: serde_json::Value,
}

impl CheckpointTo {
    /// Checkpoints of the run `cfg` with `round0` round-0 clients, into its `--out`.
    pub(super) fn new(cfg: &RunConfig, round0: usize) -> anyhow::Result<Self> {
        let mut run = serde_json::to_value(cfg).context("the run's settings")?;
        if let Some(map) = run.as_object_mut() {
            map.remove("out");
        }
        Ok(CheckpointTo {
            dir: cfg.out.clone(),
            round0,
            run,
        })
    }
}

impl SavedRun {
    /// The configuration the checkpointed run was started with, its results in `dir`; `None` for
    /// a checkpoint of an older version, which holds no run settings.
    ///
    /// # Errors
    ///
    /// Run settings that do not read.
    pub(super) fn config(&self, dir: &std::path::Path) -> anyhow::Result<Option<RunConfig>> {
        let Some(serde_json::Value::Object(run)) = &self.run else {
            return Ok(None);
        };
        let mut run = run.clone();
        run.insert("out".into(), serde_json::to_value(dir)?);
        serde_json::from_value(serde_json::Value::Object(run))
            .map(Some)
            .with_context(|| {
                format!(
                    "{}: the run's settings do not read",
                    dir.join(CHECKPOINT_FILE).display()
                )
            })
    }
}

/// Reads `dir/checkpoint.json`.
pub(super) fn read_checkpoint(dir: &std::path::Path) -> anyhow::Result<SavedRun> {
    let path = dir.join(CHECKPOINT_FILE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("--resume: cannot read {}", path.display()))?;
    let saved: SavedRun = federation::from_exact_json(&text)
        .with_context(|| format!("--resume: {} is not a checkpoint", path.display()))?;
    saved
        .federation
        .check()
        .with_context(|| format!("--resume: {}", path.display()))?;
    anyhow::ensure!(
        saved.serve.members.len() >= saved.federation.clients.len()
            && saved.serve.round0 <= saved.serve.members.len(),
        "--resume: {}: the clients of the pool and of the run do not match",
        path.display()
    );
    Ok(saved)
}

impl MqttPool {
    /// The pool of a resumed run as the checkpoint left it: its members, in their order, with
    /// its counts; nobody is contacted (a resumed GPS's clients are busy with their LPSs).
    pub(super) fn restore(link: Link, topics: Topics, net: &NetFlags, saved: SavedPool) -> Self {
        let run = saved.run_id.clone();
        let members: Vec<Member> = saved
            .members
            .into_iter()
            .map(|m| Member {
                id: m.id,
                hello: m.hello,
                alive: m.alive,
            })
            .collect();
        let mut pool = Self::of_members(link, topics, run.clone(), net, members, saved.tally);
        pool.per_client = saved.per_client;
        pool.wire = saved.wire;
        pool.timeouts = saved.timeouts;
        pool.dropouts = saved.dropouts;
        pool
    }

    /// The pool of a resumed run: [`MqttPool::restore`], then every member that was live is
    /// pinged and waited for until it answers or `join_timeout` passed; one that does not answer
    /// is taken as gone (it may come back with a `Hello`).
    ///
    /// # Errors
    ///
    /// Fewer clients answered than `--min-clients` (default 1, at most those that were live):
    /// nothing is run, so the checkpoint stays as it was, and no client is told to finish.
    pub(super) fn rejoin(
        link: Link,
        topics: Topics,
        net: &NetFlags,
        saved: SavedPool,
    ) -> anyhow::Result<Self> {
        let mut pool = Self::restore(link, topics, net, saved);
        let run = pool.run.clone();
        pool.accept_newcomers = true;
        let ping = Envelope::new(run.clone(), 0, ToClient::Ping).to_bytes();
        let mut waiting: std::collections::BTreeSet<usize> = (0..pool.members.len())
            .filter(|&c| pool.members[c].alive)
            .collect();
        for &c in &waiting {
            pool.wire.probe_down += ping.len() as u64;
            if let Err(e) =
                pool.link
                    .publish(&pool.topics.down(&pool.members[c].id), ping.clone(), false)
            {
                warn!("resuming: cannot ping {}: {e}", pool.members[c].id);
            }
        }
        info!(
            "resuming run {}: waiting for {} of its {} clients (timeout {:.0}s)",
            run.as_str(),
            waiting.len(),
            pool.members.len(),
            net.join_timeout
        );
        let deadline = Instant::now() + Duration::from_secs_f64(net.join_timeout);
        if !waiting.is_empty() {
            wait(&mut pool, deadline, |pool, ev| {
                let Inbound::Message { topic, payload, .. } = ev else {
                    return ControlFlow::Continue(());
                };
                let Some((id, kind)) = pool.topics.parse(&topic) else {
                    return ControlFlow::Continue(());
                };
                let Some(c) = pool.index.get(id).copied() else {
                    // Not a client of the run: only garbage on its status topic is news.
                    if kind == TopicKind::Status
                        && let Err(e) = Envelope::<ToCoordinator>::from_bytes(&payload)
                    {
                        stray(&mut pool.tally, "resuming", id, e.into());
                    }
                    return ControlFlow::Continue(());
                };
                let msg = Envelope::<ToCoordinator>::from_bytes(&payload);
                match (kind, msg) {
                    // A client back on the (restarted) broker: ping it again.
                    (
                        TopicKind::Status,
                        Ok(Envelope {
                            body: ToCoordinator::Hello(_),
                            ..
                        }),
                    ) if waiting.contains(&c) => {
                        pool.wire.probe_down += ping.len() as u64;
                        let down = pool.topics.down(&pool.members[c].id);
                        if let Err(e) = pool.link.publish(&down, ping.clone(), false) {
                            warn!("resuming: cannot ping {id}: {e}");
                        }
                    }
                    (
                        TopicKind::Up,
                        Ok(Envelope {
                            body: ToCoordinator::Pong,
                            run: r,
                            ..
                        }),
                    ) if r == run && waiting.remove(&c) => {
                        info!("rejoined: {id} ({} still awaited)", waiting.len());
                    }
                    (TopicKind::Status, Err(e)) => stray(&mut pool.tally, "resuming", id, e.into()),
                    // Answers to the interrupted run's last jobs, and the like: not this run's news.
                    _ => {}
                }
                until(waiting.is_empty())
            });
        }
        let live = pool.members.iter().filter(|m| m.alive).count();
        let answered = live - waiting.len();
        let need = net.min_clients.unwrap_or(1).min(live).max(1);
        anyhow::ensure!(
            answered >= need,
            "resuming run {}: {answered} of its {live} live clients answered within {:.0}s \
             ({need} needed, --min-clients); nothing was run and the checkpoint is unchanged: \
             start the clients and resume again",
            run.as_str(),
            net.join_timeout
        );
        for c in waiting {
            warn!(
                "resuming: {} did not answer; taken as gone",
                pool.members[c].id
            );
            pool.members[c].alive = false;
        }
        Ok(pool)
    }

    /// Writes `checkpoint.json` (the driver's state and this pool's) atomically into `--out`;
    /// nothing without one.
    pub(super) fn save_checkpoint(
        &self,
        checkpoint: &federation::Checkpoint,
    ) -> Result<(), PoolError> {
        let Some(CheckpointTo { dir, round0, run }) = &self.checkpoint else {
            return Ok(());
        };
        let saved = SavedRun {
            serve: SavedPool {
                run_id: self.run.clone(),
                round0: *round0,
                members: self
                    .members
                    .iter()
                    .map(|m| SavedMember {
                        id: m.id.clone(),
                        hello: m.hello.clone(),
                        alive: m.alive,
                    })
                    .collect(),
                tally: self.tally.clone(),
                per_client: self.per_client.clone(),
                wire: self.wire.clone(),
                timeouts: self.timeouts,
                dropouts: self.dropouts.clone(),
            },
            federation: checkpoint.clone(),
            run: Some(run.clone()),
        };
        let fail = |e: String| PoolError::Job {
            job: "checkpoint",
            reason: e,
        };
        let bytes = federation::to_exact_json(&saved).map_err(|e| fail(e.to_string()))?;
        std::fs::create_dir_all(dir).map_err(|e| fail(format!("{}: {e}", dir.display())))?;
        atomic_file::write(&dir.join(CHECKPOINT_FILE), bytes.as_bytes())
            .map_err(|e| fail(format!("{}: {e}", dir.display())))
    }
}
