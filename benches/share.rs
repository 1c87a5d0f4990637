//! Share groups (KIP-932): records per second and CPU per record of our share consumer
//! (examples/share_consumer.rs, release build) against the Java `KafkaShareConsumer`
//! (tests/kafka/SharePeer.java, kafka-clients of the broker's release), side by side in one run
//! on the same broker and topic.
//!
//! ```text
//! tests/kafka/with-broker.sh cargo bench --bench share             # 200000 records, 3 rounds
//! tests/kafka/with-broker.sh cargo bench --bench share -- 500000 5  # records, rounds
//! ```
//!
//! Against the broker at `$KAFKA_BOOTSTRAP` (or the one tests/kafka/broker.sh started): one
//! topic of 4 partitions with the records (100-byte values, uncompressed batches of 1,000);
//! then, `rounds` times in turns, each consumer alone in a fresh share group
//! (`share.auto.offset.reset=earliest`) with implicit acknowledgement (every record handed over
//! is accepted by the next fetch) and the default fetch settings (500 records per fetch),
//! until it has the records. Each reports the time from its first record to its last and its
//! process's CPU time over the same span (ours from `/proc/self/stat`, the JVM's from
//! `OperatingSystemMXBean`, both in 10 ms steps); joining, JVM start and closing are left
//! out. Absolute figures on a shared machine are noise; the ratios are the result.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../examples/common/fetch.rs"]
mod fetch;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::share_peer::SharePeer;
use consumer_membership::machine::TopicPartition;

const PARTITIONS: i32 = 4;

/// One consumer's run: records, seconds from the first to the last, CPU seconds over that span.
#[derive(Debug, Clone, Copy)]
struct Run {
    records: u64,
    wall: f64,
    cpu: f64,
}

impl Run {
    fn rate(&self) -> f64 {
        self.records as f64 / self.wall.max(1e-9)
    }

    fn cpu_us_per_record(&self) -> f64 {
        self.cpu * 1e6 / self.records.max(1) as f64
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let records: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let rounds: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    let Some(bootstrap) = common::bootstrap() else {
        eprintln!("no broker: run through tests/kafka/with-broker.sh, or set KAFKA_BOOTSTRAP");
        std::process::exit(1)
    };
    let topic = common::unique("share-bench");
    produce(&bootstrap, &topic, records).await;
    let ours_binary = release_example();
    println!("share bench: {records} records on {PARTITIONS} partitions, {rounds} rounds each");
    let (mut ours, mut java) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let o = run_ours(&ours_binary, &bootstrap, &topic, records).await;
        println!(
            "round {round} ours: {:>9.0} records/s, {:.2} us CPU per record ({} records in {:.3} s)",
            o.rate(),
            o.cpu_us_per_record(),
            o.records,
            o.wall
        );
        ours.push(o);
        let j = run_java(&bootstrap, &topic, records).await;
        println!(
            "round {round} java: {:>9.0} records/s, {:.2} us CPU per record ({} records in {:.3} s)",
            j.rate(),
            j.cpu_us_per_record(),
            j.records,
            j.wall
        );
        java.push(j);
    }
    let median = |runs: &[Run], f: fn(&Run) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (o_rate, j_rate) = (median(&ours, Run::rate), median(&java, Run::rate));
    let (o_cpu, j_cpu) = (
        median(&ours, Run::cpu_us_per_record),
        median(&java, Run::cpu_us_per_record),
    );
    println!(
        "median: ours {o_rate:.0} records/s, java {j_rate:.0} records/s: ours/java throughput {:.2}",
        o_rate / j_rate
    );
    println!(
        "median: ours {o_cpu:.2} us CPU per record, java {j_cpu:.2}: java/ours CPU per record {:.2}",
        j_cpu / o_cpu.max(1e-9)
    );
}

/// Creates the topic and produces `n` records spread over its partitions.
async fn produce(bootstrap: &str, topic: &str, n: usize) {
    let (t, config) = common::transport(bootstrap);
    common::create_topic(&*t, topic, PARTITIONS).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let value = Bytes::from(vec![b'x'; 100]);
    let per = n.div_ceil(PARTITIONS as usize);
    for p in 0..PARTITIONS {
        let tp = TopicPartition::new(topic, p);
        let mut left = per.min(n - per * p as usize);
        while left > 0 {
            let k = left.min(1000);
            let batch: Vec<_> = (0..k).map(|_| (None, Some(value.clone()))).collect();
            fetch::produce_settling(&*t, &tp, &batch, config.request_timeout, deadline)
                .await
                .unwrap_or_else(|e| panic!("produce to {tp}: {e}"));
            left -= k;
        }
    }
}

/// examples/share_consumer.rs, built in release.
fn release_example() -> std::path::PathBuf {
    let status = Command::new(env!("CARGO"))
        .args(["build", "--release", "--example", "share_consumer"])
        .status()
        .expect("cargo build");
    assert!(status.success());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or(dir.join("target"), Into::into);
    target.join("release/examples/share_consumer")
}

async fn run_ours(binary: &std::path::Path, bootstrap: &str, topic: &str, n: usize) -> Run {
    let group = common::unique("share-bench-ours");
    common::set_group_configs(
        bootstrap,
        &group,
        &[("share.auto.offset.reset", "earliest")],
    )
    .await;
    let n = n.to_string();
    let args = [
        "--bootstrap",
        bootstrap,
        "--group",
        &group,
        "--topic",
        topic,
    ];
    let out = tokio::task::spawn_blocking({
        let binary = binary.to_owned();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        move || {
            let mut child = Command::new(binary)
                .args(args)
                .args(["--implicit", "--quiet", "--json", "--max-records", &n])
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn share_consumer");
            let stdout = child.stdout.take().expect("stdout");
            let stats = BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(&l).ok())
                .find(|v| v["event"] == "stats");
            let _ = child.wait();
            stats.expect("the example's stats line")
        }
    })
    .await
    .expect("run ours");
    Run {
        records: out["records"].as_u64().unwrap_or(0),
        wall: out["first_to_last_s"].as_f64().unwrap_or(0.0),
        cpu: out["cpu_first_to_last_s"].as_f64().unwrap_or(0.0),
    }
}

async fn run_java(bootstrap: &str, topic: &str, n: usize) -> Run {
    let group = common::unique("share-bench-java");
    common::set_group_configs(
        bootstrap,
        &group,
        &[("share.auto.offset.reset", "earliest")],
    )
    .await;
    let peer = SharePeer::builder(bootstrap, topic, &group)
        .bench(n as u64)
        .spawn();
    let done = peer
        .wait_for(Duration::from_secs(300), |p| p.bench.is_some())
        .await;
    assert!(done, "{}", peer.report("java bench did not finish"));
    let r = peer.bench_result().expect("bench result");
    let _ = peer.close_async().await;
    Run {
        records: r.records,
        wall: r.elapsed.as_secs_f64(),
        cpu: r.cpu.as_secs_f64(),
    }
}
