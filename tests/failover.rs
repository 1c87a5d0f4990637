//! Group coordinator failover on a 3-node KRaft cluster (tests/kafka/broker.sh --nodes 3; design
//! notes: kafka-broker.md §4), for classic and for consumer-protocol (KIP-848) members:
//!
//! (a) `kill -9` of the coordinator node while the group is steady: every member must be Stable
//!     again, on the new coordinator, with a disjoint assignment covering the topic, and commits
//!     must work again; then the node is restarted;
//! (b) `kill -STOP` of the coordinator (the new one) during a rebalance started by a fourth
//!     member, `kill -CONT` after the cluster moved the coordinator away: same checks.
//!
//! All along, no partition may be owned by two members at once (checked on the timestamped
//! ownership changes the applications saw), and no member may stop on a fatal error. At the end
//! the committed offsets are read back intact. One overlap is inherent to the protocols and
//! allowed in (b) only, where the freeze outlasts the session timeout: a member the coordinator
//! expired while it could not reach it keeps its partitions until it hears so, and then loses
//! them (Lost); meanwhile they may already be someone else's. Those overlaps are printed.
//!
//! The two tests share the state dir target/kafka-it-failover and run one after the other.
//!
//! Seen on Kafka 4.4 (printed by the tests): after `kill -9`, members are Stable on the new
//! coordinator about 4 s later (3 s broker session timeout, then the offsets partition moves).
//! While the coordinator is frozen, members recover before it is thawed: consumer-protocol
//! members in about 10 s, classic members whose JoinGroup is parked at the frozen node after the
//! JoinGroup timeout (15 s here), as the Java client does. A frozen broker accepts the TCP
//! connection and never answers: a new connection to it costs one connection setup timeout
//! (`socket.connection.setup.timeout.ms`, bounded by the request's timeout), then discovery goes
//! on to the other brokers the cluster metadata names.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Cluster;
use consumer_membership::GroupError;
use consumer_membership::config::{GroupConfig, GroupProtocol};
use consumer_membership::driver::{GroupMember, MemberHandle, Snapshot};
use consumer_membership::machine::TopicPartition;
use consumer_membership::machine::events::CommitOffset;
use consumer_membership::machine::events::Event;
use consumer_membership::machine::events::MemberState;

const NAME: &str = "kafka-it-failover";
const PARTITIONS: usize = 6;
/// How long the coordinator stays frozen: longer than broker.session.timeout.ms (3 s), so the
/// controller fences it and the offsets partition (and the group) moves to another node, and
/// longer than the JoinGroup timeout (max(request.timeout.ms, max.poll.interval.ms + 5 s) =
/// 15 s), so classic members whose JoinGroup went to the frozen node can move on before it is
/// thawed. Whether the members recover while it is frozen is printed, not asserted.
const FROZEN: Duration = Duration::from_secs(18);

/// One cluster at a time: both tests use the same state dir.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn state_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join(NAME)
}

