//! Capture reads an upstream's Avro objects within bounds (`docs/reliability.md`,
//! "Decompression and entry counts are bounded"): a manifest list of about 1 MB whose deflate
//! block inflates to 1 GiB is refused with `UPSTREAM_OBJECT_TOO_LARGE` by a process limited
//! to 1 GiB of address space (the iceberg crate's reader alone would inflate the whole block
//! and abort it), a manifest of a few hundred bytes whose one entry claims a `column_sizes`
//! of 500,000,000 items is refused the same way (the reader would reserve gigabytes for it),
//! and a manifest list naming one manifest 20,000 times has it fetched once.
//!
//! The upstream is a fixture S3 origin on loopback (read in insecure mode, as a local
//! development host would) that serves fixed objects and counts the requests for each.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use flotilla_catalog_access::spi::{SecretString, StorageCredential, VendedCredentials};
use flotilla_reconcile::capture::avro::InflateBudget;
use flotilla_reconcile::capture::iceberg::{ReadError, TOO_LARGE, read_snapshot};
use flotilla_reconcile::capture::storage::UpstreamFiles;
use iceberg::io::FileIO;
use iceberg::spec::{
    DataContentType, DataFileBuilder, DataFileFormat, ManifestListWriter, ManifestWriterBuilder,
    NestedField, PartitionSpec, PrimitiveType, Schema, Struct, Type,
};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BUCKET: &str = "upstream-bucket";
const TABLE: &str = "wh/sales/orders";

fn s3(key: &str) -> String {
    format!("s3://{BUCKET}/{TABLE}/{key}")
}

/// A fixture S3 origin: answers a GET of `/<bucket>/<key>` with the object stored under that
/// key (404 otherwise) and counts the GETs of each key.
struct Upstream {
    addr: SocketAddr,
    hits: Arc<Mutex<HashMap<String, usize>>>,
}

impl Upstream {
    async fn start(objects: HashMap<String, Vec<u8>>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let hits: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let objects = Arc::new(objects);
        let counted = hits.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(serve(sock, objects.clone(), counted.clone()));
            }
        });
        Self { addr, hits }
    }

    fn hits(&self, key: &str) -> usize {
        let path = format!("/{BUCKET}/{TABLE}/{key}");
        self.hits.lock().unwrap().get(&path).copied().unwrap_or(0)
    }

    fn files(&self) -> UpstreamFiles {
        let vended = VendedCredentials {
            prefix: None,
            credential: StorageCredential::S3 {
                access_key_id: SecretString::new("AKIAUPSTREAMVENDED01"),
                secret_access_key: SecretString::new("upstream-vended-secret"),
                session_token: None,
            },
            expires_at: None,
            settings: BTreeMap::from([
                ("s3.endpoint".to_owned(), format!("http://{}", self.addr)),
                ("s3.region".to_owned(), "us-east-1".to_owned()),
            ]),
        };
        UpstreamFiles::new(Some(vended), true)
    }
}

/// Serves the requests of one (keep-alive) connection.
async fn serve(
    mut sock: tokio::net::TcpStream,
    objects: Arc<HashMap<String, Vec<u8>>>,
    hits: Arc<Mutex<HashMap<String, usize>>>,
) {
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 8192];
    loop {
        let end = loop {
            if let Some(i) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        };
        let head = String::from_utf8_lossy(&seen[..end]).into_owned();
        seen.drain(..end);
        let path = head
            .split_whitespace()
            .nth(1)
            .unwrap_or("/")
            .split('?')
            .next()
            .unwrap_or("/")
            .to_owned();
        *hits.lock().unwrap().entry(path.clone()).or_default() += 1;
        let (status, body): (&str, &[u8]) = match objects.get(&path) {
            Some(b) => ("200 OK", b),
            None => ("404 Not Found", b"<Error><Code>NoSuchKey</Code></Error>"),
        };
        let header = format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nETag: \"e1\"\r\n\
             Last-Modified: Thu, 01 Jan 2026 00:00:00 GMT\r\n\r\n",
            body.len()
        );
        if sock.write_all(header.as_bytes()).await.is_err() || sock.write_all(body).await.is_err() {
            return;
        }
    }
}

/// The table's metadata, its current snapshot reading the manifest list at `list`.
fn metadata(list: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "format-version": 2,
        "table-uuid": "5a7b1c9e-0000-4000-8000-0000000000ab",
        "location": s3(""),
        "last-sequence-number": 1,
        "last-updated-ms": 1_772_366_400_000_i64,
        "last-column-id": 1,
        "current-schema-id": 0,
        "schemas": [{"type": "struct", "schema-id": 0,
            "fields": [{"id": 1, "name": "id", "required": false, "type": "long"}]}],
        "default-spec-id": 0,
        "partition-specs": [{"spec-id": 0, "fields": []}],
        "last-partition-id": 999,
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": {},
        "current-snapshot-id": 1,
        "snapshots": [{"snapshot-id": 1, "sequence-number": 1,
            "timestamp-ms": 1_772_366_400_000_i64, "manifest-list": list,
            "summary": {"operation": "append"}, "schema-id": 0}],
        "snapshot-log": [],
        "metadata-log": []
    }))
    .expect("metadata")
}

