//! A real Java `KafkaShareConsumer` (KIP-932 share groups) as a peer in a share group:
//! `tests/kafka/SharePeer.java`, compiled once per test process against the kafka-tools and
//! kafka-clients jars of Kafka [`SHARE_PEER_VERSION`] (`tests/kafka/peer.sh libs --version
//! 4.4.0`) into `target/share-peer/classes-<hash of the source and classpath>`, and run as a
//! child JVM ([`super::jvm`]) with the JVM flags and log4j2 configuration
//! ([`super::jvm::LOG4J2`]) of [`super::java_peer`]'s 4.x peers. The jars are 4.4.0 whatever
//! broker release `KAFKA_VERSION` names: the peer is the same client under every broker with
//! share groups (GA since Kafka 4.2).
//!
//! The peer subscribes to one topic in share group `group` (group.id), prints one JSON line
//! per record it gets (partition, offset, UTF-8 value, delivery count, and the acknowledgement
//! it gave: [`AckMode`]), and in explicit mode (the default) `commitSync()`s after every poll
//! and prints how many acknowledgements failed ([`Commit`]). It also prints a stats line every
//! second ([`PeerStats`]: records, process CPU time). [`SharePeerBuilder::bench`] runs it
//! silent until N records arrived and reports the time and CPU they took ([`BenchResult`]).
//!
//! A share group starts at the latest offset unless the group config
//! `share.auto.offset.reset` says `earliest` (`common::set_group_configs`): set it before the
//! peer joins when the records are produced first.
//!
//! Closing the peer's stdin makes it `close()` (sending pending acknowledgements, leaving the
//! group) and exit ([`SharePeer::close_async`]); dropping it kills the JVM. Its stderr (WARN
//! and up, consumer internals at INFO) goes to `target/share-peer/<name>.stderr.log`.
//!
//! [`share_group_start_offsets`] (and [`share_group_offsets`], with the lag) runs the same JVM in
//! `--offsets` mode: the Java Admin client's `listShareGroupOffsets` reports the share group's
//! start offset of each partition, the first offset not yet in a terminal state (acknowledged
//! ACCEPT or REJECT, or archived), as last persisted by the share coordinator, and the lag. On
//! Kafka 4.2 and 4.4 alike the persisted start offset is one state write behind: a write (an
//! acknowledgement, `commitSync()` returns after it) persists the start offset from before that
//! acknowledgement moved it, so after the last acknowledgement of a partition it stays where it was
//! (e.g. 0 after 100 records were all accepted) until the next write (measured: it read 100 only
//! once a 101st record was accepted; not on a timer, not on an idle fetch, not after 35 s;
//! tests/share_java.rs reads 24000 of 25000 on both releases). The lag is exact: 0 once every
//! record up to the log end is in a terminal state (the broker computes it as log end offset -
//! start offset - the persisted count of terminal records past the start, `deliveryCompleteCount`:
//! `computeShareGroupLagAndBuildResponse` in GroupCoordinatorService, the same in 4.2 and 4.4). To
//! check "everything acknowledged", check `lag == Some(0)`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use serde_json::Value;

use super::jvm::{self, Jvm, Lines};

/// The Kafka release of the peer's kafka-clients (and kafka-tools) jars, whatever the broker.
pub const SHARE_PEER_VERSION: &str = "4.4.0";

const CLASS: &str = "SharePeer";
/// SharePeer closes with a 30 s timeout; a little more before SIGKILL.
const CLOSE_GRACE: Duration = Duration::from_secs(40);

/// How the peer acknowledges each record in explicit mode (`--ack`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckMode {
    /// ACCEPT every record (the default): each is delivered once.
    Accept,
    /// RELEASE every record: it becomes available again (to any member) with its delivery
    /// count raised, until the group's `share.delivery.count.limit` archives it.
    Release,
    /// REJECT every record: archived, never delivered again.
    Reject,
    /// RELEASE a record on its first delivery (delivery count 1), ACCEPT it on any later one.
    ReleaseFirst,
}

