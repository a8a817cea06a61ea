//! Committed results and fixtures name no path of the machine that made them (issue 25 §5).
//!
//! Every text file under `bench-results/`, `cross/results/` and `coordinator/tests/fixtures/`
//! is read; a file holding something that looks like an absolute path of a machine (a home,
//! temporary or working directory: `/root/`, `/home/`, `/tmp/`, `/work/`, `/Users/`, `C:\`, …)
//! fails the test, which lists every such file with its first offending line. Commands and
//! results name paths relative to the repository (`--out bench-results/...`); system paths that
//! are the same on every Debian machine (`/usr/share/datasets/...`, `/usr/bin/time`) are fine.

use std::path::{Path, PathBuf};

use edgecfl_tests::root;

/// The committed directories of results and fixtures, relative to the repository root.
const SCANNED: &[&str] = &[
    "bench-results",
    "cross/results",
    "coordinator/tests/fixtures",
];

/// Prefixes of paths that belong to one machine or one user.
const MACHINE_PATHS: &[&str] = &[
    "/root/",
    "/home/",
    "/tmp/",
    "/var/tmp/",
    "/var/folders/",
    "/work/",
    "/Users/",
    "/private/",
    "/mnt/",
    "/opt/",
    "C:\\",
    "C:/",
];

/// Where in `line` a machine path starts, if anywhere: a prefix at the start of the line or
/// after a character that cannot be part of a path (`"/work/x"`, ` /tmp/x`, `=/home/x`), so
/// `https://host/home/` or `a/tmp/b` (relative) do not count.
fn machine_path(line: &str) -> Option<(usize, &'static str)> {
    MACHINE_PATHS.iter().find_map(|prefix| {
        line.match_indices(prefix).find_map(|(at, _)| {
            let before = line[..at].chars().next_back();
            let starts_a_path = before.is_none_or(|c| {
                !(c.is_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '~' | '\\' | ':'))
            });
            starts_a_path.then_some((at, *prefix))
        })
    })
}

fn text_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            text_files(&path, found);
        } else {
            found.push(path);
        }
    }
}

/// `(file, line number, line)` of the first machine path of each file of `dirs` under `root`.
fn offenders(root: &Path, dirs: &[&str]) -> Vec<(PathBuf, usize, String)> {
    let mut files = Vec::new();
    for dir in dirs {
        text_files(&root.join(dir), &mut files);
    }
    files.sort();
    files
        .into_iter()
        .filter_map(|file| {
            let bytes = std::fs::read(&file).expect("readable file");
            // Binary files (images, compressed data) hold no readable path.
            let text = String::from_utf8(bytes)
                .ok()
                .filter(|t| !t.contains('\0'))?;
            text.lines().enumerate().find_map(|(n, line)| {
                machine_path(line).map(|(at, _)| {
                    let from = line[..at]
                        .char_indices()
                        .rev()
                        .nth(40)
                        .map_or(0, |(i, _)| i);
                    let excerpt: String = line[from..].chars().take(120).collect();
                    let rel = file.strip_prefix(root).unwrap_or(&file).to_path_buf();
                    (rel, n + 1, excerpt)
                })
            })
        })
        .collect()
}

#[test]
fn committed_results_and_fixtures_hold_no_absolute_path_of_a_machine() {
    let root = root();
    for dir in SCANNED {
        assert!(root.join(dir).is_dir(), "{dir} is missing");
    }
    let found = offenders(&root, SCANNED);
    assert!(
        found.is_empty(),
        "{} committed file(s) hold an absolute path of the machine that wrote them; write paths \
         relative to the repository (e.g. `--out bench-results/...`) or a placeholder \
         (`<venv>/bin/python3`, `$CARGO_HOME/registry/...`):\n{}",
        found.len(),
        found
            .iter()
            .map(|(f, n, l)| format!("  {}:{n}: …{l}", f.display()))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn machine_paths_are_recognised_and_relative_ones_are_not() {
    for line in [
        r#"    "out": "/tmp/edgecfl-pinned-fedavg-27882","#,
        r#"  "torch_python": "/root/.pyenv/versions/3.11.7/bin/python3","#,
        "at /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/ash-0.38.0/src/device.rs",
        "/work/main/target/release/edge-client bench",
        "--out=/home/alice/runs",
        r"C:\Users\alice\edgecfl",
        "cd /Users/alice && run",
    ] {
        assert!(machine_path(line).is_some(), "not recognised: {line}");
    }
    for line in [
        r#"    "out": "bench-results/upload-encoding/f32","#,
        "EDGECFL_FMNIST_DIR=/usr/share/datasets/fashion-mnist /usr/bin/time -v",
        "https://example.org/home/page",
        "target/tmp/x and results/work/y",
        "$CARGO_HOME/registry/src/index.crates.io-1949cf8c6b5b557f/ash-0.38.0",
        "<venv>/bin/python3",
    ] {
        assert!(machine_path(line).is_none(), "recognised: {line}");
    }
}
