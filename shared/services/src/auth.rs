//! Principals and how requests prove them.
//!
//! Locally, bearer tokens map to principals through [`StaticTokens`] (the bootstrap token and
//! the tokens file). On AWS, API Gateway's JWT authorizer has already verified the token and
//! the Lambda host inserts a [`Principal`] built from the claims ([`Principal::from_claims`])
//! into the request extensions; extensions cannot be set from the wire, so a caller cannot
//! forge one.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::error::Error;

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// A stable, non-secret identity for logs (a token's hash prefix or the JWT `sub`).
    pub subject: String,
    /// May create and delete accounts and run admin operations; sees every account.
    pub operator: bool,
    /// Accounts this principal may act in.
    pub accounts: BTreeSet<String>,
    /// The principal this caller is inside its accounts, whose roles' grants decide what it
    /// may do (`flotilla_services::acl`). `None`: a token or claims naming no principal,
    /// `ACCOUNT_ADMIN` of its accounts (the behaviour before access control, kept so that
    /// no existing token loses anything).
    pub identity: Option<Identity>,
}

/// A named principal: a tokens-file `principal`, a JWT subject (when the deployment names
/// principals by it), or a service principal's token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The name roles list as a member.
    pub name: String,
    /// Groups (roles list them as `group:<name>`).
    pub groups: BTreeSet<String>,
    /// Set for a service principal's access token: the account's view must still hold the
    /// principal at this secret generation, so a deletion or a rotation ends the token.
    pub service: Option<ServiceToken>,
}

/// What a service principal's access token names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceToken {
    pub id: String,
    pub secret_generation: u64,
}

impl Principal {
    pub fn operator(subject: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            operator: true,
            accounts: BTreeSet::new(),
            identity: None,
        }
    }

    /// This principal as the named principal `name` with `groups`.
    pub fn named(
        mut self,
        name: impl Into<String>,
        groups: impl IntoIterator<Item = String>,
    ) -> Self {
        self.identity = Some(Identity {
            name: name.into(),
            groups: groups.into_iter().collect(),
            service: None,
        });
        self
    }

    pub fn for_accounts(
        subject: impl Into<String>,
        accounts: impl IntoIterator<Item = String>,
    ) -> Self {
        Self {
            subject: subject.into(),
            operator: false,
            accounts: accounts.into_iter().collect(),
            identity: None,
        }
    }

    pub fn can_access(&self, account: &str) -> bool {
        self.operator || self.accounts.contains(account)
    }

    /// Refuses principals outside `account`.
    pub fn require_account(&self, account: &str) -> Result<(), Error> {
        if self.can_access(account) {
            Ok(())
        } else {
            Err(Error::permission_denied(
                "this principal may not access that account",
            ))
        }
    }

    /// The one account-authorization rule: an ill-formed id answers `404` (`account` not
    /// found, as for an account that does not exist) and an account outside the principal's
    /// scope `403`. Every account-scoped route (through the [`AccountScope`] extractor in
    /// `http::extract`) and the query function call it.
    pub fn authorize_account(&self, account: &str) -> Result<AccountScope, Error> {
        flotilla_domain::names::validate_account_id(account)
            .map_err(|_| Error::not_found("account"))?;
        self.require_account(account)?;
        Ok(AccountScope {
            principal: self.clone(),
            account: account.to_owned(),
        })
    }

    pub fn require_operator(&self) -> Result<(), Error> {
        if self.operator {
            Ok(())
        } else {
            Err(Error::permission_denied("operator permission required"))
        }
    }

    /// Builds a principal from API Gateway JWT authorizer claims, naming no principal (the
    /// default rules, [`ClaimRules::default`]).
    pub fn from_claims(claims: &HashMap<String, String>) -> Option<Principal> {
        Self::from_claims_with(claims, &ClaimRules::default())
    }

    /// Builds a principal from API Gateway JWT authorizer claims.
    ///
    /// - `sub`: identity (required);
    /// - `flotilla:operator`: `"true"` (or boolean true) makes an operator;
    /// - `flotilla:accounts`: the accounts in scope, a JSON array or a space/comma separated
    ///   string (API Gateway flattens array claims to strings like `[a b]`);
    /// - when `rules.name_principals`: `sub` names the principal and the claim
    ///   `rules.groups_claim` (default `cognito:groups`) its groups, in the same forms.
    pub fn from_claims_with(
        claims: &HashMap<String, String>,
        rules: &ClaimRules,
    ) -> Option<Principal> {
        let subject = claims.get("sub")?.clone();
        let operator = claims
            .get("flotilla:operator")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let accounts = claims
            .get("flotilla:accounts")
            .map(|v| claim_list(v))
            .unwrap_or_default();
        let identity = (rules.name_principals && !operator).then(|| Identity {
            name: subject.clone(),
            groups: claims
                .get(&rules.groups_claim)
                .map(|v| claim_list(v))
                .unwrap_or_default(),
            service: None,
        });
        Some(Principal {
            subject,
            operator,
            accounts,
            identity,
        })
    }
}

