//! A real Java Kafka Streams application as a peer in a streams group (KIP-1071), and the
//! Admin calls around it: `tests/kafka/StreamsPeer.java` on kafka-streams 4.4 (jars from
//! `tests/kafka/peer.sh streams-libs`), compiled once per test process into
//! `target/streams-peer/classes-<hash of the source>` and run as a child JVM.
//!
//! The application (see the head of StreamsPeer.java) has two subtopologies and a state store:
//! `input -> selectKey -> <group>-rekey-repartition` (subtopology "0") and
//! `<group>-rekey-repartition -> count(store "counts", changelog <group>-counts-changelog) ->
//! output` (subtopology "1"). With an input topic of N partitions its tasks are `0_0..0_{N-1}`
//! and `1_0..1_{N-1}` ([`expected_tasks`]); standby tasks exist only for subtopology "1" (the
//! stateful one).
//!
//! The peer prints a status line (state, process id, active and standby task ids) whenever it
//! changes and every second; [`StreamsPeer::status`] is the latest, [`StreamsPeer::wait_for`]
//! polls. Closing its stdin makes it `close()` and exit ([`StreamsPeer::close`]). Its stderr
//! (WARN and up, Kafka Streams and consumer internals at INFO, and every StreamsGroupHeartbeat
//! request and response as `NetworkClient` logs them at DEBUG) goes to
//! `target/streams-peer/<name>.stderr.log`; [`StreamsPeer::heartbeats`] reads the requests back,
//! e.g. the topology of the first (epoch 0) one.
//!
//! The Admin calls ([`set_standby_replicas`], [`describe_group`]) run the same program's
//! `admin` mode and block the calling thread for a JVM start (about a second); call them from
//! `tokio::task::spawn_blocking` when a Rust member must keep heartbeating meanwhile.
//!
//! The JVM plumbing (java, javac, setpriv, the child and its stdout) is [`super::jvm`]'s.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use serde_json::Value;

use super::jvm::{self, Jvm, Lines};

const MAIN_CLASS: &str = "StreamsPeer";
/// StreamsPeer closes with a 30 s timeout; a little more before SIGKILL.
const CLOSE_GRACE: Duration = Duration::from_secs(40);

/// The task ids ("<subtopology>_<partition>") of StreamsPeer's topology over an input topic
/// of `partitions` partitions: both subtopologies, every partition.
pub fn expected_tasks(partitions: i32) -> BTreeSet<String> {
    (0..partitions)
        .flat_map(|p| [format!("0_{p}"), format!("1_{p}")])
        .collect()
}

/// The repartition topic of StreamsPeer's topology in `group` (application.id = group).
pub fn repartition_topic(group: &str) -> String {
    format!("{group}-rekey-repartition")
}

/// The changelog topic of StreamsPeer's state store in `group`.
pub fn changelog_topic(group: &str) -> String {
    format!("{group}-counts-changelog")
}

/// The topology Kafka Streams 4.4 sends in its joining (epoch 0) StreamsGroupHeartbeat for
/// StreamsPeer's application in `group` over `input`, as kafka-clients prints it
/// (`StreamsGroupHeartbeatRequestData.Topology.toString()`, what [`StreamsPeer::heartbeats`]
/// shows). Subtopologies sorted by id, topic lists by name, configs by key; partitions 0 (unset:
/// the broker derives them) and replication factor -1 (StreamsConfig `replication.factor`
/// default: the broker's default) for every internal topic; no copartition groups, no regex.
/// The broker refuses (INVALID_REQUEST "Topology updates are not supported yet.") a join whose
/// topology differs from the group's in anything but the order of subtopologies.
pub fn java_join_topology(group: &str, input: &str) -> String {
    let repartition = repartition_topic(group);
    let changelog = changelog_topic(group);
    format!(
        "Topology(epoch=0, subtopologies=[\
         Subtopology(subtopologyId='0', sourceTopics=[{input}], sourceTopicRegex=[], \
         stateChangelogTopics=[], repartitionSinkTopics=[{repartition}], \
         repartitionSourceTopics=[], copartitionGroups=[]), \
         Subtopology(subtopologyId='1', sourceTopics=[], sourceTopicRegex=[], \
         stateChangelogTopics=[TopicInfo(name='{changelog}', partitions=0, replicationFactor=-1, \
         topicConfigs=[KeyValue(key='cleanup.policy', value='compact'), \
         KeyValue(key='message.timestamp.type', value='CreateTime')])], \
         repartitionSinkTopics=[], \
         repartitionSourceTopics=[TopicInfo(name='{repartition}', partitions=0, replicationFactor=-1, \
         topicConfigs=[KeyValue(key='cleanup.policy', value='delete'), \
         KeyValue(key='message.timestamp.type', value='CreateTime'), \
         KeyValue(key='retention.ms', value='-1'), \
         KeyValue(key='segment.bytes', value='52428800')])], copartitionGroups=[])])"
    )
}

