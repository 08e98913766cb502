//! Values read back from the table, checked: what the store may rely on, and what it reports
//! as corrupt.

use fencing_core::{FencingToken, Record, RecordKey, State};

use crate::error::PgFailure;

/// A record from decoded columns: state and payload as the driver returned them.
pub(crate) fn record_from(
    key: &RecordKey,
    fence: Option<FencingToken>,
    state: Result<Option<String>, sqlx::Error>,
    payload: Result<Option<Vec<u8>>, sqlx::Error>,
) -> Result<Record, PgFailure> {
    Ok(Record {
        key: key.clone(),
        fence,
        state: state_from_db(state?)?,
        payload: payload?.unwrap_or_default(),
    })
}

/// A fence as stored: 0 is "no fence yet", a negative number is corruption.
pub(crate) fn fence_from_db(value: i64) -> Result<Option<FencingToken>, PgFailure> {
    match value {
        0 => Ok(None),
        v => FencingToken::from_i64(v)
            .map(Some)
            .map_err(|e| PgFailure::Corrupt(format!("stored fence {v}"), e)),
    }
}

pub(crate) fn state_from_db(value: Option<String>) -> Result<Option<State>, PgFailure> {
    value
        .map(|text| {
            State::new(text.clone())
                .map_err(|e| PgFailure::Corrupt(format!("stored state {text:?}"), e))
        })
        .transpose()
}
