//! What the live view knows of a run: the fleet's clients and their state, the round and phase,
//! accuracy per round per cluster, the dendrogram, and the log of rejections.
//!
//! Each client moves through these states (events in brackets):
//!
//! ```text
//!            [joined]                 [phase asks it]            [its answer]
//! (absent) ──────────▶ waiting ─────────────────────▶ working ─────────────▶ answered
//!                        ▲  ▲                          │  │                    │
//!                        │  └──────[next phase]────────┼──┼────────────────────┘
//!                        │                  [timeout]  │  │ [Gone / last will]
//!                        │                      late ◀─┘  └─▶ gone
//!                        └──────────[Hello again: back]──────┘
//! newcomers: (absent) ─[placed]─▶ waiting;  ─[turned away]─▶ rejected;  round-0 misses ─▶ left_out
//! ```
//!
//! [`State`] is plain data changed by one method per event, so the machine is tested without
//! a broker or a server; [`State::snapshot`] is the JSON the page draws.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

/// Rejections kept for the page's log (the counts cover all of them).
pub const LOG_LEN: usize = 200;

/// A client's state as the page shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientState {
    /// In the run, not asked anything in the current phase.
    Waiting,
    /// Asked in the current phase; no answer yet.
    Working,
    /// Answered the current phase.
    Answered,
    /// The current (or last) phase it was asked in timed out without its answer.
    Late,
    /// Its `Gone` (or last will) came: disconnected.
    Gone,
    /// A round-0 client without a round-0 upload, left out of the clustering.
    LeftOut,
    /// A newcomer turned away.
    Rejected,
    /// In the run when it finished.
    Done,
}

impl ClientState {
    /// Every state, in the order the metrics list them.
    pub const ALL: [ClientState; 8] = [
        ClientState::Waiting,
        ClientState::Working,
        ClientState::Answered,
        ClientState::Late,
        ClientState::Gone,
        ClientState::LeftOut,
        ClientState::Rejected,
        ClientState::Done,
    ];

    /// Its name (the JSON's and the metrics label's).
    pub fn name(self) -> &'static str {
        match self {
            ClientState::Waiting => "waiting",
            ClientState::Working => "working",
            ClientState::Answered => "answered",
            ClientState::Late => "late",
            ClientState::Gone => "gone",
            ClientState::LeftOut => "left_out",
            ClientState::Rejected => "rejected",
            ClientState::Done => "done",
        }
    }
}

/// One client of the fleet.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Client {
    /// Its id.
    pub id: String,
    /// Where it is.
    pub state: ClientState,
    /// Its cluster, once round 0 (or its placement as a newcomer) is done.
    pub cluster: Option<usize>,
    /// The round it joined at (0: before round 0).
    pub joined_round: usize,
    /// Answers accepted from it.
    pub answers: u64,
    /// Payload bytes of those answers (MQTT runs).
    pub bytes_up: u64,
    /// Its messages that were rejected.
    pub rejected: u64,
}

/// The phase the run is in.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseView {
    /// Its kind: `joining`, `clustering`, `training`, `evaluation`, `round` (in-process runs
    /// report whole rounds), `finished`.
    pub kind: String,
    /// Its round.
    pub round: usize,
    /// Clients asked.
    pub asked: usize,
    /// Of those, answered.
    pub answered: usize,
    /// Seconds since it began (at the snapshot).
    pub seconds: f64,
}

/// One evaluated round's accuracy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AccuracyPoint {
    /// The round.
    pub round: usize,
    /// Mean local test accuracy.
    pub mean: f64,
    /// Per cluster (NaN-free: a cluster without an evaluation is `null`).
    pub clusters: Vec<Option<f64>>,
}

/// One entry of the rejection log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogEntry {
    /// Seconds since the run began.
    pub at: f64,
    /// The round (or phase) it happened in, as text.
    pub context: String,
    /// The client id it came under (as given: it may not be a client of the run).
    pub client: String,
    /// What was rejected: `message`, `update`, `newcomer`.
    pub what: &'static str,
    /// The reason's name.
    pub reason: String,
    /// Details.
    pub detail: String,
}

