//! One awaiting phase over the broker: jobs out, answers in, with dropouts, reconnects and
//! newcomers handled while it waits.

use std::ops::ControlFlow;
use std::time::{Instant, SystemTime};

use edgecfl_shared::federation::{Answer, Job, PoolError};
use edgecfl_shared::jobs::Uploads;
use edgecfl_shared::mqtt::Inbound;
use edgecfl_shared::protocol::{self, Envelope, ToClient, ToCoordinator, TopicKind};
use tracing::{debug, info, warn};

use crate::rounds::{Awaiting, Phase, Rejected, Rejection, until, wait};

use super::join::{stray, upload_on_status};
use super::pool::{DropReason, MqttPool, finish_fleet};

impl MqttPool {
    /// An evaluation of more test samples than client `c` declared (its first `Hello`, held to
    /// its shard's size in testbed mode) is refused: a client cannot outweigh the others in the
    /// reported accuracy. The samples an update claims are held to the fleet cap where it
    /// lowered the client's count ([`super::join::Declared`]). Other answers pass.
    fn within_declared(&self, c: usize, mut a: Answer) -> Result<Answer, Rejected> {
        let declared = self.members[c].hello.test_samples;
        if let Answer::Evaluation(r) = &a
            && r.total as u64 > declared
        {
            return Err(Rejected::new(
                Rejection::TooManyTestSamples,
                format!(
                    "an evaluation of {} test samples, the client declared {declared}",
                    r.total
                ),
            ));
        }
        // A client above the fleet cap (`--sample-cap`) weighs as the cap.
        if let Some(cap) = self.declared.weight_cap(self.members[c].id.as_str()) {
            for u in a.updates() {
                u.samples = u.samples.min(cap);
            }
        }
        Ok(a)
    }

    /// Counts an ignored message from `id` and logs it. A member's (`member`) is counted per
    /// client too and logged at most a few times per interval, with a count
    /// ([`LogThrottle`](crate::log_throttle::LogThrottle)); one from outside
    /// the run is a [`stray`].
    fn reject(&mut self, phase: Phase, id: &str, member: bool, r: Rejected) {
        self.live.rejected(id, &r.reason, &r.detail);
        if !member {
            return stray(&mut self.tally, phase, id, r);
        }
        if let Some(held) = self.throttle.admit(id, Instant::now()) {
            warn!(
                "{phase}: ignored message from {id:?}: {:?}: {}{}",
                r.reason,
                r.detail,
                self.throttle.held_back(held)
            );
        }
        self.per_client
            .entry(id.to_string())
            .or_default()
            .add(r.reason);
        self.tally.add(r.reason);
    }

