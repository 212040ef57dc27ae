//! A small Delta log replay: the current version of a table at its storage location, from
//! `_delta_log/` (the JSON commits after the last checkpoint, and that checkpoint's Parquet
//! file(s) when there is one), read through the upstream's storage.
//!
//! Only what capture records is kept: the last `protocol` and `metaData` actions and the
//! live `add` actions (an `add` replaced or `remove`d by a later commit is gone). Checkpoint
//! tombstones, `txn`, `commitInfo`, `cdc` and domain metadata are ignored.

use std::collections::BTreeMap;

use futures::TryStreamExt;
use object_store::path::Path;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::{Field, Row};
use serde_json::{Value, json};

use crate::capture::iceberg::{ReadError, read_object};
use crate::capture::storage::UpstreamFiles;

/// One live data file as the log states it.
#[derive(Clone, Debug, PartialEq)]
pub struct AddFile {
    /// As in the log: relative to the table root (URL-encoded) or an absolute URI.
    pub path: String,
    pub size: u64,
    pub partition_values: BTreeMap<String, Option<String>>,
    pub stats: Option<String>,
    pub deletion_vector: bool,
}

/// The table at one version.
#[derive(Debug)]
pub struct LogSnapshot {
    pub version: i64,
    pub protocol: Value,
    pub metadata: Value,
    pub files: Vec<AddFile>,
}

/// Where the log stands: its latest version and the checkpoint replay starts from.
#[derive(Clone, Debug, PartialEq)]
pub struct LogTip {
    pub version: i64,
    /// The checkpoint version and its part files (log-relative names).
    pub checkpoint: Option<(i64, Vec<String>)>,
    /// Commit file names after the checkpoint, in version order.
    pub commits: Vec<(i64, String)>,
}

/// The location of the table's commit file of `version`.
pub fn commit_location(table_location: &str, version: i64) -> String {
    format!(
        "{}/_delta_log/{version:020}.json",
        table_location.trim_end_matches('/')
    )
}

fn corrupt(location: &str, message: impl Into<String>) -> ReadError {
    ReadError::Corrupt {
        location: location.to_owned(),
        message: message.into(),
    }
}

fn unavailable(location: &str, e: &dyn std::fmt::Display) -> ReadError {
    ReadError::Unavailable {
        location: location.to_owned(),
        message: crate::status::bound_text(&e.to_string()),
    }
}

/// Finds the latest version: `_last_checkpoint` (when present) and one listing of the log
/// from that checkpoint on. No data file is read.
pub async fn tip(files: &UpstreamFiles, table_location: &str) -> Result<LogTip, ReadError> {
    let root = table_location.trim_end_matches('/');
    let log = format!("{root}/_delta_log");
    let hint_location = format!("{log}/_last_checkpoint");
    let hint: Option<i64> = match read_object(files, &hint_location).await {
        Ok(bytes) => serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| v.get("version").and_then(Value::as_i64)),
        Err(ReadError::Corrupt { .. }) => None,
        Err(e) => return Err(e),
    };
    let at = files.locate(&log)?;
    let prefix: Path = at.path.clone();
    let listed: Vec<object_store::ObjectMeta> = match hint {
        Some(v) => {
            let offset = prefix.clone().join(format!("{v:020}"));
            at.store
                .list_with_offset(Some(&prefix), &offset)
                .try_collect()
                .await
        }
        None => at.store.list(Some(&prefix)).try_collect().await,
    }
    .map_err(|e| {
        if let Some(refused) = crate::capture::storage::refused(&e) {
            return ReadError::Storage(refused);
        }
        match e {
            object_store::Error::NotFound { .. } => corrupt(&log, "there is no Delta log"),
            other => unavailable(&log, &other),
        }
    })?;
    let mut commits: BTreeMap<i64, String> = BTreeMap::new();
    // Checkpoint files by version: name and (part, parts) of a multi-part one.
    type Parts = Vec<(String, Option<(u32, u32)>)>;
    let mut checkpoints: BTreeMap<i64, Parts> = BTreeMap::new();
    for meta in listed {
        let Some(name) = meta.location.filename().map(str::to_owned) else {
            continue;
        };
        let Some((num, rest)) = name.split_once('.') else {
            continue;
        };
        let (Ok(v), 20) = (num.parse::<i64>(), num.len()) else {
            continue;
        };
        if rest == "json" {
            commits.insert(v, name);
        } else if rest == "checkpoint.parquet" {
            checkpoints.entry(v).or_default().push((name, None));
        } else if let Some(parts) = rest
            .strip_prefix("checkpoint.")
            .and_then(|r| r.strip_suffix(".parquet"))
            && let Some((i, n)) = parts.split_once('.')
            && let (Ok(i), Ok(n)) = (i.parse::<u32>(), n.parse::<u32>())
        {
            checkpoints.entry(v).or_default().push((name, Some((i, n))));
        }
    }
    let Some(latest) = commits
        .keys()
        .next_back()
        .copied()
        .max(checkpoints.keys().next_back().copied())
    else {
        return Err(corrupt(&log, "the Delta log holds no commit"));
    };
    // The newest complete checkpoint (a single file, or every part of a multi-part one).
    let checkpoint = checkpoints.into_iter().rev().find_map(|(v, parts)| {
        if let Some((name, None)) = parts.iter().find(|(_, p)| p.is_none()) {
            return Some((v, vec![name.clone()]));
        }
        let n = parts.iter().find_map(|(_, p)| p.map(|(_, n)| n))?;
        let mut named: Vec<(u32, String)> = parts
            .iter()
            .filter_map(|(name, p)| p.filter(|(_, m)| *m == n).map(|(i, _)| (i, name.clone())))
            .collect();
        named.sort();
        named.dedup_by_key(|(i, _)| *i);
        (named.len() == n as usize).then(|| (v, named.into_iter().map(|(_, s)| s).collect()))
    });
    let from = checkpoint.as_ref().map_or(0, |(v, _)| v + 1);
    let mut ordered = Vec::new();
    for v in from..=latest {
        match commits.remove(&v) {
            Some(name) => ordered.push((v, name)),
            None => {
                return Err(corrupt(
                    &log,
                    format!("commit {v} is missing from the Delta log"),
                ));
            }
        }
    }
    Ok(LogTip {
        version: latest,
        checkpoint,
        commits: ordered,
    })
}