/// A list claim: a JSON array, or a space/comma separated string (API Gateway flattens array
/// claims to strings like `[a b]`).
fn claim_list(v: &str) -> BTreeSet<String> {
    v.trim_matches(|c| c == '[' || c == ']')
        .split(|c: char| c == ',' || c.is_whitespace())
        .map(|s| s.trim_matches('"').to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// How JWT claims name principals (deployment settings, read once by the Lambda host).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRules {
    /// `FLOTILLA_JWT_PRINCIPALS=true`: the JWT subject names the principal, so its roles'
    /// grants decide what it may do. Off by default: claims name no principal and keep the
    /// behaviour before access control (`ACCOUNT_ADMIN` of the accounts they list).
    pub name_principals: bool,
    /// `FLOTILLA_GROUPS_CLAIM`: the claim holding the principal's groups.
    pub groups_claim: String,
}

impl Default for ClaimRules {
    fn default() -> Self {
        Self {
            name_principals: false,
            groups_claim: "cognito:groups".into(),
        }
    }
}

impl ClaimRules {
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        Self {
            name_principals: var("FLOTILLA_JWT_PRINCIPALS")
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
            groups_claim: var("FLOTILLA_GROUPS_CLAIM")
                .map(|v| v.trim().to_owned())
                .unwrap_or_else(|| "cognito:groups".into()),
        }
    }
}

/// Members of roles naming a group start with this (`group:<name>`).
pub const GROUP_PREFIX: &str = "group:";

/// Principal and group names: 1 to 128 bytes, no control, bidirectional or invisible
/// formatting characters (the identifier rules of every name).
pub fn validate_principal_name(what: &str, name: &str) -> Result<(), Error> {
    flotilla_domain::names::validate_segment(what, name)?;
    if name.len() > 128 {
        return Err(Error::invalid(format!("{what} is longer than 128 bytes")));
    }
    Ok(())
}

/// An account a request acts in: a well-formed id the principal may access. Only
/// [`Principal::authorize_account`] builds one, so holding it proves the check ran.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AccountScope {
    pub principal: Principal,
    pub account: String,
}

/// Maps bearer tokens to principals.
pub trait Authenticator: Send + Sync + 'static {
    fn authenticate(&self, bearer: &str) -> Option<Principal>;
}

/// Tokens configured for `flotilla serve`: compared by SHA-256 digest so the raw token is
/// not kept in memory beyond start-up and never reaches a log.
///
/// A token's log identity (its principal's `subject`) is `token:{id}` when the tokens file
/// names one, else `token:` and 12 hex digits of HMAC-SHA-256 under a key drawn at random per
/// process (or set with [`StaticTokens::with_log_key`]). An unsalted digest prefix would let
/// anyone holding a log test guessed short tokens offline; the keyed one cannot be checked
/// without the key, which never leaves the process.
pub struct StaticTokens {
    by_digest: HashMap<[u8; 32], Principal>,
    log_key: [u8; 32],
}

