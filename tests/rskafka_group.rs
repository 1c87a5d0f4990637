//! examples/rskafka_consumer.rs as a group of separate processes against the real broker, in
//! each protocol. rskafka produces 30,000 keyed records to a 12-partition topic at a steady pace
//! while three members of the example binary consume them: A (dynamic), B and C (static, with a
//! `group.instance.id`). After about a third of the records were processed A is killed (SIGKILL)
//! and a new process of it joins with the same properties; once the group is stable again B is
//! restarted statically (SIGINT, so it commits and closes, then a new process with the same
//! `group.instance.id`). Checked from the processes' stdout (their `record`, `owned`,
//! `released` and `committed` lines):
//!
//! - every produced record was processed;
//! - a record was processed twice only when the killed process had processed it after its last
//!   successful commit of that partition, which it made less than a commit interval (plus
//!   slack) before it died;
//! - no partition was processed by two processes at once: each process processes a partition
//!   contiguously from the offset it started at, only between its `owned` and `released` lines,
//!   and the next owner's `owned` line comes after the previous owner's `released` line, or after
//!   the killed process was seen dead;
//! - after everyone closed, the committed offsets (read by a member that never subscribes) are
//!   the log end offsets;
//! - the static restart changed nobody else's ownership (no revocation, no new partition on A
//!   or C), and the new process of B owns what the old one released when it closed. Classic:
//!   a static member that rejoins a Stable group within its session timeout, with unchanged
//!   protocols, gets its old assignment back without a rebalance (KIP-345). Consumer protocol:
//!   a static member leaving with epoch -2 keeps its place and its assignment until its session
//!   times out, and a member joining with its `group.instance.id` takes them over (KIP-848).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use consumer_membership::request::ResponseBody;
use consumer_membership::{CloseOptions, GroupConfig, GroupMember, TcpTransport, TopicPartition};
use rskafka::client::ClientBuilder;
use rskafka::client::partition::{Compression, OffsetAt, PartitionClient, UnknownTopicHandling};
use rskafka::record::Record;

const PARTITIONS: i32 = 12;
const RECORDS: usize = 30_000;
/// Records produced per tick of [`TICK`], round robin over the partitions: 1,200 a second.
const PER_TICK: usize = 60;
const TICK: Duration = Duration::from_millis(50);
const COMMIT_INTERVAL_MS: u128 = 500;
/// How long after its previous commit a killed process may have died (commit interval plus the
/// time a commit round and its log line may take on a loaded machine).
const COMMIT_SLACK_MS: u128 = 2_500;
const WAIT: Duration = Duration::from_secs(60);

fn now_ms() -> u128 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.unwrap().as_millis()
}

/// One parsed stdout line of the example.
#[derive(Debug, Clone)]
enum Line {
    Record {
        partition: i32,
        offset: i64,
        key: String,
        generation: i32,
    },
    Owned {
        partition: i32,
        offset: i64,
        ts: u128,
    },
    Released {
        partition: i32,
        how: String,
        ts: u128,
    },
    Committed {
        partition: i32,
        offset: i64,
        ts: u128,
    },
}

fn parse(line: &str) -> Option<Line> {
    let mut words = line.split(' ');
    let kind = words.next()?;
    let kv: BTreeMap<&str, &str> = words.filter_map(|w| w.split_once('=')).collect();
    let field = |k: &str| {
        let v = kv.get(k).unwrap_or_else(|| panic!("no {k}= in {line:?}"));
        v.to_string()
    };
    let int = |k: &str| field(k).parse::<i64>().unwrap();
    let ts = || field("ts_ms").parse::<u128>().unwrap();
    let partition = || int("partition") as i32;
    Some(match kind {
        "record" => Line::Record {
            partition: partition(),
            offset: int("offset"),
            key: field("key"),
            generation: int("generation") as i32,
        },
        "owned" => Line::Owned {
            partition: partition(),
            offset: int("offset"),
            ts: ts(),
        },
        "released" => Line::Released {
            partition: partition(),
            how: field("how"),
            ts: ts(),
        },
        "committed" => Line::Committed {
            partition: partition(),
            offset: int("offset"),
            ts: ts(),
        },
        _ => return None,
    })
}

