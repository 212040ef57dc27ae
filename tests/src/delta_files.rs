//! Real Delta tables on the local file system, for capture tests and benchmarks: Parquet data
//! files (written by [`crate::iceberg_files::write_parquet`]: `id long` not null, `name
//! string`), JSON commits in `_delta_log/`, and on request a Parquet checkpoint with
//! `_last_checkpoint`. Unpartitioned; every `add` carries `stats` (`numRecords`, bounds and
//! null counts of `id`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::data_type::{BoolType, ByteArray, ByteArrayType, Int32Type, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use serde_json::{Value, json};

use crate::iceberg_files::write_parquet;

/// The Delta schema of the tables written here.
pub fn schema_string() -> String {
    json!({"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": false, "metadata": {}},
        {"name": "name", "type": "string", "nullable": true, "metadata": {}}
    ]})
    .to_string()
}

/// One live file of a [`DeltaTable`].
#[derive(Clone, Debug)]
pub struct DeltaFile {
    /// Relative to the table root.
    pub path: String,
    pub size: u64,
    pub stats: String,
}

/// A Delta table being written: its root directory, version, protocol, metadata and live
/// files.
pub struct DeltaTable {
    pub root: PathBuf,
    pub version: i64,
    pub protocol: Value,
    pub metadata: Value,
    pub files: Vec<DeltaFile>,
    next_id: i64,
}

fn stats(first: i64, rows: usize) -> String {
    json!({"numRecords": rows, "minValues": {"id": first},
        "maxValues": {"id": first + rows as i64 - 1}, "nullCount": {"id": 0, "name": 0}})
    .to_string()
}

impl DeltaTable {
    /// Creates a table at `root` whose commit 0 holds `files` files of `rows` rows each.
    pub fn create(root: &Path, files: usize, rows: usize) -> Self {
        std::fs::create_dir_all(root.join("_delta_log")).expect("delta log directory");
        let mut t = Self {
            root: root.canonicalize().expect("table root"),
            version: -1,
            protocol: json!({"minReaderVersion": 1, "minWriterVersion": 2}),
            metadata: json!({"id": uuid::Uuid::new_v4().to_string(),
                "format": {"provider": "parquet", "options": {}},
                "schemaString": schema_string(), "partitionColumns": [],
                "configuration": {}, "createdTime": 1_700_000_000_000_i64}),
            files: Vec::new(),
            next_id: 1,
        };
        let mut actions = vec![
            json!({"protocol": t.protocol}),
            json!({"metaData": t.metadata}),
        ];
        for _ in 0..files {
            actions.push(t.new_file(rows));
        }
        t.commit(&actions);
        t
    }

    /// The table location as Unity states it (`file:///...`, no trailing slash).
    pub fn location(&self) -> String {
        // Absolute and canonical: `file://` followed by the path (no characters to escape in
        // the temporary directories tests use).
        format!("file://{}", self.root.display())
    }

    /// The absolute path of a live file.
    pub fn file_path(&self, f: &DeltaFile) -> PathBuf {
        self.root.join(&f.path)
    }

    fn new_file(&mut self, rows: usize) -> Value {
        let name = format!(
            "part-{:05}-{}.snappy.parquet",
            self.next_id,
            uuid::Uuid::new_v4()
        );
        let first = self.next_id * 1000;
        self.next_id += 1;
        let size = write_parquet(&self.root.join(&name), first, rows);
        let f = DeltaFile {
            path: name.clone(),
            size,
            stats: stats(first, rows),
        };
        self.files.push(f.clone());
        json!({"add": {"path": name, "partitionValues": {}, "size": size,
            "modificationTime": 1_700_000_000_000_i64, "dataChange": true, "stats": f.stats}})
    }

    /// Writes the next commit with these actions.
    pub fn commit(&mut self, actions: &[Value]) {
        self.version += 1;
        let mut body = String::new();
        for a in actions {
            body.push_str(&a.to_string());
            body.push('\n');
        }
        std::fs::write(
            self.root
                .join("_delta_log")
                .join(format!("{:020}.json", self.version)),
            body,
        )
        .expect("write commit");
    }

    /// Commits one new file of `rows` rows.
    pub fn append(&mut self, rows: usize) {
        let add = self.new_file(rows);
        self.commit(&[add]);
    }

