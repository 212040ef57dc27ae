//! File validation: each captured Parquet data file is compared with the captured table
//! metadata. The footer must be readable, every column of the table schema that the file
//! carries must have a compatible type (and a required column must be present), and the
//! footer's row count must be the record count the manifest states.
//!
//! Only the footer is read (one ranged read for the tail, a second one only when the footer
//! is larger than the first guess).

use iceberg::spec::{PrimitiveType, Schema, Type};
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::basic::Type as Physical;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use parquet::schema::types::ColumnDescriptor;

use super::record::CapturedFile;

/// Bytes read from the end of a file in the first request.
const TAIL_GUESS: u64 = 64 * 1024;
/// The largest footer validation reads.
const MAX_FOOTER: u64 = 16 * 1024 * 1024;

/// Why a footer was not read: the storage failed (retry later), or the file is not what
/// its metadata says (a validation error).
#[derive(Debug)]
pub enum FooterError {
    Transient(String),
    Invalid(String),
}

fn storage_error(e: object_store::Error) -> FooterError {
    // Where the store led is refused by the address policy: no retry reads this file.
    if let Some(r) = flotilla_catalog_access::object_storage::refusal(&e) {
        return FooterError::Invalid(format!("the file's storage was {r}"));
    }
    match e {
        object_store::Error::NotFound { .. } => {
            FooterError::Invalid("the file does not exist".into())
        }
        // A range past the end: the file is shorter than stated.
        object_store::Error::Generic { .. } if e.to_string().to_lowercase().contains("range") => {
            FooterError::Invalid("the file is shorter than the manifest states".into())
        }
        other => FooterError::Transient(short(&other.to_string())),
    }
}

/// Reads the footer of one Parquet file of `size` bytes.
pub async fn read_footer(
    store: &dyn ObjectStore,
    path: &object_store::path::Path,
    size: u64,
) -> Result<ParquetMetaData, FooterError> {
    footer_from(size, "the manifest", |range| async move {
        store.get_range(path, range).await.map_err(storage_error)
    })
    .await
}

/// Reads a Parquet footer through ranged reads of a file of `size` bytes, whatever serves the
/// bytes (an object store, a presigned URL): one read of the tail, and a second one only when
/// the footer is longer than that. `stated_by` names what stated the size, for the message.
pub async fn footer_from<F, Fut>(
    size: u64,
    stated_by: &str,
    fetch: F,
) -> Result<ParquetMetaData, FooterError>
where
    F: Fn(std::ops::Range<u64>) -> Fut,
    Fut: std::future::Future<Output = Result<bytes::Bytes, FooterError>>,
{
    use FooterError::Invalid;
    if size < 12 {
        return Err(Invalid(format!(
            "the file is {size} bytes, too small to be Parquet"
        )));
    }
    let first = TAIL_GUESS.min(size);
    let tail = fetch(size - first..size).await?;
    if tail.len() as u64 != first {
        return Err(Invalid(format!(
            "the file is shorter than the {size} bytes {stated_by} states"
        )));
    }
    let end: [u8; 8] = tail[tail.len() - 8..]
        .try_into()
        .map_err(|_| Invalid("the footer is truncated".to_owned()))?;
    let footer = parquet::file::metadata::FooterTail::try_from(end)
        .map_err(|e| Invalid(format!("unreadable Parquet footer: {e}")))?;
    if footer.is_encrypted_footer() {
        return Err(Invalid("the Parquet footer is encrypted".into()));
    }
    let len = footer.metadata_length() as u64;
    if len + 8 > size || len > MAX_FOOTER {
        return Err(Invalid(format!(
            "unreadable Parquet footer: metadata length {len} does not fit a {size}-byte file"
        )));
    }
    let buf = if len + 8 <= first {
        tail.slice((first - 8 - len) as usize..(first - 8) as usize)
    } else {
        fetch(size - 8 - len..size - 8).await?
    };
    decode_bounded(&buf).map_err(Invalid)
}

/// Decodes footer metadata (the thrift bytes between the data and the length) once
/// [`footer_bounds::check`](super::footer_bounds::check) has found it within bounds: the
/// decoder reserves memory at the lengths the footer claims, so it never sees one the bytes
/// could not hold.
pub fn decode_bounded(buf: &bytes::Bytes) -> Result<ParquetMetaData, String> {
    super::footer_bounds::check(buf).map_err(|e| format!("Parquet footer refused: {e}"))?;
    ParquetMetaDataReader::decode_metadata(buf)
        .map_err(|e| format!("unreadable Parquet footer: {e}"))
}