impl Default for StaticTokens {
    fn default() -> Self {
        let mut log_key = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut log_key);
        Self {
            by_digest: HashMap::new(),
            log_key,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    tokens: Vec<TokenEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    token: String,
    /// A non-secret name for logs (`token:{id}`); `[A-Za-z0-9._-]{1,64}`.
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    operator: bool,
    #[serde(default)]
    accounts: Vec<String>,
    /// The principal this token names in its accounts (its roles' grants then decide what
    /// it may do); without it the token is `ACCOUNT_ADMIN` of its accounts.
    #[serde(default)]
    principal: Option<String>,
    /// The named principal's groups (roles may list `group:<name>`).
    #[serde(default)]
    groups: Vec<String>,
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn keyed_subject(key: &[u8; 32], token: &str) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(token.as_bytes());
    let tag = mac.finalize().into_bytes();
    format!("token:{}", hex::encode(&tag[..6]))
}

fn valid_token_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl StaticTokens {
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses `key` for the log identities of tokens added afterwards (instead of the
    /// per-process random key), so that they stay stable across restarts.
    pub fn with_log_key(mut self, key: [u8; 32]) -> Self {
        self.log_key = key;
        self
    }

    pub fn add(&mut self, token: &str, operator: bool, accounts: Vec<String>) {
        let subject = keyed_subject(&self.log_key, token);
        self.insert(token, subject, operator, accounts, None);
    }

    /// Adds a token naming principal `name` (with `groups`) in `accounts`.
    pub fn add_named(
        &mut self,
        token: &str,
        accounts: Vec<String>,
        name: &str,
        groups: Vec<String>,
    ) {
        let subject = keyed_subject(&self.log_key, token);
        self.insert(
            token,
            subject,
            false,
            accounts,
            Some((name.to_owned(), groups)),
        );
    }

    fn insert(
        &mut self,
        token: &str,
        subject: String,
        operator: bool,
        accounts: Vec<String>,
        named: Option<(String, Vec<String>)>,
    ) {
        let d = digest(token);
        let mut p = Principal::for_accounts(subject, accounts);
        p.operator = operator;
        if let Some((name, groups)) = named {
            p = p.named(name, groups);
        }
        self.by_digest.insert(d, p);
    }

    /// Loads `{"tokens": [{"token", "operator", "accounts"}]}`.
    pub fn load_file(&mut self, path: &Path) -> Result<(), String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read tokens file {}: {e}", path.display()))?;
        let file: TokensFile = serde_json::from_str(&text)
            .map_err(|e| format!("tokens file {} is malformed: {e}", path.display()))?;
        for t in file.tokens {
            if t.token.len() < 8 {
                return Err("tokens file: every token needs at least 8 characters".into());
            }
            let subject = match &t.id {
                Some(id) if valid_token_id(id) => format!("token:{id}"),
                Some(_) => {
                    return Err("tokens file: a token id must match [A-Za-z0-9._-]{1,64}".into());
                }
                None => keyed_subject(&self.log_key, &t.token),
            };
            let named = match t.principal {
                None if !t.groups.is_empty() => {
                    return Err("tokens file: groups need a principal".into());
                }
                None => None,
                Some(_) if t.operator => {
                    return Err("tokens file: an operator token names no principal".into());
                }
                Some(name) => {
                    let valid = |what: &str, n: &str| {
                        validate_principal_name(what, n)
                            .map_err(|e| format!("tokens file: {}", e.message))
                    };
                    valid("principal", &name)?;
                    if name.starts_with(GROUP_PREFIX) {
                        return Err("tokens file: a principal name cannot start with group:".into());
                    }
                    for g in &t.groups {
                        valid("group", g)?;
                    }
                    Some((name, t.groups))
                }
            };
            self.insert(&t.token, subject, t.operator, t.accounts, named);
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }
}

impl Authenticator for StaticTokens {
    fn authenticate(&self, bearer: &str) -> Option<Principal> {
        self.by_digest.get(&digest(bearer)).cloned()
    }
}

// ---- service principal access tokens ----------------------------------------------------

/// Signs and verifies the access tokens the OAuth2 token routes issue to service principals
/// (`POST /v1/oauth/tokens`, `POST /iceberg/v1/oauth/tokens`) on hosts that verify tokens
/// themselves (`flotilla serve`). A token is `fsp1.<claims>.<tag>`: base64url JSON claims
/// (account, principal id and name, secret generation, expiry) and an HMAC-SHA-256 tag under
/// the host's key, so verifying one reads nothing. Whether the principal still exists at that
/// secret generation is decided per request against the account's grants view
/// (`acl::Access::resolve`), so a deletion or a rotation ends its tokens at once.
pub struct TokenSigner {
    key: [u8; 32],
}

impl std::fmt::Debug for TokenSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenSigner(<redacted>)")
    }
}

/// What a service principal's access token says.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct ServiceClaims {
    #[serde(rename = "a")]
    pub account: String,
    #[serde(rename = "i")]
    pub id: String,
    #[serde(rename = "n")]
    pub name: String,
    #[serde(rename = "g")]
    pub secret_generation: u64,
    /// Expiry, epoch seconds.
    #[serde(rename = "e")]
    pub expires_at: i64,
}