impl AckMode {
    fn arg(self) -> &'static str {
        match self {
            AckMode::Accept => "accept",
            AckMode::Release => "release",
            AckMode::Reject => "reject",
            AckMode::ReleaseFirst => "release-first",
        }
    }
}

/// The acknowledgement the peer gave one record (`AcknowledgeType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ack {
    Accept,
    Release,
    Reject,
}

/// One record the peer received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerRecord {
    pub partition: i32,
    pub offset: i64,
    /// The value as UTF-8 (lossy); empty for a null value.
    pub value: String,
    /// `ConsumerRecord.deliveryCount()`: 1 on the first delivery (0 if the client gave none).
    pub delivery_count: i16,
    /// What the peer acknowledged: the explicit acknowledgement, or [`Ack::Accept`] in
    /// implicit mode (the next poll or the close accepts it).
    pub ack: Ack,
}

/// One `commitSync()` of the acknowledgements of a poll batch (explicit mode).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Commit {
    /// Acknowledgements sent.
    pub count: usize,
    /// Those of them in a partition for which commitSync returned an exception.
    pub failed: usize,
    /// "topic-partition: exception" of each failed partition.
    pub errors: Vec<String>,
}

/// A stats line: printed every second and once at exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerStats {
    /// Records received so far.
    pub records: u64,
    /// The JVM's process CPU time so far (every thread: the consumer's network thread too).
    pub cpu: Duration,
    /// Since the peer's `main` started.
    pub elapsed: Duration,
}

/// The result of a [`SharePeerBuilder::bench`] run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BenchResult {
    /// Records received (the whole poll batch in which the N-th arrived: at least N).
    pub records: u64,
    /// From the first poll that returned records to the one that completed N.
    pub elapsed: Duration,
    /// Process CPU time over the same span.
    pub cpu: Duration,
}

impl BenchResult {
    /// Records per second of wall time.
    pub fn rate(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Everything the peer printed so far; [`SharePeer::wait_for`] hands it to its predicate.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    /// `started`: subscribed.
    pub started: bool,
    pub records: Vec<PeerRecord>,
    pub commits: Vec<Commit>,
    /// The latest stats line.
    pub stats: Option<PeerStats>,
    pub bench: Option<BenchResult>,
    /// `"message"` of every `error` line (an exception from poll or commitSync).
    pub errors: Vec<String>,
    /// `closed`: `close()` returned.
    pub closed: bool,
    /// stdout closed: the JVM exited (or is about to).
    pub exited: bool,
    /// Lines that are not events the peer documents.
    pub other_lines: Vec<String>,
}

/// Builder of a [`SharePeer`]; see [`SharePeer::builder`].
#[derive(Clone, Debug)]
pub struct SharePeerBuilder {
    bootstrap: String,
    topic: String,
    group: String,
    ack: Option<AckMode>,
    implicit: bool,
    max_records: Option<u64>,
    bench: Option<u64>,
    properties: Vec<(String, String)>,
}

impl SharePeerBuilder {
    /// `--ack`: the acknowledgement of every record (default [`AckMode::Accept`]). Explicit
    /// mode only.
    pub fn ack(mut self, mode: AckMode) -> Self {
        self.ack = Some(mode);
        self
    }

    /// `share.acknowledgement.mode=implicit`: no `acknowledge()` calls, each poll (and the
    /// close) accepts the records of the one before; no commits.
    pub fn implicit(mut self) -> Self {
        self.implicit = true;
        self
    }

    /// `--max-records`: stop after `n` records and close (exit 0). Explicit mode prints
    /// exactly `n` and releases the rest of that poll batch unprinted; implicit mode prints
    /// (and accepts) the whole batch.
    pub fn max_records(mut self, n: u64) -> Self {
        self.max_records = Some(n);
        self
    }

