//! KAFKA-20985 (seeds/KAFKA-20985-static-member-self-fencing.txt) on a real Kafka broker, with
//! the interleaving forced by the TCP fault proxy of tests/common/proxy.rs:
//!
//! 1. a lone static classic member, connected through the proxy, is Stable;
//! 2. the coordinator "stalls": the proxy holds every request on the member's coordinator
//!    connection (the next heartbeat, HB, stands for HB1/HB2 of the seed: delivered, unanswered);
//! 3. the application unsubscribes (static: no LeaveGroup) and subscribes again at once: Join #1
//!    goes out on the coordinator connection, behind HB, and is held as well;
//! 4. HB times out (`request.timeout.ms`), so the client closes the connection, failing Join #1
//!    in its own bookkeeping only; the proxy keeps Join #1's bytes and the upstream connection;
//! 5. the client finds the coordinator again and sends Join #2 on a new connection;
//! 6. Join #2 reaches the broker first; then the proxy releases the held bytes to the broker on
//!    the old upstream connection: the broker processes Join #1 after Join #2, and the answers
//!    on that connection go nowhere.
//!
//! Two shapes of step 6 ([`Shape`]): `Backlog` on the single broker of with-broker.sh (Join #2
//! forwarded at once, HB and Join #1 right after it; on one node Join #2's membership record
//! commits within ~2 ms, so Join #1 lands after Join #2 was answered and the fence reaches the
//! member on its next SyncGroup or Heartbeat), and `Replicating` on a 3-node cluster of its own
//! (a follower of the offsets partition frozen with SIGSTOP keeps Join #2's answer parked while
//! Join #1 is processed: the seed's exact shape, Join #2 itself answered FENCED_INSTANCE_ID).
//!
//! With the Java client's policy (member id wiped on the suppressed LeaveGroup; `sim` feature,
//! `ClassicMember::set_java_reset_policy`) both joins carry `""` + the instance id: Join #2
//! replaces the registered member, Join #1 replaces Join #2's member, and the member receives
//! FENCED_INSTANCE_ID and stops. With this crate's policy the member id is kept, both joins are
//! rejoins of the known member, and it ends Stable with its partitions.
//!
//! The `GroupMember` driver does not expose the Java policy, so the member is driven here by a
//! small loop over the public sans-IO `ClassicMember` (the same drive contract as the driver's
//! loop, with commands and the application's polls fed in between).