/// StreamsPeer.java's topology in `group` over `input`, as Kafka Streams 4.4 declares it
/// (java_join_topology): `input -> <group>-rekey-repartition` (subtopology 0),
/// `<group>-rekey-repartition -> count (changelog <group>-counts-changelog)` (subtopology 1);
/// partitions left to the broker (0), replication factor -1 (the broker's default), the same
/// topic configs. The broker refuses a member whose topology differs from the group's.
pub fn topology(group: &str, input: &str) -> consumer_membership::streams::StreamsTopology {
    let repartition = repartition_topic(group);
    let mut source = consumer_membership::streams::Subtopology::new("0", [input.to_owned()]);
    source.repartition_sink_topics.insert(repartition.clone());
    let counting = consumer_membership::streams::Subtopology::new("1", Vec::<String>::new())
        .with_changelog(consumer_membership::streams::InternalTopic::changelog(
            changelog_topic(group),
        ))
        .with_repartition_source(consumer_membership::streams::InternalTopic::repartition(
            repartition,
        ));
    consumer_membership::streams::StreamsTopology::new(0, vec![source, counting])
}

/// One status line of the peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerStatus {
    /// When the line was read, counted from the spawn.
    pub at: Duration,
    /// `KafkaStreams.state()`: CREATED, REBALANCING, RUNNING, PENDING_SHUTDOWN, ...
    pub state: String,
    /// The process id Kafka Streams sends in its heartbeats (a UUID).
    pub process_id: Option<String>,
    /// `--instance-id` as given (Kafka Streams sends it with "-<thread index>" appended).
    pub instance_id: Option<String>,
    /// Active task ids held by the stream threads (`metadataForLocalThreads`).
    pub active: BTreeSet<String>,
    /// Standby task ids held by the stream threads.
    pub standby: BTreeSet<String>,
}

impl PeerStatus {
    fn parse(line: &Value, at: Duration) -> Option<PeerStatus> {
        let strings = |key: &str| -> Option<BTreeSet<String>> {
            line.get(key)?
                .as_array()?
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect()
        };
        Some(PeerStatus {
            at,
            state: line.get("state")?.as_str()?.to_owned(),
            process_id: line
                .get("process_id")
                .and_then(Value::as_str)
                .map(str::to_owned),
            instance_id: line
                .get("instance_id")
                .and_then(Value::as_str)
                .map(str::to_owned),
            active: strings("active")?,
            standby: strings("standby")?,
        })
    }

    /// The same holdings, ignoring when they were seen.
    fn same(&self, other: &PeerStatus) -> bool {
        PeerStatus {
            at: other.at,
            ..self.clone()
        } == *other
    }
}

#[derive(Default)]
struct State {
    /// Status lines that differ from the one before.
    statuses: Vec<PeerStatus>,
    /// Other events: closing, closed, error (the raw lines).
    events: Vec<Value>,
    /// Lines that are not JSON objects with a name.
    other_lines: Vec<String>,
    eof: bool,
}

