//! Our streams members ([`StreamsGroupMember`], KIP-1071) against the real Kafka 4.4 broker
//! (tests/kafka/with-broker.sh), with the Java client's default timeouts (GroupConfig and
//! ClientConfig defaults) unless a test says why not:
//!
//! - two processes, one member each, a topology of two subtopologies with a changelog topic
//!   (StreamsPeer.java's, field for field, so a Java peer can share the group) and the group
//!   config `streams.num.standby.replicas=1`: actives disjoint and complete, no standby on the
//!   active's process, StreamsGroupDescribe (sent by our TcpTransport) lists both members with
//!   their process ids;
//! - a static member closed with -2 and restarted with a new member id and a new process id
//!   within the session timeout gets its tasks back, the other member sees no revocation;
//! - one Java Kafka Streams 4.4 peer and one of our members in one group split the tasks;
//! - the member's coordinator connections dropped (heartbeats in flight fail): it recovers
//!   with the same member id and keeps its tasks.

mod common;
#[path = "../examples/common/fetch.rs"]
mod fetch;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::streams_peer::{self, StreamsPeer, check_split, expected_tasks};
use common::unique;
use consumer_membership::kafka_protocol::messages::GroupId;
use consumer_membership::kafka_protocol::protocol::StrBytes;
use consumer_membership::messages::StreamsGroupDescribeRequest;
use consumer_membership::request::{Request, Response, ResponseBody, Target};
use consumer_membership::streams::{
    StreamsConfig, StreamsEvent, StreamsGroupMember, StreamsMemberHandle, StreamsProcess,
    StreamsSnapshot, StreamsTopology, TaskId,
};
use consumer_membership::transport::Transport;
use consumer_membership::{
    ClientConfig, CloseOptions, CloseOutcome, CommitError, CommitOffset, GroupConfig, TcpTransport,
    TopicPartition, TransportError,
};

const PARTITIONS: i32 = 4;
const T: Duration = Duration::from_secs(90);

fn broker() -> Option<String> {
    common::bootstrap_since((4, 4), "static streams members (KAFKA-20169)")
}

fn topology(group: &str, input: &str) -> StreamsTopology {
    streams_peer::topology(group, input)
}

