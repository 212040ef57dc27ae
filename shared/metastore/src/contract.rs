//! The metastore contract, as executable cases.
//!
//! Every backend runs every case here (`tests/contract_redb.rs`, `tests/contract_dynamo.rs`),
//! so a protocol proved on the embedded store holds on DynamoDB and the other way round. Each
//! case takes a store, uses its own partition keys, and panics with a message naming the
//! broken promise. The names read as the promise they check.

use std::collections::{BTreeSet, HashSet};

use futures::future::join_all;

use crate::{
    Condition, Consistency, FailureReason, ITEM_OVERHEAD_BYTES, Item, Key, MAX_ITEM_BYTES,
    MAX_TRANSACTION_OPS, Metastore, MetastoreError, Op, OpOutcome, PageToken, Query, Transaction,
    query_all,
};

const STRONG: Consistency = Consistency::Strong;

async fn get(store: &dyn Metastore, key: &Key) -> Option<Item> {
    match store.get(key, STRONG).await {
        Ok(item) => item,
        Err(e) => panic!("get {key:?} failed: {e}"),
    }
}

async fn version_of(store: &dyn Metastore, key: &Key) -> Option<u64> {
    get(store, key).await.map(|i| i.version)
}

async fn commit(store: &dyn Metastore, tx: Transaction) {
    if let Err(e) = store.transact(tx).await {
        panic!("transaction expected to commit failed: {e}");
    }
}

async fn commit_one(store: &dyn Metastore, op: Op) {
    commit(store, Transaction::new().with(op)).await
}

fn reasons(result: Result<(), MetastoreError>) -> Vec<OpOutcome> {
    match result {
        Err(MetastoreError::ConditionFailed { reasons }) => reasons,
        other => panic!("expected ConditionFailed, got {other:?}"),
    }
}