    /// `--bench`: implicit mode, nothing printed per record; after `n` records the peer
    /// prints [`BenchResult`] ([`SharePeer::bench_result`]) and closes.
    pub fn bench(mut self, n: u64) -> Self {
        self.bench = Some(n);
        self
    }

    /// A consumer property (`--property KEY=VALUE`), e.g. `max.poll.records`. The builder's
    /// own settings (bootstrap, group.id, acknowledgement mode, deserializers) win.
    pub fn property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.push((key.into(), value.into()));
        self
    }

    /// Starts the JVM (fetching the jars and compiling SharePeer.java first if this process
    /// has not yet done so). Returns at once; see [`SharePeer::wait_for`].
    pub fn spawn(self) -> SharePeer {
        SharePeer::spawn(self)
    }
}

/// A running Java share consumer; killed on drop.
pub struct SharePeer {
    name: String,
    jvm: Jvm,
    progress: Arc<Mutex<Progress>>,
}

impl SharePeer {
    /// A share consumer of `topic` in share group `group`: explicit acknowledgement, ACCEPT.
    pub fn builder(
        bootstrap: impl Into<String>,
        topic: impl Into<String>,
        group: impl Into<String>,
    ) -> SharePeerBuilder {
        SharePeerBuilder {
            bootstrap: bootstrap.into(),
            topic: topic.into(),
            group: group.into(),
            ack: None,
            implicit: false,
            max_records: None,
            bench: None,
            properties: Vec::new(),
        }
    }

    fn spawn(b: SharePeerBuilder) -> SharePeer {
        let implicit = b.implicit || b.bench.is_some();
        assert!(
            !implicit || b.ack.is_none_or(|a| a == AckMode::Accept),
            "implicit acknowledgement (implicit(), bench()) only accepts: no ack({:?})",
            b.ack
        );
        let env = share_env();
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let name = jvm::sanitize(&format!("{}-s{seq}-{}", b.group, std::process::id()));
        let stderr_path = env.dir.join(format!("{name}.stderr.log"));

        let mut args = env.jvm.clone();
        for (flag, value) in [
            ("--bootstrap-server", b.bootstrap),
            ("--group", b.group),
            ("--topic", b.topic),
        ] {
            args.extend([flag.to_owned(), value]);
        }
        args.push(if implicit { "--implicit" } else { "--explicit" }.to_owned());
        if let Some(ack) = b.ack {
            args.extend(["--ack".to_owned(), ack.arg().to_owned()]);
        }
        if let Some(n) = b.max_records {
            args.extend(["--max-records".to_owned(), n.to_string()]);
        }
        if let Some(n) = b.bench {
            args.extend(["--bench".to_owned(), n.to_string()]);
        }
        for (k, v) in b.properties {
            args.extend(["--property".to_owned(), format!("{k}={v}")]);
        }

        // Stdin piped: closing it closes the consumer (close_async).
        let thread = format!("share-peer-{seq}");
        let (jvm, progress) = Jvm::spawn(CLASS, &args, true, stderr_path, thread, read_stdout);
        SharePeer {
            name,
            jvm,
            progress,
        }
    }

    /// The process id of the JVM (setpriv execs it: the same process).
    pub fn pid(&self) -> u32 {
        self.jvm.pid()
    }

    /// Where the JVM's stderr and log4j output go.
    pub fn stderr_path(&self) -> &Path {
        self.jvm.stderr_path()
    }

    /// A copy of everything printed so far.
    pub fn progress(&self) -> Progress {
        self.lock().clone()
    }

    /// Every record received so far, in order (a redelivered record appears again).
    pub fn records(&self) -> Vec<PeerRecord> {
        self.lock().records.clone()
    }

    /// The values of the records the peer accepted, in order.
    pub fn values_accepted(&self) -> Vec<String> {
        (self.lock().records.iter())
            .filter(|r| r.ack == Ack::Accept)
            .map(|r| r.value.clone())
            .collect()
    }

    /// Every commitSync result so far (explicit mode).
    pub fn commits(&self) -> Vec<Commit> {
        self.lock().commits.clone()
    }

