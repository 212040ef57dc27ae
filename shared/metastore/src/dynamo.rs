//! The DynamoDB metastore: one table, string keys `pk` / `sk`.
//!
//! Attributes: `pk` (S), `sk` (S), `v` (N, the item version), `b` (B, the body) and `ttl`
//! (N, epoch seconds, present only when the item has an expiry; the table's TTL attribute).
//!
//! A metastore transaction is one `TransactWriteItems` call. Versions are kept by the
//! conditions themselves: a `Version(v)` put writes `v + 1` under `v = :v`, an `Absent` put
//! writes 1 under `attribute_not_exists`, and an unconditional or `Exists` put is an update
//! `v = if_not_exists(v, 0) + 1`, so the version advances by exactly one in every case without
//! a read. Every operation asks for `ALL_OLD` on condition failure, so a cancellation carries
//! the current item and maps onto the same per-operation [`FailureReason`]s as the embedded
//! backend. SDK errors are classified in one place, [`classify`].
//!
//! [`FailureReason`]: crate::FailureReason

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::{Credentials, Region};
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemError;
use aws_sdk_dynamodb::operation::create_table::CreateTableError;
use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use aws_sdk_dynamodb::operation::describe_time_to_live::DescribeTimeToLiveError;
use aws_sdk_dynamodb::operation::get_item::GetItemError;
use aws_sdk_dynamodb::operation::query::QueryError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_time_to_live::UpdateTimeToLiveError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, CancellationReason, ConditionCheck, Delete,
    KeySchemaElement, KeyType, KeysAndAttributes, Put, ReturnValuesOnConditionCheckFailure,
    ScalarAttributeType, Select, TableStatus, TimeToLiveSpecification, TimeToLiveStatus,
    TransactWriteItem, Update,
};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_types::Blob;
use aws_smithy_types::error::operation::BuildError;

use crate::codec::{self, evaluate, op_condition};
use crate::{
    Condition, Consistency, FailureReason, Item, Key, Metastore, MetastoreError, Op, OpOutcome,
    Page, Query, Transaction, item_size,
};

const PK: &str = "pk";
const SK: &str = "sk";
const VERSION: &str = "v";
const BODY: &str = "b";
const TTL: &str = "ttl";

/// Longest service message carried into an error (upstream text is bounded).
const MAX_MESSAGE_CHARS: usize = 300;
/// Attempts to drain `UnprocessedKeys` of a `BatchGetItem` before giving up as retryable.
const BATCH_GET_ATTEMPTS: u32 = 8;

/// The DynamoDB metastore. Cheap to clone (the SDK client is a handle).
#[derive(Clone, Debug)]
pub struct DynamoMetastore {
    client: Client,
    table: String,
}

impl DynamoMetastore {
    pub fn new(client: Client, table_name: impl Into<String>) -> Self {
        Self {
            client,
            table: table_name.into(),
        }
    }

