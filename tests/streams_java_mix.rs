//! One process of ours with two streams members (examples/streams_member.rs: one process id,
//! one task guard, static members with kept member ids) beside two Java Kafka Streams 4.4
//! instances (tests/kafka/StreamsPeer.java) in one group on the real Kafka broker
//! (tests/kafka/with-broker.sh), 6 input partitions, records produced all along, the broker's
//! default streams timeouts (heartbeat interval 5 s, session 45 s). The Java instances create
//! the group; ours joins it.
//!
//! Every member's tasks are sampled every 200 ms (ours from the example's JSON lines, Java's
//! from StreamsPeer's status lines) and the group's committed offsets every 500 ms
//! (OffsetFetch). Under each fault:
//! - no task is held twice inside one process at any sample;
//! - no active task is held by two members group-wide for longer than one heartbeat interval;
//! - a task our member is denied by its guard is not withheld for longer than one heartbeat
//!   interval after the other member of its process let go of it;
//! - every active task is held again within the session timeout after the fault;
//! - no member is expelled (no tasks lost, no error, on either side);
//! - the committed offsets never move backwards.
//!
//! The faults: our process stopped (static close) and restarted with a new process id; our
//! process killed -9 and restarted; a Java instance restarted; and ten restarts of ours with a
//! new process id in a group with two standby replicas.

mod common;
#[path = "../examples/common/fetch.rs"]
mod fetch;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::streams_peer::{self, StreamsPeer};
use common::unique;
use consumer_membership::TopicPartition;
use consumer_membership::kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use consumer_membership::kafka_protocol::messages::{
    GroupId, OffsetFetchRequest, RequestKind, ResponseKind,
};
use consumer_membership::kafka_protocol::protocol::StrBytes;
use serde_json::Value;

const PARTITIONS: i32 = 6;
/// `group.streams.heartbeat.interval.ms` and `group.streams.session.timeout.ms` defaults.
const HEARTBEAT: Duration = Duration::from_secs(5);
const SESSION: Duration = Duration::from_secs(45);
/// Slack for sampling and status-line lag on a loaded machine.
const SLACK: Duration = Duration::from_millis(600);

fn broker() -> Option<String> {
    common::bootstrap_since((4, 4), "static streams members (KAFKA-20169)")
}

/// A random UUID, as Kafka Streams draws a process id.
fn process_id() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    uuid::Uuid::from_bytes(b).to_string()
}

/// What one member held at one moment.
#[derive(Clone, Debug)]
struct Holder {
    who: String,
    process: String,
    active: BTreeSet<String>,
    standby: BTreeSet<String>,
    withheld: BTreeSet<String>,
}

/// One process of ours: `examples/streams_member.rs --json`, its lines with when they came.
struct OursProcess {
    spawned: Instant,
    process_id: String,
    child: Option<std::process::Child>,
    lines: common::JsonLines,
}

impl OursProcess {
    fn spawn(b: &str, names: &Names, process_id: &str, ids: &std::path::Path) -> Self {
        let binary = common::build_example("streams_member");
        let mut child = std::process::Command::new(binary)
            .args(["--bootstrap", b, "--group", &names.group, "--input"])
            .args([&names.input, "--output", &names.output, "--members", "2"])
            .args(["--instance-prefix", "ours", "--process-id", process_id])
            .args(["--commit-interval-ms", "200"])
            .arg("--member-id-dir")
            .arg(ids)
            .arg("--json")
            .env("RUST_LOG", std::env::var("OURS_LOG").unwrap_or_default())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("spawn streams_member");
        let spawned = Instant::now();
        let stdout = child.stdout.take().expect("stdout");
        let lines = common::json_lines(stdout);
        OursProcess {
            spawned,
            process_id: process_id.to_owned(),
            child: Some(child),
            lines,
        }
    }

    fn of(&self, event: &str) -> Vec<Value> {
        common::json_events(&self.lines, event)
    }