/// A process id as Kafka Streams draws one (a random UUID).
fn process_id() -> String {
    let b: [u8; 16] = rand::random();
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn names(tasks: &BTreeSet<TaskId>) -> BTreeSet<String> {
    tasks.iter().map(ToString::to_string).collect()
}

/// A TcpTransport that can drop the member's connections while a StreamsGroupHeartbeat is in
/// flight: once armed, each of the next heartbeats is handed to its connection, then every
/// connection is dropped (the socket closes when the last sender lets go of it) and the
/// heartbeat fails with a disconnect, as when the broker's side goes away. The request may or
/// may not have reached the broker; its answer is lost either way.
struct Cutting {
    inner: TcpTransport,
    /// How many heartbeats to cut still.
    armed: AtomicUsize,
    /// Heartbeats fail without being sent (the coordinator unreachable).
    offline: AtomicBool,
    /// What the member got for each heartbeat cut.
    cut: Mutex<Vec<Result<(), TransportError>>>,
}

type Answer = Result<Response, TransportError>;

impl Transport for Cutting {
    async fn send(&self, target: Target, request: Request, timeout: Duration) -> Answer {
        let heartbeat = matches!(request, Request::StreamsGroupHeartbeat { .. });
        if heartbeat && self.offline.load(SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
            return Err(TransportError::Disconnected {
                addr: target.to_string(),
                reason: "coordinator unreachable (test)".into(),
            });
        }
        let take = |n: usize| n.checked_sub(1);
        if !heartbeat || self.armed.fetch_update(SeqCst, SeqCst, take).is_err() {
            return self.inner.send(target, request, timeout).await;
        }
        let addr = target.to_string();
        let mut send = Box::pin(self.inner.send(target, request, timeout));
        // Let the send take its connection and write (it then waits for the answer).
        let started = std::future::poll_fn(|cx| Poll::Ready(send.as_mut().poll(cx))).await;
        let result = match started {
            Poll::Ready(answer) => answer,
            Poll::Pending => {
                tokio::task::yield_now().await;
                self.inner.close_all();
                drop(send);
                Err(TransportError::Disconnected {
                    addr,
                    reason: "dropped by the test".into(),
                })
            }
        };
        self.cut
            .lock()
            .unwrap()
            .push(result.as_ref().map(|_| ()).map_err(Clone::clone));
        result
    }
}

/// (process id, active tasks, standby tasks) per member, as [`check_split`] takes them.
type Holders = Vec<(String, BTreeSet<String>, BTreeSet<String>)>;

/// What a member saw, with when.
type Log<T> = Arc<Mutex<Vec<(Instant, T)>>>;

/// One of our members with a task of its own reading its events: revocations are completed at
/// once, every event is recorded (with when it came).
struct Ours {
    label: String,
    member: StreamsMemberHandle,
    transport: Arc<Cutting>,
    process: StreamsProcess,
    events: Log<String>,
    revoked: Log<Vec<TaskId>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Ours {
    fn start(
        label: &str,
        b: &str,
        group: &str,
        instance: Option<&str>,
        process: &StreamsProcess,
        topology: StreamsTopology,
    ) -> Ours {
        let mut client = ClientConfig::new(b).unwrap();
        client.client_id = format!("streams-broker-{label}");
        let transport = Arc::new(Cutting {
            inner: TcpTransport::new(client),
            armed: AtomicUsize::new(0),
            offline: AtomicBool::new(false),
            cut: Mutex::new(Vec::new()),
        });
        let mut config = GroupConfig::new(group);
        if let Some(i) = instance {
            config = config.with_instance_id(i);
        }
        let mut member = StreamsGroupMember::start(
            transport.clone(),
            config,
            StreamsConfig::new(topology),
            process.clone(),
        )
        .unwrap();
        let handle = member.handle();
        let events = Arc::new(Mutex::new(Vec::new()));
        let revoked = Arc::new(Mutex::new(Vec::new()));
        let (e, r, h) = (events.clone(), revoked.clone(), handle.clone());
        let reader = tokio::spawn(async move {
            while let Some(event) = member.next_event().await {
                let now = Instant::now();
                e.lock().unwrap().push((now, format!("{event:?}")));
                if let StreamsEvent::TasksRevoking { active, ticket } = event {
                    r.lock().unwrap().push((now, active));
                    let _ = h.complete_revocation(ticket).await;
                }
            }
        });
        Ours {
            label: label.to_owned(),
            member: handle,
            transport,
            process: process.clone(),
            events,
            revoked,
            reader,
        }
    }

    async fn snapshot(&self) -> StreamsSnapshot {
        self.member.snapshot().await.expect("member running")
    }

    fn report(&self) -> String {
        let events = self.events.lock().unwrap();
        let mut out = format!("--- {} events:\n", self.label);
        for (_, e) in events.iter() {
            out += &format!("  {e}\n");
        }
        out
    }

    fn revoked_since(&self, t: Instant) -> Vec<Vec<TaskId>> {
        self.revoked
            .lock()
            .unwrap()
            .iter()
            .filter(|(at, _)| *at >= t)
            .map(|(_, r)| r.clone())
            .collect()
    }

    fn events_since(&self, t: Instant) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|(at, _)| *at >= t)
            .map(|(_, e)| e.clone())
            .collect()
    }

    /// Closes and waits for the event reader to see the end.
    async fn close(self, options: CloseOptions) -> CloseOutcome {
        let outcome = self.member.close(options).await;
        tokio::time::timeout(Duration::from_secs(40), self.reader)
            .await
            .expect("events end after close")
            .unwrap();
        outcome
    }
}

