//! The library's layers point down (ARCHITECTURE.md): a module's code (its unit tests left out)
//! names no module above it. Read from the sources, so a new upward import fails here, naming
//! the file and line.

use std::fs;
use std::path::{Path, PathBuf};

/// Each layer, and the modules above it that it must not name.
const RULES: &[(&str, &[&str])] = &[
    ("src/federation", &["algorithms", "sim", "mqtt"]),
    ("src/jobs", &["algorithms", "federation", "sim", "mqtt"]),
    (
        "src/cluster",
        &["algorithms", "federation", "jobs", "sim", "mqtt"],
    ),
    (
        "src/protocol",
        &[
            "algorithms",
            "federation",
            "jobs",
            "cluster",
            "sim",
            "mqtt",
            "train",
        ],
    ),
];

fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// The lines of `text` before its unit tests, comments left out, with their numbers.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .take_while(|(_, l)| l.trim() != "#[cfg(test)]")
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .map(|(i, l)| (i + 1, l))
}

/// Every `crate::<module>` that `line` names among `banned`.
fn upward<'a>(line: &str, banned: &[&'a str]) -> Vec<&'a str> {
    banned
        .iter()
        .filter(|m| {
            let needle = format!("crate::{m}");
            line.match_indices(&needle).any(|(at, _)| {
                let rest = &line[at + needle.len()..];
                !rest.starts_with(|c: char| c.is_alphanumeric() || c == '_')
            })
        })
        .copied()
        .collect()
}

#[test]
fn no_layer_names_a_module_above_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for (layer, banned) in RULES {
        let files = sources(&root.join(layer));
        assert!(!files.is_empty(), "{layer} has no sources");
        for file in files {
            let text = fs::read_to_string(&file).unwrap();
            for (n, line) in code_lines(&text) {
                for m in upward(line, banned) {
                    found.push(format!(
                        "{}:{n} names crate::{m}: {}",
                        file.display(),
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "imports pointing up:\n{}",
        found.join("\n")
    );
}

/// The check itself: an upward name is found, a longer module name or a comment is not.
#[test]
fn an_upward_import_is_found() {
    let banned = &["algorithms", "sim"];
    assert_eq!(
        upward("use crate::algorithms::Algorithm;", banned),
        ["algorithms"]
    );
    assert_eq!(upward("    x: crate::sim::SimPool,", banned), ["sim"]);
    assert!(upward("use crate::simd::Lane;", banned).is_empty());
    let text =
        "use crate::train;\n// crate::algorithms in a comment\n#[cfg(test)]\nuse crate::sim;";
    let lines: Vec<_> = code_lines(text).collect();
    assert_eq!(lines, [(1, "use crate::train;")]);
}