    pub fn table_name(&self) -> &str {
        &self.table
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Creates the metastore table (on-demand billing, `pk`/`sk` string keys, TTL on `ttl`)
    /// and waits until it is active. An existing table is fine, so this is safe to repeat;
    /// in AWS the SAM template creates the table and this is for local and emulator use.
    pub async fn create_table(client: &Client, name: &str) -> Result<(), MetastoreError> {
        let key = |attr: &str, kind: KeyType| {
            KeySchemaElement::builder()
                .attribute_name(attr)
                .key_type(kind)
                .build()
                .map_err(build_error)
        };
        let attr = |attr: &str| {
            AttributeDefinition::builder()
                .attribute_name(attr)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(build_error)
        };
        let created = client
            .create_table()
            .table_name(name)
            .billing_mode(BillingMode::PayPerRequest)
            .key_schema(key(PK, KeyType::Hash)?)
            .key_schema(key(SK, KeyType::Range)?)
            .attribute_definitions(attr(PK)?)
            .attribute_definitions(attr(SK)?)
            .send()
            .await;
        match created {
            Ok(_) => {}
            Err(e) if e.code() == Some("ResourceInUseException") => {}
            Err(e) => return Err(classify(e, Call::Admin, None)),
        }

        // Readiness polling, bounded: a new table takes seconds to become ACTIVE in AWS and
        // is immediate on emulators.
        let mut active = false;
        for _ in 0..120 {
            let described = client.describe_table().table_name(name).send().await;
            let status =
                described.map_err(|e| classify::<DescribeTableError>(e, Call::Admin, None))?;
            if status.table().and_then(|t| t.table_status()) == Some(&TableStatus::Active) {
                active = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        if !active {
            return Err(MetastoreError::Backend(format!(
                "table {name} did not become active"
            )));
        }

        let ttl = client.describe_time_to_live().table_name(name).send().await;
        let ttl = ttl.map_err(|e| classify::<DescribeTimeToLiveError>(e, Call::Admin, None))?;
        let enabled = ttl.time_to_live_description().is_some_and(|d| {
            d.attribute_name() == Some(TTL)
                && matches!(
                    d.time_to_live_status(),
                    Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
                )
        });
        if !enabled {
            let spec = TimeToLiveSpecification::builder()
                .enabled(true)
                .attribute_name(TTL)
                .build()
                .map_err(build_error)?;
            let updated = client
                .update_time_to_live()
                .table_name(name)
                .time_to_live_specification(spec)
                .send()
                .await;
            updated.map_err(|e| classify::<UpdateTimeToLiveError>(e, Call::Admin, None))?;
        }
        Ok(())
    }
}

/// A DynamoDB client for `endpoint` (an emulator such as moto, or DynamoDB Local) or, with
/// `None`, for AWS with the default credential and region chain.
///
/// With an endpoint, credentials come from `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` when
/// set and are the fixed test pair otherwise, and the region defaults to `us-east-1`: an
/// emulator accepts any signature, and the default chain would otherwise probe the instance
/// metadata service.
pub async fn connect(endpoint: Option<&str>) -> Client {
    let timeouts = aws_config::timeout::TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(3))
        .operation_attempt_timeout(Duration::from_secs(10))
        .build();
    let mut loader =
        aws_config::defaults(aws_config::BehaviorVersion::latest()).timeout_config(timeouts);
    if let Some(endpoint) = endpoint {
        let access = std::env::var("AWS_ACCESS_KEY_ID").unwrap_or_else(|_| "test".into());
        let secret = std::env::var("AWS_SECRET_ACCESS_KEY").unwrap_or_else(|_| "test".into());
        let region = std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into());
        loader = loader
            .endpoint_url(endpoint)
            .credentials_provider(Credentials::new(
                access,
                secret,
                None,
                None,
                "flotilla-emulator",
            ))
            .region(Region::new(region));
    }
    Client::new(&loader.load().await)
}

fn build_error(e: BuildError) -> MetastoreError {
    MetastoreError::Invalid(format!("cannot build DynamoDB request: {e}"))
}

// ---------------------------------------------------------------------------------------------
// Error classification

/// Whether the failed call could have changed anything. Reads cannot, so any transport
/// failure of a read is simply retryable; a write that may have reached the service is
/// `OutcomeUnknown`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    Read,
    Write,
    Admin,
}

/// Access to the cancellation reasons of the one error type that has them, so that
/// [`classify`] can be generic over every operation's error.
trait CancellationReasons {
    fn cancellation_reasons(&self) -> Option<&[CancellationReason]> {
        None
    }
}

impl CancellationReasons for TransactWriteItemsError {
    fn cancellation_reasons(&self) -> Option<&[CancellationReason]> {
        match self {
            TransactWriteItemsError::TransactionCanceledException(e) => {
                Some(e.cancellation_reasons())
            }
            _ => None,
        }
    }
}
impl CancellationReasons for GetItemError {}
impl CancellationReasons for BatchGetItemError {}
impl CancellationReasons for QueryError {}
impl CancellationReasons for CreateTableError {}
impl CancellationReasons for DescribeTableError {}
impl CancellationReasons for DescribeTimeToLiveError {}
impl CancellationReasons for UpdateTimeToLiveError {}

fn bounded(message: &str) -> String {
    message.chars().take(MAX_MESSAGE_CHARS).collect()
}