    /// The latest stats line.
    pub fn stats(&self) -> Option<PeerStats> {
        self.lock().stats
    }

    /// The bench line, once a [`SharePeerBuilder::bench`] run has its records.
    pub fn bench_result(&self) -> Option<BenchResult> {
        self.lock().bench
    }

    /// `"message"` of every `error` line so far.
    pub fn errors(&self) -> Vec<String> {
        self.lock().errors.clone()
    }

    /// Whether the JVM has closed its stdout (exited).
    pub fn exited(&self) -> bool {
        self.lock().exited
    }

    /// Polls (tokio sleep, every 50 ms) until `pred(progress)` holds: true, or false on
    /// timeout, or at once if it does not hold and the JVM has exited.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        mut pred: impl FnMut(&Progress) -> bool,
    ) -> bool {
        let check = || {
            let p = self.lock();
            if pred(&p) {
                Some(true)
            } else {
                p.exited.then_some(false)
            }
        };
        jvm::wait_until(timeout, check).await.unwrap_or(false)
    }

    /// Waits for `started` (JVM up, consumer subscribed; joining the group is still under
    /// way). Panics with [`SharePeer::report`] on timeout or if the JVM exits first.
    pub async fn wait_started(&self, timeout: Duration) {
        if !self.wait_for(timeout, |p| p.started).await {
            panic!(
                "{}",
                self.report(&format!("not started within {timeout:?}"))
            );
        }
    }

    /// A multi-line description for assertion messages: name, pid, counts, errors, other
    /// stdout lines, the stderr file and its last lines.
    pub fn report(&self, what: &str) -> String {
        let mut out = format!("share peer {} (pid {}): {what}\n", self.name, self.pid());
        {
            let p = self.lock();
            let failed: usize = p.commits.iter().map(|c| c.failed).sum();
            out += &format!(
                "  started {}, {} records, {} commits ({failed} acks failed), stats {:?}, \
                 bench {:?}, closed {}, exited {}\n",
                p.started,
                p.records.len(),
                p.commits.len(),
                p.stats,
                p.bench,
                p.closed,
                p.exited
            );
            for e in &p.errors {
                out += &format!("  error: {e}\n");
            }
            for c in p.commits.iter().filter(|c| c.failed > 0) {
                out += &format!("  commit: {c:?}\n");
            }
            for l in &p.other_lines {
                out += &format!("  stdout: {l}\n");
            }
        }
        out + &self.jvm.stderr_report()
    }

    /// Graceful stop: closes stdin, so the peer `close()`s (sends pending acknowledgements,
    /// leaves the group) and exits; SIGKILL after 40 s. Sleeps with tokio meanwhile. Returns
    /// whether it printed `closed`.
    pub async fn close_async(mut self) -> bool {
        self.jvm.close(CLOSE_GRACE).await;
        self.lock().closed
    }

    /// SIGKILL now: a crashed member (no acknowledgements sent, no leave; its acquired
    /// records come back when their acquisition lock times out).
    pub fn kill(mut self) {
        self.jvm.finish();
    }

    fn lock(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(|e| e.into_inner())
    }
}

// ---------------------------------------------------------------------------- offsets

/// How long [`share_group_offsets`] lets the JVM run (SharePeer waits 40 s per Admin call).
const OFFSETS_TIMEOUT: Duration = Duration::from_secs(60);

/// The state of one share partition, as the Java Admin client's `listShareGroupOffsets`
/// reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShareOffset {
    /// `SharePartitionOffsetInfo.startOffset()`: the persisted start offset, the first offset
    /// not yet in a terminal state (acknowledged ACCEPT or REJECT, or archived), counting
    /// every acknowledgement but the latest write's: it does not reach the log end offset
    /// with the last acknowledgement (see the module doc). -1 if the group has no state for
    /// the partition (measured: before any member fetched it, and for an empty partition a
    /// member was assigned).
    pub start: i64,
    /// `SharePartitionOffsetInfo.lag()`: records up to the log end not yet in a terminal
    /// state, as the broker computes it (current: 0 right after the last acknowledgement's
    /// `commitSync()`). None when the start offset is -1.
    pub lag: Option<i64>,
}