fn body(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// A failed condition on any operation cancels the whole transaction: nothing is written,
/// and the error names the failing operation while the others report `Ok`.
pub async fn transact_any_failed_condition_writes_nothing(store: &dyn Metastore) {
    let existing = Key::new("c-atomic", "existing");
    let fresh = Key::new("c-atomic", "fresh");
    let missing = Key::new("c-atomic", "missing");
    commit_one(store, Op::create(existing.clone(), body("before"))).await;

    for failing_index in 0..3 {
        let mut ops = vec![
            Op::create(fresh.clone(), body("new")),
            Op::put(existing.clone(), body("after")),
            Op::check(missing.clone(), Condition::Absent),
        ];
        // Make exactly one operation's condition fail, at each position in turn.
        ops[failing_index] = match failing_index {
            0 => Op::Put {
                key: fresh.clone(),
                body: body("new"),
                expires_at: None,
                condition: Some(Condition::Exists),
            },
            1 => Op::replace(existing.clone(), 99, body("after")),
            _ => Op::check(missing.clone(), Condition::Exists),
        };
        let got = reasons(store.transact(Transaction { ops }).await);
        assert_eq!(got.len(), 3, "one reason per operation");
        for (i, r) in got.iter().enumerate() {
            if i == failing_index {
                assert!(
                    matches!(r, OpOutcome::Failed(_)),
                    "op {i} should be reported failed: {got:?}"
                );
            } else {
                assert_eq!(*r, OpOutcome::Ok, "op {i} held its condition: {got:?}");
            }
        }
        assert_eq!(
            get(store, &fresh).await,
            None,
            "cancelled create must not be visible"
        );
        let e = get(store, &existing).await.expect("existing item");
        assert_eq!(
            (e.version, e.body),
            (1, body("before")),
            "cancelled put must not apply"
        );
    }
}

/// Versions start at 1 and advance by exactly one per write, whatever the verb.
pub async fn versions_advance_by_one(store: &dyn Metastore) {
    let k = Key::new("c-versions", "item");
    commit_one(store, Op::create(k.clone(), body("1"))).await;
    assert_eq!(version_of(store, &k).await, Some(1), "create starts at 1");
    commit_one(store, Op::put(k.clone(), body("2"))).await;
    assert_eq!(
        version_of(store, &k).await,
        Some(2),
        "unconditional put advances"
    );
    commit_one(store, Op::replace(k.clone(), 2, body("3"))).await;
    assert_eq!(version_of(store, &k).await, Some(3), "replace advances");
    let exists_put = Op::Put {
        key: k.clone(),
        body: body("4"),
        expires_at: None,
        condition: Some(Condition::Exists),
    };
    commit_one(store, exists_put).await;
    assert_eq!(
        version_of(store, &k).await,
        Some(4),
        "put-if-exists advances"
    );
    commit_one(store, Op::delete_at(k.clone(), 4)).await;
    assert_eq!(version_of(store, &k).await, None, "delete removes");
    commit_one(store, Op::put(k.clone(), body("again"))).await;
    assert_eq!(
        version_of(store, &k).await,
        Some(1),
        "a re-created item starts again at 1"
    );

    let other = Key::new("c-versions", "unconditional-first");
    commit_one(store, Op::put(other.clone(), body("x"))).await;
    assert_eq!(
        version_of(store, &other).await,
        Some(1),
        "unconditional put of an absent item starts at 1"
    );
}

/// Creating an existing item fails with `Exists` and the item's current version.
pub async fn create_on_existing_reports_exists_with_version(store: &dyn Metastore) {
    let k = Key::new("c-create", "item");
    commit_one(store, Op::create(k.clone(), body("a"))).await;
    commit_one(store, Op::put(k.clone(), body("b"))).await;
    commit_one(store, Op::put(k.clone(), body("c"))).await;
    let got = reasons(
        store
            .transact(Transaction::new().with(Op::create(k.clone(), body("d"))))
            .await,
    );
    assert_eq!(
        got,
        vec![OpOutcome::Failed(FailureReason::Exists { version: 3 })]
    );
}

/// Each condition reports its own reason: `Missing` for an absent item, `VersionMismatch`
/// with both versions for a stale replace, on puts, deletes and checks alike.
pub async fn condition_failures_report_per_op_reasons(store: &dyn Metastore) {
    let present = Key::new("c-reasons", "present");
    let absent = Key::new("c-reasons", "absent");
    commit_one(store, Op::create(present.clone(), body("x"))).await;
    commit_one(store, Op::put(present.clone(), body("y"))).await;

    let cases: Vec<(Op, FailureReason)> = vec![
        (
            Op::replace(absent.clone(), 1, body("z")),
            FailureReason::Missing,
        ),
        (
            Op::replace(present.clone(), 1, body("z")),
            FailureReason::VersionMismatch {
                expected: 1,
                actual: 2,
            },
        ),
        (
            Op::Delete {
                key: absent.clone(),
                condition: Some(Condition::Exists),
            },
            FailureReason::Missing,
        ),
        (
            Op::delete_at(present.clone(), 5),
            FailureReason::VersionMismatch {
                expected: 5,
                actual: 2,
            },
        ),
        (
            Op::check(absent.clone(), Condition::Version(1)),
            FailureReason::Missing,
        ),
        (
            Op::check(present.clone(), Condition::Absent),
            FailureReason::Exists { version: 2 },
        ),
    ];
    for (op, expected) in cases {
        let described = format!("{op:?}");
        let got = reasons(store.transact(Transaction::new().with(op)).await);
        assert_eq!(got, vec![OpOutcome::Failed(expected)], "{described}");
    }
    assert_eq!(version_of(store, &present).await, Some(2));
    assert_eq!(version_of(store, &absent).await, None);
}

/// Deleting an absent item without a condition succeeds and leaves it absent.
pub async fn delete_absent_without_condition_is_ok(store: &dyn Metastore) {
    let k = Key::new("c-delete", "never-written");
    commit_one(store, Op::delete(k.clone())).await;
    assert_eq!(get(store, &k).await, None);
}

/// A condition check asserts and writes nothing: the version does not move.
pub async fn check_only_op_writes_nothing(store: &dyn Metastore) {
    let present = Key::new("c-check", "present");
    let absent = Key::new("c-check", "absent");
    let written = Key::new("c-check", "written");
    commit_one(store, Op::create(present.clone(), body("x"))).await;
    commit(
        store,
        Transaction::new()
            .with(Op::check(present.clone(), Condition::Version(1)))
            .with(Op::check(absent.clone(), Condition::Absent))
            .with(Op::create(written.clone(), body("w"))),
    )
    .await;
    let p = get(store, &present).await.expect("present item");
    assert_eq!((p.version, p.body), (1, body("x")), "check must not write");
    assert_eq!(
        get(store, &absent).await,
        None,
        "check Absent must not create"
    );
    assert_eq!(
        version_of(store, &written).await,
        Some(1),
        "the guarded write applies"
    );
}

/// Paging with a small limit while items are added on both sides of the cursor returns every
/// item present from the start exactly once, in order, plus every item added after the cursor.
pub async fn query_pages_complete_and_duplicate_free_while_items_are_added(store: &dyn Metastore) {
    let pk = "c-paging";
    let initial: Vec<String> = (0..40).map(|i| format!("item/{:04}", i * 10)).collect();
    for chunk in initial.chunks(20) {
        let mut tx = Transaction::new();
        for sk in chunk {
            tx.push(Op::create(Key::new(pk, sk.clone()), body(sk)));
        }
        commit(store, tx).await;
    }

    let mut seen: Vec<String> = Vec::new();
    let mut added_after: BTreeSet<String> = BTreeSet::new();
    let mut token: Option<PageToken> = None;
    let mut pages = 0;
    loop {
        let page = store
            .query(
                &Query::new(pk, "item/", STRONG)
                    .limit(7)
                    .after(token.clone()),
            )
            .await
            .unwrap_or_else(|e| panic!("query page failed: {e}"));
        pages += 1;
        assert!(page.items.len() <= 7, "a page never exceeds its limit");
        seen.extend(page.items.iter().map(|i| i.key.sk.clone()));
        let Some(next) = page.next else { break };
        token = Some(next);
        // Add one item just before the cursor (may be missed) and one far after it (must be seen).
        // Every page ends at or beyond item/0060, so item/0000-N sorts before the cursor.
        let n = pages * 10;
        let before = format!("item/0000-{n:03}");
        let after = format!("item/9999-added-{n:03}");
        commit(
            store,
            Transaction::new()
                .with(Op::create(Key::new(pk, before), body("b")))
                .with(Op::create(Key::new(pk, after.clone()), body("a"))),
        )
        .await;
        added_after.insert(after);
        assert!(pages < 100, "paging does not terminate");
    }

    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no item is returned twice");
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(sorted, seen, "pages come in ascending sort-key order");
    for sk in &initial {
        assert!(unique.contains(sk), "initial item {sk} was skipped");
    }
    for sk in &added_after {
        assert!(
            unique.contains(sk),
            "item {sk} added after the cursor was not seen"
        );
    }
}

/// A prefix query returns only its prefix within its partition: not the neighbouring prefix
/// (`tab` vs `table`), not a partition whose name extends this one (`p` vs `p2`).
pub async fn query_prefix_does_not_leak_neighbouring_prefixes(store: &dyn Metastore) {
    let pk = "c-prefix";
    let sks = ["tab", "tab/1", "tab/2", "tab0", "table/1", "ta", "tb", "u"];
    let mut tx = Transaction::new();
    for sk in sks {
        tx.push(Op::create(Key::new(pk, sk), body(sk)));
    }
    tx.push(Op::create(
        Key::new(format!("{pk}2"), "tab/9"),
        body("other partition"),
    ));
    tx.push(Op::create(
        Key::new("c-prefi", "tab/8"),
        body("shorter partition"),
    ));
    commit(store, tx).await;

    let got = |items: Vec<Item>| {
        items
            .into_iter()
            .map(|i| (i.key.pk, i.key.sk))
            .collect::<Vec<_>>()
    };
    let tab_slash = query_all(store, Query::new(pk, "tab/", STRONG))
        .await
        .map(got)
        .ok();
    assert_eq!(
        tab_slash,
        Some(vec![
            (pk.to_string(), "tab/1".to_string()),
            (pk.to_string(), "tab/2".to_string())
        ]),
        "prefix tab/"
    );
    let tab: Vec<String> = query_all(store, Query::new(pk, "tab", STRONG))
        .await
        .map(|v| v.into_iter().map(|i| i.key.sk).collect())
        .unwrap_or_default();
    assert_eq!(
        tab,
        vec!["tab", "tab/1", "tab/2", "tab0", "table/1"],
        "prefix tab"
    );
    let all = query_all(store, Query::new(pk, "", STRONG))
        .await
        .map(|v| v.len())
        .ok();
    assert_eq!(
        all,
        Some(sks.len()),
        "an empty prefix lists the whole partition and nothing else"
    );
}

/// `count` agrees with the number of items a full query returns, for several prefixes.
pub async fn count_matches_query(store: &dyn Metastore) {
    let pk = "c-count";
    let mut tx = Transaction::new();
    for i in 0..25 {
        tx.push(Op::create(Key::new(pk, format!("a/{i:03}")), body("a")));
    }
    for i in 0..12 {
        tx.push(Op::create(Key::new(pk, format!("b/{i:03}")), body("b")));
    }
    commit(store, tx).await;
    for prefix in ["", "a/", "b/", "a/01", "c/"] {
        let listed = query_all(store, Query::new(pk, prefix, STRONG).limit(5))
            .await
            .map(|v| v.len() as u64)
            .unwrap_or_else(|e| panic!("query failed: {e}"));
        let counted = store
            .count(pk, prefix, STRONG)
            .await
            .unwrap_or_else(|e| panic!("count failed: {e}"));
        assert_eq!(
            counted, listed,
            "count and query disagree for prefix {prefix:?}"
        );
    }
    assert_eq!(store.count(pk, "a/", STRONG).await.ok(), Some(25));
}

/// 100 operations commit; 101 are refused with `TooManyOperations` and write nothing.
pub async fn transaction_limit_100_ops_same_error_everywhere(store: &dyn Metastore) {
    let mut full = Transaction::new();
    for i in 0..MAX_TRANSACTION_OPS {
        full.push(Op::create(
            Key::new("c-limit-ops", format!("ok/{i:03}")),
            body("x"),
        ));
    }
    commit(store, full).await;
    assert_eq!(
        store.count("c-limit-ops", "ok/", STRONG).await.ok(),
        Some(MAX_TRANSACTION_OPS as u64)
    );

    let mut over = Transaction::new();
    for i in 0..=MAX_TRANSACTION_OPS {
        over.push(Op::create(
            Key::new("c-limit-ops", format!("over/{i:03}")),
            body("x"),
        ));
    }
    match store.transact(over).await {
        Err(MetastoreError::TooManyOperations { count }) => {
            assert_eq!(count, MAX_TRANSACTION_OPS + 1)
        }
        other => panic!("expected TooManyOperations, got {other:?}"),
    }
    assert_eq!(
        store.count("c-limit-ops", "over/", STRONG).await.ok(),
        Some(0),
        "nothing written"
    );
}

/// A 400,000-byte item (the documented "400 KB") is stored and read back intact; one byte
/// over [`MAX_ITEM_BYTES`] (409,600) is refused with `ItemTooLarge` before anything is sent,
/// and nothing in the transaction is written.
///
/// The accepted size is 400,000 rather than the exact limit because moto caps items at
/// 405,000 bytes by its own count, below DynamoDB's measured 409,600; items between the two
/// are refused by moto with the same `ItemTooLarge` kind.
pub async fn item_size_limit_400kb_same_error_everywhere(store: &dyn Metastore) {
    let k = Key::new("c-limit-size", "big");
    let accepted_body = 400_000 - ITEM_OVERHEAD_BYTES - k.pk.len() - k.sk.len();
    let big: Vec<u8> = (0..accepted_body).map(|i| (i % 251) as u8).collect();
    commit_one(store, Op::create(k.clone(), big.clone())).await;
    let read = get(store, &k).await.expect("item at the size limit");
    assert!(read.body == big, "body at the size limit must round-trip");

    let small = Key::new("c-limit-size", "small");
    let too_big = Key::new("c-limit-size", "too-big");
    let tx = Transaction::new()
        .with(Op::create(small.clone(), body("s")))
        .with(Op::create(
            too_big.clone(),
            vec![
                7u8;
                MAX_ITEM_BYTES - ITEM_OVERHEAD_BYTES - too_big.pk.len() - too_big.sk.len() + 1
            ],
        ));
    match store.transact(tx).await {
        Err(MetastoreError::ItemTooLarge { key, size }) => {
            assert_eq!(key, too_big);
            assert_eq!(size, MAX_ITEM_BYTES + 1);
        }
        other => panic!("expected ItemTooLarge, got {other:?}"),
    }
    assert_eq!(
        get(store, &small).await,
        None,
        "nothing in a refused transaction is written"
    );
}

/// Two operations on one key in one transaction are refused before anything is sent.
pub async fn duplicate_key_in_transaction_is_invalid(store: &dyn Metastore) {
    let k = Key::new("c-dup", "item");
    let tx = Transaction::new()
        .with(Op::create(k.clone(), body("a")))
        .with(Op::check(k.clone(), Condition::Absent));
    assert!(
        matches!(store.transact(tx).await, Err(MetastoreError::Invalid(_))),
        "duplicate keys are invalid"
    );
    assert_eq!(get(store, &k).await, None);
}

/// Malformed keys are refused identically everywhere: empty keys, over-long keys, NUL in pk.
pub async fn invalid_keys_are_rejected_everywhere(store: &dyn Metastore) {
    let empty_sk = Key::new("c-keys", "");
    assert!(matches!(
        store
            .transact(Transaction::new().with(Op::put(empty_sk, body("x"))))
            .await,
        Err(MetastoreError::Invalid(_))
    ));
    let long_sk = Key::new("c-keys", "s".repeat(crate::MAX_SK_BYTES + 1));
    assert!(matches!(
        store
            .transact(Transaction::new().with(Op::put(long_sk, body("x"))))
            .await,
        Err(MetastoreError::KeyTooLong { .. })
    ));
    let nul_pk = Key::new("c-\0keys", "s");
    assert!(matches!(
        store.get(&nul_pk, STRONG).await,
        Err(MetastoreError::Invalid(_))
    ));
    assert!(
        matches!(
            store.transact(Transaction::new()).await,
            Err(MetastoreError::Invalid(_))
        ),
        "empty transaction"
    );
    assert!(matches!(
        store
            .query(&Query::new("c-keys", "", STRONG).limit(0))
            .await,
        Err(MetastoreError::Invalid(_))
    ));
}

/// A strong read issued after a commit returned sees it: get, batch_get, query and count.
pub async fn strong_read_sees_latest_commit(store: &dyn Metastore) {
    let k = Key::new("c-strong", "item");
    commit_one(store, Op::create(k.clone(), body("v1"))).await;
    for round in 2..=6u64 {
        let expected_body = body(&format!("v{round}"));
        commit_one(
            store,
            Op::replace(k.clone(), round - 1, expected_body.clone()),
        )
        .await;
        let g = get(store, &k).await.expect("item");
        assert_eq!(
            (g.version, &g.body),
            (round, &expected_body),
            "get is stale"
        );
        let b = store
            .batch_get(std::slice::from_ref(&k), STRONG)
            .await
            .unwrap_or_default();
        assert_eq!(
            b.first().map(|i| i.version),
            Some(round),
            "batch_get is stale"
        );
        let q = store
            .query(&Query::new("c-strong", "", STRONG))
            .await
            .map(|p| p.items)
            .unwrap_or_default();
        assert_eq!(q.first().map(|i| i.version), Some(round), "query is stale");
    }
    commit_one(store, Op::delete(k.clone())).await;
    assert_eq!(get(store, &k).await, None, "a strong read sees the delete");
    assert_eq!(
        store.count("c-strong", "", STRONG).await.ok(),
        Some(0),
        "count sees the delete"
    );
}

/// `batch_get` returns the present items and omits absent ones, without error.
pub async fn batch_get_omits_absent(store: &dyn Metastore) {
    let present: Vec<Key> = (0..5)
        .map(|i| Key::new("c-batch", format!("p{i}")))
        .collect();
    let mut tx = Transaction::new();
    for k in &present {
        tx.push(Op::create(k.clone(), body(&k.sk)));
    }
    commit(store, tx).await;
    let mut keys = present.clone();
    keys.extend((0..5).map(|i| Key::new("c-batch", format!("absent{i}"))));
    keys.push(Key::new("c-batch-other", "p0"));
    let got = store
        .batch_get(&keys, STRONG)
        .await
        .unwrap_or_else(|e| panic!("batch_get failed: {e}"));
    let mut got_keys: Vec<Key> = got.iter().map(|i| i.key.clone()).collect();
    got_keys.sort();
    assert_eq!(got_keys, present);
    for item in &got {
        assert_eq!(
            item.body,
            body(&item.key.sk),
            "each item carries its own body"
        );
    }
    assert_eq!(
        store.batch_get(&[], STRONG).await.map(|v| v.len()).ok(),
        Some(0),
        "empty batch"
    );
}

/// Tokens that do not decode, or that belong to another prefix, are refused.
pub async fn bad_page_token_is_rejected(store: &dyn Metastore) {
    let pk = "c-token";
    let mut tx = Transaction::new();
    for sk in ["a/1", "a/2", "a/3", "b/1"] {
        tx.push(Op::create(Key::new(pk, sk), body(sk)));
    }
    commit(store, tx).await;
    let first = store
        .query(&Query::new(pk, "a/", STRONG).limit(1))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let token = first.next.expect("more pages");
    let garbage = Query::new(pk, "a/", STRONG).after(Some(PageToken("not a token!".into())));
    assert!(
        matches!(
            store.query(&garbage).await,
            Err(MetastoreError::BadPageToken)
        ),
        "garbage token"
    );
    let wrong_prefix = Query::new(pk, "b/", STRONG).after(Some(token.clone()));
    assert!(
        matches!(
            store.query(&wrong_prefix).await,
            Err(MetastoreError::BadPageToken)
        ),
        "token of another prefix"
    );
    let ok = store
        .query(&Query::new(pk, "a/", STRONG).after(Some(token)))
        .await
        .map(|p| p.items.len())
        .ok();
    assert_eq!(ok, Some(2), "a valid token continues after the last item");
}

/// The expiry is stored and returned by every read, and a later put can clear it.
pub async fn expiry_is_stored_and_returned(store: &dyn Metastore) {
    let k = Key::new("c-expiry", "lease");
    let at = 1_900_000_000i64;
    commit_one(
        store,
        Op::create(k.clone(), body("x")).with_expiry(Some(at)),
    )
    .await;
    assert_eq!(
        get(store, &k).await.and_then(|i| i.expires_at),
        Some(at),
        "get"
    );
    let q = query_all(store, Query::new("c-expiry", "", STRONG))
        .await
        .unwrap_or_default();
    assert_eq!(q.first().and_then(|i| i.expires_at), Some(at), "query");
    let b = store
        .batch_get(std::slice::from_ref(&k), STRONG)
        .await
        .unwrap_or_default();
    assert_eq!(b.first().and_then(|i| i.expires_at), Some(at), "batch_get");
    commit_one(store, Op::replace(k.clone(), 1, body("y"))).await;
    let cleared = get(store, &k).await.expect("item");
    assert_eq!(
        (cleared.version, cleared.expires_at),
        (2, None),
        "a put without expiry clears it"
    );
    let exists_put = Op::Put {
        key: k.clone(),
        body: body("z"),
        expires_at: Some(at + 1),
        condition: Some(Condition::Exists),
    };
    commit_one(store, exists_put).await;
    assert_eq!(
        get(store, &k).await.and_then(|i| i.expires_at),
        Some(at + 1),
        "put-if-exists sets expiry"
    );
}

/// N writers race a compare-and-swap from the same version: exactly one wins; every loser is
/// told so (condition failed, or a retryable conflict where the backend reports one).
pub async fn concurrent_cas_has_exactly_one_winner(store: &dyn Metastore) {
    let k = Key::new("c-cas", "counter");
    commit_one(store, Op::create(k.clone(), body("0"))).await;
    const RACERS: usize = 8;
    let attempts = (0..RACERS).map(|i| {
        let key = k.clone();
        async move {
            store
                .transact(Transaction::new().with(Op::replace(key, 1, body(&format!("w{i}")))))
                .await
        }
    });
    let results = join_all(attempts).await;
    let mut winners = Vec::new();
    for (i, r) in results.iter().enumerate() {
        match r {
            Ok(()) => winners.push(i),
            Err(MetastoreError::ConditionFailed { reasons }) => {
                assert_eq!(
                    reasons.as_slice(),
                    &[OpOutcome::Failed(FailureReason::VersionMismatch {
                        expected: 1,
                        actual: 2
                    })],
                    "a loser sees the winner's version"
                );
            }
            Err(e) if e.is_retryable() => {}
            Err(e) => panic!("unexpected error from racer {i}: {e}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one racer wins: {winners:?}");
    let item = get(store, &k).await.expect("item");
    assert_eq!(item.version, 2);
    assert_eq!(
        item.body,
        body(&format!("w{}", winners[0])),
        "the stored body is the winner's"
    );
}

/// Runs every case in sequence on one store (each case uses its own partitions).
pub async fn run_all(store: &dyn Metastore) {
    transact_any_failed_condition_writes_nothing(store).await;
    versions_advance_by_one(store).await;
    create_on_existing_reports_exists_with_version(store).await;
    condition_failures_report_per_op_reasons(store).await;
    delete_absent_without_condition_is_ok(store).await;
    check_only_op_writes_nothing(store).await;
    query_pages_complete_and_duplicate_free_while_items_are_added(store).await;
    query_prefix_does_not_leak_neighbouring_prefixes(store).await;
    count_matches_query(store).await;
    transaction_limit_100_ops_same_error_everywhere(store).await;
    item_size_limit_400kb_same_error_everywhere(store).await;
    duplicate_key_in_transaction_is_invalid(store).await;
    invalid_keys_are_rejected_everywhere(store).await;
    strong_read_sees_latest_commit(store).await;
    batch_get_omits_absent(store).await;
    bad_page_token_is_rejected(store).await;
    expiry_is_stored_and_returned(store).await;
    concurrent_cas_has_exactly_one_winner(store).await;
}
