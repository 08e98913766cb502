//! One `#[test]` per guarantee, so a failure names the guarantee it broke and the others still
//! run: [`store_conformance!`], [`lease_conformance!`] and [`token_source_conformance!`] expand
//! to a test function for each guarantee function of this module, named after it.
//!
//! Each test builds its own subject (the `setup` statements, then the subject expression),
//! checks the one guarantee and, if it passed, runs the `teardown` statements. The runtime
//! attribute is the caller's: `#[tokio::test(start_paused = true)]` for in-memory subjects in
//! virtual time, a multi-threaded runtime for a real server. To test several forms of one
//! implementation (the concrete type, `Box<dyn …>`, `Arc<dyn …>`), invoke the macro once per
//! form, each in a module of its own.

/// A test for every [`FencedStore`](fencing_core::FencedStore) guarantee.
///
/// ```ignore
/// mod boxed {
///     use super::*;
///     fencing_testkit::store_conformance! {
///         #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
///         setup: { let schema = Schema::new().await; }
///         subject: Box::new(schema.store()) as Box<dyn FencedStore>,
///         caps: Capabilities::real_server(),
///         teardown: { schema.drop_schema().await; }
///     }
/// }
/// ```
#[macro_export]
macro_rules! store_conformance {
    ($($config:tt)*) => {
        $crate::__conformance_tests! {
            [$($config)*]
            with_caps claim_creates_a_missing_record,
            with_caps stale_claim_is_rejected,
            with_caps same_token_reclaim_is_idempotent,
            with_caps confirm_by_a_non_claimer_is_rejected,
            with_caps state_preconditions_are_enforced,
            with_caps fence_is_checked_before_state,
            with_caps payload_round_trips_bytes,
            with_caps hostile_keys_are_distinct,
            with_caps refused_writes_change_nothing,
            with_caps retried_writes_are_recognised,
            shared racing_claims_serialise,
            with_caps many_writes_answer_as_single_writes,
            with_caps retried_groups_are_recognised,
            shared a_group_racing_a_newer_holder_serialises,
            with_caps a_dropped_claim_is_applied_or_not,
            with_caps a_dropped_confirm_is_applied_or_not,
        }
    };
}

/// A test for every [`Lease`](fencing_core::Lease) guarantee; the same form as
/// [`store_conformance!`].
#[macro_export]
macro_rules! lease_conformance {
    ($($config:tt)*) => {
        $crate::__conformance_tests! {
            [$($config)*]
            with_caps lease_is_exclusive,
            shared concurrent_acquirers_get_one_lease,
            with_caps expiry_allows_takeover_with_higher_token,
            with_caps non_owner_cannot_extend_or_release,
            with_caps extend_keeps_the_lease_past_its_first_ttl,
            with_caps release_frees_the_resource,
            with_caps tokens_rise_across_acquisitions,
            with_caps local_deadline_is_conservative,
            with_caps acquire_retries_until_expiry,
            with_caps hostile_resource_names_are_distinct,
            with_caps status_names_the_live_holder_only,
            with_caps a_dropped_acquire_holds_no_longer_than_its_ttl,
            with_caps a_dropped_extend_keeps_the_holder,
            with_caps a_dropped_release_leaves_it_releasable,
            with_caps a_regression_is_one_on_every_write_path,
        }
    };
}

/// A test for every [`TokenSource`](fencing_core::TokenSource) guarantee that needs no server
/// fault; the same form as [`store_conformance!`].
#[macro_export]
macro_rules! token_source_conformance {
    ($($config:tt)*) => {
        $crate::__conformance_tests! {
            [$($config)*]
            plain tokens_strictly_increase,
            with_caps advance_to_raises_and_never_lowers,
            with_caps resources_have_independent_counters,
            plain exhaustion_is_an_error,
            shared concurrent_next_never_repeats,
        }
    };
}

/// Expands one test per `kind name` pair: `plain` guarantees take `&subject`, `with_caps` ones
/// `(&subject, caps)`, `shared` ones `(Arc::new(subject), caps)`.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ([$($config:tt)*]) => {};
    ([$($config:tt)*] $kind:ident $name:ident, $($rest:tt)*) => {
        $crate::__conformance_test! { $kind $name $($config)* }
        $crate::__conformance_tests! { [$($config)*] $($rest)* }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_test {
    (
        $kind:ident $name:ident
        #[$runtime:meta]
        $(setup: { $($setup:tt)* })?
        subject: $subject:expr,
        caps: $caps:expr
        $(, teardown: { $($teardown:tt)* })?
        $(,)?
    ) => {
        #[$runtime]
        async fn $name() {
            $($($setup)*)?
            let subject = $subject;
            let caps: $crate::conformance::Capabilities = $caps;
            $crate::__conformance_call!($kind $name subject caps);
            $($($teardown)*)?
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_call {
    (plain $name:ident $subject:ident $caps:ident) => {{
        let _ = $caps;
        $crate::conformance::$name(&$subject).await
    }};
    (with_caps $name:ident $subject:ident $caps:ident) => {
        $crate::conformance::$name(&$subject, $caps).await
    };
    (shared $name:ident $subject:ident $caps:ident) => {
        $crate::conformance::$name(::std::sync::Arc::new($subject), $caps).await
    };
}