/// Builder of a [`StreamsPeer`]; see [`StreamsPeer::builder`].
#[derive(Clone, Debug)]
pub struct StreamsPeerBuilder {
    bootstrap: String,
    group: String,
    input: String,
    output: String,
    instance_id: Option<String>,
    standby: Option<u32>,
    threads: u32,
    leave: bool,
}

impl StreamsPeerBuilder {
    /// `group.instance.id` (static membership, Kafka Streams 4.4 with the streams protocol:
    /// KAFKA-20169). Kafka Streams appends "-<thread index>" (from 1) per stream thread, so
    /// the member's instance id is e.g. `ID-1`.
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// `num.standby.replicas`. The streams protocol ignores it (Kafka Streams logs a warning):
    /// the group config `streams.num.standby.replicas` applies, see [`set_standby_replicas`].
    pub fn standby(mut self, n: u32) -> Self {
        self.standby = Some(n);
        self
    }

    /// `num.stream.threads` (default 1): one streams-group member per thread, all with the
    /// same process id.
    pub fn threads(mut self, n: u32) -> Self {
        self.threads = n;
        self
    }

    /// Close with `LEAVE_GROUP` (epoch -1 even for a static member) instead of the default
    /// (a static member leaves with -2 and keeps its assignment for the session timeout).
    pub fn leave_on_close(mut self) -> Self {
        self.leave = true;
        self
    }

    /// Starts the JVM (fetching the jars and compiling StreamsPeer.java first if this process
    /// has not yet done so). Returns at once; see [`StreamsPeer::wait_for`].
    pub fn spawn(self) -> StreamsPeer {
        StreamsPeer::spawn(self)
    }
}

/// A running Kafka Streams application in a streams group; killed on drop.
pub struct StreamsPeer {
    name: String,
    group: String,
    jvm: Jvm,
    state: Arc<Mutex<State>>,
}

impl StreamsPeer {
    /// An application with application.id `group` reading `input` and writing `output`.
    pub fn builder(
        bootstrap: impl Into<String>,
        group: impl Into<String>,
        input: impl Into<String>,
        output: impl Into<String>,
    ) -> StreamsPeerBuilder {
        StreamsPeerBuilder {
            bootstrap: bootstrap.into(),
            group: group.into(),
            input: input.into(),
            output: output.into(),
            instance_id: None,
            standby: None,
            threads: 1,
            leave: false,
        }
    }

    fn spawn(b: StreamsPeerBuilder) -> StreamsPeer {
        let env = env();
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let label = b.instance_id.clone().unwrap_or_else(|| format!("p{seq}"));
        let name = jvm::sanitize(&format!("{}-{label}-{}-{seq}", b.group, std::process::id()));
        let stderr_path = env.dir.join(format!("{name}.stderr.log"));
        let state_dir = env.dir.join("state").join(&name);
        let _ = std::fs::remove_dir_all(&state_dir);
        std::fs::create_dir_all(&state_dir)
            .unwrap_or_else(|e| panic!("create {}: {e}", state_dir.display()));

        let mut args = env.jvm.clone();
        args.extend([
            "run".into(),
            "--bootstrap".into(),
            b.bootstrap,
            "--group".into(),
            b.group.clone(),
            "--input".into(),
            b.input,
            "--output".into(),
            b.output,
            "--threads".into(),
            b.threads.to_string(),
            "--state-dir".into(),
            state_dir.display().to_string(),
        ]);
        if let Some(id) = &b.instance_id {
            args.extend(["--instance-id".into(), id.clone()]);
        }
        if let Some(n) = b.standby {
            args.extend(["--standby".into(), n.to_string()]);
        }
        if b.leave {
            args.push("--leave".into());
        }
        // Stdin piped: closing it closes the application (close).
        let thread = format!("streams-peer-{seq}");
        let (jvm, state) = Jvm::spawn(MAIN_CLASS, &args, true, stderr_path, thread, read_lines);
        StreamsPeer {
            name,
            group: b.group,
            jvm,
            state,
        }
    }

