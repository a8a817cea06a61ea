//! `coordinator simulate`: the whole federation in this process (clients are [`SimPool`]s).

use anyhow::Context;
use edgecfl_shared::algorithms;
use edgecfl_shared::data::partition::partition_of;
use edgecfl_shared::federation::{RunContext, RunResult};
use edgecfl_shared::sim::SimPool;
use tracing::info;

use crate::cmd::export;
use crate::config::RunConfig;
use crate::live::Live;
use crate::plots;
use crate::report::{self, Progress};

/// Runs `cfg` in process, writes the result files into `cfg.out` and returns the result;
/// `live` (off unless `--http`) follows it.
pub fn run(cfg: &RunConfig, live: &Live) -> anyhow::Result<RunResult> {
    let result = run_inner(cfg, live);
    live.finished(&result);
    result
}

fn run_inner(cfg: &RunConfig, live: &Live) -> anyhow::Result<RunResult> {
    let dataset = cfg.method.federation.dataset;
    let data = edgecfl_shared::data::load(dataset, cfg.data.as_deref())
        .with_context(|| format!("loading {}", dataset.info().name))?;
    info!(
        "data: {} from {} ({} train / {} test images)",
        dataset.info().name,
        data.source,
        data.train.len(),
        data.test.len()
    );
    let part = partition_of(
        &cfg.partition,
        &data.train.labels,
        dataset.info().classes(),
        data.writers.as_ref(),
        cfg.clients,
        cfg.method.federation.seed,
    )
    .with_context(|| format!("partition {}", cfg.partition))?;
    let cohort = cfg
        .cohort
        .unwrap_or_else(|| crate::config::default_cohort(cfg.backend, cfg.method.federation.model));
    let mut pool = SimPool::new(&data, &part, cfg.backend)?.with_cohort(cohort);
    if cohort > 1 {
        info!(
            "cohorts: up to {} clients' trainings batched into one model",
            if cohort == usize::MAX {
                "all sampled".to_string()
            } else {
                cohort.to_string()
            }
        );
    }
    pool.hold_out(cfg.newcomers, cfg.join_round)?;
    info!(
        "{}: {} clients, partition {}, model {}, {} rounds",
        cfg.method.algorithm,
        cfg.clients,
        cfg.partition,
        cfg.method.federation.model,
        cfg.method.federation.rounds
    );
    if cfg.newcomers > 0 {
        info!(
            "newcomers: clients {}..{} join at round {}",
            cfg.clients - cfg.newcomers,
            cfg.clients,
            cfg.join_round
        );
    }
    let mut progress = Progress::new(cfg.method.federation.rounds);
    let ctx = RunContext {
        backend: cfg.backend,
        ..RunContext::of_partition(&part)
    };
    // Every client is in every round of the in-process runner: the live view shows whole rounds.
    live.fleet(&edgecfl_shared::federation::ClientPool::clients(&pool));
    live.in_process_round(0);
    let result = algorithms::run(
        &cfg.method,
        &mut pool,
        &ctx,
        &mut live.observer(&mut progress),
    )?;
    progress.finish();
    report::write_all(&cfg.out, cfg, &result, &data.source.to_string(), None)?;
    export::write_run(&cfg.out, &export::of_result(&result, None, dataset))?;
    let plots = plots::write_all(&cfg.out, &result)?;
    for p in plots {
        info!("plot: {}", p.display());
    }
    Ok(result)
}
