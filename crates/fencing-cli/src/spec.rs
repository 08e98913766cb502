//! Stores named on the command line:
//! `postgres:SCHEMA.TABLE[:key=…,fence=…,state=…,where=COLUMN=VALUE]`,
//! `mysql:DATABASE.TABLE[:key=…,fence=…,state=…,where=COLUMN=VALUE]`,
//! `dynamodb:TABLE[:key=…,sort=NAME[/S|N|B],fence=…,state=…]`,
//! `s3:BUCKET[/PREFIX][:codec=json]`, and
//! `object-store:URL` (any backend `object_store` builds from a URL: `az://`, `gs://`,
//! `s3://`, `memory:///`, configured by its own variables).

use std::sync::Arc;

use fencing_core::{FenceFloor, FencedStore, InvalidInput, RecordKey};
use fencing_dynamodb::{DynamoFenceFloor, DynamoKeyType, DynamoStore, DynamoTable};
use fencing_mysql::{MySqlFenceFloor, MySqlStore, MySqlTable};
use fencing_object_store::ObjectStoreStore;
use fencing_postgres::{PgFenceFloor, PgStore, PgTable};
use fencing_s3::{JsonCodec, S3Bucket, S3FenceFloor, S3Store};

use crate::connect::{Settings, qualified};
use crate::output::Failure;

/// A store named on the command line, connected.
pub(crate) struct Opened {
    /// The spec as given.
    pub(crate) spec: String,
    pub(crate) store: Arc<dyn FencedStore>,
    /// What reports the highest fence it holds; `None` where the command cannot ask yet (an
    /// object store).
    pub(crate) floor: Option<Box<dyn FenceFloor>>,
    /// The object store, whose conditional writes a probe checks first.
    pub(crate) objects: Option<ObjectStore>,
    /// The DynamoDB table, where it has a sort key: a probe key without its separator names
    /// both key parts.
    composite: Option<DynamoTable>,
}

impl Opened {
    /// The record a probe writes for `key`: `key` itself, or on a DynamoDB table with a
    /// sort key and a `key` without the separator, `key` as both parts.
    pub(crate) fn probe_key(&self, key: &RecordKey) -> Result<RecordKey, Failure> {
        match &self.composite {
            Some(table) if !key.as_str().contains(table.key_separator()) => Ok(table
                .record_key(key.as_str(), Some(key.as_str()))
                .map_err(|e| {
                    Failure::usage(format!(
                        "{}: the probe key {:?} cannot name both parts of the table's key ({e}): \
                         pass --key PARTITION{}SORT",
                        self.spec,
                        key.as_str(),
                        table.key_separator()
                    ))
                })?),
            _ => Ok(key.clone()),
        }
    }
}

/// A store that swaps on versions: a probe checks its server's conditional writes first.
pub(crate) enum ObjectStore {
    S3(Arc<S3Store>),
    Any(Arc<ObjectStoreStore>),
}

impl ObjectStore {
    /// The store's check of its server's conditional writes.
    pub(crate) async fn check_conditional_writes(&self) -> fencing_core::Result<()> {
        match self {
            ObjectStore::S3(store) => store.check_conditional_writes().await,
            ObjectStore::Any(store) => store.check_conditional_writes().await,
        }
    }
}

/// `name=value` options after the second colon, each applied by `set` (`None`: not one of
/// `known`).
fn options<T, E: Into<Failure>>(
    spec: &str,
    mut target: T,
    text: Option<&str>,
    known: &str,
    set: impl Fn(T, &str, &str) -> Option<Result<T, E>>,
) -> Result<T, Failure> {
    for option in text.into_iter().flat_map(|t| t.split(',')) {
        let (name, value) = option.split_once('=').ok_or_else(|| {
            Failure::usage(format!("{spec:?}: option {option:?} is not NAME=VALUE"))
        })?;
        target = set(target, name, value)
            .ok_or_else(|| Failure::usage(format!("{spec:?}: unknown option {name:?} ({known})")))?
            .map_err(Into::into)?;
    }
    Ok(target)
}

/// A store named on the command line, checked but not connected: bad usage is found before
/// any store is touched.
pub(crate) enum Parsed {
    Postgres(SqlSpec<PgTable>),
    Mysql(SqlSpec<MySqlTable>),
    Dynamodb(DynamoTable),
    S3(S3Bucket, Codec),
    ObjectStore(url::Url),
}

