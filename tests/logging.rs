//! `--log` and `--log-format` of the binaries: JSON lines on stderr for fleets, and a filter that
//! hides what is below its level. The edge client is pointed at a closed port and gives up after
//! one attempt, which logs at info (start), warn (the failed attempt) and error (giving up).

use std::process::{Command, Output};

use edgecfl_tests::{bin, bundled_data};
use serde_json::Value;

/// `edge-client run` against a port nothing listens on, giving up at the first failure.
fn unreachable_client(log_args: &[&str]) -> Output {
    let o = Command::new(bin("edge-client"))
        .args(["run", "--broker", "mqtt://127.0.0.1:1", "--id", "c0"])
        .args(["--connect-retries", "1"])
        .arg("--data")
        .arg(bundled_data())
        .args(log_args)
        .env_remove("EDGECFL_LOG")
        .env_remove("EDGECFL_LOG_FORMAT")
        .output()
        .unwrap();
    assert!(!o.status.success(), "nothing listens on port 1");
    o
}

#[test]
fn json_lines_on_stderr() {
    let o = unreachable_client(&["--log-format", "json"]);
    assert!(o.stdout.is_empty(), "logs go to stderr only");
    let err = String::from_utf8(o.stderr).unwrap();
    let lines: Vec<Value> = err
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let levels: Vec<&str> = lines.iter().filter_map(|v| v["level"].as_str()).collect();
    assert_eq!(levels.len(), lines.len(), "every line has a level:\n{err}");
    for want in ["INFO", "WARN", "ERROR"] {
        assert!(levels.contains(&want), "no {want} line:\n{err}");
    }
    let attempt = lines
        .iter()
        .find(|v| v["level"] == "WARN")
        .and_then(|v| v["fields"]["message"].as_str())
        .unwrap_or_else(|| panic!("no message field:\n{err}"));
    assert!(
        attempt.contains("connection attempt 1 to mqtt://127.0.0.1:1 failed"),
        "{attempt}"
    );
    assert!(lines.iter().all(|v| v["target"].is_string()), "{err}");
}

#[test]
fn filter_hides_lower_levels() {
    let all = String::from_utf8(unreachable_client(&[]).stderr).unwrap();
    assert!(
        all.contains(" INFO ") && all.contains("connecting to"),
        "{all}"
    );
    let quiet = String::from_utf8(unreachable_client(&["--log", "warn"]).stderr).unwrap();
    assert!(!quiet.contains(" INFO "), "{quiet}");
    assert!(!quiet.contains("connecting to"), "{quiet}");
    assert!(
        quiet.contains(" WARN ") && quiet.contains("connection attempt 1"),
        "{quiet}"
    );
    assert!(
        quiet.contains("ERROR") && quiet.contains("gave up"),
        "{quiet}"
    );
    // Per target: the run module silenced, the binary's own error kept.
    let targeted = unreachable_client(&["--log", "info,edge_client::run=off"]);
    let targeted = String::from_utf8(targeted.stderr).unwrap();
    assert!(!targeted.contains("connection attempt 1 to"), "{targeted}");
    assert!(targeted.contains("gave up"), "{targeted}");
}

#[test]
fn bad_filter_is_a_usage_error() {
    let o = Command::new(bin("edge-client"))
        .args(["--log", "info,edge_client=loud", "run", "--id", "c0"])
        .args(["--broker", "mqtt://127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "clap's usage error");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--log"));
}
