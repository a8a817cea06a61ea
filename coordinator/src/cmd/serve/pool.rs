//! [`MqttPool`]: the clients behind the broker as a [`ClientPool`], with the counts that
//! `summary.json` reports.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use edgecfl_shared::data::DatasetKind;
use edgecfl_shared::data::partition::PartitionSpec;
use edgecfl_shared::federation::{self, Answer, ClientInfo, ClientPool, Job, PoolError};
use edgecfl_shared::jobs::{Uploads, WireError};
use edgecfl_shared::mqtt::{Inbound, Link};
use edgecfl_shared::protocol::{Encoding, Envelope, Hello, Id, ToClient, Topics};
use serde::{Deserialize, Serialize};

use crate::rounds::{Inbox, Phase, Tally};

use super::NetFlags;
use super::testbed::Testbed;
use crate::log_throttle::LogThrottle;
use tracing::{info, warn};

/// Publishes `Finish` of run `run` on the `down` topic of each of `ids`.
pub(super) fn finish_fleet<'a>(
    link: &Link,
    topics: &Topics,
    run: &Id,
    ids: impl Iterator<Item = &'a Id>,
) {
    let bytes = Envelope::new(run.clone(), u32::MAX, ToClient::Finish).to_bytes();
    for id in ids {
        if let Err(e) = link.publish(&topics.down(id), bytes.clone(), false) {
            warn!("cannot tell {} to finish: {e}", id.as_str());
        }
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

impl WireStats {
    /// Payload bytes the clients sent: signatures, updates, evaluations, relevance rows.
    pub fn up(&self) -> u64 {
        self.signature_up + self.update_up + self.evaluation_up + self.relevance_up
    }

    /// Payload bytes the coordinator published: jobs, broadcasts and liveness pings.
    pub fn down_all(&self) -> u64 {
        self.down + self.probe_down
    }
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
pub(super) struct Member {
    pub(super) id: Id,
    pub(super) hello: Hello,
    pub(super) alive: bool,
}

/// The clients behind the broker, as a [`ClientPool`].
pub struct MqttPool {
    pub(super) link: Link,
    pub(super) topics: Topics,
    pub(super) run: Id,
    pub(super) members: Vec<Member>,
    pub(super) index: BTreeMap<String, usize>,
    pub(super) phase_timeout: Duration,
    pub(super) upload: Encoding,
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
    /// (`serve`) or rejected as [`LateJoiner`](crate::rounds::Rejection::LateJoiner) (an LPS's
    /// fixed cluster).
    pub(super) accept_newcomers: bool,
    /// Newcomers heard since the last [`ClientPool::newcomers`], in arrival order.
    pub(super) queued: Vec<(Id, Hello)>,
    /// Clients that announced themselves and were pinged, not answered yet: one that answers
    /// is queued as a newcomer.
    pub(super) probing: Vec<(Id, Hello)>,
    /// The counts each client first declared ([`super::join::Declared`]).
    pub(super) declared: super::join::Declared,
    /// Where the checkpoint goes after every round (`serve`: `--out`), with what a resumed run
    /// needs besides the round driver's state.
    pub(super) checkpoint: Option<super::resume::CheckpointTo>,
    /// The live view (`--http`; off: no-ops).
    pub(super) live: crate::live::Live,
    /// Testbed mode: the clients' partition as this process computed it ([`MqttPool::vouch`]).
    pub(super) testbed: Option<Testbed>,
    /// The warnings about members' ignored messages, once per interval per client.
    pub(super) throttle: LogThrottle,
}

impl MqttPool {
    pub(super) fn of_members(
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
            declared: Default::default(),
            checkpoint: None,
            live: net.live.clone(),
            testbed: None,
            throttle: LogThrottle::default(),
        }
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

    /// Ground-truth groups, by [`MqttPool::vouch`]'s partition: never what the clients say of
    /// themselves (a `Hello` could name any group).
    pub fn truth(&self) -> Option<Vec<usize>> {
        let truth = self.testbed.as_ref()?.truth.as_ref()?;
        self.members
            .iter()
            .map(|m| truth.get(m.hello.shard.as_ref()?.index as usize).copied())
            .collect()
    }

    /// What this process can vouch for: caps the counts the clients declared at `k` times their
    /// median (`k = 0`: no cap) and, in testbed mode (every client holds a shard of one partition,
    /// [`MqttPool::partition`]), computes that partition from its own labels (`data`, found by
    /// `edgecfl_shared::data::load`'s rule) for the ground truth ([`MqttPool::truth`]) and to cap each
    /// client's counts at its shard's sizes. Labels unlike the clients' (most declare more than
    /// their shard would hold) leave the sizes unchecked, with a warning.
    pub fn vouch(&mut self, k: u64, dataset: DatasetKind, data: Option<&Path>) {
        self.testbed = self.partition().and_then(|(spec, seed)| {
            let of = self.members.first()?.hello.shard.as_ref()?.of as usize;
            Testbed::compute(&spec, seed, of, dataset, data)
                .inspect_err(|e| {
                    warn!("testbed: cannot compute the clients' partition {spec} (seed {seed}): {e:#}; no ground truth, shard sizes unchecked")
                })
                .ok()
        });
        let declared: Vec<(u32, u64, u64)> = self
            .members
            .iter()
            .filter_map(|m| {
                Some((
                    m.hello.shard.as_ref()?.index,
                    m.hello.samples,
                    m.hello.test_samples,
                ))
            })
            .collect();
        let sizes = self.testbed.as_ref().and_then(|t| {
            if t.agrees(&declared) {
                Some(t.sizes.clone())
            } else {
                warn!(
                    "testbed: most clients declare more samples than their shard holds: their data are not this process's ({}); shard sizes unchecked (give the clients' data with --data)",
                    t.source
                );
                None
            }
        });
        self.declared.limit(&mut self.members, k, sizes);
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

    pub(super) fn send(
        &mut self,
        client: usize,
        round: u32,
        msg: ToClient,
    ) -> Result<(), PoolError> {
        let bytes = Envelope::new(self.run.clone(), round, msg).to_bytes();
        self.wire.down += bytes.len() as u64;
        self.wire.messages_down += 1;
        self.link
            .publish(&self.topics.down(&self.members[client].id), bytes, false)
            .map_err(|e| PoolError::Transport(e.to_string()))
    }

    /// Publishes an encoded envelope on the broadcast topic (once for the whole fleet).
    pub(super) fn broadcast(&mut self, bytes: &[u8]) -> Result<(), PoolError> {
        self.wire.down += bytes.len() as u64;
        self.wire.broadcast += bytes.len() as u64;
        self.wire.messages_down += 1;
        self.link
            .publish(&self.topics.broadcast(), bytes.to_vec(), false)
            .map_err(|e| PoolError::Transport(e.to_string()))
    }

    /// Records that client `c` dropped out of `phase` (or was not asked, being gone).
    pub(super) fn dropped(&mut self, c: usize, phase: Phase, reason: DropReason) {
        let id = self.members[c].id.as_str();
        match reason {
            DropReason::Gone => self.live.gone(id, false),
            DropReason::Absent => self.live.gone(id, true),
            DropReason::Timeout => self.live.late(id, phase),
            DropReason::Back => self.live.back(id),
        }
        self.dropouts.push(Dropout {
            id: self.members[c].id.to_string(),
            client: c,
            round: phase.round(),
            phase: phase.to_string(),
            reason,
        });
    }

    /// One exchange for jobs of one kind (`jobs` non-empty, all of `jobs[0]`'s kind): their
    /// commands ([`Job::command`]) and the broadcast they need, if any ([`Job::broadcast`]).
    fn run_kind(
        &mut self,
        round: usize,
        jobs: &[&(usize, Job<'_>)],
    ) -> Result<Vec<(usize, Answer)>, PoolError> {
        let first = &jobs[0].1;
        let phase = match first.uploads() {
            _ if round == 0 => Phase::Clustering,
            Uploads::Evaluations => Phase::Evaluating(round as u32),
            _ => Phase::Training(round as u32),
        };
        let unsendable = |e: WireError| PoolError::Job {
            job: e.job,
            reason: e.reason,
        };
        let broadcast = match first.broadcast().map_err(unsendable)? {
            Some(b) => Some(
                Envelope::new(self.run.clone(), phase.round(), b.message)
                    .to_bytes_checked()
                    .map_err(|e| PoolError::Job {
                        job: first.name(),
                        reason: format!("{}: {e}", b.too_large),
                    })?,
            ),
            None => None,
        };
        let mut msgs = Vec::with_capacity(jobs.len());
        for &&(c, ref job) in jobs {
            if c >= self.members.len() {
                return Err(PoolError::NoClient(c));
            }
            msgs.push((c, job.command(self.upload).map_err(unsendable)?));
        }
        self.exchange(phase, jobs, msgs, broadcast.as_deref())
    }

    /// Tells every client the run is over, then disconnects. A member with a message in `kept`
    /// (by member index: its cluster's final model, [`crate::cmd::export::final_messages`]) gets that,
    /// retained on its `down` topic so that it fetches it when it next connects if it misses it
    /// now; every other member, and newcomers still queued or pinged, a plain `Finish`. Called
    /// after a run (with the models), and after a failed one too (without).
    pub fn finish(self, kept: &BTreeMap<usize, Vec<u8>>) {
        let mut delivered = 0;
        for (i, m) in self.members.iter().enumerate() {
            let Some(bytes) = kept.get(&i) else { continue };
            match self
                .link
                .publish(&self.topics.down(&m.id), bytes.clone(), true)
            {
                Ok(()) => delivered += 1,
                Err(e) => warn!("cannot send {} its final model: {e}", m.id.as_str()),
            }
        }
        if delivered > 0 {
            info!(
                "sent {delivered} client(s) their cluster's final model (retained on their down topics)"
            );
        }
        let ids = self
            .members
            .iter()
            .enumerate()
            .filter(|(i, _)| !kept.contains_key(i))
            .map(|(_, m)| &m.id)
            .chain(self.queued.iter().chain(&self.probing).map(|q| &q.0));
        finish_fleet(&self.link, &self.topics, &self.run, ids);
        self.link.disconnect();
    }
}

impl Inbox for MqttPool {
    fn recv_until(&self, deadline: Instant) -> Option<Inbound> {
        self.link.recv_until(deadline)
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

    fn upload(&self) -> Encoding {
        self.upload
    }

    fn wants_checkpoints(&self) -> bool {
        self.checkpoint.is_some()
    }

    /// Writes `checkpoint.json` ([`MqttPool::save_checkpoint`]).
    fn checkpoint(&mut self, checkpoint: &federation::Checkpoint) -> Result<(), PoolError> {
        self.save_checkpoint(checkpoint)
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
