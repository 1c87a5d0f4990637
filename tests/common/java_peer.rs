//! A real Java `KafkaConsumer` as a peer in the same group as our Rust member: Kafka's own
//! system-test client `org.apache.kafka.tools.VerifiableConsumer` (kafka-tools and
//! kafka-clients of the broker's release: `KAFKA_VERSION`, which tests/kafka/with-broker.sh
//! exports, else 4.4.0), run as a child JVM. Its jars come from `tests/kafka/peer.sh libs`;
//! [`peer_version`] names the release that runs. Flags a release's VerifiableConsumer does not
//! take are left out or renamed (3.x: no `--group-protocol`; before 4.2: `--consumer.config`
//! instead of `--command-config`), and 3.x logs through log4j 1 (reload4j).
//!
//! VerifiableConsumer prints one JSON object per line on stdout; the events used here:
//!
//! * `startup_complete`: the `KafkaConsumer` is constructed, printed just *before*
//!   `subscribe()`, so nothing has been sent to the broker yet;
//! * `partitions_assigned` / `partitions_revoked`: `ConsumerRebalanceListener` callbacks,
//!   `"partitions":[{"topic":..,"partition":..}]`. Eager assignors (classic Range,
//!   RoundRobin, Sticky) revoke everything before a rebalance and then assign the full new
//!   set; CooperativeSticky and the consumer protocol (KIP-848) call back with the
//!   increments only (cooperative also with an empty `partitions_assigned` after every
//!   rebalance). Lost partitions (`onPartitionsLost`, not overridden) appear as
//!   `partitions_revoked`. Either way "assigned adds, revoked removes" gives the current
//!   assignment;
//! * `shutdown_requested` (SIGTERM received), `shutdown_complete` (after `close()`);
//! * `records_consumed` / `offsets_committed` (also carry "partitions"/"offsets", ignored;
//!   `"success"` of offsets_committed is kept in [`PeerEvent::success`]).
//!
//! The child's stderr (and its log4j output, WARN and up plus consumer internals at INFO) goes
//! to `target/java-peer/<name>.stderr.log`; panic messages name that file. The JVM plumbing
//! (java, setpriv, the child and its stdout) is [`super::jvm`]'s.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::jvm::{self, Jvm, Lines};

/// A (topic, partition) as VerifiableConsumer reports it.
pub type Tp = (String, i32);

/// Classic-protocol assignors (`--assignment-strategy`).
pub const RANGE: &str = "org.apache.kafka.clients.consumer.RangeAssignor";
pub const ROUND_ROBIN: &str = "org.apache.kafka.clients.consumer.RoundRobinAssignor";
pub const STICKY: &str = "org.apache.kafka.clients.consumer.StickyAssignor";
pub const COOPERATIVE_STICKY: &str = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor";

const MAIN_CLASS: &str = "org.apache.kafka.tools.VerifiableConsumer";
const STOP_GRACE: Duration = Duration::from_secs(10);

/// `--group-protocol`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupProtocol {
    Classic,
    /// KIP-848.
    Consumer,
}

impl GroupProtocol {
    fn arg(self) -> &'static str {
        match self {
            GroupProtocol::Classic => "classic",
            GroupProtocol::Consumer => "consumer",
        }
    }
}

/// One stdout event of the Java consumer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerEvent {
    /// When the line was read, counted from the spawn.
    pub at: Duration,
    /// `"name"`: startup_complete, partitions_assigned, partitions_revoked,
    /// shutdown_requested, shutdown_complete, records_consumed, offsets_committed, ...
    pub name: String,
    /// `"partitions"` of partitions_assigned / partitions_revoked (empty for other events).
    pub partitions: Vec<Tp>,
    /// `"success"` of offsets_committed (`None` for other events).
    pub success: Option<bool>,
}

/// Builder of a [`JavaConsumer`]; see [`JavaConsumer::builder`].
#[derive(Clone, Debug)]
pub struct JavaConsumerBuilder {
    bootstrap: String,
    topic: String,
    group: String,
    protocol: GroupProtocol,
    instance_id: Option<String>,
    assignment_strategy: Option<String>,
    remote_assignor: Option<String>,
    session_timeout: Option<Duration>,
    properties: Vec<(String, String)>,
}

