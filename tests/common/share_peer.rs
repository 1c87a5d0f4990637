//! A real Java `KafkaShareConsumer` (KIP-932 share groups) as a peer in a share group:
//! `tests/kafka/SharePeer.java`, compiled once per test process against the jars of the Java
//! consumer peer (`tests/kafka/peer.sh libs`: kafka-tools and kafka-clients of the broker's
//! release, `KAFKA_VERSION` else 4.4.0; share consumers need 4.1 or later) into
//! `target/share-peer/classes-<hash of the source and jar dir>`, and run as a child JVM with
//! the same `java`, JVM flags and log4j2 configuration as [`super::java_peer`].
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
//! [`share_group_start_offsets`] (and [`share_group_offsets`], with the lag) runs the same
//! JVM in `--offsets` mode: the Java Admin client's `listShareGroupOffsets` reports the share
//! group's start offset of each partition, the first offset not yet in a terminal state
//! (acknowledged ACCEPT or REJECT, or archived), as last persisted by the share coordinator,
//! and the lag. On Kafka 4.4 the persisted start offset is one state write behind: a write
//! (an acknowledgement, `commitSync()` returns after it) persists the start offset from
//! before that acknowledgement moved it, so after the last acknowledgement of a partition
//! it stays where it was (e.g. 0 after 100 records were all accepted) until the next write
//! (measured: it read 100 only once a 101st record was accepted; not on a timer, not on an
//! idle fetch, not after 35 s). The lag is exact: 0 once every record up to the log end is
//! in a terminal state. To check "everything acknowledged", check `lag == Some(0)`.

use std::collections::BTreeMap;
use std::collections::hash_map::DefaultHasher;
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::Value;

