//! What a run is judged by: the checks, the end-state audit's ([`crate::audit`]) and the
//! history checker's ([`crate::history`]), and a violation of one.

use std::fmt;

/// A broken promise a check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which check.
    pub check: Check,
    /// The refund, where it is about one.
    pub refund: Option<String>,
    /// What was found.
    pub detail: String,
}

/// The audit's checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Check {
    /// Every refund created at the gateway exactly once, and nothing else created.
    CreatedOnce,
    /// Every refund sent and filed; the totals paid (gateway) and recorded (ledger) right.
    Totals,
    /// The refund confirmed by the holder that claimed it, with the gateway's reference.
    ConfirmedByClaimer,
    /// No record's fence ever went down (refund history, receipt versions).
    FenceNeverDown,
    /// The refund, its ledger entry and its receipt were last written under one token: the
    /// filer's (the ledger keeps no history, so this is what the audit can say of it).
    OneFilerToken,
    /// Every sent refund has its ledger entry, with the right amount and reference.
    LedgerEntry,
    /// Every sent refund has its receipt, naming the gateway's reference.
    Receipt,
    /// The job was finished once, and its message deleted (the queue is empty) at most once by
    /// the worker whose batch finished it, and otherwise only by workers that received it
    /// again and found the job finished (had the finisher died before deleting, or the message
    /// come back while it held it).
    JobDeletedOnce,
    /// History: tokens unique, and rising in the real-time order of their acquisitions.
    TokenOrder,
    /// History: no two holders had a write accepted under one token.
    OneHolderPerToken,
    /// History: once a newer holder's claim on a record was accepted, no write an older
    /// holder invoked after it was accepted there.
    NoStaleWriteAccepted,
    /// History: every accepted holder-only write followed its own holder's accepted claim.
    ConfirmAfterClaim,
}

impl Check {
    /// Every check, in report order.
    pub const ALL: [Check; 12] = [
        Check::CreatedOnce,
        Check::Totals,
        Check::ConfirmedByClaimer,
        Check::FenceNeverDown,
        Check::OneFilerToken,
        Check::LedgerEntry,
        Check::Receipt,
        Check::JobDeletedOnce,
        Check::TokenOrder,
        Check::OneHolderPerToken,
        Check::NoStaleWriteAccepted,
        Check::ConfirmAfterClaim,
    ];

    /// Whether the history checker ([`crate::history`]) makes it, from what the workers saw,
    /// rather than the end-state audit, from the stores.
    pub fn is_history(self) -> bool {
        matches!(
            self,
            Check::TokenOrder
                | Check::OneHolderPerToken
                | Check::NoStaleWriteAccepted
                | Check::ConfirmAfterClaim
        )
    }

    /// What it checks, in a few words.
    pub fn name(self) -> &'static str {
        match self {
            Check::CreatedOnce => "created once at the gateway",
            Check::Totals => "all sent, totals paid and recorded",
            Check::ConfirmedByClaimer => "confirmed by its claimer",
            Check::FenceNeverDown => "fence never went down",
            Check::OneFilerToken => "one token across the stores",
            Check::LedgerEntry => "ledger entry",
            Check::Receipt => "receipt",
            Check::JobDeletedOnce => "job message deleted once, by its finisher",
            Check::TokenOrder => "tokens unique, in real-time order",
            Check::OneHolderPerToken => "one holder's writes per token",
            Check::NoStaleWriteAccepted => "no stale write accepted",
            Check::ConfirmAfterClaim => "confirm after its holder's claim",
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.refund {
            Some(refund) => write!(f, "{}: {refund}: {}", self.check.name(), self.detail),
            None => write!(f, "{}: {}", self.check.name(), self.detail),
        }
    }
}
