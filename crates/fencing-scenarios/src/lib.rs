//! Scenarios across real services, in `tests/`: one lease over refunds in PostgreSQL, a ledger
//! in DynamoDB and receipts in S3, each store checking its own fence; and `fencing::prelude`
//! beside the drivers' own crates. A package of their own, so that the `fencing` package's
//! examples build without any service's SDK.
