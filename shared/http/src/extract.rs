//! Request extractors whose rejections follow the API's error contract (axum's defaults
//! answer plain text).

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::HttpError;
use flotilla_base::error::{Error, ErrorKind};
pub use flotilla_services::acl::{Access, Action, Securable};
pub use flotilla_services::auth::AccountScope;
use flotilla_services::auth::Principal;
use flotilla_services::service::OnConflict;
use flotilla_services::service::idempotency::{IdempotencyRequest, validate_client_key};
use flotilla_services::state::AppState;

/// Largest request body (`413` above).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Deepest JSON nesting accepted before deserialization (a guard against stack exhaustion).
pub const MAX_JSON_DEPTH: usize = 64;

/// The authenticated caller. A principal inserted by the host (Lambda JWT claims) wins;
/// otherwise the bearer token is looked up.
pub struct Auth(pub Principal);

impl FromRequestParts<AppState> for Auth {
    type Rejection = HttpError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        if let Some(p) = parts.extensions.get::<Principal>() {
            flotilla_services::service::events::record_principal(&p.subject);
            return Ok(Auth(p.clone()));
        }
        let unauth = || {
            Error::new(
                ErrorKind::Unauthenticated,
                "a valid bearer token is required",
            )
        };
        let header = parts.headers.get(AUTHORIZATION).ok_or_else(unauth)?;
        let text = header.to_str().map_err(|_| unauth())?;
        let token = text
            .strip_prefix("Bearer ")
            .or_else(|| text.strip_prefix("bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(unauth)?;
        let principal = state.authenticate(token).ok_or_else(unauth)?;
        tracing::Span::current().record("principal", principal.subject.as_str());
        flotilla_services::service::events::record_principal(&principal.subject);
        Ok(Auth(principal))
    }
}

/// The caller in the route's `{account_id}`, with what it may do there: authenticated
/// ([`Auth`]: `401`), then [`Principal::authorize_account`] (`404` for an ill-formed id, `403`
/// outside the principal's accounts), then its grants in the account ([`Access::resolve`]:
/// one strong point read for a named principal, none for operators and unnamed tokens).
/// Every account-scoped route takes it in place of [`Auth`] and asks it
/// ([`Access::authorize`]) before touching any securable.
pub struct Scope(pub Access);

impl FromRequestParts<AppState> for Scope {
    type Rejection = HttpError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let Auth(principal) = Auth::from_request_parts(parts, state).await?;
        let P(params) =
            P::<std::collections::HashMap<String, String>>::from_request_parts(parts, state)
                .await?;
        let account = params
            .get("account_id")
            .ok_or_else(|| Error::internal("the route has no {account_id} parameter"))?;
        let scope = principal.authorize_account(account)?;
        let access = Access::resolve(state.store.as_ref(), &state.acl, scope).await?;
        Ok(Scope(access))
    }
}

/// A JSON body: `415` unless `Content-Type: application/json`, `413` over 1 MiB, `400` for
/// malformed JSON, excessive nesting or unknown fields. Keeps the canonical JSON for
/// idempotency fingerprints.
pub struct JsonBody<T> {
    pub value: T,
    pub canonical: Vec<u8>,
}

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = HttpError;

    async fn from_request(req: Request, _state: &AppState) -> Result<Self, Self::Rejection> {
        let is_json = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .eq_ignore_ascii_case("application/json")
            })
            .unwrap_or(false);
        if !is_json {
            return Err(Error::new(
                ErrorKind::UnsupportedMediaType,
                "request bodies must be application/json",
            )
            .into());
        }
        let body = axum::body::to_bytes(req.into_body(), MAX_BODY_BYTES)
            .await
            .map_err(|_| Error::new(ErrorKind::PayloadTooLarge, "request body exceeds 1 MiB"))?;
        Ok(parse_json(&body)?)
    }
}

pub fn parse_json<T: DeserializeOwned>(body: &Bytes) -> Result<JsonBody<T>, Error> {
    check_depth(body)?;
    let raw: Value = serde_json::from_slice::<UniqueKeys>(body)
        .map(|v| v.0)
        .map_err(|e| Error::invalid(format!("malformed JSON body: {}", short(&e))))?;
    // Every request body is an object: serde would also read a struct from an array of its
    // fields in declaration order (`[null, null]`), which the API does not offer.
    if !raw.is_object() {
        return Err(Error::invalid("the request body must be a JSON object"));
    }
    let canonical = serde_json::to_vec(&raw).map_err(|e| Error::internal(e.to_string()))?;
    let value = serde_json::from_value(raw)
        .map_err(|e| Error::invalid(format!("invalid request: {}", short(&e))))?;
    Ok(JsonBody { value, canonical })
}

