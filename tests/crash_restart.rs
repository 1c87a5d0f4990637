//! A static consumer-protocol member killed with SIGKILL and started again at once, on a real
//! broker with Kafka's default timings for the group (`consumer.session.timeout.ms` 45 s,
//! `consumer.heartbeat.interval.ms` 5 s, set on the group), beside a second static member of
//! ours:
//! - with its member id kept in a file (`--member-id-file`, [`MemberIdFile`]), the restarted
//!   process releases its crashed incarnation's registration itself (a -2 leave under the kept
//!   id) and owns its partitions again within a second, and the other member's assignment never
//!   moves;
//! - without it, the broker answers UNRELEASED_INSTANCE_ID until the crashed incarnation's
//!   session expires: the restarted process says so (`InstanceHeld`), does not stop, and owns
//!   partitions again within the session timeout plus a heartbeat interval and the retry
//!   backoff.
//!
//! The processes are the README's example consumer (examples/consumer.rs); the times are printed.
//!
//! [`MemberIdFile`]: consumer_membership::MemberIdFile

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::java_peer::{self, JavaConsumer};
use common::{TestMember, bootstrap, create_topic, transport, unique};
use consumer_membership::config::{GroupConfig, GroupProtocol};
use consumer_membership::request::{Request, Response, Target};
use consumer_membership::streams::{
    StreamsConfig, StreamsEvent, StreamsGroupMember, StreamsMemberHandle, StreamsProcess,
    StreamsTopology, Subtopology, TaskId,
};
use consumer_membership::transport::{TcpTransport, Transport};
use consumer_membership::{ClientConfig, MemberId, TransportError};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

/// Kafka's defaults for consumer groups (GroupCoordinatorConfig).
const SESSION: Duration = Duration::from_secs(45);
const HEARTBEAT: Duration = Duration::from_secs(5);

/// One process of the example, its stdout lines with the instant each arrived.
struct Proc {
    child: Child,
    started: Instant,
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
}