/// The persisted start offset of every partition of `topic` in share group `group` (-1 for a
/// partition the group has no state for): [`share_group_offsets`] without the lag. On Kafka 4.2 and
/// 4.4 it trails the acknowledgements by one write ([`ShareOffset::start`]): it does not equal the
/// log end offset right after every record was acknowledged; use the lag for that.
pub async fn share_group_start_offsets(
    bootstrap: &str,
    group: &str,
    topic: &str,
) -> BTreeMap<i32, i64> {
    (share_group_offsets(bootstrap, group, topic)
        .await
        .into_iter())
    .map(|(p, o)| (p, o.start))
    .collect()
}

/// The start offset and lag of every partition of `topic` in share group `group`, read from
/// the broker by `SharePeer --offsets` (a JVM with the peer's command and classpath; Admin
/// `describeTopics` for the partitions, `listShareGroupOffsets` for the offsets). Waits for
/// it with tokio sleeps; panics (with the tail of its stderr) if it fails, prints no
/// `offsets` line, or runs over 60 s (then it is killed).
pub async fn share_group_offsets(
    bootstrap: &str,
    group: &str,
    topic: &str,
) -> BTreeMap<i32, ShareOffset> {
    let env = share_env();
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let name = jvm::sanitize(&format!("offsets-{group}-o{seq}-{}", std::process::id()));
    let stderr_path = env.dir.join(format!("{name}.stderr.log"));
    let mut args = env.jvm.clone();
    args.extend(["--offsets", "--bootstrap-server", bootstrap].map(str::to_owned));
    args.extend(["--group", group, "--topic", topic].map(str::to_owned));
    let what = format!("{CLASS} --offsets");
    let thread = format!("share-offsets-{seq}");
    let (mut offsets_jvm, out) =
        Jvm::spawn(&what, &args, false, stderr_path, thread, collect_lines);
    let exited = offsets_jvm.wait_exit(OFFSETS_TIMEOUT).await;
    // finish() joins the reader: `out` is complete after it.
    let status = offsets_jvm.finish().filter(|_| exited);
    let out = std::mem::take(&mut *out.lock().unwrap_or_else(|e| e.into_inner()));
    let parsed = (out.iter())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v.get("event").and_then(Value::as_str) == Some("offsets"))
        .and_then(|v| parse_offsets(&v));
    match (status, parsed) {
        (Some(status), Some(offsets)) if status.success() => offsets,
        (status, _) => {
            let what = match status {
                None => format!("still running after {OFFSETS_TIMEOUT:?} (killed)"),
                Some(s) => format!("exited with {s}"),
            };
            panic!(
                "{CLASS} --offsets (group {group}, topic {topic}) {what}; stdout {out:?};\n{}",
                offsets_jvm.stderr_report()
            )
        }
    }
}

/// The partitions of an `offsets` line: `"partitions"` (start offsets) and `"lags"` (-1:
/// none), keyed by the partition number as a string.
fn parse_offsets(v: &Value) -> Option<BTreeMap<i32, ShareOffset>> {
    let lags = v.get("lags").and_then(Value::as_object);
    (v.get("partitions")?.as_object()?.iter())
        .map(|(p, start)| {
            let lag = lags
                .and_then(|l| l.get(p))
                .and_then(Value::as_i64)
                .filter(|&l| l >= 0);
            let offset = ShareOffset {
                start: start.as_i64()?,
                lag,
            };
            Some((p.parse().ok()?, offset))
        })
        .collect()
}

// ---------------------------------------------------------------------------- stdout