    /// One awaiting phase: sends each client its command (`jobs`, the messages of `asked`'s
    /// jobs), then collects answers until everyone asked has answered, failed or dropped out, or
    /// the phase timeout fires. `broadcast`, a message every job depends on, is published first
    /// on the broadcast topic (not retained) and again when an asked client reconnects.
    pub(super) fn exchange(
        &mut self,
        phase: Phase,
        asked: &[&(usize, Job<'_>)],
        jobs: Vec<(usize, ToClient)>,
        broadcast: Option<&[u8]>,
    ) -> Result<Vec<(usize, Answer)>, PoolError> {
        let mut aw = Awaiting::new(
            phase,
            self.run.clone(),
            asked.iter().map(|&&(c, ref job)| (c, job)),
        );
        let round = phase.round();
        self.live
            .phase_started(phase, jobs.iter().map(|j| self.members[j.0].id.to_string()));
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
        self.show_bytes();
        let mut answers = Vec::with_capacity(jobs.len());
        let deadline = Instant::now() + self.phase_timeout;
        let ended = aw.done()
            || wait(self, deadline, |pool, ev| {
                match pool.on_event(&mut aw, &jobs, broadcast, ev) {
                    Ok(answer) => {
                        answers.extend(answer);
                        until(aw.done()).map_break(Ok)
                    }
                    Err(e) => ControlFlow::Break(Err(e)),
                }
            })
            .transpose()?
            .is_some();
        if !ended {
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
        }
        self.live.phase_ended();
        self.show_bytes();
        Ok(answers)
    }

    /// The live view's byte totals, brought up to date with each answer (as its client's row
    /// is) and each phase's sends.
    fn show_bytes(&self) {
        self.live.bytes(self.wire.up(), self.wire.down_all());
    }

    /// One event of the phase: a message, or the broker lost or back (then every client still
    /// awaited gets its job again).
    fn on_event(
        &mut self,
        aw: &mut Awaiting<'_, '_>,
        jobs: &[(usize, ToClient)],
        broadcast: Option<&[u8]>,
        ev: Inbound,
    ) -> Result<Option<(usize, Answer)>, PoolError> {
        let phase = aw.phase;
        let (topic, payload) = match ev {
            Inbound::Message { topic, payload, .. } => (topic, payload),
            Inbound::Disconnected(e) => {
                warn!(
                    "{phase}: lost the broker ({e}); reconnecting{}",
                    self.link
                        .next_attempt()
                        .and_then(|at| at.duration_since(SystemTime::now()).ok())
                        .map_or(String::new(), |d| format!(" in {:.0} s", d.as_secs_f64()))
                );
                return Ok(None);
            }
            Inbound::Connected => {
                // Back on the broker (it restarted, or the connection dropped): what was
                // published meanwhile may be lost, so every client still awaited gets its job
                // again (a client that answers twice has its second answer counted as a
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
                        self.send(c, phase.round(), job.clone())?;
                    }
                }
                return Ok(None);
            }
        };
        let Some((id, kind)) = self.topics.parse(&topic) else {
            return Ok(None);
        };
        let msg = Envelope::<ToCoordinator>::from_bytes(&payload);
        let client = self.index.get(id).copied();
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
                let others = self
                    .members
                    .iter()
                    .map(|m| (m.id.as_str(), &m.hello))
                    .chain(self.queued.iter().map(|q| (q.0.as_str(), &q.1)));
                if let Some(r) = self.declared.refuse_claim(others, id, &hello) {
                    finish_fleet(&self.link, &self.topics, &self.run, std::iter::once(&new));
                    self.live.rejected(id, &r.reason, &r.detail);
                    stray(&mut self.tally, phase, id, r);
                    return Ok(None);
                }
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
                Ok(_) => self.reject(phase, id, client.is_some(), upload_on_status()),
                Err(e) => self.reject(phase, id, client.is_some(), e.into()),
            },
            (TopicKind::Status, None) => match msg {
                Ok(Envelope {
                    body: ToCoordinator::Hello(mut hello),
                    ..
                }) if self.accept_newcomers => match protocol::id(id) {
                    Ok(new) => {
                        self.declared.hold(id, &mut hello);
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
                    Err(e) => self.reject(phase, id, client.is_some(), e.into()),
                },
                Ok(Envelope {
                    body: ToCoordinator::Hello(_),
                    ..
                }) => self.reject(
                    phase,
                    id,
                    client.is_some(),
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
                Ok(_) => self.reject(phase, id, client.is_some(), upload_on_status()),
                Err(e) => self.reject(phase, id, client.is_some(), e.into()),
            },
            (TopicKind::Up, None) => self.reject(
                phase,
                id,
                false,
                Rejected {
                    reason: Rejection::UnknownClient,
                    detail: "not a client of this run".into(),
                },
            ),
            (TopicKind::Up, Some(c)) => {
                let len = payload.len() as u64;
                let uploads = aw.job(c).map(Job::uploads);
                match aw.accept(c, msg).and_then(|a| self.within_declared(c, a)) {
                    Ok(a) => {
                        debug!("{phase}: answer of {id} ({len} bytes)");
                        self.wire.answers_up += 1;
                        match uploads {
                            Some(Uploads::Signatures) => self.wire.signature_up += len,
                            Some(Uploads::RelevanceRows) => self.wire.relevance_up += len,
                            Some(Uploads::Models) => {
                                self.wire.update_up += len;
                                self.wire.updates += 1;
                            }
                            Some(Uploads::Evaluations) => self.wire.evaluation_up += len,
                            None => {}
                        }
                        // The total first: the live view never shows a client's bytes that its
                        // total lacks.
                        self.show_bytes();
                        self.live.answered(id, phase, len);
                        return Ok(Some((c, a)));
                    }
                    Err(r) => self.reject(phase, id, client.is_some(), r),
                }
            }
            (TopicKind::Down, _) => {}
        }
        Ok(None)
    }
}