impl JavaConsumerBuilder {
    /// `--group-protocol` (default [`GroupProtocol::Classic`]). [`GroupProtocol::Consumer`]
    /// needs a 4.x peer ([`peer_version`]).
    pub fn protocol(mut self, protocol: GroupProtocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// `--group-instance-id` (static membership).
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// `--assignment-strategy`, a class name such as [`RANGE`] or [`COOPERATIVE_STICKY`]
    /// (VerifiableConsumer's default is RangeAssignor). Classic protocol only.
    pub fn assignment_strategy(mut self, class: impl Into<String>) -> Self {
        self.assignment_strategy = Some(class.into());
        self
    }

    /// `--group-remote-assignor` (`uniform` or `range`). Consumer protocol only.
    pub fn remote_assignor(mut self, name: impl Into<String>) -> Self {
        self.remote_assignor = Some(name.into());
        self
    }

    /// `--session-timeout` (the client's default is 45 s). Classic protocol only: the
    /// consumer protocol rejects `session.timeout.ms` (the broker's
    /// `group.consumer.session.timeout.ms` applies).
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = Some(timeout);
        self
    }

    /// An extra consumer property, passed in a `--command-config` file. Options that
    /// VerifiableConsumer sets from its command line (group id, protocol, assignor, session
    /// timeout, auto commit, reset policy, bootstrap) override these.
    pub fn property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.push((key.into(), value.into()));
        self
    }

    /// Starts the JVM (fetching the jars first if this process has not yet done so). Returns
    /// at once; see [`JavaConsumer::wait_started`].
    pub fn spawn(self) -> JavaConsumer {
        JavaConsumer::spawn(self)
    }
}

#[derive(Default)]
struct State {
    events: Vec<PeerEvent>,
    assignment: BTreeSet<Tp>,
    started: bool,
    /// stdout closed: the JVM exited (or is about to).
    eof: bool,
    /// Lines that were not events (e.g. a deprecation notice).
    other_lines: Vec<String>,
}

/// A running Java consumer in a group; killed on drop.
pub struct JavaConsumer {
    name: String,
    jvm: Jvm,
    state: Arc<Mutex<State>>,
}

impl JavaConsumer {
    /// A consumer of `topic` in `group`, classic protocol, VerifiableConsumer's defaults
    /// (RangeAssignor, manual sync commits, reset policy earliest).
    pub fn builder(
        bootstrap: impl Into<String>,
        topic: impl Into<String>,
        group: impl Into<String>,
    ) -> JavaConsumerBuilder {
        JavaConsumerBuilder {
            bootstrap: bootstrap.into(),
            topic: topic.into(),
            group: group.into(),
            protocol: GroupProtocol::Classic,
            instance_id: None,
            assignment_strategy: None,
            remote_assignor: None,
            session_timeout: None,
            properties: Vec::new(),
        }
    }

    fn spawn(b: JavaConsumerBuilder) -> JavaConsumer {
        let peer = peer_env();
        match b.protocol {
            GroupProtocol::Classic => assert!(
                b.remote_assignor.is_none(),
                "remote_assignor is for the consumer protocol only"
            ),
            GroupProtocol::Consumer => {
                assert!(
                    peer.line >= (4, 0),
                    "Java consumer-protocol peers need Kafka 4.0 or later (peer: Kafka {})",
                    peer.version
                );
                assert!(
                    b.assignment_strategy.is_none(),
                    "assignment_strategy is for the classic protocol only (VerifiableConsumer ignores it)"
                );
                assert!(
                    b.session_timeout.is_none(),
                    "session_timeout is not supported with the consumer protocol (the broker's group.consumer.session.timeout.ms applies)"
                );
            }
        }
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let label = b.instance_id.clone().unwrap_or_else(|| format!("m{seq}"));
        let name = jvm::sanitize(&format!(
            "{}-{}-{}-{}",
            b.group,
            label,
            std::process::id(),
            seq
        ));
        let stderr_path = peer.log_dir.join(format!("{name}.stderr.log"));

        let mut args: Vec<String> = jvm_args(peer);
        args.extend([
            "--bootstrap-server".into(),
            b.bootstrap.clone(),
            "--topic".into(),
            b.topic.clone(),
            "--group-id".into(),
            b.group.clone(),
            "--reset-policy".into(),
            "earliest".into(),
        ]);
        // 3.x: no `--group-protocol` in 3.6; classic is every release's default, so a
        // classic peer before 4.0 runs without it.
        if peer.line >= (4, 0) {
            args.extend(["--group-protocol".into(), b.protocol.arg().into()]);
        }
        if let Some(id) = &b.instance_id {
            args.extend(["--group-instance-id".into(), id.clone()]);
        }
        if let Some(class) = &b.assignment_strategy {
            args.extend(["--assignment-strategy".into(), class.clone()]);
        }
        if let Some(assignor) = &b.remote_assignor {
            args.extend(["--group-remote-assignor".into(), assignor.clone()]);
        }
        if let Some(t) = b.session_timeout {
            args.extend(["--session-timeout".into(), t.as_millis().to_string()]);
        }
        if !b.properties.is_empty() {
            let path = peer.log_dir.join(format!("{name}.properties"));
            let text: String = b
                .properties
                .iter()
                .map(|(k, v)| format!("{}={}\n", escape_property(k), escape_property(v)))
                .collect();
            std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
            // `--command-config` came with 4.2 (not in 4.0); `--consumer.config` is in every
            // release from 3.6 (deprecated by the former).
            let flag = if peer.line >= (4, 2) {
                "--command-config"
            } else {
                "--consumer.config"
            };
            args.extend([flag.into(), path.display().to_string()]);
        }

        let thread = format!("java-peer-{seq}");
        let (jvm, state) = Jvm::spawn(MAIN_CLASS, &args, false, stderr_path, thread, read_events);
        JavaConsumer { name, jvm, state }
    }

