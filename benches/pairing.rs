//! Records per second of the two example consumers on the same topic, side by side in one run:
//! examples/rskafka_consumer.rs (rskafka's `PartitionClient` fetches, this crate for the group)
//! against examples/consumer.rs (this crate's own Fetch over its `TcpTransport`); and the
//! membership's share of the CPU and memory of the rskafka consumer.
//!
//! ```text
//! tests/kafka/with-broker.sh cargo bench --bench pairing            # default 200000 records
//! tests/kafka/with-broker.sh cargo bench --bench pairing -- 500000 5  # records, rounds
//! ```
//!
//! What it does, against the broker at `$KAFKA_BOOTSTRAP`:
//! 1. creates a topic of 4 partitions and produces the records to it with rskafka (keyed,
//!    100-byte values, uncompressed batches of 1,000);
//! 2. builds both examples (release) and runs them in turns, `rounds` times each, each run a
//!    fresh group reading the whole topic from the earliest offset with `--quiet` (records
//!    counted, not printed) and `--max-records`: its throughput is the records divided by the
//!    time from its first record to its last, as the example prints it (joining and closing
//!    are left out). The classic protocol, one member per group;
//! 3. the rskafka consumer runs with `--membership-thread`: the membership (member, driver,
//!    its transport's I/O) has a thread of its own named `membership`, so its CPU time is read
//!    apart from the process's (`/proc/PID/task/TID/schedstat`, sampled every 20 ms until the
//!    process exits: the last < 20 ms are missed by both figures);
//! 4. memory: each process's peak RSS (`VmHWM`); and the membership's own heap, measured in
//!    this process with a counting allocator: the live bytes a `GroupMember` with its
//!    `TcpTransport` adds once it has joined the topic's group, committed all four partitions
//!    and heartbeated for 3 s. Its share is that heap against the rskafka consumer's peak RSS.
//!
//! Absolute figures on a shared machine are noise; the ratios are the result.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use consumer_membership::{
    ClientConfig, CloseOptions, CommitOffset, Event, GroupConfig, GroupMember, TcpTransport,
    TopicPartition,
};
use rskafka::client::ClientBuilder;
use rskafka::client::partition::{Compression, UnknownTopicHandling};
use rskafka::record::Record;

/// Counts the live heap bytes of this process.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const PARTITIONS: i32 = 4;
const VALUE_BYTES: usize = 100;
const BATCH: usize = 1_000;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One run of an example.
#[derive(Debug, Default)]
struct Run {
    records: u64,
    /// From its first record to its last, as the example printed it.
    ms: f64,
    /// CPU of the whole process, and of its `membership` thread (ns).
    cpu_ns: u64,
    membership_cpu_ns: u64,
    peak_rss_kib: u64,
}

impl Run {
    fn per_second(&self) -> f64 {
        self.records as f64 / (self.ms / 1e3)
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let records: usize = args.first().map_or(Ok(200_000), |a| a.parse())?;
    let rounds: usize = args.get(1).map_or(Ok(3), |a| a.parse())?;
    let Ok(bootstrap) = std::env::var("KAFKA_BOOTSTRAP") else {
        eprintln!("KAFKA_BOOTSTRAP is not set: run it through tests/kafka/with-broker.sh");
        std::process::exit(2);
    };
    let topic = format!("pairing-bench-{}", std::process::id());
    produce(&bootstrap, &topic, records).await?;
    let [rskafka, own] = build_examples()?;

    let dir = std::env::temp_dir();
    let (mut by_rskafka, mut by_own) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let group = format!("{topic}-rskafka-{round}");
        let props = dir.join(format!("{group}.properties"));
        std::fs::write(
            &props,
            format!(
                "bootstrap.servers={bootstrap}\ngroup.id={group}\nauto.offset.reset=earliest\n"
            ),
        )?;
        let mut cmd = Command::new(&rskafka);
        cmd.arg("--properties")
            .arg(&props)
            .args(["--topic", &topic]);
        cmd.args(["--quiet", "--membership-thread"]);
        cmd.args(["--max-records", &records.to_string()]);
        let run = measure(cmd, "processed ")?;
        std::fs::remove_file(&props).ok();
        println!("round {round}: rskafka_consumer {run:?}");
        by_rskafka.push(run);

        let group = format!("{topic}-own-{round}");
        let mut cmd = Command::new(&own);
        cmd.args([
            "--bootstrap",
            &bootstrap,
            "--group",
            &group,
            "--topic",
            &topic,
        ]);
        cmd.args(["--quiet", "--max-records", &records.to_string()]);
        let run = measure(cmd, "closing: consumed ")?;
        println!("round {round}: consumer {run:?}");
        by_own.push(run);
    }
    let heap = membership_heap(&bootstrap, &topic).await?;