impl Proc {
    fn spawn(bootstrap: &str, group: &str, topic: &str, member_id_file: Option<&Path>) -> Proc {
        let mut cmd = Command::new(common::example_binary("consumer"));
        cmd.args(["--bootstrap", bootstrap, "--group", group, "--topic", topic])
            .args(["--protocol", "consumer", "--instance-id", "a", "--quiet"])
            .stdout(Stdio::piped())
            .stdin(Stdio::null());
        if let Some(f) = member_id_file {
            cmd.arg("--member-id-file").arg(f);
        }
        let started = Instant::now();
        let mut child = cmd.spawn().expect("start the example consumer");
        let stdout = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push((Instant::now(), line));
            }
        });
        Proc {
            child,
            started,
            lines,
        }
    }

    /// When a line containing `needle` first arrived.
    fn seen(&self, needle: &str) -> Option<Instant> {
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .find(|(_, l)| l.contains(needle))
            .map(|(t, _)| *t)
    }

    /// Waits up to `timeout` for a line containing `needle`; its arrival.
    async fn wait(&mut self, needle: &str, timeout: Duration) -> Instant {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(t) = self.seen(needle) {
                return t;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the example exited ({status}) before {needle:?}:\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no {needle:?} within {timeout:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn log(&self) -> String {
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .map(|(t, l)| format!("  +{:?} {l}", t.duration_since(self.started)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// SIGKILL, and wait until the process is gone.
    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The group with Kafka's default session and heartbeat (the test broker's are shorter).
async fn default_timings(bootstrap: &str, group: &str, protocol: &str) {
    let session = SESSION.as_millis().to_string();
    let heartbeat = HEARTBEAT.as_millis().to_string();
    common::set_group_configs(
        bootstrap,
        group,
        &[
            (&format!("{protocol}.session.timeout.ms"), &session),
            (&format!("{protocol}.heartbeat.interval.ms"), &heartbeat),
        ],
    )
    .await;
}

/// A's process on 2 of 4 partitions, B (in this process) on the other 2, both stable; then A is
/// killed and started again. Returns the restarted process, how long after its start it owned
/// 2 partitions again, B, and what B had seen before the kill.
async fn kill_and_restart(kept: bool) -> (Proc, Duration, TestMember, common::Seen) {
    let bootstrap = bootstrap().unwrap();
    let group = unique("crash-restart");
    let topic = unique("crash-restart");
    let (t, _) = transport(&bootstrap);
    create_topic(&*t, &topic, 4).await;
    default_timings(&bootstrap, &group, "consumer").await;
    let dir = std::env::temp_dir().join(unique("crash-restart"));
    std::fs::create_dir_all(&dir).unwrap();
    let id_file = dir.join("a.id");
    let id_file = kept.then_some(id_file.as_path());

    let mut a = Proc::spawn(&bootstrap, &group, &topic, id_file);
    a.wait("owns 4 partitions", Duration::from_secs(60)).await;
    let config = GroupConfig::new(&group)
        .with_protocol(GroupProtocol::Consumer)
        .with_instance_id("b");
    let (tb, _) = transport(&bootstrap);
    let b = TestMember::start(tb, config, &[&topic]).await;
    b.wait_seen(Duration::from_secs(60), |s| s.owned.len() == 2)
        .await;
    // A gave 2 partitions to B: it owns 2, the group is settled.
    a.wait("revoked", Duration::from_secs(60)).await;
    tokio::time::sleep(HEARTBEAT + Duration::from_secs(1)).await;
    let before = b.seen();

    a.kill();
    let mut a = Proc::spawn(&bootstrap, &group, &topic, id_file);
    let back = a
        .wait(
            "owns 2 partitions",
            SESSION + HEARTBEAT + Duration::from_secs(15),
        )
        .await;
    let took = back.duration_since(a.started);
    println!(
        "kept id {kept}: the restarted process owned its 2 partitions {took:?} after its start\n{}",
        a.log()
    );
    if kept {
        assert!(
            a.seen("(kept from an earlier run)").is_some(),
            "{}",
            a.log()
        );
    }
    let after = b.seen();
    assert_eq!(after.fatal, None);
    println!(
        "B meanwhile: revoked {:?}, lost {}, ownership changes {}",
        &after.revoked[before.revoked.len()..],
        after.lost - before.lost,
        after.ownership_log.len() - before.ownership_log.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
    (a, took, b, before)
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_static_member_with_a_kept_id_is_back_within_a_second() {
    let (a, took, b, before) = kill_and_restart(true).await;
    assert!(
        a.seen("held by an earlier incarnation").is_none(),
        "no wait: {}",
        a.log()
    );
    // The restart costs two heartbeat round trips (the -2 leave, the join) and the process's
    // start; the broker keeps the static member's assignment across the -2 leave.
    assert!(
        took < Duration::from_secs(1),
        "back after {took:?}:\n{}",
        a.log()
    );
    // No rebalance at all: B's assignment never moved.
    let s = b.seen();
    assert_eq!(s.owned, before.owned, "B kept its partitions: {s:?}");
    assert_eq!(s.revoked, before.revoked, "B revoked nothing: {s:?}");
    assert_eq!(s.lost, 0, "{s:?}");
    assert_eq!(
        s.ownership_log
            .iter()
            .map(|(_, _, p)| p.clone())
            .collect::<BTreeSet<_>>()
            .len(),
        2,
        "B never held A's partitions: {s:?}"
    );
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_static_member_without_a_kept_id_waits_for_the_old_session_and_is_back() {
    let (a, took, b, _) = kill_and_restart(false).await;
    assert!(
        a.seen("held by an earlier incarnation").is_some(),
        "the wait is reported: {}",
        a.log()
    );
    // The broker expires the crashed incarnation after the session timeout (from its last
    // heartbeat, up to one interval before the kill); the restarted member's retries are at most
    // retry.backoff.max.ms (1 s) apart.
    assert!(
        took <= SESSION + HEARTBEAT + Duration::from_secs(3),
        "back after {took:?}:\n{}",
        a.log()
    );
    assert!(
        took >= SESSION - HEARTBEAT - Duration::from_secs(1),
        "back after {took:?}, before the old session could expire:\n{}",
        a.log()
    );
    assert_eq!(b.seen().fatal, None);
}

// ------------------------------------------------------------------------- streams members

/// A transport that can be cut off for good: the crash of a process, as the broker sees it
/// (nothing more arrives from the member, not even a leave).
struct Crashable {
    inner: TcpTransport,
    crashed: AtomicBool,
}

impl Transport for Crashable {
    async fn send(
        &self,
        target: Target,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, TransportError> {
        if self.crashed.load(SeqCst) {
            return Err(TransportError::Disconnected {
                addr: target.to_string(),
                reason: "the process crashed (test)".into(),
            });
        }
        self.inner.send(target, request, timeout).await
    }
}

/// What a streams member of ours saw: every event (as text) with when it came, and the active
/// tasks it holds by them.
#[derive(Default)]
struct StreamsSeen {
    events: Vec<(Instant, String)>,
    active: BTreeSet<TaskId>,
}

/// A streams member of ours; revocations are handed back at once.
struct Streams {
    handle: StreamsMemberHandle,
    transport: Arc<Crashable>,
    seen: Arc<Mutex<StreamsSeen>>,
    started: Instant,
}

impl Streams {
    fn start(bootstrap: &str, group: GroupConfig, input: &str) -> Streams {
        let transport = Arc::new(Crashable {
            inner: TcpTransport::new(ClientConfig::new(bootstrap).unwrap()),
            crashed: AtomicBool::new(false),
        });
        let topology = StreamsTopology::new(0, vec![Subtopology::new("0", [input.to_owned()])]);
        // A new process id, as after a restart with a fresh state directory.
        let process = StreamsProcess::new(unique("process"), None);
        let started = Instant::now();
        let mut member = StreamsGroupMember::start(
            transport.clone(),
            group,
            StreamsConfig::new(topology),
            process,
        )
        .expect("valid config");
        let handle = member.handle();
        let seen = Arc::new(Mutex::new(StreamsSeen::default()));
        let (log, h) = (seen.clone(), handle.clone());
        tokio::spawn(async move {
            while let Some(event) = member.next_event().await {
                let text = format!("{event:?}");
                let mut ticket = None;
                {
                    let mut s = log.lock().unwrap();
                    s.events.push((Instant::now(), text));
                    match event {
                        StreamsEvent::TasksAssigned { owned, .. }
                        | StreamsEvent::TasksReleased { owned, .. } => {
                            s.active = owned.active.iter().cloned().collect()
                        }
                        StreamsEvent::TasksRevoking { active, ticket: t } => {
                            for task in &active {
                                s.active.remove(task);
                            }
                            ticket = Some(t);
                        }
                        StreamsEvent::TasksLost { .. } => s.active.clear(),
                        _ => {}
                    }
                }
                if let Some(t) = ticket {
                    let _ = h.complete_revocation(t).await;
                }
            }
        });
        Streams {
            handle,
            transport,
            seen,
            started,
        }
    }

    /// Waits until the member holds `n` active tasks; when it first did.
    async fn wait_active(&self, n: usize, timeout: Duration) -> Instant {
        let deadline = Instant::now() + timeout;
        loop {
            if self.seen.lock().unwrap().active.len() == n {
                return Instant::now();
            }
            assert!(
                Instant::now() < deadline,
                "not {n} active tasks within {timeout:?}: {}",
                self.report()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn report(&self) -> String {
        let seen = self.seen.lock().unwrap();
        seen.events
            .iter()
            .map(|(t, e)| format!("  +{:?} {e}", t.duration_since(self.started)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The events since the `from`-th, as text.
    fn events_from(&self, from: usize) -> Vec<String> {
        let seen = self.seen.lock().unwrap();
        seen.events[from..].iter().map(|(_, e)| e.clone()).collect()
    }

    /// How many events' text starts with `kind` (the variant's name).
    fn count(&self, kind: &str) -> usize {
        self.events_from(0)
            .iter()
            .filter(|e| e.starts_with(kind))
            .count()
    }
}

/// Two static streams members ("a", "b") of a group with Kafka's default streams session and
/// heartbeat, 2 of 4 tasks each; "a" crashes (nothing of it reaches the broker any more) and a
/// new incarnation of it starts at once, with a new process id and, if `kept`, a's member id.
/// Returns the new incarnation, how long after its start it held 2 active tasks again, and
/// "b" with how many of its events came before the crash.
async fn streams_kill_and_restart(kept: bool) -> (Streams, Duration, Streams, usize) {
    let bootstrap = bootstrap().unwrap();
    let version = std::env::var("KAFKA_VERSION").unwrap_or_default();
    if version.starts_with("3.")
        || ["4.0", "4.1", "4.2", "4.3"]
            .iter()
            .any(|v| version.starts_with(v))
    {
        panic!("static streams members need Kafka 4.4 (KAFKA-20169); this broker is {version}");
    }
    let group = unique("crash-streams");
    let input = unique("crash-streams-in");
    let (t, _) = transport(&bootstrap);
    create_topic(&*t, &input, 4).await;
    default_timings(&bootstrap, &group, "streams").await;
    let config = |instance: &str| GroupConfig::new(&group).with_instance_id(instance);
    let a = Streams::start(&bootstrap, config("a"), &input);
    a.wait_active(4, Duration::from_secs(60)).await;
    let b = Streams::start(&bootstrap, config("b"), &input);
    b.wait_active(2, Duration::from_secs(60)).await;
    a.wait_active(2, Duration::from_secs(60)).await;
    tokio::time::sleep(HEARTBEAT + Duration::from_secs(1)).await;
    let b_before = b.seen.lock().unwrap().events.len();
    let a_id = a.handle.snapshot().await.expect("a alive").member_id;

    a.transport.crashed.store(true, SeqCst);
    let restarted = if kept {
        config("a").with_kept_member_id(MemberId::parse(&a_id).unwrap())
    } else {
        config("a")
    };
    let a2 = Streams::start(&bootstrap, restarted, &input);
    let back = a2
        .wait_active(2, SESSION + HEARTBEAT + Duration::from_secs(15))
        .await;
    let took = back.duration_since(a2.started);
    println!(
        "streams, kept id {kept}: the new incarnation held 2 active tasks {took:?} after its start\n{}",
        a2.report()
    );
    (a2, took, b, b_before)
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_static_streams_member_with_a_kept_id_is_back_within_a_second() {
    let (a2, took, b, b_before) = streams_kill_and_restart(true).await;
    assert!(
        took < Duration::from_secs(1),
        "back after {took:?}:\n{}",
        a2.report()
    );
    assert_eq!(a2.count("InstanceHeld"), 0, "{}", a2.report());
    // The other member saw nothing of it.
    let b_events = b.events_from(b_before);
    assert!(
        b_events.iter().all(|e| !e.starts_with("TasksRevoking")
            && !e.starts_with("TasksLost")
            && !e.starts_with("TasksAssigned")),
        "{b_events:?}"
    );
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_static_streams_member_without_a_kept_id_waits_for_the_old_session() {
    let (a2, took, b, b_before) = streams_kill_and_restart(false).await;
    assert_eq!(a2.count("InstanceHeld"), 1, "{}", a2.report());
    assert_eq!(a2.count("Fatal"), 0, "{}", a2.report());
    assert!(
        took <= SESSION + HEARTBEAT + Duration::from_secs(3),
        "back after {took:?}:\n{}",
        a2.report()
    );
    println!("streams, b meanwhile: {:?}", b.events_from(b_before));
}

// ------------------------------------------------------------------------ Java, for the record

/// The consumer scenario with Java's KafkaConsumer (consumer protocol, static "a") in place of
/// our process, for the record: the restarted Java consumer meets UNRELEASED_INSTANCE_ID and
/// fails with it (`UnreleasedInstanceIdException` is fatal in the Java client), or owns its
/// partitions only once the crashed incarnation's session expired. The figures are printed.
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javas_killed_static_consumer_for_the_record() {
    let bootstrap = bootstrap().unwrap();
    let group = unique("crash-java");
    let topic = unique("crash-java");
    let (t, _) = transport(&bootstrap);
    create_topic(&*t, &topic, 4).await;
    default_timings(&bootstrap, &group, "consumer").await;
    let java = |b: &str| {
        JavaConsumer::builder(b, &topic, &group)
            .protocol(java_peer::GroupProtocol::Consumer)
            .instance_id("a")
            .spawn()
    };
    let a = java(&bootstrap);
    assert!(
        a.wait_for(Duration::from_secs(90), |p| p.len() == 4).await,
        "{}",
        a.report("no 4 partitions")
    );
    let config = GroupConfig::new(&group)
        .with_protocol(GroupProtocol::Consumer)
        .with_instance_id("b");
    let (tb, _) = transport(&bootstrap);
    let b = TestMember::start(tb, config, &[&topic]).await;
    b.wait_seen(Duration::from_secs(60), |s| s.owned.len() == 2)
        .await;
    assert!(
        a.wait_for(Duration::from_secs(60), |p| p.len() == 2).await,
        "{}",
        a.report("no 2 partitions")
    );
    tokio::time::sleep(HEARTBEAT + Duration::from_secs(1)).await;

    a.kill();
    let killed = Instant::now();
    let a2 = java(&bootstrap);
    let back = a2
        .wait_for(SESSION + HEARTBEAT + Duration::from_secs(15), |p| {
            p.len() == 2
        })
        .await;
    let took = killed.elapsed();
    let unreleased = a2.stderr_contains("UnreleasedInstanceId")
        || a2
            .events()
            .iter()
            .any(|e| e.contains("UnreleasedInstanceId"));
    println!(
        "Java: the restarted static consumer {} after {took:?}; UnreleasedInstanceIdException seen: {unreleased}",
        if back {
            "owned its 2 partitions"
        } else {
            "did not own its partitions (exited or still waiting)"
        }
    );
    assert!(
        (back && took >= SESSION - HEARTBEAT - Duration::from_secs(1)) || (!back && unreleased),
        "Java restarted faster than its old session, or failed otherwise: back {back} after {took:?}\n{}",
        a2.report("restarted")
    );
}

// ------------------------------------------------------------------ a genuine duplicate

/// A second live member with the same instance id (another member id) is not a restart: the
/// first keeps heartbeating, so the instance id stays held, and the second stops with the typed
/// error once its wait (the group's session timeout plus the margin) is spent, having said why
/// it waits. The first keeps its partitions throughout. The test broker's 6 s group session
/// keeps the wait short (6 s + 2 s margin).
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_duplicate_instance_id_ends_with_the_typed_error() {
    use consumer_membership::{Event, GroupError};
    let bootstrap = bootstrap().unwrap();
    let group = unique("duplicate");
    let topic = unique("duplicate");
    let (t, _) = transport(&bootstrap);
    create_topic(&*t, &topic, 2).await;
    let config = || {
        GroupConfig::new(&group)
            .with_protocol(GroupProtocol::Consumer)
            .with_instance_id("d")
            .with_group_session_timeout(Duration::from_secs(6))
            .with_unreleased_instance_margin(Some(Duration::from_secs(2)))
    };
    let (t1, _) = transport(&bootstrap);
    let first = TestMember::start(t1, config(), &[&topic]).await;
    first
        .wait_seen(Duration::from_secs(60), |s| s.owned.len() == 2)
        .await;

    let (t2, _) = transport(&bootstrap);
    let mut second = consumer_membership::GroupMember::start(t2, config()).unwrap();
    second.subscribe([topic.clone()]).await.unwrap();
    let started = Instant::now();
    let mut held = None;
    let fatal = loop {
        let event = tokio::time::timeout(Duration::from_secs(60), second.next_event())
            .await
            .expect("the duplicate stops within a minute")
            .expect("an event");
        match event {
            Event::InstanceHeld { instance_id, limit } => {
                assert_eq!(instance_id, "d");
                assert_eq!(limit, Duration::from_secs(8));
                held = Some(started.elapsed());
            }
            Event::Assigned { .. } => panic!("the duplicate got partitions: {event:?}"),
            Event::Fatal(e) => break e,
            _ => {}
        }
    };
    let after = started.elapsed();
    println!("duplicate: InstanceHeld after {held:?}, stopped after {after:?}: {fatal}");
    assert!(
        matches!(&fatal, GroupError::UnreleasedInstanceId { instance_id, .. } if instance_id == "d"),
        "{fatal:?}"
    );
    assert!(held.is_some(), "the wait was reported");
    assert!(
        after >= Duration::from_secs(8) && after < Duration::from_secs(15),
        "stopped after {after:?}; the wait is 8 s"
    );
    let s = first.seen();
    assert_eq!(
        s.owned.len(),
        2,
        "the first member kept its partitions: {s:?}"
    );
    assert_eq!((s.lost, s.revoked.len()), (0, 0), "{s:?}");
    assert_eq!(s.fatal, None);
}
