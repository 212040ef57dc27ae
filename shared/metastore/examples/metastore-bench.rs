//! Metastore benchmark (not a test): ops/s and p50/p99 latency of point reads, 1- and
//! 10-operation transactions and a 10,000-item prefix scan, on redb (file, fsync per commit),
//! redb in memory, and DynamoDB on moto when `FLOTILLA_MOTO_ENDPOINT` is set.
//!
//! ```text
//! cargo run --profile bench-fast -p flotilla-metastore --example metastore-bench
//! ```
//!
//! Prints a table and writes `bench-results/metastore.json` at the repository root (or the
//! path in `FLOTILLA_BENCH_OUT`). One client, requests issued back to back.

use std::time::{Duration, Instant};

use flotilla_metastore::dynamo::{self, DynamoMetastore};
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_metastore::{Consistency, Key, Metastore, Op, Query, Transaction, query_all};

const SCAN_ITEMS: usize = 10_000;

struct Sizes {
    reads: usize,
    tx1: usize,
    tx10: usize,
    scans: usize,
}

struct Measured {
    backend: String,
    workload: &'static str,
    samples: Vec<Duration>,
    items_per_op: usize,
}

impl Measured {
    fn total(&self) -> Duration {
        self.samples.iter().sum()
    }

    fn ops_per_sec(&self) -> f64 {
        self.samples.len() as f64 / self.total().as_secs_f64().max(1e-9)
    }

    fn percentile_us(&self, p: f64) -> f64 {
        let mut sorted = self.samples.clone();
        sorted.sort();
        let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
        sorted.get(index).map_or(0.0, |d| d.as_secs_f64() * 1e6)
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "backend": self.backend,
            "workload": self.workload,
            "ops": self.samples.len(),
            "items_per_op": self.items_per_op,
            "ops_per_sec": round1(self.ops_per_sec()),
            "items_per_sec": round1(self.ops_per_sec() * self.items_per_op as f64),
            "p50_us": round1(self.percentile_us(0.50)),
            "p99_us": round1(self.percentile_us(0.99)),
        })
    }
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

type BenchError = Box<dyn std::error::Error>;

async fn timed<F, Fut>(n: usize, mut op: F) -> Result<Vec<Duration>, BenchError>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), flotilla_metastore::MetastoreError>>,
{
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let start = Instant::now();
        op(i).await?;
        samples.push(start.elapsed());
    }
    Ok(samples)
}

/// Where the workloads run. redb: one store for all of them (they use different partitions).
/// moto: a fresh table per workload, because moto deep-copies the whole table once per
/// operation of every transaction (its rollback strategy); sharing a table would make each
/// workload pay for the items the previous ones left behind.
enum Backend {
    Redb(RedbMetastore),
    Moto(aws_sdk_dynamodb::Client),
}

impl Backend {
    async fn store(&self, workload: &str) -> Result<Box<dyn Metastore>, BenchError> {
        Ok(match self {
            Backend::Redb(store) => Box::new(store.clone()),
            Backend::Moto(client) => {
                let table = moto_table(workload);
                DynamoMetastore::create_table(client, &table).await?;
                Box::new(DynamoMetastore::new(client.clone(), table))
            }
        })
    }

    /// Writes `n` items `item/{i:06}` into partition `pk`. On moto this uses BatchWriteItem
    /// with the backend's attribute layout (version 1), since loading 10,000 items through
    /// transactions is quadratic there; it is set-up, not what is measured.
    async fn load(
        &self,
        store: &dyn Metastore,
        workload: &str,
        pk: &str,
        n: usize,
        body: &[u8],
    ) -> Result<(), BenchError> {
        use aws_sdk_dynamodb::primitives::Blob;
        use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
        match self {
            Backend::Redb(_) => {
                for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
                    let mut tx = Transaction::new();
                    for i in chunk {
                        tx.push(Op::put(Key::new(pk, format!("item/{i:06}")), body.to_vec()));
                    }
                    store.transact(tx).await?;
                }
            }
            Backend::Moto(client) => {
                let table = moto_table(workload);
                for chunk in (0..n).collect::<Vec<_>>().chunks(25) {
                    let mut requests = Vec::with_capacity(chunk.len());
                    for i in chunk {
                        let item = std::collections::HashMap::from([
                            ("pk".to_string(), AttributeValue::S(pk.to_string())),
                            ("sk".to_string(), AttributeValue::S(format!("item/{i:06}"))),
                            ("v".to_string(), AttributeValue::N("1".into())),
                            ("b".to_string(), AttributeValue::B(Blob::new(body.to_vec()))),
                        ]);
                        let put = PutRequest::builder().set_item(Some(item)).build()?;
                        requests.push(WriteRequest::builder().put_request(put).build());
                    }
                    let mut pending = Some(requests);
                    while let Some(batch) = pending.take() {
                        let out = client
                            .batch_write_item()
                            .request_items(table.clone(), batch)
                            .send()
                            .await?;
                        pending = out
                            .unprocessed_items()
                            .and_then(|u| u.get(&table))
                            .filter(|r| !r.is_empty())
                            .cloned();
                    }
                }
            }
        }
        Ok(())
    }
}

fn moto_table(workload: &str) -> String {
    format!(
        "bench-{}-{}",
        std::process::id(),
        workload.replace('_', "-")
    )
}