    /// The JVM's process id.
    pub fn pid(&self) -> u32 {
        self.jvm.pid()
    }

    /// The file that receives the JVM's stderr and log output.
    pub fn stderr_path(&self) -> &Path {
        self.jvm.stderr_path()
    }

    /// The latest status line, if any yet.
    pub fn status(&self) -> Option<PeerStatus> {
        self.lock().statuses.last().cloned()
    }

    /// Every status line that differed from the one before, in order.
    pub fn statuses(&self) -> Vec<PeerStatus> {
        self.lock().statuses.clone()
    }

    /// The process id Kafka Streams sends (from its first status line).
    pub fn process_id(&self) -> Option<String> {
        self.lock()
            .statuses
            .iter()
            .find_map(|s| s.process_id.clone())
    }

    /// `"message"` of every `error` line (an uncaught exception in a stream thread).
    pub fn errors(&self) -> Vec<String> {
        self.lock()
            .events
            .iter()
            .filter(|e| e.get("name").and_then(Value::as_str) == Some("error"))
            .map(|e| {
                e.get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned()
            })
            .collect()
    }

    /// Whether the JVM has closed its stdout (exited).
    pub fn exited(&self) -> bool {
        self.lock().eof
    }

    /// Polls (tokio sleep) until the latest status satisfies `pred`; returns it, or None on
    /// timeout or if the JVM exited first.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        mut pred: impl FnMut(&PeerStatus) -> bool,
    ) -> Option<PeerStatus> {
        let check = || {
            let s = self.lock();
            match s.statuses.last().filter(|st| pred(st)) {
                Some(status) => Some(Some(status.clone())),
                None => s.eof.then_some(None),
            }
        };
        jvm::wait_until(timeout, check).await.flatten()
    }

    /// The StreamsGroupHeartbeat requests this peer sent so far, as `NetworkClient` logged
    /// them: the text after "to node ...: ", i.e. `StreamsGroupHeartbeatRequestData(...)`
    /// with every field (the first one, memberEpoch=0, carries the topology).
    pub fn heartbeats(&self) -> Vec<String> {
        log_lines(
            self.stderr_path(),
            "Sending STREAMS_GROUP_HEARTBEAT request",
        )
    }

    /// The StreamsGroupHeartbeat responses so far: `StreamsGroupHeartbeatResponseData(...)`.
    pub fn heartbeat_responses(&self) -> Vec<String> {
        log_lines(
            self.stderr_path(),
            "Received STREAMS_GROUP_HEARTBEAT response",
        )
    }

    /// Whether the stderr / log output so far contains `needle`.
    pub fn log_contains(&self, needle: &str) -> bool {
        std::fs::read_to_string(self.stderr_path()).is_ok_and(|s| s.contains(needle))
    }

    /// A multi-line description for assertion messages: name, pid, status history, other
    /// lines, the stderr file and its last lines.
    pub fn report(&self, what: &str) -> String {
        let mut out = format!(
            "streams peer {} (group {}, pid {}): {what}\n",
            self.name,
            self.group,
            self.pid()
        );
        {
            let s = self.lock();
            for st in &s.statuses {
                out += &format!(
                    "  {:>7.3}s {} process {:?} active {:?} standby {:?}\n",
                    st.at.as_secs_f64(),
                    st.state,
                    st.process_id,
                    st.active,
                    st.standby
                );
            }
            for e in &s.events {
                out += &format!("  event: {e}\n");
            }
            for l in &s.other_lines {
                out += &format!("  stdout: {l}\n");
            }
        }
        out + &self.jvm.stderr_report()
    }

    /// Graceful stop: closes stdin, so the application `close()`s (leaves the group: -1 for
    /// a dynamic member, -2 for a static one unless [`StreamsPeerBuilder::leave_on_close`])
    /// and exits; SIGKILL after 40 s. Returns whether it printed `closed` with a clean close.
    pub async fn close(mut self) -> bool {
        self.jvm.close(CLOSE_GRACE).await;
        self.lock().events.iter().any(|e| {
            e.get("name").and_then(Value::as_str) == Some("closed")
                && e.get("clean").and_then(Value::as_bool) == Some(true)
        })
    }

    /// SIGKILL now: a crashed application (no leave heartbeat; the coordinator notices when
    /// the session times out).
    pub fn kill(mut self) {
        self.jvm.finish();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn read_lines(lines: Lines, state: &Mutex<State>) {
    let lock = || state.lock().unwrap_or_else(|e| e.into_inner());
    for (at, line) in lines {
        let value: Option<Value> = serde_json::from_str(&line).ok();
        let mut s = lock();
        match value {
            Some(v) if v.get("name").and_then(Value::as_str) == Some("status") => {
                match PeerStatus::parse(&v, at) {
                    Some(st) => {
                        if !s.statuses.last().is_some_and(|last| last.same(&st)) {
                            s.statuses.push(st);
                        }
                    }
                    None => s.other_lines.push(line),
                }
            }
            Some(v) if v.get("name").and_then(Value::as_str).is_some() => s.events.push(v),
            _ => s.other_lines.push(line),
        }
    }
    lock().eof = true;
}

// ---------------------------------------------------------------------------- admin

/// Sets the group config `streams.num.standby.replicas` of `group` (incrementalAlterConfigs
/// on a GROUP resource). The broker takes it before the group exists; it must not exceed the
/// broker's `group.streams.max.standby.replicas` (default 2).
pub fn set_standby_replicas(bootstrap: &str, group: &str, n: u32) -> Result<(), String> {
    set_group_config(
        bootstrap,
        group,
        &[("streams.num.standby.replicas", &n.to_string())],
    )
}

/// Sets group configs of `group` (incrementalAlterConfigs SET on a GROUP resource), e.g.
/// `streams.session.timeout.ms` (within the broker's group.streams.min/max.session.timeout.ms)
/// or `streams.heartbeat.interval.ms`. Err with the broker's refusal
/// (InvalidConfigurationException ...).
pub fn set_group_config(
    bootstrap: &str,
    group: &str,
    configs: &[(&str, &str)],
) -> Result<(), String> {
    let mut args = vec!["set-config".to_owned()];
    args.extend(configs.iter().map(|(k, v)| format!("{k}={v}")));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    admin(bootstrap, group, &args).map(|_| ())
}

/// Creates `topic` with `partitions` partitions (replication factor 1) through the Java Admin.
pub fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> Result<(), String> {
    admin(
        bootstrap,
        "-",
        &["create-topic", topic, &partitions.to_string()],
    )
    .map(|_| ())
}

/// `describeStreamsGroups(group)`; Err with the exception (e.g. GroupIdNotFoundException)
/// when the broker refused.
pub fn describe_group(bootstrap: &str, group: &str) -> Result<GroupDescription, String> {
    let v = admin(bootstrap, group, &["describe"])?;
    let g = v
        .get("group")
        .ok_or_else(|| format!("describe without a group: {v}"))?;
    GroupDescription::parse(g).ok_or_else(|| format!("unexpected describe output: {g}"))
}

/// What `describeStreamsGroups` answered for one group.
#[derive(Clone, Debug)]
pub struct GroupDescription {
    /// `GroupState`: Empty, NotReady, Assigning, Reconciling, Stable, Dead.
    pub state: String,
    pub group_epoch: i64,
    pub target_assignment_epoch: i64,
    pub topology_epoch: i64,
    pub members: Vec<DescribedMember>,
    /// The topology as the broker holds it (StreamsPeer.java's JSON: subtopology_id,
    /// source_topics, repartition_sink_topics, repartition_source_topics and
    /// state_changelog_topics with name, partitions, replication_factor, configs).
    pub subtopologies: Vec<Value>,
}

/// One member of a [`GroupDescription`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescribedMember {
    pub member_id: String,
    pub member_epoch: i64,
    pub instance_id: Option<String>,
    pub process_id: String,
    pub client_id: String,
    /// The current assignment (task ids "<subtopology>_<partition>").
    pub active: BTreeSet<String>,
    pub standby: BTreeSet<String>,
    pub warmup: BTreeSet<String>,
    /// The target assignment's active tasks.
    pub target_active: BTreeSet<String>,
}