/// Replays the log up to `tip`: the checkpoint, then every later commit in order.
pub async fn replay(
    files: &UpstreamFiles,
    table_location: &str,
    tip: &LogTip,
    max_files: usize,
) -> Result<LogSnapshot, ReadError> {
    let log = format!("{}/_delta_log", table_location.trim_end_matches('/'));
    let mut protocol = Value::Null;
    let mut metadata = Value::Null;
    let mut live: BTreeMap<String, AddFile> = BTreeMap::new();
    if let Some((_, parts)) = &tip.checkpoint {
        for part in parts {
            let location = format!("{log}/{part}");
            let bytes = read_object(files, &location).await?;
            // The reader decodes the footer at the lengths it claims: bound it first.
            crate::capture::validate::check_file_footer(&bytes)
                .map_err(|e| corrupt(&location, format!("unreadable checkpoint: {e}")))?;
            let bytes = bytes::Bytes::from(bytes);
            let reader = SerializedFileReader::new(bytes.clone())
                .map_err(|e| corrupt(&location, format!("unreadable checkpoint: {e}")))?;
            // The row reader reserves each page's stated size: bound the pages first.
            crate::capture::footer_bounds::check_pages(&bytes, reader.metadata())
                .map_err(|e| corrupt(&location, format!("unreadable checkpoint: {e}")))?;
            let rows = reader
                .get_row_iter(None)
                .map_err(|e| corrupt(&location, format!("unreadable checkpoint: {e}")))?;
            for row in rows {
                let row =
                    row.map_err(|e| corrupt(&location, format!("unreadable checkpoint: {e}")))?;
                for (name, field) in row.get_column_iter() {
                    if matches!(field, Field::Null) {
                        continue;
                    }
                    match name.as_str() {
                        "protocol" => protocol = to_json(field),
                        "metaData" => metadata = checkpoint_metadata(field),
                        "add" => {
                            if let Field::Group(g) = field {
                                let add = checkpoint_add(g).ok_or_else(|| {
                                    corrupt(&location, "an add without path or size")
                                })?;
                                live.insert(add.path.clone(), add);
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    for (_, name) in &tip.commits {
        let location = format!("{log}/{name}");
        let bytes = read_object(files, &location).await?;
        let text = std::str::from_utf8(&bytes).map_err(|_| corrupt(&location, "not UTF-8"))?;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(line)
                .map_err(|e| corrupt(&location, format!("line {} is not JSON: {e}", n + 1)))?;
            if let Some(p) = v.get("protocol") {
                protocol = p.clone();
            }
            if let Some(m) = v.get("metaData") {
                metadata = m.clone();
            }
            if let Some(a) = v.get("add") {
                let add = json_add(a).ok_or_else(|| {
                    corrupt(
                        &location,
                        format!("line {}: an add without path or size", n + 1),
                    )
                })?;
                live.insert(add.path.clone(), add);
            }
            if let Some(path) = v
                .get("remove")
                .and_then(|r| r.get("path"))
                .and_then(Value::as_str)
            {
                live.remove(path);
            }
        }
        if live.len() > max_files {
            return Err(corrupt(
                &log,
                format!("the table has more than {max_files} data files"),
            ));
        }
    }
    if protocol.is_null() || metadata.is_null() {
        return Err(corrupt(
            &log,
            "the Delta log states no protocol or no metaData",
        ));
    }
    if live.len() > max_files {
        return Err(corrupt(
            &log,
            format!("the table has more than {max_files} data files"),
        ));
    }
    Ok(LogSnapshot {
        version: tip.version,
        protocol,
        metadata,
        files: live.into_values().collect(),
    })
}

fn string_map(v: Option<&Value>) -> BTreeMap<String, Option<String>> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, x)| (k.clone(), x.as_str().map(str::to_owned)))
                .collect()
        })
        .unwrap_or_default()
}

fn json_add(a: &Value) -> Option<AddFile> {
    Some(AddFile {
        path: a.get("path")?.as_str()?.to_owned(),
        size: a.get("size")?.as_u64()?,
        partition_values: string_map(a.get("partitionValues")),
        stats: a.get("stats").and_then(Value::as_str).map(str::to_owned),
        deletion_vector: a.get("deletionVector").is_some_and(|d| !d.is_null()),
    })
}

/// A checkpoint's `metaData` struct as the JSON action it stands for (`partitionColumns` a
/// list, `configuration` a map, `format` a struct).
fn checkpoint_metadata(field: &Field) -> Value {
    to_json(field)
}

/// A checkpoint value as JSON: groups as objects, lists as arrays, maps (string keys) as
/// objects; values capture does not use as `null`.
fn to_json(field: &Field) -> Value {
    match field {
        Field::Bool(b) => json!(b),
        Field::Byte(n) => json!(n),
        Field::Short(n) => json!(n),
        Field::Int(n) => json!(n),
        Field::Long(n) => json!(n),
        Field::UByte(n) => json!(n),
        Field::UShort(n) => json!(n),
        Field::UInt(n) => json!(n),
        Field::ULong(n) => json!(n),
        Field::Float(x) => json!(x),
        Field::Double(x) => json!(x),
        Field::Str(s) => json!(s),
        Field::Date(n) => json!(n),
        Field::TimestampMillis(n) | Field::TimestampMicros(n) => json!(n),
        Field::Group(g) => Value::Object(
            g.get_column_iter()
                .map(|(k, v)| (k.clone(), to_json(v)))
                .collect(),
        ),
        Field::ListInternal(l) => Value::Array(l.elements().iter().map(to_json).collect()),
        Field::MapInternal(m) => Value::Object(
            m.entries()
                .iter()
                .filter_map(|(k, v)| match k {
                    Field::Str(k) => Some((k.clone(), to_json(v))),
                    _ => None,
                })
                .collect(),
        ),
        _ => Value::Null,
    }
}

fn checkpoint_add(g: &Row) -> Option<AddFile> {
    let v = to_json(&Field::Group(g.clone()));
    json_add(&v)
}

/// The location of a live file: its absolute URI, or the table root joined with its
/// (URL-encoded) relative path.
pub fn file_location(table_location: &str, path: &str) -> String {
    if path.contains("://") {
        path.to_owned()
    } else {
        format!("{}/{path}", table_location.trim_end_matches('/'))
    }
}

/// Commit file contents for tests and fixtures: one JSON action per line.
pub fn commit_lines(actions: &[Value]) -> String {
    let mut s = String::new();
    for a in actions {
        s.push_str(&a.to_string());
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &std::path::Path, name: &str, body: &str) {
        let log = dir.join("_delta_log");
        std::fs::create_dir_all(&log).unwrap();
        std::fs::write(log.join(name), body).unwrap();
    }

    #[tokio::test]
    async fn replay_keeps_live_adds_and_the_last_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let location = url::Url::from_directory_path(&root).unwrap().to_string();
        let protocol = json!({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}});
        let meta = |s: &str| {
            json!({"metaData": {"id": "m", "format": {"provider": "parquet"},
                "schemaString": s, "partitionColumns": [], "configuration": {}}})
        };
        let add = |p: &str| {
            json!({"add": {"path": p, "size": 10, "partitionValues": {},
            "modificationTime": 0, "dataChange": true, "stats": "{\"numRecords\":1}"}})
        };
        write(
            &root,
            &format!("{:020}.json", 0),
            &commit_lines(&[protocol, meta("a"), add("x.parquet"), add("y.parquet")]),
        );
        write(
            &root,
            &format!("{:020}.json", 1),
            &commit_lines(&[
                json!({"remove": {"path": "x.parquet", "dataChange": true}}),
                add("z%20z.parquet"),
                meta("b"),
            ]),
        );
        let files = UpstreamFiles::new(None, true).with_local_root(Some(std::env::temp_dir()));
        let t = tip(&files, &location).await.unwrap();
        assert_eq!(
            (t.version, t.checkpoint.clone(), t.commits.len()),
            (1, None, 2)
        );
        let s = replay(&files, &location, &t, 100).await.unwrap();
        assert_eq!(s.metadata["schemaString"], "b");
        let paths: Vec<&str> = s.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["y.parquet", "z%20z.parquet"]);
        assert!(matches!(
            replay(&files, &location, &t, 1).await,
            Err(ReadError::Corrupt { .. })
        ));
        // A gap in the log is reported, not skipped.
        write(&root, &format!("{:020}.json", 3), "{}\n");
        assert!(matches!(
            tip(&files, &location).await,
            Err(ReadError::Corrupt { .. })
        ));
    }

    /// A checkpoint-shaped Parquet file: ten rows of one snappy-compressed int64 column in
    /// one page, its page header carrying statistics (room to rewrite it at the same length).
    fn one_page_file() -> Vec<u8> {
        use parquet::basic::Compression;
        use parquet::data_type::Int64Type;
        use parquet::file::properties::{EnabledStatistics, WriterProperties};
        use parquet::file::writer::SerializedFileWriter;
        let schema = std::sync::Arc::new(
            parquet::schema::parser::parse_message_type("message m { required int64 x; }").unwrap(),
        );
        let props = std::sync::Arc::new(
            WriterProperties::builder()
                .set_compression(Compression::SNAPPY)
                .set_dictionary_enabled(false)
                .set_statistics_enabled(EnabledStatistics::Page)
                .set_write_page_header_statistics(true)
                .build(),
        );
        let mut out = Vec::new();
        let mut w = SerializedFileWriter::new(&mut out, schema, props).unwrap();
        let mut rg = w.next_row_group().unwrap();
        let mut col = rg.next_column().unwrap().unwrap();
        col.typed::<Int64Type>()
            .write_batch(&(1..=10).collect::<Vec<i64>>(), None, None)
            .unwrap();
        col.close().unwrap();
        rg.close().unwrap();
        w.close().unwrap();
        out
    }

    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn i32_field(out: &mut Vec<u8>, value: i64) {
        out.push(0x15); // the next field id, i32
        varint(out, ((value << 1) ^ (value >> 63)) as u64);
    }

    /// `file` with its one page header rewritten, at the same length, to state `claim`
    /// uncompressed bytes: type, sizes and a plain data page header, then an unknown binary
    /// field (readers skip it) padding to the old length.
    fn with_page_claim(file: &[u8], claim: i64) -> Vec<u8> {
        use crate::capture::footer_bounds::page_header;
        let reader = SerializedFileReader::new(bytes::Bytes::from(file.to_vec())).unwrap();
        let start = reader.metadata().row_group(0).column(0).data_page_offset() as usize;
        let old = page_header(&file[start..]).unwrap();
        let mut header = Vec::new();
        i32_field(&mut header, 0); // 1: DATA_PAGE
        i32_field(&mut header, claim); // 2: uncompressed_page_size
        i32_field(&mut header, old.compressed); // 3: compressed_page_size
        header.push(0x2c); // 5: data_page_header, a struct
        i32_field(&mut header, 10); // num_values
        i32_field(&mut header, 0); // encoding PLAIN
        i32_field(&mut header, 3); // definition levels RLE
        i32_field(&mut header, 3); // repetition levels RLE
        header.push(0x00);
        // Field 99, binary, long form: type byte, zigzag id, length, bytes.
        let pad = old.header_len - header.len() - 1 - 4;
        header.extend([0x08, 0xc6, 0x01]);
        assert!(pad < 0x80, "one-byte length");
        header.push(pad as u8);
        header.extend(std::iter::repeat_n(0u8, pad));
        header.push(0x00);
        assert_eq!(header.len(), old.header_len);
        let mut out = file.to_vec();
        out[start..start + old.header_len].copy_from_slice(&header);
        out
    }

    async fn replay_checkpoint(file: Vec<u8>) -> (String, Result<LogSnapshot, ReadError>) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let location = url::Url::from_directory_path(&root).unwrap().to_string();
        let log = root.join("_delta_log");
        std::fs::create_dir_all(&log).unwrap();
        std::fs::write(log.join(format!("{:020}.checkpoint.parquet", 0)), file).unwrap();
        let files = UpstreamFiles::new(None, true).with_local_root(Some(std::env::temp_dir()));
        let t = tip(&files, &location).await.unwrap();
        assert!(t.checkpoint.is_some());
        let out = replay(&files, &location, &t, 100).await;
        (location, out)
    }

    /// A page header rewritten to state its true size reads as before (the rewrite is sound);
    /// stating 100 MiB, past the bound, the checkpoint is refused naming the page claim.
    #[tokio::test]
    async fn a_checkpoint_page_stating_more_than_the_bound_is_refused() {
        let file = one_page_file();
        let reader = SerializedFileReader::new(bytes::Bytes::from(file.clone())).unwrap();
        let start = reader.metadata().row_group(0).column(0).data_page_offset() as usize;
        let real = crate::capture::footer_bounds::page_header(&file[start..]).unwrap();
        // The file holds no protocol or metaData rows: the replay reads every row, then says so.
        let (_, honest) = replay_checkpoint(with_page_claim(&file, real.uncompressed)).await;
        match honest {
            Err(ReadError::Corrupt { message, .. }) => {
                assert!(message.contains("no protocol or no metaData"), "{message}");
            }
            other => panic!("the honest rewrite did not read: {:?}", other.err()),
        }
        let (_, refused) = replay_checkpoint(with_page_claim(&file, 100 << 20)).await;
        match refused {
            Err(ReadError::Corrupt { location, message }) => {
                assert!(location.ends_with(".checkpoint.parquet"), "{location}");
                assert!(
                    message.contains("104857600 uncompressed bytes"),
                    "{message}"
                );
            }
            other => panic!("the page claim was not refused: {:?}", other.err()),
        }
    }

    /// Replays a checkpoint whose one page states 2,000,000,000 uncompressed bytes; run only
    /// as the child of the test below.
    #[tokio::test]
    async fn checkpoint_page_bomb_child() {
        if std::env::var_os(crate::capture::footer_bounds::CHILD).is_none() {
            return;
        }
        let (_, out) = replay_checkpoint(with_page_claim(&one_page_file(), 2_000_000_000)).await;
        match out {
            Err(ReadError::Corrupt { message, .. }) => {
                assert!(
                    message.contains("2000000000 uncompressed bytes"),
                    "{message}"
                );
            }
            other => panic!("the page bomb was not refused: {:?}", other.err()),
        }
    }

    /// The row reader reserves a page's stated size before decompressing it: without the page
    /// walk, this child dies of the 2 GB reservation under a 1 GiB address-space limit.
    #[test]
    fn a_checkpoint_page_claiming_two_gigabytes_is_refused_within_a_memory_limit() {
        crate::capture::footer_bounds::run_child_under_memory_limit(
            "capture::delta::log::tests::checkpoint_page_bomb_child",
        );
    }

    /// Replays a Delta log whose checkpoint footer is the bomb; run only as the child of the
    /// test below.
    #[tokio::test]
    async fn checkpoint_bomb_child() {
        if std::env::var_os(crate::capture::footer_bounds::CHILD).is_none() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let location = url::Url::from_directory_path(&root).unwrap().to_string();
        let log = root.join("_delta_log");
        std::fs::create_dir_all(&log).unwrap();
        std::fs::write(
            log.join(format!("{:020}.checkpoint.parquet", 0)),
            crate::capture::footer_bounds::bomb_file(),
        )
        .unwrap();
        let files = UpstreamFiles::new(None, true).with_local_root(Some(std::env::temp_dir()));
        let t = tip(&files, &location).await.unwrap();
        assert!(t.checkpoint.is_some());
        match replay(&files, &location, &t, 100).await {
            Err(ReadError::Corrupt { location, message }) => {
                assert!(location.ends_with(".checkpoint.parquet"), "{location}");
                assert!(message.contains("2000000000 schema elements"), "{message}");
            }
            other => panic!("the bomb was not refused: {:?}", other.err()),
        }
    }

    #[test]
    fn a_checkpoint_footer_claiming_billions_of_schema_elements_is_refused_within_a_memory_limit() {
        crate::capture::footer_bounds::run_child_under_memory_limit(
            "capture::delta::log::tests::checkpoint_bomb_child",
        );
    }
}