/// One process of the example.
struct Proc {
    name: String,
    child: Child,
    lines: Arc<Mutex<Vec<Line>>>,
    reader: Option<std::thread::JoinHandle<()>>,
    /// When it was seen dead after a SIGKILL.
    killed_at: Option<u128>,
    exited: bool,
}

impl Proc {
    fn lines(&self) -> Vec<Line> {
        self.lines.lock().unwrap().clone()
    }

    /// The partitions it owns now, by its log.
    fn owned(&self) -> BTreeSet<i32> {
        let mut owned = BTreeSet::new();
        for line in self.lines.lock().unwrap().iter() {
            match line {
                Line::Owned { partition, .. } => owned.insert(*partition),
                Line::Released { partition, .. } => owned.remove(partition),
                _ => false,
            };
        }
        owned
    }

    /// The time of its latest ownership change.
    fn last_change(&self) -> Option<u128> {
        let lines = self.lines.lock().unwrap();
        lines.iter().rev().find_map(|l| match l {
            Line::Owned { ts, .. } | Line::Released { ts, .. } => Some(*ts),
            _ => None,
        })
    }

    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.killed_at = Some(now_ms());
        self.exited = true;
    }

    /// SIGINT: the example closes as on Ctrl-C.
    fn sigint(&self) {
        let pid = self.child.id().to_string();
        let status = Command::new("kill").args(["-INT", &pid]).status().unwrap();
        assert!(status.success(), "kill -INT {pid}");
    }

    /// Waits (up to 30 s) for the process to close and exit.
    fn wait_exit(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                self.exited = true;
                assert!(status.success(), "{} exited with {status}", self.name);
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not close within 30 s",
                self.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The processes of a run; dropping it kills the ones still running.
#[derive(Default)]
struct Procs(Vec<Proc>);

impl Drop for Procs {
    fn drop(&mut self) {
        for p in self.0.iter_mut().filter(|p| !p.exited) {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }
}

/// Starts a process of the example on `properties`; a thread collects its stdout lines.
fn spawn(bin: &Path, name: &str, properties: &Path, topic: &str) -> Proc {
    let mut child = Command::new(bin)
        .arg("--properties")
        .arg(properties)
        .args(["--topic", topic])
        .args(["--commit-interval-ms", &COMMIT_INTERVAL_MS.to_string()])
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
    let stdout = child.stdout.take().unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(line) = parse(&line) {
                sink.lock().unwrap().push(line);
            }
        }
    });
    Proc {
        name: name.to_owned(),
        child,
        lines,
        reader: Some(reader),
        killed_at: None,
        exited: false,
    }
}

/// Distinct records processed so far by all processes.
fn distinct(procs: &Procs) -> usize {
    let mut seen = BTreeSet::new();
    for p in &procs.0 {
        for line in p.lines.lock().unwrap().iter() {
            if let Line::Record {
                partition, offset, ..
            } = line
            {
                seen.insert((*partition, *offset));
            }
        }
    }
    seen.len()
}

/// Waits up to [`WAIT`] until `f` holds.
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "no {what} within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether the running processes own every partition between them and nobody's ownership
/// changed in the last 1.5 s.
fn stable(procs: &Procs) -> bool {
    let live = procs.0.iter().filter(|p| !p.exited);
    let (mut owned, mut last) = (0, 0);
    for p in live {
        owned += p.owned().len();
        last = last.max(p.last_change().unwrap_or(0));
    }
    owned == PARTITIONS as usize && now_ms() >= last + 1_500
}

