//! Real Iceberg tables on the local file system, for capture tests and benchmarks: Parquet
//! data files (with Iceberg field ids), one manifest, a manifest list and a metadata file,
//! written with the `parquet` and `iceberg` crates. Schema: `id long required` (field 1),
//! `name string optional` (field 2); unpartitioned; one snapshot.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use iceberg::io::FileIO;
use iceberg::spec::{
    DataContentType, DataFileBuilder, DataFileFormat, ManifestListWriter, ManifestWriterBuilder,
    NestedField, PartitionSpec, PrimitiveType, Schema, Type,
};
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use serde_json::{Value, json};

/// What [`write_table`] wrote.
pub struct WrittenTable {
    pub metadata_location: String,
    pub metadata: Value,
    /// `file://` paths of the data files.
    pub data_files: Vec<String>,
}

/// Writes one Parquet file of `rows` rows (ids from `first_id`); answers its size.
pub fn write_parquet(path: &Path, first_id: i64, rows: usize) -> u64 {
    let schema = Arc::new(
        parse_message_type(
            "message table { required int64 id = 1; optional binary name (STRING) = 2; }",
        )
        .expect("parquet schema"),
    );
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).expect("data directory");
    }
    let file = std::fs::File::create(path).expect("create parquet file");
    let props = Arc::new(WriterProperties::builder().build());
    let mut w = SerializedFileWriter::new(file, schema, props).expect("parquet writer");
    let mut rg = w.next_row_group().expect("row group");
    let ids: Vec<i64> = (first_id..first_id + rows as i64).collect();
    if let Some(mut c) = rg.next_column().expect("column") {
        c.typed::<Int64Type>()
            .write_batch(&ids, None, None)
            .expect("ids");
        c.close().expect("close column");
    }
    if let Some(mut c) = rg.next_column().expect("column") {
        let names: Vec<ByteArray> = ids
            .iter()
            .map(|i| ByteArray::from(format!("name-{i}").as_str()))
            .collect();
        let defs = vec![1i16; names.len()];
        c.typed::<ByteArrayType>()
            .write_batch(&names, Some(&defs), None)
            .expect("names");
        c.close().expect("close column");
    }
    rg.close().expect("close row group");
    w.close().expect("close parquet file");
    std::fs::metadata(path).expect("size").len()
}

fn schema() -> Schema {
    Schema::builder()
        .with_schema_id(0)
        .with_fields(vec![
            NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(2, "name", Type::Primitive(PrimitiveType::String)).into(),
        ])
        .build()
        .expect("schema")
}

/// Writes a table rooted at `root` (a local directory) with `files` data files of `rows`
/// rows each, in one snapshot. `version` numbers the metadata file (a later call with a
/// higher version and more files models an upstream append).
pub async fn write_table(
    root: &Path,
    uuid: &str,
    version: u64,
    files: usize,
    rows: usize,
) -> WrittenTable {
    let io = FileIO::new_with_fs();
    let location = format!("file://{}", root.display());
    let schema = Arc::new(schema());
    let spec = PartitionSpec::builder(schema.clone())
        .with_spec_id(0)
        .build()
        .expect("spec");
    let snapshot_id = 1000 + version as i64;
    let mut data_files = Vec::new();
    let mut manifest = ManifestWriterBuilder::new(
        io.new_output(format!("{location}/metadata/manifest-{version}.avro"))
            .expect("manifest output"),
        Some(snapshot_id),
        schema.clone(),
        spec.clone(),
    )
    .build_v2_data();
    for i in 0..files {
        let path = root.join(format!("data/{version:05}-{i:05}.parquet"));
        let size = write_parquet(&path, (i * rows) as i64, rows);
        let file_path = format!("file://{}", path.display());
        data_files.push(file_path.clone());
        let df = DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_format(DataFileFormat::Parquet)
            .file_path(file_path)
            .file_size_in_bytes(size)
            .record_count(rows as u64)
            .partition_spec_id(0)
            .value_counts(HashMap::from([(1, rows as u64), (2, rows as u64)]))
            .null_value_counts(HashMap::from([(1, 0), (2, 0)]))
            .build()
            .expect("data file");
        manifest.add_file(df, version as i64).expect("add file");
    }
    let manifest_file = manifest.write_manifest_file().await.expect("manifest");
    let list_location = format!("{location}/metadata/snap-{snapshot_id}.avro");
    let mut list = ManifestListWriter::v2(
        io.new_output(&list_location)
            .expect("list output")
            .writer()
            .await
            .expect("list writer"),
        snapshot_id,
        None,
        version as i64,
    );
    list.add_manifests(std::iter::once(manifest_file))
        .expect("add manifest");
    list.close().await.expect("manifest list");
    let records = (files * rows) as u64;
    let metadata = json!({
        "format-version": 2,
        "table-uuid": uuid,
        "location": location,
        "last-sequence-number": version,
        "last-updated-ms": 1_700_000_000_000i64 + version as i64,
        "last-column-id": 2,
        "current-schema-id": 0,
        "schemas": [serde_json::to_value(schema.as_ref()).expect("schema json")],
        "default-spec-id": 0,
        "partition-specs": [{"spec-id": 0, "fields": []}],
        "last-partition-id": 999,
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": {"write.format.default": "parquet"},
        "current-snapshot-id": snapshot_id,
        "refs": {"main": {"snapshot-id": snapshot_id, "type": "branch"}},
        "snapshots": [{
            "snapshot-id": snapshot_id,
            "sequence-number": version,
            "timestamp-ms": 1_700_000_000_000i64 + version as i64,
            "manifest-list": list_location,
            "summary": {"operation": "append", "added-records": records.to_string()},
            "schema-id": 0
        }],
        "statistics": [],
        "snapshot-log": [],
        "metadata-log": []
    });
    let metadata_location = format!("{location}/metadata/{version:05}-{uuid}.metadata.json");
    let meta_dir = root.join("metadata");
    std::fs::create_dir_all(&meta_dir).expect("metadata directory");
    std::fs::write(
        meta_dir.join(format!("{version:05}-{uuid}.metadata.json")),
        metadata.to_string(),
    )
    .expect("metadata file");
    WrittenTable {
        metadata_location,
        metadata,
        data_files,
    }
}