impl GroupDescription {
    fn parse(g: &Value) -> Option<GroupDescription> {
        let tasks = |a: &Value, key: &str| -> Option<BTreeSet<String>> {
            a.get(key)?
                .as_array()?
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect()
        };
        let mut members = Vec::new();
        for m in g.get("members")?.as_array()? {
            let a = m.get("assignment")?;
            members.push(DescribedMember {
                member_id: m.get("member_id")?.as_str()?.to_owned(),
                member_epoch: m.get("member_epoch")?.as_i64()?,
                instance_id: m
                    .get("instance_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                process_id: m.get("process_id")?.as_str()?.to_owned(),
                client_id: m.get("client_id")?.as_str()?.to_owned(),
                active: tasks(a, "active")?,
                standby: tasks(a, "standby")?,
                warmup: tasks(a, "warmup")?,
                target_active: tasks(m.get("target_assignment")?, "active")?,
            });
        }
        Some(GroupDescription {
            state: g.get("state")?.as_str()?.to_owned(),
            group_epoch: g.get("group_epoch")?.as_i64()?,
            target_assignment_epoch: g.get("target_assignment_epoch")?.as_i64()?,
            topology_epoch: g.get("topology_epoch")?.as_i64()?,
            members,
            subtopologies: g.get("subtopologies")?.as_array()?.clone(),
        })
    }
}

/// Checks a task split over processes: `holders` is (process id, active tasks, standby
/// tasks) per member (several members may share a process). Ok when every task of
/// `expected` is active exactly once group-wide, nothing outside `expected` is held, and no
/// process holds a standby of a task it holds active (nor the same task twice in one role).
/// Err names every violation.
pub fn check_split(
    expected: &BTreeSet<String>,
    holders: &[(String, BTreeSet<String>, BTreeSet<String>)],
) -> Result<(), String> {
    let mut problems = Vec::new();
    let mut active_owner: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for (process, active, _) in holders {
        for t in active {
            active_owner.entry(t).or_default().push(process);
        }
    }
    for t in expected {
        match active_owner.get(t.as_str()).map(Vec::len) {
            Some(1) => {}
            None => problems.push(format!("task {t} is active nowhere")),
            Some(n) => problems.push(format!(
                "task {t} is active {n} times: {:?}",
                active_owner[t.as_str()]
            )),
        }
    }
    for (t, owners) in &active_owner {
        if !expected.contains(*t) {
            problems.push(format!("unexpected active task {t} on {owners:?}"));
        }
    }
    let mut per_process: std::collections::BTreeMap<&str, (Vec<&str>, Vec<&str>)> =
        Default::default();
    for (process, active, standby) in holders {
        let e = per_process.entry(process).or_default();
        e.0.extend(active.iter().map(String::as_str));
        e.1.extend(standby.iter().map(String::as_str));
    }
    for (process, (active, standby)) in &per_process {
        let active_set: BTreeSet<&str> = active.iter().copied().collect();
        let standby_set: BTreeSet<&str> = standby.iter().copied().collect();
        for t in active_set.intersection(&standby_set) {
            problems.push(format!("process {process} holds {t} active and standby"));
        }
        if standby_set.len() != standby.len() {
            problems.push(format!(
                "process {process} holds a standby twice: {standby:?}"
            ));
        }
        for t in &standby_set {
            if !expected.contains(*t) {
                problems.push(format!("unexpected standby task {t} on {process}"));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Runs `StreamsPeer admin --bootstrap B --group G ARGS`; its one JSON line if `"ok"`.
fn admin(bootstrap: &str, group: &str, args: &[&str]) -> Result<Value, String> {
    let mut cmd_args = env().jvm.clone();
    cmd_args.extend([
        "admin".into(),
        "--bootstrap".into(),
        bootstrap.into(),
        "--group".into(),
        group.into(),
    ]);
    cmd_args.extend(args.iter().map(|a| a.to_string()));
    let java = jvm::java();
    let out = Command::new(&java)
        .args(&cmd_args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("run {}: {e}", java.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'));
    let value: Option<Value> = line.and_then(|l| serde_json::from_str(l).ok());
    match value {
        Some(v) if v.get("ok") == Some(&Value::Bool(true)) => Ok(v),
        Some(v) => Err(v
            .get("error")
            .and_then(Value::as_str)
            .map_or_else(|| v.to_string(), str::to_owned)),
        None => Err(format!(
            "StreamsPeer admin {args:?} printed no answer ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

// ---------------------------------------------------------------------------- environment

struct Env {
    /// JVM flags, classpath (the compiled StreamsPeer, then the jars) and the main class.
    jvm: Vec<String>,
    /// Classes, stderr logs, state dirs, the log4j2 configuration.
    dir: PathBuf,
}

/// What the streams peer logs beyond the consumer peers' log4j2 config ([`jvm::LOG4J2`]:
/// everything to stderr, stdout carries the JSON lines; the consumer internals at INFO): Kafka
/// Streams at INFO, and NetworkClient at DEBUG for the StreamsGroupHeartbeat requests and
/// responses only.
const LOG4J2_STREAMS: &str = "\
logger.streams.name = org.apache.kafka.streams
logger.streams.level = INFO
logger.nc.name = org.apache.kafka.clients.NetworkClient
logger.nc.level = DEBUG
logger.nc.filter.hb.type = RegexFilter
logger.nc.filter.hb.regex = .*STREAMS_GROUP_HEARTBEAT.*
logger.nc.filter.hb.onMatch = ACCEPT
logger.nc.filter.hb.onMismatch = DENY
";

/// The Kafka release of the streams jars: `KAFKA_VERSION` (with-broker.sh exports the
/// broker's) else 4.4.0.
pub fn streams_version() -> String {
    jvm::kafka_version().unwrap_or_else(|| "4.4.0".into())
}

/// Fetches the jars (`peer.sh streams-libs`) and compiles StreamsPeer.java, once per test
/// process.
fn env() -> &'static Env {
    static ENV: OnceLock<Result<Env, String>> = OnceLock::new();
    let env = ENV.get_or_init(|| {
        let libs = jvm::peer_libs("streams-libs", Some(&streams_version()))?;
        let dir = jvm::target_dir("streams-peer")?;
        let log4j = dir.join("log4j2.properties");
        jvm::write_config(&log4j, &format!("{}{LOG4J2_STREAMS}", jvm::LOG4J2))?;
        let jars = format!("{}/*", libs.display());
        let classes = jvm::compile(MAIN_CLASS, &jars, &dir)?;
        let classpath = format!("{}:{jars}", classes.display());
        let jvm = jvm::jvm_args(jvm::log4j2_flag(&log4j), classpath, MAIN_CLASS);
        Ok(Env { jvm, dir })
    });
    match env {
        Ok(env) => env,
        Err(e) => panic!("streams peer unavailable: {e}"),
    }
}

/// The text after "): " or "to node ...: " of every log line of `path` containing `marker`:
/// the logged message's data.
fn log_lines(path: &Path, marker: &str) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter(|l| l.contains(marker))
        .filter_map(|l| {
            let data = l.find("Data(")?;
            let start = l[..data].rfind(' ').map_or(data, |s| s + 1);
            let end = l
                .rfind(" (org.apache.kafka.clients.NetworkClient)")
                .unwrap_or(l.len());
            Some(l[start..end].to_owned())
        })
        .collect()
}