// Without `sim` there is no Java policy, and its checks go unused.
#![cfg_attr(not(feature = "sim"), allow(dead_code))]

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::proxy::{ConnId, ConnPolicy, Proxy, Record, What};
use consumer_membership::config::GroupConfig;
use consumer_membership::driver;
use consumer_membership::machine::TopicPartition;
use consumer_membership::machine::classic::ClassicMember;
use consumer_membership::machine::events::Event;
use consumer_membership::machine::events::MemberState;
use consumer_membership::request::{Api, Request, RequestId, ResponseBody, Target};
use consumer_membership::transport::{TcpTransport, Transport};
use consumer_membership::{ClientConfig, GroupError, TransportError};
use kafka_protocol::messages::{ApiKey, DescribeGroupsRequest, GroupId, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::mpsc;

const FENCED_INSTANCE_ID: i16 = 82;
const PARTITIONS: usize = 3;

type Cmd = Box<dyn FnOnce(&mut ClassicMember, Instant) + Send>;

/// What the driven member looks like now.
#[derive(Debug, Clone, Default)]
struct View {
    state: MemberState,
    member_id: String,
    generation: i32,
    assignment: Vec<TopicPartition>,
    coordinator: Option<i32>,
    fatal: Option<GroupError>,
}

/// A `ClassicMember` run on tokio by a task of this test: requests go out concurrently over the
/// transport, answers and timeouts are fed back, the application polls every 200 ms, revocation
/// tickets are handed back at once. Every request, answer and state change is noted in the
/// proxy's log, so one timeline shows both sides.
struct Driven {
    cmds: mpsc::UnboundedSender<Cmd>,
    view: Arc<Mutex<View>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Driven {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Driven {
    fn start<T: Transport>(mut m: ClassicMember, transport: Arc<T>, proxy: Arc<Proxy>) -> Driven {
        let (cmds, mut cmd_rx) = mpsc::unbounded_channel::<Cmd>();
        let view = Arc::new(Mutex::new(View::default()));
        let shared = view.clone();
        let task = tokio::spawn(async move {
            let (tx, mut rx) =
                mpsc::unbounded_channel::<(RequestId, Api, Result<_, TransportError>)>();
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            loop {
                while let Some(out) = m.poll_request() {
                    let api = out.request.api_key();
                    proxy.note(format!("client: send {api:?} {} to {}", out.id, out.target));
                    let (transport, tx) = (transport.clone(), tx.clone());
                    tokio::spawn(async move {
                        let r = transport.send(out.target, out.request, out.timeout).await;
                        let _ = tx.send((out.id, api, r));
                    });
                }
                while let Some(event) = m.poll_event() {
                    match event {
                        Event::Revoking { ticket, .. } => {
                            let _ = m.complete_revocation(ticket, Instant::now());
                        }
                        Event::StateChanged {
                            from,
                            to,
                            reason,
                            member_id,
                            generation,
                        } => proxy.note(format!(
                            "client: {from} -> {to} ({reason}) member_id={member_id:?} generation={generation}"
                        )),
                        Event::Fatal(e) => proxy.note(format!("client: FATAL {e}")),
                        _ => {}
                    }
                }
                *shared.lock().unwrap() = View {
                    state: m.state(),
                    member_id: m.member_id().to_owned(),
                    generation: m.generation(),
                    assignment: m.assignment(),
                    coordinator: m.coordinator().map(|b| b.node_id),
                    fatal: m.fatal_error().cloned(),
                };
                let deadline = m.poll_timeout().map(|(at, _)| at);
                tokio::select! {
                    cmd = cmd_rx.recv() => match cmd {
                        Some(f) => f(&mut m, Instant::now()),
                        None => return,
                    },
                    Some((id, api, r)) = rx.recv() => {
                        let what = match &r {
                            Ok(resp) => match common::proxy::describe_response(&resp.body) {
                                (Some(code), _) => format!("error={code}"),
                                (None, _) => "ok".to_owned(),
                            },
                            Err(e) => format!("transport error: {e}"),
                        };
                        proxy.note(format!("client: answer to {api:?} {id}: {what}"));
                        m.handle_response(id, r, Instant::now());
                    }
                    _ = sleep_until(deadline) => m.handle_timeout(Instant::now()),
                    _ = tick.tick() => m.poll(Instant::now()),
                }
            }
        });
        Driven { cmds, view, task }
    }

    fn command(&self, f: impl FnOnce(&mut ClassicMember, Instant) + Send + 'static) {
        self.cmds.send(Box::new(f)).expect("member task alive");
    }

    fn view(&self) -> View {
        self.view.lock().unwrap().clone()
    }

    async fn wait(&self, timeout: Duration, what: &str, pred: impl Fn(&View) -> bool) -> View {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let v = self.view();
            if pred(&v) {
                return v;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: not within {timeout:?}: {v:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Prints the proxy's timeline when dropped, also when the test fails half-way.
struct PrintLog(Arc<Proxy>, String);

impl Drop for PrintLog {
    fn drop(&mut self) {
        println!("---- {} ----", self.1);
        println!("(c->p: client to proxy, p->b: proxy to broker, b->p / p->c: answers)");
        print!("{}", self.0.log_text());
    }
}

/// The member id the coordinator has registered for the group's (only) member.
async fn registered_member(bootstrap: &str, group: &str) -> Option<String> {
    let (t, config) = common::transport(bootstrap);
    let coordinator = driver::find_coordinator(&t, &config, group).await.ok()?;
    let r = t
        .send(
            Target::Coordinator(coordinator),
            Request::Raw {
                body: Box::new(RequestKind::DescribeGroups(
                    DescribeGroupsRequest::default()
                        .with_groups(vec![GroupId(StrBytes::from_string(group.into()))]),
                )),
                versions: 0..=5,
                fit: None,
            },
            Duration::from_secs(10),
        )
        .await
        .ok()?;
    let ResponseBody::Kafka(ResponseKind::DescribeGroups(r)) = r.body else {
        return None;
    };
    r.groups
        .first()?
        .members
        .first()
        .map(|m| m.member_id.to_string())
}

/// The `member_id="..."` of a record's detail.
fn member_id_of(r: &Record) -> Option<String> {
    let rest = r.detail.split("member_id=\"").nth(1)?;
    Some(rest.split('"').next()?.to_owned())
}

/// What a run of the scenario showed.
struct Outcome {
    proxy: Arc<Proxy>,
    first: View,
    end: View,
    /// The member id the coordinator had registered at the end.
    registered: Option<String>,
    coordinator_conn: ConnId,
    join1: Record,
    join1_forwarded: usize,
    join2: Record,
    join2_forwarded: usize,
}

impl Outcome {
    /// The broker's answer to the JoinGroup of `join` (a record of it), delivered or not.
    fn answer_to(&self, join: &Record) -> Option<Record> {
        self.proxy.records().into_iter().find(|r| {
            r.conn == join.conn
                && r.correlation == join.correlation
                && r.api == Some(ApiKey::JoinGroup)
                && matches!(r.what, What::Answered | What::AnswerDropped)
        })
    }

    /// Java policy: whether the broker processed Join #2 before Join #1, the precondition of
    /// the seed: then the member id Join #1 was given is the one registered at the end. They
    /// come from two connections a few ms apart, so the broker may read them the other way
    /// round; then the last replacement is Join #2's, and nothing fences the live member.
    fn join2_processed_first(&self) -> bool {
        let join1 = self.answer_to(&self.join1).and_then(|r| member_id_of(&r));
        join1.is_some() && self.registered == join1
    }

    /// Answers carrying FENCED_INSTANCE_ID, and whether the client got them.
    fn fences(&self) -> Vec<Record> {
        self.proxy
            .records()
            .into_iter()
            .filter(|r| r.error_code == Some(FENCED_INSTANCE_ID))
            .collect()
    }
}

fn is(r: &Record, conn: Option<ConnId>, what: What, api: ApiKey) -> bool {
    r.what == what && r.api == Some(api) && conn.is_none_or(|c| c == r.conn)
}

/// How Join #2 and the held bytes reach the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Join #2 is forwarded at once; then the held heartbeat and Join #1 are released together
    /// (the seed's backlog: Join #1 is read only after the heartbeat in front of it is answered).
    Backlog,
    /// On the 3-node cluster: Join #2 is held as well; the heartbeat is released and answered
    /// first; a follower of the group's `__consumer_offsets` partition is frozen (SIGSTOP), so
    /// the coordinator cannot commit records; Join #2 is released, and 300 ms later Join #1. Join
    /// #1 is thus processed while Join #2's answer waits for its membership record to replicate
    /// (the seed's exact shape), deterministically.
    Replicating,
}

/// The state dir of the 3-node cluster of the `Replicating` shape.
const CLUSTER: &str = "kafka-it-20985";

fn broker_sh(args: &[&str]) -> String {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(repo.join("tests/kafka/broker.sh"))
        .args(args)
        .arg("--dir")
        .arg(repo.join("target").join(CLUSTER))
        .output()
        .expect("run tests/kafka/broker.sh");
    assert!(
        out.status.success(),
        "broker.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A node frozen with SIGSTOP, thawed with SIGCONT (at the latest on drop).
struct Frozen(Option<String>);

impl Frozen {
    fn node(node: i32) -> Frozen {
        let pid = broker_sh(&["pid", &node.to_string()]);
        let ok = Command::new("kill").args(["-STOP", &pid]).status();
        assert!(ok.is_ok_and(|s| s.success()), "kill -STOP {pid}");
        Frozen(Some(pid))
    }

    fn thaw(&mut self) {
        if let Some(pid) = self.0.take() {
            let _ = Command::new("kill").args(["-CONT", &pid]).status();
        }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        self.thaw();
    }
}

/// Runs the sequence of the module docs; `java` picks the Java client's reset policy.
async fn scenario(bootstrap: &str, java: bool, shape: Shape) -> Outcome {
    common::init_tracing();
    let proxy = Arc::new(Proxy::start(bootstrap).await.expect("proxy"));
    let (admin, _) = common::transport(bootstrap);
    let topic = common::unique("kafka-20985");
    common::create_topic(&admin, &topic, PARTITIONS as i32).await;
    let group = common::unique("kafka-20985");

    let mut client = ClientConfig::new(proxy.bootstrap()).unwrap();
    client.client_id = "kafka-20985".into();
    client.request_timeout = Duration::from_secs(5);
    let transport = Arc::new(TcpTransport::new(client));
    let mut config: GroupConfig = common::group_config(&group, Some("instance-1"));
    // A heartbeat the coordinator does not answer fails (and closes the connection) after 3 s;
    // the session (10 s) outlasts the whole stall, so the broker keeps the registered member.
    config.request_timeout = Duration::from_secs(3);
    config.session_timeout = Duration::from_secs(10);
    // The sans-IO core takes its jitter seed as an input (the driver draws one): a fixed one
    // here, so the member's retries are the same on every run.
    config.seed = Some(0x5eed);
    let mut m = ClassicMember::new(config, Instant::now()).expect("valid config");
    if java {
        set_java_policy(&mut m);
    }
    let member = Driven::start(m, transport.clone(), proxy.clone());
    let log = PrintLog(
        proxy.clone(),
        format!(
            "KAFKA-20985 on a real broker, {} policy, {shape:?}",
            if java { "Java" } else { "crate" }
        ),
    );
    proxy.note(format!(
        "test: {} policy, group {group}, topic {topic} ({PARTITIONS} partitions), instance-1",
        if java {
            "Java client's"
        } else {
            "this crate's"
        }
    ));
    let t = topic.clone();
    member.command(move |m, now| m.subscribe([t], now).expect("subscribe"));
    let first = member
        .wait(Duration::from_secs(30), "first Stable", |v| {
            v.state == MemberState::Stable && v.assignment.len() == PARTITIONS
        })
        .await;
    proxy.note(format!(
        "test: Stable, member_id={:?} generation={}",
        first.member_id, first.generation
    ));

    // The coordinator connection: the one heartbeats go over.
    let from = proxy.records_len();
    let (_, hb) = proxy
        .wait_for(from, Duration::from_secs(5), |r| {
            is(r, None, What::Forwarded, ApiKey::Heartbeat)
        })
        .await
        .expect("a heartbeat");
    let coord = hb.conn;

    // Step 3 of the seed: the coordinator stalls; the next heartbeat is delivered, not answered.
    proxy.note(format!(
        "test: STALL c{coord} (the coordinator connection holds every request from now on)"
    ));
    let from = proxy.records_len();
    proxy.stall(coord);
    if shape == Shape::Replicating {
        // Join #2 is held wherever it goes: on a new connection, or on an open one the
        // transport hands to the coordinator (the bootstrap connection to the same broker).
        proxy.new_connections(ConnPolicy {
            stall_at_api: Some(ApiKey::JoinGroup),
            ..ConnPolicy::default()
        });
        for c in proxy.connections() {
            if c.id != coord && c.client_open {
                proxy.stall_at_api(c.id, ApiKey::JoinGroup);
            }
        }
    }
    proxy
        .wait_for(from, Duration::from_secs(5), |r| {
            is(r, Some(coord), What::Received, ApiKey::Heartbeat)
        })
        .await
        .expect("a heartbeat held");

    // Steps 1-2: unsubscribe (static: no LeaveGroup) and subscribe again at once: Join #1.
    proxy.note("test: unsubscribe + subscribe (Join #1)");
    let t = topic.clone();
    member.command(move |m, now| {
        m.unsubscribe(now);
        m.subscribe([t], now).expect("subscribe");
    });
    let (_, join1) = proxy
        .wait_for(from, Duration::from_secs(5), |r| {
            is(r, Some(coord), What::Received, ApiKey::JoinGroup)
        })
        .await
        .expect("Join #1 held on the coordinator connection");

    // Step 3, client side: the held heartbeat times out, the client closes the connection, then
    // sends Join #2 on a new one.
    let (_, closed) = proxy
        .wait_for(from, Duration::from_secs(10), |r| {
            r.conn == coord && r.what == What::ClientClosed
        })
        .await
        .expect("the client closes the stalled connection");
    let mut frozen: Option<Frozen> = None;
    let join2_conn = match shape {
        Shape::Backlog => {
            // Join #2 is forwarded at once; the held bytes follow it to the broker.
            let (_, join2) = proxy
                .wait_for(from, Duration::from_secs(10), |r| {
                    is(r, None, What::Forwarded, ApiKey::JoinGroup) && r.conn != coord
                })
                .await
                .expect("Join #2 on a new connection");
            proxy.note(format!(
                "test: RELEASE c{coord} (client closed it at {:.3}s): the held heartbeat and Join #1 reach the broker",
                closed.at.as_secs_f64()
            ));
            proxy.release(coord);
            join2.conn
        }
        Shape::Replicating => {
            // Join #2 is held too; the held heartbeat goes first and is answered (to nobody), so
            // the broker reads the old connection again.
            let (_, join2) = proxy
                .wait_for(from, Duration::from_secs(10), |r| {
                    is(r, None, What::Received, ApiKey::JoinGroup) && r.conn != coord
                })
                .await
                .expect("Join #2 held on a new connection");
            proxy.new_connections(ConnPolicy::default());
            proxy.note(format!(
                "test: RELEASE the held heartbeat of c{coord} (client closed it at {:.3}s)",
                closed.at.as_secs_f64()
            ));
            let mark = proxy.records_len();
            proxy.release_some(coord, 1);
            proxy
                .wait_for(mark, Duration::from_secs(5), |r| {
                    is(r, Some(coord), What::AnswerDropped, ApiKey::Heartbeat)
                })
                .await
                .expect("the held heartbeat answered");
            // Every node holds a replica of every offsets partition (RF 3): freeze one that is
            // not the coordinator (nor node 1, the client's bootstrap connection).
            let leader = member.view().coordinator.expect("coordinator known");
            let follower = (1..=3).rev().find(|n| *n != leader).expect("a follower");
            proxy.note(format!(
                "test: kill -STOP node {follower}, a follower of the group's offsets partition (leader: node {leader}): records cannot commit"
            ));
            frozen = Some(Frozen::node(follower));
            proxy.note(format!("test: RELEASE Join #2 (c{})", join2.conn));
            proxy.release(join2.conn);
            tokio::time::sleep(Duration::from_millis(300)).await;
            proxy.note(format!("test: RELEASE Join #1 (c{coord})"));
            proxy.release(coord);
            join2.conn
        }
    };
    let (join2_forwarded, join2) = proxy
        .wait_for(from, Duration::from_secs(5), |r| {
            is(r, Some(join2_conn), What::Forwarded, ApiKey::JoinGroup)
        })
        .await
        .expect("Join #2 forwarded");
    let (join1_forwarded, _) = proxy
        .wait_for(from, Duration::from_secs(5), |r| {
            is(r, Some(coord), What::Forwarded, ApiKey::JoinGroup)
        })
        .await
        .expect("Join #1 forwarded after the release");
    // Join #1 is answered (to nobody).
    if let Some(f) = frozen.as_mut() {
        tokio::time::sleep(Duration::from_millis(500)).await;
        proxy.note("test: kill -CONT the follower");
        f.thaw();
    }
    let join1_answered = proxy
        .wait_for(join1_forwarded, Duration::from_secs(20), |r| {
            is(r, Some(coord), What::AnswerDropped, ApiKey::JoinGroup)
        })
        .await;
    if join1_answered.is_none() {
        proxy.note("test: Join #1 not answered within 20 s");
    }

    // Give a late fence time to show: a few heartbeats after Join #1 was processed.
    let end = if java {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while member.view().fatal.is_none() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        member.view()
    } else {
        tokio::time::sleep(Duration::from_secs(3)).await;
        member
            .wait(Duration::from_secs(20), "Stable again", |v| {
                v.state == MemberState::Stable && v.assignment.len() == PARTITIONS
            })
            .await
    };
    proxy.note(format!(
        "test: end: state {} member_id={:?} generation={} assignment={:?} fatal={:?}",
        end.state, end.member_id, end.generation, end.assignment, end.fatal
    ));
    let registered = registered_member(bootstrap, &group).await;
    proxy.note(format!(
        "test: the coordinator has {registered:?} for instance-1 (DescribeGroups)"
    ));
    drop(log);
    Outcome {
        proxy,
        first,
        end,
        registered,
        coordinator_conn: coord,
        join1,
        join1_forwarded,
        join2,
        join2_forwarded,
    }
}

#[cfg(feature = "sim")]
fn set_java_policy(m: &mut ClassicMember) {
    m.set_java_reset_policy(true);
}

#[cfg(not(feature = "sim"))]
fn set_java_policy(_: &mut ClassicMember) {
    unreachable!("the Java policy needs the `sim` feature");
}

/// Checks shared by both policies: the interleaving really happened.
fn check_interleaving(o: &Outcome) {
    assert_ne!(o.join2.conn, o.coordinator_conn);
    assert!(
        o.join2_forwarded < o.join1_forwarded,
        "Join #2 must reach the broker before Join #1"
    );
    let records = o.proxy.records();
    let closed = records
        .iter()
        .position(|r| r.conn == o.coordinator_conn && r.what == What::ClientClosed)
        .expect("client closed");
    assert!(
        closed < o.join1_forwarded,
        "Join #1 reaches the broker only after the client closed its connection"
    );
}

/// The Java policy: both joins carry `""`, and the member is fenced by its own Join #1.
fn check_java(o: &Outcome) {
    check_interleaving(o);
    assert!(
        o.join1.detail.contains("member_id=\"\""),
        "Join #1: {}",
        o.join1.detail
    );
    let join2_received = o
        .proxy
        .records()
        .into_iter()
        .find(|r| {
            r.conn == o.join2.conn
                && r.correlation == o.join2.correlation
                && r.what == What::Received
        })
        .expect("Join #2 received");
    assert!(
        join2_received.detail.contains("member_id=\"\""),
        "Join #2: {}",
        join2_received.detail
    );
    let fences = o.fences();
    for f in &fences {
        println!("FENCED_INSTANCE_ID: {f}");
    }
    let seen: Vec<&Record> = fences
        .iter()
        .filter(|r| r.what == What::Answered && r.conn != o.coordinator_conn)
        .collect();
    assert!(
        !seen.is_empty(),
        "the member received FENCED_INSTANCE_ID on its live connection"
    );
    println!(
        "the member got FENCED_INSTANCE_ID in a {:?} answer",
        seen[0].api
    );
    assert_eq!(o.end.state, MemberState::Fatal);
    assert!(
        matches!(o.end.fatal, Some(GroupError::FencedInstanceId { .. })),
        "typed FENCED_INSTANCE_ID, got {:?}",
        o.end.fatal
    );
}

/// This crate's policy: both joins carry the kept member id; nothing is fenced.
fn check_crate(o: &Outcome) {
    check_interleaving(o);
    let id = format!("member_id={:?}", o.first.member_id);
    assert!(o.join1.detail.contains(&id), "Join #1: {}", o.join1.detail);
    let fences = o.fences();
    assert!(
        fences.is_empty(),
        "no FENCED_INSTANCE_ID anywhere: {fences:#?}"
    );
    assert_eq!(o.end.state, MemberState::Stable);
    assert_eq!(o.end.assignment.len(), PARTITIONS);
    assert_eq!(o.end.member_id, o.first.member_id, "the member id survives");
    assert!(o.end.fatal.is_none());
}

/// The Java policy's scenario, again (up to 3 runs) when the broker happened to process the
/// two joins in the other order.
#[cfg(feature = "sim")]
async fn java_scenario(bootstrap: &str, shape: Shape) -> Outcome {
    for attempt in 1..=3 {
        let o = scenario(bootstrap, true, shape).await;
        if o.end.fatal.is_none() && !o.join2_processed_first() {
            println!(
                "attempt {attempt}: the broker processed Join #1 before Join #2 (registered {:?}); running again",
                o.registered
            );
            continue;
        }
        return o;
    }
    panic!("3 runs in a row had the broker process Join #1 first");
}

#[cfg(feature = "sim")]
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_reset_policy_is_fenced_by_its_own_abandoned_join() {
    let Some(bootstrap) = common::bootstrap() else {
        return;
    };
    check_java(&java_scenario(&bootstrap, Shape::Backlog).await);
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeping_the_member_id_is_never_fenced() {
    let Some(bootstrap) = common::bootstrap() else {
        return;
    };
    check_crate(&scenario(&bootstrap, false, Shape::Backlog).await);
}

/// The seed's exact shape on a 3-node cluster of its own: Join #2's parked JoinGroup is answered
/// FENCED_INSTANCE_ID under the Java policy; nothing is fenced under this crate's.
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_join_while_the_record_replicates() {
    if common::bootstrap().is_none() {
        return;
    }
    let cluster = common::Cluster::start(CLUSTER);
    #[cfg(feature = "sim")]
    {
        let o = scenario(&cluster.bootstrap, true, Shape::Replicating).await;
        check_java(&o);
        let join2 = o.answer_to(&o.join2).expect("Join #2 answered");
        println!("Join #2 answered: {join2}");
        assert_eq!(
            (join2.what, join2.error_code),
            (What::Answered, Some(FENCED_INSTANCE_ID)),
            "Join #2 itself is answered FENCED_INSTANCE_ID"
        );
        let join1 = o.answer_to(&o.join1).expect("Join #1 answered");
        println!("Join #1 answered: {join1}");
        assert_eq!(
            (join1.what, join1.error_code),
            (What::AnswerDropped, Some(0)),
            "Join #1 succeeds, on the connection the client closed"
        );
    }
    check_crate(&scenario(&cluster.bootstrap, false, Shape::Replicating).await);
    drop(cluster);
}

// ---------------------------------------------------------------------------- the proxy itself

/// A fake broker: answers every request frame with a frame holding only its correlation id, and
/// keeps the correlation ids it read, per connection.
async fn fake_broker() -> (String, Arc<Mutex<Vec<i32>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let read = Arc::new(Mutex::new(Vec::new()));
    let seen = read.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                loop {
                    let mut size = [0u8; 4];
                    if s.read_exact(&mut size).await.is_err() {
                        return;
                    }
                    let n = i32::from_be_bytes(size);
                    if !(0..=1 << 20).contains(&n) {
                        return;
                    }
                    let mut body = vec![0u8; n as usize];
                    if s.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    let correlation = body
                        .get(4..8)
                        .map_or(-1, |b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                    seen.lock().unwrap().push(correlation);
                    let mut answer = 4i32.to_be_bytes().to_vec();
                    answer.extend_from_slice(&correlation.to_be_bytes());
                    if s.write_all(&answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, read)
}

/// A request frame: api key, version, correlation id, null client id, `body`.
fn request_frame(api: ApiKey, correlation: i32, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&(api as i16).to_be_bytes());
    f.extend_from_slice(&4i16.to_be_bytes());
    f.extend_from_slice(&correlation.to_be_bytes());
    f.extend_from_slice(&(-1i16).to_be_bytes());
    f.extend_from_slice(body);
    let mut out = (f.len() as i32).to_be_bytes().to_vec();
    out.extend(f);
    out
}

/// Stall, hold, client close, later release on the old upstream connection, answers dropped;
/// and odd input (bad sizes, short or truncated frames, undecodable bodies) closes only the
/// connection it came on. No broker needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_holds_bytes_past_the_client_close_and_survives_odd_input() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (upstream, read) = fake_broker().await;
    let proxy = Proxy::start(&upstream).await.unwrap();
    let mut c = tokio::net::TcpStream::connect(proxy.bootstrap())
        .await
        .unwrap();
    // A request goes through and its (undecodable) answer comes back unchanged.
    c.write_all(&request_frame(ApiKey::Heartbeat, 7, &[1, 2, 3]))
        .await
        .unwrap();
    let mut answer = [0u8; 8];
    c.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer[4..], &7i32.to_be_bytes());
    let conn = proxy.connections()[0].id;

    // Stalled: the next two requests are held; the client closes; nothing reaches the broker.
    proxy.stall(conn);
    c.write_all(&request_frame(ApiKey::Heartbeat, 8, &[]))
        .await
        .unwrap();
    c.write_all(&request_frame(ApiKey::JoinGroup, 9, &[0xff; 3]))
        .await
        .unwrap();
    drop(c);
    let closed = proxy
        .wait_for(0, Duration::from_secs(5), |r| r.what == What::ClientClosed)
        .await;
    assert!(closed.is_some(), "{}", proxy.log_text());
    let info = &proxy.connections()[0];
    assert_eq!(
        (info.held, info.client_open, info.upstream_open),
        (2, false, true)
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(*read.lock().unwrap(), vec![7]);

    // Released: both reach the broker on the old upstream connection, in order; the answers
    // are dropped; then the upstream side is closed.
    proxy.release(conn);
    let dropped = proxy
        .wait_for(0, Duration::from_secs(5), |r| {
            r.what == What::AnswerDropped && r.correlation == 9
        })
        .await;
    assert!(dropped.is_some(), "{}", proxy.log_text());
    assert_eq!(*read.lock().unwrap(), vec![7, 8, 9]);
    let up_closed = proxy
        .wait_for(0, Duration::from_secs(5), |r| {
            r.conn == conn && r.what == What::UpstreamClosed
        })
        .await;
    assert!(up_closed.is_some(), "{}", proxy.log_text());

    // Odd input: each closes its own connection (or is forwarded as it is), never the proxy.
    let odd: [&[u8]; 5] = [
        &(-5i32).to_be_bytes(),                       // negative size
        &i32::MAX.to_be_bytes(),                      // huge size
        &[0, 0, 0, 2, 0x7f, 0x7f],                    // a frame too short for a header
        &[0, 0, 0, 20, 0, 12],                        // truncated, then closed
        &[0, 0, 0, 8, 0x7f, 0x7f, 0, 1, 0, 0, 0, 42], // unknown api key
    ];
    for bytes in odd {
        let mut c = tokio::net::TcpStream::connect(proxy.bootstrap())
            .await
            .unwrap();
        c.write_all(bytes).await.unwrap();
        c.shutdown().await.unwrap();
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut rest)).await;
    }
    // The proxy still works; a new connection that drops answers, then one that stalls after
    // its first request.
    let mut c = tokio::net::TcpStream::connect(proxy.bootstrap())
        .await
        .unwrap();
    c.write_all(&request_frame(ApiKey::Heartbeat, 11, &[]))
        .await
        .unwrap();
    let mut answer = [0u8; 8];
    c.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer[4..], &11i32.to_be_bytes());

    proxy.new_connections(ConnPolicy {
        drop_answers: true,
        ..ConnPolicy::default()
    });
    let mut c = tokio::net::TcpStream::connect(proxy.bootstrap())
        .await
        .unwrap();
    c.write_all(&request_frame(ApiKey::Heartbeat, 12, &[]))
        .await
        .unwrap();
    let dropped = proxy
        .wait_for(0, Duration::from_secs(5), |r| {
            r.what == What::AnswerDropped && r.correlation == 12
        })
        .await;
    assert!(dropped.is_some(), "{}", proxy.log_text());
    let mut one = [0u8; 1];
    let got = tokio::time::timeout(Duration::from_millis(200), c.read(&mut one)).await;
    assert!(got.is_err(), "no answer reaches the client: {got:?}");

    proxy.new_connections(ConnPolicy {
        stall_after: Some(1),
        ..ConnPolicy::default()
    });
    let mut c = tokio::net::TcpStream::connect(proxy.bootstrap())
        .await
        .unwrap();
    for correlation in [13, 14] {
        c.write_all(&request_frame(ApiKey::Heartbeat, correlation, &[]))
            .await
            .unwrap();
    }
    c.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer[4..], &13i32.to_be_bytes());
    let got = tokio::time::timeout(Duration::from_millis(200), c.read(&mut one)).await;
    assert!(got.is_err(), "the second request is held: {got:?}");
    let conn = proxy.connections().last().unwrap().id;
    proxy.release(conn);
    c.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer[4..], &14i32.to_be_bytes());
    println!("{}", proxy.log_text());
}