const SERVICE_TOKEN_PREFIX: &str = "fsp1.";

impl TokenSigner {
    pub fn new(key: [u8; 32]) -> Self {
        Self { key }
    }

    /// A signer under a key given as 64 hex digits (a host's key file).
    pub fn from_hex(key: &str) -> Option<Self> {
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(key, &mut bytes).ok()?;
        Some(Self::new(bytes))
    }

    /// A fresh random key as 64 hex digits, for a host to keep.
    pub fn new_key_hex() -> String {
        let mut key = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut key);
        hex::encode(key)
    }

    /// A signer under a fresh random key (tests; tokens end with the process).
    pub fn random() -> Self {
        let mut key = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut key);
        Self { key }
    }

    fn tag(&self, payload: &str) -> Vec<u8> {
        use hmac::{Hmac, Mac};
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(payload.as_bytes());
        mac.finalize().into_bytes().to_vec()
    }

    pub fn issue(&self, claims: &ServiceClaims) -> String {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let body = serde_json::to_vec(claims).unwrap_or_default();
        let payload = format!("{SERVICE_TOKEN_PREFIX}{}", b64.encode(body));
        let tag = b64.encode(self.tag(&payload));
        format!("{payload}.{tag}")
    }

    /// The claims of a token this signer issued and that has not expired at `now_secs`.
    pub fn verify(&self, token: &str, now_secs: i64) -> Option<ServiceClaims> {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        if !token.starts_with(SERVICE_TOKEN_PREFIX) || token.len() > 4096 {
            return None;
        }
        let (payload, tag) = token.rsplit_once('.')?;
        let given = b64.decode(tag).ok()?;
        let expected = self.tag(payload);
        // Constant time: the tag is a secret until it matches.
        if given.len() != expected.len()
            || given
                .iter()
                .zip(&expected)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                != 0
        {
            return None;
        }
        let body = b64
            .decode(payload.strip_prefix(SERVICE_TOKEN_PREFIX)?)
            .ok()?;
        let claims: ServiceClaims = serde_json::from_slice(&body).ok()?;
        (claims.expires_at > now_secs).then_some(claims)
    }

    /// Whether `token` has the shape of this kind of token (so other authenticators skip it).
    pub fn is_service_token(token: &str) -> bool {
        token.starts_with(SERVICE_TOKEN_PREFIX)
    }
}

impl ServiceClaims {
    /// The principal the token authenticates: the service principal in its one account.
    pub fn principal(&self) -> Principal {
        let mut p =
            Principal::for_accounts(format!("service:{}", self.name), [self.account.clone()]);
        p.identity = Some(Identity {
            name: self.name.clone(),
            groups: BTreeSet::new(),
            service: Some(ServiceToken {
                id: self.id.clone(),
                secret_generation: self.secret_generation,
            }),
        });
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_tokens_map_to_principals() {
        let mut t = StaticTokens::new();
        t.add("operator-token", true, vec![]);
        t.add("acme-token-1", false, vec!["acme".into()]);
        assert!(t.authenticate("operator-token").unwrap().operator);
        let p = t.authenticate("acme-token-1").unwrap();
        assert!(p.can_access("acme") && !p.can_access("other"));
        assert!(t.authenticate("nope").is_none());
        assert!(!p.subject.contains("acme-token"));
    }

    #[test]
    fn log_identities_are_keyed_not_plain_digests() {
        let token = "acme-token-1";
        let plain = format!("token:{}", hex::encode(&digest(token)[..6]));
        let mut a = StaticTokens::new();
        a.add(token, false, vec!["acme".into()]);
        let mut b = StaticTokens::new();
        b.add(token, false, vec!["acme".into()]);
        let (sa, sb) = (
            a.authenticate(token).unwrap().subject,
            b.authenticate(token).unwrap().subject,
        );
        // The unsalted digest prefix of the token (guessable offline) is not what is logged,
        // and two processes (two random keys) log different identities.
        assert_ne!(sa, plain);
        assert_ne!(sa, sb);
        // A configured key gives a stable identity.
        let mut c = StaticTokens::new().with_log_key([7; 32]);
        c.add(token, false, vec![]);
        let mut d = StaticTokens::new().with_log_key([7; 32]);
        d.add(token, false, vec![]);
        assert_eq!(
            c.authenticate(token).unwrap().subject,
            d.authenticate(token).unwrap().subject
        );
    }

    #[test]
    fn tokens_file_ids_name_principals() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        std::fs::write(
            &path,
            r#"{"tokens": [{"token": "secret-token-1", "id": "ci-bot", "accounts": ["acme"]}]}"#,
        )
        .unwrap();
        let mut t = StaticTokens::new();
        t.load_file(&path).unwrap();
        assert_eq!(
            t.authenticate("secret-token-1").unwrap().subject,
            "token:ci-bot"
        );
        std::fs::write(
            &path,
            r#"{"tokens": [{"token": "secret-token-1", "id": "bad id"}]}"#,
        )
        .unwrap();
        assert!(StaticTokens::new().load_file(&path).is_err());
    }