/// The live state of a run.
#[derive(Debug, Clone, Default)]
pub struct State {
    /// The runtime: `serve`, `demo`, `simulate`.
    pub runtime: String,
    /// The method.
    pub algorithm: String,
    /// The run id (MQTT runs).
    pub run_id: Option<String>,
    /// Training rounds planned.
    pub rounds_planned: usize,
    /// Training rounds done (the last [`State::round_done`]'s).
    pub rounds_done: usize,
    /// Clients, by id.
    pub clients: BTreeMap<String, Client>,
    /// The round-0 clients in their order in the run (what [`State::clustered`]'s positions
    /// refer to, less those left out).
    pub order: Vec<String>,
    /// The current phase, with when it began (seconds since the run began).
    pub phase: Option<(PhaseView, f64)>,
    /// When the current phase ended (None: it goes on).
    pub phase_end: Option<f64>,
    /// Accuracy of every evaluated round.
    pub accuracy: Vec<AccuracyPoint>,
    /// Clusters now.
    pub clusters: usize,
    /// The dendrogram with its cut (SVG), once round 0 is done.
    pub dendrogram: Option<String>,
    /// The cut's threshold and linkage.
    pub cut: Option<(f64, String)>,
    /// The last [`LOG_LEN`] rejections.
    pub log: VecDeque<LogEntry>,
    /// Rejections of every kind, by `what/reason`.
    pub rejected: BTreeMap<String, u64>,
    /// MQTT payload bytes from clients and to clients (None: the runtime does not know them).
    pub bytes: Option<(u64, u64)>,
    /// Whether the run ended (and how: None while it runs).
    pub outcome: Option<String>,
}

impl State {
    fn client(&mut self, id: &str, round: usize) -> &mut Client {
        self.clients
            .entry(id.to_string())
            .or_insert_with(|| Client {
                id: id.to_string(),
                state: ClientState::Waiting,
                cluster: None,
                joined_round: round,
                answers: 0,
                bytes_up: 0,
                rejected: 0,
            })
    }

    /// The round the run is in (the phase's, else the rounds done).
    pub fn round(&self) -> usize {
        self.phase
            .as_ref()
            .map_or(self.rounds_done, |(p, _)| p.round)
    }

    /// Client `id` joined (waits for its first job). Joining again is no change.
    pub fn joined(&mut self, id: &str) {
        let round = self.round();
        let is_new = !self.clients.contains_key(id);
        let c = self.client(id, round);
        if matches!(c.state, ClientState::Gone) {
            c.state = ClientState::Waiting;
        }
        if is_new && round == 0 {
            self.order.push(id.to_string());
        }
    }

    /// Client `id` left while clients joined (its `Gone` before the run began).
    pub fn left(&mut self, id: &str) {
        if let Some(c) = self.clients.get_mut(id) {
            c.state = ClientState::Gone;
        }
    }

    /// The run's round-0 clients, in the run's order (`serve` after joining, `simulate` at the
    /// start): replaces the order joins arrived in.
    pub fn fleet(&mut self, ids: &[String]) {
        for id in ids {
            self.client(id, 0);
        }
        self.order = ids.to_vec();
    }

    /// A phase began at `now` (seconds since the run began), asking `asked`.
    pub fn phase_started(&mut self, kind: &str, round: usize, asked: &[String], now: f64) {
        for c in self.clients.values_mut() {
            if matches!(c.state, ClientState::Working | ClientState::Answered) {
                c.state = ClientState::Waiting;
            }
        }
        for id in asked {
            let c = self.client(id, round);
            if !matches!(c.state, ClientState::Gone) {
                c.state = ClientState::Working;
            }
        }
        self.phase_end = None;
        self.phase = Some((
            PhaseView {
                kind: kind.to_string(),
                round,
                asked: asked.len(),
                answered: 0,
                seconds: 0.0,
            },
            now,
        ));
    }

    /// The current phase ended at `now`; returns its kind and seconds (None when there is none
    /// or it had ended).
    pub fn phase_ended(&mut self, now: f64) -> Option<(String, f64)> {
        let (p, began) = self.phase.as_ref()?;
        if self.phase_end.is_some() {
            return None;
        }
        self.phase_end = Some(now);
        Some((p.kind.clone(), (now - began).max(0.0)))
    }

