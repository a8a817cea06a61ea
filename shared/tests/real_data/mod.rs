//! The real data sets beside the repository (`../shared/data`, or the folder in
//! `EDGECFL_TEST_DATA`) for the tests that read them. Without them such a test says so in one line
//! and passes; with `EDGECFL_REQUIRE_TEST_DATA=1` (`.ci/run` sets it) it fails instead.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `what` (e.g. `mnist`) among the real data sets, or `None` after printing why the test is
/// skipped.
///
/// # Panics
///
/// When it is missing and `EDGECFL_REQUIRE_TEST_DATA=1`.
pub fn real_data(what: &str) -> Option<PathBuf> {
    let root = std::env::var_os("EDGECFL_TEST_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"));
    let dir = root.join(what);
    if dir.is_dir() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("EDGECFL_REQUIRE_TEST_DATA").is_none_or(|v| v != "1"),
        "{} is missing, and EDGECFL_REQUIRE_TEST_DATA=1 makes the tests that read it mandatory",
        dir.display()
    );
    eprintln!(
        "skipped: needs {} (the real data sets beside the repository)",
        dir.display()
    );
    None
}

/// CIFAR-10's JPEG copy (`cifar10-jpg/cifar10-jpg.tar.gz`), unpacked once under the target
/// directory (`CARGO_TARGET_TMPDIR/cifar10-jpg`, with `tar`): its image folder.
pub fn cifar10_jpg() -> Option<PathBuf> {
    let tarball = real_data("cifar10-jpg")?.join("cifar10-jpg.tar.gz");
    let dest = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cifar10-jpg");
    if dest.join("train").is_dir() && dest.join("test").is_dir() {
        return Some(dest);
    }
    // Unpacked beside, then renamed: a test binary running at the same time sees all or nothing.
    let part = dest.with_extension(format!("part-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&part);
    std::fs::create_dir_all(&part).expect("a folder under the target directory");
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(&tarball)
        .arg("-C")
        .arg(&part)
        .status()
        .expect("tar runs");
    assert!(status.success(), "tar -xzf {} failed", tarball.display());
    if std::fs::rename(&part, &dest).is_err() {
        // Another process got there first.
        let _ = std::fs::remove_dir_all(&part);
    }
    Some(dest)
}
