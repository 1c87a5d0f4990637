//! The membership lease of the streams member (KIP-1071) against a real broker: our member
//! talks to the broker through the TCP fault proxy of tests/common/proxy.rs, another streams
//! member of the same group and topology directly. Once both are Stable with the active tasks
//! split, the proxy drops every answer to our member (its requests still reach the broker) for
//! longer than the session timeout: the broker expires our member and gives its active tasks
//! to the other one. Our member must report them lost (`TasksLost`, `Reason::LeaseExpired`)
//! first: at no instant of the merged event history of both members may one task be active on
//! both (each member's active tasks as its application saw them). Then the answers flow again
//! and our member rejoins and gets active tasks back. The test prints the time from the fault to
//! our loss and to the other member's takeover.
//!
//! The lost-answer tests drop exactly the heartbeat answer that carries a new assignment, once
//! beside a second member of ours and once beside a Java Kafka Streams 4.4 instance.
//!
//! Run with `tests/kafka/with-broker.sh cargo test --all-features --test streams_lease_broker`
//! (single.properties.in: `group.streams.session.timeout.ms=6000`,
//! `group.streams.heartbeat.interval.ms=500`).

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::ownership::double_ownership;
use common::proxy::Proxy;
use common::streams_peer::{self, StreamsPeer};
use common::{group_config, transport, unique};
use consumer_membership::machine::events::{MemberState, Reason};
use consumer_membership::streams::{
    StreamsConfig, StreamsEvent, StreamsGroupMember, StreamsMemberHandle, StreamsProcess,
    StreamsTopology, Subtopology, TaskId,
};
use consumer_membership::transport::Transport;
use consumer_membership::{CloseOptions, GroupConfig};

/// The broker's streams session (single.properties.in, `group.streams.session.timeout.ms`).
const SESSION: Duration = Duration::from_secs(6);
/// Kafka's default `streams.session.timeout.ms` (and the crate's default group session).
const KAFKA_DEFAULT_SESSION: Duration = Duration::from_secs(45);
const PARTITIONS: i32 = 4;

/// One stateless subtopology reading `input`: tasks `0_0..0_{PARTITIONS-1}`, all active (the
/// group has no standby replicas: Kafka's default `streams.num.standby.replicas` 0).
fn topology(input: &str) -> StreamsTopology {
    StreamsTopology::new(0, vec![Subtopology::new("0", [input.to_owned()])])
}

/// What a member's application saw, with when.
#[derive(Debug, Default, Clone)]
struct Seen {
    /// Active tasks held now.
    active: BTreeSet<TaskId>,
    /// Every `TasksLost`: when, the active tasks in it, why.
    lost: Vec<(Instant, BTreeSet<TaskId>, Reason)>,
    fatal: Option<String>,
    /// (when, held?, task): every change of the active tasks the application runs. A revoked
    /// task counts as released when the revocation is announced (the application stops it
    /// before it hands the ticket back).
    active_log: Vec<(Instant, bool, TaskId)>,
    /// Every event, for the failure report.
    events: Vec<String>,
}

/// One streams member whose events are read by a task of its own: revocations are completed at
/// once, every change of its active tasks is logged.
struct Member {
    handle: StreamsMemberHandle,
    seen: Arc<Mutex<Seen>>,
}