fn broker_sh(args: &[&str]) -> String {
    let out = Command::new(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/kafka/broker.sh"))
        .args(args)
        .arg("--dir")
        .arg(state_dir())
        .output()
        .expect("run tests/kafka/broker.sh");
    assert!(
        out.status.success(),
        "broker.sh {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn node_pid(node: i32) -> String {
    broker_sh(&["pid", &node.to_string()])
}

fn signal(pid: &str, sig: &str) {
    let status = Command::new("kill")
        .args([sig, pid])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {sig} {pid}");
}

/// A node frozen with SIGSTOP; thawed (SIGCONT) on drop, so a failing test does not leave a
/// stopped JVM behind for the teardown to wait on.
struct Frozen(Option<String>);

impl Frozen {
    fn thaw(&mut self) {
        if let Some(pid) = self.0.take() {
            signal(&pid, "-CONT");
        }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        self.thaw();
    }
}

fn config(group: &str, protocol: GroupProtocol) -> GroupConfig {
    let mut c = common::group_config(group, None);
    c.protocol = protocol;
    // A request to a frozen coordinator fails after 5 s (and its connection is closed); the
    // JoinGroup timeout is max(request.timeout.ms, max.poll.interval.ms + 5 s) = 15 s.
    c.request_timeout = Duration::from_secs(5);
    c.max_poll_interval = Duration::from_secs(10);
    c
}

/// How a member's application gained or gave up a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Assigned,
    /// Handed back in a rebalance (Revoking, then the ticket) or on unsubscribe/close.
    Revoked,
    /// Lost without a handover: the coordinator fenced the member or its session expired.
    Lost,
}

/// A member of the test: its application hands revocation tickets back at once, logs every
/// ownership change with its time and kind, and polls every 500 ms even when no event comes.
struct Member {
    handle: MemberHandle,
    log: Arc<Mutex<Vec<(Instant, Change, TopicPartition)>>>,
    fatal: Arc<Mutex<Option<GroupError>>>,
}

impl Member {
    async fn start(bootstrap: &str, group: &str, protocol: GroupProtocol, topic: &str) -> Member {
        common::init_tracing();
        let (t, _) = common::transport(bootstrap);
        let mut m = GroupMember::start(t, config(group, protocol)).expect("valid config");
        m.subscribe([topic.to_owned()]).await.expect("subscribe");
        let handle = m.handle();
        let log = Arc::new(Mutex::new(Vec::new()));
        let fatal = Arc::new(Mutex::new(None));
        let (l, f) = (log.clone(), fatal.clone());
        tokio::spawn(async move {
            let record = |change: Change, partitions: &[TopicPartition]| {
                let now = Instant::now();
                l.lock()
                    .unwrap()
                    .extend(partitions.iter().map(|p| (now, change, p.clone())));
            };
            while let Some(event) = m.next_event().await {
                match event {
                    Event::Revoking { partitions, ticket } => {
                        record(Change::Revoked, &partitions);
                        m.complete_revocation(ticket)
                            .await
                            .expect("ticket accepted");
                    }
                    Event::Assigned { added, .. } => record(Change::Assigned, &added),
                    Event::Revoked { partitions } => record(Change::Revoked, &partitions),
                    Event::Lost { partitions, .. } => record(Change::Lost, &partitions),
                    Event::Fatal(e) => *f.lock().unwrap() = Some(e),
                    _ => {}
                }
            }
        });
        let poller = handle.clone();
        tokio::spawn(async move {
            loop {
                let _ = poller.poll().await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        Member { handle, log, fatal }
    }

    async fn snapshot(&self) -> Snapshot {
        self.handle.snapshot().await.expect("member task alive")
    }

    fn fatal(&self) -> Option<GroupError> {
        self.fatal.lock().unwrap().clone()
    }

    /// Partitions released since `since`.
    fn released_since(&self, since: Instant) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|(at, change, _)| *at >= since && *change != Change::Assigned)
            .count()
    }
}

/// No partition owned by two members at once, per the ownership changes (with their times) the
/// applications saw, and no fatal error. One exception, counted and returned: a member the
/// coordinator had already expired or fenced still believes it owns its partitions until it
/// hears so (a "zombie"; its commits are fenced). Such an overlap is allowed when the old owner's
/// release of that partition is a Lost event; handing it back as a legitimate owner (Revoked)
/// after another member got it is a violation.
fn check_exclusive(members: &[&Member]) -> Vec<String> {
    let mut changes: Vec<(Instant, usize, Change, TopicPartition)> = Vec::new();
    for (i, m) in members.iter().enumerate() {
        assert!(m.fatal().is_none(), "member {i} stopped: {:?}", m.fatal());
        changes.extend(
            m.log
                .lock()
                .unwrap()
                .iter()
                .map(|(at, change, tp)| (*at, i, *change, tp.clone())),
        );
    }
    // At one instant, releases before acquisitions.
    changes.sort_by_key(|(at, _, change, _)| (*at, *change == Change::Assigned));
    let mut owners: BTreeMap<TopicPartition, BTreeMap<usize, Instant>> = BTreeMap::new();
    let mut zombies = Vec::new();
    for (at, i, change, tp) in changes {
        let owners = owners.entry(tp.clone()).or_default();
        if change == Change::Assigned {
            owners.insert(i, at);
            continue;
        }
        let Some(since) = owners.remove(&i) else {
            continue;
        };
        // Someone else got it while `i` still had it?
        if let Some((other, got)) = owners.iter().find(|(_, got)| **got >= since) {
            let overlap = at.duration_since(*got);
            assert_eq!(
                change,
                Change::Lost,
                "{tp} owned by members {i} and {other} at once for {overlap:?}, and member {i} then handed it back"
            );
            zombies.push(format!(
                "{tp}: member {i} (expired/fenced at the coordinator) still held it {overlap:.1?} after member {other} got it"
            ));
        }
    }
    for (tp, owners) in owners {
        assert!(owners.len() <= 1, "{tp} owned by {owners:?} at the end");
    }
    zombies
}

/// Waits until every member is Stable on a coordinator other than `not_on`, with disjoint
/// assignments covering the topic (classic: in one generation). Returns the snapshots.
async fn wait_recovered(
    members: &[&Member],
    not_on: Option<i32>,
    timeout: Duration,
) -> Vec<Snapshot> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let mut snaps = Vec::new();
        for m in members {
            snaps.push(m.snapshot().await);
        }
        let moved = snaps
            .iter()
            .all(|s| s.coordinator.is_some() && s.coordinator != not_on);
        let all: Vec<&TopicPartition> = snaps.iter().flat_map(|s| s.assignment.iter()).collect();
        let distinct: BTreeSet<&TopicPartition> = all.iter().copied().collect();
        let same_generation = snaps.windows(2).all(|w| {
            w[0].generation == w[1].generation || w[0].protocol == GroupProtocol::Consumer
        });
        if moved
            && snaps.iter().all(|s| s.state == MemberState::Stable)
            && same_generation
            && all.len() == PARTITIONS
            && distinct.len() == PARTITIONS
        {
            return snaps;
        }
        for m in members {
            assert!(m.fatal().is_none(), "fatal: {:?}", m.fatal());
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not recovered within {timeout:?}: {snaps:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every member commits `base + partition` for the partitions it owns; returns what was
/// committed.
async fn commit_round(members: &[&Member], base: i64) -> BTreeMap<TopicPartition, i64> {
    let mut committed = BTreeMap::new();
    for m in members {
        let owned = m.snapshot().await.assignment;
        let offsets: Vec<CommitOffset> = owned
            .iter()
            .map(|tp| CommitOffset {
                partition: tp.clone(),
                offset: base + i64::from(tp.partition),
                metadata: Some(format!("round {base}")),
            })
            .collect();
        m.handle
            .commit(offsets)
            .await
            .unwrap_or_else(|e| panic!("commit of {owned:?}: {e}"));
        committed.extend(owned.into_iter().map(|tp| {
            let o = base + i64::from(tp.partition);
            (tp, o)
        }));
    }
    committed
}

/// The one coordinator all members agree on.
async fn coordinator(members: &[&Member]) -> i32 {
    let mut ids = BTreeSet::new();
    for m in members {
        ids.insert(m.snapshot().await.coordinator.expect("coordinator known"));
    }
    assert_eq!(ids.len(), 1, "members disagree on the coordinator: {ids:?}");
    ids.into_iter().next().unwrap()
}

async fn failover(protocol: GroupProtocol) {
    if common::bootstrap().is_none() {
        return;
    }
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let cluster = Cluster::start(NAME);
    println!(
        "[{protocol:?}] cluster {} up in {:.1?}",
        cluster.bootstrap,
        started.elapsed()
    );
    let t0 = Instant::now();
    let (admin, _) = common::transport(&cluster.bootstrap);
    let topic = common::unique("failover");
    // Replication factor -1: the cluster's default.replication.factor, 3.
    common::create_topic(&*admin, &topic, PARTITIONS as i32).await;
    let group = common::unique("failover");

    let mut members = Vec::new();
    for _ in 0..3 {
        members.push(Member::start(&cluster.bootstrap, &group, protocol, &topic).await);
    }
    let refs: Vec<&Member> = members.iter().collect();
    wait_recovered(&refs, None, Duration::from_secs(60)).await;
    println!("[{protocol:?}] 3 members balanced in {:.1?}", t0.elapsed());
    commit_round(&refs, 100).await;

    // (a) kill -9 of the coordinator in steady state.
    let killed = coordinator(&refs).await;
    let pid = node_pid(killed);
    println!("[{protocol:?}] (a) kill -9 coordinator node {killed} (pid {pid})");
    let crash = Instant::now();
    signal(&pid, "-KILL");
    let snaps = wait_recovered(&refs, Some(killed), Duration::from_secs(45)).await;
    let stable_after = crash.elapsed();
    let mut expected = commit_round(&refs, 200).await;
    let commit_after = crash.elapsed();
    let zombies = check_exclusive(&refs);
    assert!(zombies.is_empty(), "(a): {zombies:#?}");
    println!(
        "[{protocol:?}] (a) recovered: all Stable on node {:?} after {stable_after:.1?}, commits work after {commit_after:.1?} (generations {:?})",
        snaps[0].coordinator,
        snaps.iter().map(|s| s.generation).collect::<Vec<_>>()
    );
    let restart = Instant::now();
    broker_sh(&["start-node", &killed.to_string()]);
    println!(
        "[{protocol:?}] (a) node {killed} restarted in {:.1?}",
        restart.elapsed()
    );

    // (b) kill -STOP of the coordinator during a rebalance (a fourth member joins).
    let frozen_node = coordinator(&refs).await;
    let pid = node_pid(frozen_node);
    let joined = Instant::now();
    members.push(Member::start(&cluster.bootstrap, &group, protocol, &topic).await);
    let refs: Vec<&Member> = members.iter().collect();
    // The rebalance is under way once an old member left Stable or gave up a partition (KIP-848
    // revocations take a few ms: the state alone is easily missed).
    let rebalancing = {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let mut seen = Vec::new();
            for m in &refs[..3] {
                let state = m.snapshot().await.state;
                seen.push((state, m.released_since(joined)));
            }
            if seen
                .iter()
                .any(|(state, released)| *state != MemberState::Stable || *released > 0)
            {
                break Some(seen);
            }
            if tokio::time::Instant::now() >= deadline {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    println!(
        "[{protocol:?}] (b) kill -STOP coordinator node {frozen_node} (pid {pid}) {:.1?} after the fourth member started, during the rebalance (old members' (state, partitions released): {rebalancing:?})",
        joined.elapsed()
    );
    assert!(
        rebalancing.is_some(),
        "the fourth member did not start a rebalance"
    );
    let freeze = Instant::now();
    signal(&pid, "-STOP");
    let mut frozen = Frozen(Some(pid));
    // While it is frozen: what the members do (state@coordinator, partitions), and whether
    // they all recover on another node before it is thawed.
    let mut recovered_frozen: Option<Duration> = None;
    let mut last = String::new();
    while freeze.elapsed() < FROZEN {
        let mut line = Vec::new();
        let mut snaps = Vec::new();
        for m in &refs {
            let s = m.snapshot().await;
            line.push(format!(
                "{}@{}:{}",
                s.state,
                s.coordinator.map_or("?".into(), |c| c.to_string()),
                s.assignment.len()
            ));
            snaps.push(s);
        }
        let line = line.join(" ");
        if line != last {
            println!("[{protocol:?}] (b)   +{:.1?} {line}", freeze.elapsed());
            last = line;
        }
        let owned: BTreeSet<&TopicPartition> =
            snaps.iter().flat_map(|s| s.assignment.iter()).collect();
        if recovered_frozen.is_none()
            && snaps.iter().all(|s| {
                s.state == MemberState::Stable && s.coordinator.is_some_and(|c| c != frozen_node)
            })
            && owned.len() == PARTITIONS
        {
            recovered_frozen = Some(freeze.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("[{protocol:?}] (b) recovered while frozen: {recovered_frozen:?}");
    frozen.thaw();
    let thaw = Instant::now();
    println!("[{protocol:?}] (b) kill -CONT node {frozen_node} after {FROZEN:?}");
    let snaps = wait_recovered(&refs, None, Duration::from_secs(45)).await;
    let stable_after = freeze.elapsed();
    let since_thaw = thaw.elapsed();
    expected.extend(commit_round(&refs, 300).await);
    let commit_after = freeze.elapsed();
    let zombies = check_exclusive(&refs);
    for z in &zombies {
        println!("[{protocol:?}] (b) zombie overlap: {z}");
    }
    println!(
        "[{protocol:?}] (b) recovered: all 4 Stable on node {:?} after {stable_after:.1?} ({since_thaw:.1?} after CONT), commits work after {commit_after:.1?}; assignment sizes {:?}",
        snaps[0].coordinator,
        snaps.iter().map(|s| s.assignment.len()).collect::<Vec<_>>()
    );

    // The committed offsets, read back by a member.
    let partitions: Vec<TopicPartition> = (0..PARTITIONS as i32)
        .map(|p| TopicPartition::new(topic.clone(), p))
        .collect();
    let read = refs[0]
        .handle
        .committed(partitions)
        .await
        .expect("offsets fetched");
    let got: BTreeMap<TopicPartition, i64> = read
        .into_iter()
        .filter_map(|(tp, c)| c.offset.map(|o| (tp, o)))
        .collect();
    assert_eq!(got, expected, "committed offsets read back");
    println!(
        "[{protocol:?}] committed offsets intact: {:?}; test body {:.1?}",
        got.values().collect::<Vec<_>>(),
        t0.elapsed()
    );
    drop(frozen);
    drop(cluster);
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_members_survive_coordinator_kill_and_freeze() {
    failover(GroupProtocol::Classic).await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_members_survive_coordinator_kill_and_freeze() {
    failover(GroupProtocol::Consumer).await;
}