/// The single mapping from an SDK error to a [`MetastoreError`]. `ops` is the transaction, for
/// mapping cancellation reasons back onto operations.
fn classify<E>(err: SdkError<E, HttpResponse>, call: Call, ops: Option<&[Op]>) -> MetastoreError
where
    E: ProvideErrorMetadata + CancellationReasons,
{
    let unknown_or_retry = |what: &str| match call {
        Call::Write => MetastoreError::OutcomeUnknown {
            message: what.to_string(),
        },
        Call::Read | Call::Admin => MetastoreError::Retryable {
            message: what.to_string(),
        },
    };
    let service = match &err {
        SdkError::ConstructionFailure(_) => {
            return MetastoreError::Backend("DynamoDB request could not be constructed".into());
        }
        // The request may have been sent and applied.
        SdkError::TimeoutError(_) => return unknown_or_retry("DynamoDB request timed out"),
        SdkError::DispatchFailure(f) if f.is_user() => {
            return MetastoreError::Backend(
                "DynamoDB request could not be dispatched (configuration)".into(),
            );
        }
        SdkError::DispatchFailure(_) => {
            return unknown_or_retry("DynamoDB request failed in transit");
        }
        SdkError::ResponseError(_) => {
            return unknown_or_retry("DynamoDB response could not be read");
        }
        SdkError::ServiceError(s) => s.err(),
        _ => return unknown_or_retry("unrecognised DynamoDB SDK failure"),
    };
    let code = service.code().unwrap_or("Unknown");
    let message = bounded(service.message().unwrap_or(""));
    let status = err.raw_response().map(|r| r.status().as_u16()).unwrap_or(0);

    if let Some(reasons) = service.cancellation_reasons() {
        return classify_cancellation(reasons, ops, &message);
    }
    match code {
        "TransactionConflictException"
        | "TransactionInProgressException"
        | "ThrottlingException"
        | "ProvisionedThroughputExceededException"
        | "RequestLimitExceeded"
        | "LimitExceededException" => MetastoreError::Retryable {
            message: format!("{code}: {message}"),
        },
        "InternalServerError" | "ServiceUnavailable" => {
            unknown_or_retry(&format!("{code}: {message}"))
        }
        "ValidationException" if message.to_ascii_lowercase().contains("size") => {
            item_too_large(ops, &message)
        }
        "ValidationException" => {
            MetastoreError::Invalid(format!("DynamoDB refused the request: {message}"))
        }
        "ResourceNotFoundException" => {
            MetastoreError::Backend(format!("metastore table not found: {message}"))
        }
        _ if status >= 500 => unknown_or_retry(&format!("{code} (HTTP {status}): {message}")),
        _ => MetastoreError::Backend(format!("{code}: {message}")),
    }
}

fn classify_cancellation(
    reasons: &[CancellationReason],
    ops: Option<&[Op]>,
    message: &str,
) -> MetastoreError {
    let codes: Vec<&str> = reasons.iter().map(|r| r.code().unwrap_or("None")).collect();
    if codes.contains(&"ConditionalCheckFailed") {
        let Some(ops) = ops.filter(|ops| ops.len() == reasons.len()) else {
            return MetastoreError::Backend(
                "transaction cancelled with reasons that do not match its operations".into(),
            );
        };
        let outcomes = reasons
            .iter()
            .zip(ops)
            .map(|(reason, op)| condition_outcome(reason, op))
            .collect();
        return MetastoreError::ConditionFailed { reasons: outcomes };
    }
    let any = |wanted: &[&str]| codes.iter().any(|c| wanted.contains(c));
    if any(&[
        "TransactionConflict",
        "ThrottlingError",
        "ProvisionedThroughputExceeded",
    ]) {
        return MetastoreError::Retryable {
            message: format!("transaction cancelled: {}", codes.join(",")),
        };
    }
    if any(&["ValidationError"]) {
        if message.to_ascii_lowercase().contains("size") {
            return item_too_large(ops, message);
        }
        return MetastoreError::Invalid(format!("DynamoDB refused the transaction: {message}"));
    }
    MetastoreError::Backend(format!("transaction cancelled: {}", codes.join(",")))
}

/// The outcome of one operation of a cancelled transaction, from its reason code and the
/// current item DynamoDB returned (`ALL_OLD`).
fn condition_outcome(reason: &CancellationReason, op: &Op) -> OpOutcome {
    if reason.code() != Some("ConditionalCheckFailed") {
        return OpOutcome::Ok;
    }
    // An item without a version attribute was not written by Flotilla; treat it as version 0.
    let current = reason
        .item()
        .filter(|item| !item.is_empty())
        .map(|item| number(item, VERSION).unwrap_or(0));
    match evaluate(op_condition(op), current) {
        OpOutcome::Failed(reason) => OpOutcome::Failed(reason),
        // The service says the condition failed, but the returned item satisfies it: the
        // only consistent reading is that the item was absent where it had to exist.
        OpOutcome::Ok => match current {
            Some(version) => OpOutcome::Failed(FailureReason::Exists { version }),
            None => OpOutcome::Failed(FailureReason::Missing),
        },
    }
}