impl Member {
    fn start<T: Transport>(
        transport: Arc<T>,
        config: GroupConfig,
        topology: StreamsTopology,
    ) -> Member {
        common::init_tracing();
        let process = StreamsProcess::new(unique("process"), None);
        let mut member =
            StreamsGroupMember::start(transport, config, StreamsConfig::new(topology), process)
                .expect("valid config");
        let handle = member.handle();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (record, h) = (seen.clone(), handle.clone());
        tokio::spawn(async move {
            while let Some(event) = member.next_event().await {
                let now = Instant::now();
                let ticket = {
                    let mut s = record.lock().unwrap();
                    s.events.push(format!("{:?} {event:?}", now));
                    let change = |s: &mut Seen, held: bool, tasks: &BTreeSet<TaskId>| {
                        for t in tasks {
                            s.active_log.push((now, held, t.clone()));
                            if held {
                                s.active.insert(t.clone());
                            } else {
                                s.active.remove(t);
                            }
                        }
                    };
                    match event {
                        StreamsEvent::TasksAssigned { added, .. } => {
                            change(&mut s, true, &added.active);
                            None
                        }
                        StreamsEvent::TasksRevoking { active, ticket } => {
                            change(&mut s, false, &active.into_iter().collect());
                            Some(ticket)
                        }
                        StreamsEvent::TasksReleased { tasks, .. } => {
                            change(&mut s, false, &tasks.active);
                            None
                        }
                        StreamsEvent::TasksLost { tasks, reason } => {
                            change(&mut s, false, &tasks.active);
                            s.lost.push((now, tasks.active, reason));
                            None
                        }
                        StreamsEvent::Fatal(e) => {
                            s.fatal = Some(e.to_string());
                            None
                        }
                        _ => None,
                    }
                };
                if let Some(ticket) = ticket {
                    h.complete_revocation(ticket)
                        .await
                        .expect("ticket accepted");
                }
            }
        });
        Member { handle, seen }
    }

    fn seen(&self) -> Seen {
        self.seen.lock().unwrap().clone()
    }

    fn report(&self, label: &str) -> String {
        let s = self.seen();
        let mut out = format!("--- {label} events:\n");
        for e in &s.events {
            out += &format!("  {e}\n");
        }
        out
    }

