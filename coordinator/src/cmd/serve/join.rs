//! Joining: who the clients of a run are. Announced clients are pinged and join once they
//! answer; an LPS waits for exactly its cluster. Messages from outside the run are counted and
//! logged without flooding the log.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use edgecfl_shared::mqtt::{Inbound, Link};
use edgecfl_shared::protocol::{
    self, Envelope, Hello, Id, ToClient, ToCoordinator, TopicKind, Topics,
};
use tracing::{debug, info, warn};

use crate::rounds::{Rejected, Rejection, Tally, until, wait};

use super::NetFlags;

/// The fewest joined clients a run starts with: one client is no federation to cluster.
pub(super) const MIN_JOINED: usize = 2;
use super::pool::{Member, MqttPool, finish_fleet};

/// Counts a message from outside the run (an unknown or invalid client id, garbage on a status
/// topic) in `tally` and logs it: the first of each reason at warn, the rest at debug, so a flood
/// costs one warning (the counts are in `summary.json`'s `rejected`).
pub(super) fn stray(tally: &mut Tally, context: impl std::fmt::Display, id: &str, r: Rejected) {
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

/// The counts each client declared in its first `Hello` of the run (training and test samples):
/// a later `Hello`, re-sent while clients join or by a newcomer before it is admitted, may lower
/// them but never raise them. Once the clients are fixed, two caps apply as well ([`Declared::limit`]):
/// `--sample-cap K` times the median training count of the clients that joined, and in testbed
/// mode each shard's true size ([`super::testbed::Testbed`]). The training count bounds every
/// update's claimed samples and, with `--weighting samples`, weighs the averages; the test count
/// bounds an evaluation's total. A client must not raise them once it has seen the fleet, nor
/// claim a share of the fleet's data it could not hold (issue 28).
/// A client whose declared count the fleet cap lowered keeps sending its true count with its
/// updates: those are kept, weighing as the cap ([`Declared::weight_cap`]), not dropped as claiming
/// more than declared. A shard's size, known in testbed mode, is a hard bound instead (and the
/// fleet cap is then off: the sizes are exact, and a skewed split's large shard is honest).
#[derive(Debug, Default)]
pub(super) struct Declared {
    first: BTreeMap<String, (u64, u64)>,
    /// The most training samples any client may declare.
    cap: Option<u64>,
    /// The clients whose declared count the cap lowered.
    capped: BTreeSet<String>,
    /// Testbed mode: each shard index's (training, test) samples.
    shards: Option<Vec<(u64, u64)>>,
    /// Testbed mode: the client that holds each shard index (`--shard-owners`).
    owners: Option<Vec<String>>,
}

impl Declared {
    /// Caps `hello`'s counts at the lowest `id` declared before (none: these are its first) and at
    /// the caps set by [`Declared::limit`]; true when it lowered one.
    pub(super) fn hold(&mut self, id: &str, hello: &mut Hello) -> bool {
        let first = self
            .first
            .entry(id.to_string())
            .or_insert((hello.samples, hello.test_samples));
        let mut most = *first;
        if let Some(cap) = self.cap
            && most.0 > cap
        {
            most.0 = cap;
            self.capped.insert(id.to_string());
        }
        if let (Some(sizes), Some(shard)) = (&self.shards, &hello.shard)
            && let Some(&(train, test)) = sizes.get(shard.index as usize)
        {
            most = (most.0.min(train), most.1.min(test));
        }
        let asked = (hello.samples, hello.test_samples);
        let lowered = asked.0 > most.0 || asked.1 > most.1;
        hello.samples = asked.0.min(most.0);
        hello.test_samples = asked.1.min(most.1);
        *first = (hello.samples, hello.test_samples);
        if lowered {
            warn!(
                "{id}: declared {} training / {} test samples, more than it may (its first Hello, \
                 --sample-cap, its shard's size); kept {} / {}",
                asked.0, asked.1, first.0, first.1
            );
        }
        lowered
    }

    /// Sets the caps that apply once the clients are fixed: in testbed mode `shards`, each
    /// shard's true sizes; otherwise `k` times the median training count of `members` (`k = 0`:
    /// none). Then holds each member's `Hello` to them.
    pub(super) fn limit(
        &mut self,
        members: &mut [Member],
        k: u64,
        shards: Option<Vec<(u64, u64)>>,
    ) {
        let mut counts: Vec<u64> = members.iter().map(|m| m.hello.samples).collect();
        counts.sort_unstable();
        if k > 0 && !counts.is_empty() && shards.is_none() {
            // The lower median of the fleet: a few inflated counts cannot move it.
            self.cap = Some(counts[(counts.len() - 1) / 2].saturating_mul(k));
        }
        self.shards = shards;
        for m in members {
            self.hold(m.id.as_str(), &mut m.hello);
        }
    }

    /// Why client `id`'s `hello` may not claim its shard, if it may not: the shard belongs to
    /// another client (`--shard-owners`), or, without owners, `others` (the clients that joined
    /// or are queued) hold it already.
    pub(super) fn refuse_claim<'a>(
        &self,
        others: impl IntoIterator<Item = (&'a str, &'a Hello)>,
        id: &str,
        hello: &Hello,
    ) -> Option<Rejected> {
        let shard = hello.shard.as_ref()?;
        if let Some(owners) = &self.owners {
            let owner = owners.get(shard.index as usize);
            return (owner.map(String::as_str) != Some(id)).then(|| Rejected {
                reason: Rejection::ShardNotOwned,
                detail: match owner {
                    Some(o) => format!("claims shard {}, which belongs to {o}", shard.index),
                    None => format!(
                        "claims shard {}; --shard-owners names {} shards",
                        shard.index,
                        owners.len()
                    ),
                },
            });
        }
        shard_holder(others, id, hello).map(shard_taken)
    }

    /// The weight cap of client `id`'s updates: the fleet cap, if it lowered `id`'s declared
    /// count (its updates claim its true count and are kept at the cap's weight).
    pub(super) fn weight_cap(&self, id: &str) -> Option<u64> {
        self.cap.filter(|_| self.capped.contains(id))
    }
}

