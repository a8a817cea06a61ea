//! `/metrics`: the run's counters in the OpenMetrics text format (prometheus-client), or in
//! Prometheus' classic text format 0.0.4 ([`Metrics::render_classic`]) for a scraper that asks
//! for it (`Accept: text/plain;version=0.0.4`, as `promtool check metrics` reads).
//!
//! | metric | type | labels |
//! | --- | --- | --- |
//! | `edgecfl_rounds_done` | gauge | |
//! | `edgecfl_rounds_planned` | gauge | |
//! | `edgecfl_round` | gauge | |
//! | `edgecfl_clients` | gauge (clients now in each state) | `state` |
//! | `edgecfl_clients_joined_total` | counter | `when` = `start` \| `newcomer` |
//! | `edgecfl_clients_late_total` | counter (a client missing a phase's timeout) | `phase` |
//! | `edgecfl_clients_dropped_total` | counter | `reason` = `gone` \| `absent` \| `left_out` |
//! | `edgecfl_rejected_total` | counter (messages, updates, newcomers refused) | `what`, `reason` |
//! | `edgecfl_answers_total` | counter | `phase` |
//! | `edgecfl_bytes_up_total`, `edgecfl_bytes_down_total` | counter (MQTT payload bytes) | |
//! | `edgecfl_accuracy` | gauge (mean local test accuracy, last evaluated round) | |
//! | `edgecfl_cluster_accuracy` | gauge | `cluster` |
//! | `edgecfl_clusters` | gauge | |
//! | `edgecfl_phase_duration_seconds` | histogram | `phase` |

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::state::ClientState;

