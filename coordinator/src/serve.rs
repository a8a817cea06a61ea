//! `coordinator serve`: the federation over MQTT. Edge clients announce themselves on the broker;
//! the coordinator runs the same round loop as `simulate` ([`federation::run`]) over an
//! [`MqttPool`], whose calls are the awaiting phases of [`crate::rounds`].

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::Args;
use edgecfl_shared::algorithms::{Algorithm, mthfl};
use edgecfl_shared::data::partition::PartitionSpec;
use edgecfl_shared::federation::{
    self, Answer, ClientInfo, ClientPool, Job, LabelStats, Observer, PoolError, RunContext,
    RunResult, Training, Update,
};
use edgecfl_shared::model::ParamLayout;
use edgecfl_shared::mqtt::{Inbound, Link, LinkOptions, Security, SecurityArgs, fleet_backlog};
use edgecfl_shared::protocol::{
    self, BrokerAddr, Encoding, Envelope, Hello, Id, Tensor, ToClient, ToCoordinator, TopicKind,
    Topics, TrainJob,
};
use edgecfl_shared::train::PIXELS;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::broker::{self, BrokerSecurity};
use crate::config::RunConfig;
use crate::gps::{Gps, GpsPlan, GpsReport};
use crate::plots;
use crate::report::{self, Progress};
use crate::rounds::{Answer as WireAnswer, Awaiting, Expect, Phase, Rejected, Rejection, Tally};
use tracing::{debug, error, info, warn};

/// Network settings of `serve` and `demo`.
#[derive(Debug, Clone, Args)]
pub struct NetFlags {
    /// External broker, mqtt://HOST:PORT or mqtts://HOST:PORT (TLS). Without it the coordinator
    /// starts its embedded broker.
    #[arg(long)]
    pub broker: Option<BrokerAddr>,
    /// Port of the embedded broker (default 1883, or 8883 with TLS).
    #[arg(long)]
    pub port: Option<u16>,
    /// Address the embedded broker listens on.
    #[arg(long, default_value = "0.0.0.0")]
    pub listen: IpAddr,
    /// Topic prefix (fleet), e.g. edgecfl/lab1.
    #[arg(long, default_value = Topics::DEFAULT_PREFIX)]
    pub prefix: String,
    /// Run id carried by every message (default: from the clock).
    #[arg(long)]
    pub run_id: Option<String>,
    /// Clients to wait for before round 0 (default: `clients` of the config).
    #[arg(long)]
    pub min_clients: Option<usize>,
    /// Seconds to wait for clients to join (a client joins once it answers the coordinator's
    /// ping, so a stale or forged retained Hello never takes a slot); after it the run starts
    /// with those that joined (≥ 2), or fails and tells them to finish.
    #[arg(long, default_value_t = 300.0)]
    pub join_timeout: f64,
    /// Seconds each phase (signatures, training, evaluation) waits for answers.
    #[arg(long, default_value_t = 600.0)]
    pub phase_timeout: f64,
    /// Encoding of client uploads: f32 | f16 (half the bytes).
    #[arg(long, default_value = "f32")]
    pub upload: Encoding,
    /// Where the LPSs of a hierarchical run train their clusters: local (in this process) |
    /// remote (`coordinator lps` processes on the same broker; this process is the GPS).
    #[arg(long, default_value = "local")]
    pub lps: LpsMode,
    /// This coordinator's TLS settings and login at an external broker (username default
    /// `coordinator`).
    #[command(flatten)]
    pub login: SecurityArgs,
    /// The embedded broker's TLS, password file and ACL.
    #[command(flatten)]
    pub embedded: BrokerSecurity,
    /// Resume the run checkpointed in DIR (its `checkpoint.json`, written after every round
    /// into `--out`), e.g. after a crash: same run id, same clients, same clusters and models;
    /// the run goes on after its last completed round. Give the same run flags (and seed) as
    /// the interrupted run. `serve` only; not with `--lps remote`.
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
}

/// Where the local parameter servers of a hierarchical run live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LpsMode {
    /// Every cluster trains in the coordinator's round loop ([`federation::run`]).
    #[default]
    Local,
    /// Every cluster trains in a `coordinator lps` process; the coordinator is the GPS
    /// ([`crate::gps`]).
    Remote,
}

impl std::str::FromStr for LpsMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "local" => Ok(LpsMode::Local),
            "remote" => Ok(LpsMode::Remote),
            _ => Err(format!("unknown LPS mode {s:?} (expected local or remote)")),
        }
    }
}

impl std::fmt::Display for LpsMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LpsMode::Local => "local",
            LpsMode::Remote => "remote",
        })
    }
}

impl Default for NetFlags {
    fn default() -> Self {
        NetFlags {
            broker: None,
            port: None,
            listen: [0, 0, 0, 0].into(),
            prefix: Topics::DEFAULT_PREFIX.into(),
            run_id: None,
            min_clients: None,
            join_timeout: 300.0,
            phase_timeout: 600.0,
            upload: Encoding::F32,
            lps: LpsMode::Local,
            login: SecurityArgs::default(),
            embedded: BrokerSecurity::default(),
            resume: None,
        }
    }
}

impl NetFlags {
    /// Where and how this process's links reach `broker`: the loopback door of an embedded
    /// broker it started with security on, or `broker` itself with `--ca`/`--cert`/`--username`/
    /// `--password-file` (default username `coordinator`).
    pub fn link_to(&self, broker: &BrokerAddr) -> anyhow::Result<(BrokerAddr, Security)> {
        if let Some(door) = broker::local_login(broker) {
            return Ok(door);
        }
        Ok((broker.clone(), self.login.resolve("coordinator")?))
    }
}

/// Byte counts of MQTT payloads (topic and MQTT headers not included).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WireStats {
    /// Payload bytes of round-0 signature uploads.
    pub signature_up: u64,
    /// Payload bytes of model uploads.
    pub update_up: u64,
    /// Updates received.
    pub updates: u64,
    /// Payload bytes of evaluation uploads.
    pub evaluation_up: u64,
    /// Payload bytes of MT-HFL relevance-row uploads (`--relevance client`).
    pub relevance_up: u64,
    /// Payload bytes the coordinator published to clients (a broadcast counts once; the broker
    /// fans it out).
    pub down: u64,
    /// Of `down`, the bytes published on the broadcast topic (MT-HFL's signature relay).
    pub broadcast: u64,
    /// Messages published to clients (a broadcast counts once; the final `Finish` not counted).
    pub messages_down: u64,
    /// Answers from clients accepted (rejected ones are in the summary's `rejected`).
    pub answers_up: u64,
    /// Payload bytes of the pings that ask announced clients whether they are live (not in
    /// `down`).
    pub probe_down: u64,
}

/// Why a client is missing from a phase (`summary.json`'s `dropouts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// Its `Gone` arrived (its last will: it died or lost the broker; or a clean exit).
    Gone,
    /// It did not answer within the phase timeout.
    Timeout,
    /// Not asked: gone since an earlier phase.
    Absent,
    /// Not a drop: it said `Hello` again after being gone (and gets jobs again).
    Back,
}

