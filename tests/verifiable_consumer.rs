//! The `verifiable_consumer` example (a drop-in for Kafka's VerifiableConsumer) against a real
//! broker, for both group protocols: 100 records on a 3-partition topic consumed and committed
//! with `--max-messages 100`; 50 more consumed by a second run of the same group, starting
//! exactly at the committed offsets (`--verbose`, so every record is checked); a third run has
//! nothing left to consume and is stopped with SIGTERM.
//!
//! The example is built with `cargo build --example verifiable_consumer` (Cargo has no
//! `CARGO_BIN_EXE_` for examples) and located through Cargo's JSON messages. Its stdout is
//! parsed line by line; its stderr goes to `target/verifiable-consumer/<run>.stderr.log`, and
//! assertion messages quote both.

mod common;
#[path = "../examples/common/fetch.rs"]
mod fetch;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{bootstrap, create_topic, transport, unique};
use consumer_membership::machine::TopicPartition;
use serde_json::Value;

const PARTITIONS: i32 = 3;
const RUN_TIMEOUT: Duration = Duration::from_secs(90);

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn classic_consumes_commits_and_resumes() {
    scenario("classic").await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn consumer_protocol_consumes_commits_and_resumes() {
    scenario("consumer").await;
}

/// README's first command runs `examples/consumer.rs`: it consumes what was produced, commits,
/// and a restart resumes from the committed offsets (both protocols).
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_consumer_consumes_commits_and_resumes() {
    let Some(bootstrap) = common::bootstrap() else {
        return;
    };
    let exe = common::build_example("consumer");
    for protocol in ["classic", "consumer"] {
        let topic = common::unique("example");
        let (t, _) = transport(&bootstrap);
        common::create_topic(&*t, &topic, PARTITIONS).await;
        produce(&bootstrap, &topic, 0..30).await;
        let group = common::unique("example");
        let run = |max: usize| {
            let out = Command::new(&exe)
                .args([
                    "--bootstrap",
                    &bootstrap,
                    "--group",
                    &group,
                    "--topic",
                    &topic,
                ])
                .args([
                    "--protocol",
                    protocol,
                    "--max-records",
                    &max.to_string(),
                    "--seconds",
                    "60",
                ])
                .output()
                .expect("run the example");
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success(),
                "{protocol}: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let values: BTreeSet<String> = stdout
                .lines()
                .filter_map(|l| l.split_once(": ").map(|(_, v)| v.to_owned()))
                .filter(|v| v.starts_with("value-"))
                .collect();
            (values, stdout)
        };
        let (first, out) = tokio::task::block_in_place(|| run(30));
        let want: BTreeSet<String> = (0..30).map(|i| format!("value-{i}")).collect();
        assert_eq!(first, want, "{protocol}: all 30 records consumed\n{out}");
        produce(&bootstrap, &topic, 30..40).await;
        let (second, out) = tokio::task::block_in_place(|| run(10));
        let want: BTreeSet<String> = (30..40).map(|i| format!("value-{i}")).collect();
        assert_eq!(
            second, want,
            "{protocol}: the restart resumes at the committed offsets\n{out}"
        );
    }
}

async fn scenario(protocol: &str) {
    let Some(bootstrap) = bootstrap() else { return };
    let (t, _) = transport(&bootstrap);
    let topic = unique(&format!("vc-{protocol}"));
    let group = unique(&format!("vc-{protocol}"));
    create_topic(&*t, &topic, PARTITIONS).await;
    let binary = tokio::task::spawn_blocking(example_binary)
        .await
        .expect("build task");

    // Run 1: 100 records, all consumed and committed.
    let first = produce(&bootstrap, &topic, 0..100).await;
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a = flags(&bootstrap, &topic, &group, protocol);
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let run1 = run(
        &binary,
        &format!("{group}-1"),
        args(&["--max-messages", "100"]),
        |_| false,
    )
    .await;
    let ends1 = run1.check_consumed(&topic, &BTreeMap::new(), &first, 100);
    assert_eq!(ends1, first, "{}", run1.report("committed ends of run 1"));
    let key = if protocol == "classic" {
        "generation"
    } else {
        "member_epoch"
    };
    assert!(
        run1.events("member_state")
            .iter()
            .any(|e| e.str("state") == Some("Stable")
                && e.num(key).is_some_and(|g| g > 0)
                && e.str("member_id").is_some_and(|m| !m.is_empty())),
        "{}",
        run1.report(&format!("a Stable member_state with a positive {key}"))
    );

    // Run 2: 50 more, starting exactly where run 1 committed.
    let second = produce(&bootstrap, &topic, 100..150).await;
    let run2 = run(
        &binary,
        &format!("{group}-2"),
        args(&["--max-messages", "50", "--verbose"]),
        |_| false,
    )
    .await;
    let ends2 = run2.check_consumed(&topic, &ends1, &second, 50);
    assert_eq!(ends2, second, "{}", run2.report("committed ends"));
    let values: BTreeSet<String> = run2
        .events("record_data")
        .iter()
        .map(|e| e.str("value").unwrap_or_default().to_owned())
        .collect();
    let expected: BTreeSet<String> = (100..150).map(|i| format!("value-{i}")).collect();
    assert_eq!(values, expected, "{}", run2.report("record_data values"));
    assert!(
        run2.events("record_data")
            .iter()
            .all(|e| e.str("key").is_some_and(|k| k.starts_with("key-"))
                && e.str("topic") == Some(topic.as_str())),
        "{}",
        run2.report("record_data keys and topics")
    );

    // Run 3: nothing left; SIGTERM once the partitions are assigned.
    let run3 = run(&binary, &format!("{group}-3"), args(&[]), |lines| {
        assigned(lines).len() == PARTITIONS as usize
    })
    .await;
    run3.check_frame();
    assert!(run3.sigterm_sent, "{}", run3.report("SIGTERM sent"));
    let before_stop: Vec<Line> = run3
        .lines
        .iter()
        .take_while(|l| l.name() != Some("shutdown_requested"))
        .cloned()
        .collect();
    assert_eq!(
        assigned(&before_stop).len(),
        PARTITIONS as usize,
        "{}",
        run3.report("every partition assigned before the SIGTERM")
    );
    let names = run3.names();
    let requested = names.iter().position(|n| n == "shutdown_requested");
    assert!(
        requested.is_some_and(|i| i + 1 < names.len()),
        "{}",
        run3.report("shutdown_requested before shutdown_complete")
    );
    assert!(
        run3.events("records_consumed").is_empty(),
        "{}",
        run3.report("nothing consumed twice")
    );
}

/// The flags every run here passes, as VerifiableConsumer takes them.
fn flags(bootstrap: &str, topic: &str, group: &str, protocol: &str) -> Vec<String> {
    [
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--group-id",
        group,
        "--group-protocol",
        protocol,
        "--reset-policy",
        "earliest",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

// ---------------------------------------------------------------------------- with Kafka's own

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn classic_shares_a_group_with_kafkas_verifiable_consumer() {
    share_with_java("classic").await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn consumer_protocol_shares_a_group_with_kafkas_verifiable_consumer() {
    share_with_java("consumer").await;
}

/// What the two runs of [`share_with_java`] told so far, by run (0: ours, 1: Java's).
#[derive(Default)]
struct Shared {
    assigned: [BTreeSet<i32>; 2],
    /// Per partition, the offset after the last record consumed.
    consumed: [BTreeMap<i32, i64>; 2],
    /// The two owned every partition between them, disjointly, each at least one, while
    /// every record had been consumed.
    met: bool,
}

/// The example and Kafka's own `org.apache.kafka.tools.VerifiableConsumer` (kafka-tools, the
/// broker's version) started by the same harness ([`run`]) with the same flags, in one group:
/// together they own every partition, disjointly, both at once, and consume all 100 records
/// between them; both stop cleanly on SIGTERM.
async fn share_with_java(protocol: &str) {
    let Some(bootstrap) = bootstrap() else { return };
    let (t, _) = transport(&bootstrap);
    let topic = unique(&format!("vc-share-{protocol}"));
    let group = unique(&format!("vc-share-{protocol}"));
    create_topic(&*t, &topic, PARTITIONS).await;
    let ends = produce(&bootstrap, &topic, 0..100).await;
    let ours = tokio::task::spawn_blocking(example_binary)
        .await
        .expect("build task");
    let (java, jvm) = tokio::task::spawn_blocking(common::java_peer::verifiable_consumer_command)
        .await
        .expect("peer jars");
    let flags = flags(&bootstrap, &topic, &group, protocol);

    let shared = Arc::new(Mutex::new(Shared::default()));
    let stop = |i: usize| {
        let shared = shared.clone();
        let topic = topic.clone();
        let ends = ends.clone();
        move |lines: &[Line]| {
            let mut s = shared.lock().unwrap();
            s.assigned[i] = assigned(lines);
            for e in lines
                .iter()
                .filter(|l| l.name() == Some("records_consumed"))
            {
                for p in e.json.as_ref().map_or(&[][..], |j| j.arr("partitions")) {
                    if p.str("topic") != Some(topic.as_str()) {
                        continue;
                    }
                    if let (Some(part), Some(max)) = (p.num("partition"), p.num("maxOffset")) {
                        let next = s.consumed[i].entry(part as i32).or_insert(0);
                        *next = (*next).max(max + 1);
                    }
                }
            }
            let [a, b] = &s.assigned;
            let split = !a.is_empty()
                && !b.is_empty()
                && a.is_disjoint(b)
                && a.union(b).copied().collect::<BTreeSet<_>>() == (0..PARTITIONS).collect();
            let all_consumed = ends.iter().all(|(p, end)| {
                s.consumed
                    .iter()
                    .filter_map(|c| c.get(p))
                    .max()
                    .is_some_and(|n| n >= end)
            });
            s.met |= split && all_consumed;
            s.met
        }
    };
    let java_args: Vec<String> = jvm.iter().chain(&flags).cloned().collect();
    let (ours_label, java_label) = (format!("{group}-ours"), format!("{group}-java"));
    let (ours_run, java_run) = tokio::join!(
        run(&ours, &ours_label, flags.clone(), stop(0)),
        run(&java, &java_label, java_args, stop(1)),
    );
    let s = shared.lock().unwrap();
    let why = format!(
        "assigned ours {:?} / java {:?}; consumed ours {:?} / java {:?}; log end offsets {:?}",
        s.assigned[0], s.assigned[1], s.consumed[0], s.consumed[1], ends
    );
    assert!(
        s.met,
        "{why}\n{}\n{}",
        ours_run.report("a disjoint, complete split with everything consumed (ours)"),
        java_run.report("(java)")
    );
    ours_run.check_frame();
    java_run.check_frame_exiting(&[0, 143]);
    for r in [&ours_run, &java_run] {
        assert!(r.sigterm_sent, "{}", r.report("stopped by SIGTERM"));
        assert!(
            r.events("offsets_committed")
                .iter()
                .all(|e| e.get("success") == Some(&Value::Bool(true))),
            "{}",
            r.report("every commit successful")
        );
    }
}

// ---------------------------------------------------------------------------- producing

/// Produces records `key-i` / `value-i` for `range`, record i to partition i % 3; returns the
/// log end offset of each partition afterwards (the topic is fresh, so offsets count from 0).
/// Leadership may still be settling right after CreateTopics: such errors are retried for 20 s.
async fn produce(bootstrap: &str, topic: &str, range: std::ops::Range<i64>) -> BTreeMap<i32, i64> {
    let (t, config) = transport(bootstrap);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut ends = BTreeMap::new();
    for p in 0..PARTITIONS {
        let tp = TopicPartition::new(topic, p);
        let records: Vec<(Option<Bytes>, Option<Bytes>)> = range
            .clone()
            .filter(|i| i % i64::from(PARTITIONS) == i64::from(p))
            .map(|i| {
                (
                    Some(Bytes::from(format!("key-{i}"))),
                    Some(Bytes::from(format!("value-{i}"))),
                )
            })
            .collect();
        let base = fetch::produce_settling(&*t, &tp, &records, config.request_timeout, deadline)
            .await
            .unwrap_or_else(|e| panic!("produce to {tp}: {e}"));
        ends.insert(p, base + records.len() as i64);
    }
    ends
}

// ---------------------------------------------------------------------------- decoding

/// The fetch helper's batch decoding, without a broker: round trip, a batch cut off at the end
/// of an answer, and malformed batches as typed errors (never a panic or a huge allocation).
#[test]
fn record_batches_decode_and_bad_ones_are_typed_errors() {
    use fetch::DataError;
    let tp = TopicPartition::new("t", 0);
    let b = |s: &str| Some(Bytes::from(s.to_owned()));
    let batch = fetch::encode_batch(
        &[(b("k0"), b("v0")), (None, b("v1")), (b("k2"), None)],
        1_700_000_000_000,
    )
    .expect("encoded");
    let (records, next) = fetch::decode_records(&tp, batch.clone(), 0).expect("decoded");
    assert_eq!(next, Some(3));
    let seen: Vec<(i64, Option<Bytes>, Option<Bytes>)> = records
        .iter()
        .map(|r| (r.offset, r.key.clone(), r.value.clone()))
        .collect();
    assert_eq!(
        seen,
        vec![
            (0, b("k0"), b("v0")),
            (1, None, b("v1")),
            (2, b("k2"), None)
        ]
    );
    assert!(records.iter().all(|r| r.timestamp == 1_700_000_000_000));
    // Records before the fetch offset are dropped.
    let (from_2, _) = fetch::decode_records(&tp, batch.clone(), 2).expect("decoded");
    assert_eq!(from_2.iter().map(|r| r.offset).collect::<Vec<_>>(), [2]);
    // A second batch cut off by the byte limit waits for the next fetch.
    let mut two = batch.to_vec();
    two.extend_from_slice(&batch[..batch.len() - 5]);
    let (records, next) = fetch::decode_records(&tp, Bytes::from(two), 0).expect("decoded");
    assert_eq!((records.len(), next), (3, Some(3)));
    assert_eq!(
        fetch::decode_records(&tp, Bytes::new(), 0),
        Ok((vec![], None))
    );
    // A control batch (a transaction marker at offset 3) yields no record but moves the next
    // fetch past it.
    let marker = kafka_protocol::records::Record {
        transactional: true,
        control: true,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: 7,
        producer_epoch: 0,
        timestamp_type: kafka_protocol::records::TimestampType::Creation,
        offset: 3,
        sequence: -1,
        timestamp: 1_700_000_000_000,
        key: Some(Bytes::from_static(&[0, 0, 0, 0])),
        value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
        headers: Default::default(),
    };
    let mut with_marker = bytes::BytesMut::from(&batch[..]);
    kafka_protocol::records::RecordBatchEncoder::encode(
        &mut with_marker,
        [&marker],
        &kafka_protocol::records::RecordEncodeOptions {
            version: 2,
            compression: kafka_protocol::records::Compression::None,
        },
    )
    .expect("encoded marker");
    let (records, next) =
        fetch::decode_records(&tp, with_marker.freeze(), 0).expect("decoded with marker");
    assert_eq!((records.len(), next), (3, Some(4)));
    assert_eq!(
        fetch::encode_batch(&[], 0),
        Err(DataError::Invalid {
            api: kafka_protocol::messages::ApiKey::Produce,
            partition: None,
            reason: "a batch needs at least one record".into(),
        })
    );

    let forged = |at: usize, bytes: &[u8]| {
        let mut v = batch.to_vec();
        v[at..at + bytes.len()].copy_from_slice(bytes);
        fetch::decode_records(&tp, Bytes::from(v), 0)
    };
    // gzip, and lz4, in the attributes' codec bits.
    for codec in [1u8, 3] {
        assert!(
            matches!(
                forged(22, &[codec]),
                Err(DataError::Compressed { base_offset: 0, .. })
            ),
            "codec {codec}"
        );
    }
    let invalid = |r: Result<(Vec<fetch::Record>, Option<i64>), DataError>| matches!(r, Err(DataError::Invalid { partition: Some(ref p), .. }) if *p == tp);
    assert!(invalid(forged(22, &[7])), "unknown codec");
    assert!(invalid(forged(57, &i32::MAX.to_be_bytes())), "record count");
    assert!(
        invalid(forged(57, &(-1i32).to_be_bytes())),
        "negative count"
    );
    assert!(invalid(forged(16, &[1])), "message format v1");
    assert!(
        invalid(forged(8, &(-5i32).to_be_bytes())),
        "negative length"
    );
    assert!(
        invalid(forged(8, &20i32.to_be_bytes())),
        "shorter than a header"
    );
    let last = batch.len() - 1;
    let flipped = batch[last] ^ 0xff;
    assert!(invalid(forged(last, &[flipped])), "CRC");
}

// ---------------------------------------------------------------------------- the example

/// Builds the example once per test binary.
fn example_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| common::build_example("verifiable_consumer"))
        .clone()
}

/// One line of the example's stdout.
#[derive(Debug, Clone)]
struct Line {
    text: String,
    json: Option<Value>,
}

impl Line {
    fn name(&self) -> Option<&str> {
        self.json.as_ref()?.str("name")
    }
}

/// A finished run of the example.
struct Run {
    label: String,
    lines: Vec<Line>,
    status: Option<std::process::ExitStatus>,
    sigterm_sent: bool,
    stderr: PathBuf,
}

/// Kills the child if the test panics while it runs.
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Runs the example with `args` until it exits by itself; once `stop(lines)` holds it gets
/// SIGTERM (and SIGKILL 30 s later); after [`RUN_TIMEOUT`] it gets SIGTERM as well.
async fn run(
    binary: &Path,
    label: &str,
    args: Vec<String>,
    stop: impl Fn(&[Line]) -> bool + Send + 'static,
) -> Run {
    let (binary, label) = (binary.to_owned(), label.to_owned());
    tokio::task::spawn_blocking(move || run_blocking(&binary, &label, &args, stop))
        .await
        .expect("run task")
}

fn run_blocking(
    binary: &Path,
    label: &str,
    args: &[String],
    stop: impl Fn(&[Line]) -> bool,
) -> Run {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/verifiable-consumer");
    std::fs::create_dir_all(&dir).expect("log dir");
    let stderr = dir.join(format!("{label}.stderr.log"));
    let log = std::fs::File::create(&stderr).expect("stderr log");
    // With setpriv (util-linux) the example gets SIGKILL if this test process dies first.
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists());
    let mut cmd = match setpriv {
        Some(s) => {
            let mut c = Command::new(s);
            c.args(["--pdeathsig", "KILL", "--"]).arg(binary);
            c
        }
        None => Command::new(binary),
    };
    cmd.args(args)
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log);
    let mut child = Reap(cmd.spawn().expect("spawn the example"));
    let pid = child.0.id();
    let stdout = child.0.stdout.take().expect("piped stdout");
    let lines: Arc<Mutex<Vec<Line>>> = Arc::default();
    let reader = {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for text in BufReader::new(stdout).lines() {
                let Ok(text) = text else { break };
                let json = parse(&text);
                lines.lock().unwrap().push(Line { text, json });
            }
        })
    };
    let started = Instant::now();
    let mut sigterm_at: Option<Instant> = None;
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("try_wait") {
            break Some(status);
        }
        let stop_now = started.elapsed() > RUN_TIMEOUT || stop(&lines.lock().unwrap());
        match sigterm_at {
            None if stop_now => {
                let _ = Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status();
                sigterm_at = Some(Instant::now());
            }
            Some(at) if at.elapsed() > Duration::from_secs(30) => {
                let _ = child.0.kill();
                break child.0.wait().ok();
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = reader.join();
    let lines = lines.lock().unwrap().clone();
    Run {
        label: label.to_owned(),
        lines,
        status,
        sigterm_sent: sigterm_at.is_some(),
        stderr,
    }
}

/// The partitions assigned and not revoked since, from the events so far.
fn assigned(lines: &[Line]) -> BTreeSet<i32> {
    let mut owned = BTreeSet::new();
    for l in lines {
        let Some(j) = &l.json else { continue };
        let parts = || {
            j.arr("partitions")
                .iter()
                .filter_map(|p| p.num("partition"))
                .filter_map(|p| i32::try_from(p).ok())
                .collect::<Vec<_>>()
        };
        match l.name() {
            Some("partitions_assigned") => owned.extend(parts()),
            Some("partitions_revoked") => {
                for p in parts() {
                    owned.remove(&p);
                }
            }
            _ => {}
        }
    }
    owned
}

impl Run {
    fn names(&self) -> Vec<String> {
        self.lines
            .iter()
            .filter_map(|l| l.name().map(str::to_owned))
            .collect()
    }

    fn events(&self, name: &str) -> Vec<&Value> {
        self.lines
            .iter()
            .filter(|l| l.name() == Some(name))
            .filter_map(|l| l.json.as_ref())
            .collect()
    }

    fn report(&self, what: &str) -> String {
        let stderr = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let tail: Vec<&str> = stderr.lines().rev().take(40).collect();
        format!(
            "run {} failed: {what}\nexit status: {:?}, SIGTERM sent: {}\nstdout:\n{}\nstderr ({}), last lines:\n{}",
            self.label,
            self.status,
            self.sigterm_sent,
            self.lines
                .iter()
                .map(|l| format!("    | {}\n", l.text))
                .collect::<String>(),
            self.stderr.display(),
            tail.iter()
                .rev()
                .map(|l| format!("    | {l}\n"))
                .collect::<String>(),
        )
    }

    /// Every line is a JSON event with a timestamp, startup_complete first, shutdown_complete
    /// last, exit status 0.
    fn check_frame(&self) {
        self.check_frame_exiting(&[0]);
    }

    /// [`check_frame`](Self::check_frame) with one of `codes` as the exit status (a JVM that
    /// ran its shutdown hook on SIGTERM exits with 143).
    fn check_frame_exiting(&self, codes: &[i32]) {
        assert!(
            self.status
                .and_then(|s| s.code())
                .is_some_and(|c| codes.contains(&c)),
            "{}",
            self.report(&format!("exit status in {codes:?}"))
        );
        assert!(
            self.lines.iter().all(|l| l
                .json
                .as_ref()
                .is_some_and(|j| j.num("timestamp").is_some_and(|t| t > 0) && l.name().is_some())),
            "{}",
            self.report("every line a JSON event with timestamp and name")
        );
        let names = self.names();
        assert_eq!(
            names.first().map(String::as_str),
            Some("startup_complete"),
            "{}",
            self.report("startup_complete first")
        );
        assert_eq!(
            names.last().map(String::as_str),
            Some("shutdown_complete"),
            "{}",
            self.report("shutdown_complete last")
        );
    }

    /// Checks a run that consumed `total` records: the frame, all partitions assigned, the
    /// consumed ranges contiguous per partition from `starts` (0 when absent) up to `ends`,
    /// every commit successful; returns the last committed offset of each partition.
    fn check_consumed(
        &self,
        topic: &str,
        starts: &BTreeMap<i32, i64>,
        ends: &BTreeMap<i32, i64>,
        total: i64,
    ) -> BTreeMap<i32, i64> {
        self.check_frame();
        let all: BTreeSet<i32> = self
            .events("partitions_assigned")
            .iter()
            .flat_map(|e| e.arr("partitions"))
            .filter(|p| p.str("topic") == Some(topic))
            .filter_map(|p| p.num("partition"))
            .filter_map(|p| i32::try_from(p).ok())
            .collect();
        assert_eq!(
            all,
            (0..PARTITIONS).collect(),
            "{}",
            self.report("partitions_assigned covering every partition")
        );

        // Consumed ranges: contiguous per partition, from the start to the end.
        let mut next: BTreeMap<i32, i64> = (0..PARTITIONS)
            .map(|p| (p, starts.get(&p).copied().unwrap_or(0)))
            .collect();
        let mut sum = 0;
        for e in self.events("records_consumed") {
            let parts = e.arr("partitions");
            let counted: i64 = parts.iter().filter_map(|p| p.num("count")).sum();
            assert!(
                e.num("count").is_some_and(|c| c >= counted),
                "{}",
                self.report("records_consumed count covers its partitions")
            );
            for p in parts {
                let (Some(part), Some(count), Some(min), Some(max)) = (
                    p.num("partition").and_then(|p| i32::try_from(p).ok()),
                    p.num("count"),
                    p.num("minOffset"),
                    p.num("maxOffset"),
                ) else {
                    panic!("{}", self.report("records_consumed partition fields"));
                };
                assert_eq!(p.str("topic"), Some(topic), "{}", self.report("topic"));
                let at = next.get_mut(&part).expect("a known partition");
                assert_eq!(
                    (min, max - min + 1),
                    (*at, count),
                    "{}",
                    self.report(&format!("partition {part}: contiguous records from {at}"))
                );
                *at = max + 1;
                sum += count;
            }
        }
        assert_eq!(sum, total, "{}", self.report("records consumed in total"));
        assert_eq!(&next, ends, "{}", self.report("consumed up to the log end"));

        // Commits: all successful; the last one per partition is where consumption stopped.
        let mut committed = BTreeMap::new();
        for e in self.events("offsets_committed") {
            assert_eq!(
                (e.get("success"), e.get("error")),
                (Some(&Value::Bool(true)), None),
                "{}",
                self.report("every commit successful")
            );
            for o in e.arr("offsets") {
                if let (Some(p), Some(off)) = (o.num("partition"), o.num("offset")) {
                    committed.insert(i32::try_from(p).unwrap_or(-1), off);
                }
            }
        }
        committed
    }
}

/// Field access on the JSON lines of the example, of VerifiableConsumer and of Cargo.
trait Fields {
    fn str(&self, key: &str) -> Option<&str>;
    /// An integer field.
    fn num(&self, key: &str) -> Option<i64>;
    /// An array field (empty when missing).
    fn arr(&self, key: &str) -> &[Value];
}

impl Fields for Value {
    fn str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    fn num(&self, key: &str) -> Option<i64> {
        self.get(key)?.as_i64()
    }

    fn arr(&self, key: &str) -> &[Value] {
        self.get(key)
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }
}

/// The JSON value that is all of `line`, or None.
fn parse(line: &str) -> Option<Value> {
    serde_json::from_str(line).ok()
}
