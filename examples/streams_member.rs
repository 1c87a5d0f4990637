//! A word count as a Kafka Streams application would run it, on [`StreamsGroupMember`]s: the
//! membership (KIP-1071 streams group, tasks, commits) from this crate, the records from
//! [rskafka](https://docs.rs/rskafka). It declares exactly the topology of the Java peer
//! (`tests/kafka/StreamsPeer.java`), so it can join a group a Kafka Streams instance created, and
//! Kafka Streams can join one it created:
//!
//! ```text
//! StreamsBuilder b = new StreamsBuilder();
//! b.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
//!     .selectKey((k, v) -> v)                                              // subtopology 0
//!     .groupByKey(Grouped.with("rekey", Serdes.String(), Serdes.String())) // <group>-rekey-repartition
//!     .count(Materialized.as("counts"))                                    // subtopology 1, <group>-counts-changelog
//!     .toStream().to(output, Produced.with(Serdes.String(), Serdes.Long()));
//! ```
//!
//! ```text
//! cargo run --example streams_member -- --group wc --input words --output word-counts
//! ```
//!
//! Each member runs its **active** tasks, one tokio task each (standby and warm-up tasks are only
//! reported):
//!
//! - task `0_p` reads partition p of `--input` and writes each record with a value to
//!   `<group>-rekey-repartition`, keyed (and valued) by that value, in the partition Kafka's
//!   default partitioner picks: murmur2 of the key bytes, made positive, modulo the partition
//!   count. Records without a value are dropped, as Kafka Streams drops null keys before a
//!   repartition topic.
//! - task `1_p` restores its counts from partition p of `<group>-counts-changelog` (the last
//!   value per key), then reads partition p of the repartition topic and, per record, writes the
//!   key's new count to the changelog (partition p) and to `--output` (default partitioner),
//!   as Kafka Streams' `Serdes.Long()`: 8 bytes big-endian.
//!
//! A task starts at its input partition's committed offset (earliest without one). The member
//! commits the positions of its tasks every `--commit-interval-ms`, fenced by its member epoch,
//! only past records whose output the broker acknowledged (at least once, as Kafka Streams'
//! default); a revoked task is stopped between batches and committed before the revocation
//! ticket goes back; a lost task is dropped without a commit.
//!
//! `--members N` runs N members in this process: one process id, one `StreamsProcess` (the task
//! guard), as Kafka Streams runs N stream threads. `--instance-prefix P` makes them static
//! members `P-0` ... `P-(N-1)`. Ctrl-C (or SIGTERM) stops the tasks, commits, closes every member
//! with `CloseOptions::Default` and exits 0; a member that stops on a fatal error stops the
//! others and the process exits 1.
//!
//! Output, one line per event on stdout; with `--json` one JSON object per line:
//!
//! ```text
//! {"event":"ready","process_id":"<uuid>"}                      all members started
//! {"event":"tasks","member":0,"member_id":"..","epoch":5,
//!  "active":["0_1","1_4"],"standby":[],"warmup":[]}            a member's tasks changed
//! {"event":"committed","member":0,"topic":"words","partition":1,"offset":42}
//!                                                              one per partition committed
//! {"event":"error","member":0,"message":".."}                  a member's (or its task's) error
//! ```
//!
//! Other news (statuses, the task guard's interventions) goes to stderr as text with `--json`.