/// `Transaction::validate` refuses oversized items first, so this is reached only when the
/// service counts differently; report the largest put of the transaction.
fn item_too_large(ops: Option<&[Op]>, message: &str) -> MetastoreError {
    let largest = ops.into_iter().flatten().filter_map(|op| match op {
        Op::Put { key, body, .. } => Some((key, item_size(key, body))),
        _ => None,
    });
    match largest.max_by_key(|(_, size)| *size) {
        Some((key, size)) => MetastoreError::ItemTooLarge {
            key: key.clone(),
            size,
        },
        None => MetastoreError::Invalid(format!("DynamoDB refused the request: {message}")),
    }
}

// ---------------------------------------------------------------------------------------------
// Item encoding

type Attrs = HashMap<String, AttributeValue>;

fn key_attrs(key: &Key) -> Attrs {
    HashMap::from([
        (PK.to_string(), AttributeValue::S(key.pk.clone())),
        (SK.to_string(), AttributeValue::S(key.sk.clone())),
    ])
}

fn number(item: &Attrs, name: &str) -> Option<u64> {
    match item.get(name) {
        Some(AttributeValue::N(n)) => n.parse().ok(),
        _ => None,
    }
}

fn decode_item(item: &Attrs) -> Result<Item, MetastoreError> {
    let string = |name: &str| match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s.clone()),
        _ => None,
    };
    let key = Key::new(
        string(PK).unwrap_or_default(),
        string(SK).unwrap_or_default(),
    );
    let corrupt = |message: &str| MetastoreError::Corrupt {
        key: key.clone(),
        message: message.to_string(),
    };
    if key.pk.is_empty() || key.sk.is_empty() {
        return Err(corrupt("item lacks its pk or sk attribute"));
    }
    let version = number(item, VERSION).ok_or_else(|| corrupt("item lacks a numeric version"))?;
    let body = match item.get(BODY) {
        Some(AttributeValue::B(b)) => b.as_ref().to_vec(),
        None => Vec::new(),
        Some(_) => return Err(corrupt("item body is not binary")),
    };
    let expires_at = match item.get(TTL) {
        None => None,
        Some(AttributeValue::N(n)) => Some(
            n.parse::<i64>()
                .map_err(|_| corrupt("ttl is not an integer"))?,
        ),
        Some(_) => return Err(corrupt("ttl is not a number")),
    };
    Ok(Item {
        key,
        version,
        body,
        expires_at,
    })
}

/// Expression attribute names and values collected while building one expression, so that
/// only the ones actually used are sent (DynamoDB refuses unused ones).
#[derive(Default)]
struct Expr {
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
}

impl Expr {
    fn name(&mut self, attr: &str) -> String {
        let placeholder = format!("#{attr}");
        self.names.insert(placeholder.clone(), attr.to_string());
        placeholder
    }

    fn value(&mut self, placeholder: &str, value: AttributeValue) -> String {
        self.values.insert(placeholder.to_string(), value);
        placeholder.to_string()
    }

    fn condition(&mut self, condition: Condition) -> String {
        match condition {
            Condition::Absent => format!("attribute_not_exists({})", self.name(PK)),
            Condition::Exists => format!("attribute_exists({})", self.name(PK)),
            Condition::Version(v) => {
                let name = self.name(VERSION);
                format!(
                    "{name} = {}",
                    self.value(":expected", AttributeValue::N(v.to_string()))
                )
            }
        }
    }

    fn names(&self) -> Option<HashMap<String, String>> {
        (!self.names.is_empty()).then(|| self.names.clone())
    }

    fn values(&self) -> Option<Attrs> {
        (!self.values.is_empty()).then(|| self.values.clone())
    }
}

