//! Stores named on the command line: `postgres:SCHEMA.TABLE[:key=…,fence=…,state=…]`,
//! `dynamodb:TABLE[:key=…,fence=…,state=…]`, `s3:BUCKET[/PREFIX]`.

use std::sync::Arc;

use fencing_core::{FenceFloor, FencedStore};
use fencing_dynamodb::{DynamoFenceFloor, DynamoStore, DynamoTable};
use fencing_postgres::{PgFenceFloor, PgStore, PgTable};
use fencing_s3::{S3Bucket, S3FenceFloor, S3Store};

use crate::connect::{Settings, qualified};
use crate::output::Failure;

/// A store named on the command line, connected.
pub(crate) struct Opened {
    /// The spec as given.
    pub(crate) spec: String,
    pub(crate) store: Arc<dyn FencedStore>,
    pub(crate) floor: Box<dyn FenceFloor>,
}

/// `name=value` options after the second colon, each applied by `set`.
fn options<T>(
    spec: &str,
    mut target: T,
    text: Option<&str>,
    set: impl Fn(T, &str, &str) -> Option<Result<T, fencing_core::InvalidInput>>,
) -> Result<T, Failure> {
    for option in text.into_iter().flat_map(|t| t.split(',')) {
        let (name, value) = option.split_once('=').ok_or_else(|| {
            Failure::usage(format!("{spec:?}: option {option:?} is not NAME=VALUE"))
        })?;
        target = set(target, name, value).ok_or_else(|| {
            Failure::usage(format!(
                "{spec:?}: unknown option {name:?} (key, fence, state)"
            ))
        })??;
    }
    Ok(target)
}

/// A store named on the command line, checked but not connected: bad usage is found before
/// any store is touched.
pub(crate) enum Parsed {
    Postgres(PgTable),
    Dynamodb(DynamoTable),
    S3(S3Bucket),
}

/// Reads the store `spec` names, without connecting.
pub(crate) fn parse(spec: &str) -> Result<Parsed, Failure> {
    let (kind, rest) = spec.split_once(':').ok_or_else(|| {
        Failure::usage(format!(
            "{spec:?} names no kind of store: write postgres:SCHEMA.TABLE, dynamodb:TABLE or s3:BUCKET/PREFIX"
        ))
    })?;
    let (place, opts) = match rest.split_once(':') {
        Some((place, opts)) => (place, Some(opts)),
        None => (rest, None),
    };
    Ok(match kind {
        "postgres" => {
            let name = qualified(place)?;
            let table = PgTable::new(name.schema().as_str(), name.name().as_str())?;
            Parsed::Postgres(options(spec, table, opts, |t, name, value| match name {
                "key" => Some(t.with_key_column(value)),
                "fence" => Some(t.with_fence_column(value)),
                "state" => Some(t.with_state_column(value)),
                _ => None,
            })?)
        }
        "dynamodb" => Parsed::Dynamodb(options(
            spec,
            DynamoTable::new(place)?,
            opts,
            |t, name, value| match name {
                "key" => Some(t.with_key_attribute(value)),
                "fence" => Some(t.with_fence_attribute(value)),
                "state" => Some(t.with_state_attribute(value)),
                _ => None,
            },
        )?),
        "s3" => {
            if opts.is_some() {
                return Err(Failure::usage(format!(
                    "{spec:?}: an S3 store takes no options"
                )));
            }
            let (bucket, prefix) = place.split_once('/').unwrap_or((place, ""));
            Parsed::S3(S3Bucket::new(bucket, prefix)?)
        }
        other => {
            return Err(Failure::usage(format!(
                "{spec:?}: unknown kind of store {other:?}: use postgres, dynamodb or s3"
            )));
        }
    })
}

/// Checks every spec before any is connected, so bad usage exits as such with nothing done.
pub(crate) fn parse_all(specs: &[String]) -> Result<(), Failure> {
    specs.iter().try_for_each(|spec| parse(spec).map(drop))
}

/// Connects to the store `spec` names.
pub(crate) async fn open(settings: &Settings, spec: &str) -> Result<Opened, Failure> {
    let (store, floor): (Arc<dyn FencedStore>, Box<dyn FenceFloor>) = match parse(spec)? {
        Parsed::Postgres(table) => {
            let pool = settings.pg_pool().await?;
            (
                Arc::new(PgStore::new(pool.clone(), table.clone())),
                Box::new(PgFenceFloor::new(pool, &table)),
            )
        }
        Parsed::Dynamodb(table) => {
            let client = settings.dynamodb()?;
            (
                Arc::new(DynamoStore::new(client.clone(), table.clone())),
                Box::new(DynamoFenceFloor::new(client, table)),
            )
        }
        Parsed::S3(bucket) => {
            let store = Arc::new(S3Store::new(settings.s3()?, bucket));
            (store.clone(), Box::new(S3FenceFloor::new(store)))
        }
    };
    Ok(Opened {
        spec: spec.to_owned(),
        store,
        floor,
    })
}