/// One entry of `summary.json`'s `dropouts`: client `id` (index `client`) dropped out of
/// `phase` of round `round` (or came back), and why.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Dropout {
    /// Client id.
    pub id: String,
    /// Client index.
    pub client: usize,
    /// Round (0: clustering).
    pub round: u32,
    /// The phase, e.g. `training (round 3)`.
    pub phase: String,
    /// Why.
    pub reason: DropReason,
}

/// A client of the run.
#[derive(Debug, Clone)]
struct Member {
    id: Id,
    hello: Hello,
    alive: bool,
}

/// The clients behind the broker, as a [`ClientPool`].
pub struct MqttPool {
    link: Link,
    topics: Topics,
    run: Id,
    members: Vec<Member>,
    index: BTreeMap<String, usize>,
    phase_timeout: Duration,
    upload: Encoding,
    /// Ignored messages by reason.
    pub tally: Tally,
    /// Of those, the ones that came on a client of the run's topics, by client id (ids outside
    /// the run are counted in `tally` only, so a flood of made-up ids cannot grow this map).
    pub per_client: BTreeMap<String, Tally>,
    /// Bytes moved.
    pub wire: WireStats,
    /// Phases that ended by their timeout.
    pub timeouts: u64,
    /// Who dropped out of which phase, and who came back, in order.
    pub dropouts: Vec<Dropout>,
    /// Whether a client that says `Hello` after the clients were fixed is queued as a newcomer
    /// (`serve`) or rejected as [`Rejection::LateJoiner`] (an LPS's fixed cluster).
    accept_newcomers: bool,
    /// Newcomers heard since the last [`ClientPool::newcomers`], in arrival order.
    queued: Vec<(Id, Hello)>,
    /// Clients that announced themselves and were pinged, not answered yet: one that answers
    /// is queued as a newcomer.
    probing: Vec<(Id, Hello)>,
    /// Where the checkpoint goes after every round (`serve`: `--out`), with what a resumed run
    /// needs of this pool.
    checkpoint: Option<(PathBuf, usize)>,
}

/// The file a checkpoint is written to, in `--out`.
pub const CHECKPOINT_FILE: &str = "checkpoint.json";

/// A client in a checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedMember {
    id: Id,
    hello: Hello,
    alive: bool,
}

/// The pool's part of a checkpoint: who the clients are, and the counts `summary.json` reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedPool {
    run_id: Id,
    /// Round-0 clients (the first members; the rest joined later).
    round0: usize,
    members: Vec<SavedMember>,
    tally: Tally,
    per_client: BTreeMap<String, Tally>,
    wire: WireStats,
    timeouts: u64,
    dropouts: Vec<Dropout>,
}

/// `checkpoint.json`: the pool's state and the round driver's.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedRun {
    serve: SavedPool,
    federation: federation::Checkpoint,
}