/// A SQL table named on the command line (PostgreSQL's or MySQL's), and the rows its highest
/// fence is read over.
pub(crate) struct SqlSpec<T> {
    table: T,
    /// `where=COLUMN=VALUE`: only the rows whose column holds the value (one resource's rows
    /// in a table many resources share).
    only: Option<(String, String)>,
}

/// A SQL table whose key, fence and state columns a spec's options name.
trait SqlColumns: Sized {
    /// The table with the `which` column (`key`, `fence`, `state`) named `column`; `None` for
    /// another option.
    fn with_column(self, which: &str, column: &str) -> Option<Result<Self, InvalidInput>>;
}

/// The two SQL tables name their columns alike.
macro_rules! sql_columns {
    ($($table:ty),*) => {$(
        impl SqlColumns for $table {
            fn with_column(self, which: &str, column: &str) -> Option<Result<Self, InvalidInput>> {
                match which {
                    "key" => Some(self.with_key_column(column)),
                    "fence" => Some(self.with_fence_column(column)),
                    "state" => Some(self.with_state_column(column)),
                    _ => None,
                }
            }
        }
    )*};
}
sql_columns!(PgTable, MySqlTable);

/// A SQL table's spec with its options: `key=`, `fence=`, `state=`, `where=`.
fn sql_spec<T: SqlColumns>(
    spec: &str,
    table: T,
    opts: Option<&str>,
) -> Result<SqlSpec<T>, Failure> {
    let only = None;
    options(
        spec,
        SqlSpec { table, only },
        opts,
        "key, fence, state, where",
        |SqlSpec { table, only }, name, value| {
            if name == "where" {
                return Some(only_rows(spec, value).map(|only| SqlSpec { table, only }));
            }
            Some(
                table
                    .with_column(name, value)?
                    .map(|table| SqlSpec { table, only })
                    .map_err(Failure::from),
            )
        },
    )
}

/// How an S3 store's objects hold their records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Codec {
    /// The envelope (the default).
    Envelope,
    /// A JSON object with the fence and state among its fields (`JsonCodec`).
    Json,
}

/// The `COLUMN=VALUE` of a `where=` option.
fn only_rows(spec: &str, value: &str) -> Result<Option<(String, String)>, Failure> {
    match value.split_once('=') {
        Some((column, value)) if !column.is_empty() => {
            Ok(Some((column.to_owned(), value.to_owned())))
        }
        _ => Err(Failure::usage(format!(
            "{spec:?}: where={value:?} is not where=COLUMN=VALUE"
        ))),
    }
}

/// `NAME` or `NAME/TYPE` (TYPE `S`, `N` or `B`) of a `sort=` option.
fn sort_key(spec: &str, value: &str) -> Result<(String, DynamoKeyType), Failure> {
    let (name, kind) = value.split_once('/').unwrap_or((value, "S"));
    let kind = match kind {
        "S" => DynamoKeyType::String,
        "N" => DynamoKeyType::Number,
        "B" => DynamoKeyType::Binary,
        other => {
            return Err(Failure::usage(format!(
                "{spec:?}: sort key type {other:?} is not S, N or B"
            )));
        }
    };
    Ok((name.to_owned(), kind))
}

