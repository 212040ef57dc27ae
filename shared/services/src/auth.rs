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
}

impl Principal {
    pub fn operator(subject: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            operator: true,
            accounts: BTreeSet::new(),
        }
    }

    pub fn for_accounts(
        subject: impl Into<String>,
        accounts: impl IntoIterator<Item = String>,
    ) -> Self {
        Self {
            subject: subject.into(),
            operator: false,
            accounts: accounts.into_iter().collect(),
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

    /// Builds a principal from API Gateway JWT authorizer claims.
    ///
    /// - `sub`: identity (required);
    /// - `flotilla:operator`: `"true"` (or boolean true) makes an operator;
    /// - `flotilla:accounts`: the accounts in scope, a JSON array or a space/comma separated
    ///   string (API Gateway flattens array claims to strings like `[a b]`).
    pub fn from_claims(claims: &HashMap<String, String>) -> Option<Principal> {
        let subject = claims.get("sub")?.clone();
        let operator = claims
            .get("flotilla:operator")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let accounts = claims
            .get("flotilla:accounts")
            .map(|v| {
                v.trim_matches(|c| c == '[' || c == ']')
                    .split(|c: char| c == ',' || c.is_whitespace())
                    .map(|s| s.trim_matches('"').to_owned())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        Some(Principal {
            subject,
            operator,
            accounts,
        })
    }
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
        self.insert(token, subject, operator, accounts);
    }

    fn insert(&mut self, token: &str, subject: String, operator: bool, accounts: Vec<String>) {
        let d = digest(token);
        let p = if operator {
            Principal {
                subject,
                operator: true,
                accounts: accounts.into_iter().collect(),
            }
        } else {
            Principal::for_accounts(subject, accounts)
        };
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
            self.insert(&t.token, subject, t.operator, t.accounts);
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
