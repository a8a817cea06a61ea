//! The integration tests of `edgecfl-shared`, one binary: each file beside this one is a module
//! of it (`cargo test -p edgecfl-shared --test suite cohort::` runs one file's tests). One binary
//! links burn and the test harness once instead of once a file, which was most of the test build's
//! time. `autotests = false` in `shared/Cargo.toml`, so a new file is added here (the test at the
//! end fails until it is); `fuzz_wire.rs` (run for a set time by `scripts/test.sh fuzz`) and
//! `gpu_backends.rs` (only with a GPU backend's feature) stay binaries of their own.

mod common;
mod real_data;

mod adacfl_sim;
mod autocut_fixture;
mod cohort;
mod data_formats;
mod data_partition;
mod dropout_sim;
mod fedclust_sim;
mod fesem_fedprox_sim;
mod flex_kernels;
mod hc_scipy;
mod ifca_sim;
mod jobs;
mod layers;
mod lps_protocol;
mod model_train;
mod mthfl;
mod mthfl_eigen;
mod mthfl_protocol;
mod mthfl_sim;
mod newcomers_sim;
mod pacfl_sim;
mod plan;
mod protocol;
mod resume_sim;
mod sim_shift;
mod stocfl_sim;
mod train_prox;
mod trust_sim;

/// Every test file of this folder is a module above (or one of the two binaries of its own), so no
/// test is left out of the build by `autotests = false`.
#[test]
fn every_test_file_is_in_the_suite() {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let source = include_str!("suite.rs");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&here).expect("shared/tests") {
        let name = entry
            .expect("an entry")
            .file_name()
            .into_string()
            .expect("UTF-8");
        let Some(stem) = name.strip_suffix(".rs") else {
            continue;
        };
        if ["suite", "fuzz_wire", "gpu_backends"].contains(&stem) {
            continue;
        }
        if !source.lines().any(|l| l == format!("mod {stem};")) {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "not declared in shared/tests/suite.rs: {missing:?}"
    );
}