/// Reads the store `spec` names, without connecting.
pub(crate) fn parse(spec: &str) -> Result<Parsed, Failure> {
    if let Some(url) = spec.strip_prefix("object-store:") {
        return object_store_url(spec, url).map(Parsed::ObjectStore);
    }
    let (kind, rest) = spec.split_once(':').ok_or_else(|| {
        Failure::usage(format!(
            "{spec:?} names no kind of store: write postgres:SCHEMA.TABLE, mysql:DATABASE.TABLE, dynamodb:TABLE, s3:BUCKET/PREFIX or object-store:URL"
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
            Parsed::Postgres(sql_spec(spec, table, opts)?)
        }
        "mysql" => {
            let (database, name) = place.split_once('.').ok_or_else(|| {
                Failure::usage(format!(
                    "{spec:?}: {place:?} is not DATABASE.TABLE: write mysql:DATABASE.{place}"
                ))
            })?;
            Parsed::Mysql(sql_spec(spec, MySqlTable::new(database, name)?, opts)?)
        }
        "dynamodb" => {
            Parsed::Dynamodb(options(
                spec,
                DynamoTable::new(place)?,
                opts,
                "key, sort, fence, state",
                |t, name, value| match name {
                    "key" => Some(t.with_key_attribute(value).map_err(Failure::from)),
                    "fence" => Some(t.with_fence_attribute(value).map_err(Failure::from)),
                    "state" => Some(t.with_state_attribute(value).map_err(Failure::from)),
                    "sort" => Some(sort_key(spec, value).and_then(|(name, kind)| {
                        t.with_sort_key(name, kind).map_err(Failure::from)
                    })),
                    _ => None,
                },
            )?)
        }
        "s3" => {
            let (bucket, prefix) = place.split_once('/').unwrap_or((place, ""));
            let codec = options(spec, Codec::Envelope, opts, "codec", |_, name, value| {
                (name == "codec").then(|| match value {
                    "json" => Ok(Codec::Json),
                    "envelope" => Ok(Codec::Envelope),
                    other => Err(Failure::usage(format!(
                        "{spec:?}: unknown codec {other:?}: json or envelope"
                    ))),
                })
            })?;
            Parsed::S3(S3Bucket::new(bucket, prefix)?, codec)
        }
        other => {
            return Err(Failure::usage(format!(
                "{spec:?}: unknown kind of store {other:?}: use postgres, mysql, dynamodb, s3 or object-store"
            )));
        }
    })
}

/// The URL of an `object-store:` spec, of a scheme `object_store` knows.
fn object_store_url(spec: &str, text: &str) -> Result<url::Url, Failure> {
    let url = url::Url::parse(text).map_err(|e| {
        Failure::usage(format!(
            "{spec:?}: {text:?} is not a URL ({e}): write e.g. object-store:az://CONTAINER/PREFIX"
        ))
    })?;
    object_store::ObjectStoreScheme::parse(&url).map_err(|e| {
        Failure::usage(format!(
            "{spec:?}: {e}: use az://, gs://, s3:// or memory:///"
        ))
    })?;
    Ok(url)
}

/// Checks every spec before any is connected, so bad usage exits as such with nothing done.
pub(crate) fn parse_all(specs: &[String]) -> Result<(), Failure> {
    specs.iter().try_for_each(|spec| parse(spec).map(drop))
}

/// Connects to the store `spec` names.
pub(crate) async fn open(settings: &Settings, spec: &str) -> Result<Opened, Failure> {
    let (mut objects, mut composite) = (None, None);
    let (store, floor): (Arc<dyn FencedStore>, Option<Box<dyn FenceFloor>>) = match parse(spec)? {
        Parsed::Postgres(SqlSpec { table, only }) => {
            let pool = settings.pg_pool().await?;
            let floor = match only {
                Some((column, value)) => {
                    PgFenceFloor::filtered(pool.clone(), &table, &column, value)?
                }
                None => PgFenceFloor::new(pool.clone(), &table),
            };
            (Arc::new(PgStore::new(pool, table)), Some(Box::new(floor)))
        }
        Parsed::Mysql(SqlSpec { table, only }) => {
            let pool = settings.mysql_pool().await?;
            let floor = match only {
                Some((column, value)) => {
                    MySqlFenceFloor::filtered(pool.clone(), &table, &column, value)?
                }
                None => MySqlFenceFloor::new(pool.clone(), &table),
            };
            (
                Arc::new(MySqlStore::new(pool, table)),
                Some(Box::new(floor)),
            )
        }
        Parsed::Dynamodb(table) => {
            composite = table.sort_key().is_some().then(|| table.clone());
            let client = settings.dynamodb()?;
            (
                Arc::new(DynamoStore::new(client.clone(), table.clone())),
                Some(Box::new(DynamoFenceFloor::new(client, table))),
            )
        }
        Parsed::S3(bucket, codec) => {
            let store = S3Store::new(settings.s3()?, bucket);
            let store = Arc::new(match codec {
                Codec::Envelope => store,
                Codec::Json => store.with_codec(JsonCodec::new()),
            });
            objects = Some(ObjectStore::S3(store.clone()));
            (store.clone(), Some(Box::new(S3FenceFloor::new(store))))
        }
        Parsed::ObjectStore(url) => {
            // The backend reads its configuration as `object_store` documents it, from the
            // environment (AWS_ENDPOINT, AWS_CONDITIONAL_PUT, AZURE_STORAGE_ACCOUNT_NAME, …).
            let (backend, prefix) =
                object_store::parse_url_opts(&url, std::env::vars()).map_err(|e| {
                    Failure::usage(format!("{spec:?}: the backend cannot be built: {e}"))
                })?;
            let store = Arc::new(ObjectStoreStore::new(Arc::from(backend), prefix));
            objects = Some(ObjectStore::Any(store.clone()));
            (store, None)
        }
    };
    Ok(Opened {
        spec: spec.to_owned(),
        store,
        floor,
        objects,
        composite,
    })
}