    /// Waits until what the application saw satisfies `pred`.
    async fn wait_seen(
        &self,
        label: &str,
        timeout: Duration,
        pred: impl Fn(&Seen) -> bool,
    ) -> Seen {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.seen();
            if pred(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "{label}: not seen within {timeout:?}\n{}",
                self.report(label)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// `read`: our member assumes Kafka's default 45 s session and reads the group's
/// (`streams.session.timeout.ms`, else the broker's `group.streams.session.timeout.ms`) with
/// DescribeConfigs instead of being told 6 s.
async fn run(read: bool) {
    let Some(bootstrap) = common::bootstrap() else {
        return;
    };
    let input = unique("streams-lease-in");
    let group = unique("streams-lease");
    let (admin, _) = transport(&bootstrap);
    common::create_topic(admin.as_ref(), &input, PARTITIONS).await;
    let all: BTreeSet<TaskId> = (0..PARTITIONS).map(|p| TaskId::new("0", p)).collect();

    let proxy = Proxy::start(&bootstrap).await.expect("proxy");
    let config = |session: Duration, read: bool| {
        let mut c = group_config(&group, None);
        c.group_session_timeout = session;
        c.read_group_session_timeout = read;
        c
    };
    let (through_proxy, _) = transport(proxy.bootstrap());
    let ours = Member::start(
        through_proxy,
        config(if read { KAFKA_DEFAULT_SESSION } else { SESSION }, read),
        topology(&input),
    );
    let (direct, _) = transport(&bootstrap);
    let other = Member::start(direct, config(SESSION, false), topology(&input));

    // Both Stable, the active tasks split between them.
    let deadline = Instant::now() + Duration::from_secs(60);
    let before = loop {
        let a = ours.handle.snapshot().await.expect("ours running");
        let b = other.handle.snapshot().await.expect("other running");
        let stable = |s: &consumer_membership::streams::StreamsSnapshot| {
            s.state == MemberState::Stable && !s.tasks.active.is_empty()
        };
        let union: BTreeSet<TaskId> = a.tasks.active.union(&b.tasks.active).cloned().collect();
        if stable(&a)
            && stable(&b)
            && a.tasks.active.is_disjoint(&b.tasks.active)
            && union == all
            && ours.seen().active == a.tasks.active
            && other.seen().active == b.tasks.active
        {
            break a;
        }
        assert!(
            Instant::now() < deadline,
            "not split: {a:?} {b:?}\n{}{}",
            ours.report("ours"),
            other.report("other")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let ours_before = before.tasks.active.clone();

    // Every answer to our member is lost from now on; its requests still reach the broker.
    let fault = Instant::now();
    proxy.drop_all_answers(true);
    let lost = ours
        .wait_seen("ours", SESSION * 3, |s| {
            s.active.is_empty() && s.lost.iter().any(|(at, _, _)| *at >= fault)
        })
        .await;
    let (lost_at, lost_tasks, reason) = lost
        .lost
        .iter()
        .find(|(at, _, _)| *at >= fault)
        .cloned()
        .unwrap();
    assert_eq!(reason, Reason::LeaseExpired, "{}", ours.report("ours"));
    assert_eq!(lost_tasks, ours_before, "{}", ours.report("ours"));
    let took = other
        .wait_seen("other", SESSION * 5, |s| s.active == all)
        .await;
    let took_at = took
        .active_log
        .iter()
        // Only what it took after the fault (it may have held them before ours joined).
        .filter(|(at, held, t)| *at >= fault && *held && ours_before.contains(t))
        .map(|(at, _, _)| *at)
        .min()
        .unwrap();
    println!(
        "streams (session read: {read}): lease TasksLost {:?} after the fault, the other member took our active tasks {:?} after it",
        lost_at - fault,
        took_at - fault
    );
    assert!(
        lost_at <= took_at,
        "lost after the takeover\n{}{}",
        ours.report("ours"),
        other.report("other")
    );
    let doubles = double_ownership(&[&lost.active_log, &took.active_log]);
    assert!(doubles.is_empty(), "{doubles:?}");

    // The answers flow again: our member rejoins and gets active tasks back.
    proxy.drop_all_answers(false);
    let back = ours
        .wait_seen("ours", Duration::from_secs(60), |s| !s.active.is_empty())
        .await;
    let s = ours.handle.snapshot().await.expect("ours running");
    assert_ne!(s.state, MemberState::Fatal, "{s:?}");
    assert_eq!(back.fatal, None, "{}", ours.report("ours"));
    assert_eq!(
        s.member_id, before.member_id,
        "the rejoin kept the member id"
    );
    let other_seen = other
        .wait_seen("other", Duration::from_secs(60), |s| {
            s.active.len() < all.len()
        })
        .await;
    let doubles = double_ownership(&[&ours.seen().active_log, &other_seen.active_log]);
    assert!(
        doubles.is_empty(),
        "{doubles:?}\n{}{}{}",
        ours.report("ours"),
        other.report("other"),
        proxy.log_text()
    );
    ours.handle.close(CloseOptions::LeaveGroup).await;
    other.handle.close(CloseOptions::LeaveGroup).await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_member_loses_its_active_tasks_before_the_broker_reassigns_them() {
    run(false).await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_member_reads_the_group_session_timeout_from_the_broker() {
    run(true).await;
}

/// Kafka's default streams heartbeat interval (`streams.heartbeat.interval.ms`), set on the
/// group of [`a_lost_assignment_answer_is_recovered_within_a_heartbeat_interval`].
const KAFKA_DEFAULT_INTERVAL: Duration = Duration::from_secs(5);

/// The answer the broker sends a streams member only once: a heartbeat answer carrying a new
/// assignment (GroupMetadataManager.streamsGroupHeartbeat sends the tasks when the member joins
/// or its heartbeat changed them, never again). The proxy drops exactly that answer and resets
/// the connection after the broker processed the heartbeat, twice: (1) the answer that takes two
/// of our member's four active tasks away for a second member, (2) once that member left, the
/// answer that gives them back. Our static member must reach each new assignment within one
/// heartbeat interval of the reset (it reads its record back with StreamsGroupDescribe before
/// its next heartbeat): without that, (1) leaves the broker waiting for a revocation until the
/// rebalance timeout (300 s) while the second member gets nothing, and (2) leaves two tasks
/// nobody runs. Kafka's default streams timeouts for the group (interval 5 s, session 45 s),
/// the crate's defaults for our members.
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_assignment_answer_is_recovered_within_a_heartbeat_interval() {
    lost_answer(false).await;
}

/// The same with a Java Kafka Streams 4.4 instance (tests/kafka/StreamsPeer.java, its
/// topology: two subtopologies, eight tasks) as the second member, leaving the group on close.
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_assignment_answer_is_recovered_beside_java_streams() {
    lost_answer(true).await;
}

/// The second member of the lost-answer test: ours (directly to the broker) or Java's.
enum Other {
    Ours(Member),
    Java(StreamsPeer),
}

impl Other {
    fn active(&self) -> BTreeSet<TaskId> {
        match self {
            Other::Ours(m) => m.seen().active,
            Other::Java(j) => (j.status().map(|s| s.active).unwrap_or_default().iter())
                .filter_map(|t| {
                    let (sub, p) = t.split_once('_')?;
                    Some(TaskId::new(sub, p.parse().ok()?))
                })
                .collect(),
        }
    }

    async fn leave(self) {
        match self {
            Other::Ours(m) => {
                m.handle.close(CloseOptions::LeaveGroup).await;
            }
            Other::Java(j) => assert!(j.close().await, "the Java instance did not close cleanly"),
        }
    }

    fn report(&self) -> String {
        match self {
            Other::Ours(m) => m.report("other"),
            Other::Java(j) => j.report("java"),
        }
    }
}

/// [`a_lost_assignment_answer_is_recovered_within_a_heartbeat_interval`] with our member's
/// peer a second member of ours or (`java`) a Java Kafka Streams instance.
async fn lost_answer(java: bool) {
    use consumer_membership::request::{Api, ResponseBody};
    let Some(bootstrap) = common::bootstrap() else {
        return;
    };
    let input = unique("streams-lost-in");
    let output = unique("streams-lost-out");
    let group = unique("streams-lost");
    let (admin, _) = transport(&bootstrap);
    common::create_topic(admin.as_ref(), &input, PARTITIONS).await;
    common::create_topic(admin.as_ref(), &output, PARTITIONS).await;
    common::set_group_configs(
        &bootstrap,
        &group,
        &[
            ("streams.heartbeat.interval.ms", "5000"),
            ("streams.session.timeout.ms", "45000"),
        ],
    )
    .await;
    let (our_topology, subtopologies) = match java {
        false => (topology(&input), &["0"][..]),
        true => (streams_peer::topology(&group, &input), &["0", "1"][..]),
    };
    let all: BTreeSet<TaskId> = (subtopologies.iter())
        .flat_map(|s| (0..PARTITIONS).map(|p| TaskId::new(*s, p)))
        .collect();
    let n_all = all.len();
    let proxy = Proxy::start(&bootstrap).await.expect("proxy");
    let config = |instance: &str| {
        let mut c = GroupConfig::new(&group);
        c.instance_id = Some(instance.to_owned());
        c
    };
    let (through_proxy, _) = transport(proxy.bootstrap());
    let ours = Member::start(through_proxy, config("ours-a"), our_topology.clone());
    ours.wait_seen("ours", Duration::from_secs(60), |s| s.active == all)
        .await;
    // The answer of an assignment with fewer than all tasks: the other member's arrival.
    let active_count = |b: &ResponseBody| match b {
        ResponseBody::StreamsGroupHeartbeat(r) if r.error_code == 0 => r
            .active_tasks
            .as_ref()
            .map(|ts| ts.iter().map(|t| t.partitions.len()).sum::<usize>()),
        _ => None,
    };
    let wait_fired = async |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while proxy.reset_rule_pending() {
            assert!(
                Instant::now() < deadline,
                "no {what} answer within 60 s\n{}",
                proxy.log_text()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        proxy.reset_fired_at().expect("the rule fired")
    };
    proxy.reset_on_answer(Api::STREAMS_GROUP_HEARTBEAT, move |b| {
        active_count(b).is_some_and(|n| n < n_all)
    });
    let (direct, _) = transport(&bootstrap);
    let other = match java {
        false => Other::Ours(Member::start(direct, config("ours-b"), our_topology)),
        true => Other::Java(
            StreamsPeer::builder(&bootstrap, &group, &input, &output)
                .leave_on_close()
                .spawn(),
        ),
    };
    let reset = wait_fired("shrinking").await;
    let kept = ours
        .wait_seen("ours", KAFKA_DEFAULT_INTERVAL * 3, |s| {
            s.active.len() < all.len()
                && s.active_log
                    .iter()
                    .any(|(at, held, _)| *at >= reset && !held)
        })
        .await;
    let shrunk_at = kept
        .active_log
        .iter()
        .filter(|(at, held, _)| *at >= reset && !held)
        .map(|(at, _, _)| *at)
        .min()
        .unwrap();
    let others_deadline = Instant::now() + Duration::from_secs(30);
    let others = loop {
        let (a, b) = (ours.seen().active, other.active());
        if !b.is_empty() && a.is_disjoint(&b) {
            break b;
        }
        assert!(Instant::now() < others_deadline, "{}", other.report());
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!(
        "lost shrinking answer: our member revoked its tasks {:?} after the reset; the other member holds {:?}",
        shrunk_at - reset,
        others
    );
    assert!(
        shrunk_at - reset <= KAFKA_DEFAULT_INTERVAL,
        "revoked {:?} after the reset\n{}{}",
        shrunk_at - reset,
        ours.report("ours"),
        proxy.log_text()
    );
    if let Other::Ours(m) = &other {
        let doubles = double_ownership(&[&ours.seen().active_log, &m.seen().active_log]);
        assert!(doubles.is_empty(), "{doubles:?}");
    }

    // (2) The other member leaves; the answer that gives our member all tasks back is lost.
    let settled = Instant::now() + Duration::from_secs(30);
    loop {
        let (a, b) = (ours.seen().active, other.active());
        if a.union(&b).count() == all.len() && a.is_disjoint(&b) {
            break;
        }
        assert!(Instant::now() < settled, "not split: {a:?} {b:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.reset_on_answer(Api::STREAMS_GROUP_HEARTBEAT, move |b| {
        active_count(b) == Some(n_all)
    });
    other.leave().await;
    let reset = wait_fired("growing").await;
    let grown = ours
        .wait_seen("ours", KAFKA_DEFAULT_INTERVAL * 3, |s| s.active == all)
        .await;
    let grown_at = grown
        .active_log
        .iter()
        .filter(|(at, held, _)| *at >= reset && *held)
        .map(|(at, _, _)| *at)
        .max()
        .unwrap();
    println!(
        "lost growing answer: our member took all tasks {:?} after the reset",
        grown_at - reset
    );
    assert!(
        grown_at - reset <= KAFKA_DEFAULT_INTERVAL,
        "took them {:?} after the reset\n{}{}",
        grown_at - reset,
        ours.report("ours"),
        proxy.log_text()
    );
    // Stable once the acknowledging heartbeat that follows is answered.
    let deadline = Instant::now() + KAFKA_DEFAULT_INTERVAL;
    loop {
        let s = ours.handle.snapshot().await.expect("ours running");
        if s.state == MemberState::Stable && s.tasks.active == all {
            break;
        }
        assert!(Instant::now() < deadline, "{s:?}\n{}", ours.report("ours"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ours.handle.close(CloseOptions::LeaveGroup).await;
}
