//! The local encrypted credential store used by `flotilla serve`.
//!
//! One file per generation at `{root}/{account}/{integration}/{generation}.sec`, holding
//! `MAGIC || nonce (12 bytes) || ChaCha20-Poly1305 ciphertext+tag`. The [`SecretRef`] is bound
//! as associated data, so a file copied or renamed to another reference fails authentication
//! instead of handing one integration's credentials to another.
//!
//! Writes never clobber and never expose a partial file: the sealed bytes go to a private
//! temporary file that is synced and then hard-linked to its final name. `link(2)` fails when
//! the name exists, which makes it an atomic put-if-absent that only ever publishes complete
//! files (a `create_new` on the final name would let a crash mid-write leave a torn file that
//! holds the generation forever; a `rename` would overwrite).
//!
//! The 32-byte key comes from `FLOTILLA_SECRET_KEY` (base64) or from a key file created with
//! mode 0600 on first use; an existing key file readable by group or others is refused.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine as _;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Nonce};
use rand::RngCore as _;

use crate::{CredentialStore, PutOutcome, SecretBytes, SecretRef, SecretStoreError, validate_id};

/// Environment variable holding the base64 of a 32-byte key.
pub const KEY_ENV: &str = "FLOTILLA_SECRET_KEY";
/// Name of the key file under the data directory when [`KEY_ENV`] is unset.
pub const KEY_FILE_NAME: &str = "secret.key";
/// Directory under the data directory holding the sealed files.
pub const SECRETS_DIR_NAME: &str = "secrets";

const MAGIC: &[u8; 6] = b"FLSEC\x01";
const NONCE_LEN: usize = 12;
const FILE_SUFFIX: &str = ".sec";
const TMP_PREFIX: &str = ".tmp-";

/// A 256-bit sealing key. Prints as `***`.
#[derive(Clone)]
pub struct SecretKey([u8; 32]);

impl SecretKey {
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// A fresh random key.
    pub fn generate() -> Self {
        let mut k = [0u8; 32];
        rand::rng().fill_bytes(&mut k);
        Self(k)
    }

    /// Decodes standard base64 (surrounding whitespace ignored) of exactly 32 bytes.
    pub fn from_base64(text: &str) -> Result<Self, SecretStoreError> {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|_| SecretStoreError::Backend("secret key is not valid base64".into()))?;
        let bytes: [u8; 32] = raw.as_slice().try_into().map_err(|_| {
            SecretStoreError::Backend(format!("secret key must be 32 bytes, got {}", raw.len()))
        })?;
        Ok(Self(bytes))
    }

    pub fn to_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.0)
    }

    /// Reads the key file at `path`, or creates it (mode 0600, atomically, so concurrent
    /// first starts agree on one key) when it does not exist.
    pub fn load_or_create(path: &Path) -> Result<Self, SecretStoreError> {
        match read_key_file(path) {
            Ok(key) => return Ok(key),
            Err(KeyFileError::Missing) => {}
            Err(KeyFileError::Other(e)) => return Err(e),
        }
        let dir = path.parent().ok_or_else(|| {
            SecretStoreError::Backend(format!("key path {} has no parent", path.display()))
        })?;
        create_private_dir(dir)?;
        let key = Self::generate();
        let mut text = key.to_base64();
        text.push('\n');
        match publish_no_clobber(dir, path, text.as_bytes()) {
            Ok(true) => Ok(key),
            // Another process created it first: use theirs.
            Ok(false) => read_key_file(path).map_err(|e| match e {
                KeyFileError::Missing => {
                    SecretStoreError::Backend(format!("key file {} vanished", path.display()))
                }
                KeyFileError::Other(e) => e,
            }),
            Err(e) => Err(e),
        }
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(***)")
    }
}

impl Drop for SecretKey {
    fn drop(&mut self) {
        self.0.fill(0);
        std::hint::black_box(&self.0);
    }
}

