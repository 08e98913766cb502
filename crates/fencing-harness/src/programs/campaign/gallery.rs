//! The pictures a campaign's report links: the runs that stand for it and every run that
//! failed, each drawn by its own [`super::picture::RunPicture`].

use std::path::Path;

use fencing_harness::plan::{FaultKind, LeaseKind, Protection};

use super::run::RunResult;

/// A picture the campaign drew: of its sample run, or of a run that failed.
#[derive(Debug)]
pub(crate) struct Drawn {
    pub(crate) seed: u64,
    /// [`fencing_harness::plan::RunPlan::protection`].
    pub(crate) protection: Protection,
    pub(crate) passed: bool,
    /// The faults the run was struck with.
    pub(crate) faults: Vec<&'static str>,
    /// The link to it from the report (relative to the report's folder).
    pub(crate) link: String,
}

/// The run whose picture stands for the campaign: the first that passed with fences on after
/// a stall (the story of the worked example), else the first with fences on, else the first.
fn sample(results: &[RunResult]) -> Option<&RunResult> {
    let stalled = |r: &&RunResult| r.injected.contains_key(&FaultKind::Stall);
    results
        .iter()
        .filter(|r| r.plan.fences && r.passed())
        .find(stalled)
        .or_else(|| results.iter().find(|r| r.plan.fences))
        .or_else(|| results.first())
}

/// The runs whose pictures stand for the campaign: [`sample`], and the first run that passed
/// with each failover, each partition and each clock fault (faults whose picture the stall's
/// does not show; a clock fault on the DynamoDB lease where one struck it).
fn samples(results: &[RunResult]) -> Vec<&RunResult> {
    let mut samples: Vec<&RunResult> = sample(results).into_iter().collect();
    for kind in [
        FaultKind::RedisFailover,
        FaultKind::PgFailover,
        FaultKind::PgPartition,
        FaultKind::RedisPartition,
        FaultKind::AwsPartition,
        FaultKind::EtcdPartition,
        FaultKind::MysqlPartition,
        FaultKind::ClockBehind,
        FaultKind::ClockAhead,
    ] {
        // A clock fault shows most on the lease judged by the workers' clocks.
        let judged_by_clocks = |r: &&RunResult| r.plan.lease == LeaseKind::Dynamodb;
        let struck: Vec<&RunResult> = results
            .iter()
            .filter(|r| r.plan.fences && r.passed())
            .filter(|r| r.injected.contains_key(&kind))
            .collect();
        let example = struck
            .iter()
            .copied()
            .find(judged_by_clocks)
            .or_else(|| struck.first().copied());
        if let Some(run) = example
            && !samples.iter().any(|s| std::ptr::eq(*s, run))
        {
            samples.push(run);
        }
    }
    samples
}

/// Draws the sample runs and every run that failed into `folder` (emptied first), as
/// `seed-<seed>-<on|off|unchecked>.svg`, linked as `<link_base>/<file>`.
pub(crate) fn draw_campaign(
    results: &[RunResult],
    folder: &Path,
    link_base: &str,
) -> Result<Vec<Drawn>, String> {
    let failed = |e: std::io::Error| format!("cannot write pictures to {}: {e}", folder.display());
    if folder.exists() {
        std::fs::remove_dir_all(folder).map_err(failed)?;
    }
    std::fs::create_dir_all(folder).map_err(failed)?;
    let samples = samples(results);
    let mut drawn = Vec::new();
    for result in results {
        if result.passed() && !samples.iter().any(|s| std::ptr::eq(*s, result)) {
            continue;
        }
        let file = format!(
            "seed-{}-{}.svg",
            result.plan.seed,
            result.plan.protection().word()
        );
        result
            .draw(&folder.join(&file))
            .map_err(|e| format!("cannot draw seed {}: {e}", result.plan.seed))?;
        drawn.push(Drawn {
            seed: result.plan.seed,
            protection: result.plan.protection(),
            passed: result.passed(),
            faults: result.injected.keys().map(|kind| kind.name()).collect(),
            link: format!("{link_base}/{file}"),
        });
    }
    Ok(drawn)
}
