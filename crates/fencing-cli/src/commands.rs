//! The subcommands.

use fencing_core::adapter::{ConditionalPutDefect, epoch};
use fencing_core::{
    BoxError, Error, FencedStore, FencedWrite, FencingToken, InputKind, RecordKey, ResourceName,
    TokenSource,
};
use serde_json::json;

use crate::Backend;
use crate::connect::Settings;
use crate::output::{Failure, PROBE_FAILED, Report, SERVICE};
use crate::spec::{self, ObjectStore, Opened};

fn backend_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Redis => "redis",
        Backend::Postgres => "postgres",
        Backend::Mysql => "mysql",
        Backend::Dynamodb => "dynamodb",
        Backend::Etcd => "etcd",
    }
}

fn token_json(token: Option<FencingToken>) -> serde_json::Value {
    token.map_or(serde_json::Value::Null, |t| json!(t.get()))
}

fn token_text(token: Option<FencingToken>) -> String {
    token.map_or_else(|| "none issued".to_owned(), |t| t.to_string())
}

/// What a counter of `backend` is, in a report's words.
fn counter_kind(settings: &Settings, backend: Backend) -> String {
    match backend {
        Backend::Postgres if settings.pg_counters_are_epochs() => {
            "postgres epoch counter of the Redis tokens".to_owned()
        }
        other => format!("{} counter", backend_name(other)),
    }
}

/// A counter's value in a report's words: an epoch says which tokens it stands for, an
/// epoch-prefixed Redis token its epoch and number.
fn counter_text(settings: &Settings, backend: Backend, value: Option<FencingToken>) -> String {
    let Some(value) = value else {
        return token_text(None);
    };
    let epoch = epoch::epoch_of(value);
    match backend {
        Backend::Postgres if settings.pg_counters_are_epochs() => format!(
            "epoch {value} (its Redis tokens are {value} · 2^{} + n)",
            epoch::EPOCH_BITS
        ),
        Backend::Redis if epoch > 0 => format!(
            "{value} (epoch {epoch}, number {})",
            value.get() - (epoch << epoch::EPOCH_BITS)
        ),
        _ => value.to_string(),
    }
}