fn transact_item(table: &str, op: &Op) -> Result<TransactWriteItem, MetastoreError> {
    let all_old = ReturnValuesOnConditionCheckFailure::AllOld;
    let mut expr = Expr::default();
    let item = match op {
        Op::Put {
            key,
            body,
            expires_at,
            condition: condition @ (Some(Condition::Absent) | Some(Condition::Version(_))),
        } => {
            let condition = condition.unwrap_or(Condition::Absent);
            let version = match condition {
                Condition::Version(v) => v
                    .checked_add(1)
                    .ok_or_else(|| MetastoreError::Invalid("version overflow".into()))?,
                _ => 1,
            };
            let mut attrs = key_attrs(key);
            attrs.insert(VERSION.into(), AttributeValue::N(version.to_string()));
            attrs.insert(BODY.into(), AttributeValue::B(Blob::new(body.clone())));
            if let Some(at) = expires_at {
                attrs.insert(TTL.into(), AttributeValue::N(at.to_string()));
            }
            let condition = expr.condition(condition);
            let put = Put::builder()
                .table_name(table)
                .set_item(Some(attrs))
                .condition_expression(condition)
                .set_expression_attribute_names(expr.names())
                .set_expression_attribute_values(expr.values())
                .return_values_on_condition_check_failure(all_old)
                .build()
                .map_err(build_error)?;
            TransactWriteItem::builder().put(put).build()
        }
        Op::Put {
            key,
            body,
            expires_at,
            condition,
        } => {
            // No version is known up front: advance whatever is stored by one, or start at 1.
            let (b, v) = (expr.name(BODY), expr.name(VERSION));
            let body_value = expr.value(":body", AttributeValue::B(Blob::new(body.clone())));
            let zero = expr.value(":zero", AttributeValue::N("0".into()));
            let one = expr.value(":one", AttributeValue::N("1".into()));
            let t = expr.name(TTL);
            let mut update =
                format!("SET {b} = {body_value}, {v} = if_not_exists({v}, {zero}) + {one}");
            match expires_at {
                Some(at) => {
                    let at = expr.value(":ttl", AttributeValue::N(at.to_string()));
                    update.push_str(&format!(", {t} = {at}"));
                }
                None => update.push_str(&format!(" REMOVE {t}")),
            }
            let condition = condition.map(|c| expr.condition(c));
            let update = Update::builder()
                .table_name(table)
                .set_key(Some(key_attrs(key)))
                .update_expression(update)
                .set_condition_expression(condition)
                .set_expression_attribute_names(expr.names())
                .set_expression_attribute_values(expr.values())
                .return_values_on_condition_check_failure(all_old)
                .build()
                .map_err(build_error)?;
            TransactWriteItem::builder().update(update).build()
        }
        Op::Delete { key, condition } => {
            let condition = condition.map(|c| expr.condition(c));
            let delete = Delete::builder()
                .table_name(table)
                .set_key(Some(key_attrs(key)))
                .set_condition_expression(condition)
                .set_expression_attribute_names(expr.names())
                .set_expression_attribute_values(expr.values())
                .return_values_on_condition_check_failure(all_old)
                .build()
                .map_err(build_error)?;
            TransactWriteItem::builder().delete(delete).build()
        }
        Op::Check { key, condition } => {
            let condition = expr.condition(*condition);
            let check = ConditionCheck::builder()
                .table_name(table)
                .set_key(Some(key_attrs(key)))
                .condition_expression(condition)
                .set_expression_attribute_names(expr.names())
                .set_expression_attribute_values(expr.values())
                .return_values_on_condition_check_failure(all_old)
                .build()
                .map_err(build_error)?;
            TransactWriteItem::builder().condition_check(check).build()
        }
    };
    Ok(item)
}

fn consistent(consistency: Consistency) -> bool {
    consistency == Consistency::Strong
}

/// Backoff before retrying unprocessed keys: 25 ms doubling, capped, with full jitter.
fn backoff(attempt: u32) -> Duration {
    let cap_ms = 25u64.saturating_mul(1 << attempt.min(6));
    Duration::from_millis(rand::random_range(0..=cap_ms))
}