/// Checks the footer of a whole Parquet file held in memory before a reader decodes it.
pub fn check_file_footer(file: &[u8]) -> Result<(), String> {
    let n = file.len();
    if n < 12 || &file[n - 4..] != b"PAR1" {
        return Err("not a Parquet file".into());
    }
    let len = u32::from_le_bytes([file[n - 8], file[n - 7], file[n - 6], file[n - 5]]) as usize;
    if len > n - 8 {
        return Err(format!(
            "unreadable Parquet footer: metadata length {len} does not fit a {n}-byte file"
        ));
    }
    super::footer_bounds::check(&file[n - 8 - len..n - 8])
        .map_err(|e| format!("Parquet footer refused: {e}"))
}

fn short(s: &str) -> String {
    crate::status::bound_text(s)
}

/// Checks one file's footer against the schema and its stated record count. Answers the
/// first inconsistency found.
pub fn check(meta: &ParquetMetaData, schema: &Schema, file: &CapturedFile) -> Result<(), String> {
    let rows = meta.file_metadata().num_rows();
    if u64::try_from(rows).ok() != Some(file.record_count) {
        return Err(format!(
            "the footer holds {rows} rows; the manifest states {}",
            file.record_count
        ));
    }
    let descr = meta.file_metadata().schema_descr();
    let root = descr.root_schema();
    for field in schema.as_struct().fields() {
        // Top-level columns, matched by field id (Iceberg writers record them), else by name.
        let top = root.get_fields().iter().position(|f| {
            let info = f.get_basic_info();
            (info.has_id() && info.id() == field.id) || (!info.has_id() && f.name() == field.name)
        });
        let Some(top) = top else {
            if field.required {
                return Err(format!(
                    "required column {} (field id {}) is missing from the file",
                    field.name, field.id
                ));
            }
            continue;
        };
        let Type::Primitive(p) = field.field_type.as_ref() else {
            // Nested columns: presence is checked; their leaves are not compared.
            continue;
        };
        let node = &root.get_fields()[top];
        if !node.is_primitive() {
            return Err(format!(
                "column {} is a {} in the table schema but a group in the file",
                field.name, p
            ));
        }
        let Some(col) = (0..descr.num_columns())
            .map(|i| descr.column(i))
            .find(|c| c.path().parts().len() == 1 && c.path().parts()[0] == node.name())
        else {
            continue;
        };
        compatible(p, &col).map_err(|found| {
            format!(
                "column {} is {} in the table schema but {found} in the file",
                field.name, p
            )
        })?;
    }
    Ok(())
}

