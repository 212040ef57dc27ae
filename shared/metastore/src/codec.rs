//! Request checks and page tokens shared by every backend.
//!
//! Both backends run every request through these functions before touching storage, so a
//! request one backend refuses is refused by the other with the same error, and a page token
//! minted by one is understood by the other.

use std::collections::HashSet;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::{
    Condition, FailureReason, Key, MAX_BATCH_GET_KEYS, MAX_PAGE_SIZE, MAX_PK_BYTES, MAX_SK_BYTES,
    MetastoreError, Op, OpOutcome, PageToken, Query, Transaction,
};

/// A key is valid when it is within the DynamoDB limits and its partition key has no NUL.
///
/// The embedded backend separates pk from sk with a NUL byte so that a prefix scan of one
/// partition can never run into a neighbouring partition; refusing NUL in pk everywhere keeps
/// the two backends interchangeable.
pub(crate) fn check_key(key: &Key) -> Result<(), MetastoreError> {
    crate::validate_key(key)?;
    check_pk(&key.pk)
}

fn check_pk(pk: &str) -> Result<(), MetastoreError> {
    if pk.is_empty() {
        return Err(MetastoreError::Invalid(
            "partition key must be non-empty".into(),
        ));
    }
    if pk.len() > MAX_PK_BYTES {
        return Err(MetastoreError::Invalid(
            "partition key exceeds the key length limit".into(),
        ));
    }
    if pk.as_bytes().contains(&0) {
        return Err(MetastoreError::Invalid(
            "partition key must not contain a NUL character".into(),
        ));
    }
    Ok(())
}

/// Validates a transaction: the shared limits of [`Transaction::validate`] plus the pk rule.
pub(crate) fn check_transaction(tx: &Transaction) -> Result<(), MetastoreError> {
    tx.validate()?;
    for op in &tx.ops {
        check_key(op.key())?;
    }
    Ok(())
}

/// Validates a batch read and removes repeated keys (DynamoDB refuses duplicates; a caller
/// asking twice for one item gets it once, as the trait promises nothing about repeats).
pub(crate) fn check_batch(keys: &[Key]) -> Result<Vec<Key>, MetastoreError> {
    if keys.len() > MAX_BATCH_GET_KEYS {
        return Err(MetastoreError::Invalid(format!(
            "batch_get names {} keys; the limit is {MAX_BATCH_GET_KEYS}",
            keys.len()
        )));
    }
    let mut seen = HashSet::with_capacity(keys.len());
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        check_key(key)?;
        if seen.insert(key) {
            out.push(key.clone());
        }
    }
    Ok(out)
}

/// Validates the partition and prefix of a query or count.
pub(crate) fn check_prefix(pk: &str, sk_prefix: &str) -> Result<(), MetastoreError> {
    check_pk(pk)?;
    if sk_prefix.len() > MAX_SK_BYTES {
        return Err(MetastoreError::Invalid(
            "sort key prefix exceeds the key length limit".into(),
        ));
    }
    Ok(())
}

/// Validates a query and returns the sort key to continue strictly after, if any.
pub(crate) fn check_query(query: &Query) -> Result<Option<String>, MetastoreError> {
    check_prefix(&query.pk, &query.sk_prefix)?;
    if query.limit == 0 || query.limit > MAX_PAGE_SIZE {
        return Err(MetastoreError::Invalid(format!(
            "page limit {} is outside 1..={MAX_PAGE_SIZE}",
            query.limit
        )));
    }
    query
        .start_after
        .as_ref()
        .map(|t| decode_token(t, &query.sk_prefix))
        .transpose()
}

/// The token that continues after `sk`.
pub(crate) fn encode_token(sk: &str) -> PageToken {
    PageToken(URL_SAFE_NO_PAD.encode(sk.as_bytes()))
}

/// The sort key inside a token. A token that does not decode, or whose key lies outside the
/// queried prefix (it was minted for another query), is refused: continuing from it would
/// silently skip or repeat items.
pub(crate) fn decode_token(token: &PageToken, sk_prefix: &str) -> Result<String, MetastoreError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(token.0.as_bytes())
        .map_err(|_| MetastoreError::BadPageToken)?;
    let sk = String::from_utf8(bytes).map_err(|_| MetastoreError::BadPageToken)?;
    if sk.is_empty() || sk.len() > MAX_SK_BYTES || !sk.starts_with(sk_prefix) {
        return Err(MetastoreError::BadPageToken);
    }
    Ok(sk)
}

/// Evaluates one condition against the item's current version (`None` = absent).
pub(crate) fn evaluate(condition: Option<Condition>, current: Option<u64>) -> OpOutcome {
    match (condition, current) {
        (None, _) => OpOutcome::Ok,
        (Some(Condition::Absent), None) => OpOutcome::Ok,
        (Some(Condition::Absent), Some(version)) => {
            OpOutcome::Failed(FailureReason::Exists { version })
        }
        (Some(Condition::Exists | Condition::Version(_)), None) => {
            OpOutcome::Failed(FailureReason::Missing)
        }
        (Some(Condition::Exists), Some(_)) => OpOutcome::Ok,
        (Some(Condition::Version(expected)), Some(actual)) if expected == actual => OpOutcome::Ok,
        (Some(Condition::Version(expected)), Some(actual)) => {
            OpOutcome::Failed(FailureReason::VersionMismatch { expected, actual })
        }
    }
}

pub(crate) fn op_condition(op: &Op) -> Option<Condition> {
    match op {
        Op::Put { condition, .. } | Op::Delete { condition, .. } => *condition,
        Op::Check { condition, .. } => Some(*condition),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Consistency;

    #[test]
    fn token_round_trips_and_is_bound_to_its_prefix() {
        let token = encode_token("table/orders");
        assert_eq!(
            decode_token(&token, "table/").ok().as_deref(),
            Some("table/orders")
        );
        assert!(matches!(
            decode_token(&token, "view/"),
            Err(MetastoreError::BadPageToken)
        ));
        assert!(matches!(
            decode_token(&PageToken("%%%".into()), ""),
            Err(MetastoreError::BadPageToken)
        ));
    }

    #[test]
    fn nul_in_partition_key_is_invalid() {
        let tx = Transaction::new().with(Op::put(Key::new("a\0b", "s"), vec![]));
        assert!(matches!(
            check_transaction(&tx),
            Err(MetastoreError::Invalid(_))
        ));
        assert!(
            check_key(&Key::new("a", "s\0t")).is_ok(),
            "NUL is fine in sort keys"
        );
    }

    #[test]
    fn query_limit_must_be_in_range() {
        let q = Query::new("p", "", Consistency::Strong).limit(0);
        assert!(matches!(check_query(&q), Err(MetastoreError::Invalid(_))));
        let q = Query::new("p", "", Consistency::Strong).limit(MAX_PAGE_SIZE + 1);
        assert!(matches!(check_query(&q), Err(MetastoreError::Invalid(_))));
    }

    #[test]
    fn batch_removes_duplicates_and_enforces_limit() {
        let keys = vec![Key::new("p", "a"), Key::new("p", "a"), Key::new("p", "b")];
        assert_eq!(check_batch(&keys).map(|k| k.len()).ok(), Some(2));
        let many: Vec<Key> = (0..101).map(|i| Key::new("p", format!("k{i}"))).collect();
        assert!(matches!(
            check_batch(&many),
            Err(MetastoreError::Invalid(_))
        ));
    }
}