pub(crate) async fn lease_status(
    settings: &Settings,
    resource: &str,
    backend: Backend,
) -> Result<Report, Failure> {
    let resource = ResourceName::new(resource)?;
    let lease = settings.lease(backend).await?;
    let status = lease
        .status(&resource)
        .await
        .map_err(|e| settings.failure(e))?;
    let kind = backend_name(backend);
    Ok(match status {
        None => {
            let read = settings.location(backend, &resource, true)?;
            Report::new(
                vec![format!(
                    "{resource} ({kind} lease): free (no live lease at {read})"
                )],
                json!({ "resource": resource.as_str(), "lease": kind, "held": false, "read": read }),
            )
        }
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
    let current = settings
        .tokens(backend)
        .await?
        .current(&resource)
        .await
        .map_err(|e| settings.failure(e))?;
    let (kind, counter) = (backend_name(backend), counter_kind(settings, backend));
    let read = settings.location(backend, &resource, false)?;
    let line = match current {
        Some(_) => format!(
            "{resource} ({counter}): {}",
            counter_text(settings, backend, current)
        ),
        None => format!("{resource} ({counter}): none issued (nothing at {read})"),
    };
    let history = settings.counter_history(backend, &resource).await?;
    let mut lines = vec![line];
    lines.extend(history.as_ref().map(history_text));
    Ok(Report::new(
        lines,
        json!({
            "resource": resource.as_str(),
            "tokens": kind,
            "current": token_json(current),
            "read": read,
            "history": history.map(|h| json!({
                "bound": h.bound,
                "serving": h.serving,
                "moved": h.moved(),
            })),
        }),
    ))
}

pub(crate) async fn token_advance(
    settings: &Settings,
    resource: &str,
    backend: Backend,
    to: FencingToken,
) -> Result<Report, Failure> {
    let resource = ResourceName::new(resource)?;
    refuse_epoch_counter(settings, backend)?;
    let tokens = settings.tokens(backend).await?;
    let before = tokens
        .current(&resource)
        .await
        .map_err(|e| settings.failure(e))?;
    refuse_weaker_than_epochs(settings, backend, [before, Some(to)])?;
    let after = tokens
        .advance_to(&resource, to)
        .await
        .map_err(|e| settings.failure(e))?;
    let (kind, counter) = (backend_name(backend), counter_kind(settings, backend));
    let line = if before.is_some_and(|b| b >= to) {
        format!(
            "{resource} ({counter}): already at {} (a counter is never lowered)",
            counter_text(settings, backend, before)
        )
    } else {
        format!(
            "{resource} ({counter}): raised from {} to {}",
            counter_text(settings, backend, before),
            counter_text(settings, backend, Some(after))
        )
    };
    let mut lines = vec![line];
    lines.extend(history_line(settings, backend, &resource).await?);
    Ok(Report::new(
        lines,
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
        if let spec::Parsed::ObjectStore(_) = spec::parse(spec)? {
            return Err(Failure::usage(format!(
                "{spec}: the highest fence of an object store cannot be read by this command \
                 yet; seed from the stores beside it, or with `token advance`"
            )));
        }
    }
    for spec in from {
        let Opened { spec, floor, .. } = spec::open(settings, spec).await?;
        let floor = floor.expect("every store but an object store, refused above, has a floor");
        let max = floor
            .max_fence(&resource)
            .await
            .map_err(|e| settings.failure(e))?;
        lines.push(format!(
            "{spec}: highest fence {}",
            token_text(max).replace("none issued", "none")
        ));
        found.push(json!({ "store": spec, "highest_fence": token_json(max) }));
        highest = highest.max(max);
    }
    refuse_epoch_counter(settings, backend)?;
    let tokens = settings.tokens(backend).await?;
    let before = tokens
        .current(&resource)
        .await
        .map_err(|e| settings.failure(e))?;
    refuse_weaker_than_epochs(settings, backend, [before, highest])?;
    let (kind, counter) = (backend_name(backend), counter_kind(settings, backend));
    let after = match highest {
        Some(floor) if before.is_none_or(|b| b < floor) => {
            let after = tokens
                .advance_to(&resource, floor)
                .await
                .map_err(|e| settings.failure(e))?;
            lines.push(format!(
                "{resource} ({counter}): raised from {} to {}; the next token is above every fence found",
                counter_text(settings, backend, before),
                counter_text(settings, backend, Some(after))
            ));
            Some(after)
        }
        _ => {
            lines.push(format!(
                "{resource} ({counter}): at {}, already at or above every fence found; left as it is",
                counter_text(settings, backend, before)
            ));
            before
        }
    };
    lines.extend(history_line(settings, backend, &resource).await?);
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

/// Refuses to raise a Redis counter read without its epochs (the may-reissue mode) when the
/// counter or the target holds an epoch-prefixed token: that deployment's lease draws epochs
/// from a durable source, and raising its counter to a fence found in a store is exactly the
/// re-seed that can issue a token twice. `--may-reissue-tokens` overrides it.
fn refuse_weaker_than_epochs(
    settings: &Settings,
    backend: Backend,
    values: [Option<FencingToken>; 2],
) -> Result<(), Failure> {
    let epoch_formatted = values
        .into_iter()
        .flatten()
        .any(|value| epoch::epoch_of(value) > 0);
    if backend != Backend::Redis
        || !settings.redis_without_epochs()
        || settings.may_reissue_tokens
        || !epoch_formatted
    {
        return Ok(());
    }
    Err(Failure::usage(format!(
        "the counter or the fences hold epoch-prefixed tokens (2^{} and above): this deployment's \
         Redis tokens draw their epochs from a durable source, and a lost counter there needs no \
         seed at all (its next token opens a new epoch above every token issued). Raising it \
         without its epochs can issue a token twice: pass --redis-epochs SCHEMA.TABLE to act \
         as the library does, or --may-reissue-tokens to act on the bare counter anyway",
        epoch::EPOCH_BITS
    )))
}

/// The line saying where the counter of `resource` stands, for the kinds that bind theirs.
async fn history_line(
    settings: &Settings,
    backend: Backend,
    resource: &ResourceName,
) -> Result<Option<String>, Failure> {
    let history = settings.counter_history(backend, resource).await?;
    Ok(history.as_ref().map(history_text))
}

/// Where a counter stands against the server answering, in a report's words.
fn history_text(history: &fencing_core::CounterHistory) -> String {
    match &history.bound {
        None => format!(
            "  history: not bound yet; the next token binds it to this server's ({})",
            history.serving
        ),
        Some(bound) if history.moved() => format!(
            "  history: bound to {bound}, but this server's is {}: the counter may be behind \
             (a failover or a restore since); its next token is raised past anything that \
             history issued first, so no repair by hand is needed",
            history.serving
        ),
        Some(bound) => format!("  history: bound to this server's ({bound})"),
    }
}

/// Refuses to raise the PostgreSQL counters the Redis tokens draw their epochs from as if
/// they were tokens: fences are tokens, and the repair goes through the Redis tokens.
fn refuse_epoch_counter(settings: &Settings, backend: Backend) -> Result<(), Failure> {
    if backend == Backend::Postgres && settings.pg_counters_are_epochs() {
        return Err(Failure::usage(
            "the PostgreSQL counters named are the epochs of the Redis tokens (--redis-epochs), \
             not tokens: raise the tokens with --tokens redis --redis-epochs SCHEMA.TABLE, which \
             opens an epoch above the value",
        ));
    }
    Ok(())
}

/// How one store took the probe.
enum Probed {
    /// It refused the stale token and accepted the newer one: the fence it now holds.
    Passed(FencingToken),
    /// It did not behave as a fenced store.
    Misbehaved(String),
    /// It failed (unreachable, a required column the probe cannot fill) before it showed
    /// how it behaves.
    Failed(String),
}

/// What one store did with the probe's three writes.
async fn probe_one(opened: &Opened, key: &RecordKey) -> Probed {
    let steps: Result<Probed, Probed> = async {
        if let Some(objects) = &opened.objects {
            conditional_writes_checked(objects).await?;
        }
        let (n, stale, newer) = probe_tokens(&*opened.store, key).await?;
        three_claims(&*opened.store, key, n, stale, newer).await?;
        Ok(fence_left(opened, key, newer).await)
    }
    .await;
    steps.unwrap_or_else(|probed| probed)
}

/// An object store whose conditional writes are not atomic misbehaves before any write.
async fn conditional_writes_checked(objects: &ObjectStore) -> Result<(), Probed> {
    match objects.check_conditional_writes().await {
        Ok(()) => Ok(()),
        Err(e) if ConditionalPutDefect::of(&e).is_some() => {
            Err(Probed::Misbehaved(format!("UNSAFE: {e}")))
        }
        Err(e) => Err(Probed::Failed(format!(
            "could not check its conditional writes (not a refusal): {e}"
        ))),
    }
}

/// The probe's tokens above the record's fence: a claim `n`, a stale one below it, a newer
/// one above it.
async fn probe_tokens(
    store: &dyn FencedStore,
    key: &RecordKey,
) -> Result<(FencingToken, FencingToken, FencingToken), Probed> {
    let current = store.read(key).await.map_err(|e| {
        Probed::Failed(match &e {
            Error::InvalidInput(bad) if bad.kind() == InputKind::RecordKey => {
                format!("{e}: pass --key with a probe key of that kind")
            }
            _ => format!("could not read the probe record: {e}"),
        })
    })?;
    let base = current.and_then(|r| r.fence).map_or(1, FencingToken::get);
    match (
        FencingToken::new(base + 1),
        FencingToken::new(base),
        FencingToken::new(base + 2),
    ) {
        (Ok(n), Ok(stale), Ok(newer)) => Ok((n, stale, newer)),
        _ => Err(Probed::Failed(format!(
            "the probe record's fence {base} leaves no tokens above it: use another --key"
        ))),
    }
}

/// Claims with `n`, then the `stale` token (which must be refused as fenced), then `newer`.
async fn three_claims(
    store: &dyn FencedStore,
    key: &RecordKey,
    n: FencingToken,
    stale: FencingToken,
    newer: FencingToken,
) -> Result<(), Probed> {
    let claim = FencedWrite::claim();
    let accepted = |token: FencingToken, what: &str, e: Error| {
        if e.is_rejection() {
            Probed::Misbehaved(format!("refused a claim with {what} {token}: {e}"))
        } else {
            Probed::Failed(format!(
                "store error on the claim with token {token} (not a refusal): {e}"
            ))
        }
    };
    store
        .write(key, n, &claim)
        .await
        .map_err(|e| accepted(n, "token", e))?;
    match store.write(key, stale, &claim).await {
        Ok(_) => {
            return Err(Probed::Misbehaved(format!(
                "ACCEPTED stale token {stale} after {n}: its writes do not go through the fence \
                 (a column, trigger or statement resets or skips it); do not run jobs on it"
            )));
        }
        Err(Error::Fenced { .. }) => {}
        Err(e) if e.is_rejection() => {
            return Err(Probed::Misbehaved(format!(
                "refused stale token {stale}, but not as a fence refusal: {e}"
            )));
        }
        Err(e) => {
            return Err(Probed::Failed(format!(
                "store error on the stale token {stale} (not a refusal): {e}"
            )));
        }
    }
    store
        .write(key, newer, &claim)
        .await
        .map_err(|e| accepted(newer, "the newer token", e))?;
    Ok(())
}

/// Passed if the record now holds the `newer` fence (an S3 probe object is then deleted).
async fn fence_left(opened: &Opened, key: &RecordKey, newer: FencingToken) -> Probed {
    match opened.store.read(key).await {
        Ok(after) => match after.and_then(|r| r.fence) {
            Some(fence) if fence == newer => match &opened.objects {
                // The probe leaves nothing among the prefix's objects for their readers to
                // trip on: not even the tombstone a fenced delete would leave.
                Some(ObjectStore::S3(s3)) => match remove_probe(s3, key).await {
                    Ok(()) => Probed::Passed(newer),
                    Err(e) => Probed::Failed(format!("could not delete the probe object: {e}")),
                },
                _ => Probed::Passed(newer),
            },
            other => Probed::Misbehaved(format!(
                "kept fence {} after a claim with {newer}",
                token_text(other)
            )),
        },
        Err(e) => Probed::Failed(format!("could not read the probe record back: {e}")),
    }
}

/// Removes the probe's object outright (`DeleteObject`): it is the probe's own, no job's
/// record, so no fence need stay behind.
async fn remove_probe(s3: &fencing_s3::S3Store, key: &RecordKey) -> Result<(), BoxError> {
    let object = s3.bucket().object_key(key)?;
    s3.client()
        .delete_object()
        .bucket(s3.bucket().bucket())
        .key(object)
        .send()
        .await?;
    Ok(())
}

/// Probes every store; the exit code says the worst found: a store that misbehaved (1), else
/// one that failed (3).
pub(crate) async fn probe(
    settings: &Settings,
    stores: &[String],
    key: &str,
) -> Result<Report, Failure> {
    let key = RecordKey::new(key)?;
    spec::parse_all(stores)?;
    let mut lines = Vec::new();
    let mut results = Vec::new();
    let (mut misbehaved, mut failed) = (false, false);
    for spec in stores {
        let probed = match spec::open(settings, spec).await {
            Ok(opened) => match opened.probe_key(&key) {
                Ok(key) => probe_one(&opened, &key).await,
                Err(failure) => Probed::Failed(failure.to_string()),
            },
            Err(failure) => Probed::Failed(failure.to_string()),
        };
        match probed {
            Probed::Passed(token) => {
                lines.push(format!(
                    "ok      {spec}: accepted {}, refused {}, accepted {token}",
                    token.get() - 1,
                    token.get() - 2
                ));
                results.push(json!({ "store": spec, "passed": true, "fence": token.get() }));
            }
            Probed::Misbehaved(why) => {
                misbehaved = true;
                lines.push(format!("FAILED  {spec}: {why}"));
                results.push(json!({ "store": spec, "passed": false, "detail": why }));
            }
            Probed::Failed(why) => {
                failed = true;
                lines.push(format!("ERROR   {spec}: {why}"));
                results.push(json!({ "store": spec, "passed": false, "error": why }));
            }
        }
    }
    let passed = !misbehaved && !failed;
    let mut report = Report::new(
        lines,
        json!({ "record": key.as_str(), "passed": passed, "stores": results }),
    );
    report.code = if misbehaved {
        PROBE_FAILED
    } else if failed {
        SERVICE
    } else {
        0
    };
    Ok(report)
}