/// Produces [`RECORDS`] keyed records (`key-i` to partition `i % 12`) at a steady pace.
async fn produce(clients: Arc<Vec<PartitionClient>>, done: Arc<AtomicBool>) {
    let mut tick = tokio::time::interval(TICK);
    for from in (0..RECORDS).step_by(PER_TICK) {
        tick.tick().await;
        let mut batches: Vec<Vec<Record>> = vec![Vec::new(); clients.len()];
        let ts = chrono::DateTime::from_timestamp_millis(now_ms() as i64).unwrap();
        for i in from..(from + PER_TICK).min(RECORDS) {
            batches[i % clients.len()].push(Record {
                key: Some(format!("key-{i}").into_bytes()),
                value: Some(format!("value-{i}").into_bytes()),
                headers: BTreeMap::new(),
                timestamp: ts,
            });
        }
        for (pc, batch) in clients.iter().zip(batches) {
            pc.produce(batch, Compression::NoCompression)
                .await
                .expect("produce");
        }
    }
    done.store(true, Ordering::Relaxed);
}

/// One process's ownership of a partition: from its `owned` line to its `released` line (or
/// to when it was seen dead), the offset it started at.
struct Ownership {
    proc: usize,
    start: u128,
    end: u128,
    from: i64,
}

/// An rskafka producer's client of each partition of `topic`.
async fn partition_clients(bootstrap: &str, topic: &str) -> Vec<PartitionClient> {
    let rs = ClientBuilder::new(vec![bootstrap.to_owned()]).build().await;
    let rs = rs.expect("rskafka client");
    let mut clients = Vec::with_capacity(PARTITIONS as usize);
    for p in 0..PARTITIONS {
        let client = rs
            .partition_client(topic, p, UnknownTopicHandling::Retry)
            .await;
        clients.push(client.expect("partition client"));
    }
    clients
}

/// The consumer group's epoch and its members' epochs by member id (ConsumerGroupDescribe to
/// the only broker, the coordinator).
async fn epochs(bootstrap: &str, group: &str) -> (i32, BTreeMap<String, i32>) {
    use consumer_membership::request::{Request, Response, Target};
    use consumer_membership::transport::Transport;
    use kafka_protocol::messages::{
        ConsumerGroupDescribeRequest, GroupId, RequestKind, ResponseKind,
    };
    let id = GroupId(kafka_protocol::protocol::StrBytes::from_string(
        group.to_owned(),
    ));
    let describe = ConsumerGroupDescribeRequest::default().with_group_ids(vec![id]);
    let (t, _) = common::transport(bootstrap);
    let body = Box::new(RequestKind::ConsumerGroupDescribe(describe));
    let request = Request::Raw {
        body,
        versions: 0..=1,
        fit: None,
    };
    let answer = t
        .send(Target::Bootstrap, request, Duration::from_secs(10))
        .await;
    let r = match answer.map(|r: Response| r.body) {
        Ok(ResponseBody::Kafka(ResponseKind::ConsumerGroupDescribe(r))) => r,
        other => panic!("ConsumerGroupDescribe: {other:?}"),
    };
    let g = &r.groups[0];
    assert_eq!(
        g.error_code, 0,
        "ConsumerGroupDescribe: {:?}",
        g.error_message
    );
    let members = g
        .members
        .iter()
        .map(|m| (m.member_id.to_string(), m.member_epoch));
    (g.group_epoch, members.collect())
}

