//! Shared by the per-backend contract test files: one test per contract case, so a failure
//! names the broken promise and the backend.

/// Expands to one `#[tokio::test]` per case of `flotilla_metastore::contract`, each on a fresh
/// store from `$make` (an async fn returning something that derefs to a `Metastore`).
macro_rules! contract_tests {
    ($make:path) => {
        contract_tests!(@cases $make;
            transact_any_failed_condition_writes_nothing,
            versions_advance_by_one,
            create_on_existing_reports_exists_with_version,
            condition_failures_report_per_op_reasons,
            delete_absent_without_condition_is_ok,
            check_only_op_writes_nothing,
            query_pages_complete_and_duplicate_free_while_items_are_added,
            query_prefix_does_not_leak_neighbouring_prefixes,
            count_matches_query,
            transaction_limit_100_ops_same_error_everywhere,
            item_size_limit_400kb_same_error_everywhere,
            duplicate_key_in_transaction_is_invalid,
            invalid_keys_are_rejected_everywhere,
            strong_read_sees_latest_commit,
            batch_get_omits_absent,
            bad_page_token_is_rejected,
            expiry_is_stored_and_returned,
            concurrent_cas_has_exactly_one_winner,
        );
    };
    (@cases $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let store = $make().await;
                flotilla_metastore::contract::$case(&*store).await;
            }
        )*
    };
}