#[async_trait]
impl Metastore for DynamoMetastore {
    async fn get(
        &self,
        key: &Key,
        consistency: Consistency,
    ) -> Result<Option<Item>, MetastoreError> {
        codec::check_key(key)?;
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key_attrs(key)))
            .consistent_read(consistent(consistency))
            .send()
            .await
            .map_err(|e| classify(e, Call::Read, None))?;
        out.item().map(decode_item).transpose()
    }

    async fn batch_get(
        &self,
        keys: &[Key],
        consistency: Consistency,
    ) -> Result<Vec<Item>, MetastoreError> {
        let keys = codec::check_batch(keys)?;
        let mut items = Vec::with_capacity(keys.len());
        if keys.is_empty() {
            return Ok(items);
        }
        let mut pending = Some(
            KeysAndAttributes::builder()
                .set_keys(Some(keys.iter().map(key_attrs).collect()))
                .consistent_read(consistent(consistency))
                .build()
                .map_err(build_error)?,
        );
        for attempt in 0..BATCH_GET_ATTEMPTS {
            let Some(request) = pending.take() else { break };
            if attempt > 0 {
                tokio::time::sleep(backoff(attempt)).await;
            }
            let out = self
                .client
                .batch_get_item()
                .request_items(self.table.clone(), request)
                .send()
                .await
                .map_err(|e| classify(e, Call::Read, None))?;
            if let Some(found) = out.responses().and_then(|r| r.get(&self.table)) {
                for item in found {
                    items.push(decode_item(item)?);
                }
            }
            pending = out
                .unprocessed_keys()
                .and_then(|u| u.get(&self.table))
                .filter(|k| !k.keys().is_empty())
                .cloned();
        }
        if pending.is_some() {
            return Err(MetastoreError::Retryable {
                message: "batch_get left keys unprocessed".into(),
            });
        }
        Ok(items)
    }

    async fn query(&self, query: &Query) -> Result<Page, MetastoreError> {
        let after = codec::check_query(query)?;
        let mut expr = Expr::default();
        let pk = expr.name(PK);
        let pk_value = expr.value(":pk", AttributeValue::S(query.pk.clone()));
        let mut condition = format!("{pk} = {pk_value}");
        if !query.sk_prefix.is_empty() {
            let sk = expr.name(SK);
            let prefix = expr.value(":prefix", AttributeValue::S(query.sk_prefix.clone()));
            condition.push_str(&format!(" AND begins_with({sk}, {prefix})"));
        }
        let limit = i32::try_from(query.limit)
            .map_err(|_| MetastoreError::Invalid("page limit too large".into()))?;
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression(condition)
            .set_expression_attribute_names(expr.names())
            .set_expression_attribute_values(expr.values())
            .set_exclusive_start_key(after.map(|sk| key_attrs(&Key::new(query.pk.clone(), sk))))
            .limit(limit)
            .consistent_read(consistent(query.consistency))
            .send()
            .await
            .map_err(|e| classify(e, Call::Read, None))?;
        let items = out
            .items()
            .iter()
            .map(decode_item)
            .collect::<Result<Vec<_>, _>>()?;
        let next = match out.last_evaluated_key().and_then(|k| k.get(SK)) {
            Some(AttributeValue::S(sk)) => Some(codec::encode_token(sk)),
            _ => None,
        };
        Ok(Page { items, next })
    }

    async fn count(
        &self,
        pk: &str,
        sk_prefix: &str,
        consistency: Consistency,
    ) -> Result<u64, MetastoreError> {
        codec::check_prefix(pk, sk_prefix)?;
        let mut expr = Expr::default();
        let pk_name = expr.name(PK);
        let pk_value = expr.value(":pk", AttributeValue::S(pk.to_string()));
        let mut condition = format!("{pk_name} = {pk_value}");
        if !sk_prefix.is_empty() {
            let sk = expr.name(SK);
            let prefix = expr.value(":prefix", AttributeValue::S(sk_prefix.to_string()));
            condition.push_str(&format!(" AND begins_with({sk}, {prefix})"));
        }
        let mut total = 0u64;
        let mut start: Option<Attrs> = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression(condition.clone())
                .set_expression_attribute_names(expr.names())
                .set_expression_attribute_values(expr.values())
                .select(Select::Count)
                .set_exclusive_start_key(start.take())
                .consistent_read(consistent(consistency))
                .send()
                .await
                .map_err(|e| classify(e, Call::Read, None))?;
            total += u64::try_from(out.count()).unwrap_or(0);
            match out.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => return Ok(total),
            }
        }
    }

    async fn transact(&self, tx: Transaction) -> Result<(), MetastoreError> {
        codec::check_transaction(&tx)?;
        let items = tx
            .ops
            .iter()
            .map(|op| transact_item(&self.table, op))
            .collect::<Result<Vec<_>, _>>()?;
        // The SDK fills in a ClientRequestToken, so its own retries of this call are idempotent.
        self.client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await
            .map_err(|e| classify(e, Call::Write, Some(&tx.ops)))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::error::{
        InternalServerError, ThrottlingException, TransactionCanceledException,
    };
    use aws_smithy_runtime_api::client::result::ConnectorError;
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;
    use aws_smithy_types::error::ErrorMetadata;

    use super::*;

    fn response(status: u16) -> HttpResponse {
        match StatusCode::try_from(status) {
            Ok(code) => HttpResponse::new(code, SdkBody::empty()),
            Err(e) => panic!("bad status in test: {e}"),
        }
    }

    fn cancelled(
        reasons: Vec<CancellationReason>,
    ) -> SdkError<TransactWriteItemsError, HttpResponse> {
        let e = TransactionCanceledException::builder()
            .set_cancellation_reasons(Some(reasons))
            .build();
        SdkError::service_error(
            TransactWriteItemsError::TransactionCanceledException(e),
            response(400),
        )
    }

    fn reason(code: &str, version: Option<u64>) -> CancellationReason {
        let mut r = CancellationReason::builder().code(code);
        if let Some(v) = version {
            r = r
                .item(VERSION, AttributeValue::N(v.to_string()))
                .item(PK, AttributeValue::S("p".into()));
        }
        r.build()
    }

    #[test]
    fn cancellation_reasons_map_onto_operations() {
        let ops = vec![
            Op::create(Key::new("p", "a"), vec![]),
            Op::replace(Key::new("p", "b"), 3, vec![]),
            Op::check(Key::new("p", "c"), Condition::Exists),
            Op::put(Key::new("p", "d"), vec![]),
        ];
        let err = cancelled(vec![
            reason("ConditionalCheckFailed", Some(4)),
            reason("ConditionalCheckFailed", Some(5)),
            reason("ConditionalCheckFailed", None),
            reason("None", None),
        ]);
        match classify(err, Call::Write, Some(&ops)) {
            MetastoreError::ConditionFailed { reasons } => assert_eq!(
                reasons,
                vec![
                    OpOutcome::Failed(FailureReason::Exists { version: 4 }),
                    OpOutcome::Failed(FailureReason::VersionMismatch {
                        expected: 3,
                        actual: 5
                    }),
                    OpOutcome::Failed(FailureReason::Missing),
                    OpOutcome::Ok,
                ]
            ),
            other => panic!("expected ConditionFailed, got {other:?}"),
        }
    }

    #[test]
    fn conflicts_and_throttling_are_retryable() {
        let ops = vec![Op::put(Key::new("p", "a"), vec![])];
        let err = cancelled(vec![reason("TransactionConflict", None)]);
        assert!(classify(err, Call::Write, Some(&ops)).is_retryable());
        let throttled = SdkError::service_error(
            TransactWriteItemsError::ThrottlingException(
                // The deserializer sets the code from the response; do the same by hand.
                ThrottlingException::builder()
                    .meta(ErrorMetadata::builder().code("ThrottlingException").build())
                    .build(),
            ),
            response(400),
        );
        assert!(classify(throttled, Call::Write, Some(&ops)).is_retryable());
    }

    #[test]
    fn write_timeouts_and_5xx_are_outcome_unknown_but_reads_retry() {
        let timeout = || SdkError::<TransactWriteItemsError, HttpResponse>::timeout_error("slow");
        assert!(classify(timeout(), Call::Write, None).is_outcome_unknown());
        assert!(classify(timeout(), Call::Read, None).is_retryable());

        let dispatch = SdkError::<TransactWriteItemsError, HttpResponse>::dispatch_failure(
            ConnectorError::io("reset".into()),
        );
        assert!(classify(dispatch, Call::Write, None).is_outcome_unknown());

        let internal = || {
            SdkError::service_error(
                TransactWriteItemsError::InternalServerError(
                    InternalServerError::builder().build(),
                ),
                response(500),
            )
        };
        assert!(classify(internal(), Call::Write, None).is_outcome_unknown());
        assert!(classify(internal(), Call::Read, None).is_retryable());
    }
}