/// The two protocols' runs take turns: each is six processes and a producer on a small machine.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn group(protocol: &str) {
    let Some(b) = common::bootstrap() else { return };
    let _turn = ONE_AT_A_TIME.lock().await;
    let started = Instant::now();
    let bin = common::example_binary("rskafka_consumer");
    let (t, client) = common::transport(&b);
    let (topic, group) = (
        common::unique("rskafka-group"),
        common::unique("rskafka-group"),
    );
    common::create_topic(&*t, &topic, PARTITIONS).await;
    let clients = Arc::new(partition_clients(&b, &topic).await);

    let dir = std::env::temp_dir();
    let file = |name: &str, instance: Option<&str>| {
        let mut lines = vec![
            format!("bootstrap.servers={b}"),
            format!("group.id={group}"),
            format!("group.protocol={protocol}"),
            "auto.offset.reset=earliest".to_owned(),
        ];
        if protocol == "classic" {
            // The broker's consumer-protocol session is 6 s (tests/kafka/single.properties.in):
            // the same for classic. The eager range assignor (Kafka's default): every member
            // gives all its partitions back in A's rebalance, so each hand-over rests on the
            // commit before the revocation (a sticky one would only move the killed A's).
            lines.push("session.timeout.ms=6000".to_owned());
            lines.push("heartbeat.interval.ms=500".to_owned());
            lines.push("partition.assignment.strategy=range".to_owned());
        }
        lines.extend(instance.map(|i| format!("group.instance.id={i}")));
        let path = dir.join(format!("{}.properties", common::unique(name)));
        std::fs::write(&path, lines.join("\n")).unwrap();
        path
    };
    let (props_a, props_b, props_c) = (
        file("a", None),
        file("b", Some(&common::unique("b"))),
        file("c", Some(&common::unique("c"))),
    );

    let mut procs = Procs::default();
    procs.0.push(spawn(&bin, "A", &props_a, &topic));
    procs.0.push(spawn(&bin, "B", &props_b, &topic));
    procs.0.push(spawn(&bin, "C", &props_c, &topic));
    let produced = Arc::new(AtomicBool::new(false));
    let producer = tokio::spawn(produce(clients.clone(), produced.clone()));

    // About a third processed, A processing too: kill it, and start a new process of it.
    until("third of the records processed", || {
        distinct(&procs) >= RECORDS / 3 && !procs.0[0].owned().is_empty()
    })
    .await;
    procs.0[0].kill();
    procs.0.push(spawn(&bin, "A'", &props_a, &topic));
    let killed_at = procs.0[0].killed_at.unwrap();
    let killed_after = distinct(&procs);

    // Once the group is stable again, restart B statically.
    until("stable group after the kill", || stable(&procs)).await;
    let consumer = protocol == "consumer";
    let epochs_before = if consumer {
        Some(epochs(&b, &group).await)
    } else {
        None
    };
    let b_closing = now_ms();
    let line_counts = |procs: &Procs| -> Vec<usize> {
        procs
            .0
            .iter()
            .map(|p| p.lines.lock().unwrap().len())
            .collect()
    };
    let at_b_closing = line_counts(&procs);
    procs.0[1].sigint();
    procs.0[1].wait_exit();
    procs.0.push(spawn(&bin, "B'", &props_b, &topic));
    until("B' owning partitions", || !procs.0[4].owned().is_empty()).await;

    until("all records processed", || {
        produced.load(Ordering::Relaxed) && distinct(&procs) == RECORDS
    })
    .await;
    producer.await.unwrap();
    // Let a late rebalance caused by B's restart, if any, show up before everyone closes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let epochs_after = if consumer {
        Some(epochs(&b, &group).await)
    } else {
        None
    };
    let closing = now_ms();
    let at_closing = line_counts(&procs);
    for p in procs.0.iter().filter(|p| !p.exited) {
        p.sigint();
    }
    for p in procs.0.iter_mut().filter(|p| !p.exited) {
        p.wait_exit();
    }
    for p in &mut procs.0 {
        p.reader.take().unwrap().join().unwrap();
    }
    for path in [&props_a, &props_b, &props_c] {
        std::fs::remove_file(path).ok();
    }
    let logs: Vec<Vec<Line>> = procs.0.iter().map(Proc::lines).collect();
    let names: Vec<&str> = procs.0.iter().map(|p| p.name.as_str()).collect();

    // Each process: records of a partition only while it owns it, contiguous from the offset
    // it started at; ownerships collected per partition.
    let mut ownerships: BTreeMap<i32, Vec<Ownership>> = BTreeMap::new();
    let mut processed: BTreeMap<(i32, i64), Vec<usize>> = BTreeMap::new();
    let mut keys = BTreeSet::new();
    for (i, log) in logs.iter().enumerate() {
        let mut open: BTreeMap<i32, (u128, i64, i64)> = BTreeMap::new(); // start, from, next
        for line in log {
            match line {
                Line::Owned {
                    partition,
                    offset,
                    ts,
                } => {
                    let again = open.insert(*partition, (*ts, *offset, *offset));
                    assert!(again.is_none(), "{}: owned {partition} twice", names[i]);
                }
                Line::Released { partition, ts, .. } => {
                    let (start, from, _) = open.remove(partition).unwrap_or_else(|| {
                        panic!("{}: released {partition} it did not own", names[i])
                    });
                    let end = *ts;
                    let o = Ownership {
                        proc: i,
                        start,
                        end,
                        from,
                    };
                    ownerships.entry(*partition).or_default().push(o);
                }
                Line::Record {
                    partition,
                    offset,
                    key,
                    ..
                } => {
                    let Some((_, _, next)) = open.get_mut(partition) else {
                        panic!("{}: record {partition}@{offset} not owned", names[i])
                    };
                    assert_eq!(*offset, *next, "{}: partition {partition}", names[i]);
                    *next += 1;
                    processed.entry((*partition, *offset)).or_default().push(i);
                    keys.insert(key.clone());
                }
                Line::Committed { .. } => {}
            }
        }
        match procs.0[i].killed_at {
            Some(died) => {
                for (partition, (start, from, _)) in open {
                    let o = Ownership {
                        proc: i,
                        start,
                        end: died,
                        from,
                    };
                    ownerships.entry(partition).or_default().push(o);
                }
            }
            None => assert!(open.is_empty(), "{} closed owning {open:?}", names[i]),
        }
    }

    // Every produced record, and its key.
    assert_eq!(processed.len(), RECORDS, "records processed");
    let expected: BTreeSet<String> = (0..RECORDS).map(|i| format!("key-{i}")).collect();
    assert_eq!(keys, expected, "keys processed");

    // Never two owners at once.
    for (partition, list) in &mut ownerships {
        list.sort_by_key(|o| o.start);
        for w in list.windows(2) {
            assert!(
                w[1].start >= w[0].end,
                "partition {partition}: {} owned it at {} before {} released it at {}",
                names[w[1].proc],
                w[1].start,
                names[w[0].proc],
                w[0].end
            );
        }
    }

    // Duplicates: only records the killed process A processed after its last commit.
    let last_commit = |p: i32| {
        logs[0].iter().rev().find_map(|l| match l {
            Line::Committed {
                partition, offset, ..
            } if *partition == p => Some(*offset),
            _ => None,
        })
    };
    let mut duplicates = 0;
    for ((partition, offset), by) in &processed {
        if by.len() == 1 {
            continue;
        }
        let by_names: Vec<&str> = by.iter().map(|i| names[*i]).collect();
        assert!(
            by.len() == 2 && by.contains(&0),
            "{partition}@{offset} processed by {by_names:?}"
        );
        let first_owned = ownerships[partition].iter().find(|o| o.proc == 0);
        let floor = last_commit(*partition).or(first_owned.map(|o| o.from));
        assert!(
            floor.is_some_and(|f| *offset >= f),
            "{partition}@{offset} processed again ({by_names:?}) below A's last commit {floor:?}"
        );
        duplicates += 1;
    }
    let a_commits: Vec<u128> = logs[0]
        .iter()
        .filter_map(|l| match l {
            Line::Committed { ts, .. } => Some(*ts),
            _ => None,
        })
        .collect();
    let a_last_commit = a_commits.last().copied().unwrap_or(0);
    assert!(
        killed_at <= a_last_commit + COMMIT_INTERVAL_MS + COMMIT_SLACK_MS,
        "A's last commit at {a_last_commit}, killed at {killed_at}"
    );
    let a_after_commit = (0..PARTITIONS)
        .map(|p| {
            let floor = last_commit(p).unwrap_or(i64::MAX);
            logs[0]
                .iter()
                .filter(|l| matches!(l, Line::Record { partition, offset, .. } if *partition == p && *offset >= floor))
                .count()
        })
        .sum::<usize>();
    assert!(
        duplicates <= a_after_commit,
        "{duplicates} duplicates, A processed {a_after_commit} after its commits"
    );

    // The static restart: B' took over what B released, nobody else's ownership changed.
    let released_by_b: BTreeSet<i32> = logs[1]
        .iter()
        .filter_map(|l| match l {
            Line::Released { partition, how, .. } if how == "closed" => Some(*partition),
            _ => None,
        })
        .collect();
    let first_of_b2: BTreeSet<i32> = logs[4]
        .iter()
        .filter_map(|l| match l {
            Line::Owned { partition, ts, .. } if *ts < closing => Some(*partition),
            _ => None,
        })
        .collect();
    assert_eq!(first_of_b2, released_by_b, "B' owns what B released");
    // Nor did anyone else's generation (classic) or member epoch (consumer protocol) move: the
    // static restart was no rebalance at all, not even one that moved no partition (as with a
    // LeaveGroup and a quick rejoin under a sticky assignor).
    let generations = |lines: &[Line]| -> Vec<i32> {
        let at = |l: &Line| match l {
            Line::Record { generation, .. } => Some(*generation),
            _ => None,
        };
        lines.iter().filter_map(at).collect()
    };
    for i in [2, 3] {
        let before = generations(&logs[i][..at_b_closing[i]]);
        let during = generations(&logs[i][at_b_closing[i]..at_closing[i]]);
        let before = *before.last().expect("records before B's restart");
        assert!(
            !during.is_empty(),
            "{}: no records during B's restart",
            names[i]
        );
        assert!(
            during.iter().all(|g| *g == before),
            "{}: generation {before} before B's restart, then {:?}",
            names[i],
            during.iter().collect::<BTreeSet<_>>()
        );
    }
    // The consumer protocol's members report no event for an epoch that moves without a change
    // of assignment, so the group's epoch is read from the coordinator: B's -2 leave and its
    // rejoin under the same group.instance.id left the group epoch as it was, so the target
    // assignment was not recomputed; A' and C kept their member epochs.
    if let (Some((group_before, members_before)), Some((group_after, members_after))) =
        (&epochs_before, &epochs_after)
    {
        assert_eq!(
            group_before, group_after,
            "group epoch across B's static restart"
        );
        let kept = members_after
            .iter()
            .filter(|(id, e)| members_before.get(*id) == Some(e));
        assert_eq!(
            kept.count(),
            2,
            "A' and C kept their epochs: {members_before:?}, then {members_after:?}"
        );
    }
    for i in [2, 3] {
        for line in &logs[i] {
            if let Line::Owned { ts, partition, .. } | Line::Released { ts, partition, .. } = line {
                assert!(
                    *ts < b_closing || *ts >= closing,
                    "{}: ownership of {partition} changed during B's static restart: {line:?}",
                    names[i]
                );
            }
        }
    }

    // The committed offsets are the log ends (read by a member that never subscribes).
    let mut ends = BTreeMap::new();
    for (p, pc) in (0..PARTITIONS).zip(clients.iter()) {
        ends.insert(p, Some(pc.get_offset(OffsetAt::Latest).await.unwrap()));
    }
    let transport = Arc::new(TcpTransport::new(client));
    let reader = GroupMember::start(transport, GroupConfig::new(&group)).unwrap();
    let all = (0..PARTITIONS).map(|p| TopicPartition::new(topic.clone(), p));
    let committed = reader.committed(all.collect()).await.expect("committed");
    reader.close(CloseOptions::Default).await;
    let committed: BTreeMap<i32, Option<i64>> = committed
        .into_iter()
        .map(|(tp, c)| (tp.partition, c.offset))
        .collect();
    assert_eq!(committed, ends, "committed offsets, log end offsets");
    eprintln!(
        "{protocol}: {RECORDS} records, killed A after {killed_after}, {duplicates} duplicates \
         (A processed {a_after_commit} after its last commits), B's partitions {released_by_b:?}, \
         {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
async fn classic_group() {
    group("classic").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
async fn consumer_group() {
    group("consumer").await;
}