enum KeyFileError {
    Missing,
    Other(SecretStoreError),
}

fn read_key_file(path: &Path) -> Result<SecretKey, KeyFileError> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Err(KeyFileError::Missing),
        Err(e) => return Err(KeyFileError::Other(io_error("open key file", path, &e))),
    };
    let meta = file
        .metadata()
        .map_err(|e| KeyFileError::Other(io_error("stat key file", path, &e)))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyFileError::Other(SecretStoreError::Backend(format!(
            "key file {} has mode {mode:o}; it must not be accessible by group or others (chmod 600)",
            path.display()
        ))));
    }
    let mut text = String::new();
    file.read_to_string(&mut text)
        .map_err(|e| KeyFileError::Other(io_error("read key file", path, &e)))?;
    SecretKey::from_base64(&text).map_err(|_| {
        KeyFileError::Other(SecretStoreError::Backend(format!(
            "key file {} does not hold the base64 of 32 bytes",
            path.display()
        )))
    })
}

/// Where the key of a [`LocalEncryptedStore::open`]ed store came from (for a startup log line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    Env,
    File(PathBuf),
}

/// Files sealed with ChaCha20-Poly1305 under one key. Cheap to clone.
#[derive(Clone)]
pub struct LocalEncryptedStore {
    root: Arc<PathBuf>,
    cipher: Arc<ChaCha20Poly1305>,
}

