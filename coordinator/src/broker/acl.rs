//! mosquitto's `acl_file` format, enforced by the embedded broker's gate ([`super::gate`]) and
//! written by `coordinator credentials`, so one file serves both brokers.
//!
//! The subset of mosquitto 2.0 that is read (anything else is an error, never ignored):
//!
//! ```text
//! # comment
//! topic [read|write|readwrite|deny] <topic>     # before any `user` line: anonymous clients
//! user <username>                               # the `topic` lines after it are this user's
//! pattern [read|write|readwrite|deny] <topic>   # every user; %u = username, %c = client id
//! ```
//!
//! Without an access word the line grants `readwrite`. Topics may hold `+` and `#`. A `deny` rule
//! that matches wins over every grant. Semantics, as in mosquitto: a publish on topic `T` (and a
//! last will) needs a `write`/`readwrite` rule matching `T`; a subscription to filter `F` needs a
//! `read`/`readwrite` rule that covers every topic `F` can match (mosquitto checks each message
//! on delivery instead; requiring cover at subscription time is stricter, never looser). A
//! `%u`/`%c` substitution must be a whole topic level, and a username or client id holding `+`,
//! `#` or `/` never matches a pattern. Wildcards in the first level do not match `$` topics.

use std::collections::BTreeMap;
use std::path::Path;

/// Errors of an ACL file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AclError {
    /// The file could not be read.
    #[error("cannot read the ACL file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not understood.
    #[error("ACL file line {line}: {reason}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
}

/// What a rule grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Subscribe and receive.
    Read,
    /// Publish.
    Write,
    /// Both.
    ReadWrite,
    /// Nothing, overriding grants.
    Deny,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    access: Access,
    topic: String,
}

/// A parsed ACL file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acl {
    anonymous: Vec<Rule>,
    users: BTreeMap<String, Vec<Rule>>,
    patterns: Vec<Rule>,
}

fn split_rule(rest: &str) -> Result<Rule, String> {
    let rest = rest.trim();
    let (access, topic) = match rest.split_once(char::is_whitespace) {
        Some(("read", t)) => (Access::Read, t.trim()),
        Some(("write", t)) => (Access::Write, t.trim()),
        Some(("readwrite", t)) => (Access::ReadWrite, t.trim()),
        Some(("deny", t)) => (Access::Deny, t.trim()),
        _ => (Access::ReadWrite, rest),
    };
    if topic.is_empty() {
        return Err("no topic".into());
    }
    if !valid_filter(topic) {
        return Err(format!("{topic:?} is not a valid topic filter"));
    }
    Ok(Rule {
        access,
        topic: topic.to_string(),
    })
}

/// `+` and `#` only as whole levels, `#` only last.
fn valid_filter(f: &str) -> bool {
    let levels: Vec<&str> = f.split('/').collect();
    levels.iter().enumerate().all(|(i, l)| {
        if l.contains('#') {
            *l == "#" && i + 1 == levels.len()
        } else {
            !l.contains('+') || *l == "+"
        }
    })
}

impl Acl {
    /// Parses an ACL file's text.
    pub fn parse(text: &str) -> Result<Self, AclError> {
        let mut acl = Acl::default();
        let mut user: Option<String> = None;
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |reason: String| AclError::Line {
                line: i + 1,
                reason,
            };
            let (word, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            match word {
                "user" => {
                    let name = rest.trim();
                    if name.is_empty() {
                        return Err(bad("`user` without a name".into()));
                    }
                    acl.users.entry(name.to_string()).or_default();
                    user = Some(name.to_string());
                }
                "topic" => {
                    let rule = split_rule(rest).map_err(bad)?;
                    match &user {
                        Some(u) => acl.users.entry(u.clone()).or_default().push(rule),
                        None => acl.anonymous.push(rule),
                    }
                }
                "pattern" => acl.patterns.push(split_rule(rest).map_err(bad)?),
                w => return Err(bad(format!("unknown keyword {w:?}"))),
            }
        }
        Ok(acl)
    }

    /// Reads and parses an ACL file.
    pub fn load(path: &Path) -> Result<Self, AclError> {
        let text = std::fs::read_to_string(path).map_err(|source| AclError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text)
    }