    /// Client `id` answered the current phase with `bytes` of payload.
    pub fn answered(&mut self, id: &str, bytes: u64) {
        let round = self.round();
        let c = self.client(id, round);
        c.answers += 1;
        c.bytes_up += bytes;
        c.state = ClientState::Answered;
        if let Some((p, _)) = &mut self.phase {
            p.answered += 1;
        }
    }

    /// Client `id` did not answer in time.
    pub fn late(&mut self, id: &str) {
        let round = self.round();
        self.client(id, round).state = ClientState::Late;
    }

    /// Client `id` disconnected (its `Gone`).
    pub fn gone(&mut self, id: &str) {
        let round = self.round();
        self.client(id, round).state = ClientState::Gone;
    }

    /// Client `id` came back after it was gone.
    pub fn back(&mut self, id: &str) {
        let round = self.round();
        self.client(id, round).state = ClientState::Waiting;
    }

    /// Something was rejected: a message (`what` = `message`), an update or a newcomer.
    pub fn rejected(
        &mut self,
        what: &'static str,
        client: &str,
        reason: &str,
        detail: &str,
        now: f64,
    ) {
        if let Some(c) = self.clients.get_mut(client) {
            c.rejected += 1;
        }
        *self.rejected.entry(format!("{what}/{reason}")).or_default() += 1;
        let context = match &self.phase {
            Some((p, _)) => format!("{} (round {})", p.kind, p.round),
            None => "joining".into(),
        };
        if self.log.len() == LOG_LEN {
            self.log.pop_front();
        }
        self.log.push_back(LogEntry {
            at: now,
            context,
            client: client.to_string(),
            what,
            reason: reason.to_string(),
            detail: detail.to_string(),
        });
    }

    /// Round 0's clustering: cluster of each position of [`State::order`] (those left out
    /// skipped), the dendrogram drawn.
    pub fn clustered(
        &mut self,
        assignment: &[usize],
        clusters: usize,
        cut: Option<(f64, String)>,
        dendrogram: Option<String>,
    ) {
        let ids: Vec<String> = self
            .order
            .iter()
            .filter(|id| {
                self.clients
                    .get(*id)
                    .is_none_or(|c| c.state != ClientState::LeftOut)
            })
            .cloned()
            .collect();
        for (id, &k) in ids.iter().zip(assignment) {
            if let Some(c) = self.clients.get_mut(id) {
                c.cluster = Some(k);
            }
        }
        self.clusters = clusters;
        self.cut = cut;
        self.dendrogram = dendrogram.filter(|s| !s.is_empty());
    }

    /// A round-0 client was left out of round 0.
    pub fn left_out(&mut self, id: &str) {
        self.client(id, 0).state = ClientState::LeftOut;
    }

    /// A newcomer was placed in `cluster` at `round`.
    pub fn newcomer(&mut self, id: &str, round: usize, cluster: usize) {
        let c = self.client(id, round);
        c.cluster = Some(cluster);
        if matches!(c.state, ClientState::Rejected | ClientState::LeftOut) {
            c.state = ClientState::Waiting;
        }
    }

    /// A newcomer was turned away.
    pub fn newcomer_dropped(&mut self, id: &str, round: usize, reason: &str, now: f64) {
        self.client(id, round).state = ClientState::Rejected;
        self.rejected("newcomer", id, reason, "turned away", now);
    }

    /// Round `round` of `of` is done; `accuracy` its mean and per-cluster accuracy (when it was
    /// evaluated), `clusters` the clusters after it.
    pub fn round_done(
        &mut self,
        round: usize,
        of: usize,
        accuracy: Option<(f64, &[f64])>,
        clusters: usize,
    ) {
        self.rounds_done = round;
        self.rounds_planned = of;
        if clusters > 0 {
            self.clusters = clusters;
        }
        if let Some((mean, per)) = accuracy {
            self.accuracy.push(AccuracyPoint {
                round,
                mean,
                clusters: per.iter().map(|&a| a.is_finite().then_some(a)).collect(),
            });
        }
    }