    #[test]
    fn service_tokens_verify_only_unaltered_and_unexpired() {
        let signer = TokenSigner::random();
        let claims = ServiceClaims {
            account: "acme".into(),
            id: "p1".into(),
            name: "etl".into(),
            secret_generation: 2,
            expires_at: 1_000,
        };
        let token = signer.issue(&claims);
        assert_eq!(signer.verify(&token, 999), Some(claims.clone()));
        assert_eq!(signer.verify(&token, 1_000), None, "expired");
        assert_eq!(TokenSigner::random().verify(&token, 0), None, "another key");
        let mut forged = token.clone();
        forged.replace_range(6..7, if &token[6..7] == "A" { "B" } else { "A" });
        assert_eq!(signer.verify(&forged, 0), None, "altered claims");
        let p = claims.principal();
        assert!(p.can_access("acme") && !p.operator);
        assert_eq!(p.identity.unwrap().service.unwrap().secret_generation, 2);
    }

    #[test]
    fn tokens_file_principals_name_identities() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        std::fs::write(
            &path,
            r#"{"tokens": [{"token": "reader-token-1", "accounts": ["acme"], "principal": "etl", "groups": ["eng"]},
                           {"token": "legacy-token-1", "accounts": ["acme"]}]}"#,
        )
        .unwrap();
        let mut t = StaticTokens::new();
        t.load_file(&path).unwrap();
        let named = t.authenticate("reader-token-1").unwrap().identity.unwrap();
        assert_eq!(named.name, "etl");
        assert!(named.groups.contains("eng"));
        assert!(t.authenticate("legacy-token-1").unwrap().identity.is_none());
        for bad in [
            r#"{"tokens": [{"token": "x-token-123", "operator": true, "principal": "p"}]}"#,
            r#"{"tokens": [{"token": "x-token-123", "groups": ["g"]}]}"#,
            r#"{"tokens": [{"token": "x-token-123", "principal": "group:x"}]}"#,
            r#"{"tokens": [{"token": "x-token-123", "principal": ""}]}"#,
        ] {
            std::fs::write(&path, bad).unwrap();
            assert!(StaticTokens::new().load_file(&path).is_err(), "{bad}");
        }
    }

    #[test]
    fn claims_name_principals_only_when_the_deployment_says_so() {
        let mut c = HashMap::new();
        c.insert("sub".to_string(), "user-1".to_string());
        c.insert("flotilla:accounts".to_string(), "[acme]".to_string());
        c.insert("cognito:groups".to_string(), "[analysts eng]".to_string());
        assert!(Principal::from_claims(&c).unwrap().identity.is_none());
        let rules = ClaimRules {
            name_principals: true,
            ..ClaimRules::default()
        };
        let id = Principal::from_claims_with(&c, &rules)
            .unwrap()
            .identity
            .unwrap();
        assert_eq!(id.name, "user-1");
        assert_eq!(id.groups.len(), 2);
    }

    #[test]
    fn claims_principal() {
        let mut c = HashMap::new();
        c.insert("sub".to_string(), "user-1".to_string());
        c.insert("flotilla:accounts".to_string(), "[acme beta]".to_string());
        let p = Principal::from_claims(&c).unwrap();
        assert!(!p.operator);
        assert!(p.can_access("acme") && p.can_access("beta") && !p.can_access("gamma"));
        c.insert("flotilla:operator".to_string(), "true".to_string());
        assert!(Principal::from_claims(&c).unwrap().operator);
        c.remove("sub");
        assert!(Principal::from_claims(&c).is_none());
    }
}