    /// The rules that apply to a client, patterns substituted (`None` for a pattern that cannot
    /// apply to it).
    fn rules(&self, user: Option<&str>, client_id: &str) -> Vec<(Access, String)> {
        let mut out: Vec<(Access, String)> = match user {
            None => self.anonymous.iter(),
            Some(u) => self.users.get(u).map_or([].iter(), |r| r.iter()),
        }
        .map(|r| (r.access, r.topic.clone()))
        .collect();
        let safe = |s: &str| !s.is_empty() && !s.contains(['+', '#', '/']);
        for p in &self.patterns {
            let mut ok = true;
            let topic: Vec<String> = p
                .topic
                .split('/')
                .map(|level| match level {
                    "%u" => match user {
                        Some(u) if safe(u) => u.to_string(),
                        _ => {
                            ok = false;
                            String::new()
                        }
                    },
                    "%c" if safe(client_id) => client_id.to_string(),
                    "%c" => {
                        ok = false;
                        String::new()
                    }
                    l => l.to_string(),
                })
                .collect();
            if ok {
                out.push((p.access, topic.join("/")));
            }
        }
        out
    }

    /// May this client publish on `topic` (a topic name, no wildcard)?
    pub fn may_publish(&self, user: Option<&str>, client_id: &str, topic: &str) -> bool {
        if topic.contains(['+', '#']) {
            return false;
        }
        let rules = self.rules(user, client_id);
        let t: Vec<&str> = topic.split('/').collect();
        let hit = |r: &str| covers(&r.split('/').collect::<Vec<_>>(), &t);
        !rules.iter().any(|(a, r)| *a == Access::Deny && hit(r))
            && rules
                .iter()
                .any(|(a, r)| matches!(a, Access::Write | Access::ReadWrite) && hit(r))
    }

    /// May this client subscribe to `filter`?
    pub fn may_subscribe(&self, user: Option<&str>, client_id: &str, filter: &str) -> bool {
        if !valid_filter(filter) {
            return false;
        }
        let rules = self.rules(user, client_id);
        let f: Vec<&str> = filter.split('/').collect();
        let levels = |r: &str| r.split('/').map(str::to_string).collect::<Vec<_>>();
        !rules.iter().any(|(a, r)| {
            *a == Access::Deny
                && intersects(
                    &levels(r).iter().map(String::as_str).collect::<Vec<_>>(),
                    &f,
                )
        }) && rules.iter().any(|(a, r)| {
            matches!(a, Access::Read | Access::ReadWrite)
                && covers(&r.split('/').collect::<Vec<_>>(), &f)
        })
    }
}

/// Does MQTT filter `filter` match topic name `topic`?
pub fn filter_matches(filter: &str, topic: &str) -> bool {
    !topic.contains(['+', '#'])
        && covers(
            &filter.split('/').collect::<Vec<_>>(),
            &topic.split('/').collect::<Vec<_>>(),
        )
}

/// Does rule filter `r` match every topic that filter (or topic) `f` matches?
fn covers(r: &[&str], f: &[&str]) -> bool {
    // Wildcards in the first level never match `$SYS`-like topics.
    if let (Some(rl), Some(fl)) = (r.first(), f.first())
        && (*rl == "+" || *rl == "#")
        && fl.starts_with('$')
    {
        return false;
    }
    fn go(r: &[&str], f: &[&str]) -> bool {
        match (r.first(), f.first()) {
            (Some(&"#"), _) => true,
            (None, None) => true,
            (Some(&"+"), Some(fl)) if *fl != "#" => go(&r[1..], &f[1..]),
            (Some(rl), Some(fl)) if rl == fl && *fl != "+" && *fl != "#" => go(&r[1..], &f[1..]),
            _ => false,
        }
    }
    go(r, f)
}

