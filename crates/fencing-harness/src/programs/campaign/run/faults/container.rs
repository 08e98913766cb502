//! A store's container paused past the TTL (`docker pause`, containers mode only): the
//! PostgreSQL or the AWS emulator container stops answering without closing anything, then
//! resumes; what every worker sent meanwhile arrives at once.

use std::time::Duration;

use fencing_harness::plan::{Fault, PausedStore};

use super::super::Watch;

impl Watch<'_> {
    /// Pauses the container of the store the fault names for the fault's pause; whether it
    /// struck (the stores run in containers).
    pub(super) async fn pause_container(&mut self, fault: &Fault, at: Duration) -> bool {
        match &self.spawner.services.containers {
            Some((postgres, aws)) => {
                let (container, what) = match fault.store {
                    PausedStore::Postgres => (postgres, "PostgreSQL"),
                    PausedStore::Aws => (aws, "AWS emulator"),
                };
                self.picture.service_fault(
                    at,
                    &format!("{what} container paused for {} ms", fault.pause.as_millis()),
                );
                tokio::task::block_in_place(|| container.pause());
                tokio::time::sleep(fault.pause).await;
                tokio::task::block_in_place(|| container.unpause());
                true
            }
            None => false,
        }
    }
}