#[path = "common/fetch.rs"]
mod fetch;
#[path = "common/shutdown.rs"]
mod shutdown;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use clap::Parser;
use consumer_membership::streams::{
    InternalTopic, StreamsConfig, StreamsEvent, StreamsGroupMember, StreamsMemberHandle,
    StreamsProcess, StreamsTasks, StreamsTopology, Subtopology, TaskId,
};
use consumer_membership::{
    ClientConfig, CloseOptions, CommitOffset, GroupConfig, MemberIdFile, TcpTransport,
    TopicPartition,
};
use rskafka::BackoffConfig;
use rskafka::client::error::{Error as RecordsError, ProtocolError};
use rskafka::client::partition::{Compression, OffsetAt, PartitionClient, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder};
use rskafka::record::{Record, RecordAndOffset};
use serde_json::Value;
use tokio::sync::{oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Joins a streams group with StreamsPeer.java's word-count topology and runs its active tasks.
#[derive(Debug, Parser)]
#[command(name = "streams_member", args_override_self = true)]
#[command(mut_arg("group", |a| a.help("Streams group to join (Kafka Streams' application.id)")))]
struct Args {
    #[command(flatten)]
    connect: fetch::GroupArgs,
    /// Input topic: String values, one word each
    #[arg(long, value_name = "TOPIC")]
    input: String,
    /// Output topic: word -> count (String key, 8-byte big-endian Long value)
    #[arg(long, value_name = "TOPIC")]
    output: String,
    /// Members in this process (sharing its process id and task guard)
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..))]
    members: u16,
    /// Static members with group.instance.id P-0 .. P-(N-1) [default: dynamic members]
    #[arg(long, value_name = "P")]
    instance_prefix: Option<String>,
    /// Process id sent to the coordinator [default: a random UUID, as Kafka Streams draws]
    #[arg(long, value_name = "ID")]
    process_id: Option<String>,
    /// How often the tasks' positions are committed
    #[arg(long, value_name = "MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..))]
    commit_interval_ms: u64,
    /// Keep each member's id in DIR/<member>.id across restarts (a static member that
    /// crashed is back at once instead of waiting out its old session)
    #[arg(long, value_name = "DIR")]
    member_id_dir: Option<std::path::PathBuf>,
    /// One JSON object per line on stdout
    #[arg(long)]
    json: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("streams_member: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What every member and task shares.
struct Shared {
    out: Out,
    records: Client,
    topology: StreamsTopology,
    repartition: String,
    changelog: String,
    output: String,
    commit_interval: Duration,
}

async fn run(args: Args) -> Result<(), BoxError> {
    let mut shutdown = shutdown::Shutdown::register();
    let bootstrap = fetch::bootstrap_or_exit(args.connect.bootstrap);
    let group = args.connect.group;
    let out = Out { json: args.json };
    let process_id = (args.process_id).unwrap_or_else(|| {
        let uuid = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
        uuid.to_string()
    });
    // rskafka retries until the deadline (its default is forever), then the task reports the
    // error and tries again.
    let backoff = BackoffConfig {
        deadline: Some(Duration::from_secs(30)),
        ..BackoffConfig::default()
    };
    let brokers = bootstrap.split(',').map(str::to_owned).collect();
    let records = ClientBuilder::new(brokers)
        .client_id("streams-member")
        .backoff_config(backoff)
        .build()
        .await
        .map_err(|e| format!("connecting to {bootstrap}: {e}"))?;
    let (repartition, changelog) = internal_topics(&group);
    let shared = Arc::new(Shared {
        out,
        records,
        topology: topology(&group, &args.input),
        repartition,
        changelog,
        output: args.output,
        commit_interval: Duration::from_millis(args.commit_interval_ms),
    });

    // One StreamsProcess for all members of this process: the process id and the task guard.
    let process = StreamsProcess::new(process_id.clone(), None);
    let (stop, stopped) = watch::channel(false);
    let mut members = JoinSet::new();
    // The member id files stay open (locked) while the members run.
    let mut kept = Vec::new();
    for i in 0..usize::from(args.members) {
        let mut client = ClientConfig::new(&bootstrap)?;
        client.client_id = format!("streams-member-{i}");
        let mut config = GroupConfig::new(&group);
        if let Some(prefix) = &args.instance_prefix {
            config = config.with_instance_id(format!("{prefix}-{i}"));
        }
        if let Some(dir) = &args.member_id_dir {
            let name = (args.instance_prefix.as_ref())
                .map_or(format!("member-{i}"), |p| format!("{p}-{i}"));
            let file = MemberIdFile::open(dir.join(format!("{name}.id")))
                .map_err(|e| format!("member {i}: {e}"))?;
            config = file.configure(config);
            kept.push(file);
        }
        let streams = StreamsConfig::new(shared.topology.clone());
        // One transport per member: a broker serves one request per connection at a time.
        let transport = Arc::new(TcpTransport::new(client));
        let member = StreamsGroupMember::start(transport, config, streams, process.clone())
            .map_err(|e| format!("member {i}: {e}"))?;
        members.spawn(run_member(shared.clone(), i, member, stopped.clone()));
    }
    out.ready(&process_id);

    // Until a signal, or a member that stopped on its own (a fatal error).
    let first = tokio::select! {
        () = shutdown.requested() => None,
        done = members.join_next() => done,
    };
    stop.send_replace(true);
    let rest = members.join_all().await.into_iter().map(Ok);
    let failed = (first.into_iter().chain(rest))
        .filter(|done| !matches!(done, Ok(Ok(()))))
        .count();
    match failed {
        0 => Ok(()),
        n => Err(format!("{n} member(s) stopped with an error").into()),
    }
}

/// StreamsPeer.java's topology, as Kafka Streams 4.4 declares it (the broker refuses a member
/// whose topology differs from the group's in anything but the order of subtopologies).
fn topology(group: &str, input: &str) -> StreamsTopology {
    let (repartition, changelog) = internal_topics(group);
    let mut rekey = Subtopology::new("0", [input]);
    rekey.repartition_sink_topics.insert(repartition.clone());
    let count = Subtopology::new("1", Vec::<String>::new())
        .with_repartition_source(InternalTopic::repartition(repartition))
        .with_changelog(InternalTopic::changelog(changelog));
    StreamsTopology::new(0, vec![rekey, count])
}

/// Kafka Streams' names for the repartition topic (`Grouped` name "rekey") and the changelog
/// (store "counts") of application `group`.
fn internal_topics(group: &str) -> (String, String) {
    let repartition = format!("{group}-rekey-repartition");
    (repartition, format!("{group}-counts-changelog"))
}

// ---------------------------------------------------------------------------------- members

/// One member and the tasks it runs.
struct Member {
    shared: Arc<Shared>,
    index: usize,
    handle: StreamsMemberHandle,
    member_id: String,
    epoch: i32,
    /// The tasks last reported (`tasks` line).
    owned: StreamsTasks,
    /// Tasks assigned but withheld by the process's task guard, as last reported.
    withheld: BTreeSet<TaskId>,
    /// Active tasks running.
    running: BTreeMap<TaskId, Running>,
    /// Active tasks whose committed offsets are still to be read (after a failed read).
    starting: BTreeSet<TaskId>,
    /// The last offset committed per input partition of a running task.
    committed: BTreeMap<TopicPartition, i64>,
}

/// An active task's tokio task.
struct Running {
    input: TopicPartition,
    /// The next offset to process (-1 until the task knows where it starts).
    next: Arc<AtomicI64>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// Runs member `index` until `stop` (then commits and closes it) or a fatal error.
async fn run_member(
    shared: Arc<Shared>,
    index: usize,
    mut member: StreamsGroupMember,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    let member_id = (member.snapshot().await).map_or_else(String::new, |s| s.member_id);
    let mut tick = tokio::time::interval(shared.commit_interval);
    let mut m = Member {
        shared,
        index,
        handle: member.handle(),
        member_id,
        epoch: 0,
        owned: StreamsTasks::default(),
        withheld: BTreeSet::new(),
        running: BTreeMap::new(),
        starting: BTreeSet::new(),
        committed: BTreeMap::new(),
    };
    let fatal = loop {
        tokio::select! {
            _ = stop.changed() => break None,
            _ = tick.tick() => {
                let _ = m.handle.poll().await;
                m.start_tasks().await;
                m.report_withheld().await;
                let positions = m.positions();
                m.commit(positions).await;
            }
            event = member.next_event() => match event {
                Some(StreamsEvent::Fatal(e)) => break Some(e.to_string()),
                Some(event) => m.on_event(event).await,
                None => break Some("the member's task ended".to_owned()),
            },
        }
    };
    let all: Vec<TaskId> = m.running.keys().cloned().collect();
    let positions = m.stop_tasks(&all).await;
    if let Some(e) = fatal {
        m.shared.out.error(index, format!("member stopped: {e}"));
        return Err(e);
    }
    // Commit before closing: the close releases the tasks without waiting for the application.
    m.commit(positions).await;
    let outcome = member.close(CloseOptions::Default).await;
    m.shared.out.info(index, format!("closed: {outcome:?}"));
    while let Some(event) = member.next_event().await {
        m.on_event(event).await; // TasksReleased { reason: Leaving, .. }, Closed
    }
    Ok(())
}

impl Member {
    async fn on_event(&mut self, event: StreamsEvent) {
        let out = self.shared.out;
        match event {
            StreamsEvent::TasksAssigned {
                added,
                owned,
                epoch,
            } => {
                self.epoch = epoch;
                self.starting.extend(added.active);
                self.start_tasks().await;
                self.report(owned);
            }
            StreamsEvent::TasksRevoking { active, ticket } => {
                // Stop between batches, commit, hand the ticket back (even if the commit failed).
                let positions = self.stop_tasks(&active).await;
                self.commit(positions).await;
                self.forget(&active);
                if let Err(e) = self.handle.complete_revocation(ticket).await {
                    out.error(self.index, format!("complete_revocation: {e}"));
                }
                let mut owned = self.owned.clone();
                owned.active.retain(|t| !active.contains(t));
                self.report(owned);
            }
            StreamsEvent::TasksReleased { tasks, owned, .. } => {
                // Standby and warm-up tasks (nothing runs for them); all tasks when closing.
                let active: Vec<TaskId> = tasks.active.into_iter().collect();
                self.stop_tasks(&active).await;
                self.forget(&active);
                self.report(owned);
            }
            StreamsEvent::TasksLost { tasks, reason } => {
                out.lost(self.index, &tasks, &reason.to_string());
                let active: Vec<TaskId> = tasks.active.iter().cloned().collect();
                self.stop_tasks(&active).await;
                self.forget(&active);
                let mut owned = self.owned.clone();
                for (task, _) in tasks.iter() {
                    owned.active.remove(task);
                    owned.standby.remove(task);
                    owned.warmup.remove(task);
                }
                self.report(owned);
            }
            StreamsEvent::StateChanged {
                member_id, epoch, ..
            } => {
                self.member_id = member_id;
                self.epoch = epoch;
            }
            StreamsEvent::TasksRefused { refused } => {
                out.error(
                    self.index,
                    format!("tasks of another topology: {refused:?}"),
                );
            }
            StreamsEvent::ConnectionTrouble { broker, error } => {
                out.error(self.index, format!("{broker}: {error}"));
            }
            StreamsEvent::NotJoined { error } => {
                out.error(self.index, format!("not in the group yet: {error}"));
            }
            StreamsEvent::StatusChanged { statuses } => {
                out.info(self.index, format!("statuses {statuses:?}"));
            }
            StreamsEvent::GuardIntervened(i) => out.info(self.index, format!("task guard: {i:?}")),
            StreamsEvent::InstanceHeld { instance_id, limit } => out.info(
                self.index,
                format!("instance id {instance_id} still held; retrying for up to {limit:?}"),
            ),
            _ => {}
        }
    }

    /// Reports `owned` if it differs from what was last reported.
    fn report(&mut self, owned: StreamsTasks) {
        if owned != self.owned {
            self.owned = owned;
            self.print_tasks();
        }
    }

    /// Reports the tasks again when the guard's withheld set changed.
    async fn report_withheld(&mut self) {
        let Some(snapshot) = self.handle.snapshot().await else {
            return;
        };
        let withheld: BTreeSet<TaskId> = snapshot.withheld.into_keys().collect();
        if withheld != self.withheld {
            self.withheld = withheld;
            self.print_tasks();
        }
    }

    fn print_tasks(&self) {
        let (index, id, epoch) = (self.index, &self.member_id, self.epoch);
        (self.shared.out).tasks(index, id, epoch, &self.owned, &self.withheld);
    }

    /// Starts the tasks of `starting` at their committed offsets (read in one call; on failure
    /// they wait for the next tick).
    async fn start_tasks(&mut self) {
        if self.starting.is_empty() {
            return;
        }
        let inputs: Vec<TopicPartition> = (self.starting.iter())
            .flat_map(|t| self.shared.topology.input_partitions(t))
            .collect();
        let committed = match self.handle.committed(inputs).await {
            Ok(committed) => committed,
            Err(e) => {
                self.shared.out.error(self.index, format!("committed: {e}"));
                return;
            }
        };
        for task in std::mem::take(&mut self.starting) {
            // One input partition per task in this topology.
            let Some(input) = self.shared.topology.input_partitions(&task).pop() else {
                continue;
            };
            let start = committed.get(&input).and_then(|c| c.offset);
            if let Some(offset) = start {
                self.committed.insert(input.clone(), offset);
            }
            let next = Arc::new(AtomicI64::new(start.unwrap_or(-1)));
            let (stop, stopped) = oneshot::channel();
            let job = TaskJob {
                shared: self.shared.clone(),
                member: self.index,
                task: task.clone(),
                input: input.clone(),
                next: next.clone(),
            };
            let task_handle = tokio::spawn(job.run(stopped));
            let running = Running {
                input,
                next,
                stop,
                task: task_handle,
            };
            self.running.insert(task, running);
        }
    }

    /// Stops `tasks` (waiting for the batch in hand to be written) and returns their positions.
    async fn stop_tasks(&mut self, tasks: &[TaskId]) -> Vec<(TopicPartition, i64)> {
        let mut positions = Vec::new();
        for task in tasks {
            self.starting.remove(task);
            if let Some(Running {
                input,
                next,
                stop,
                task,
            }) = self.running.remove(task)
            {
                drop(stop);
                let _ = task.await;
                positions.push((input, next.load(Ordering::Acquire)));
            }
        }
        positions
    }

    /// Forgets the commits of tasks no longer held.
    fn forget(&mut self, tasks: &[TaskId]) {
        for task in tasks {
            for tp in self.shared.topology.input_partitions(task) {
                self.committed.remove(&tp);
            }
        }
    }

    /// The positions of the running tasks.
    fn positions(&self) -> Vec<(TopicPartition, i64)> {
        (self.running.values())
            .map(|r| (r.input.clone(), r.next.load(Ordering::Acquire)))
            .collect()
    }

    /// Commits the positions that moved since their last commit; a failure is reported and the
    /// next commit tries again.
    async fn commit(&mut self, positions: Vec<(TopicPartition, i64)>) {
        let offsets: Vec<CommitOffset> = (positions.into_iter())
            .filter(|(tp, offset)| *offset >= 0 && self.committed.get(tp) != Some(offset))
            .map(|(tp, offset)| CommitOffset::new(tp, offset))
            .collect();
        if offsets.is_empty() {
            return;
        }
        match self.handle.commit(offsets.clone()).await {
            Ok(()) => {
                for c in offsets {
                    self.shared
                        .out
                        .committed(self.index, &c.partition, c.offset);
                    self.committed.insert(c.partition, c.offset);
                }
            }
            Err(e) => self.shared.out.error(self.index, format!("commit: {e}")),
        }
    }
}

// ------------------------------------------------------------------------------------ tasks

/// An active task: what it reads and where it keeps its position.
struct TaskJob {
    shared: Arc<Shared>,
    member: usize,
    task: TaskId,
    input: TopicPartition,
    next: Arc<AtomicI64>,
}

/// What a task writes, and the state of task `1_p`.
enum Work {
    /// `0_p`: re-key by value into the repartition topic (one client per partition).
    Rekey { repartition: Vec<PartitionClient> },
    /// `1_p`: count per key; the changelog's partition p, the output topic's partitions.
    Count {
        counts: HashMap<Vec<u8>, i64>,
        changelog: PartitionClient,
        output: Vec<PartitionClient>,
    },
}

impl TaskJob {
    /// Opens, then processes batch after batch until `stop` fires or is dropped; a stop cancels
    /// the opening or a fetch in flight, never a batch being written. Errors are reported and
    /// retried after a second.
    async fn run(self, mut stop: oneshot::Receiver<()>) {
        let pause = Duration::from_secs(1);
        let (input, mut work) = loop {
            let opened = tokio::select! {
                _ = &mut stop => return,
                opened = self.open() => opened,
            };
            match opened {
                Ok(opened) => break opened,
                Err(e) => self.report(format!("starting: {e}")),
            }
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(pause) => {}
            }
        };
        loop {
            let offset = self.next.load(Ordering::Acquire);
            let fetched = tokio::select! {
                _ = &mut stop => return,
                fetched = input.fetch_records(offset, 1..1_048_576, 500) => fetched,
            };
            let result = match fetched {
                Ok((records, _)) => self.process(&mut work, records).await,
                Err(RecordsError::ServerError {
                    protocol_error: ProtocolError::OffsetOutOfRange,
                    ..
                }) => match input.get_offset(OffsetAt::Earliest).await {
                    Ok(earliest) => {
                        self.report(format!("offset {offset} out of range: from {earliest}"));
                        self.next.store(earliest, Ordering::Release);
                        continue;
                    }
                    Err(e) => Err(e.into()),
                },
                Err(e) => Err(e.into()),
            };
            if let Err(e) = result {
                self.report(format!("at offset {offset}: {e}"));
                tokio::select! {
                    _ = &mut stop => return,
                    _ = tokio::time::sleep(pause) => {}
                }
            }
        }
    }

    fn report(&self, message: String) {
        let (task, tp) = (&self.task, &self.input);
        (self.shared.out).error(self.member, format!("task {task} ({tp}): {message}"));
    }

    /// The input's client, where to start (earliest without a commit), and what the task writes
    /// (task `1_p` restores its counts first).
    async fn open(&self) -> Result<(PartitionClient, Work), BoxError> {
        let records = &self.shared.records;
        let retry = UnknownTopicHandling::Retry;
        let input =
            (records.partition_client(self.input.topic(), self.input.partition, retry)).await?;
        if self.next.load(Ordering::Acquire) < 0 {
            let earliest = input.get_offset(OffsetAt::Earliest).await?;
            self.next.store(earliest, Ordering::Release);
        }
        let work = match self.task.subtopology.as_str() {
            "0" => Work::Rekey {
                repartition: partitions(records, &self.shared.repartition).await?,
            },
            _ => {
                let topic = self.shared.changelog.as_str();
                let changelog = records.partition_client(topic, self.task.partition, retry);
                let changelog = changelog.await?;
                Work::Count {
                    counts: restore(&changelog).await?,
                    changelog,
                    output: partitions(records, &self.shared.output).await?,
                }
            }
        };
        Ok((input, work))
    }

    /// Writes the output of `records` and only then moves the position past them.
    async fn process(
        &self,
        work: &mut Work,
        records: Vec<RecordAndOffset>,
    ) -> Result<(), BoxError> {
        let offset = self.next.load(Ordering::Acquire);
        let records: Vec<_> = records.into_iter().filter(|r| r.offset >= offset).collect();
        let Some(last) = records.last().map(|r| r.offset) else {
            return Ok(());
        };
        match work {
            Work::Rekey { repartition } => {
                let mut out = BTreeMap::<usize, Vec<Record>>::new();
                for RecordAndOffset { record, .. } in records {
                    // selectKey((k, v) -> v): the new key is the value; a null one is dropped.
                    let Some(value) = record.value.as_deref().map(string) else {
                        continue;
                    };
                    let p = partition_for(&value, repartition.len());
                    out.entry(p).or_default().push(Record {
                        key: Some(value.clone()),
                        value: Some(value),
                        ..record
                    });
                }
                for (p, batch) in out {
                    repartition[p]
                        .produce(batch, Compression::NoCompression)
                        .await?;
                }
            }
            Work::Count {
                counts,
                changelog,
                output,
            } => {
                // The new counts apply once both writes are acknowledged (a retried batch must
                // not count twice).
                let mut updated = HashMap::<Vec<u8>, i64>::new();
                let (mut log, mut out) = (Vec::new(), BTreeMap::<usize, Vec<Record>>::new());
                for RecordAndOffset { record, .. } in records {
                    let (Some(key), Some(_)) = (record.key.as_deref().map(string), &record.value)
                    else {
                        continue;
                    };
                    let before = updated.get(&key).or_else(|| counts.get(&key));
                    let count = before.copied().unwrap_or(0) + 1;
                    updated.insert(key.clone(), count);
                    let value = Some(count.to_be_bytes().to_vec());
                    let p = partition_for(&key, output.len());
                    log.push(Record {
                        key: Some(key.clone()),
                        value: value.clone(),
                        headers: BTreeMap::new(),
                        timestamp: record.timestamp,
                    });
                    let key = Some(key);
                    out.entry(p).or_default().push(Record {
                        key,
                        value,
                        ..record
                    });
                }
                changelog.produce(log, Compression::NoCompression).await?;
                for (p, batch) in out {
                    output[p].produce(batch, Compression::NoCompression).await?;
                }
                counts.extend(updated);
            }
        }
        self.next.store(last + 1, Ordering::Release);
        Ok(())
    }
}

/// A client for every partition of `topic`, by partition index.
async fn partitions(records: &Client, topic: &str) -> Result<Vec<PartitionClient>, BoxError> {
    let topics = records.list_topics().await?;
    let Some(found) = topics.into_iter().find(|t| t.name == topic) else {
        return Err(format!("topic {topic} does not exist").into());
    };
    let mut clients = Vec::new();
    for p in 0..i32::try_from(found.partitions.len())? {
        let error = UnknownTopicHandling::Error;
        clients.push(records.partition_client(topic, p, error).await?);
    }
    Ok(clients)
}

/// The counts in a changelog partition: the last value of each key up to the current end; a
/// record without a value deletes its key.
async fn restore(changelog: &PartitionClient) -> Result<HashMap<Vec<u8>, i64>, BoxError> {
    let end = changelog.get_offset(OffsetAt::Latest).await?;
    let mut offset = changelog.get_offset(OffsetAt::Earliest).await?;
    let mut counts = HashMap::new();
    while offset < end {
        let (records, _) = changelog.fetch_records(offset, 1..1_048_576, 500).await?;
        // No record left before the end (compacted away): restored.
        let Some(last) = records.last().map(|r| r.offset) else {
            break;
        };
        for RecordAndOffset { record, offset: at } in records {
            let Some(key) = record.key else { continue };
            match record.value {
                None => drop(counts.remove(&key)),
                Some(value) => {
                    let count = <[u8; 8]>::try_from(value.as_slice())
                        .map_err(|_| format!("changelog record at {at} is not a Long"))?;
                    counts.insert(key, i64::from_be_bytes(count));
                }
            }
        }
        offset = last + 1;
    }
    Ok(counts)
}

/// Bytes through Java's String serde: UTF-8, malformed sequences replaced by U+FFFD.
fn string(bytes: &[u8]) -> Vec<u8> {
    String::from_utf8_lossy(bytes).into_owned().into_bytes()
}

/// The partition Kafka's default partitioner (and Kafka Streams' for repartition topics) picks
/// for a key: `Utils.toPositive(Utils.murmur2(key)) % partitions`.
fn partition_for(key: &[u8], partitions: usize) -> usize {
    let positive = murmur2(key) & 0x7fff_ffff;
    usize::try_from(positive).unwrap_or(0) % partitions.max(1)
}

/// Kafka's `Utils.murmur2` (32-bit MurmurHash2, seed 0x9747b28c, little-endian blocks).
fn murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let mut h = 0x9747_b28c ^ (data.len() as u32);
    let mut blocks = data.chunks_exact(4);
    for block in &mut blocks {
        let mut k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        for (i, b) in tail.iter().enumerate() {
            h ^= u32::from(*b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

// ----------------------------------------------------------------------------------- output

/// Where events go: text lines, or JSON lines with `--json` (other news then to stderr).
#[derive(Clone, Copy)]
struct Out {
    json: bool,
}

impl Out {
    fn ready(self, process_id: &str) {
        match self.json {
            true => json_line(&[("event", "ready".into()), ("process_id", process_id.into())]),
            false => println!("ready process_id={process_id}"),
        }
    }

    fn tasks(
        self,
        member: usize,
        member_id: &str,
        epoch: i32,
        tasks: &StreamsTasks,
        withheld: &BTreeSet<TaskId>,
    ) {
        let names = |set: &BTreeSet<TaskId>| -> Vec<String> {
            set.iter().map(ToString::to_string).collect()
        };
        let (active, standby, warmup, withheld) = (
            names(&tasks.active),
            names(&tasks.standby),
            names(&tasks.warmup),
            names(withheld),
        );
        match self.json {
            true => json_line(&[
                ("event", "tasks".into()),
                ("member", member.into()),
                ("member_id", member_id.into()),
                ("epoch", epoch.into()),
                ("active", active.into()),
                ("standby", standby.into()),
                ("warmup", warmup.into()),
                ("withheld", withheld.into()),
            ]),
            false => println!(
                "tasks member={member} member_id={member_id} epoch={epoch} active=[{}] \
                 standby=[{}] warmup=[{}] withheld=[{}]",
                active.join(","),
                standby.join(","),
                warmup.join(","),
                withheld.join(",")
            ),
        }
    }

    fn committed(self, member: usize, tp: &TopicPartition, offset: i64) {
        let (topic, partition) = (tp.topic(), tp.partition);
        match self.json {
            true => json_line(&[
                ("event", "committed".into()),
                ("member", member.into()),
                ("topic", topic.into()),
                ("partition", partition.into()),
                ("offset", offset.into()),
            ]),
            false => println!(
                "committed member={member} topic={topic} partition={partition} offset={offset}"
            ),
        }
    }

    fn error(self, member: usize, message: String) {
        match self.json {
            true => json_line(&[
                ("event", "error".into()),
                ("member", member.into()),
                ("message", message.into()),
            ]),
            false => println!("error member={member}: {message}"),
        }
    }

    fn lost(self, member: usize, tasks: &StreamsTasks, reason: &str) {
        let names: Vec<String> = tasks.iter().map(|(t, _)| t.to_string()).collect();
        match self.json {
            true => json_line(&[
                ("event", "lost".into()),
                ("member", member.into()),
                ("tasks", names.into()),
                ("reason", reason.into()),
            ]),
            false => println!(
                "lost member={member} tasks=[{}] ({reason}): not committing",
                names.join(",")
            ),
        }
    }

    fn info(self, member: usize, message: String) {
        match self.json {
            true => eprintln!("member {member}: {message}"),
            false => println!("member {member}: {message}"),
        }
    }
}

/// Prints one JSON object with its fields in this order.
fn json_line(fields: &[(&str, Value)]) {
    let fields: Vec<String> = (fields.iter())
        .map(|(key, value)| format!("{}:{value}", Value::from(*key)))
        .collect();
    println!("{{{}}}", fields.join(","));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values of Kafka's UtilsTest.testMurmur2.
    #[test]
    fn murmur2_is_kafkas() {
        let cases: [(&str, i32); 6] = [
            ("21", -973932308),
            ("foobar", -790332482),
            ("a-little-bit-long-string", -985981536),
            ("a-little-bit-longer-string", -1486304829),
            (
                "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            ("abc", 479470107),
        ];
        for (key, hash) in cases {
            assert_eq!(murmur2(key.as_bytes()) as i32, hash, "{key}");
        }
    }

    #[test]
    fn the_topology_is_the_java_peers() {
        let t = topology("g", "in");
        assert_eq!(
            t.input_partitions(&TaskId::new("0", 3)),
            [TopicPartition::new("in", 3)]
        );
        let repartition = TopicPartition::new("g-rekey-repartition", 2);
        assert_eq!(t.input_partitions(&TaskId::new("1", 2)), [repartition]);
        assert!(t.validate().is_ok());
    }
}