/// Can filters `a` and `b` both match some topic?
fn intersects(a: &[&str], b: &[&str]) -> bool {
    match (a.first(), b.first()) {
        (Some(&"#"), _) | (_, Some(&"#")) => true,
        (None, None) => true,
        (Some(x), Some(y)) if *x == "+" || *y == "+" || x == y => intersects(&a[1..], &b[1..]),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLEET: &str = "\
# edge clients
pattern write f/clients/%u/status
pattern write f/clients/%u/up
pattern read f/clients/%u/down
pattern read f/broadcast

user coordinator
topic readwrite f/#

user lps-0
topic write f/lps/lps-0/up
topic read f/clients/+/up
topic write f/clients/+/down
topic deny f/clients/boss/down
";

    #[test]
    fn clients_publish_only_under_their_own_id() {
        let acl = Acl::parse(FLEET).unwrap();
        assert!(acl.may_publish(Some("c1"), "c1", "f/clients/c1/up"));
        assert!(acl.may_publish(Some("c1"), "c1", "f/clients/c1/status"));
        assert!(!acl.may_publish(Some("c1"), "c1", "f/clients/c2/up"));
        assert!(!acl.may_publish(Some("c1"), "c1", "f/clients/c2/status"));
        assert!(!acl.may_publish(Some("c1"), "c1", "f/clients/c1/down"));
        assert!(!acl.may_publish(Some("c1"), "c1", "f/lps/c1/up"));
        assert!(!acl.may_publish(Some("c1"), "c1", "f/broadcast"));
        assert!(!acl.may_publish(Some("c1"), "c1", "f/clients/c1/up/x"));
        assert!(!acl.may_publish(Some("c1"), "c1", "f/clients/+/up"));
        // Anonymous: no rule at all.
        assert!(!acl.may_publish(None, "c1", "f/clients/c1/up"));
        // A username that would widen a pattern matches nothing.
        assert!(!acl.may_publish(Some("+"), "x", "f/clients/+/up"));
        assert!(!acl.may_subscribe(Some("#"), "x", "f/clients/#/down"));
    }

    #[test]
    fn subscriptions_need_a_covering_read_rule() {
        let acl = Acl::parse(FLEET).unwrap();
        assert!(acl.may_subscribe(Some("c1"), "c1", "f/clients/c1/down"));
        assert!(acl.may_subscribe(Some("c1"), "c1", "f/broadcast"));
        assert!(!acl.may_subscribe(Some("c1"), "c1", "f/clients/c2/down"));
        assert!(!acl.may_subscribe(Some("c1"), "c1", "f/clients/+/down"));
        assert!(!acl.may_subscribe(Some("c1"), "c1", "f/#"));
        assert!(!acl.may_subscribe(Some("c1"), "c1", "#"));
        assert!(acl.may_subscribe(Some("coordinator"), "x", "f/clients/+/status"));
        assert!(acl.may_subscribe(Some("coordinator"), "x", "f/#"));
        assert!(!acl.may_subscribe(Some("coordinator"), "x", "g/#"));
        assert!(!acl.may_subscribe(Some("coordinator"), "x", "#"));
        assert!(acl.may_subscribe(Some("lps-0"), "x", "f/clients/c3/up"));
        assert!(acl.may_subscribe(Some("lps-0"), "x", "f/clients/+/up"));
        assert!(!acl.may_subscribe(Some("lps-0"), "x", "f/clients/#"));
    }

    #[test]
    fn deny_wins_and_dollar_topics_escape_wildcards() {
        let acl = Acl::parse(FLEET).unwrap();
        assert!(acl.may_publish(Some("lps-0"), "x", "f/clients/c3/down"));
        assert!(!acl.may_publish(Some("lps-0"), "x", "f/clients/boss/down"));
        let acl = Acl::parse("user a\ntopic #\ntopic read $SYS/#\n").unwrap();
        assert!(acl.may_publish(Some("a"), "a", "x/y"));
        assert!(!acl.may_publish(Some("a"), "a", "$SYS/x"));
        assert!(acl.may_subscribe(Some("a"), "a", "$SYS/broker/#"));
        let acl = Acl::parse("user b\ntopic +/x\n").unwrap();
        assert!(acl.may_publish(Some("b"), "b", "a/x"));
        assert!(!acl.may_publish(Some("b"), "b", "$SYS/x"));
        assert!(!acl.may_subscribe(Some("b"), "b", "$SYS/x"));
    }

    #[test]
    fn client_id_patterns_and_anonymous_rules() {
        let acl = Acl::parse("topic read pub/#\npattern write dev/%c/state\n").unwrap();
        assert!(acl.may_subscribe(None, "anon", "pub/x"));
        assert!(acl.may_publish(None, "d7", "dev/d7/state"));
        assert!(!acl.may_publish(None, "d7", "dev/d8/state"));
        assert!(!acl.may_publish(None, "a/b", "dev/a/b/state"));
        // A user without a block gets only the patterns.
        assert!(!acl.may_subscribe(Some("u"), "d7", "pub/x"));
        assert!(acl.may_publish(Some("u"), "d7", "dev/d7/state"));
    }

    #[test]
    fn bad_lines_are_errors() {
        for bad in [
            "topic",
            "user",
            "pattern write a/#/b",
            "topic a+/b",
            "group x",
        ] {
            assert!(Acl::parse(bad).is_err(), "{bad}");
        }
    }
}