    /// The JVM's process id.
    pub fn pid(&self) -> u32 {
        self.jvm.pid()
    }

    /// The file that receives the JVM's stderr and log output.
    pub fn stderr_path(&self) -> &Path {
        self.jvm.stderr_path()
    }

    /// When the JVM was spawned: [`PeerEvent::at`] counts from here.
    pub fn spawned_at(&self) -> Instant {
        self.jvm.spawned_at()
    }

    /// Whether the JVM's stderr / log output so far contains `needle` (e.g. an exception's
    /// class name).
    pub fn stderr_contains(&self, needle: &str) -> bool {
        std::fs::read_to_string(self.stderr_path()).is_ok_and(|text| text.contains(needle))
    }

    /// Waits for `startup_complete` (JVM up, `KafkaConsumer` built, about to subscribe), and
    /// returns the time since the spawn. Panics on timeout or if the JVM exits first.
    pub async fn wait_started(&self, timeout: Duration) -> Duration {
        let check = || {
            let s = self.lock();
            let at = (s.events.iter().find(|e| e.name == "startup_complete")).map(|e| e.at);
            if s.started {
                Some(Some(at.unwrap_or_else(|| self.spawned_at().elapsed())))
            } else {
                s.eof.then_some(None)
            }
        };
        match jvm::wait_until(timeout, check).await {
            Some(Some(at)) => at,
            Some(None) => panic!("{}", self.report("exited before startup_complete")),
            None => panic!(
                "{}",
                self.report(&format!("no startup_complete within {timeout:?}"))
            ),
        }
    }

    /// The partitions currently assigned, from the assigned/revoked callbacks so far.
    pub fn assignment(&self) -> BTreeSet<Tp> {
        self.lock().assignment.clone()
    }

    /// Polls (every 50 ms) until `pred(assignment)` holds; false on timeout, or at once if
    /// it does not hold and the JVM has exited.
    pub async fn wait_for(&self, timeout: Duration, pred: impl Fn(&BTreeSet<Tp>) -> bool) -> bool {
        self.wait_state(timeout, |s| pred(&s.assignment)).await
    }

    /// Polls until an event named `name` has been printed; false on timeout or exit.
    pub async fn wait_event(&self, timeout: Duration, name: &str) -> bool {
        (self.wait_state(timeout, |s| s.events.iter().any(|e| e.name == name))).await
    }

    /// Polls until `pred(state)` holds: true, or false on timeout or once the JVM exited.
    async fn wait_state(&self, timeout: Duration, pred: impl Fn(&State) -> bool) -> bool {
        let check = || {
            let s = self.lock();
            if pred(&s) {
                Some(true)
            } else {
                s.eof.then_some(false)
            }
        };
        jvm::wait_until(timeout, check).await.unwrap_or(false)
    }

    /// The event names so far, in order.
    pub fn events(&self) -> Vec<String> {
        self.lock().events.iter().map(|e| e.name.clone()).collect()
    }

    /// The events so far with their partitions and arrival times.
    pub fn event_log(&self) -> Vec<PeerEvent> {
        self.lock().events.clone()
    }