type Labels = Vec<(&'static str, String)>;

fn phase_histogram() -> Histogram {
    // 0.1 s … ~ 55 min.
    Histogram::new(exponential_buckets(0.1, 2.0, 16))
}

/// The metric families, registered once.
pub struct Metrics {
    registry: Registry,
    rounds_done: Gauge,
    rounds_planned: Gauge,
    round: Gauge,
    clusters: Gauge,
    clients: Family<Labels, Gauge>,
    joined: Family<Labels, Counter>,
    late: Family<Labels, Counter>,
    dropped: Family<Labels, Counter>,
    rejected: Family<Labels, Counter>,
    answers: Family<Labels, Counter>,
    bytes_up: Counter,
    bytes_down: Counter,
    accuracy: Gauge<f64, AtomicU64>,
    cluster_accuracy: Family<Labels, Gauge<f64, AtomicU64>>,
    phase_seconds: Family<Labels, Histogram, fn() -> Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every family registered (and the per-state client gauges at 0).
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let m = Metrics {
            registry: Registry::default(),
            rounds_done: Gauge::default(),
            rounds_planned: Gauge::default(),
            round: Gauge::default(),
            clusters: Gauge::default(),
            clients: Family::default(),
            joined: Family::default(),
            late: Family::default(),
            dropped: Family::default(),
            rejected: Family::default(),
            answers: Family::default(),
            bytes_up: Counter::default(),
            bytes_down: Counter::default(),
            accuracy: Gauge::default(),
            cluster_accuracy: Family::default(),
            phase_seconds: Family::new_with_constructor(phase_histogram),
        };
        let r = &mut registry;
        r.register(
            "edgecfl_rounds_done",
            "Training rounds done",
            m.rounds_done.clone(),
        );
        r.register(
            "edgecfl_rounds_planned",
            "Training rounds planned",
            m.rounds_planned.clone(),
        );
        r.register(
            "edgecfl_round",
            "The round the run is in (0: clustering)",
            m.round.clone(),
        );
        r.register("edgecfl_clusters", "Clusters now", m.clusters.clone());
        r.register(
            "edgecfl_clients",
            "Clients in each state",
            m.clients.clone(),
        );
        r.register(
            "edgecfl_clients_joined",
            "Clients that joined: before round 0 (start) or later (newcomer)",
            m.joined.clone(),
        );
        r.register(
            "edgecfl_clients_late",
            "Clients that did not answer before a phase's timeout",
            m.late.clone(),
        );
        r.register(
            "edgecfl_clients_dropped",
            "Clients that dropped out: gone (disconnected), absent (not asked, being gone), left_out (no round-0 upload)",
            m.dropped.clone(),
        );
        r.register(
            "edgecfl_rejected",
            "Messages, updates and newcomers refused, by reason",
            m.rejected.clone(),
        );
        r.register(
            "edgecfl_answers",
            "Answers accepted from clients",
            m.answers.clone(),
        );
        r.register(
            "edgecfl_bytes_up",
            "MQTT payload bytes received from clients",
            m.bytes_up.clone(),
        );
        r.register(
            "edgecfl_bytes_down",
            "MQTT payload bytes sent to clients",
            m.bytes_down.clone(),
        );
        r.register(
            "edgecfl_accuracy",
            "Mean local test accuracy of the last evaluated round",
            m.accuracy.clone(),
        );
        r.register(
            "edgecfl_cluster_accuracy",
            "Mean local test accuracy per cluster, last evaluated round",
            m.cluster_accuracy.clone(),
        );
        r.register(
            "edgecfl_phase_duration_seconds",
            "How long each phase took",
            m.phase_seconds.clone(),
        );
        for s in ClientState::ALL {
            m.clients
                .get_or_create(&vec![("state", s.name().into())])
                .set(0);
        }
        Metrics { registry, ..m }
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut s = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut s, &self.registry);
        s
    }

    /// The classic text exposition (format 0.0.4): [`Metrics::render`]'s families with each
    /// counter's `# HELP` and `# TYPE` under its samples' name (`…_total`, where OpenMetrics
    /// names the family without the suffix), no `# UNIT` and no `# EOF`.
    pub fn render_classic(&self) -> String {
        classic(&self.render())
    }

    /// Rounds done and planned, the current round and the clusters.
    pub fn progress(&self, done: usize, planned: usize, round: usize, clusters: usize) {
        self.rounds_done.set(done as i64);
        self.rounds_planned.set(planned as i64);
        self.round.set(round as i64);
        self.clusters.set(clusters as i64);
    }

    /// Clients per state.
    pub fn clients(&self, counts: impl IntoIterator<Item = (ClientState, usize)>) {
        for (s, n) in counts {
            self.clients
                .get_or_create(&vec![("state", s.name().into())])
                .set(n as i64);
        }
    }

    /// One client joined (`newcomer`: after round 0).
    pub fn joined(&self, newcomer: bool) {
        let when = if newcomer { "newcomer" } else { "start" };
        self.joined
            .get_or_create(&vec![("when", when.into())])
            .inc();
    }

    /// One client missed `phase`'s timeout.
    pub fn late(&self, phase: &str) {
        self.late
            .get_or_create(&vec![("phase", phase.into())])
            .inc();
    }

    /// One client dropped out.
    pub fn dropped(&self, reason: &str) {
        self.dropped
            .get_or_create(&vec![("reason", reason.into())])
            .inc();
    }

    /// One refusal.
    pub fn rejected(&self, what: &str, reason: &str) {
        self.rejected
            .get_or_create(&vec![("what", what.into()), ("reason", reason.into())])
            .inc();
    }

    /// One answer accepted in `phase`.
    pub fn answered(&self, phase: &str) {
        self.answers
            .get_or_create(&vec![("phase", phase.into())])
            .inc();
    }

    /// Payload bytes up and down so far (the counters move to these totals; never back).
    pub fn bytes(&self, up: u64, down: u64) {
        for (c, total) in [(&self.bytes_up, up), (&self.bytes_down, down)] {
            let now = c.get();
            if total > now {
                c.inc_by(total - now);
            }
        }
    }

    /// An evaluated round's mean and per-cluster accuracy.
    pub fn accuracy(&self, mean: f64, clusters: &[Option<f64>]) {
        self.accuracy.set(mean);
        for (k, a) in clusters.iter().enumerate() {
            if let Some(a) = a {
                self.cluster_accuracy
                    .get_or_create(&vec![("cluster", k.to_string())])
                    .set(*a);
            }
        }
    }

    /// A phase of `kind` took `seconds`.
    pub fn phase(&self, kind: &str, seconds: f64) {
        self.phase_seconds
            .get_or_create(&vec![("phase", kind.into())])
            .observe(seconds);
    }
}