    /// Commits the removal of the first live file.
    pub fn remove_first(&mut self) {
        let f = self.files.remove(0);
        self.commit(&[json!({"remove": {"path": f.path, "dataChange": true,
            "deletionTimestamp": 1_700_000_000_001_i64}})]);
    }

    /// Commits a new protocol and configuration (e.g. a reader feature capture lacks).
    pub fn set_protocol(&mut self, protocol: Value, configuration: Value) {
        self.protocol = protocol;
        self.metadata["configuration"] = configuration;
        let (p, m) = (self.protocol.clone(), self.metadata.clone());
        self.commit(&[json!({"protocol": p}), json!({"metaData": m})]);
    }

    /// Writes a single-file Parquet checkpoint of the current version and `_last_checkpoint`.
    pub fn checkpoint(&self) {
        let schema = Arc::new(
            parse_message_type(
                "message checkpoint {
                  optional group add {
                    required binary path (STRING);
                    required int64 size;
                    required int64 modificationTime;
                    required boolean dataChange;
                    optional binary stats (STRING);
                  }
                  optional group metaData {
                    required binary id (STRING);
                    required binary schemaString (STRING);
                  }
                  optional group protocol {
                    required int32 minReaderVersion;
                    required int32 minWriterVersion;
                  }
                }",
            )
            .expect("checkpoint schema"),
        );
        // Rows: protocol, metaData, then one add per live file.
        let n = 2 + self.files.len();
        let add_defs: Vec<i16> = (0..n).map(|i| i16::from(i >= 2)).collect();
        let stats_defs: Vec<i16> = (0..n).map(|i| if i >= 2 { 2 } else { 0 }).collect();
        let meta_defs: Vec<i16> = (0..n).map(|i| i16::from(i == 1)).collect();
        let proto_defs: Vec<i16> = (0..n).map(|i| i16::from(i == 0)).collect();
        let path = self
            .root
            .join("_delta_log")
            .join(format!("{:020}.checkpoint.parquet", self.version));
        let file = std::fs::File::create(&path).expect("create checkpoint");
        let mut w =
            SerializedFileWriter::new(file, schema, Arc::new(WriterProperties::builder().build()))
                .expect("checkpoint writer");
        let mut rg = w.next_row_group().expect("row group");
        let bytes = |v: Vec<String>| -> Vec<ByteArray> {
            v.iter().map(|s| ByteArray::from(s.as_str())).collect()
        };
        let paths = bytes(self.files.iter().map(|f| f.path.clone()).collect());
        let sizes: Vec<i64> = self.files.iter().map(|f| f.size as i64).collect();
        let times: Vec<i64> = self.files.iter().map(|_| 1_700_000_000_000).collect();
        let changes: Vec<bool> = self.files.iter().map(|_| true).collect();
        let stats = bytes(self.files.iter().map(|f| f.stats.clone()).collect());
        let id = bytes(vec![self.metadata["id"].as_str().unwrap_or("m").to_owned()]);
        let schema_s = bytes(vec![
            self.metadata["schemaString"]
                .as_str()
                .unwrap_or("{}")
                .to_owned(),
        ]);
        let reader = vec![self.protocol["minReaderVersion"].as_i64().unwrap_or(1) as i32];
        let writer = vec![self.protocol["minWriterVersion"].as_i64().unwrap_or(2) as i32];
        macro_rules! column {
            ($ty:ty, $values:expr, $defs:expr) => {{
                let mut c = rg.next_column().expect("column").expect("a column");
                c.typed::<$ty>()
                    .write_batch(&$values, Some(&$defs), None)
                    .expect("write column");
                c.close().expect("close column");
            }};
        }
        column!(ByteArrayType, paths, add_defs);
        column!(Int64Type, sizes, add_defs);
        column!(Int64Type, times, add_defs);
        column!(BoolType, changes, add_defs);
        column!(ByteArrayType, stats, stats_defs);
        column!(ByteArrayType, id, meta_defs);
        column!(ByteArrayType, schema_s, meta_defs);
        column!(Int32Type, reader, proto_defs);
        column!(Int32Type, writer, proto_defs);
        rg.close().expect("close row group");
        w.close().expect("close checkpoint");
        std::fs::write(
            self.root.join("_delta_log").join("_last_checkpoint"),
            json!({"version": self.version, "size": n}).to_string(),
        )
        .expect("write _last_checkpoint");
    }
}