/// Waits until every member is Stable, the actives split (each task active exactly once, none
/// outside the topology, no process holding a task active and standby), and every stateful
/// task (subtopology 1) has `standbys` standby copies; `extra` adds holders (a Java peer).
async fn wait_converged(
    ours: &[&Ours],
    standbys: usize,
    extra: impl Fn() -> Option<Holders>,
) -> Result<Holders, String> {
    let expected = expected_tasks(PARTITIONS);
    let deadline = Instant::now() + T;
    let mut last = String::new();
    while Instant::now() < deadline {
        let mut holders = Vec::new();
        let mut stable = true;
        for o in ours {
            let s = o.snapshot().await;
            stable &= s.state == consumer_membership::MemberState::Stable && s.withheld.is_empty();
            holders.push((
                s.process_id.clone(),
                names(&s.tasks.active),
                names(&s.tasks.standby),
            ));
        }
        match extra() {
            Some(more) => holders.extend(more),
            None => stable = false,
        }
        let split = check_split(&expected, &holders);
        let mut standby_count = BTreeMap::<String, usize>::new();
        for (_, _, standby) in &holders {
            for t in standby {
                *standby_count.entry(t.clone()).or_default() += 1;
            }
        }
        let standby_ok = (0..PARTITIONS)
            .all(|p| standby_count.get(&format!("1_{p}")).copied().unwrap_or(0) == standbys)
            && standby_count.keys().all(|t| t.starts_with("1_"));
        if stable && split.is_ok() && standby_ok {
            return Ok(holders);
        }
        last = format!(
            "stable {stable}, split {split:?}, standbys {standby_count:?}, holders {holders:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut report = format!("no convergence: {last}\n");
    for o in ours {
        report += &o.report();
    }
    Err(report)
}

/// Input and output topics and a group id whose group config `streams.num.standby.replicas`
/// is 1 (set before the group exists).
async fn setup(b: &str, prefix: &str) -> (String, String, String) {
    let (t, _) = common::transport(b);
    let [input, output] = ["in", "out"].map(|end| unique(&format!("{prefix}-{end}")));
    for topic in [&input, &output] {
        common::create_topic(&*t, topic, PARTITIONS).await;
    }
    let group = unique(prefix);
    let (b2, g2) = (b.to_owned(), group.clone());
    tokio::task::spawn_blocking(move || streams_peer::set_standby_replicas(&b2, &g2, 1))
        .await
        .unwrap()
        .expect("the group config of a group that does not exist yet");
    (group, input, output)
}

/// Our members only: waits as [`wait_converged`] with one standby per stateful task.
async fn converged(ours: &[&Ours]) -> Holders {
    wait_converged(ours, 1, || Some(Vec::new())).await.unwrap()
}

/// A group (see [`setup`]) with two of our members in two processes, converged: the group,
/// its input topic, the members, what they hold.
async fn converged_pair(
    b: &str,
    prefix: &str,
    instances: [Option<&str>; 2],
) -> (String, String, [Ours; 2], Holders) {
    let (group, input, _) = setup(b, prefix).await;
    let pair = two_members(b, &group, &input, instances);
    let holders = converged(&[&pair[0], &pair[1]]).await;
    (group, input, pair, holders)
}

/// Two of our members in two processes, with instance ids `instances`.
fn two_members(b: &str, group: &str, input: &str, instances: [Option<&str>; 2]) -> [Ours; 2] {
    [("m1", instances[0]), ("m2", instances[1])].map(|(label, instance)| {
        let process = StreamsProcess::new(process_id(), None);
        Ours::start(label, b, group, instance, &process, topology(group, input))
    })
}

/// A member as StreamsGroupDescribe (our TcpTransport, `Request::StreamsGroupDescribe`)
/// lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Described {
    member_id: String,
    epoch: i32,
    instance_id: Option<String>,
    process_id: String,
    active: BTreeSet<String>,
    standby: BTreeSet<String>,
}

/// The group's state and members (the describe goes to the bootstrap broker: with one broker
/// that is the coordinator).
async fn describe(b: &str, group: &str) -> (String, Vec<Described>) {
    let (t, _) = common::transport(b);
    let body = StreamsGroupDescribeRequest::default()
        .with_group_ids(vec![GroupId(StrBytes::from_string(group.into()))]);
    let r = t
        .send(
            Target::Bootstrap,
            Request::StreamsGroupDescribe {
                body: Box::new(body),
                versions: 0..=1,
            },
            Duration::from_secs(15),
        )
        .await
        .expect("StreamsGroupDescribe answered");
    let ResponseBody::StreamsGroupDescribe(r) = r.body else {
        panic!("not a StreamsGroupDescribe answer: {:?}", r.body)
    };
    let g = &r.groups[0];
    assert_eq!(g.error_code, 0, "{:?}", g.error_message);
    let tasks =
        |ids: &[consumer_membership::messages::streams_group_describe_response::TaskIds]| {
            ids.iter()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .map(move |p| format!("{}_{p}", t.subtopology_id))
                })
                .collect::<BTreeSet<String>>()
        };
    let members = g
        .members
        .iter()
        .map(|m| Described {
            member_id: m.member_id.to_string(),
            epoch: m.member_epoch,
            instance_id: m.instance_id.as_ref().map(|s| s.to_string()),
            process_id: m.process_id.to_string(),
            active: tasks(&m.assignment.active_tasks),
            standby: tasks(&m.assignment.standby_tasks),
        })
        .collect();
    (g.group_state.to_string(), members)
}