/// An OpenMetrics text exposition in the classic format: the metadata lines of a counter family
/// `NAME` become `NAME_total`'s (its samples' name), `# UNIT` and `# EOF` are dropped; samples
/// pass unchanged (prometheus-client writes no exemplars and no `_created`).
fn classic(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match meta {
            Some((p, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                out.push_str(p);
                out.push_str(name);
                if counters.contains(name) {
                    out.push_str("_total");
                }
                out.push(' ');
                out.push_str(tail);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_parse::{Scrape, Value};

    /// The classic format names each counter's metadata as its samples (`promtool check
    /// metrics` says "no help text" for `edgecfl_answers_total` otherwise) and ends without
    /// `# EOF`; gauges and histograms are as they were.
    #[test]
    fn the_classic_exposition_names_counters_as_their_samples() {
        let m = Metrics::new();
        m.answered("training");
        m.joined(false);
        m.bytes(10, 20);
        m.phase("training", 1.0);
        let text = m.render_classic();
        assert!(!text.contains("# EOF"), "{text}");
        for name in [
            "edgecfl_answers_total",
            "edgecfl_bytes_up_total",
            "edgecfl_bytes_down_total",
            "edgecfl_clients_joined_total",
        ] {
            assert!(text.contains(&format!("# HELP {name} ")), "{name}: {text}");
            assert!(
                text.contains(&format!("# TYPE {name} counter")),
                "{name}: {text}"
            );
        }
        assert!(text.contains("# TYPE edgecfl_round gauge"), "{text}");
        assert!(
            text.contains("# TYPE edgecfl_phase_duration_seconds histogram"),
            "{text}"
        );
        assert!(
            text.contains("edgecfl_answers_total{phase=\"training\"} 1"),
            "{text}"
        );
        let s = parse(&text);
        assert_eq!(value(&s, "edgecfl_bytes_up_total", &[]), Some(10.0));
    }

    fn parse(text: &str) -> Scrape {
        Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("valid exposition")
    }

    fn value(s: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        s.samples
            .iter()
            .find(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
            .map(|x| match &x.value {
                Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
                Value::Histogram(h) => h.iter().map(|b| b.count).fold(0.0, f64::max),
                Value::Summary(_) => f64::NAN,
            })
    }

    #[test]
    fn the_exposition_parses_with_the_values_set() {
        let m = Metrics::new();
        m.progress(2, 5, 3, 4);
        m.clients([(ClientState::Working, 6), (ClientState::Gone, 1)]);
        m.joined(false);
        m.joined(false);
        m.joined(true);
        m.late("training");
        m.dropped("gone");
        m.rejected("message", "wrong_round");
        m.rejected("message", "wrong_round");
        m.rejected("update", "norm_above");
        m.answered("training");
        m.bytes(1000, 500);
        m.bytes(1500, 400); // never back
        m.accuracy(0.75, &[Some(0.5), None, Some(1.0)]);
        m.phase("training", 3.0);
        m.phase("training", 0.05);
        let text = m.render();
        assert!(text.ends_with("# EOF\n"), "{text}");
        let s = parse(&text);
        let v = |n, l: &[(&str, &str)]| value(&s, n, l);
        assert_eq!(v("edgecfl_rounds_done", &[]), Some(2.0));
        assert_eq!(v("edgecfl_rounds_planned", &[]), Some(5.0));
        assert_eq!(v("edgecfl_round", &[]), Some(3.0));
        assert_eq!(v("edgecfl_clusters", &[]), Some(4.0));
        assert_eq!(v("edgecfl_clients", &[("state", "working")]), Some(6.0));
        assert_eq!(v("edgecfl_clients", &[("state", "answered")]), Some(0.0));
        assert_eq!(
            v("edgecfl_clients_joined_total", &[("when", "start")]),
            Some(2.0)
        );
        assert_eq!(
            v("edgecfl_clients_joined_total", &[("when", "newcomer")]),
            Some(1.0)
        );
        assert_eq!(
            v("edgecfl_clients_late_total", &[("phase", "training")]),
            Some(1.0)
        );
        assert_eq!(
            v("edgecfl_clients_dropped_total", &[("reason", "gone")]),
            Some(1.0)
        );
        assert_eq!(
            v(
                "edgecfl_rejected_total",
                &[("what", "message"), ("reason", "wrong_round")]
            ),
            Some(2.0)
        );
        assert_eq!(v("edgecfl_bytes_up_total", &[]), Some(1500.0));
        assert_eq!(v("edgecfl_bytes_down_total", &[]), Some(500.0));
        assert_eq!(v("edgecfl_accuracy", &[]), Some(0.75));
        assert_eq!(
            v("edgecfl_cluster_accuracy", &[("cluster", "2")]),
            Some(1.0)
        );
        assert_eq!(v("edgecfl_cluster_accuracy", &[("cluster", "1")]), None);
        // The histogram: both observations counted, the 0.05 s one in the first bucket.
        let h = s
            .samples
            .iter()
            .find(|x| x.metric == "edgecfl_phase_duration_seconds")
            .expect("histogram");
        let Value::Histogram(buckets) = &h.value else {
            panic!("not a histogram: {:?}", h.value)
        };
        assert_eq!(
            buckets.first().map(|b| (b.less_than, b.count)),
            Some((0.1, 1.0))
        );
        assert_eq!(buckets.last().map(|b| b.count), Some(2.0));
    }
}
