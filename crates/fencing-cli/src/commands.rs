//! The subcommands.

use fencing_core::{Error, FencedWrite, FencingToken, RecordKey, ResourceName};
use serde_json::json;

use crate::Backend;
use crate::connect::Settings;
use crate::output::{Failure, Report};
use crate::spec::{self, Opened};

fn backend_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Redis => "redis",
        Backend::Postgres => "postgres",
        Backend::Dynamodb => "dynamodb",
    }
}

fn token_json(token: Option<FencingToken>) -> serde_json::Value {
    token.map_or(serde_json::Value::Null, |t| json!(t.get()))
}

fn token_text(token: Option<FencingToken>) -> String {
    token.map_or_else(|| "none issued".to_owned(), |t| t.to_string())
}

pub(crate) async fn lease_status(
    settings: &Settings,
    resource: &str,
    backend: Backend,
) -> Result<Report, Failure> {
    let resource = ResourceName::new(resource)?;
    let lease = settings.lease(backend).await?;
    let status = lease.status(&resource).await?;
    let kind = backend_name(backend);
    Ok(match status {
        None => Report::new(
            vec![format!("{resource} ({kind} lease): free")],
            json!({ "resource": resource.as_str(), "lease": kind, "held": false }),
        ),
        Some(status) => Report::new(
            vec![
                format!("{resource} ({kind} lease): held"),
                format!("  holder     {}", status.owner),
                format!("  token      {}", token_text(status.token)),
                format!("  time left  {:.1} s", status.time_left.as_secs_f64()),
            ],
            json!({
                "resource": resource.as_str(),
                "lease": kind,
                "held": true,
                "owner": status.owner,
                "token": token_json(status.token),
                "time_left_ms": status.time_left.as_millis() as u64,
            }),
        ),
    })
}

pub(crate) async fn token_current(
    settings: &Settings,
    resource: &str,
    backend: Backend,
) -> Result<Report, Failure> {
    let resource = ResourceName::new(resource)?;
    let current = settings.tokens(backend).await?.current(&resource).await?;
    let kind = backend_name(backend);
    Ok(Report::new(
        vec![format!(
            "{resource} ({kind} counter): {}",
            token_text(current)
        )],
        json!({ "resource": resource.as_str(), "tokens": kind, "current": token_json(current) }),
    ))
}

pub(crate) async fn token_advance(
    settings: &Settings,
    resource: &str,
    backend: Backend,
    to: u64,
) -> Result<Report, Failure> {
    let resource = ResourceName::new(resource)?;
    let to = FencingToken::new(to)?;
    let tokens = settings.tokens(backend).await?;
    let before = tokens.current(&resource).await?;
    let after = tokens.advance_to(&resource, to).await?;
    let kind = backend_name(backend);
    let line = if before.is_some_and(|b| b >= to) {
        format!(
            "{resource} ({kind} counter): already at {} (a counter is never lowered)",
            token_text(before)
        )
    } else {
        format!(
            "{resource} ({kind} counter): raised from {} to {after}",
            token_text(before)
        )
    };
    Ok(Report::new(
        vec![line],
        json!({
            "resource": resource.as_str(),
            "tokens": kind,
            "before": token_json(before),
            "after": after.get(),
        }),
    ))
}

pub(crate) async fn seed(
    settings: &Settings,
    resource: &str,
    backend: Backend,
    from: &[String],
) -> Result<Report, Failure> {
    let resource = ResourceName::new(resource)?;
    let mut lines = Vec::new();
    let mut found = Vec::new();
    let mut highest: Option<FencingToken> = None;
    for spec in from {
        let Opened { spec, floor, .. } = spec::open(settings, spec).await?;
        let max = floor.max_fence(&resource).await?;
        lines.push(format!(
            "{spec}: highest fence {}",
            token_text(max).replace("none issued", "none")
        ));
        found.push(json!({ "store": spec, "highest_fence": token_json(max) }));
        highest = highest.max(max);
    }
    let tokens = settings.tokens(backend).await?;
    let before = tokens.current(&resource).await?;
    let kind = backend_name(backend);
    let after = match highest {
        Some(floor) if before.is_none_or(|b| b < floor) => {
            let after = tokens.advance_to(&resource, floor).await?;
            lines.push(format!(
                "{resource} ({kind} counter): raised from {} to {after}; the next token is above every fence found",
                token_text(before)
            ));
            Some(after)
        }
        _ => {
            lines.push(format!(
                "{resource} ({kind} counter): at {}, already at or above every fence found; left as it is",
                token_text(before)
            ));
            before
        }
    };
    Ok(Report::new(
        lines,
        json!({
            "resource": resource.as_str(),
            "tokens": kind,
            "stores": found,
            "before": token_json(before),
            "after": token_json(after),
        }),
    ))
}

/// What one store did with the probe's three writes.
async fn probe_one(opened: &Opened, key: &RecordKey) -> Result<FencingToken, String> {
    let store = &opened.store;
    let current = store
        .read(key)
        .await
        .map_err(|e| format!("could not read the probe record: {e}"))?;
    let base = current.and_then(|r| r.fence).map_or(1, FencingToken::get);
    let token = |n: u64| {
        FencingToken::new(n).map_err(|e| format!("no token above the probe record's fence: {e}"))
    };
    let (n, stale, newer) = (token(base + 1)?, token(base)?, token(base + 2)?);
    let claim = FencedWrite::claim();
    store
        .write(key, n, &claim)
        .await
        .map_err(|e| format!("refused a claim with token {n}, above the record's fence: {e}"))?;
    match store.write(key, stale, &claim).await {
        Ok(_) => {
            return Err(format!(
                "ACCEPTED stale token {stale} after {n}: its writes do not go through the fence \
                 (a column, trigger or statement resets or skips it); do not run jobs on it"
            ));
        }
        Err(Error::Fenced { .. }) => {}
        Err(e) => {
            return Err(format!(
                "refused stale token {stale}, but not as a fence refusal: {e}"
            ));
        }
    }
    store
        .write(key, newer, &claim)
        .await
        .map_err(|e| format!("refused a claim with the newer token {newer}: {e}"))?;
    let after = store
        .read(key)
        .await
        .map_err(|e| format!("could not read the probe record back: {e}"))?;
    match after.and_then(|r| r.fence) {
        Some(fence) if fence == newer => Ok(newer),
        other => Err(format!(
            "kept fence {} after a claim with {newer}",
            token_text(other)
        )),
    }
}

pub(crate) async fn probe(
    settings: &Settings,
    stores: &[String],
    key: &str,
) -> Result<Report, Failure> {
    let key = RecordKey::new(key)?;
    let mut lines = Vec::new();
    let mut results = Vec::new();
    let mut passed = true;
    for spec in stores {
        let outcome = match spec::open(settings, spec).await {
            Ok(opened) => probe_one(&opened, &key).await,
            Err(failure) => Err(failure.to_string()),
        };
        match outcome {
            Ok(token) => {
                lines.push(format!(
                    "ok      {spec}: accepted {}, refused {}, accepted {token}",
                    token.get() - 1,
                    token.get() - 2
                ));
                results.push(json!({ "store": spec, "passed": true, "fence": token.get() }));
            }
            Err(why) => {
                passed = false;
                lines.push(format!("FAILED  {spec}: {why}"));
                results.push(json!({ "store": spec, "passed": false, "detail": why }));
            }
        }
    }
    let mut report = Report::new(
        lines,
        json!({ "record": key.as_str(), "passed": passed, "stores": results }),
    );
    report.passed = passed;
    Ok(report)
}