/// The clients of `--shard-owners FILE`, in shard order: one id per line (blank lines and `#`
/// comments skipped), each a valid client id, none twice.
pub(super) fn read_shard_owners(path: &std::path::Path) -> anyhow::Result<Vec<String>> {
    use anyhow::Context;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --shard-owners {}", path.display()))?;
    let mut owners: Vec<String> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let id = line.split('#').next().unwrap_or("").trim();
        if id.is_empty() {
            continue;
        }
        protocol::id(id).map_err(|e| {
            anyhow::anyhow!("--shard-owners {} line {}: {e}", path.display(), n + 1)
        })?;
        anyhow::ensure!(
            !owners.iter().any(|o| o == id),
            "--shard-owners {} line {}: {id} holds two shards",
            path.display(),
            n + 1
        );
        owners.push(id.to_string());
    }
    anyhow::ensure!(
        !owners.is_empty(),
        "--shard-owners {} names no client",
        path.display()
    );
    Ok(owners)
}

/// The client among `others` (other than `id`) that already holds `hello`'s shard (the same
/// partition, seed and index), if any: in testbed mode one shard is one client.
fn shard_holder<'a>(
    others: impl IntoIterator<Item = (&'a str, &'a Hello)>,
    id: &str,
    hello: &Hello,
) -> Option<&'a str> {
    let mine = hello.shard.as_ref()?;
    others.into_iter().find_map(|(other, h)| {
        let s = h.shard.as_ref()?;
        (other != id
            && s.index == mine.index
            && s.partition == mine.partition
            && s.seed == mine.seed)
            .then_some(other)
    })
}

/// A testbed client claiming a shard that `holder` already holds.
fn shard_taken(holder: &str) -> Rejected {
    Rejected {
        reason: Rejection::ShardTaken,
        detail: format!("claims the shard that {holder} holds"),
    }
}