fn key(location: &str) -> String {
    location.trim_start_matches("s3:/").to_owned()
}

/// A zigzag varint (Avro `long`).
fn long(out: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    loop {
        let b = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// A manifest list of about 1 MB: one deflate block of one entry that inflates to `mib` MiB
/// of zeros (one compressed MiB repeated, each copy standing alone after a full flush).
fn bomb_list(mib: usize) -> Vec<u8> {
    let mut c = flate2::Compress::new(flate2::Compression::best(), false);
    let mut one = Vec::with_capacity(4096);
    c.compress_vec(
        &vec![0u8; 1024 * 1024],
        &mut one,
        flate2::FlushCompress::Full,
    )
    .expect("deflate");
    let mut block = Vec::with_capacity(one.len() * mib + 2);
    for _ in 0..mib {
        block.extend_from_slice(&one);
    }
    block.extend_from_slice(&[0x03, 0x00]);

    let schema =
        br#"{"type":"record","name":"manifest_file","fields":[{"name":"x","type":"long"}]}"#;
    let mut out = b"Obj\x01".to_vec();
    long(&mut out, 2);
    for (k, v) in [
        (&b"avro.schema"[..], &schema[..]),
        (b"avro.codec", b"deflate"),
    ] {
        long(&mut out, k.len() as i64);
        out.extend_from_slice(k);
        long(&mut out, v.len() as i64);
        out.extend_from_slice(v);
    }
    long(&mut out, 0);
    let sync = [0x5au8; 16];
    out.extend_from_slice(&sync);
    long(&mut out, 1);
    long(&mut out, block.len() as i64);
    out.extend_from_slice(&block);
    out.extend_from_slice(&sync);
    out
}

/// The variable that makes a `*_child` test do its work (it passes trivially otherwise).
const CHILD: &str = "FLOTILLA_TEST_CHILD";

/// Runs the test `test` of this binary in a child process limited to 1 GiB of address
/// space; answers whether it passed.
fn child_under_memory_limit(test: &str) -> (bool, String) {
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("prlimit")
        .arg("--as=1073741824")
        .arg("--")
        .arg(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .expect("prlimit runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let passed = out.status.success() && stdout.contains("1 passed");
    (
        passed,
        format!(
            "{}:\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn a_manifest_list_that_inflates_to_a_gib_is_refused_within_a_gib_of_address_space() {
    let (passed, out) = child_under_memory_limit("bomb_list_child");
    assert!(passed, "the child did not survive the bomb: {out}");
}

#[tokio::test]
async fn bomb_list_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let list = s3("metadata/snap-1.avro");
    let bomb = bomb_list(1024);
    assert!(bomb.len() < 1_200_000, "{}", bomb.len());
    let upstream = Upstream::start(HashMap::from([
        (key(&s3("metadata/v1.metadata.json")), metadata(&list)),
        (key(&list), bomb),
    ]))
    .await;
    let budget = InflateBudget::default();
    let e = read_snapshot(
        &upstream.files(),
        &s3("metadata/v1.metadata.json"),
        1000,
        &budget,
    )
    .await
    .err()
    .expect("the bomb is refused");
    assert_eq!(e.code(), Some(TOO_LARGE), "{e}");
    assert!(
        matches!(&e, ReadError::TooLarge { location, .. } if *location == list),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .starts_with("UPSTREAM_OBJECT_TOO_LARGE: s3://"),
        "{e}"
    );
    assert_eq!(upstream.hits("metadata/snap-1.avro"), 1);
}

/// A real manifest of `files` data files and a manifest list naming it `times` times, both
/// written by the iceberg crate; answers (manifest, list) bytes.
async fn manifest_named(times: usize, files: usize, manifest_location: &str) -> (Vec<u8>, Vec<u8>) {
    let io = FileIO::new_with_memory();
    let schema = Schema::builder()
        .with_fields(vec![
            NestedField::optional(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
        ])
        .build()
        .unwrap();
    let mut w = ManifestWriterBuilder::new(
        io.new_output("memory:///m0.avro").unwrap(),
        Some(1),
        schema.into(),
        PartitionSpec::unpartition_spec(),
    )
    .build_v2_data();
    for i in 0..files {
        let f = DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_format(DataFileFormat::Parquet)
            .file_path(s3(&format!("data/{i}.parquet")))
            .file_size_in_bytes(1024)
            .record_count(10)
            .partition_spec_id(0)
            .partition(Struct::empty())
            .build()
            .unwrap();
        w.add_file(f, 1).unwrap();
    }
    let mut mf = w.write_manifest_file().await.unwrap();
    mf.manifest_path = manifest_location.to_owned();
    let manifest = io
        .new_input("memory:///m0.avro")
        .unwrap()
        .read()
        .await
        .unwrap();
    let mut lw = ManifestListWriter::v2(
        io.new_output("memory:///snap.avro")
            .unwrap()
            .writer()
            .await
            .unwrap(),
        1,
        None,
        1,
    );
    lw.add_manifests(std::iter::repeat_n(mf, times)).unwrap();
    lw.close().await.unwrap();
    let list = io
        .new_input("memory:///snap.avro")
        .unwrap()
        .read()
        .await
        .unwrap();
    (manifest.to_vec(), list.to_vec())
}

#[tokio::test]
async fn a_manifest_named_twenty_thousand_times_is_fetched_once() {
    let list = s3("metadata/snap-1.avro");
    let manifest = s3("metadata/m0.avro");
    let (m, l) = manifest_named(20_000, 3, &manifest).await;
    let upstream = Upstream::start(HashMap::from([
        (key(&s3("metadata/v1.metadata.json")), metadata(&list)),
        (key(&list), l),
        (key(&manifest), m),
    ]))
    .await;
    let read = read_snapshot(
        &upstream.files(),
        &s3("metadata/v1.metadata.json"),
        1000,
        &InflateBudget::default(),
    )
    .await;
    // (Read once per naming, the repeats would pass the 1,000 files allowed after 334.)
    assert_eq!(upstream.hits("metadata/m0.avro"), 1);
    let snap = read.expect("read");
    // Its files once, not 20,000 times.
    assert_eq!(snap.files.len(), 3);
}

#[tokio::test]
async fn a_snapshot_naming_more_than_ten_thousand_distinct_manifests_is_refused() {
    let list = s3("metadata/snap-1.avro");
    let (_, one) = manifest_named(1, 1, &s3("metadata/m0.avro")).await;
    // 10,001 distinct manifest paths: the list of one entry, rewritten through the crate.
    let parsed =
        iceberg::spec::ManifestList::parse_with_version(&one, iceberg::spec::FormatVersion::V2)
            .unwrap();
    let mf = parsed.entries()[0].clone();
    let io = FileIO::new_with_memory();
    let mut lw = ManifestListWriter::v2(
        io.new_output("memory:///many.avro")
            .unwrap()
            .writer()
            .await
            .unwrap(),
        1,
        None,
        1,
    );
    lw.add_manifests((0..10_001).map(|i| {
        let mut m = mf.clone();
        m.manifest_path = s3(&format!("metadata/m{i}.avro"));
        m
    }))
    .unwrap();
    lw.close().await.unwrap();
    let many = io
        .new_input("memory:///many.avro")
        .unwrap()
        .read()
        .await
        .unwrap();
    let upstream = Upstream::start(HashMap::from([
        (key(&s3("metadata/v1.metadata.json")), metadata(&list)),
        (key(&list), many.to_vec()),
    ]))
    .await;
    let e = read_snapshot(
        &upstream.files(),
        &s3("metadata/v1.metadata.json"),
        1000,
        &InflateBudget::default(),
    )
    .await
    .err()
    .expect("refused");
    assert_eq!(e.code(), Some(TOO_LARGE), "{e}");
    assert!(
        matches!(&e, ReadError::TooLarge { location, message } if *location == list && message.contains("10001 distinct manifests")),
        "{e:?}"
    );
    // Refused from the list alone: no manifest was fetched.
    assert_eq!(upstream.hits("metadata/m0.avro"), 0);
}

/// A real manifest (one data file whose `column_sizes` holds one item) and a manifest list
/// naming it at `manifest_location`, both written by the iceberg crate; then the manifest
/// rewritten so that its one entry claims a `column_sizes` of `items` items (its header
/// kept, its block re-encoded and deflated). Answers (manifest, list) bytes.
async fn manifest_claiming_column_sizes(items: i64, manifest_location: &str) -> (Vec<u8>, Vec<u8>) {
    const MARK: i64 = 123_456_789_012_345;
    let io = FileIO::new_with_memory();
    let schema = Schema::builder()
        .with_fields(vec![
            NestedField::optional(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
        ])
        .build()
        .unwrap();
    let mut w = ManifestWriterBuilder::new(
        io.new_output("memory:///m0.avro").unwrap(),
        Some(1),
        schema.into(),
        PartitionSpec::unpartition_spec(),
    )
    .build_v2_data();
    let f = DataFileBuilder::default()
        .content(DataContentType::Data)
        .file_format(DataFileFormat::Parquet)
        .file_path(s3("data/0.parquet"))
        .file_size_in_bytes(1024)
        .record_count(10)
        .partition_spec_id(0)
        .partition(Struct::empty())
        .column_sizes(HashMap::from([(1, MARK as u64)]))
        .build()
        .unwrap();
    w.add_file(f, 1).unwrap();
    let mut mf = w.write_manifest_file().await.unwrap();
    mf.manifest_path = manifest_location.to_owned();
    let real = io
        .new_input("memory:///m0.avro")
        .unwrap()
        .read()
        .await
        .unwrap()
        .to_vec();
    let mut lw = ManifestListWriter::v2(
        io.new_output("memory:///snap.avro")
            .unwrap()
            .writer()
            .await
            .unwrap(),
        1,
        None,
        1,
    );
    lw.add_manifests(std::iter::once(mf)).unwrap();
    lw.close().await.unwrap();
    let list = io
        .new_input("memory:///snap.avro")
        .unwrap()
        .read()
        .await
        .unwrap()
        .to_vec();

    // The entry, encoded without a codec; its `column_sizes` is the one block of one item
    // (key 1, value MARK) then the end: the block's count is made to claim `items`.
    let reader = apache_avro::Reader::new(&real[..]).unwrap();
    let writer_schema = reader.writer_schema().clone();
    let entries: Vec<_> = reader.map(Result::unwrap).collect();
    assert_eq!(entries.len(), 1);
    let entry = apache_avro::to_avro_datum(&writer_schema, entries[0].clone()).unwrap();
    let mut item = vec![0x02, 0x02];
    long(&mut item, MARK);
    item.push(0x00);
    let at = entry
        .windows(item.len())
        .position(|w| w == item.as_slice())
        .expect("the column_sizes item");
    let mut patched = entry[..at].to_vec();
    long(&mut patched, items);
    patched.extend_from_slice(&entry[at + 1..]);

    // The real header (it ends with the sync marker, which also ends the file), then the one
    // block, deflated if the header's codec says so.
    let sync = &real[real.len() - 16..];
    let header_end = real
        .windows(16)
        .position(|w| w == sync)
        .expect("the header's sync marker")
        + 16;
    let deflate = real[..header_end]
        .windows(b"deflate".len())
        .any(|w| w == b"deflate");
    let block = if deflate {
        let mut c = flate2::Compress::new(flate2::Compression::default(), false);
        let mut block = Vec::with_capacity(patched.len() + 64);
        c.compress_vec(&patched, &mut block, flate2::FlushCompress::Finish)
            .expect("deflate");
        block
    } else {
        patched
    };
    let mut out = real[..header_end].to_vec();
    long(&mut out, 1);
    long(&mut out, block.len() as i64);
    out.extend_from_slice(&block);
    out.extend_from_slice(sync);
    (out, list)
}

#[tokio::test]
async fn a_manifest_claiming_a_huge_column_sizes_is_read_as_written_when_it_does_not_lie() {
    // The rewriting itself keeps a manifest the crate reads: claiming the one item it holds.
    let list = s3("metadata/snap-1.avro");
    let manifest = s3("metadata/m0.avro");
    let (m, l) = manifest_claiming_column_sizes(1, &manifest).await;
    let upstream = Upstream::start(HashMap::from([
        (key(&s3("metadata/v1.metadata.json")), metadata(&list)),
        (key(&list), l),
        (key(&manifest), m),
    ]))
    .await;
    let snap = read_snapshot(
        &upstream.files(),
        &s3("metadata/v1.metadata.json"),
        1000,
        &InflateBudget::default(),
    )
    .await
    .expect("read");
    assert_eq!(snap.files.len(), 1);
}

#[test]
fn a_manifest_claiming_a_huge_column_sizes_is_refused_within_a_gib_of_address_space() {
    let (passed, out) = child_under_memory_limit("huge_column_sizes_child");
    assert!(passed, "the child did not survive the manifest: {out}");
}

#[tokio::test]
async fn huge_column_sizes_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let list = s3("metadata/snap-1.avro");
    let manifest = s3("metadata/m0.avro");
    let (m, l) = manifest_claiming_column_sizes(500_000_000, &manifest).await;
    let upstream = Upstream::start(HashMap::from([
        (key(&s3("metadata/v1.metadata.json")), metadata(&list)),
        (key(&list), l),
        (key(&manifest), m),
    ]))
    .await;
    let e = read_snapshot(
        &upstream.files(),
        &s3("metadata/v1.metadata.json"),
        1000,
        &InflateBudget::default(),
    )
    .await
    .err()
    .expect("the manifest is refused");
    assert_eq!(e.code(), Some(TOO_LARGE), "{e}");
    assert!(
        matches!(&e, ReadError::TooLarge { location, message }
            if *location == manifest && message.contains("500000000 items")),
        "{e:?}"
    );
}