impl fmt::Debug for LocalEncryptedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalEncryptedStore")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl LocalEncryptedStore {
    /// The store of a `flotilla serve` data directory: files under `{data_dir}/secrets`, key
    /// from [`KEY_ENV`] when set, else `{data_dir}/secret.key`.
    pub fn open(data_dir: &Path) -> Result<(Self, KeySource), SecretStoreError> {
        let env = std::env::var(KEY_ENV).ok().filter(|v| !v.trim().is_empty());
        Self::open_with(data_dir, env.as_deref())
    }

    /// [`LocalEncryptedStore::open`] with the environment value passed in (testable without
    /// mutating the process environment).
    pub fn open_with(
        data_dir: &Path,
        env_key: Option<&str>,
    ) -> Result<(Self, KeySource), SecretStoreError> {
        let (key, source) = match env_key {
            Some(text) => (SecretKey::from_base64(text)?, KeySource::Env),
            None => {
                let path = data_dir.join(KEY_FILE_NAME);
                (SecretKey::load_or_create(&path)?, KeySource::File(path))
            }
        };
        Ok((
            Self::with_key(data_dir.join(SECRETS_DIR_NAME), &key)?,
            source,
        ))
    }

    /// A store rooted at `root` sealing with `key`.
    pub fn with_key(root: PathBuf, key: &SecretKey) -> Result<Self, SecretStoreError> {
        create_private_dir(&root)?;
        let cipher = ChaCha20Poly1305::new_from_slice(&key.0)
            .map_err(|_| SecretStoreError::Backend("invalid key length".into()))?;
        Ok(Self {
            root: Arc::new(root),
            cipher: Arc::new(cipher),
        })
    }

    /// The file holding `reference` (exposed for tests and operators; never for callers to
    /// read directly).
    pub fn path_of(&self, reference: &SecretRef) -> PathBuf {
        self.integration_dir(&reference.account_id, &reference.integration_id)
            .join(format!("{}{FILE_SUFFIX}", reference.credential_generation))
    }

    fn integration_dir(&self, account_id: &str, integration_id: &str) -> PathBuf {
        self.root.join(account_id).join(integration_id)
    }

    fn seal(
        &self,
        reference: &SecretRef,
        secret: &SecretBytes,
    ) -> Result<Vec<u8>, SecretStoreError> {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let aad = associated_data(reference);
        let ciphertext = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: secret.expose_bytes(),
                    aad: &aad,
                },
            )
            .map_err(|_| SecretStoreError::Backend("encryption failed".into()))?;
        let mut out = Vec::with_capacity(MAGIC.len() + NONCE_LEN + ciphertext.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&ciphertext);
        Ok(out)
    }

    fn unseal(&self, reference: &SecretRef, data: &[u8]) -> Result<SecretBytes, SecretStoreError> {
        let corrupt = |reason: &str| SecretStoreError::Corrupt {
            reference: reference.clone(),
            reason: reason.into(),
        };
        let body = data
            .strip_prefix(MAGIC.as_slice())
            .ok_or_else(|| corrupt("unknown file format"))?;
        if body.len() < NONCE_LEN {
            return Err(corrupt("truncated"));
        }
        let (nonce, ciphertext) = body.split_at(NONCE_LEN);
        let aad = associated_data(reference);
        let plain = self
            .cipher
            .decrypt(Nonce::from_slice(nonce), Payload { msg: ciphertext, aad: &aad })
            .map_err(|_| corrupt("authentication failed (tampered, moved from another reference, or another key)"))?;
        SecretBytes::new(plain).map_err(|_| corrupt("decrypted payload is not a JSON object"))
    }

    fn put_blocking(
        &self,
        reference: &SecretRef,
        secret: &SecretBytes,
    ) -> Result<PutOutcome, SecretStoreError> {
        let dir = self.integration_dir(&reference.account_id, &reference.integration_id);
        create_private_dir(&dir)?;
        let path = self.path_of(reference);
        let sealed = self.seal(reference, secret)?;
        if publish_no_clobber(&dir, &path, &sealed)? {
            return Ok(PutOutcome::Created);
        }
        let existing =
            self.get_blocking(reference)?
                .ok_or_else(|| SecretStoreError::Retryable {
                    message: format!("credential {reference} vanished during put"),
                })?;
        Ok(PutOutcome::AlreadyExists {
            identical: existing.ct_eq(secret),
        })
    }

    fn get_blocking(&self, reference: &SecretRef) -> Result<Option<SecretBytes>, SecretStoreError> {
        let path = self.path_of(reference);
        match fs::read(&path) {
            Ok(data) => self.unseal(reference, &data).map(Some),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error("read", &path, &e)),
        }
    }

    fn delete_blocking(&self, reference: &SecretRef) -> Result<(), SecretStoreError> {
        let path = self.path_of(reference);
        match fs::remove_file(&path) {
            Ok(()) => {
                if let Some(dir) = path.parent() {
                    sync_dir(dir)?;
                }
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error("remove", &path, &e)),
        }
    }

    fn list_blocking(
        &self,
        account_id: &str,
        integration_id: &str,
    ) -> Result<Vec<u64>, SecretStoreError> {
        let dir = self.integration_dir(account_id, integration_id);
        let mut generations: Vec<u64> = list_dir(&dir)?
            .iter()
            .filter_map(|name| name.strip_suffix(FILE_SUFFIX))
            .filter_map(|stem| stem.parse::<u64>().ok().filter(|g| g.to_string() == stem))
            .collect();
        generations.sort_unstable();
        Ok(generations)
    }

    fn list_account_blocking(&self, account_id: &str) -> Result<Vec<SecretRef>, SecretStoreError> {
        let mut refs = Vec::new();
        for integration in list_dir(&self.root.join(account_id))? {
            if validate_id("integration_id", &integration).is_err() {
                continue;
            }
            for generation in self.list_blocking(account_id, &integration)? {
                refs.push(SecretRef {
                    account_id: account_id.to_owned(),
                    integration_id: integration.clone(),
                    credential_generation: generation,
                });
            }
        }
        refs.sort();
        Ok(refs)
    }

    async fn blocking<T, F>(&self, f: F) -> Result<T, SecretStoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Self) -> Result<T, SecretStoreError> + Send + 'static,
    {
        let this = self.clone();
        tokio::task::spawn_blocking(move || f(&this))
            .await
            .map_err(|_| SecretStoreError::Backend("local credential store task failed".into()))?
    }
}