    /// Every change of ownership the consumer reported, as (when, owned?, partition):
    /// `partitions_assigned` adds, `partitions_revoked` (revoked or lost) removes,
    /// `shutdown_complete` removes whatever was left. The instants are those at which the
    /// lines were read (`spawned_at() + at`).
    pub fn ownership_log(&self) -> Vec<(Instant, bool, Tp)> {
        let s = self.lock();
        let mut owned: BTreeSet<Tp> = BTreeSet::new();
        let mut log = Vec::new();
        for e in &s.events {
            let at = self.spawned_at() + e.at;
            let gone: Vec<Tp> = match e.name.as_str() {
                "partitions_assigned" => {
                    for tp in &e.partitions {
                        if owned.insert(tp.clone()) {
                            log.push((at, true, tp.clone()));
                        }
                    }
                    continue;
                }
                "partitions_revoked" => e.partitions.clone(),
                "shutdown_complete" => owned.iter().cloned().collect(),
                _ => continue,
            };
            for tp in gone {
                if owned.remove(&tp) {
                    log.push((at, false, tp));
                }
            }
        }
        log
    }

    /// Whether the JVM has closed its stdout (exited).
    pub fn exited(&self) -> bool {
        self.lock().eof
    }

    /// A multi-line description for assertion messages: name, pid, assignment, events, the
    /// stderr file and its last lines.
    pub fn report(&self, what: &str) -> String {
        let (events, assignment, other) = {
            let s = self.lock();
            let events: Vec<String> = s
                .events
                .iter()
                .map(|e| {
                    if e.partitions.is_empty() {
                        format!("{:>7.3}s {}", e.at.as_secs_f64(), e.name)
                    } else {
                        format!("{:>7.3}s {} {:?}", e.at.as_secs_f64(), e.name, e.partitions)
                    }
                })
                .collect();
            (events, s.assignment.clone(), s.other_lines.clone())
        };
        let mut out = format!(
            "java peer {} (pid {}): {what}\n  assignment: {assignment:?}\n  events:\n",
            self.name,
            self.pid()
        );
        for e in events {
            out += &format!("    {e}\n");
        }
        for l in other {
            out += &format!("  stdout: {l}\n");
        }
        out + &self.jvm.stderr_report()
    }

    /// Graceful stop: SIGTERM (VerifiableConsumer's shutdown hook wakes the consumer, which
    /// closes: revokes, leaves the group), then SIGKILL after 10 s. Blocks the calling thread;
    /// see [`JavaConsumer::stop_async`]. Returns the final event log.
    pub fn stop(mut self) -> Vec<PeerEvent> {
        self.jvm.stop_blocking(STOP_GRACE);
        self.event_log()
    }

    /// [`JavaConsumer::stop`] that sleeps with tokio instead of blocking the thread, so the
    /// runtime's other tasks (e.g. our member's heartbeats) keep running meanwhile.
    pub async fn stop_async(mut self) -> Vec<PeerEvent> {
        self.jvm.stop(STOP_GRACE).await;
        self.event_log()
    }

    /// SIGKILL now: a crashed member (no LeaveGroup; the coordinator notices only when the
    /// session times out).
    pub fn kill(mut self) {
        self.jvm.finish();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

// ---------------------------------------------------------------------------- environment

struct PeerEnv {
    libs: PathBuf,
    /// The kafka-tools release in `libs`, e.g. "4.4.0", and its line (major, minor).
    version: String,
    line: (u32, u32),
    /// The logging configuration: log4j2 (4.x) or log4j 1 (3.x, reload4j).
    log4j: PathBuf,
    log_dir: PathBuf,
}

/// The Kafka release of the Java peers' kafka-tools and kafka-clients jars (e.g. "4.4.0"):
/// `KAFKA_VERSION` when set, else 4.4.0. Fetches the jars first if this process has not yet
/// done so.
pub fn peer_version() -> &'static str {
    &peer_env().version
}

/// The log4j 1 configuration of the 3.x peers (reload4j and slf4j-reload4j): as the 4.x peers'
/// ([`jvm::LOG4J2`]).
const LOG4J1: &str = "\
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.kafka.clients.consumer.internals=INFO
";

/// The release of the `kafka-tools-X.Y.Z.jar` in `libs`.
fn tools_version(libs: &Path) -> Result<(String, (u32, u32)), String> {
    let entries = std::fs::read_dir(libs).map_err(|e| format!("read {}: {e}", libs.display()))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(v) = name
            .strip_prefix("kafka-tools-")
            .and_then(|n| n.strip_suffix(".jar"))
        else {
            continue;
        };
        let parts: Vec<Option<u32>> = v.split('.').map(|p| p.parse().ok()).collect();
        if let [Some(major), Some(minor), Some(_)] = parts[..] {
            return Ok((v.to_owned(), (major, minor)));
        }
    }
    Err(format!("no kafka-tools-X.Y.Z.jar in {}", libs.display()))
}