/// Whether a Parquet leaf column can hold values of an Iceberg primitive type. Answers what
/// the file has otherwise.
fn compatible(t: &PrimitiveType, col: &ColumnDescriptor) -> Result<(), String> {
    let phys = col.physical_type();
    let logical = col.logical_type_ref();
    let ok = match t {
        PrimitiveType::Boolean => phys == Physical::BOOLEAN,
        PrimitiveType::Int | PrimitiveType::Date => phys == Physical::INT32,
        PrimitiveType::Long => matches!(phys, Physical::INT64 | Physical::INT32),
        PrimitiveType::Float => phys == Physical::FLOAT,
        PrimitiveType::Double => matches!(phys, Physical::DOUBLE | Physical::FLOAT),
        PrimitiveType::Decimal { .. } => matches!(
            phys,
            Physical::INT32
                | Physical::INT64
                | Physical::FIXED_LEN_BYTE_ARRAY
                | Physical::BYTE_ARRAY
        ),
        PrimitiveType::Time
        | PrimitiveType::Timestamp
        | PrimitiveType::Timestamptz
        | PrimitiveType::TimestampNs
        | PrimitiveType::TimestamptzNs => {
            phys == Physical::INT64
                || (phys == Physical::INT96 && !matches!(t, PrimitiveType::Time))
        }
        PrimitiveType::String => phys == Physical::BYTE_ARRAY,
        PrimitiveType::Uuid => phys == Physical::FIXED_LEN_BYTE_ARRAY && col.type_length() == 16,
        PrimitiveType::Fixed(n) => {
            phys == Physical::FIXED_LEN_BYTE_ARRAY
                && u64::try_from(col.type_length()).ok() == Some(*n)
        }
        PrimitiveType::Binary => {
            matches!(phys, Physical::BYTE_ARRAY | Physical::FIXED_LEN_BYTE_ARRAY)
        }
    };
    if ok {
        Ok(())
    } else {
        Err(match logical {
            Some(l) => format!("{phys} ({l:?})"),
            None => phys.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
    use object_store::memory::InMemory;
    use object_store::path::Path;
    use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
    use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::parser::parse_message_type;

    use super::*;
    use crate::capture::record::CapturedFile;

    fn parquet_bytes(rows: i64) -> Vec<u8> {
        let schema = Arc::new(
            parse_message_type(
                "message t { required int64 id = 1; optional binary name (STRING) = 2; }",
            )
            .unwrap(),
        );
        let mut buf = Vec::new();
        let mut w = SerializedFileWriter::new(
            &mut buf,
            schema,
            Arc::new(WriterProperties::builder().build()),
        )
        .unwrap();
        let mut rg = w.next_row_group().unwrap();
        let ids: Vec<i64> = (0..rows).collect();
        let mut c = rg.next_column().unwrap().unwrap();
        c.typed::<Int64Type>()
            .write_batch(&ids, None, None)
            .unwrap();
        c.close().unwrap();
        let mut c = rg.next_column().unwrap().unwrap();
        let names: Vec<ByteArray> = ids
            .iter()
            .map(|i| ByteArray::from(i.to_string().as_str()))
            .collect();
        c.typed::<ByteArrayType>()
            .write_batch(&names, Some(&vec![1; names.len()]), None)
            .unwrap();
        c.close().unwrap();
        rg.close().unwrap();
        w.close().unwrap();
        buf
    }

    fn schema(id: PrimitiveType, extra_required: bool) -> Schema {
        let mut fields = vec![
            NestedField::required(1, "id", Type::Primitive(id)).into(),
            NestedField::optional(2, "name", Type::Primitive(PrimitiveType::String)).into(),
        ];
        if extra_required {
            fields.push(
                NestedField::required(3, "extra", Type::Primitive(PrimitiveType::Int)).into(),
            );
        }
        Schema::builder().with_fields(fields).build().unwrap()
    }

    fn file(bytes: &[u8], records: u64) -> CapturedFile {
        CapturedFile {
            path: "mem:///f.parquet".into(),
            format: "PARQUET".into(),
            size: bytes.len() as u64,
            record_count: records,
            partition: vec![],
            stats: Default::default(),
        }
    }

    async fn footer(bytes: Vec<u8>) -> Result<ParquetMetaData, FooterError> {
        let store = InMemory::new();
        let p = Path::from("f.parquet");
        let size = bytes.len() as u64;
        store.put(&p, PutPayload::from(bytes)).await.unwrap();
        read_footer(&store as &dyn ObjectStore, &p, size).await
    }

    #[tokio::test]
    async fn a_consistent_file_passes_and_each_inconsistency_is_named() {
        let bytes = parquet_bytes(5);
        let meta = footer(bytes.clone()).await.unwrap();
        let ok = schema(PrimitiveType::Long, false);
        assert_eq!(check(&meta, &ok, &file(&bytes, 5)), Ok(()));
        let e = check(&meta, &ok, &file(&bytes, 6)).unwrap_err();
        assert!(e.contains("5 rows") && e.contains("6"), "{e}");
        let e = check(
            &meta,
            &schema(PrimitiveType::String, false),
            &file(&bytes, 5),
        )
        .unwrap_err();
        assert!(e.contains("column id") && e.contains("INT64"), "{e}");
        let e = check(&meta, &schema(PrimitiveType::Long, true), &file(&bytes, 5)).unwrap_err();
        assert!(e.contains("required column extra"), "{e}");
    }

    /// Decodes the footer bomb; run only as the child of the test below.
    #[tokio::test]
    async fn footer_bomb_child() {
        if std::env::var_os(crate::capture::footer_bounds::CHILD).is_none() {
            return;
        }
        let e = footer(crate::capture::footer_bounds::bomb_file()).await;
        let Err(FooterError::Invalid(m)) = e else {
            panic!("the bomb was not refused");
        };
        assert!(m.contains("2000000000 schema elements"), "{m}");
        println!("refused: {m}");
    }

    #[test]
    fn a_footer_claiming_billions_of_schema_elements_is_refused_within_a_memory_limit() {
        crate::capture::footer_bounds::run_child_under_memory_limit(
            "capture::validate::tests::footer_bomb_child",
        );
    }

    #[tokio::test]
    async fn unreadable_footers_are_validation_errors() {
        let mut bytes = parquet_bytes(3);
        let n = bytes.len();
        bytes[n - 4..].copy_from_slice(b"XXXX");
        assert!(matches!(footer(bytes).await, Err(FooterError::Invalid(_))));
        assert!(matches!(
            footer(b"PAR1".to_vec()).await,
            Err(FooterError::Invalid(_))
        ));
        // A file shorter than stated.
        let bytes = parquet_bytes(3);
        let store = InMemory::new();
        let p = Path::from("f.parquet");
        let size = bytes.len() as u64 + 100;
        store.put(&p, PutPayload::from(bytes)).await.unwrap();
        assert!(matches!(
            read_footer(&store as &dyn ObjectStore, &p, size).await,
            Err(FooterError::Invalid(_))
        ));
    }
}