    /// Each member's latest tasks line (nothing once the process is gone).
    fn holders(&mut self) -> Vec<Holder> {
        let alive = self
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
        if !alive {
            return Vec::new();
        }
        let mut latest = BTreeMap::new();
        for (_, v) in self.lines.lock().unwrap().iter() {
            if v["event"] == "tasks" {
                latest.insert(v["member"].as_i64().unwrap_or(-1), v.clone());
            }
        }
        let set = |v: &Value, k: &str| -> BTreeSet<String> {
            (v[k].as_array().into_iter().flatten())
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect()
        };
        latest
            .into_iter()
            .map(|(m, v)| Holder {
                who: format!("ours-{m}"),
                process: self.process_id.clone(),
                active: set(&v, "active"),
                standby: set(&v, "standby"),
                withheld: set(&v, "withheld"),
            })
            .collect()
    }

    /// Lines that say a member was expelled (tasks lost) or stopped; other errors (a commit
    /// refused while a restarted member rejoins, a fetch retried) are printed.
    fn troubles(&self) -> Vec<Value> {
        let mut out = self.of("lost");
        for e in self.of("error") {
            match e["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("member stopped"))
            {
                true => out.push(e),
                false => eprintln!("our process {}: {e}", self.process_id),
            }
        }
        out
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGINT (the example closes its members and exits), then waits for the exit: how long
    /// it took, or how it failed with the process's error lines.
    async fn stop(&mut self) -> Result<Duration, String> {
        let Some(mut c) = self.child.take() else {
            return Err("not running".to_owned());
        };
        let _ = std::process::Command::new("kill")
            .args(["-INT", &c.id().to_string()])
            .status();
        let start = Instant::now();
        let deadline = start + Duration::from_secs(40);
        let status = loop {
            if let Ok(Some(status)) = c.try_wait() {
                break Some(status);
            }
            if Instant::now() >= deadline {
                let _ = c.kill();
                let _ = c.wait();
                break None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        match status {
            Some(s) if s.success() => Ok(start.elapsed()),
            other => {
                let lines = self.lines.lock().unwrap();
                Err(format!(
                    "{} after {:?}; its {} lines, the first {:?} after {:?}, the last {:?}",
                    other.map_or("no exit".to_owned(), |s| s.to_string()),
                    start.elapsed(),
                    lines.len(),
                    lines.first().map(|(_, v)| v),
                    (lines.first()).map(|(at, _)| at.duration_since(self.spawned)),
                    lines.last().map(|(_, v)| v),
                ))
            }
        }
    }
}

impl Drop for OursProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

struct Names {
    group: String,
    input: String,
    output: String,
}

/// Topics, the group's standby replicas (set before the group exists).
async fn setup(b: &str, prefix: &str, standbys: u32) -> Names {
    let (t, _) = common::transport(b);
    let [input, output] = ["in", "out"].map(|end| unique(&format!("{prefix}-{end}")));
    for topic in [&input, &output] {
        common::create_topic(&*t, topic, PARTITIONS).await;
    }
    let group = unique(prefix);
    // Kafka's default streams timeouts (the test broker's are short).
    let standbys = standbys.to_string();
    let configs = [
        ("streams.num.standby.replicas", standbys.as_str()),
        ("streams.heartbeat.interval.ms", "5000"),
        ("streams.session.timeout.ms", "45000"),
    ];
    common::set_group_configs(b, &group, &configs).await;
    Names {
        group,
        input,
        output,
    }
}

/// Produces words to every input partition until `stop` is set: 20 records per partition
/// every 250 ms.
fn producing(
    b: &str,
    input: &str,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let (b, input) = (b.to_owned(), input.to_owned());
    tokio::spawn(async move {
        let (t, config) = common::transport(&b);
        let mut n = 0usize;
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            for p in 0..PARTITIONS {
                let tp = TopicPartition::new(&input, p);
                let records: Vec<(Option<Bytes>, Option<Bytes>)> = (n..n + 20)
                    .map(|i| (None, Some(Bytes::from(format!("w{}", i % 11)))))
                    .collect();
                let deadline = Instant::now() + Duration::from_secs(30);
                fetch::produce_settling(&*t, &tp, &records, config.request_timeout, deadline)
                    .await
                    .unwrap_or_else(|e| panic!("produce to {tp}: {e}"));
            }
            n += 20;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
}

/// The group's committed offsets (OffsetFetch v8-9 from outside the group: no member id).
async fn committed(b: &str, group: &str) -> BTreeMap<(String, i32), i64> {
    let body = RequestKind::OffsetFetch(OffsetFetchRequest::default().with_groups(vec![
        OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(StrBytes::from_string(group.into())))
            .with_member_epoch(-1)
            .with_topics(None),
    ]));
    let ResponseKind::OffsetFetch(r) = common::ask(b, body, 8..=9).await else {
        panic!("not an OffsetFetch answer")
    };
    let mut out = BTreeMap::new();
    for g in &r.groups {
        for t in &g.topics {
            for p in &t.partitions {
                if p.committed_offset >= 0 {
                    out.insert((t.name.to_string(), p.partition_index), p.committed_offset);
                }
            }
        }
    }
    out
}

/// The samples and what they broke, shared by the sampling task and the test.
#[derive(Default)]
struct Record {
    samples: Vec<(Instant, Vec<Holder>)>,
    /// Committed offsets that moved backwards: (partition, from, to).
    backwards: Vec<((String, i32), i64, i64)>,
}

/// The expected task ids: both subtopologies of StreamsPeer's topology, every partition.
fn all_tasks() -> BTreeSet<String> {
    streams_peer::expected_tasks(PARTITIONS)
}

/// Every sample's holders: ours (the current process, if any) and the Java peers.
struct World {
    ours: Option<OursProcess>,
    java: Vec<StreamsPeer>,
}

impl World {
    fn holders(&mut self) -> Vec<Holder> {
        let mut out = self.ours.as_mut().map(|o| o.holders()).unwrap_or_default();
        for (i, j) in self.java.iter().enumerate() {
            if let Some(s) = j.status() {
                out.push(Holder {
                    who: format!("java-{i}"),
                    process: s.process_id.unwrap_or_default(),
                    active: s.active,
                    standby: s.standby,
                    withheld: BTreeSet::new(),
                });
            }
        }
        out
    }
}

/// Samples the world every 200 ms and the committed offsets every 500 ms until `stop`.
fn sampling(
    b: &str,
    group: &str,
    world: Arc<tokio::sync::Mutex<World>>,
    record: Arc<Mutex<Record>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let (b, group) = (b.to_owned(), group.to_owned());
    tokio::spawn(async move {
        let mut last_offsets = BTreeMap::<(String, i32), i64>::new();
        let mut next_offsets = Instant::now();
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            // Stamped under the world lock: a fault taken under it orders every sample.
            let sample = {
                let mut w = world.lock().await;
                (Instant::now(), w.holders())
            };
            record.lock().unwrap().samples.push(sample);
            if Instant::now() >= next_offsets {
                next_offsets = Instant::now() + Duration::from_millis(500);
                for (tp, o) in committed(&b, &group).await {
                    if let Some(&before) = last_offsets.get(&tp)
                        && o < before
                    {
                        record
                            .lock()
                            .unwrap()
                            .backwards
                            .push((tp.clone(), before, o));
                    }
                    last_offsets.insert(tp, o);
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

/// Whether the holders have every task active exactly once, `standbys` standby copies of
/// every stateful task (subtopology 1) on processes other than its active's, nothing
/// withheld, and `members` members reporting.
fn converged(holders: &[Holder], standbys: usize, members: usize) -> bool {
    let mut active = BTreeMap::<&String, usize>::new();
    let mut standby = BTreeMap::<&String, BTreeSet<&String>>::new();
    let mut active_on = BTreeMap::<&String, &String>::new();
    for h in holders {
        for t in &h.active {
            *active.entry(t).or_default() += 1;
            active_on.insert(t, &h.process);
        }
        for t in &h.standby {
            standby.entry(t).or_default().insert(&h.process);
        }
    }
    let expected = all_tasks();
    holders.len() == members
        && holders.iter().all(|h| h.withheld.is_empty())
        && expected.iter().all(|t| active.get(t) == Some(&1))
        && active.len() == expected.len()
        && expected.iter().filter(|t| t.starts_with("1_")).all(|t| {
            let on = standby.get(t).cloned().unwrap_or_default();
            on.len() == standbys && active_on.get(t).is_none_or(|p| !on.contains(p))
        })
        && standby.keys().all(|t| t.starts_with("1_"))
}

/// Waits (at most the session timeout and a minute) until the sampled holders converged.
async fn wait_converged(record: &Arc<Mutex<Record>>, since: Instant, standbys: usize) -> Duration {
    let deadline = since + SESSION + Duration::from_secs(60);
    loop {
        if let Some((at, _)) = (record.lock().unwrap().samples.iter())
            .rev()
            .find(|(at, h)| *at >= since && converged(h, standbys, 4))
        {
            return *at - since;
        }
        if Instant::now() > deadline {
            let r = record.lock().unwrap();
            let last = r.samples.last().map(|(_, h)| format!("{h:#?}"));
            panic!(
                "no convergence since the fault: last sample {}",
                last.unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The checks of the module doc over samples from `since` on; the first fault-free full
/// assignment must come within `SESSION` of `since`. Returns failures, one line each.
fn check(record: &Record, since: Instant, until: Instant) -> Vec<String> {
    let samples: Vec<&(Instant, Vec<Holder>)> = (record.samples.iter())
        .filter(|(at, _)| *at >= since && *at <= until)
        .collect();
    let mut failures = Vec::new();
    // Twice inside one process.
    for (at, holders) in &samples {
        let mut seen = BTreeMap::<(&String, &String), &String>::new();
        for h in holders {
            for t in h.active.iter().chain(&h.standby) {
                if let Some(other) = seen.insert((&h.process, t), &h.who)
                    && *other != h.who
                {
                    failures.push(format!(
                        "{:?} after the fault: {t} held by {other} and {} in process {}",
                        *at - since,
                        h.who,
                        h.process
                    ));
                }
            }
        }
    }
    // Active on two members group-wide; withheld after the other holder let go.
    let mut twice_since = BTreeMap::<String, Instant>::new();
    let mut free_since = BTreeMap::<(String, String), Instant>::new();
    for (at, holders) in &samples {
        for t in all_tasks() {
            let n = holders.iter().filter(|h| h.active.contains(&t)).count();
            if n >= 2 {
                let from = *twice_since.entry(t.clone()).or_insert(*at);
                if *at - from > HEARTBEAT + SLACK {
                    failures.push(format!(
                        "{:?} after the fault: {t} active twice since {:?}",
                        *at - since,
                        from - since
                    ));
                }
            } else {
                twice_since.remove(&t);
            }
        }
        for h in holders {
            for t in &h.withheld {
                let held_elsewhere = holders.iter().any(|o| {
                    o.who != h.who
                        && o.process == h.process
                        && (o.active.contains(t) || o.standby.contains(t))
                });
                let key = (h.who.clone(), t.clone());
                if held_elsewhere {
                    free_since.remove(&key);
                } else {
                    let from = *free_since.entry(key).or_insert(*at);
                    if *at - from > HEARTBEAT + SLACK {
                        failures.push(format!(
                            "{:?} after the fault: {t} withheld from {} since {:?}, nobody else in its process holds it",
                            *at - since,
                            h.who,
                            from - since
                        ));
                    }
                }
            }
        }
    }
    // Every active task held within the session timeout.
    let complete = samples.iter().find(|(_, holders)| {
        let active: BTreeSet<&String> = holders.iter().flat_map(|h| &h.active).collect();
        all_tasks().iter().all(|t| active.contains(t))
    });
    match complete {
        Some((at, _)) if *at - since <= SESSION => {}
        other => failures.push(format!(
            "not every active task held within the session timeout: first complete sample {:?}",
            other.map(|(at, _)| *at - since)
        )),
    }
    failures.dedup();
    failures
}

/// Our process and two Java instances, a group the Java instances created with `standbys`
/// standby replicas; records produced all along. Returns the pieces.
async fn start(
    b: &str,
    prefix: &str,
    standbys: u32,
) -> (
    Names,
    Arc<tokio::sync::Mutex<World>>,
    Arc<Mutex<Record>>,
    Arc<std::sync::atomic::AtomicBool>,
    Vec<tokio::task::JoinHandle<()>>,
    std::path::PathBuf,
) {
    let names = setup(b, prefix, standbys).await;
    let java: Vec<StreamsPeer> = (0..2)
        .map(|_| StreamsPeer::builder(b, &names.group, &names.input, &names.output).spawn())
        .collect();
    for j in &java {
        j.wait_for(Duration::from_secs(90), |s| s.state == "RUNNING")
            .await
            .unwrap_or_else(|| panic!("{}", j.report("not running")));
    }
    let ids = std::env::temp_dir().join(unique("streams-mix-ids"));
    std::fs::create_dir_all(&ids).unwrap();
    let ours = OursProcess::spawn(b, &names, &process_id(), &ids);
    let world = Arc::new(tokio::sync::Mutex::new(World {
        ours: Some(ours),
        java,
    }));
    let record = Arc::new(Mutex::new(Record::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tasks = vec![
        producing(b, &names.input, stop.clone()),
        sampling(b, &names.group, world.clone(), record.clone(), stop.clone()),
    ];
    (names, world, record, stop, tasks, ids)
}

/// Stops the background tasks, closes everything, and fails on troubles seen by any member
/// or offsets that moved backwards.
async fn finish(
    world: Arc<tokio::sync::Mutex<World>>,
    record: Arc<Mutex<Record>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    mut troubles: Vec<Value>,
) {
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for t in tasks {
        t.await.unwrap();
    }
    let mut w = world.lock().await;
    let mut java_errors = Vec::new();
    for j in w.java.drain(..) {
        java_errors.extend(j.errors());
        j.close().await;
    }
    if let Some(mut o) = w.ours.take()
        && let Err(e) = o.stop().await
    {
        troubles.push(Value::String(format!("the last stop: {e}")));
    }
    assert!(troubles.is_empty(), "our members: {troubles:#?}");
    assert!(java_errors.is_empty(), "Java: {java_errors:#?}");
    let r = record.lock().unwrap();
    assert!(
        r.backwards.is_empty(),
        "committed offsets moved backwards: {:?}",
        r.backwards
    );
}

/// Deliver 4 of issue 29: (a) our process restarted with a new process id, (b) our process
/// killed -9 and restarted (its process id and member ids kept, as Kafka Streams keeps its
/// state directory), (c) a Java instance restarted; one standby replica.
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_process_and_java_instances_restarted_and_killed() {
    common::init_tracing();
    let Some(b) = broker() else { return };
    let (names, world, record, stop, tasks, ids) = start(&b, "mix-faults", 1).await;
    let t0 = Instant::now();
    let first = wait_converged(&record, t0, 1).await;
    eprintln!("converged {first:?} after our process started");
    let mut troubles = Vec::new();
    let mut failures = Vec::new();

    // (a) Restarted with a new process id.
    let fault;
    {
        let mut w = world.lock().await;
        // Every sample from now on sees the world as this round leaves it (see `sampling`).
        fault = Instant::now();
        let mut old = w.ours.take().unwrap();
        if let Err(e) = old.stop().await {
            panic!("our process did not stop cleanly: {e}");
        }
        troubles.extend(old.troubles());
        w.ours = Some(OursProcess::spawn(&b, &names, &process_id(), &ids));
    }
    let took = wait_converged(&record, fault, 1).await;
    eprintln!("(a) new process id: converged in {took:?}");
    failures.extend(
        check(&record.lock().unwrap(), fault, Instant::now())
            .into_iter()
            .map(|f| format!("(a) {f}")),
    );

    // (b) Killed -9, restarted with the same process id and member ids.
    let fault;
    {
        let mut w = world.lock().await;
        // Every sample from now on sees the world as this round leaves it (see `sampling`).
        fault = Instant::now();
        let mut old = w.ours.take().unwrap();
        let pid = old.process_id.clone();
        old.kill9();
        troubles.extend(old.troubles());
        w.ours = Some(OursProcess::spawn(&b, &names, &pid, &ids));
    }
    let took = wait_converged(&record, fault, 1).await;
    eprintln!("(b) kill -9: converged in {took:?}");
    failures.extend(
        check(&record.lock().unwrap(), fault, Instant::now())
            .into_iter()
            .map(|f| format!("(b) {f}")),
    );

    // (c) A Java instance restarted.
    let fault;
    {
        let mut w = world.lock().await;
        // Every sample from now on sees the world as this round leaves it (see `sampling`).
        fault = Instant::now();
        let old = w.java.remove(0);
        assert!(old.close().await, "the Java instance did not close cleanly");
        w.java
            .push(StreamsPeer::builder(&b, &names.group, &names.input, &names.output).spawn());
    }
    let took = wait_converged(&record, fault, 1).await;
    eprintln!("(c) Java restarted: converged in {took:?}");
    failures.extend(
        check(&record.lock().unwrap(), fault, Instant::now())
            .into_iter()
            .map(|f| format!("(c) {f}")),
    );

    if let Some(o) = world.lock().await.ours.as_ref() {
        troubles.extend(o.troubles());
    }
    assert!(failures.is_empty(), "{failures:#?}");
    finish(world, record, stop, tasks, troubles).await;
}

/// Acceptance of issue 29: ten restarts of our process with a new process id each time, two
/// standby replicas (every stateful task on all three processes), the broker's defaults.
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_new_process_id_restarts_with_two_standbys() {
    common::init_tracing();
    let Some(b) = broker() else { return };
    let (names, world, record, stop, tasks, ids) = start(&b, "mix-restarts", 2).await;
    wait_converged(&record, Instant::now(), 2).await;
    let mut troubles = Vec::new();
    let mut failures = Vec::new();
    let mut times = Vec::new();
    for round in 0..10 {
        let fault;
        {
            let mut w = world.lock().await;
            // Every sample from now on sees the world as this round leaves it (see `sampling`).
            fault = Instant::now();
            let mut old = w.ours.take().unwrap();
            if let Err(e) = old.stop().await {
                panic!("round {round}: our process did not stop cleanly: {e}");
            }
            troubles.extend(old.troubles());
            w.ours = Some(OursProcess::spawn(&b, &names, &process_id(), &ids));
        }
        times.push(wait_converged(&record, fault, 2).await);
        failures.extend(
            check(&record.lock().unwrap(), fault, Instant::now())
                .into_iter()
                .map(|f| format!("round {round}: {f}")),
        );
    }
    eprintln!("converged after each restart: {times:?}");
    if let Some(o) = world.lock().await.ours.as_ref() {
        troubles.extend(o.troubles());
    }
    assert!(failures.is_empty(), "{failures:#?}");
    finish(world, record, stop, tasks, troubles).await;
}