/// Reads `dir/checkpoint.json`.
fn read_checkpoint(dir: &std::path::Path) -> anyhow::Result<SavedRun> {
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

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, flushed to
/// disk, then renamed over `path` (a crash leaves the old file or the new one, never half).
fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("json.tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// Counts a message from outside the run (an unknown or invalid client id, garbage on a status
/// topic) in `tally` and logs it: the first of each reason at warn, the rest at debug, so a flood
/// costs one warning (the counts are in `summary.json`'s `rejected`).
fn stray(tally: &mut Tally, context: impl std::fmt::Display, id: &str, r: Rejected) {
    if tally.get(r.reason) == 0 {
        warn!(
            "{context}: ignored message from {id:?}: {:?}: {} (further ones at debug level)",
            r.reason, r.detail
        );
    } else {
        debug!(
            "{context}: ignored message from {id:?}: {:?}: {}",
            r.reason, r.detail
        );
    }
    tally.add(r.reason);
}

/// An answer where only `Hello` and `Gone` belong.
fn upload_on_status() -> Rejected {
    Rejected {
        reason: Rejection::Unexpected,
        detail: "upload on the status topic".into(),
    }
}

/// Publishes `Finish` of run `run` on the `down` topic of each of `ids`.
fn finish_fleet<'a>(link: &Link, topics: &Topics, run: &Id, ids: impl Iterator<Item = &'a Id>) {
    let bytes = Envelope::new(run.clone(), u32::MAX, ToClient::Finish).to_bytes();
    for id in ids {
        if let Err(e) = link.publish(&topics.down(id), bytes.clone(), false) {
            warn!("cannot tell {} to finish: {e}", id.as_str());
        }
    }
}

/// One message on `id`'s status topic while clients join: a `Hello` adds (or refreshes) the
/// client, a `Gone` removes it. Anything else, and any message under an id that is not a valid
/// client id, is refused with its reason; a refusal never ends the join.
fn join_status(
    joined: &mut BTreeMap<String, (Id, Hello)>,
    id: &str,
    payload: &[u8],
) -> Option<Rejected> {
    let valid = match protocol::id(id) {
        Ok(v) => v,
        Err(e) => return Some(e.into()),
    };
    match Envelope::<ToCoordinator>::from_bytes(payload) {
        Ok(Envelope {
            body: ToCoordinator::Hello(h),
            ..
        }) => {
            joined.insert(id.to_string(), (valid, h));
            None
        }
        Ok(Envelope {
            body: ToCoordinator::Gone,
            ..
        }) => {
            joined.remove(id);
            None
        }
        Ok(_) => Some(upload_on_status()),
        Err(e) => Some(e.into()),
    }
}

impl MqttPool {
    /// Waits (Joining) until `min_clients` clients are live, or `join_timeout` passed. A client
    /// that announces itself (`Hello` on its status topic, retained or fresh) is a candidate and
    /// gets a [`ToClient::Ping`]; it joins once it answers [`ToCoordinator::Pong`] for this run.
    /// A stale or forged retained `Hello` never answers, so it never takes a slot: the clients
    /// that answer fill them, in the order they answer. Candidates still silent at the end stay
    /// probed: if they answer later they are queued as newcomers.
    ///
    /// # Errors
    ///
    /// Fewer than 2 live clients by the timeout; the candidates are told to finish first.
    pub fn join(
        link: Link,
        topics: Topics,
        run: Id,
        net: &NetFlags,
        min_clients: usize,
    ) -> anyhow::Result<Self> {
        let mut candidates: BTreeMap<String, (Id, Hello)> = BTreeMap::new();
        let mut joined: BTreeMap<String, (Id, Hello)> = BTreeMap::new();
        let mut tally = Tally::default();
        let mut probe_bytes = 0;
        let deadline = Instant::now() + Duration::from_secs_f64(net.join_timeout);
        info!(
            "waiting for {min_clients} clients on {}/clients/+/status (timeout {:.0}s)",
            topics.prefix(),
            net.join_timeout
        );
        let ping = Envelope::new(run.clone(), 0, ToClient::Ping).to_bytes();
        while joined.len() < min_clients {
            let Some(ev) = link.recv_until(deadline) else {
                break;
            };
            let Inbound::Message { topic, payload, .. } = ev else {
                continue;
            };
            match topics.parse(&topic) {
                Some((id, TopicKind::Status)) => {
                    let mut announced = BTreeMap::new();
                    if let Some(r) = join_status(&mut announced, id, &payload) {
                        stray(&mut tally, "joining", id, r);
                    } else if let Some((valid, hello)) = announced.remove(id) {
                        if let Some(j) = joined.get_mut(id) {
                            j.1 = hello;
                        } else {
                            // Announced (perhaps long ago): live only if it answers.
                            if let Err(e) = link.publish(&topics.down(&valid), ping.clone(), false)
                            {
                                warn!("joining: cannot ping {id}: {e}");
                            }
                            probe_bytes += ping.len() as u64;
                            candidates.insert(id.to_string(), (valid, hello));
                        }
                    } else {
                        // Gone.
                        candidates.remove(id);
                        if joined.remove(id).is_some() {
                            info!("left: {id} ({}/{min_clients})", joined.len());
                        }
                    }
                }
                Some((id, TopicKind::Up)) if candidates.contains_key(id) => {
                    match Envelope::<ToCoordinator>::from_bytes(&payload) {
                        Ok(Envelope {
                            body: ToCoordinator::Pong,
                            run: r,
                            ..
                        }) if r == run => {
                            if let Some(c) = candidates.remove(id) {
                                joined.insert(id.to_string(), c);
                                info!("joined: {id} ({}/{min_clients})", joined.len());
                            }
                        }
                        Ok(_) => tally.add(Rejection::NotAsked),
                        Err(e) => tally.add(Rejected::from(e).reason),
                    }
                }
                // A second answer (it was pinged twice: its retained and its fresh Hello).
                Some((id, TopicKind::Up))
                    if joined.contains_key(id)
                        && Envelope::<ToCoordinator>::from_bytes(&payload)
                            .is_ok_and(|e| e.body == ToCoordinator::Pong) => {}
                _ => {
                    debug!("joining: ignored a message on {topic:?}");
                    tally.add(Rejection::NotAsked);
                }
            }
        }
        if !candidates.is_empty() {
            warn!(
                "joining: no answer to the ping from {} (a stale or forged Hello, or not ready yet)",
                candidates.keys().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        if joined.len() < 2 {
            // A failed run still tells the clients it heard of to finish, so none of them
            // waits (and reconnects) forever for jobs that will never come.
            let ids = joined.values().chain(candidates.values()).map(|(id, _)| id);
            finish_fleet(&link, &topics, &run, ids);
            link.disconnect();
            anyhow::bail!(
                "only {} client(s) joined within {:.0}s; clustering needs at least 2",
                joined.len(),
                net.join_timeout
            );
        }
        if joined.len() < min_clients {
            warn!(
                "join timeout: starting with {} of {min_clients} clients",
                joined.len()
            );
        }
        let mut members: Vec<Member> = joined
            .into_values()
            .map(|(id, hello)| Member {
                id,
                hello,
                alive: true,
            })
            .collect();
        // Testbed clients holding shards of one partition take their shard index as their
        // index, so a run reproduces `simulate` with the same seed.
        if members.iter().all(|m| m.hello.shard.is_some()) {
            members.sort_by_key(|m| m.hello.shard.as_ref().map(|s| s.index));
        }
        let mut pool = Self::of_members(link, topics, run, net, members, tally);
        pool.accept_newcomers = true;
        pool.wire.probe_down = probe_bytes;
        pool.probing = candidates.into_values().collect();
        Ok(pool)
    }

    /// The pool of a resumed run: the checkpoint's members, in their order, with its counts.
    /// Every member that was live is pinged and waited for until it answers or `join_timeout`
    /// passed; one that does not answer is taken as gone (it may come back with a `Hello`).
    fn rejoin(link: Link, topics: Topics, net: &NetFlags, saved: SavedPool) -> Self {
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
        while !waiting.is_empty() {
            let Some(ev) = pool.link.recv_until(deadline) else {
                break;
            };
            let Inbound::Message { topic, payload, .. } = ev else {
                continue;
            };
            let Some((id, kind)) = pool.topics.parse(&topic) else {
                continue;
            };
            let Some(c) = pool.index.get(id).copied() else {
                // Not a client of the run: only garbage on its status topic is news.
                if kind == TopicKind::Status
                    && let Err(e) = Envelope::<ToCoordinator>::from_bytes(&payload)
                {
                    stray(&mut pool.tally, "resuming", id, e.into());
                }
                continue;
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
        }
        for c in waiting {
            warn!(
                "resuming: {} did not answer; taken as gone",
                pool.members[c].id
            );
            pool.members[c].alive = false;
        }
        pool
    }

    fn of_members(
        link: Link,
        topics: Topics,
        run: Id,
        net: &NetFlags,
        members: Vec<Member>,
        tally: Tally,
    ) -> Self {
        let index = members
            .iter()
            .enumerate()
            .map(|(i, m)| (m.id.to_string(), i))
            .collect();
        MqttPool {
            link,
            topics,
            run,
            members,
            index,
            phase_timeout: Duration::from_secs_f64(net.phase_timeout),
            upload: net.upload,
            tally,
            per_client: BTreeMap::new(),
            wire: WireStats::default(),
            timeouts: 0,
            dropouts: Vec::new(),
            accept_newcomers: false,
            queued: Vec::new(),
            probing: Vec::new(),
            checkpoint: None,
        }
    }

    /// A pool of exactly the clients `ids`, in that order (an LPS's cluster, as the GPS assigned
    /// it): waits until each has announced itself (its retained `Hello`) or `net.join_timeout`
    /// passed. Messages of other clients are ignored, so `link` may see more of the fleet than
    /// these.
    ///
    /// # Errors
    ///
    /// When a member has not announced itself (or said `Gone`) by the timeout.
    pub fn join_members(
        link: Link,
        topics: Topics,
        run: Id,
        net: &NetFlags,
        ids: &[Id],
    ) -> anyhow::Result<Self> {
        let mut hellos: BTreeMap<&str, Hello> = BTreeMap::new();
        let mut tally = Tally::default();
        let deadline = Instant::now() + Duration::from_secs_f64(net.join_timeout);
        while hellos.len() < ids.len() {
            let Some(ev) = link.recv_until(deadline) else {
                break;
            };
            let Inbound::Message { topic, payload, .. } = ev else {
                continue;
            };
            let Some((id, TopicKind::Status)) = topics.parse(&topic) else {
                continue;
            };
            let Some(member) = ids.iter().find(|m| m.as_str() == id) else {
                // Another cluster's client, or a stranger: counted, not news.
                debug!("joining: status of {id:?}, not a member");
                tally.add(Rejection::UnknownClient);
                continue;
            };
            match Envelope::<ToCoordinator>::from_bytes(&payload) {
                Ok(Envelope {
                    body: ToCoordinator::Hello(h),
                    ..
                }) => {
                    hellos.insert(member.as_str(), h);
                }
                Ok(Envelope {
                    body: ToCoordinator::Gone,
                    ..
                }) => {
                    hellos.remove(member.as_str());
                }
                Ok(_) => stray(&mut tally, "joining", id, upload_on_status()),
                Err(e) => stray(&mut tally, "joining", id, e.into()),
            }
        }
        let missing: Vec<&str> = ids
            .iter()
            .map(Id::as_str)
            .filter(|id| !hellos.contains_key(id))
            .collect();
        anyhow::ensure!(
            missing.is_empty(),
            "{} of {} member clients not connected after {:.0}s: {}",
            missing.len(),
            ids.len(),
            net.join_timeout,
            missing.join(", ")
        );
        let members = ids
            .iter()
            .map(|id| Member {
                id: id.clone(),
                hello: hellos[id.as_str()].clone(),
                alive: true,
            })
            .collect();
        Ok(Self::of_members(link, topics, run, net, members, tally))
    }

    /// The clients' ids, by index.
    pub fn client_ids(&self) -> Vec<Id> {
        self.members.iter().map(|m| m.id.clone()).collect()
    }

    /// Disconnects without telling the clients anything (they go on serving whoever sends them
    /// jobs: the LPSs of a hierarchy with remote LPSs).
    pub fn close(self) {
        self.link.disconnect();
    }

    /// Ground-truth groups, when every client holds a shard of a partition that has them.
    pub fn truth(&self) -> Option<Vec<usize>> {
        self.members
            .iter()
            .map(|m| m.hello.shard.as_ref()?.group.map(|g| g as usize))
            .collect()
    }

    /// The partition every client's shard comes from, when they agree.
    pub fn partition(&self) -> Option<(PartitionSpec, u64)> {
        let first = self.members.first()?.hello.shard.as_ref()?;
        let same = self.members.iter().all(|m| {
            m.hello.shard.as_ref().is_some_and(|s| {
                s.partition == first.partition && s.seed == first.seed && s.of == first.of
            })
        });
        if !same {
            return None;
        }
        Some((first.partition.parse().ok()?, first.seed))
    }

    fn send(&mut self, client: usize, round: u32, msg: ToClient) -> Result<(), PoolError> {
        let bytes = Envelope::new(self.run.clone(), round, msg).to_bytes();
        self.wire.down += bytes.len() as u64;
        self.wire.messages_down += 1;
        self.link
            .publish(&self.topics.down(&self.members[client].id), bytes, false)
            .map_err(|e| PoolError::Transport(e.to_string()))
    }

    /// Publishes an encoded envelope on the broadcast topic (once for the whole fleet).
    fn broadcast(&mut self, bytes: &[u8]) -> Result<(), PoolError> {
        self.wire.down += bytes.len() as u64;
        self.wire.broadcast += bytes.len() as u64;
        self.wire.messages_down += 1;
        self.link
            .publish(&self.topics.broadcast(), bytes.to_vec(), false)
            .map_err(|e| PoolError::Transport(e.to_string()))
    }

    /// One awaiting phase: sends each job, then collects answers until everyone asked has
    /// answered, failed or dropped out, or the phase timeout fires. `broadcast`, a message every
    /// job depends on, is published first on the broadcast topic (not retained) and again when an
    /// asked client reconnects.
    fn exchange(
        &mut self,
        phase: Phase,
        expect: Expect,
        jobs: Vec<(usize, ToClient)>,
        broadcast: Option<&[u8]>,
    ) -> Result<Vec<(usize, WireAnswer)>, PoolError> {
        let mut aw = Awaiting::new(phase, self.run.clone(), expect, jobs.iter().map(|j| j.0));
        let round = phase.round();
        if let Some(bytes) = broadcast {
            self.broadcast(bytes)?;
        }
        for (c, msg) in &jobs {
            if self.members[*c].alive {
                self.send(*c, round, msg.clone())?;
            } else {
                aw.give_up(*c);
                self.dropped(*c, phase, DropReason::Absent);
            }
        }
        let mut answers = Vec::with_capacity(jobs.len());
        let deadline = Instant::now() + self.phase_timeout;
        while !aw.done() {
            let Some(ev) = self.link.recv_until(deadline) else {
                self.timeouts += 1;
                for &c in aw.pending() {
                    self.dropped(c, phase, DropReason::Timeout);
                }
                let ids: Vec<&str> = aw
                    .pending()
                    .iter()
                    .map(|&c| self.members[c].id.as_str())
                    .collect();
                warn!(
                    "{phase}: timeout after {:.0}s, going on without {}",
                    self.phase_timeout.as_secs_f64(),
                    ids.join(", ")
                );
                break;
            };
            match ev {
                Inbound::Message { topic, payload, .. } => {
                    if let Some(answer) =
                        self.on_message(&mut aw, &jobs, broadcast, &topic, &payload)?
                    {
                        answers.push(answer);
                    }
                }
                Inbound::Disconnected(e) => warn!(
                    "{phase}: lost the broker ({e}); reconnecting{}",
                    self.link
                        .next_attempt()
                        .and_then(|at| at.duration_since(SystemTime::now()).ok())
                        .map_or(String::new(), |d| format!(" in {:.0} s", d.as_secs_f64()))
                ),
                Inbound::Connected => {
                    // Back on the broker (it restarted, or the connection dropped): what was
                    // published meanwhile may be lost, so every client still awaited gets its
                    // job again (a client that answers twice has its second answer counted as a
                    // duplicate). Clients that reconnect later say Hello and get theirs then.
                    let pending: Vec<usize> = aw.pending().iter().copied().collect();
                    info!(
                        "{phase}: reconnected to the broker; sending {} pending job(s) again",
                        pending.len()
                    );
                    if let Some(bytes) = broadcast
                        && !pending.is_empty()
                    {
                        self.broadcast(bytes)?;
                    }
                    for c in pending {
                        if let Some((_, job)) = jobs.iter().find(|j| j.0 == c) {
                            self.send(c, round, job.clone())?;
                        }
                    }
                }
            }
        }
        Ok(answers)
    }

    /// Records that client `c` dropped out of `phase` (or was not asked, being gone).
    fn dropped(&mut self, c: usize, phase: Phase, reason: DropReason) {
        self.dropouts.push(Dropout {
            id: self.members[c].id.to_string(),
            client: c,
            round: phase.round(),
            phase: phase.to_string(),
            reason,
        });
    }

    fn on_message(
        &mut self,
        aw: &mut Awaiting,
        jobs: &[(usize, ToClient)],
        broadcast: Option<&[u8]>,
        topic: &str,
        payload: &[u8],
    ) -> Result<Option<(usize, WireAnswer)>, PoolError> {
        let Some((id, kind)) = self.topics.parse(topic) else {
            return Ok(None);
        };
        let msg = Envelope::<ToCoordinator>::from_bytes(payload);
        let client = self.index.get(id).copied();
        let phase = aw.phase;
        let reject = |tally: &mut Tally, per_client: &mut BTreeMap<String, Tally>, r: Rejected| {
            if client.is_none() {
                return stray(tally, phase, id, r);
            }
            warn!(
                "{phase}: ignored message from {id:?}: {:?}: {}",
                r.reason, r.detail
            );
            per_client.entry(id.to_string()).or_default().add(r.reason);
            tally.add(r.reason);
        };
        if kind == TopicKind::Up
            && let Ok(Envelope {
                body: ToCoordinator::Pong,
                run,
                ..
            }) = &msg
        {
            // A live newcomer; any other answer to a ping (a member's second one) is no news.
            if *run == self.run
                && let Some(at) = self.probing.iter().position(|p| p.0.as_str() == id)
            {
                let (new, hello) = self.probing.remove(at);
                info!("{phase}: newcomer {id} queued; it joins at the next round");
                self.queued.push((new, hello));
            }
            return Ok(None);
        }
        match (kind, client) {
            (TopicKind::Status, Some(c)) => match msg {
                Ok(Envelope {
                    body: ToCoordinator::Hello(_),
                    ..
                }) => {
                    if !self.members[c].alive {
                        info!("{phase}: {id} is back");
                        self.dropped(c, phase, DropReason::Back);
                    }
                    self.members[c].alive = true;
                    if aw.is_pending(c) {
                        info!("{id} reconnected; sending its job again");
                        // It missed what was broadcast while it was away.
                        if let Some(bytes) = broadcast {
                            self.broadcast(bytes)?;
                        }
                        if let Some((_, job)) = jobs.iter().find(|j| j.0 == c) {
                            self.send(c, aw.phase.round(), job.clone())?;
                        }
                    }
                }
                Ok(Envelope {
                    body: ToCoordinator::Gone,
                    ..
                }) => {
                    if self.members[c].alive {
                        self.dropped(c, phase, DropReason::Gone);
                    }
                    self.members[c].alive = false;
                    if aw.give_up(c) {
                        warn!("{}: {id} is gone; not waiting for it", aw.phase);
                    }
                }
                Ok(_) => reject(&mut self.tally, &mut self.per_client, upload_on_status()),
                Err(e) => reject(&mut self.tally, &mut self.per_client, e.into()),
            },
            (TopicKind::Status, None) => match msg {
                Ok(Envelope {
                    body: ToCoordinator::Hello(hello),
                    ..
                }) if self.accept_newcomers => match protocol::id(id) {
                    Ok(new) => {
                        if let Some(q) = self.queued.iter_mut().find(|q| q.0 == new) {
                            q.1 = hello;
                        } else {
                            // Queued once it answers the ping (a stale or forged Hello never
                            // does).
                            let ping = Envelope::new(self.run.clone(), 0, ToClient::Ping);
                            let bytes = ping.to_bytes();
                            self.wire.probe_down += bytes.len() as u64;
                            self.link
                                .publish(&self.topics.down(&new), bytes, false)
                                .map_err(|e| PoolError::Transport(e.to_string()))?;
                            self.probing.retain(|p| p.0 != new);
                            self.probing.push((new, hello));
                        }
                    }
                    Err(e) => reject(&mut self.tally, &mut self.per_client, e.into()),
                },
                Ok(Envelope {
                    body: ToCoordinator::Hello(_),
                    ..
                }) => reject(
                    &mut self.tally,
                    &mut self.per_client,
                    Rejected {
                        reason: Rejection::LateJoiner,
                        detail: "joined after round 0 was planned".into(),
                    },
                ),
                Ok(Envelope {
                    body: ToCoordinator::Gone,
                    ..
                }) => {
                    self.queued.retain(|q| q.0.as_str() != id);
                    self.probing.retain(|q| q.0.as_str() != id);
                }
                Ok(_) => reject(&mut self.tally, &mut self.per_client, upload_on_status()),
                Err(e) => reject(&mut self.tally, &mut self.per_client, e.into()),
            },
            (TopicKind::Up, None) => reject(
                &mut self.tally,
                &mut self.per_client,
                Rejected {
                    reason: Rejection::UnknownClient,
                    detail: "not a client of this run".into(),
                },
            ),
            (TopicKind::Up, Some(c)) => {
                let len = payload.len() as u64;
                match aw.accept(c, msg) {
                    Ok(a) => {
                        self.wire.answers_up += 1;
                        match &a {
                            WireAnswer::Signature(_)
                            | WireAnswer::SignatureStats { .. }
                            | WireAnswer::Eigenpairs(_)
                            | WireAnswer::Gradient(_) => {
                                self.wire.signature_up += len;
                            }
                            WireAnswer::RelevanceRow(_) => self.wire.relevance_up += len,
                            WireAnswer::Update { .. }
                            | WireAnswer::Pair { .. }
                            | WireAnswer::Picked { .. } => {
                                self.wire.update_up += len;
                                self.wire.updates += 1;
                            }
                            WireAnswer::Evaluation(_) => self.wire.evaluation_up += len,
                        }
                        return Ok(Some((c, a)));
                    }
                    Err(r) => reject(&mut self.tally, &mut self.per_client, r),
                }
            }
            (TopicKind::Down, _) => {}
        }
        Ok(None)
    }

    fn job(&self, t: &Training<'_>) -> TrainJob {
        TrainJob {
            model: t.start.model,
            params: Tensor::encode(&t.start.values, Encoding::F32),
            epochs: t.cfg.epochs as u32,
            batch_size: t.cfg.batch_size as u32,
            lr: t.cfg.lr,
            momentum: t.cfg.momentum,
            seed: t.cfg.seed,
            upload: self.upload,
        }
    }

    /// One exchange for jobs of one kind (`jobs` non-empty, all of `jobs[0]`'s kind).
    fn run_kind(
        &mut self,
        round: usize,
        jobs: &[&(usize, Job<'_>)],
    ) -> Result<Vec<(usize, Answer)>, PoolError> {
        let unsupported = |job: &Job<'_>| PoolError::Job {
            job: job.name(),
            reason: "not carried over MQTT yet".into(),
        };
        let first = &jobs[0].1;
        let phase = match first {
            _ if round == 0 => Phase::Clustering,
            Job::Evaluate { .. } => Phase::Evaluating(round as u32),
            _ => Phase::Training(round as u32),
        };
        let mut relay = None;
        let expect = match first {
            Job::Train(t) => Expect::Update(t.start.model),
            Job::Signature {
                train,
                layers,
                stats,
            } => {
                let len = ParamLayout::of(train.start.model)
                    .select(layers)
                    .map_err(|e| PoolError::Job {
                        job: first.name(),
                        reason: e.to_string(),
                    })?
                    .len();
                if *stats {
                    Expect::SignatureStats(len)
                } else {
                    Expect::Signature(len)
                }
            }
            Job::TrainPair { global, .. } => Expect::Pair(global.start.model),
            Job::Pick { train, candidates } => Expect::Picked(train.start.model, candidates.len()),
            Job::Gradient { at, .. } => Expect::Gradient(at.values.len()),
            Job::Evaluate { .. } => Expect::Evaluation,
            Job::GramSignature { k, .. } => Expect::Eigenpairs { k: *k, d: PIXELS },
            Job::Relevance { all, .. } => {
                let n = all.len();
                let wire = mthfl::relay(all).map_err(|e| PoolError::Job {
                    job: first.name(),
                    reason: e.to_string(),
                })?;
                let encoding = wire.values.encoding;
                relay = Some(
                    Envelope::new(
                        self.run.clone(),
                        Phase::Clustering.round(),
                        ToClient::Relay(wire),
                    )
                    .to_bytes_checked()
                    .map_err(|e| PoolError::Job {
                        job: first.name(),
                        reason: format!(
                            "the relay of {n} signatures (k = {}, {encoding}) cannot be sent: \
                             {e}; use --signature-encoding f16, fewer --eigenvectors, or \
                             --relevance server",
                            all.first().map_or(0, |s| s.k)
                        ),
                    })?,
                );
                Expect::RelevanceRow(n)
            }
            other => return Err(unsupported(other)),
        };
        let mut msgs = Vec::with_capacity(jobs.len());
        for &&(c, ref job) in jobs {
            let msg = match job {
                Job::Train(t) => match t.prox {
                    None => ToClient::Train(self.job(t)),
                    Some(p) if p.anchor == t.start => ToClient::TrainProx {
                        job: self.job(t),
                        mu: p.mu,
                    },
                    Some(_) => return Err(unsupported(job)),
                },
                Job::Signature {
                    train,
                    layers,
                    stats,
                } if train.prox.is_none() => {
                    let (job, layers) = (self.job(train), protocol::text(&layers.to_string()));
                    if *stats {
                        ToClient::SignatureStats { job, layers }
                    } else {
                        ToClient::Signature { job, layers }
                    }
                }
                Job::TrainPair { global, cluster } => match (global.prox, cluster.prox) {
                    (None, Some(p)) if p.anchor == global.start => ToClient::TrainPair {
                        global: self.job(global),
                        cluster: self.job(cluster),
                        mu: p.mu,
                    },
                    _ => return Err(unsupported(job)),
                },
                Job::Pick { candidates, train } if train.prox.is_none() => {
                    let mut settings = self.job(train);
                    settings.params = Tensor::encode(&[], Encoding::F32);
                    ToClient::Pick {
                        job: settings,
                        candidates: candidates
                            .iter()
                            .map(|c| Tensor::encode(&c.values, Encoding::F32))
                            .collect(),
                    }
                }
                Job::Gradient { at, batch_size } => ToClient::Gradient {
                    model: at.model,
                    params: Tensor::encode(&at.values, Encoding::F32),
                    batch_size: *batch_size as u32,
                    upload: self.upload,
                },
                Job::Evaluate { model } => ToClient::Evaluate {
                    model: model.model,
                    params: Tensor::encode(&model.values, Encoding::F32),
                },
                Job::GramSignature { k, encoding } => ToClient::GramSignature {
                    k: *k as u32,
                    upload: *encoding,
                },
                Job::Relevance { all, estimate } => ToClient::Relevance {
                    clients: all.len() as u32,
                    estimate: *estimate,
                },
                other => return Err(unsupported(other)),
            };
            if c >= self.members.len() {
                return Err(PoolError::NoClient(c));
            }
            msgs.push((c, msg));
        }
        let answers = self.exchange(phase, expect, msgs, relay.as_deref())?;
        Ok(answers
            .into_iter()
            .map(|(client, a)| {
                let answer = match a {
                    WireAnswer::Signature(values) => Answer::Signature {
                        values,
                        stats: None,
                    },
                    WireAnswer::Update {
                        params,
                        samples,
                        loss,
                    } => Answer::Update(Update {
                        client,
                        params,
                        samples,
                        loss,
                    }),
                    WireAnswer::Evaluation(r) => Answer::Evaluation(*r),
                    WireAnswer::Eigenpairs(s) => Answer::Eigenpairs(s),
                    WireAnswer::RelevanceRow(r) => Answer::Row(r),
                    WireAnswer::SignatureStats {
                        values,
                        classes,
                        entropy,
                    } => Answer::Signature {
                        values,
                        stats: Some(LabelStats { classes, entropy }),
                    },
                    WireAnswer::Pair {
                        global,
                        cluster,
                        samples,
                        losses,
                    } => Answer::Pair {
                        global: Update {
                            client,
                            params: global,
                            samples,
                            loss: losses.0,
                        },
                        cluster: Update {
                            client,
                            params: cluster,
                            samples,
                            loss: losses.1,
                        },
                    },
                    WireAnswer::Picked {
                        choice,
                        losses,
                        params,
                        samples,
                        loss,
                    } => Answer::Picked {
                        choice,
                        losses,
                        update: Update {
                            client,
                            params,
                            samples,
                            loss,
                        },
                    },
                    WireAnswer::Gradient(g) => Answer::Gradient(g),
                };
                (client, answer)
            })
            .collect())
    }

    /// Tells every client the run is over (the members, and newcomers still queued or pinged),
    /// then disconnects. Called after a run, and after a failed one too.
    pub fn finish(self) {
        let ids = self
            .members
            .iter()
            .map(|m| &m.id)
            .chain(self.queued.iter().chain(&self.probing).map(|q| &q.0));
        finish_fleet(&self.link, &self.topics, &self.run, ids);
        self.link.disconnect();
    }
}

impl ClientPool for MqttPool {
    fn clients(&self) -> Vec<ClientInfo> {
        self.members
            .iter()
            .enumerate()
            .map(|(i, m)| ClientInfo {
                index: i,
                id: m.id.to_string(),
                samples: m.hello.samples,
            })
            .collect()
    }

    /// The clients that said `Hello` after the clients were fixed, heard during the phases
    /// since the last call: each becomes a member with the next index. Its round-0 signature is
    /// then asked in a [`Phase::Clustering`] exchange (round 0's job, for it alone).
    fn newcomers(&mut self, _round: usize) -> Vec<ClientInfo> {
        let mut out = Vec::new();
        for (id, hello) in std::mem::take(&mut self.queued) {
            let index = self.members.len();
            out.push(ClientInfo {
                index,
                id: id.to_string(),
                samples: hello.samples,
            });
            self.index.insert(id.to_string(), index);
            self.members.push(Member {
                id,
                hello,
                alive: true,
            });
        }
        out
    }

    fn wants_checkpoints(&self) -> bool {
        self.checkpoint.is_some()
    }

    /// Writes `checkpoint.json` (the driver's state and this pool's) atomically into `--out`.
    fn checkpoint(&mut self, checkpoint: &federation::Checkpoint) -> Result<(), PoolError> {
        let Some((dir, round0)) = &self.checkpoint else {
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
        };
        let fail = |e: String| PoolError::Job {
            job: "checkpoint",
            reason: e,
        };
        let bytes = federation::to_exact_json(&saved).map_err(|e| fail(e.to_string()))?;
        std::fs::create_dir_all(dir).map_err(|e| fail(format!("{}: {e}", dir.display())))?;
        write_atomically(&dir.join(CHECKPOINT_FILE), bytes.as_bytes())
            .map_err(|e| fail(format!("{}: {e}", dir.display())))
    }

    /// One exchange per kind of job, in the order the kinds first appear.
    fn run(
        &mut self,
        round: usize,
        jobs: &[(usize, Job<'_>)],
    ) -> Result<Vec<(usize, Answer)>, PoolError> {
        let mut kinds: Vec<&'static str> = Vec::new();
        for (_, j) in jobs {
            if !kinds.contains(&j.name()) {
                kinds.push(j.name());
            }
        }
        let mut out = Vec::with_capacity(jobs.len());
        for kind in kinds {
            let of_kind: Vec<&(usize, Job<'_>)> =
                jobs.iter().filter(|(_, j)| j.name() == kind).collect();
            out.extend(self.run_kind(round, &of_kind)?);
        }
        Ok(out)
    }
}

/// The clients that dropped out at least once (gone or timed out), each with the round and
/// phase it first did and how: `summary.json`'s `dropped_clients`.
fn dropped_clients(dropouts: &[Dropout]) -> serde_json::Value {
    let mut first: BTreeMap<&str, &Dropout> = BTreeMap::new();
    for d in dropouts {
        if matches!(d.reason, DropReason::Gone | DropReason::Timeout) {
            first.entry(d.id.as_str()).or_insert(d);
        }
    }
    first
        .into_iter()
        .map(|(id, d)| {
            (
                id.to_string(),
                json!({"round": d.round, "phase": d.phase, "reason": d.reason}),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// A default run id: seconds since the epoch, in base 36.
fn clock_run_id() -> String {
    let mut n = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut s = Vec::new();
    while n > 0 {
        s.push(b"0123456789abcdefghijklmnopqrstuvwxyz"[(n % 36) as usize]);
        n /= 36;
    }
    s.reverse();
    format!("run-{}", String::from_utf8_lossy(&s))
}

/// The broker to use: the external one, or the embedded one started now, its memory sized for
/// `clients` clients ([`broker::Retention`]).
pub fn broker_for(net: &NetFlags, clients: usize) -> anyhow::Result<BrokerAddr> {
    Ok(match &net.broker {
        Some(b) => {
            anyhow::ensure!(
                !net.embedded.is_on(),
                "--tls-cert/--broker-passwd/--broker-acl/--broker-config configure the embedded broker; with --broker they have no effect (configure that broker instead)"
            );
            b.clone()
        }
        None => {
            let security = net.embedded.resolved()?;
            let port = net.port.unwrap_or(if security.tls() {
                BrokerAddr::MQTTS_PORT
            } else {
                BrokerAddr::MQTT_PORT
            });
            let retention = broker::Retention::fleet(&Topics::new(&net.prefix)?, clients);
            let addr = broker::start(net.listen, port, &security, &retention)?;
            info!(
                "embedded broker (rumqttd) listening on {}:{port}{}",
                net.listen,
                match (
                    security.tls(),
                    security.broker_passwd.is_some(),
                    security.broker_acl.is_some()
                ) {
                    (false, false, false) => " (plain MQTT, anonymous, no ACL)".to_string(),
                    (tls, pw, acl) => format!(
                        " ({}, {}, {})",
                        if tls { "TLS" } else { "plain MQTT" },
                        if pw { "logins checked" } else { "anonymous" },
                        if acl { "ACL enforced" } else { "no ACL" }
                    ),
                }
            );
            addr
        }
    })
}

/// What `serve` produced.
pub struct Served {
    /// The round loop's result.
    pub result: RunResult,
    /// Where the files went.
    pub out: PathBuf,
    /// Plots written.
    pub plots: Vec<PathBuf>,
    /// Ground-truth group per client, when the clients' shards have one.
    pub truth: Option<Vec<usize>>,
    /// What the GPS did, with remote LPSs (`--lps remote`).
    pub gps: Option<GpsReport>,
}

/// Runs the federation over the broker at `broker` and writes the result files into
/// `cfg.out`.
pub fn run(
    cfg: &RunConfig,
    net: &NetFlags,
    broker: &BrokerAddr,
    observer: Option<&mut dyn Observer>,
) -> anyhow::Result<Served> {
    let topics = Topics::new(&net.prefix).context("bad --prefix")?;
    let saved = match &net.resume {
        Some(dir) => {
            anyhow::ensure!(
                net.lps == LpsMode::Local,
                "--resume does not resume runs with --lps remote"
            );
            Some(read_checkpoint(dir)?)
        }
        None => None,
    };
    let run = match &saved {
        Some(s) => {
            let id = s.serve.run_id.clone();
            if let Some(asked) = &net.run_id {
                anyhow::ensure!(
                    asked.as_str() == id.as_str(),
                    "--run-id {asked} but the checkpoint is of run {}",
                    id.as_str()
                );
            }
            id
        }
        None => protocol::id(&net.run_id.clone().unwrap_or_else(clock_run_id))
            .context("bad --run-id")?,
    };
    let (link_addr, security) = net.link_to(broker)?;
    // With remote LPSs this process is the GPS. It listens to the LPSs from the start, so their
    // announcements wait for it while round 0 runs.
    let gps_link = match net.lps {
        LpsMode::Local => None,
        LpsMode::Remote => {
            anyhow::ensure!(
                cfg.federation.hierarchical(),
                "--lps remote needs a hierarchical run (--hierarchy, or --algorithm mthfl)"
            );
            let link = Link::start(LinkOptions {
                subscribe: Gps::subscriptions(&topics),
                security: security.clone(),
                max_unread_bytes: Some(fleet_backlog(cfg.clients + cfg.newcomers)),
                ..LinkOptions::new(link_addr.clone(), format!("gps-{}", run.as_str()))
            })?;
            link.wait_connected(&link_addr, Duration::from_secs(30))?;
            Some(link)
        }
    };
    let link = Link::start(LinkOptions {
        subscribe: vec![topics.all_status(), topics.all_up()],
        security,
        max_unread_bytes: Some(fleet_backlog(cfg.clients + cfg.newcomers)),
        ..LinkOptions::new(link_addr.clone(), format!("coordinator-{}", run.as_str()))
    })?;
    link.wait_connected(&link_addr, Duration::from_secs(30))?;
    info!("connected to {broker}; run {}", run.as_str());
    let min_clients = net.min_clients.unwrap_or(cfg.clients);
    let (mut pool, resume) = match saved {
        Some(saved) => {
            let round0 = saved.serve.round0;
            let mut pool = MqttPool::rejoin(link, topics.clone(), net, saved.serve);
            pool.checkpoint = Some((cfg.out.clone(), round0));
            (pool, Some((saved.federation, round0)))
        }
        None => {
            let mut pool = MqttPool::join(link, topics.clone(), run.clone(), net, min_clients)?;
            if gps_link.is_none() {
                pool.checkpoint = Some((cfg.out.clone(), pool.members.len()));
            }
            (pool, None)
        }
    };
    let round0 = resume.as_ref().map_or(pool.members.len(), |r| r.1);
    // The ground truth of the round-0 clients (newcomers' is added at the end).
    let truth = pool.truth().map(|t| t[..round0.min(t.len())].to_vec());
    let mut cfg = cfg.clone();
    cfg.clients = round0;
    let data = match pool.partition() {
        Some((spec, seed)) => {
            cfg.partition = spec;
            format!("edge clients' shards of {} (seed {seed})", cfg.partition)
        }
        None => "edge clients' own data".to_string(),
    };
    let mut progress = Progress::new(cfg.federation.rounds);
    let ctx = RunContext {
        truth: truth.clone(),
        task_labels: pool.partition().and_then(|(spec, _)| spec.task_labels()),
        backend: cfg.backend,
    };
    // Remote LPSs: this round loop does round 0 only; the LPS processes do the rest.
    let mut federation_cfg = cfg.federation.clone();
    if gps_link.is_some() {
        federation_cfg.rounds = 0;
    }
    let mut result = match federation::run_resumable(
        &federation_cfg,
        &mut pool,
        &ctx,
        observer.unwrap_or(&mut progress),
        resume.map(|r| r.0),
    ) {
        Ok(r) => r,
        Err(e) => {
            // Any failed run tells its fleet to finish.
            error!("the run failed ({e}); telling its clients to finish");
            pool.finish();
            return Err(e.into());
        }
    };
    progress.finish();
    // The strategies count their clustering upload in f32; over the wire it travelled in the
    // upload encoding (MT-HFL's eigenpairs have their own, already counted).
    if cfg.federation.algorithm != Algorithm::MtHfl {
        result.signature_bytes = result.signature_bytes - result.signature_len * 4
            + result.signature_len * net.upload.width();
    }
    // Newcomers' shards tell their ground-truth groups too.
    let truth = pool.truth().or(truth);
    if let Some(t) = &truth {
        result.score_newcomers(t);
    }
    let mut extra = json!({
        "run_id": run.as_str(),
        "client_ids": pool.client_ids().iter().map(Id::as_str).collect::<Vec<_>>(),
        "broker": broker.to_string(),
        "upload_encoding": net.upload.to_string(),
        "rejected": pool.tally,
        "rejected_total": pool.tally.total(),
        "rejected_per_client": pool.per_client,
        "phase_timeouts": pool.timeouts,
        "dropouts": pool.dropouts,
        "dropped_clients": dropped_clients(&pool.dropouts),
        "wire_bytes": pool.wire,
    });
    let gps = match gps_link {
        None => {
            pool.finish();
            None
        }
        Some(link) => {
            let plan = GpsPlan {
                topics,
                run: run.clone(),
                federation: cfg.federation.clone(),
                assignment: result.assignment.clone(),
                clients: pool.client_ids(),
                samples: result.clients.iter().map(|c| c.samples).collect(),
                upload: net.upload,
                join_timeout: Duration::from_secs_f64(net.join_timeout),
                phase_timeout: Duration::from_secs_f64(net.phase_timeout),
            };
            // The clients now serve their LPSs; the GPS hears nothing of that traffic.
            pool.close();
            let report = Gps::new(link, plan).run()?;
            result.gps_rounds = report.gps_rounds;
            if let serde_json::Value::Object(map) = &mut extra {
                map.insert("lps".into(), json!("remote"));
                map.insert("gps".into(), serde_json::to_value(&report)?);
                map.insert("final_accuracy".into(), json!(report.final_accuracy));
            }
            Some(report)
        }
    };
    report::write_all(&cfg.out, &cfg, &result, &data, Some(extra))?;
    let plots = plots::write_all(&cfg.out, &result)?;
    Ok(Served {
        result,
        out: cfg.out.clone(),
        plots,
        truth,
        gps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(samples: u64) -> Vec<u8> {
        Envelope::new(
            Id::new(),
            0,
            ToCoordinator::Hello(Hello {
                samples,
                test_samples: 1,
                backend: protocol::text("flex"),
                shard: None,
            }),
        )
        .to_bytes()
    }

    /// While clients join, a status message under an id that is not a client id (too long, a
    /// character outside A-Z a-z 0-9 - _ .) is refused as `BadId` and the join goes on; so are
    /// garbage and uploads on a status topic, each with its reason.
    #[test]
    fn join_refuses_bad_ids_and_garbage_and_goes_on() {
        let mut joined = BTreeMap::new();
        assert_eq!(join_status(&mut joined, "c0", &hello(7)), None);
        let long = "x".repeat(protocol::MAX_ID_LEN + 1);
        for bad in [long.as_str(), "c!1", "", "c 1"] {
            let r = join_status(&mut joined, bad, &hello(9)).expect(bad);
            assert_eq!(r.reason, Rejection::BadId, "{bad:?}");
        }
        let r = join_status(&mut joined, "c1", &[0xFF, 0x00, 0x13]).unwrap();
        assert_ne!(r.reason, Rejection::BadId);
        let gone = Envelope::new(Id::new(), 0, ToCoordinator::Gone).to_bytes();
        let upload = Envelope::new(
            Id::new(),
            0,
            ToCoordinator::Failed {
                reason: protocol::text("x"),
            },
        )
        .to_bytes();
        assert_eq!(
            join_status(&mut joined, "c1", &upload).unwrap().reason,
            Rejection::Unexpected
        );
        assert_eq!(join_status(&mut joined, "c2", &hello(3)), None);
        assert_eq!(joined.keys().collect::<Vec<_>>(), ["c0", "c2"]);
        assert_eq!(joined["c0"].1.samples, 7);
        assert_eq!(joined["c0"].0.as_str(), "c0");
        assert_eq!(join_status(&mut joined, "c0", &gone), None);
        assert_eq!(joined.keys().collect::<Vec<_>>(), ["c2"]);
    }

    /// A log sink for one test: the lines written while `f` runs, with every level on.
    fn logged(f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Sink::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        String::from_utf8(sink.0.lock().unwrap().clone()).unwrap()
    }

    /// Garbage from outside the run (here on an unknown client's status topic) is counted every
    /// time; the first of each reason is a warning, the rest debug lines, so a flood costs one
    /// warning.
    #[test]
    fn strays_are_counted_and_warned_once_per_reason() {
        let mut tally = Tally::default();
        let garbage = |bytes: &[u8]| -> Rejected {
            Envelope::<ToCoordinator>::from_bytes(bytes)
                .expect_err("garbage")
                .into()
        };
        let log = logged(|| {
            for _ in 0..3 {
                stray(&mut tally, "round 2", "ghost", garbage(&[0xFF, 0x00]));
            }
            stray(&mut tally, "round 2", "ghost", upload_on_status());
        });
        let reason = garbage(&[0xFF, 0x00]).reason;
        assert_eq!(tally.get(reason), 3);
        assert_eq!(tally.get(Rejection::Unexpected), 1);
        assert_eq!(tally.total(), 4);
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(lines.len(), 4, "{log}");
        let warns: Vec<&&str> = lines.iter().filter(|l| l.contains(" WARN ")).collect();
        assert_eq!(warns.len(), 2, "one per reason:\n{log}");
        assert!(
            warns
                .iter()
                .all(|l| l.contains("ignored message from \"ghost\"")),
            "{log}"
        );
        assert_eq!(
            lines.iter().filter(|l| l.contains(" DEBUG ")).count(),
            2,
            "{log}"
        );
    }
}
