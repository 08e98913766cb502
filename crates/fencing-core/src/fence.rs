//! A token in hand: fenced writes that tell a stale holder from a counter that went backwards.

use crate::error::{Error, Result};
use crate::lease::LeaseGuard;
use crate::name::{RecordKey, ResourceName};
use crate::store::{FencedStore, FencedWrite, Written};
use crate::token::FencingToken;
use crate::token_source::TokenSource;

/// How many times a write whose outcome was ambiguous is sent again, with the same token.
const AMBIGUOUS_RETRIES: u32 = 2;

/// A holder's token for one resource, with the source that issued it.
///
/// Every write through a `Fence` presents the token, retries ambiguous outcomes with the same
/// token (safe: a claim accepts `fence == token`), and turns a refusal whose fence lies above
/// anything the source has issued into [`Error::TokenRegression`].
#[derive(Clone, Copy, Debug)]
pub struct Fence<'a> {
    resource: &'a ResourceName,
    token: FencingToken,
    source: &'a dyn TokenSource,
}

impl<'a> Fence<'a> {
    /// The fence of `token` for `resource`, issued by `source`.
    pub fn new(
        resource: &'a ResourceName,
        token: FencingToken,
        source: &'a dyn TokenSource,
    ) -> Self {
        Fence {
            resource,
            token,
            source,
        }
    }

    /// The fence of a lease acquisition; `source` is the lease's token source.
    pub fn of_guard(guard: &'a LeaseGuard, source: &'a dyn TokenSource) -> Self {
        Self::new(guard.resource(), guard.token(), source)
    }

    /// The token presented on every write.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The resource the token was issued for.
    pub fn resource(&self) -> &ResourceName {
        self.resource
    }

    /// Writes `key` in `store` with this fence's token.
    pub async fn write<S: FencedStore + ?Sized>(
        &self,
        store: &S,
        key: &RecordKey,
        write: &FencedWrite,
    ) -> Result<Written> {
        let mut retries = 0;
        loop {
            match store.write(key, self.token, write).await {
                Err(err) if err.is_ambiguous() && retries < AMBIGUOUS_RETRIES => retries += 1,
                Err(err) => return Err(self.explain(err).await),
                Ok(written) => return Ok(written),
            }
        }
    }

    /// Turns a fence refusal into [`Error::TokenRegression`] when the fence found is above the
    /// highest token the source has issued; every other error is returned as it is.
    ///
    /// The extra read of the source happens only here, on the rejection path.
    pub async fn explain(&self, err: Error) -> Error {
        let Error::Fenced {
            store,
            record,
            presented,
            found,
        } = err
        else {
            return err;
        };
        let refusal = |found| Error::Fenced {
            store: store.clone(),
            record: record.clone(),
            presented,
            found,
        };
        let Some(found_fence) = found.token() else {
            return refusal(found);
        };
        match self.source.current(self.resource).await {
            Ok(highest_issued) if highest_issued.is_none_or(|h| found_fence > h) => {
                Error::TokenRegression {
                    store,
                    record,
                    presented,
                    found: found_fence,
                    highest_issued,
                }
            }
            // A newer holder exists, or the source cannot say: either way, a plain refusal.
            _ => refusal(found),
        }
    }
}