const CLASS: &str = "SharePeer";
const POLL_EVERY: Duration = Duration::from_millis(50);
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
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    pid: u32,
    progress: Arc<Mutex<Progress>>,
    reader: Option<JoinHandle<()>>,
    stderr_path: PathBuf,
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
        let name: String = format!("{}-s{seq}-{}", b.group, std::process::id())
            .chars()
            .map(|c| match c {
                'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
                _ => '_',
            })
            .collect();
        let stderr_path = env.dir.join(format!("{name}.stderr.log"));
        let stderr = File::create(&stderr_path)
            .unwrap_or_else(|e| panic!("create {}: {e}", stderr_path.display()));

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

        // setpriv (util-linux) execs java with SIGKILL as its parent-death signal: a test
        // binary that dies leaves no consumer behind (as in java_peer.rs).
        let mut cmd = Command::new(env.setpriv.as_deref().unwrap_or(&env.java));
        if env.setpriv.is_some() {
            cmd.args(["--pdeathsig", "KILL", "--"]).arg(&env.java);
        }
        let mut child = cmd
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {} ({CLASS}): {e}", env.java.display()));
        let pid = child.id();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let progress = Arc::new(Mutex::new(Progress::default()));
        let reader = {
            let progress = Arc::clone(&progress);
            thread::Builder::new()
                .name(format!("share-peer-{seq}"))
                .spawn(move || read_stdout(stdout, &progress))
                .expect("spawn the reader thread")
        };
        SharePeer {
            name,
            child: Some(child),
            stdin,
            pid,
            progress,
            reader: Some(reader),
            stderr_path,
        }
    }

    /// The process id of the JVM (setpriv execs it: the same process).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Where the JVM's stderr and log4j output go.
    pub fn stderr_path(&self) -> &Path {
        &self.stderr_path
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
        let deadline = Instant::now() + timeout;
        loop {
            {
                let p = self.lock();
                if pred(&p) {
                    return true;
                }
                if p.exited || Instant::now() >= deadline {
                    return false;
                }
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
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
        let mut out = format!("share peer {} (pid {}): {what}\n", self.name, self.pid);
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
        let log = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        out += &format!(
            "  stderr: {} (last lines below)\n",
            self.stderr_path.display()
        );
        for l in &lines[lines.len().saturating_sub(30)..] {
            let cut: String = l.chars().take(400).collect();
            out += &format!("    | {cut}\n");
        }
        out
    }

    /// Graceful stop: closes stdin, so the peer `close()`s (sends pending acknowledgements,
    /// leaves the group) and exits; SIGKILL after 40 s. Sleeps with tokio meanwhile. Returns
    /// whether it printed `closed`.
    pub async fn close_async(mut self) -> bool {
        drop(self.stdin.take());
        if let Some(mut child) = self.child.take() {
            let deadline = Instant::now() + CLOSE_GRACE;
            while !matches!(child.try_wait(), Ok(Some(_))) && Instant::now() < deadline {
                tokio::time::sleep(POLL_EVERY).await;
            }
            self.reap(child);
        }
        self.lock().closed
    }

    /// SIGKILL now: a crashed member (no acknowledgements sent, no leave; its acquired
    /// records come back when their acquisition lock times out).
    pub fn kill(mut self) {
        if let Some(child) = self.child.take() {
            self.reap(child);
        }
    }

    /// SIGKILL unless exited, wait, and let the reader thread see EOF.
    fn reap(&mut self, mut child: Child) {
        if !matches!(child.try_wait(), Ok(Some(_))) {
            let _ = child.kill();
        }
        let _ = child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for SharePeer {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            self.reap(child);
        }
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
    /// with the last acknowledgement (see the module doc). -1 if the group has no state for the partition
    /// (measured: before any member fetched it, and for an empty partition a member was
    /// assigned).
    pub start: i64,
    /// `SharePartitionOffsetInfo.lag()`: records up to the log end not yet in a terminal
    /// state, as the broker computes it (current: 0 right after the last acknowledgement's
    /// `commitSync()`). None when the start offset is -1.
    pub lag: Option<i64>,
}

/// The persisted start offset of every partition of `topic` in share group `group` (-1 for a
/// partition the group has no state for): [`share_group_offsets`] without the lag. On Kafka
/// 4.4 it trails the acknowledgements by one write ([`ShareOffset::start`]): it does not equal
/// the log end offset right after every record was acknowledged; use the lag for that.
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
    let name: String = format!("offsets-{group}-o{seq}-{}", std::process::id())
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
            _ => '_',
        })
        .collect();
    let stderr_path = env.dir.join(format!("{name}.stderr.log"));
    let stderr = File::create(&stderr_path)
        .unwrap_or_else(|e| panic!("create {}: {e}", stderr_path.display()));
    let mut cmd = Command::new(env.setpriv.as_deref().unwrap_or(&env.java));
    if env.setpriv.is_some() {
        cmd.args(["--pdeathsig", "KILL", "--"]).arg(&env.java);
    }
    let mut child = cmd
        .args(&env.jvm)
        .args(["--offsets", "--bootstrap-server", bootstrap])
        .args(["--group", group, "--topic", topic])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {} ({CLASS} --offsets): {e}", env.java.display()));
    let mut stdout = child.stdout.take().expect("piped stdout");
    let reader = thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let deadline = Instant::now() + OFFSETS_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => tokio::time::sleep(POLL_EVERY).await,
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let out = reader.join().unwrap_or_default();
    let parsed = (out.lines())
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .find(|v| v.get("event").and_then(Value::as_str) == Some("offsets"))
        .and_then(|v| parse_offsets(&v));
    match (status, parsed) {
        (Some(status), Some(offsets)) if status.success() => offsets,
        (status, _) => {
            let what = match status {
                None => format!("still running after {OFFSETS_TIMEOUT:?} (killed)"),
                Some(s) => format!("exited with {s}"),
            };
            let log = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail: String = (lines[lines.len().saturating_sub(30)..].iter())
                .map(|l| format!("    | {}\n", l.chars().take(400).collect::<String>()))
                .collect();
            panic!(
                "{CLASS} --offsets (group {group}, topic {topic}) {what}; stdout {out:?}; \
                 stderr {}:\n{tail}",
                stderr_path.display()
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

fn read_stdout(stdout: impl Read, progress: &Mutex<Progress>) {
    let lock = || progress.lock().unwrap_or_else(|e| e.into_inner());
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let value: Option<Value> = serde_json::from_str(line).ok();
        let mut p = lock();
        if value.as_ref().and_then(|v| apply(&mut p, v)).is_none() {
            p.other_lines.push(line.to_owned());
        }
    }
    lock().exited = true;
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
    java: PathBuf,
    setpriv: Option<PathBuf>,
    /// JVM flags, classpath (our classes, then the peer jars) and the main class.
    jvm: Vec<String>,
    /// Classes, stderr logs.
    dir: PathBuf,
}

/// The Java consumer peer's `java` and JVM arguments ([`super::java_peer`], which fetches the
/// jars), with SharePeer.java compiled and put first on the classpath; once per test process.
fn share_env() -> &'static ShareEnv {
    static ENV: OnceLock<Result<ShareEnv, String>> = OnceLock::new();
    let env = ENV.get_or_init(|| {
        let (java, mut jvm) = super::java_peer::verifiable_consumer_command();
        let cp = jvm
            .iter()
            .position(|a| a == "-cp")
            .map(|i| i + 1)
            .filter(|&i| i + 1 < jvm.len())
            .ok_or_else(|| format!("no -cp before the main class in {jvm:?}"))?;
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/share-peer");
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let classes = javac(&java.with_file_name("javac"), &jvm[cp], &dir)?;
        jvm[cp] = format!("{}:{}", classes.display(), jvm[cp]);
        *jvm.last_mut().expect("a main class") = CLASS.to_owned();
        let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.is_file());
        Ok(ShareEnv {
            java,
            setpriv,
            jvm,
            dir,
        })
    });
    env.as_ref()
        .unwrap_or_else(|e| panic!("share peer unavailable: {e}"))
}

/// Compiles SharePeer.java against `classpath` into `dir/classes-<hash>` unless there. javac
/// writes a directory of this process's own, renamed into place, so that test binaries running
/// at once never load half a compilation.
fn javac(javac: &Path, classpath: &str, dir: &Path) -> Result<PathBuf, String> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafka/SharePeer.java");
    let text = std::fs::read(&source).map_err(|e| format!("read {}: {e}", source.display()))?;
    let mut hasher = DefaultHasher::new();
    (&text, classpath).hash(&mut hasher);
    let classes = dir.join(format!("classes-{:016x}", hasher.finish()));
    let class_file = classes.join(format!("{CLASS}.class"));
    if !class_file.is_file() {
        let staging = dir.join(format!("staging-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&staging);
        let out = Command::new(javac)
            .arg("-d")
            .arg(&staging)
            .args(["-cp", classpath])
            .arg(&source)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run {} (a JDK 17+): {e}", javac.display()))?;
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(format!(
                "javac {} (kafka-clients 4.1+ needed) failed:\n{}",
                source.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        // Losing the race to another test binary is fine: its classes are the same.
        if std::fs::rename(&staging, &classes).is_err() {
            let _ = std::fs::remove_dir_all(&staging);
        }
    }
    if class_file.is_file() {
        Ok(classes)
    } else {
        Err(format!("no {} after javac", class_file.display()))
    }
}