/// An answer where only `Hello` and `Gone` belong.
pub(super) fn upload_on_status() -> Rejected {
    Rejected {
        reason: Rejection::Unexpected,
        detail: "upload on the status topic".into(),
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
        let mut declared = Declared {
            owners: net
                .shard_owners
                .as_deref()
                .map(read_shard_owners)
                .transpose()?,
            ..Declared::default()
        };
        let mut probe_bytes = 0;
        let deadline = Instant::now() + Duration::from_secs_f64(net.join_timeout);
        info!(
            "waiting for {min_clients} clients on {}/clients/+/status (timeout {:.0}s)",
            topics.prefix(),
            net.join_timeout
        );
        let ping = Envelope::new(run.clone(), 0, ToClient::Ping).to_bytes();
        if min_clients > 0 {
            wait(&mut &link, deadline, |link, ev| {
                let Inbound::Message { topic, payload, .. } = ev else {
                    return ControlFlow::Continue(());
                };
                match topics.parse(&topic) {
                    Some((id, TopicKind::Status)) => {
                        let mut announced = BTreeMap::new();
                        if let Some(r) = join_status(&mut announced, id, &payload) {
                            net.live.rejected(id, &r.reason, &r.detail);
                            stray(&mut tally, "joining", id, r);
                        } else if let Some((valid, mut hello)) = announced.remove(id) {
                            declared.hold(id, &mut hello);
                            if let Some(j) = joined.get_mut(id) {
                                j.1 = hello;
                            } else {
                                // Announced (perhaps long ago): live only if it answers.
                                if let Err(e) =
                                    link.publish(&topics.down(&valid), ping.clone(), false)
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
                                net.live.left(id);
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
                                let Some(c) = candidates.remove(id) else {
                                    return ControlFlow::Continue(());
                                };
                                let others = joined.iter().map(|(k, v)| (k.as_str(), &v.1));
                                if let Some(r) = declared.refuse_claim(others, id, &c.1) {
                                    net.live.rejected(id, &r.reason, &r.detail);
                                    stray(&mut tally, "joining", id, r);
                                    // Refused for this run: told so, it does not wait for jobs.
                                    finish_fleet(link, &topics, &run, std::iter::once(&c.0));
                                    return ControlFlow::Continue(());
                                }
                                joined.insert(id.to_string(), c);
                                info!("joined: {id} ({}/{min_clients})", joined.len());
                                net.live.joined(id);
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
                until(joined.len() >= min_clients)
            });
        }
        if !candidates.is_empty() {
            warn!(
                "joining: no answer to the ping from {} (a stale or forged Hello, or not ready yet)",
                candidates.keys().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        if joined.len() < MIN_JOINED {
            // A failed run still tells the clients it heard of to finish, so none of them
            // waits (and reconnects) forever for jobs that will never come.
            let ids = joined.values().chain(candidates.values()).map(|(id, _)| id);
            finish_fleet(&link, &topics, &run, ids);
            link.disconnect();
            anyhow::bail!(
                "only {} client(s) joined within {:.0}s; clustering needs at least {MIN_JOINED}",
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
        pool.declared = declared;
        Ok(pool)
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
        let mut hellos: BTreeMap<String, (Id, Hello)> = BTreeMap::new();
        let mut tally = Tally::default();
        let mut declared = Declared::default();
        let deadline = Instant::now() + Duration::from_secs_f64(net.join_timeout);
        if !ids.is_empty() {
            wait(&mut &link, deadline, |_, ev| {
                let Inbound::Message { topic, payload, .. } = ev else {
                    return ControlFlow::Continue(());
                };
                let Some((id, TopicKind::Status)) = topics.parse(&topic) else {
                    return ControlFlow::Continue(());
                };
                if !ids.iter().any(|m| m.as_str() == id) {
                    // Another cluster's client, or a stranger: counted, not news.
                    debug!("joining: status of {id:?}, not a member");
                    tally.add(Rejection::UnknownClient);
                    return ControlFlow::Continue(());
                }
                match join_status(&mut hellos, id, &payload) {
                    Some(r) => stray(&mut tally, "joining", id, r),
                    None => {
                        if let Some((_, h)) = hellos.get_mut(id) {
                            declared.hold(id, h);
                        }
                    }
                }
                until(hellos.len() >= ids.len())
            });
        }
        let missing: Vec<&str> = ids
            .iter()
            .map(Id::as_str)
            .filter(|id| !hellos.contains_key(*id))
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
                hello: hellos[id.as_str()].1.clone(),
                alive: true,
            })
            .collect();
        let mut pool = Self::of_members(link, topics, run, net, members, tally);
        pool.declared = declared;
        Ok(pool)
    }
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

    /// A client's first `Hello` fixes the most it may declare: a later one lowers, never raises.
    #[test]
    fn a_later_hello_cannot_raise_the_declared_counts() {
        let mut d = Declared::default();
        let h = |samples, test_samples| Hello {
            samples,
            test_samples,
            backend: protocol::text("flex"),
            shard: None,
        };
        let mut first = h(600, 100);
        assert!(!d.hold("c0", &mut first));
        assert_eq!((first.samples, first.test_samples), (600, 100));
        let mut inflated = h(600_000, 100_000);
        assert!(d.hold("c0", &mut inflated));
        assert_eq!((inflated.samples, inflated.test_samples), (600, 100));
        let mut lower = h(500, 100);
        assert!(!d.hold("c0", &mut lower));
        assert_eq!(lower.samples, 500);
        let mut again = h(600, 100);
        assert!(d.hold("c0", &mut again));
        assert_eq!(again.samples, 500, "the lowest declared sticks");
        // Each client its own.
        let mut other = h(9_000, 10);
        assert!(!d.hold("c1", &mut other));
        assert_eq!(other.samples, 9_000);
    }

    /// A testbed member `id` of shard `index` of `groups:012-34-56-789` over 4, declaring
    /// `samples`.
    fn member(id: &str, samples: u64, index: u32) -> Member {
        Member {
            id: protocol::id(id).unwrap(),
            hello: Hello {
                samples,
                test_samples: 300,
                backend: protocol::text("flex"),
                shard: Some(protocol::ShardInfo {
                    partition: protocol::text("groups:012-34-56-789"),
                    seed: 0,
                    index,
                    of: 4,
                    group: None,
                }),
            },
            alive: true,
        }
    }

    /// The caps set once the clients are fixed: `k` × the lower median, and each shard's size;
    /// a newcomer's `Hello` later is held to them too. One shard is one client.
    #[test]
    fn declared_counts_are_capped_by_the_fleet_and_the_shards() {
        let mut members = vec![
            member("c0", 450, 0),
            member("c1", 300, 1),
            member("c2", 300_000, 2),
            member("c3", 400, 3),
        ];
        let mut d = Declared::default();
        // Lower median of 300, 400, 450, 300 000: 400; k = 10: 4 000. No shard sizes.
        let mut fleet = members.clone();
        d.limit(&mut fleet, 10, None);
        let counts: Vec<u64> = fleet.iter().map(|m| m.hello.samples).collect();
        assert_eq!(counts, [450, 300, 4_000, 400]);
        // c2's updates are kept, weighing 4 000; the others' are bounded by their counts.
        assert_eq!(d.weight_cap("c2"), Some(4_000));
        assert_eq!(d.weight_cap("c0"), None);
        // A newcomer above the cap is capped too.
        let mut late = member("c8", 9_000, 9).hello;
        assert!(d.hold("c8", &mut late));
        assert_eq!((late.samples, d.weight_cap("c8")), (4_000, Some(4_000)));
        // Shard sizes (testbed): each held to its own shard's, and no fleet cap (a skewed
        // split's large shard is honest).
        let mut d = Declared::default();
        d.limit(
            &mut members,
            10,
            Some(vec![(450, 300), (300, 200), (300_000, 300), (400, 300)]),
        );
        assert_eq!(d.weight_cap("c2"), None);
        assert_eq!(members[2].hello.samples, 300_000);
        d.limit(
            &mut members,
            0,
            Some(vec![(450, 300), (300, 200), (300, 300), (400, 300)]),
        );
        let counts: Vec<(u64, u64)> = members
            .iter()
            .map(|m| (m.hello.samples, m.hello.test_samples))
            .collect();
        assert_eq!(counts, [(450, 300), (300, 200), (300, 300), (400, 300)]);
        // A newcomer declaring shard 1 again is the second holder of it.
        let newcomer = member("c9", 10, 1);
        let others = members.iter().map(|m| (m.id.as_str(), &m.hello));
        assert_eq!(shard_holder(others, "c9", &newcomer.hello), Some("c1"));
        let others = members.iter().map(|m| (m.id.as_str(), &m.hello));
        assert_eq!(
            shard_holder(others, "c1", &members[1].hello),
            None,
            "itself"
        );
        let mut elsewhere = member("c9", 10, 7);
        let others = members.iter().map(|m| (m.id.as_str(), &m.hello));
        assert_eq!(shard_holder(others, "c9", &elsewhere.hello), None);
        // Another partition's shard 1 is another shard.
        elsewhere.hello.shard.as_mut().unwrap().index = 1;
        elsewhere.hello.shard.as_mut().unwrap().seed = 5;
        let others = members.iter().map(|m| (m.id.as_str(), &m.hello));
        assert_eq!(shard_holder(others, "c9", &elsewhere.hello), None);
    }

    /// `--shard-owners`: a claim of another's shard is refused whoever claimed it first; the
    /// owner's claim is taken even where another claimed its shard before; without owners the
    /// first holder keeps it.
    #[test]
    fn a_shard_belongs_to_its_owner() {
        let members = [member("c0", 450, 0), member("c1", 300, 1)];
        let forged = member("c5", 450, 0);
        let others = || members.iter().map(|m| (m.id.as_str(), &m.hello));
        let first_come = Declared::default();
        let r = first_come
            .refuse_claim(others(), "c5", &forged.hello)
            .expect("c0 holds shard 0");
        assert_eq!(r.reason, Rejection::ShardTaken);
        assert!(
            first_come
                .refuse_claim(others(), "c0", &members[0].hello)
                .is_none()
        );

        let owned = Declared {
            owners: Some(["c0", "c1", "c2"].map(String::from).to_vec()),
            ..Declared::default()
        };
        let r = owned
            .refuse_claim(std::iter::empty(), "c5", &forged.hello)
            .expect("shard 0 is c0's");
        assert_eq!(r.reason, Rejection::ShardNotOwned);
        assert!(r.detail.contains("belongs to c0"), "{}", r.detail);
        // The owner, after a forger that claimed its shard first.
        let holders = [member("c5", 450, 0)];
        let after_forger = holders.iter().map(|m| (m.id.as_str(), &m.hello));
        assert!(
            owned
                .refuse_claim(after_forger, "c0", &members[0].hello)
                .is_none()
        );
        // A shard no line names.
        let beyond = member("c9", 10, 7);
        let r = owned
            .refuse_claim(std::iter::empty(), "c9", &beyond.hello)
            .expect("no owner");
        assert!(r.detail.contains("names 3 shards"), "{}", r.detail);

        let dir = std::env::temp_dir().join(format!("edgecfl-owners-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("shard-owners.txt");
        std::fs::write(&file, "# shard index = line\nc0\n\nc1 # the second\n").unwrap();
        assert_eq!(read_shard_owners(&file).unwrap(), ["c0", "c1"]);
        std::fs::write(&file, "c0\nc0\n").unwrap();
        let e = read_shard_owners(&file).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("two shards"), "{e}");
        std::fs::write(&file, "c0\nbad/id\n").unwrap();
        assert!(
            read_shard_owners(&file)
                .unwrap_err()
                .to_string()
                .contains("line 2")
        );
        std::fs::write(&file, "# nobody\n").unwrap();
        assert!(
            read_shard_owners(&file)
                .unwrap_err()
                .to_string()
                .contains("names no client")
        );
        std::fs::remove_dir_all(&dir).unwrap();
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