    let median = |runs: &[Run], f: &dyn Fn(&Run) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (rs, ours) = (
        median(&by_rskafka, &Run::per_second),
        median(&by_own, &Run::per_second),
    );
    let cpu_share = median(&by_rskafka, &|r| {
        r.membership_cpu_ns as f64 / r.cpu_ns.max(1) as f64
    });
    let rss = median(&by_rskafka, &|r| r.peak_rss_kib as f64);
    let own_rss = median(&by_own, &|r| r.peak_rss_kib as f64);
    println!();
    println!(
        "{records} records, {PARTITIONS} partitions, {VALUE_BYTES}-byte values; medians of {rounds} rounds"
    );
    println!("rskafka_consumer: {rs:>10.0} records/s, peak RSS {rss:.0} KiB");
    println!("consumer:         {ours:>10.0} records/s, peak RSS {own_rss:.0} KiB");
    println!("ratio rskafka_consumer / consumer: {:.2}", rs / ours);
    println!(
        "membership in rskafka_consumer: {:.2}% of its CPU; heap {:.0} KiB = {:.2}% of its peak RSS",
        cpu_share * 100.0,
        heap as f64 / 1024.0,
        heap as f64 / 1024.0 / rss * 100.0
    );
    println!(
        "{{\"bench\":\"pairing\",\"records\":{records},\"rskafka_per_s\":{rs:.0},\"consumer_per_s\":{ours:.0},\
         \"ratio\":{:.3},\"membership_cpu_share\":{cpu_share:.4},\"membership_heap_bytes\":{heap},\
         \"rskafka_peak_rss_kib\":{rss:.0},\"consumer_peak_rss_kib\":{own_rss:.0}}}",
        rs / ours
    );
    Ok(())
}

/// Creates the topic and writes `records` keyed records round robin over its partitions.
async fn produce(bootstrap: &str, topic: &str, records: usize) -> Result<(), BoxError> {
    let client = ClientBuilder::new(vec![bootstrap.to_owned()])
        .build()
        .await?;
    client
        .controller_client()?
        .create_topic(topic, PARTITIONS, 1, 15_000)
        .await?;
    let value = vec![b'v'; VALUE_BYTES];
    let started = Instant::now();
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    let now = chrono::DateTime::from_timestamp_millis(since_epoch.as_millis() as i64)
        .ok_or("clock out of range")?;
    for p in 0..PARTITIONS {
        let pc = client
            .partition_client(topic, p, UnknownTopicHandling::Retry)
            .await?;
        let mine: Vec<usize> = (0..records)
            .filter(|i| *i % PARTITIONS as usize == p as usize)
            .collect();
        for chunk in mine.chunks(BATCH) {
            let batch = chunk
                .iter()
                .map(|i| Record {
                    key: Some(format!("key-{i}").into_bytes()),
                    value: Some(value.clone()),
                    headers: BTreeMap::new(),
                    timestamp: now,
                })
                .collect();
            pc.produce(batch, Compression::NoCompression).await?;
        }
    }
    println!(
        "produced {records} records to {topic} in {:?}",
        started.elapsed()
    );
    Ok(())
}