/// A JSON value whose objects never repeat a key. serde_json keeps the last of duplicate
/// keys, so `{"token": "a", "token": "b"}` would mean something other than what a reviewer,
/// a proxy or a log filter reading the first one sees; a duplicate is refused instead.
struct UniqueKeys(Value);

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueKeysVisitor).map(UniqueKeys)
    }
}

struct UniqueKeysVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueKeysVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(UniqueKeys(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                let shown: String = key.chars().take(64).collect();
                return Err(serde::de::Error::custom(format!(
                    "duplicate key {shown:?} in one object"
                )));
            }
            let UniqueKeys(v) = map.next_value()?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

fn short(e: &serde_json::Error) -> String {
    let s = redact_values(&e.to_string());
    if s.len() > 300 {
        format!("{}...", &s[..s.floor_char_boundary(300)])
    } else {
        s
    }
}

/// Drops the values serde quotes in its messages (`invalid type: string "..."`, `unknown
/// variant `...``): a value sent in the wrong place may be a secret (secrets never
/// appear in an error). The field path and the expectation stay.
fn redact_values(message: &str) -> String {
    let mut out = message.to_owned();
    for (open, close) in [("string \"", "\", expected"), ("variant `", "`, expected")] {
        while let Some(start) = out.find(open) {
            let from = start + open.len();
            match out[from..].find(close) {
                Some(len) => {
                    out.replace_range(start + open.len() - 1..from + len + 1, "(redacted)")
                }
                None => {
                    out.truncate(start + open.len() - 1);
                    break;
                }
            }
        }
    }
    out
}

/// Refuses JSON nested deeper than [`MAX_JSON_DEPTH`] before parsing it into a tree.
fn check_depth(body: &[u8]) -> Result<(), Error> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in body {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_JSON_DEPTH {
                    return Err(Error::invalid(format!(
                        "JSON nests deeper than {MAX_JSON_DEPTH} levels"
                    )));
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// `If-Match`, when given.
pub struct IfMatch(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for IfMatch {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        match parts.headers.get("if-match") {
            None => Ok(IfMatch(None)),
            Some(v) => v
                .to_str()
                .map(|s| IfMatch(Some(s.to_owned())))
                .map_err(|_| Error::invalid("If-Match must be visible ASCII").into()),
        }
    }
}

/// `Idempotency-Key`, when given (validated).
pub struct IdempotencyKey(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        match parts.headers.get("idempotency-key") {
            None => Ok(IdempotencyKey(None)),
            Some(v) => {
                let s = v
                    .to_str()
                    .map_err(|_| Error::invalid("Idempotency-Key must be visible ASCII"))?;
                validate_client_key(s)?;
                Ok(IdempotencyKey(Some(s.to_owned())))
            }
        }
    }
}

/// Query parameters, with `400` in the API's error shape.
pub struct Q<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Q<T> {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Q(q.0))
            .map_err(|e| {
                Error::invalid(format!("invalid query parameters: {}", e.body_text())).into()
            })
    }
}

/// Path parameters, with `400` in the API's error shape.
pub struct P<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for P<T> {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| P(p.0))
            .map_err(|e| Error::invalid(format!("invalid path: {}", e.body_text())).into())
    }
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateParams {
    #[serde(default)]
    pub on_conflict: OnConflict,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    #[serde(default)]
    pub page_size: Option<usize>,
    #[serde(default)]
    pub page_token: Option<String>,
    #[serde(default)]
    pub parent: Option<String>,
}

/// Builds the idempotency part of a create, refusing it with `replace` (API contract).
pub fn idempotency(
    key: Option<String>,
    on_conflict: OnConflict,
    receipt_key: impl FnOnce(&str) -> flotilla_metastore::Key,
    route: &str,
    canonical_body: &[u8],
) -> Result<Option<IdempotencyRequest>, Error> {
    match key {
        None => Ok(None),
        Some(_) if on_conflict == OnConflict::Replace => Err(Error::new(
            ErrorKind::IdempotencyKeyNotAllowed,
            "on_conflict=replace cannot be combined with an Idempotency-Key",
        )),
        Some(k) => {
            let mode = format!("{on_conflict:?}");
            Ok(Some(IdempotencyRequest::new(
                receipt_key(&k),
                &[b"POST", route.as_bytes(), mode.as_bytes(), canonical_body],
            )))
        }
    }
}