/// Runs `tests/kafka/peer.sh libs` once per test process, for the release in `KAFKA_VERSION`
/// (peer.sh's default without it).
fn peer_env() -> &'static PeerEnv {
    static ENV: OnceLock<Result<PeerEnv, String>> = OnceLock::new();
    let env = ENV.get_or_init(|| {
        let libs = jvm::peer_libs("libs", jvm::kafka_version().as_deref())?;
        let log_dir = jvm::target_dir("java-peer")?;
        let (version, line) = tools_version(&libs)?;
        let (log4j, config) = if line >= (4, 0) {
            (log_dir.join("log4j2.properties"), jvm::LOG4J2)
        } else {
            (log_dir.join("log4j.properties"), LOG4J1)
        };
        jvm::write_config(&log4j, config)?;
        Ok(PeerEnv {
            libs,
            version,
            line,
            log4j,
            log_dir,
        })
    });
    match env {
        Ok(env) => env,
        Err(e) => panic!("java peer unavailable: {e}"),
    }
}

/// Escapes a key or value for a java.util.Properties file.
fn escape_property(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '=' | ':' | '#' | '!' | ' ' => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                out.push_str(&format!("\\u{:04x}", c as u32 & 0xffff));
            }
            c => out.push(c),
        }
    }
    out
}

// ---------------------------------------------------------------------------- events

fn read_events(lines: Lines, state: &Mutex<State>) {
    let lock = || state.lock().unwrap_or_else(|e| e.into_inner());
    for (at, line) in lines {
        let mut s = lock();
        match parse_event(&line) {
            Some((name, partitions, success)) => {
                match name.as_str() {
                    "startup_complete" => s.started = true,
                    "partitions_assigned" => s.assignment.extend(partitions.iter().cloned()),
                    "partitions_revoked" => {
                        for tp in &partitions {
                            s.assignment.remove(tp);
                        }
                    }
                    // close() revokes first; whatever is left is not owned any more either.
                    "shutdown_complete" => s.assignment.clear(),
                    _ => {}
                }
                s.events.push(PeerEvent {
                    at,
                    name,
                    partitions,
                    success,
                });
            }
            None => s.other_lines.push(line),
        }
    }
    lock().eof = true;
}

/// `"name"`, for the rebalance callbacks `"partitions"`, and for offsets_committed `"success"`
/// of one stdout line. None if the line is not a JSON object with a string name (or its
/// partitions are malformed).
fn parse_event(line: &str) -> Option<(String, Vec<Tp>, Option<bool>)> {
    let event: Value = serde_json::from_str(line).ok()?;
    let name = event.get("name")?.as_str()?;
    let mut partitions = Vec::new();
    if name == "partitions_assigned" || name == "partitions_revoked" {
        for tp in event.get("partitions")?.as_array()? {
            let topic = tp.get("topic")?.as_str()?;
            let partition = i32::try_from(tp.get("partition")?.as_i64()?).ok()?;
            partitions.push((topic.to_owned(), partition));
        }
    }
    let success = match event.get("success") {
        Some(Value::Bool(b)) if name == "offsets_committed" => Some(*b),
        _ => None,
    };
    Some((name.to_owned(), partitions, success))
}

/// The command line that starts Kafka's own VerifiableConsumer, up to its flags: the `java`
/// executable and the JVM arguments ending with the main class. Used to drive it exactly like
/// the crate's `verifiable_consumer` example (tests/verifiable_consumer.rs). The flags are the
/// caller's: they must be ones the [`peer_version`] release takes.
pub fn verifiable_consumer_command() -> (PathBuf, Vec<String>) {
    (jvm::java(), jvm_args(peer_env()))
}

/// The JVM's arguments up to VerifiableConsumer's main class: a small heap, quick start, the
/// peers' log4j2 (3.x: log4j 1) configuration, the kafka-tools jars.
fn jvm_args(peer: &PeerEnv) -> Vec<String> {
    let log_config = if peer.line >= (4, 0) {
        jvm::log4j2_flag(&peer.log4j)
    } else {
        format!("-Dlog4j.configuration=file:{}", peer.log4j.display())
    };
    let classpath = format!("{}/*", peer.libs.display());
    jvm::jvm_args(log_config, classpath, MAIN_CLASS)
}
