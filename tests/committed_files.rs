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

// The documents: the README, the top-level pages and the book under `docs/` (issue 54).

/// The top-level documents whose links are checked with the book's chapters.
const DOCUMENTS: &[&str] = &[
    "README.md",
    "ARCHITECTURE.md",
    "BENCHMARKS.md",
    "hardware.md",
];

/// The README stays a front page: what it is, the two commands, a fleet, links into the book.
const README_LINES: usize = 200;

/// The book's chapters, `docs/src/**/*.md`, relative to the repository root.
fn chapters(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    text_files(&root.join("docs/src"), &mut files);
    let mut md: Vec<PathBuf> = files
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "md"))
        .map(|f| f.strip_prefix(root).unwrap().to_path_buf())
        .collect();
    md.sort();
    md
}

/// The targets of the Markdown links and images of `text` outside code (`[a](t)`, `![a](t)`).
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence {
            continue;
        }
        // Inline code holds no link.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let tail = &rest[at + 2..];
            let Some(end) = tail.find(')') else { break };
            out.push(tail[..end].to_string());
            rest = &tail[end..];
        }
    }
    out
}

/// The anchor GitHub and mdBook give a heading: lower case, spaces as `-`, punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of `text`'s headings.
fn anchors(text: &str) -> Vec<String> {
    let mut fence = false;
    text.lines()
        .filter(|l| {
            if l.starts_with("```") {
                fence = !fence;
            }
            !fence && l.starts_with('#')
        })
        .map(|l| slug(l.trim_start_matches('#').replace('`', "").as_str()))
        .collect()
}

#[test]
fn every_link_of_the_documents_resolves_and_the_book_lists_every_chapter() {
    let root = root();
    let chapters = chapters(&root);
    let summary = std::fs::read_to_string(root.join("docs/src/SUMMARY.md")).expect("SUMMARY.md");
    let listed = links(&summary);
    for chapter in &chapters {
        let name = chapter.strip_prefix("docs/src").unwrap();
        if name == Path::new("SUMMARY.md") {
            continue;
        }
        assert!(
            listed.iter().any(|l| Path::new(l) == name),
            "docs/src/SUMMARY.md does not list {}",
            name.display()
        );
    }
    let mut broken = Vec::new();
    let files = DOCUMENTS.iter().map(PathBuf::from).chain(chapters);
    for file in files {
        let text = std::fs::read_to_string(root.join(&file)).expect("readable document");
        let dir = file.parent().unwrap_or(Path::new(""));
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                dir.join(path)
            };
            let full = root.join(&resolved);
            if !full.exists() {
                broken.push(format!(
                    "{}: {target} (no {})",
                    file.display(),
                    resolved.display()
                ));
                continue;
            }
            if !anchor.is_empty() && full.extension().is_some_and(|e| e == "md") {
                let there = std::fs::read_to_string(&full).expect("readable document");
                if !anchors(&there).iter().any(|a| a == anchor) {
                    broken.push(format!(
                        "{}: {target} (no heading #{anchor})",
                        file.display()
                    ));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "broken links:\n  {}",
        broken.join("\n  ")
    );
}

#[test]
fn links_and_anchors_are_read_as_github_does() {
    assert_eq!(
        links("see [a](x.md#b), ![p](i.png) and `[c](code)`\n```\n[d](e)\n```\n[f](g)"),
        ["x.md#b", "i.png", "g"]
    );
    assert_eq!(
        slug("Newcomers (FedClust Algorithm 2)"),
        "newcomers-fedclust-algorithm-2"
    );
    assert_eq!(slug("LPS on another machine"), "lps-on-another-machine");
    assert_eq!(anchors("# A b\n```\n# not\n```\n## `c` d"), ["a-b", "c-d"]);
}

#[test]
fn the_readme_is_a_front_page() {
    let text = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let lines = text.lines().count();
    assert!(
        lines <= README_LINES,
        "README.md has {lines} lines (at most {README_LINES}): the details go into a chapter of \
         the book (docs/src/)"
    );
}

/// The command-line reference of the book is each binary's `--help`, so it cannot drift: run
/// with `EDGECFL_BLESS=1` to write it again after changing a flag.
#[test]
fn the_command_line_reference_is_the_binaries_help() {
    let root = root();
    for binary in ["coordinator", "edge-client"] {
        let file = root.join(format!("docs/src/reference/{binary}.md"));
        let now = reference(binary);
        if std::env::var_os("EDGECFL_BLESS").is_some() {
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, &now).unwrap();
            continue;
        }
        let committed = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(
            committed == now,
            "{} is not `{binary} --help` (rerun this test with EDGECFL_BLESS=1 to write it)",
            file.display()
        );
    }
}

/// `binary --help` and each of its commands' `--help`, as a chapter.
fn reference(binary: &str) -> String {
    let help = |args: &[&str]| {
        let mut cmd = std::process::Command::new(edgecfl_tests::bin(binary));
        cmd.args(args).arg("--help");
        // The help shows an environment variable's value when it is set.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("EDGECFL_") {
                cmd.env_remove(name);
            }
        }
        let out = cmd.output().expect("the binary runs");
        assert!(out.status.success(), "{binary} {args:?} --help failed");
        String::from_utf8(out.stdout).expect("UTF-8 help")
    };
    let top = help(&[]);
    let commands: Vec<String> = top
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    assert!(
        !commands.is_empty(),
        "no commands in {binary} --help:\n{top}"
    );
    let mut text = format!(
        "# `{binary}`\n\n<!-- Written by tests/committed_files.rs from `{binary} --help` \
         (EDGECFL_BLESS=1 writes it again). -->\n\n```text\n{top}```\n"
    );
    for c in &commands {
        text.push_str(&format!(
            "\n## `{binary} {c}`\n\n```text\n{}```\n",
            help(&[c.as_str()])
        ));
    }
    text
}