async fn run(name: &str, backend: &Backend, sizes: &Sizes) -> Result<Vec<Measured>, BenchError> {
    let mut out = Vec::new();
    let body = vec![0x5a_u8; 512];
    let measured = |workload, samples, items_per_op| Measured {
        backend: name.to_string(),
        workload,
        samples,
        items_per_op,
    };

    let workload = "point_read_strong";
    let store = backend.store(workload).await?;
    let seed = 1000;
    backend
        .load(&*store, workload, "bench-read", seed, &body)
        .await?;
    let s = &*store;
    let samples = timed(sizes.reads, |i| async move {
        let key = Key::new("bench-read", format!("item/{:06}", (i * 7919) % seed));
        match s.get(&key, Consistency::Strong).await? {
            Some(_) => Ok(()),
            None => Err(flotilla_metastore::MetastoreError::Backend(
                "seeded item missing".into(),
            )),
        }
    })
    .await?;
    out.push(measured(workload, samples, 1));

    let workload = "transact_1_op";
    let store = backend.store(workload).await?;
    let s = &*store;
    let samples = timed(sizes.tx1, |i| {
        let body = body.clone();
        async move {
            let op = Op::put(Key::new("bench-tx1", format!("item/{i:06}")), body);
            s.transact(Transaction::new().with(op)).await
        }
    })
    .await?;
    out.push(measured(workload, samples, 1));

    let workload = "transact_10_ops";
    let store = backend.store(workload).await?;
    let s = &*store;
    let samples = timed(sizes.tx10, |i| {
        let body = body.clone();
        async move {
            let mut tx = Transaction::new();
            for j in 0..10 {
                tx.push(Op::put(
                    Key::new("bench-tx10", format!("item/{i:06}/{j:02}")),
                    body.clone(),
                ));
            }
            s.transact(tx).await
        }
    })
    .await?;
    out.push(measured(workload, samples, 10));

    let workload = "prefix_scan_10k";
    let store = backend.store(workload).await?;
    backend
        .load(&*store, workload, "bench-scan", SCAN_ITEMS, &body)
        .await?;
    let s = &*store;
    let samples = timed(sizes.scans, |_| async move {
        let items = query_all(s, Query::new("bench-scan", "item/", Consistency::Strong)).await?;
        if items.len() != SCAN_ITEMS {
            return Err(flotilla_metastore::MetastoreError::Backend(format!(
                "scan returned {} items",
                items.len()
            )));
        }
        Ok(())
    })
    .await?;
    out.push(measured(workload, samples, SCAN_ITEMS));
    Ok(out)
}

fn header() {
    println!(
        "{:<14} {:<18} {:>7} {:>12} {:>12} {:>12}",
        "backend", "workload", "ops", "ops/s", "p50 µs", "p99 µs"
    );
}

fn print(measured: Vec<Measured>) -> Vec<Measured> {
    for m in &measured {
        println!(
            "{:<14} {:<18} {:>7} {:>12.1} {:>12.1} {:>12.1}",
            m.backend,
            m.workload,
            m.samples.len(),
            m.ops_per_sec(),
            m.percentile_us(0.5),
            m.percentile_us(0.99)
        );
    }
    measured
}

#[tokio::main]
async fn main() -> Result<(), BenchError> {
    let mut results = Vec::new();
    let local = Sizes {
        reads: 20_000,
        tx1: 2_000,
        tx10: 1_000,
        scans: 20,
    };

    let mut errors = Vec::new();
    header();
    let dir = tempfile::tempdir()?;
    let file = Backend::Redb(RedbMetastore::open(dir.path().join("bench.redb"))?);
    results.extend(print(run("redb-file", &file, &local).await?));
    let memory = Backend::Redb(RedbMetastore::in_memory()?);
    results.extend(print(run("redb-memory", &memory, &local).await?));

    match std::env::var("FLOTILLA_MOTO_ENDPOINT") {
        Ok(endpoint) if !endpoint.is_empty() => {
            let moto = Backend::Moto(dynamo::connect(Some(&endpoint)).await);
            let remote = Sizes {
                reads: 1_000,
                tx1: 300,
                tx10: 200,
                scans: 5,
            };
            // The emulator is a reference point, not the subject: report its failure and go on.
            match run("dynamodb-moto", &moto, &remote).await {
                Ok(measured) => results.extend(print(measured)),
                Err(e) => {
                    eprintln!("dynamodb-moto: {e}");
                    errors.push(format!("dynamodb-moto: {e}"));
                }
            }
        }
        _ => eprintln!("FLOTILLA_MOTO_ENDPOINT not set: skipping DynamoDB on moto"),
    }

    let report = serde_json::json!({
        "generated_at_unix": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs(),
        "command": "cargo run --profile bench-fast -p flotilla-metastore --example metastore-bench",
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "body_bytes": 512,
        "results": results.iter().map(Measured::json).collect::<Vec<_>>(),
        "errors": errors,
    });
    let out = match std::env::var("FLOTILLA_BENCH_OUT") {
        Ok(path) if !path.is_empty() => std::path::PathBuf::from(path),
        _ => std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../bench-results/metastore.json"),
    };
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&out, serde_json::to_string_pretty(&report)? + "\n")?;
    println!("wrote {}", out.display());
    Ok(())
}