    /// The run ended (`outcome`: `finished` or the error). A finished run's clients that were
    /// still in it are done; after an error they wait (a resume may call them back).
    pub fn finished(&mut self, outcome: &str, now: f64) {
        self.phase_ended(now);
        self.outcome = Some(outcome.to_string());
        let round = self.rounds_done;
        self.phase_end = Some(now);
        self.phase = Some((
            PhaseView {
                kind: "finished".into(),
                round,
                asked: 0,
                answered: 0,
                seconds: 0.0,
            },
            now,
        ));
        let done = outcome == "finished";
        for c in self.clients.values_mut() {
            match c.state {
                ClientState::Waiting | ClientState::Working | ClientState::Answered if done => {
                    c.state = ClientState::Done
                }
                ClientState::Working | ClientState::Answered => c.state = ClientState::Waiting,
                _ => {}
            }
        }
    }

    /// Clients per state.
    pub fn counts(&self) -> BTreeMap<ClientState, usize> {
        let mut m: BTreeMap<ClientState, usize> =
            ClientState::ALL.iter().map(|&s| (s, 0)).collect();
        for c in self.clients.values() {
            *m.entry(c.state).or_default() += 1;
        }
        m
    }

    /// What the page draws, at `now` (seconds since the run began); `version` counts changes.
    pub fn snapshot(&self, now: f64, version: u64) -> serde_json::Value {
        let phase = self.phase.as_ref().map(|(p, began)| PhaseView {
            seconds: if p.kind == "finished" {
                0.0
            } else {
                (self.phase_end.unwrap_or(now) - began).max(0.0)
            },
            ..p.clone()
        });
        let counts: BTreeMap<&str, usize> = self
            .counts()
            .into_iter()
            .map(|(s, n)| (s.name(), n))
            .collect();
        serde_json::json!({
            "version": version,
            "runtime": self.runtime,
            "algorithm": self.algorithm,
            "run_id": self.run_id,
            "elapsed": now,
            "round": self.round(),
            "rounds_done": self.rounds_done,
            "rounds_planned": self.rounds_planned,
            "phase": phase,
            "clients": self.clients.values().collect::<Vec<_>>(),
            "counts": counts,
            "clusters": self.clusters,
            "cut": self.cut.as_ref().map(|(t, l)| serde_json::json!({"threshold": t, "linkage": l})),
            "has_dendrogram": self.dendrogram.is_some(),
            "accuracy": self.accuracy,
            "rejections": self.log,
            "rejected": self.rejected,
            "bytes_up": self.bytes.map(|b| b.0),
            "bytes_down": self.bytes.map(|b| b.1),
            "outcome": self.outcome,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("c{i}")).collect()
    }

    fn state_of(s: &State, id: &str) -> ClientState {
        s.clients[id].state
    }

    #[test]
    fn a_round_moves_clients_through_working_answered_late_gone() {
        let mut s = State::default();
        for id in ids(4) {
            s.joined(&id);
        }
        assert_eq!(s.order, ids(4));
        assert!(s.clients.values().all(|c| c.state == ClientState::Waiting));
        s.phase_started("training", 1, &ids(3), 10.0);
        assert_eq!(state_of(&s, "c0"), ClientState::Working);
        assert_eq!(state_of(&s, "c3"), ClientState::Waiting, "not asked");
        s.answered("c0", 100);
        s.late("c1");
        s.gone("c2");
        let snap = s.snapshot(12.5, 7);
        assert_eq!(snap["phase"]["asked"], 3);
        assert_eq!(snap["phase"]["answered"], 1);
        assert_eq!(snap["phase"]["seconds"], 2.5);
        assert_eq!(snap["counts"]["answered"], 1);
        assert_eq!(snap["counts"]["late"], 1);
        assert_eq!(snap["counts"]["gone"], 1);
        assert_eq!(snap["counts"]["waiting"], 1);
        assert_eq!(s.phase_ended(14.0), Some(("training".into(), 4.0)));
        assert_eq!(s.phase_ended(15.0), None, "ended once");
        assert_eq!(
            s.snapshot(20.0, 8)["phase"]["seconds"],
            4.0,
            "its clock stopped"
        );
        // The next phase: answered → working again; a gone client stays gone until it is back.
        s.phase_started("evaluation", 1, &ids(3), 14.0);
        assert_eq!(state_of(&s, "c0"), ClientState::Working);
        assert_eq!(state_of(&s, "c2"), ClientState::Gone);
        s.back("c2");
        assert_eq!(state_of(&s, "c2"), ClientState::Waiting);
        assert_eq!(s.clients["c0"].answers, 1);
        assert_eq!(s.clients["c0"].bytes_up, 100);
    }

    #[test]
    fn clustering_positions_skip_clients_left_out() {
        let mut s = State::default();
        s.fleet(&ids(4));
        s.left_out("c1");
        s.clustered(
            &[0, 1, 1],
            2,
            Some((0.5, "ward".into())),
            Some("<svg/>".into()),
        );
        assert_eq!(s.clients["c0"].cluster, Some(0));
        assert_eq!(s.clients["c1"].cluster, None);
        assert_eq!(s.clients["c2"].cluster, Some(1));
        assert_eq!(s.clients["c3"].cluster, Some(1));
        assert_eq!(s.clients["c1"].state, ClientState::LeftOut);
        // Offered again as a newcomer of round 1 and placed.
        s.newcomer("c1", 1, 0);
        assert_eq!(s.clients["c1"].state, ClientState::Waiting);
        assert_eq!(s.clients["c1"].cluster, Some(0));
        assert!(s.snapshot(0.0, 0)["has_dendrogram"].as_bool().unwrap());
    }

    #[test]
    fn rounds_record_accuracy_without_nan() {
        let mut s = State::default();
        s.round_done(1, 3, Some((0.5, &[0.4, f64::NAN])), 2);
        s.round_done(2, 3, None, 2);
        let snap = s.snapshot(0.0, 0);
        assert_eq!(snap["rounds_done"], 2);
        assert_eq!(snap["accuracy"].as_array().unwrap().len(), 1);
        assert_eq!(snap["accuracy"][0]["clusters"][1], serde_json::Value::Null);
        // The JSON holds no NaN (serde_json would have written null, but the page's parser
        // must never see one either way).
        assert!(!serde_json::to_string(&snap).unwrap().contains("NaN"));
    }

    #[test]
    fn the_rejection_log_keeps_the_last_entries_and_counts_all() {
        let mut s = State::default();
        s.joined("c0");
        for i in 0..LOG_LEN + 5 {
            s.rejected("message", "c0", "wrong_round", &format!("n{i}"), i as f64);
        }
        s.newcomer_dropped("x", 2, "no_signature", 1.0);
        assert_eq!(s.log.len(), LOG_LEN);
        assert_eq!(s.log.back().unwrap().what, "newcomer");
        assert_eq!(s.rejected["message/wrong_round"], LOG_LEN as u64 + 5);
        assert_eq!(s.rejected["newcomer/no_signature"], 1);
        assert_eq!(s.clients["c0"].rejected, LOG_LEN as u64 + 5);
        assert_eq!(s.clients["x"].state, ClientState::Rejected);
    }

    #[test]
    fn finishing_settles_every_client_and_the_phase() {
        let mut s = State::default();
        s.fleet(&ids(2));
        s.phase_started("training", 3, &ids(2), 0.0);
        s.answered("c0", 1);
        s.round_done(3, 3, Some((0.9, &[0.9])), 1);
        s.finished("finished", 5.0);
        let snap = s.snapshot(9.0, 1);
        assert_eq!(snap["phase"]["kind"], "finished");
        assert_eq!(snap["outcome"], "finished");
        assert_eq!(snap["counts"]["done"], 2);
        assert_eq!(snap["counts"]["waiting"], 0);
        // A run that ends in an error leaves its clients waiting, a gone one gone.
        let mut s = State::default();
        s.fleet(&ids(3));
        s.phase_started("training", 1, &ids(2), 0.0);
        s.gone("c2");
        s.finished("the broker went away", 2.0);
        let snap = s.snapshot(3.0, 1);
        assert_eq!(snap["counts"]["waiting"], 2);
        assert_eq!(snap["counts"]["gone"], 1);
        assert_eq!(snap["counts"]["done"], 0);
    }
}