/// Builds both examples in this bench's profile; their paths.
fn build_examples() -> Result<[PathBuf; 2], BoxError> {
    let exe = std::env::current_exe()?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("no profile dir")?;
    let mut build = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    build.current_dir(env!("CARGO_MANIFEST_DIR"));
    build.args([
        "build",
        "--example",
        "rskafka_consumer",
        "--example",
        "consumer",
    ]);
    build.args(["--features", "tokio,tls"]);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        // `cargo bench`'s own profile: the dependencies it built for this bench are reused.
        build.args(["--profile", "bench"]);
    }
    if !build.status()?.success() {
        return Err("cargo build --example rskafka_consumer --example consumer failed".into());
    }
    let examples = profile_dir.join("examples");
    Ok([examples.join("rskafka_consumer"), examples.join("consumer")])
}

/// Runs `cmd` to its end, sampling its CPU and RSS; reads records and milliseconds from its
/// line starting with `summary` (`<summary>N records in X ms ...`).
fn measure(mut cmd: Command, summary: &str) -> Result<Run, BoxError> {
    let mut child = cmd.stdout(Stdio::piped()).stdin(Stdio::null()).spawn()?;
    let pid = child.id();
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    let mut run = Run::default();
    let deadline = Instant::now() + Duration::from_secs(600);
    while child.try_wait()?.is_none() {
        if let Some((total, membership)) = cpu(pid) {
            (run.cpu_ns, run.membership_cpu_ns) = (total, membership);
        }
        run.peak_rss_kib = peak_rss(pid).unwrap_or(run.peak_rss_kib);
        if Instant::now() > deadline {
            child.kill()?;
            return Err("an example ran for 10 minutes".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let lines = reader.join().map_err(|_| "stdout reader panicked")?;
    let line = lines
        .iter()
        .find_map(|l| l.strip_prefix(summary))
        .ok_or_else(|| format!("no {summary:?} line in {lines:?}"))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    run.records = words.first().ok_or("no count")?.parse()?;
    run.ms = words.get(3).ok_or("no time")?.parse()?;
    Ok(run)
}

/// The CPU time of every live thread of `pid`, and of its thread named `membership` (ns).
fn cpu(pid: u32) -> Option<(u64, u64)> {
    let (mut total, mut membership) = (0, 0);
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let dir = task.ok()?.path();
        let Ok(stat) = std::fs::read_to_string(dir.join("schedstat")) else {
            continue;
        };
        let ns: u64 = stat.split_whitespace().next()?.parse().ok()?;
        total += ns;
        if std::fs::read_to_string(dir.join("comm")).is_ok_and(|c| c.trim() == "membership") {
            membership += ns;
        }
    }
    Some((total, membership))
}

/// `VmHWM` of `pid` (KiB).
fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Live heap bytes a member with its transport adds once it owns the topic's partitions, has
/// committed each and heartbeated for 3 s.
async fn membership_heap(bootstrap: &str, topic: &str) -> Result<usize, BoxError> {
    let group = format!("{topic}-heap");
    let before = LIVE.load(Ordering::Relaxed);
    let transport = Arc::new(TcpTransport::new(ClientConfig::new(bootstrap)?));
    let mut member = GroupMember::start(transport, GroupConfig::new(group))?;
    member.subscribe([topic.to_owned()]).await?;
    let mut owned = Vec::new();
    while owned.len() < PARTITIONS as usize {
        match member.next_event().await {
            Some(Event::Assigned { owned: now, .. }) => owned = now,
            Some(Event::Fatal(e)) => return Err(e.into()),
            Some(_) => {}
            None => return Err("member stopped".into()),
        }
    }
    let offsets: Vec<CommitOffset> = owned
        .iter()
        .map(|tp: &TopicPartition| CommitOffset::new(tp.clone(), 0))
        .collect();
    member.commit(offsets).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let heap = LIVE.load(Ordering::Relaxed).saturating_sub(before);
    member.close(CloseOptions::Default).await;
    while member.next_event().await.is_some() {}
    Ok(heap)
}