/// Describes until the group is Stable with `n` members.
async fn describe_stable(b: &str, group: &str, n: usize) -> Vec<Described> {
    let deadline = Instant::now() + T;
    loop {
        let (state, members) = describe(b, group).await;
        if state == "Stable" && members.len() == n {
            return members;
        }
        assert!(
            Instant::now() < deadline,
            "group {group} not Stable with {n} members: {state} {members:#?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_split_tasks_with_standbys_and_describe_lists_them() {
    common::init_tracing();
    let Some(b) = broker() else { return };
    let (group, _, [m1, m2], holders) = converged_pair(&b, "ours-two", [None, None]).await;
    // Both processes work: 8 active tasks over 2 processes.
    for (process, active, standby) in &holders {
        assert!(
            !active.is_empty(),
            "{process} has no active task: {holders:?}"
        );
        for t in standby {
            assert!(
                t.starts_with("1_"),
                "standby of a stateless task: {holders:?}"
            );
        }
    }

    let members = describe_stable(&b, &group, 2).await;
    let s1 = m1.snapshot().await;
    let s2 = m2.snapshot().await;
    for (s, p) in [(&s1, &m1.process), (&s2, &m2.process)] {
        let d = members
            .iter()
            .find(|d| d.member_id == s.member_id)
            .unwrap_or_else(|| panic!("{} not described: {members:#?}", s.member_id));
        assert_eq!(d.process_id, p.process_id(), "{members:#?}");
        assert_eq!(d.epoch, s.epoch, "{members:#?}");
        assert_eq!(d.instance_id, None);
        assert_eq!(d.active, names(&s.tasks.active), "{members:#?}");
        assert_eq!(d.standby, names(&s.tasks.standby), "{members:#?}");
    }
    // Each process has one member: the guard never had anything to do.
    assert_eq!(m1.process.interventions().withheld, 0);
    assert_eq!(m2.process.interventions().withheld, 0);
    assert_eq!(
        m1.close(CloseOptions::Default).await,
        CloseOutcome::Left { error: None }
    );
    assert_eq!(
        m2.close(CloseOptions::Default).await,
        CloseOutcome::Left { error: None }
    );
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_member_restarted_with_a_new_process_id_gets_its_tasks_back() {
    common::init_tracing();
    let Some(b) = broker() else { return };
    let (group, input, [a, other], _) =
        converged_pair(&b, "ours-static", [Some("a"), Some("b")]).await;
    let a_before = a.snapshot().await;
    let other_before = other.snapshot().await;
    let since = Instant::now();

    // The static member's close leaves with -2: the broker keeps its assignment until the
    // session timeout.
    let closed_at = Instant::now();
    assert_eq!(
        a.close(CloseOptions::Default).await,
        CloseOutcome::Left { error: None }
    );
    let members = describe(&b, &group).await.1;
    let kept = members
        .iter()
        .find(|m| m.instance_id.as_deref() == Some("a"))
        .unwrap_or_else(|| panic!("the static member's place is gone: {members:#?}"));
    assert_eq!(kept.epoch, -2, "{members:#?}");

    // Restarted: same instance id, a new member id (drawn anew), a new process id (a fresh
    // state directory), as in the seed.
    let pa2 = StreamsProcess::new(process_id(), None);
    let a2 = Ours::start("a2", &b, &group, Some("a"), &pa2, topology(&group, &input));
    converged(&[&a2, &other]).await;
    let a_after = a2.snapshot().await;
    assert!(
        closed_at.elapsed() < Duration::from_secs(6),
        "the restart took longer than the test broker's session timeout: {:?}",
        closed_at.elapsed()
    );
    assert_ne!(a_after.member_id, a_before.member_id);
    assert_eq!(
        a_after.tasks.active,
        a_before.tasks.active,
        "{}",
        a2.report()
    );
    assert_eq!(a_after.process_id, pa2.process_id());

    // The other member saw nothing of it: no revocation, no loss, the same tasks.
    assert!(other.revoked_since(since).is_empty(), "{}", other.report());
    let other_after = other.snapshot().await;
    assert_eq!(
        other_after.tasks.active,
        other_before.tasks.active,
        "{}",
        other.report()
    );
    assert_eq!(other_after.member_id, other_before.member_id);
    for e in other.events_since(since) {
        assert!(
            !e.starts_with("TasksLost") && !e.starts_with("TasksRevoking"),
            "{}",
            other.report()
        );
    }
    let members = describe_stable(&b, &group, 2).await;
    let d = members
        .iter()
        .find(|m| m.instance_id.as_deref() == Some("a"))
        .unwrap();
    assert_eq!(d.member_id, a_after.member_id, "{members:#?}");
    assert_eq!(d.process_id, pa2.process_id(), "{members:#?}");
    a2.close(CloseOptions::LeaveGroup).await;
    other.close(CloseOptions::LeaveGroup).await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_streams_peer_and_our_member_split_the_tasks() {
    common::init_tracing();
    let Some(b) = broker() else { return };
    let (group, input, output) = setup(&b, "ours-java").await;
    // The Java peer first: the group's topology is Kafka Streams' own, ours must match it.
    let java = StreamsPeer::builder(&b, &group, &input, &output).spawn();
    let ours_process = StreamsProcess::new(process_id(), None);
    let ours = Ours::start(
        "ours",
        &b,
        &group,
        None,
        &ours_process,
        topology(&group, &input),
    );
    let java_holders = || {
        let s = java.status()?;
        (s.state == "RUNNING")
            .then(|| vec![(s.process_id.unwrap_or_default(), s.active, s.standby)])
    };
    let holders = wait_converged(&[&ours], 1, java_holders)
        .await
        .unwrap_or_else(|e| panic!("{e}{}", java.report("at the deadline")));
    let java_status = java.status().unwrap();
    let ours_now = ours.snapshot().await;
    assert!(!java_status.active.is_empty(), "{holders:?}");
    assert!(!ours_now.tasks.active.is_empty(), "{holders:?}");
    assert_ne!(
        java_status.process_id.as_deref(),
        Some(ours_process.process_id().as_str())
    );
    // Nothing held twice, across the two clients.
    let ours_all: BTreeSet<String> = names(&ours_now.tasks.active)
        .union(&names(&ours_now.tasks.standby))
        .cloned()
        .collect();
    let java_all: BTreeSet<String> = java_status
        .active
        .union(&java_status.standby)
        .cloned()
        .collect();
    let both: BTreeSet<&String> = ours_all.intersection(&java_all).collect();
    for t in &both {
        // The same task on both sides: one active and one standby, never twice active.
        assert!(
            java_status.active.contains(*t)
                != ours_now.tasks.active.iter().any(|x| &x.to_string() == *t),
            "{t} active on both: {holders:?}"
        );
    }
    let members = describe_stable(&b, &group, 2).await;
    assert!(
        members.iter().any(|m| m.member_id == ours_now.member_id),
        "{members:#?}"
    );
    assert!(java.errors().is_empty(), "{}", java.report("errors"));
    assert_eq!(
        ours.close(CloseOptions::Default).await,
        CloseOutcome::Left { error: None }
    );
    assert!(java.close().await, "the Java peer did not close cleanly");
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_coordinator_connections_keep_the_member_id() {
    common::init_tracing();
    let Some(b) = broker() else { return };
    let (group, _, [m1, m2], _) = converged_pair(&b, "ours-drop", [Some("m1"), None]).await;
    let before = m1.snapshot().await;
    let since = Instant::now();
    // m1's connections dropped under three heartbeats in a row (the retries after a failure
    // included): the member finds its coordinator again and goes on heartbeating.
    m1.transport.armed.store(3, SeqCst);
    let deadline = Instant::now() + T;
    while m1.transport.cut.lock().unwrap().len() < 3 {
        assert!(Instant::now() < deadline, "{}", m1.report());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cut = m1.transport.cut.lock().unwrap().clone();
    assert!(
        cut.iter().any(Result::is_err),
        "no heartbeat failed with its connection: {cut:?}"
    );
    converged(&[&m1, &m2]).await;
    let after = m1.snapshot().await;
    assert_eq!(after.member_id, before.member_id, "{}", m1.report());
    assert_eq!(after.tasks, before.tasks, "{}", m1.report());
    let members = describe_stable(&b, &group, 2).await;
    let d = members
        .iter()
        .find(|m| m.member_id == before.member_id)
        .unwrap_or_else(|| panic!("{members:#?}"));
    assert_eq!(d.epoch, after.epoch, "{members:#?}");
    // Nothing was revoked or lost on either member: the drops cost no task.
    for m in [&m1, &m2] {
        for e in m.events_since(since) {
            assert!(
                !e.starts_with("TasksLost") && !e.starts_with("TasksRevoking"),
                "{}",
                m.report()
            );
        }
    }
    eprintln!("heartbeats cut: {cut:?}");
    m1.close(CloseOptions::LeaveGroup).await;
    m2.close(CloseOptions::Default).await;
}

/// The coordinator unreachable for longer than the session timeout (the test broker's
/// `group.streams.session.timeout.ms`, 6 s): the coordinator expires the member and gives its
/// tasks to the other; once heartbeats get through again the member is told it is unknown
/// (or fenced), loses its tasks and rejoins with the same member id (KIP-1082).
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_cut_off_past_its_session_rejoins_with_its_member_id() {
    common::init_tracing();
    let Some(b) = broker() else { return };
    let (group, _, [m1, m2], _) = converged_pair(&b, "ours-expired", [None, None]).await;
    let before = m1.snapshot().await;
    let since = Instant::now();
    m1.transport.offline.store(true, SeqCst);
    // The other member gets every task once the coordinator dropped m1.
    let deadline = Instant::now() + T;
    loop {
        let s = m2.snapshot().await;
        if s.tasks.active.len() == expected_tasks(PARTITIONS).len() {
            break;
        }
        assert!(Instant::now() < deadline, "{}", m2.report());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cut_off = since.elapsed();
    m1.transport.offline.store(false, SeqCst);
    // Unreachable past the session timeout, not much more: the coordinator expired the member.
    // The session runs from the last heartbeat the coordinator read, up to one interval (the
    // test broker's 500 ms) before the cut: 5.99 s was seen under load.
    assert!(
        cut_off >= Duration::from_millis(6000 - 500) && cut_off < Duration::from_secs(20),
        "{cut_off:?}"
    );
    converged(&[&m1, &m2]).await;
    let after = m1.snapshot().await;
    assert_eq!(after.member_id, before.member_id, "{}", m1.report());
    let lost = m1.events_since(since);
    assert!(
        lost.iter().any(|e| e.starts_with("TasksLost")),
        "the expired member did not drop its tasks: {}",
        m1.report()
    );
    let members = describe_stable(&b, &group, 2).await;
    assert!(
        members.iter().any(|m| m.member_id == before.member_id),
        "{members:#?}"
    );
    eprintln!("cut off for {cut_off:?}");
    m1.close(CloseOptions::Default).await;
    m2.close(CloseOptions::Default).await;
}

/// The input partitions of the active tasks of subtopology "0" in `tasks` (it reads `input`).
fn source_partitions(tasks: &BTreeSet<TaskId>, input: &str) -> Vec<TopicPartition> {
    tasks
        .iter()
        .filter(|t| t.subtopology == "0")
        .map(|t| TopicPartition::new(input, t.partition))
        .collect()
}

/// Issue 29, Deliver 1 on a real broker: a static member commits the input offsets of its
/// active tasks (OffsetCommit v9 with the streams member id and epoch); a partition of another
/// member's task is refused locally, typed; after a restart with a new process id (a fresh
/// state directory) the new incarnation, holding the same tasks, fetches what the old one
/// committed.
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streams_member_commits_its_tasks_offsets_and_the_next_owner_fetches_them() {
    common::init_tracing();
    let Some(b) = broker() else { return };
    let (group, input, [a, other], _) =
        converged_pair(&b, "ours-commit", [Some("a"), Some("b")]).await;
    let a_tasks = a.snapshot().await.tasks.active;
    let mine = source_partitions(&a_tasks, &input);
    assert!(!mine.is_empty(), "{}", a.report());
    let offsets: Vec<CommitOffset> = mine
        .iter()
        .map(|tp| CommitOffset::new(tp.clone(), 100 + i64::from(tp.partition)))
        .collect();
    a.member.commit(offsets).await.expect("the owner's commit");

    // Another member's task input: refused before anything is sent.
    let theirs = source_partitions(&other.snapshot().await.tasks.active, &input);
    assert!(!theirs.is_empty(), "{}", other.report());
    let refused = a
        .member
        .commit(vec![CommitOffset::new(theirs[0].clone(), 7)])
        .await;
    assert!(
        matches!(&refused, Err(CommitError::NotOwned { partitions }) if partitions == &theirs[..1]),
        "{refused:?}"
    );

    // Restarted with a new process id: the same tasks, the committed offsets.
    assert_eq!(
        a.close(CloseOptions::Default).await,
        CloseOutcome::Left { error: None }
    );
    let pa2 = StreamsProcess::new(process_id(), None);
    let a2 = Ours::start("a2", &b, &group, Some("a"), &pa2, topology(&group, &input));
    converged(&[&a2, &other]).await;
    assert_eq!(a2.snapshot().await.tasks.active, a_tasks, "{}", a2.report());
    let fetched = a2
        .member
        .committed(mine.clone())
        .await
        .expect("the committed offsets");
    for tp in &mine {
        assert_eq!(
            fetched.get(tp).and_then(|c| c.offset),
            Some(100 + i64::from(tp.partition)),
            "{tp:?}: {fetched:?}"
        );
    }
    // A partition of another's task was never committed.
    let none = other.member.committed(theirs.clone()).await.unwrap();
    assert!(
        theirs
            .iter()
            .all(|tp| none.get(tp).is_some_and(|c| c.offset.is_none())),
        "{none:?}"
    );
    a2.close(CloseOptions::LeaveGroup).await;
    other.close(CloseOptions::LeaveGroup).await;
}

/// Produces `per_partition` records (no key, value `w{i % 7}`: StreamsPeer keys by value) to
/// every partition of `topic`; returns each partition's log end offset.
async fn produce_words(b: &str, topic: &str, per_partition: usize) -> BTreeMap<i32, i64> {
    let (t, config) = common::transport(b);
    let deadline = Instant::now() + T;
    let mut ends = BTreeMap::new();
    for p in 0..PARTITIONS {
        let tp = TopicPartition::new(topic, p);
        let records: Vec<(Option<Bytes>, Option<Bytes>)> = (0..per_partition)
            .map(|i| (None, Some(Bytes::from(format!("w{}", i % 7)))))
            .collect();
        let base = fetch::produce_settling(&*t, &tp, &records, config.request_timeout, deadline)
            .await
            .unwrap_or_else(|e| panic!("produce to {tp}: {e}"));
        ends.insert(p, base + per_partition as i64);
    }
    ends
}

/// Issue 29, acceptance, with Kafka Streams in the group: our static member alone holds every
/// task and commits its input offsets; a Java Kafka Streams 4.4 peer joins, our member hands
/// tasks over (revoked at once) and a commit for a revoked task's partition is refused
/// locally, typed; the Java peer processes its tasks' records and commits them (every 200 ms);
/// our member restarted with a new process id (static, -2 then a new member id) fetches what
/// its first incarnation committed for the tasks it got back; the Java peer leaves, ours takes
/// its tasks over and fetches what Java committed: every record of them processed.
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_pass_between_our_member_and_java_streams_across_a_restart() {
    common::init_tracing();
    let Some(b) = broker() else { return };
    let (group, input, output) = setup(&b, "ours-java-commit").await;
    let ends = produce_words(&b, &input, 50).await;
    let all: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(&input, p))
        .collect();

    // Ours alone: every task, every input partition committed at 10 + p.
    let pa = StreamsProcess::new(process_id(), None);
    let a = Ours::start("a", &b, &group, Some("a"), &pa, topology(&group, &input));
    wait_converged(&[&a], 0, || Some(Vec::new())).await.unwrap();
    let ours_offset = |tp: &TopicPartition| 10 + i64::from(tp.partition);
    a.member
        .commit(
            all.iter()
                .map(|tp| CommitOffset::new(tp.clone(), ours_offset(tp)))
                .collect(),
        )
        .await
        .expect("the owner's commit");

    // A Java Kafka Streams peer joins: ours gives up some tasks.
    let joined = Instant::now();
    let java = StreamsPeer::builder(&b, &group, &input, &output)
        .leave_on_close()
        .spawn();
    let java_holders = || {
        let s = java.status()?;
        (s.state == "RUNNING")
            .then(|| vec![(s.process_id.unwrap_or_default(), s.active, s.standby)])
    };
    wait_converged(&[&a], 1, java_holders)
        .await
        .unwrap_or_else(|e| panic!("{e}{}", java.report("at the deadline")));
    let revoked: BTreeSet<TaskId> = a.revoked_since(joined).into_iter().flatten().collect();
    let a_tasks = a.snapshot().await.tasks.active;
    let java_inputs = source_partitions(&revoked, &input);
    assert!(
        !java_inputs.is_empty(),
        "no input task moved to Java: {}",
        a.report()
    );
    let refused = a
        .member
        .commit(vec![CommitOffset::new(java_inputs[0].clone(), 1)])
        .await;
    assert!(
        matches!(&refused, Err(CommitError::NotOwned { partitions }) if partitions == &java_inputs[..1]),
        "a revoked task's partition: {refused:?}"
    );

    // Java commits what it processed: every record of its input partitions.
    let java_done = async {
        loop {
            let c = a.member.committed(java_inputs.clone()).await.unwrap();
            let offsets: Vec<Option<i64>> = java_inputs
                .iter()
                .map(|tp| c.get(tp).and_then(|c| c.offset))
                .collect();
            if java_inputs
                .iter()
                .zip(&offsets)
                .all(|(tp, o)| *o == Some(ends[&tp.partition]))
            {
                return offsets;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::time::timeout(T, java_done)
        .await
        .unwrap_or_else(|_| panic!("Java never committed its input: {}", java.report("now")));

    // Ours restarted with a new process id: the same tasks, its committed offsets.
    assert_eq!(
        a.close(CloseOptions::Default).await,
        CloseOutcome::Left { error: None }
    );
    let pa2 = StreamsProcess::new(process_id(), None);
    let a2 = Ours::start("a2", &b, &group, Some("a"), &pa2, topology(&group, &input));
    wait_converged(&[&a2], 1, java_holders)
        .await
        .unwrap_or_else(|e| panic!("{e}{}", java.report("after the restart")));
    assert_eq!(a2.snapshot().await.tasks.active, a_tasks, "{}", a2.report());
    let mine = source_partitions(&a_tasks, &input);
    let fetched = a2.member.committed(mine.clone()).await.unwrap();
    for tp in &mine {
        assert_eq!(
            fetched.get(tp).and_then(|c| c.offset),
            Some(ours_offset(tp)),
            "{tp:?}: {fetched:?}"
        );
    }

    // Java leaves: ours takes every task and fetches what Java committed.
    assert!(java.close().await, "the Java peer did not close cleanly");
    wait_converged(&[&a2], 0, || Some(Vec::new()))
        .await
        .unwrap();
    let fetched = a2.member.committed(java_inputs.clone()).await.unwrap();
    for tp in &java_inputs {
        assert_eq!(
            fetched.get(tp).and_then(|c| c.offset),
            Some(ends[&tp.partition]),
            "{tp:?}: {fetched:?}"
        );
    }
    a2.close(CloseOptions::LeaveGroup).await;
}