#[async_trait]
impl CredentialStore for LocalEncryptedStore {
    async fn put_if_absent(
        &self,
        reference: &SecretRef,
        secret: &SecretBytes,
    ) -> Result<PutOutcome, SecretStoreError> {
        reference.validate()?;
        let (reference, secret) = (reference.clone(), secret.clone());
        self.blocking(move |s| s.put_blocking(&reference, &secret))
            .await
    }

    async fn get(&self, reference: &SecretRef) -> Result<Option<SecretBytes>, SecretStoreError> {
        reference.validate()?;
        let reference = reference.clone();
        self.blocking(move |s| s.get_blocking(&reference)).await
    }

    async fn delete(&self, reference: &SecretRef) -> Result<(), SecretStoreError> {
        reference.validate()?;
        let reference = reference.clone();
        self.blocking(move |s| s.delete_blocking(&reference)).await
    }

    async fn list(
        &self,
        account_id: &str,
        integration_id: &str,
    ) -> Result<Vec<u64>, SecretStoreError> {
        validate_id("account_id", account_id)?;
        validate_id("integration_id", integration_id)?;
        let (a, i) = (account_id.to_owned(), integration_id.to_owned());
        self.blocking(move |s| s.list_blocking(&a, &i)).await
    }

    async fn list_account(&self, account_id: &str) -> Result<Vec<SecretRef>, SecretStoreError> {
        validate_id("account_id", account_id)?;
        let a = account_id.to_owned();
        self.blocking(move |s| s.list_account_blocking(&a)).await
    }
}

/// Associated data binding a sealed file to its reference. Ids cannot contain `\n`
/// ([`validate_id`]), so the encoding is unambiguous.
fn associated_data(reference: &SecretRef) -> Vec<u8> {
    format!(
        "flotilla-secret/v1\n{}\n{}\n{}",
        reference.account_id, reference.integration_id, reference.credential_generation
    )
    .into_bytes()
}

/// Writes `data` to a 0600 temporary file in `dir`, syncs it, and links it to `path` unless
/// `path` exists. Returns whether this call published the file.
fn publish_no_clobber(dir: &Path, path: &Path, data: &[u8]) -> Result<bool, SecretStoreError> {
    let mut suffix = [0u8; 8];
    rand::rng().fill_bytes(&mut suffix);
    let tmp = dir.join(format!("{TMP_PREFIX}{}", hex::encode(suffix)));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| io_error("create", &tmp, &e))?;
        file.write_all(data)
            .map_err(|e| io_error("write", &tmp, &e))?;
        file.sync_all().map_err(|e| io_error("sync", &tmp, &e))?;
        match fs::hard_link(&tmp, path) {
            Ok(()) => {
                sync_dir(dir)?;
                Ok(true)
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(io_error("link", path, &e)),
        }
    })();
    // The temporary name is only a staging area; a leftover (crash) is ignored by listings.
    let _ = fs::remove_file(&tmp);
    result
}

fn create_private_dir(dir: &Path) -> Result<(), SecretStoreError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| io_error("create directory", dir, &e))
}

fn sync_dir(dir: &Path) -> Result<(), SecretStoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error("sync directory", dir, &e))
}

/// Entry names of `dir` (none when it does not exist), skipping staging files.
fn list_dir(dir: &Path) -> Result<Vec<String>, SecretStoreError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error("list", dir, &e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error("list", dir, &e))?;
        if let Ok(name) = entry.file_name().into_string()
            && !name.starts_with(TMP_PREFIX)
        {
            names.push(name);
        }
    }
    Ok(names)
}

/// I/O errors name the operation, the path and the error kind: paths hold only ids, and the
/// OS message cannot contain file contents.
fn io_error(op: &str, path: &Path, err: &std::io::Error) -> SecretStoreError {
    SecretStoreError::Backend(format!("{op} {}: {err}", path.display()))
}