fn read_stdout(lines: Lines, progress: &Mutex<Progress>) {
    let lock = || progress.lock().unwrap_or_else(|e| e.into_inner());
    for (_, line) in lines {
        let value: Option<Value> = serde_json::from_str(&line).ok();
        let mut p = lock();
        if value.as_ref().and_then(|v| apply(&mut p, v)).is_none() {
            p.other_lines.push(line);
        }
    }
    lock().exited = true;
}

/// Every stdout line of `SharePeer --offsets`, into `out` at EOF.
fn collect_lines(lines: Lines, out: &Mutex<Vec<String>>) {
    let lines: Vec<String> = lines.map(|(_, l)| l).collect();
    *out.lock().unwrap_or_else(|e| e.into_inner()) = lines;
}

/// Applies one stdout event to `p`; None if it is not one SharePeer.java prints.
fn apply(p: &mut Progress, v: &Value) -> Option<()> {
    let int = |key: &str| v.get(key).and_then(Value::as_i64);
    let nanos = |key: &str| Some(Duration::from_nanos(u64::try_from(int(key)?).ok()?));
    match v.get("event")?.as_str()? {
        "started" => p.started = true,
        "closed" => p.closed = true,
        "record" => p.records.push(PeerRecord {
            partition: i32::try_from(int("partition")?).ok()?,
            offset: int("offset")?,
            value: v.get("value")?.as_str().unwrap_or_default().to_owned(),
            delivery_count: int("delivery_count").map_or(Some(0), |n| i16::try_from(n).ok())?,
            ack: match v.get("ack")?.as_str()? {
                "ACCEPT" => Ack::Accept,
                "RELEASE" => Ack::Release,
                "REJECT" => Ack::Reject,
                _ => return None,
            },
        }),
        "committed" => p.commits.push(Commit {
            count: usize::try_from(int("count")?).ok()?,
            failed: usize::try_from(int("failed")?).ok()?,
            errors: (v.get("errors")?.as_array()?.iter())
                .map(|e| e.as_str().map(str::to_owned))
                .collect::<Option<_>>()?,
        }),
        "stats" => {
            p.stats = Some(PeerStats {
                records: u64::try_from(int("records")?).ok()?,
                cpu: nanos("cpu_ns")?,
                elapsed: nanos("elapsed_ns")?,
            })
        }
        "bench" => {
            p.bench = Some(BenchResult {
                records: u64::try_from(int("records")?).ok()?,
                elapsed: nanos("elapsed_ns")?,
                cpu: nanos("cpu_ns")?,
            })
        }
        "error" => p
            .errors
            .push(v.get("message")?.as_str().unwrap_or_default().to_owned()),
        _ => return None,
    }
    Some(())
}

// ---------------------------------------------------------------------------- environment

struct ShareEnv {
    /// JVM flags, classpath (our classes, then the 4.4.0 jars) and the main class.
    jvm: Vec<String>,
    /// Classes, stderr logs, the log4j2 configuration.
    dir: PathBuf,
}

/// The jars of Kafka [`SHARE_PEER_VERSION`] (`peer.sh libs --version 4.4.0`), SharePeer.java
/// compiled against them, and the JVM arguments; once per test process.
fn share_env() -> &'static ShareEnv {
    static ENV: OnceLock<Result<ShareEnv, String>> = OnceLock::new();
    let env = ENV.get_or_init(|| {
        let libs = jvm::peer_libs("libs", Some(SHARE_PEER_VERSION))?;
        let dir = jvm::target_dir("share-peer")?;
        let log4j = dir.join("log4j2.properties");
        jvm::write_config(&log4j, jvm::LOG4J2)?;
        let jars = format!("{}/*", libs.display());
        let classes = jvm::compile(CLASS, &jars, &dir)?;
        let classpath = format!("{}:{jars}", classes.display());
        let jvm = jvm::jvm_args(jvm::log4j2_flag(&log4j), classpath, CLASS);
        Ok(ShareEnv { jvm, dir })
    });
    env.as_ref()
        .unwrap_or_else(|e| panic!("share peer unavailable: {e}"))
}