/// [`idempotency`] for a create inside an account: the receipt is kept under the account.
pub fn account_idempotency(
    account: &str,
    key: Option<String>,
    on_conflict: OnConflict,
    route: &str,
    canonical_body: &[u8],
) -> Result<Option<IdempotencyRequest>, Error> {
    idempotency(
        key,
        on_conflict,
        |k| flotilla_services::service::idempotency::account_receipt_key(account, k),
        route,
        canonical_body,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        for body in [
            r#"{"a": 1, "a": 2}"#,
            r#"{"credentials": {"token": "first", "token": "second"}}"#,
            r#"{"x": [{"k": null, "k": null}]}"#,
        ] {
            let Err(e) = parse_json::<Value>(&Bytes::from(body)) else {
                panic!("accepted {body}");
            };
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{body}");
            assert!(e.message.contains("duplicate key"), "{}", e.message);
            assert!(!e.message.contains("first") && !e.message.contains("second"));
        }
        let Ok(ok) = parse_json::<Value>(&Bytes::from(
            r#"{"a": {"a": [1, 2.5, -3, "s", true, null]}}"#,
        )) else {
            panic!("refused a valid body");
        };
        assert_eq!(
            ok.value,
            serde_json::json!({"a": {"a": [1, 2.5, -3, "s", true, null]}})
        );
    }
}

#[cfg(test)]
mod account_scope_tests {
    use std::sync::Arc;

    use axum::Router;
    use axum::body::Body;
    use axum::http::StatusCode;
    use axum::routing::get;
    use tower::ServiceExt;

    use super::*;

    fn state() -> AppState {
        let store = Arc::new(flotilla_metastore::redb_store::RedbMetastore::in_memory().unwrap());
        AppState::new(
            store,
            Arc::new(flotilla_base::clock::SystemClock),
            Arc::new(flotilla_services::auth::StaticTokens::default()),
            flotilla_services::state::Config::default(),
        )
    }

    async fn probe(Scope(Access { account, .. }): Scope) -> String {
        account
    }

    async fn call(principal: Principal, account: &str) -> (StatusCode, Value) {
        let state = state();
        let app = Router::new()
            .route("/v1/accounts/{account_id}/probe/{other}", get(probe))
            .with_state(state);
        let req = Request::builder()
            .uri(format!("/v1/accounts/{account}/probe/x"))
            .extension(principal)
            .body(Body::empty())
            .unwrap();
        let resp = app.oneshot(req).await.unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, body)
    }

    #[tokio::test]
    async fn invalid_id_is_not_found_other_account_forbidden_operator_allowed() {
        let member = Principal::for_accounts("m", ["acme".to_owned()]);
        let (status, body) = call(member.clone(), "Not_Valid").await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert_eq!(body["error"]["code"], "NOT_FOUND", "{body}");
        assert_eq!(body["error"]["message"], "account not found", "{body}");
        // An ill-formed id is 404 even for an operator (as an unknown account is).
        let (status, _) = call(Principal::operator("op"), "Not_Valid").await;
        assert_eq!(status, StatusCode::NOT_FOUND);

        let (status, body) = call(member.clone(), "globex").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(body["error"]["code"], "PERMISSION_DENIED", "{body}");

        assert_eq!(
            call(member, "acme").await,
            (StatusCode::OK, json_str("acme"))
        );
        let (status, body) = call(Principal::operator("op"), "globex").await;
        assert_eq!((status, body), (StatusCode::OK, json_str("globex")));
    }

    #[tokio::test]
    async fn no_principal_is_unauthenticated() {
        let state = state();
        let app = Router::new()
            .route("/v1/accounts/{account_id}", get(probe))
            .with_state(state);
        let req = Request::builder()
            .uri("/v1/accounts/acme")
            .body(Body::empty())
            .unwrap();
        let resp = app.oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    }

    fn json_str(s: &str) -> Value {
        Value::String(s.to_owned())
    }
}
