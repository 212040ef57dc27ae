//! "Fuzz smoke": the cargo-fuzz targets of `fuzz/` (which need nightly) run here as proptest
//! properties on stable, a few thousand cases each: random bytes and structured mutations of
//! valid inputs. Each property fails on a panic or on a refusal that is not a 4xx (the entry
//! points in `flotilla_core::fuzzing` assert that).

use flotilla_core::fuzzing;
use proptest::prelude::*;

/// Valid bodies to mutate: every create and patch shape the API parses.
fn seeds() -> Vec<Vec<u8>> {
    [
        r#"{"id": "acme", "display_name": "Acme"}"#,
        r#"{"display_name": "cat", "description": "d", "properties": {"k": "v"}}"#,
        r#"{"path": ["a", "b"], "properties": {}}"#,
        r#"{"name": "t", "schema": {"type": "struct", "fields": [{"id": 1, "name": "id", "required": true, "type": "long"}]}, "format": "ICEBERG"}"#,
        r#"{"name": "v", "schema": {"type": "struct", "fields": []}, "definitions": [{"dialect": "spark", "sql": "SELECT 1"}], "default_namespace": ["a"]}"#,
        r#"{"name": "t2", "namespace": ["b"], "metadata_location": null}"#,
        r#"{"display_name": "i", "type": "ICEBERG_REST", "uri": "https://c.example.com/api", "properties": {"warehouse": "w"}, "authentication": {"type": "OAUTH_CLIENT_CREDENTIALS", "client_id": "c", "token_uri": "https://c.example.com/token"}, "credentials": {"client_secret": "s"}}"#,
        r#"{"authentication": {"type": "BEARER"}, "credentials": {"token": "t"}}"#,
        r#"{"display_name": "o", "integration_id": "abc", "catalog_id": "def", "include_namespaces": [["crm"]], "exclude_namespaces": [["crm", "tmp"]], "refresh_interval_secs": 3600, "paused": false}"#,
        r#"{"acknowledge_writer_rollout": true, "acknowledge_quiescent_writes": true}"#,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Duplicate(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let tokens = prop::sample::select(vec![
        b"{".to_vec(),
        b"}".to_vec(),
        b"[".to_vec(),
        b"\"".to_vec(),
        b"\\u0000".to_vec(),
        b"\\ud800".to_vec(),
        b"1e999999".to_vec(),
        b"-0".to_vec(),
        b"null".to_vec(),
        b",\"x\":1".to_vec(),
        "\u{202e}".as_bytes().to_vec(),
        vec![0xff, 0xfe],
        b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[".to_vec(),
    ]);
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), tokens).prop_map(|(i, t)| Mutation::Insert(i, t)),
        (any::<usize>(), 1usize..16).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (any::<usize>(), 1usize..64).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
    ]
}

fn apply(mut data: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
    for m in muts {
        let len = data.len().max(1);
        match m {
            Mutation::Flip(i, b) => {
                if !data.is_empty() {
                    let i = i % data.len();
                    data[i] ^= b;
                }
            }
            Mutation::Insert(i, t) => {
                let i = i % (data.len() + 1);
                data.splice(i..i, t.iter().copied());
            }
            Mutation::Delete(i, n) => {
                let i = i % len;
                let end = (i + n).min(data.len());
                if i < end {
                    data.drain(i..end);
                }
            }
            Mutation::Duplicate(i, n) => {
                let i = i % len;
                let end = (i + n).min(data.len());
                if i < end {
                    let chunk: Vec<u8> = data[i..end].to_vec();
                    data.splice(end..end, chunk);
                }
            }
        }
    }
    data
}

fn mutated() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(seeds()),
        prop::collection::vec(mutation(), 0..6),
    )
        .prop_map(|(s, m)| apply(s, &m))
}

const CASES: u32 = 3000;

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn request_bodies_random_bytes(data in prop::collection::vec(any::<u8>(), 0..512)) {
        fuzzing::request_bodies(&data);
    }

    #[test]
    fn request_bodies_mutated(data in mutated()) {
        fuzzing::request_bodies(&data);
    }

    #[test]
    fn namespace_segments(segs in prop::collection::vec("[a-z\u{1f}\u{0}\u{202e}é́ .%]{0,12}", 0..5)) {
        fuzzing::namespace_segment(segs.join("\u{1f}").as_bytes());
    }

    #[test]
    fn namespace_segment_random_bytes(data in prop::collection::vec(any::<u8>(), 0..256)) {
        fuzzing::namespace_segment(&data);
    }

    #[test]
    fn page_tokens_random(data in prop::collection::vec(any::<u8>(), 0..256)) {
        fuzzing::page_tokens(&data);
    }

    #[test]
    fn page_tokens_base64_of_json(s in "\\{\"[skbpuhk]\":(\"[A-Za-z#0-9|]{0,20}\"|[0-9]{1,20}|-1|null)(,\"[skbpuhk]\":(\"[A-Za-z#0-9]{0,20}\"|[0-9]{1,20}|null)){0,5}\\}") {
        use base64::Engine;
        let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s.as_bytes());
        fuzzing::page_tokens(token.as_bytes());
    }

    #[test]
    fn parqdb_metadata_random(data in prop::collection::vec(any::<u8>(), 0..1024)) {
        fuzzing::parqdb_metadata(&data);
    }

    #[test]
    fn parqdb_metadata_mutated(muts in prop::collection::vec(mutation(), 0..8), which in 0usize..64) {
        let fixtures = parqdb_fixtures();
        prop_assert!(!fixtures.is_empty(), "ParqDB fixtures not found in shared/parqdb/fixtures");
        {
            let base = fixtures[which % fixtures.len()].clone();
            fuzzing::parqdb_metadata(&apply(base, &muts));
        }
    }
}

/// The project's ParqDB metadata fixtures (valid, invalid and successor documents), as the
/// parqdb crate's tests read them.
fn parqdb_fixtures() -> Vec<Vec<u8>> {
    static FIXTURES: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    FIXTURES
        .get_or_init(|| {
            let mut out = Vec::new();
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../parqdb/fixtures");
            let mut stack = vec![root];
            while let Some(dir) = stack.pop() {
                let Ok(entries) = std::fs::read_dir(&dir) else {
                    continue;
                };
                for e in entries.flatten() {
                    let p = e.path();
                    if p.is_dir() {
                        stack.push(p);
                    } else if p.extension().is_some_and(|x| x == "json")
                        && out.len() < 64
                        && let Ok(b) = std::fs::read(&p)
                    {
                        out.push(b);
                    }
                }
            }
            out
        })
        .clone()
}
