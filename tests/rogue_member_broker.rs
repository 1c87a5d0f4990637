#![cfg(feature = "tokio")]
//! A rogue member in a classic group on a real broker: a client written here with raw JoinGroup,
//! SyncGroup, Heartbeat and LeaveGroup requests (over `TcpTransport`) joins the same group as our
//! member and sends it forged consumer-protocol bytes, which the coordinator passes on as they are.
//!
//! - Forged member metadata, our member leading
//!   (`our_leader_assigns_around_forged_member_metadata`): our member creates the group, so the
//!   coordinator keeps it as the leader (the rogue's JoinGroup answers name it). The rogue then
//!   joins, one rebalance per subscription, with a 32,767-byte topic name owning 10,000 partitions
//!   of it, with unreadable subscriptions (a topic count or an owned-partition count of 2^31-1 in
//!   34 bytes) and, under `cooperative-sticky`, with a large valid one (a 249-character topic,
//!   100,000 owned partitions); once offering only `range`, then, as a second member, only
//!   `cooperative-sticky`. Each generation must be assigned by our leader: it is Stable in the
//!   rogue's generation owning every partition of its topic, the rogue's SyncGroup gets our
//!   leader's (empty) assignment for it, and no `Fatal` is reported.
//! - Forged assignments, the rogue leading
//!   (`our_follower_refuses_forged_assignments_from_a_rogue_leader`): the rogue creates the group
//!   alone, so it leads every later generation; our member (only `cooperative-sticky`, so it keeps
//!   its partitions through a rebalance) joins. The rogue forces one rebalance per assignment and
//!   hands our member, in turn: every partition, a 32,767-byte topic name with 10,000 partitions, a
//!   partition-list count of 2^31-1, a topic-name length of 32,767 (more bytes than there are), and
//!   every partition again. Our follower takes the valid ones and refuses each forged one: the
//!   partitions it owned are reported lost with `Reason::InvalidAssignment`, it rejoins after a
//!   backoff, and it is never `Fatal`. The rogue heartbeats all along (raw Heartbeats on a
//!   connection of their own, which only ever hear "none", "rebalance in progress" or an older
//!   generation) and leaves at the end, after which our member leads the group alone.
//!
//! Memory: a counting global allocator (this binary's own) keeps the bytes the whole process holds
//! live, our member and its transport included (they run on the test's tokio threads), and their
//! peak. Every round prints its peak above the live bytes it started with, which must stay under
//! 64 MiB (`the_counter_sees_what_runtime_threads_hold` checks that memory held on a runtime thread
//! counts, so the bound can fail). Before topic names were checked and shared among partitions, the
//! 32,767-byte name was copied once per partition (10,000 x 32 KiB = 328 MB per decoded copy, and
//! the leader copied the member list again): on Kafka 4.4 the same bytes took about 1 GB and
//! aborted the leader through JoinGroup and the follower through SyncGroup. Before the bytes were
//! walked ahead of decoding, a forged count made the decoder reserve room for 2^31-1 elements.
//!
//! The tests take turns (the counter is the process's). Run them with
//!
//! ```text
//! tests/kafka/with-broker.sh cargo test --all-features --test rogue_member_broker -- --nocapture
//! ```

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Seen, TestMember};
use consumer_membership::TransportError;
use consumer_membership::driver::{Snapshot, find_coordinator};
use consumer_membership::machine::TopicPartition;
use consumer_membership::machine::classic::assignor::by_name;
use consumer_membership::machine::classic::subscription::{Assignment, Subscription};
use consumer_membership::machine::events::{CloseOptions, MemberState, Reason};
use consumer_membership::request::{Broker, Request, Target};
use consumer_membership::transport::{TcpTransport, Transport};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    GroupId, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, RequestKind,
    ResponseKind, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;

// ------------------------------------------------------------------------- memory

/// Counts the bytes the process holds live, and their peak since the last [`Watermark`].
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn grew(by: usize) {
    let now = LIVE.fetch_add(by as isize, Relaxed) + by as isize;
    PEAK.fetch_max(now, Relaxed);
}

fn shrank(by: usize) {
    LIVE.fetch_sub(by as isize, Relaxed);
}

// SAFETY: every call is forwarded to `System` unchanged; the counters are atomics and do not
// allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                shrank(layout.size() - new_size);
            }
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        shrank(layout.size());
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The peak of the process's live bytes since `start`, above what was live then.
struct Watermark {
    baseline: isize,
}

impl Watermark {
    fn start() -> Self {
        let baseline = LIVE.load(Relaxed);
        PEAK.store(baseline, Relaxed);
        Self { baseline }
    }

    fn peak(&self) -> usize {
        usize::try_from(PEAK.load(Relaxed) - self.baseline).unwrap_or(0)
    }
}

/// What one round may hold live above its start.
const BOUND: usize = 64 << 20;

/// The tests take turns: the counter is the whole process's.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_counter_sees_what_runtime_threads_hold() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mark = Watermark::start();
    tokio::spawn(async {
        let held = std::hint::black_box(vec![0u8; 2 * BOUND]);
        tokio::task::yield_now().await;
        drop(held);
    })
    .await
    .unwrap();
    assert!(mark.peak() > BOUND, "peak {} bytes", mark.peak());
}

// ------------------------------------------------------------------------- forged bytes

const PARTITIONS: i32 = 4;
const WAIT: Duration = Duration::from_secs(30);

/// The longest string the protocol carries: no topic can have such a name.
fn huge_name() -> Arc<str> {
    Arc::from("x".repeat(i16::MAX as usize))
}

/// `count` partitions of `name`, sharing it.
fn partitions(name: &Arc<str>, count: i32) -> Vec<TopicPartition> {
    (0..count).map(|p| TopicPartition::new(name, p)).collect()
}

/// `bytes` with `with` written at `at`, over what was there (`was`, checked).
fn forge(bytes: &Bytes, at: usize, was: &[u8], with: &[u8]) -> Bytes {
    let mut b = bytes.to_vec();
    assert_eq!(&b[at..at + was.len()], was, "the field forged at {at}");
    b[at..at + with.len()].copy_from_slice(with);
    Bytes::from(b)
}

const ONE: [u8; 4] = 1i32.to_be_bytes();
const MAX_COUNT: [u8; 4] = i32::MAX.to_be_bytes();

/// The member metadata the rogue joins with: what each is.
fn forged_subscriptions() -> Vec<(&'static str, Bytes)> {
    let huge = huge_name();
    let legal: Arc<str> = Arc::from(format!("rogue-{}", "t".repeat(243)));
    let small = Subscription {
        owned_partitions: partitions(&Arc::from("t"), 1),
        ..Subscription::new(["t"])
    }
    .encode();
    // v3: version, [topics], user data, [(topic, [partitions])], generation, rack (null): the
    // owned topic's partition count stands before its one partition, the generation and the rack.
    let owned_count_at = small.len() - 4 - 4 - 4 - 2;
    vec![
        (
            "a 32767-byte topic, 10k owned partitions of it",
            Subscription {
                owned_partitions: partitions(&huge, 10_000),
                generation_id: 1,
                ..Subscription::new([huge.to_string()])
            }
            .encode(),
        ),
        (
            "a topic count of 2^31-1",
            forge(&small, 2, &ONE, &MAX_COUNT),
        ),
        (
            "an owned-partition count of 2^31-1",
            forge(&small, owned_count_at, &ONE, &MAX_COUNT),
        ),
        (
            "a 249-character topic, 100k owned partitions of it",
            Subscription {
                owned_partitions: partitions(&legal, 100_000),
                generation_id: 1,
                ..Subscription::new([legal.to_string()])
            }
            .encode(),
        ),
    ]
}

/// The assignments the rogue leader hands our member: what each is, and whether it is valid.
fn forged_assignments(topic: &str) -> Vec<(&'static str, Bytes, bool)> {
    let ours = partitions(&Arc::from(topic), PARTITIONS);
    let valid = Assignment {
        partitions: ours.clone(),
        user_data: None,
    }
    .encode();
    let one = Assignment {
        partitions: ours[..1].to_vec(),
        user_data: None,
    }
    .encode();
    let name_len = (topic.len() as i16).to_be_bytes();
    vec![
        ("every partition", valid.clone(), true),
        (
            "a 32767-byte topic, 10k partitions",
            Assignment {
                partitions: partitions(&huge_name(), 10_000),
                user_data: None,
            }
            .encode(),
            false,
        ),
        (
            "a partition-list count of 2^31-1",
            forge(&one, 2, &ONE, &MAX_COUNT),
            false,
        ),
        (
            "a topic-name length of 32767",
            forge(&one, 6, &name_len, &i16::MAX.to_be_bytes()),
            false,
        ),
        ("every partition again", valid, true),
    ]
}

// ------------------------------------------------------------------------- the rogue

const NONE: i16 = 0;
const ILLEGAL_GENERATION: i16 = 22;
const REBALANCE_IN_PROGRESS: i16 = 27;
const MEMBER_ID_REQUIRED: i16 = 79;

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_owned())
}

/// Sends `body` to the coordinator `to` at one of `versions`.
async fn call(
    t: &TcpTransport,
    to: &Broker,
    body: RequestKind,
    versions: RangeInclusive<i16>,
) -> Result<ResponseKind, TransportError> {
    let request = Request::Raw {
        body: Box::new(body),
        versions,
        fit: None,
    };
    let r = t
        .send(Target::Coordinator(to.clone()), request, WAIT)
        .await?;
    Ok(r.body.into_kafka().expect("a Kafka answer"))
}

/// (member id, generation): what the rogue's heartbeats carry.
type Membership = Arc<Mutex<(String, i32)>>;

type Answers = Arc<Mutex<Vec<i16>>>;

/// A group member speaking the classic protocol with raw requests, under one assignor name.
/// JoinGroup and SyncGroup go over one connection; heartbeats, every 300 ms once it has a
/// generation, over a connection of their own.
struct Rogue {
    transport: Arc<TcpTransport>,
    coordinator: Broker,
    group: String,
    protocol: &'static str,
    membership: Membership,
    /// The error code of every heartbeat's answer (-1: no answer).
    answers: Answers,
    heartbeats: tokio::task::JoinHandle<()>,
}

impl Rogue {
    async fn start(bootstrap: &str, group: &str, protocol: &'static str) -> Rogue {
        let (transport, config) = common::transport(bootstrap);
        let coordinator = find_coordinator(&transport, &config, group)
            .await
            .expect("coordinator");
        let membership: Membership = Arc::new(Mutex::new((String::new(), -1)));
        let answers = Answers::default();
        let heartbeats = tokio::spawn(heartbeat(
            common::transport(bootstrap).0,
            coordinator.clone(),
            group.to_owned(),
            membership.clone(),
            answers.clone(),
        ));
        Rogue {
            transport,
            coordinator,
            group: group.to_owned(),
            protocol,
            membership,
            answers,
            heartbeats,
        }
    }

    fn member_id(&self) -> String {
        self.membership.lock().unwrap().0.clone()
    }

    async fn call(&self, body: RequestKind, versions: RangeInclusive<i16>) -> ResponseKind {
        call(&self.transport, &self.coordinator, body, versions)
            .await
            .expect("the coordinator answers the rogue")
    }

    /// Joins with `metadata` (a new member first gets its id: MEMBER_ID_REQUIRED); the
    /// successful answer.
    async fn join(&self, metadata: &Bytes) -> JoinGroupResponse {
        for _ in 0..3 {
            let body = JoinGroupRequest::default()
                .with_group_id(GroupId(s(&self.group)))
                .with_session_timeout_ms(10_000)
                .with_rebalance_timeout_ms(20_000)
                .with_member_id(s(&self.member_id()))
                .with_protocol_type(s("consumer"))
                .with_protocols(vec![
                    JoinGroupRequestProtocol::default()
                        .with_name(s(self.protocol))
                        .with_metadata(metadata.clone()),
                ]);
            let ResponseKind::JoinGroup(r) = self.call(RequestKind::JoinGroup(body), 5..=9).await
            else {
                panic!("not a JoinGroup answer")
            };
            match r.error_code {
                MEMBER_ID_REQUIRED => self.membership.lock().unwrap().0 = r.member_id.to_string(),
                NONE => {
                    *self.membership.lock().unwrap() = (r.member_id.to_string(), r.generation_id);
                    return r;
                }
                code => panic!("the rogue's JoinGroup: error {code}"),
            }
        }
        panic!("the rogue got no member id")
    }

    /// SyncGroup for `generation`, with `assignments` (a leader's) or none (a follower's).
    async fn sync(&self, generation: i32, assignments: Vec<(String, Bytes)>) -> SyncGroupResponse {
        let body = SyncGroupRequest::default()
            .with_group_id(GroupId(s(&self.group)))
            .with_generation_id(generation)
            .with_member_id(s(&self.member_id()))
            .with_protocol_type(Some(s("consumer")))
            .with_protocol_name(Some(s(self.protocol)))
            .with_assignments(
                assignments
                    .into_iter()
                    .map(|(member, bytes)| {
                        SyncGroupRequestAssignment::default()
                            .with_member_id(s(&member))
                            .with_assignment(bytes)
                    })
                    .collect(),
            );
        let ResponseKind::SyncGroup(r) = self.call(RequestKind::SyncGroup(body), 5..=5).await
        else {
            panic!("not a SyncGroup answer")
        };
        assert_eq!(r.error_code, NONE, "the rogue's SyncGroup");
        r
    }

    /// A rebalance the rogue follows with `metadata`: the generation, its leader, and what the
    /// leader assigned the rogue.
    async fn follow(&self, metadata: &Bytes) -> (i32, String, Assignment) {
        let joined = self.join(metadata).await;
        assert!(joined.members.is_empty(), "the rogue follows");
        let synced = self.sync(joined.generation_id, Vec::new()).await;
        let assignment = Assignment::decode(&synced.assignment).expect("the leader's assignment");
        (joined.generation_id, joined.leader.to_string(), assignment)
    }

    /// A rebalance the rogue leads (its JoinGroup forces one in a stable group): every other
    /// member gets `assignment`, the rogue nothing. The generation.
    async fn lead(&self, metadata: &Bytes, assignment: &Bytes) -> i32 {
        let joined = self.join(metadata).await;
        assert_eq!(joined.leader, joined.member_id, "the rogue leads");
        assert_eq!(joined.members.len(), 2, "the rogue and our member");
        let assignments = joined
            .members
            .iter()
            .map(|m| {
                let bytes = if m.member_id == joined.member_id {
                    Assignment::default().encode()
                } else {
                    assignment.clone()
                };
                (m.member_id.to_string(), bytes)
            })
            .collect();
        self.sync(joined.generation_id, assignments).await;
        joined.generation_id
    }

    /// Heartbeats answered REBALANCE_IN_PROGRESS.
    fn rebalances(&self) -> usize {
        let answers = self.answers.lock().unwrap();
        answers
            .iter()
            .filter(|&&c| c == REBALANCE_IN_PROGRESS)
            .count()
    }

    /// Waits until a heartbeat heard of a rebalance after `since` such answers.
    async fn wait_rebalance(&self, since: usize) {
        let deadline = Instant::now() + WAIT;
        while self.rebalances() <= since {
            assert!(Instant::now() < deadline, "no rebalance within {WAIT:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops heartbeating and leaves; checks the heartbeats kept the rogue in the group: each
    /// was answered none, rebalance in progress or (between its JoinGroup and the others')
    /// an older generation.
    async fn leave(self) {
        self.heartbeats.abort();
        let answers = self.answers.lock().unwrap().clone();
        println!("the rogue's heartbeats: {} answered", answers.len());
        assert!(!answers.is_empty(), "the rogue heartbeated");
        assert!(
            answers
                .iter()
                .all(|c| matches!(*c, NONE | ILLEGAL_GENERATION | REBALANCE_IN_PROGRESS)),
            "the rogue's heartbeats: {answers:?}"
        );
        let body = LeaveGroupRequest::default()
            .with_group_id(GroupId(s(&self.group)))
            .with_members(vec![
                MemberIdentity::default()
                    .with_member_id(s(&self.member_id()))
                    .with_reason(Some(s("the rogue is done"))),
            ]);
        let ResponseKind::LeaveGroup(r) = self.call(RequestKind::LeaveGroup(body), 3..=5).await
        else {
            panic!("not a LeaveGroup answer")
        };
        assert_eq!(r.error_code, NONE, "the rogue's LeaveGroup");
        assert_eq!(r.members[0].error_code, NONE, "the rogue's LeaveGroup");
    }
}

/// The rogue's heartbeat loop.
async fn heartbeat(
    t: Arc<TcpTransport>,
    to: Broker,
    group: String,
    membership: Membership,
    answers: Answers,
) {
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (member_id, generation) = membership.lock().unwrap().clone();
        if generation < 0 {
            continue;
        }
        let body = HeartbeatRequest::default()
            .with_group_id(GroupId(s(&group)))
            .with_generation_id(generation)
            .with_member_id(s(&member_id));
        let code = match call(&t, &to, RequestKind::Heartbeat(body), 4..=4).await {
            Ok(ResponseKind::Heartbeat(r)) => r.error_code,
            _ => -1,
        };
        answers.lock().unwrap().push(code);
    }
}

// ------------------------------------------------------------------------- our member

/// Our member, subscribed to a new topic of [`PARTITIONS`] partitions in a new group, with the
/// default assignors (`range`, then `cooperative-sticky`: it rebalances eagerly, as Java does
/// with such a list) or only `assignor`.
async fn our_member(
    bootstrap: &str,
    group: &str,
    topic: &str,
    assignor: Option<&str>,
) -> TestMember {
    let (t, _) = common::transport(bootstrap);
    common::create_topic(&*t, topic, PARTITIONS).await;
    let mut config = common::group_config(group, None);
    if let Some(name) = assignor {
        config = config.with_assignors([by_name(name).expect("a built-in assignor")]);
    }
    TestMember::start(t, config, &[topic]).await
}

/// Waits until `member` got every partition in `generation`; its snapshot then.
async fn owns_all_in(member: &TestMember, generation: i32) -> Snapshot {
    member
        .wait_seen(WAIT, |s| {
            s.assigned_generations.contains(&generation) && s.owned.len() == PARTITIONS as usize
        })
        .await;
    member.snapshot().await
}

/// State changes of `seen` for an invalid assignment.
fn refusals(seen: &Seen) -> usize {
    seen.state_reasons
        .iter()
        .filter(|r| **r == Reason::InvalidAssignment)
        .count()
}

/// Checks `member` runs on: no `Fatal` event or state.
async fn assert_running(member: &TestMember, what: &str) {
    let seen = member.seen();
    assert!(seen.fatal.is_none(), "{what}: {:?}", seen.fatal);
    assert_ne!(member.snapshot().await.state, MemberState::Fatal, "{what}");
}

/// Prints and bounds a round's peak.
fn check_peak(mark: &Watermark, what: &str, bytes: usize, started: Instant) -> usize {
    let peak = mark.peak();
    println!(
        "{what} ({bytes} bytes): peak live {peak} bytes above the round's start, {:?}",
        started.elapsed()
    );
    assert!(peak < BOUND, "{what}: {peak} bytes live");
    peak
}

// ------------------------------------------------------------------------- the tests

/// Waits for this test's turn; the broker's address and a new group name.
async fn turn(prefix: &str) -> (tokio::sync::MutexGuard<'static, ()>, String, String) {
    let turn = ONE_AT_A_TIME.lock().await;
    let bootstrap = common::bootstrap().expect("a broker");
    (turn, bootstrap, common::unique(prefix))
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_leader_assigns_around_forged_member_metadata() {
    let (_turn, b, group) = turn("rogue-metadata").await;
    let started = Instant::now();
    let ours = our_member(&b, &group, &common::unique("rogue-metadata"), None).await;
    let alone = ours.wait_stable(Some(PARTITIONS as usize), WAIT).await;
    assert!(alone.leader, "our member leads the group it created");
    let mut peak = 0;
    let cases = forged_subscriptions();
    // One rogue per assignor: a rejoining member's list is checked against the protocols every
    // member offered so far, its own earlier list included.
    for (protocol, cases) in [("range", &cases[..2]), ("cooperative-sticky", &cases[..])] {
        let rogue = Rogue::start(&b, &group, protocol).await;
        for (what, metadata) in cases {
            let what = format!("{protocol}, {what}");
            let round = Instant::now();
            let mark = Watermark::start();
            let (generation, leader, assignment) = rogue.follow(metadata).await;
            assert_eq!(leader, alone.member_id, "{what}: our member leads");
            assert!(assignment.partitions.is_empty(), "{what}: {assignment:?}");
            let snap = owns_all_in(&ours, generation).await;
            assert!(snap.leader, "{what}: {snap:?}");
            assert_running(&ours, &what).await;
            peak = peak.max(check_peak(&mark, &what, metadata.len(), round));
        }
        rogue.leave().await;
    }
    println!(
        "forged member metadata: peak live {peak} bytes, {:?}",
        started.elapsed()
    );
    ours.handle.close(CloseOptions::Default).await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_follower_refuses_forged_assignments_from_a_rogue_leader() {
    let (_turn, b, group) = turn("rogue-assignment").await;
    let started = Instant::now();
    let topic = common::unique("rogue-assignment");
    // Cooperative only: our member keeps its partitions through the rogue's rebalances, so a
    // refused assignment has partitions to report lost.
    let rogue = Rogue::start(&b, &group, "cooperative-sticky").await;
    let subscription = Subscription::new([topic.as_str()]).encode();
    let first = rogue.join(&subscription).await;
    assert_eq!(
        first.leader, first.member_id,
        "the rogue leads the group it created"
    );
    rogue
        .sync(
            first.generation_id,
            vec![(rogue.member_id(), Assignment::default().encode())],
        )
        .await;
    let ours = our_member(&b, &group, &topic, Some("cooperative-sticky")).await;
    rogue.wait_rebalance(0).await;
    let mut peak = 0;
    for (what, assignment, valid) in forged_assignments(&topic) {
        let round = Instant::now();
        let mark = Watermark::start();
        let before = ours.seen();
        let generation = rogue.lead(&subscription, &assignment).await;
        if valid {
            let snap = owns_all_in(&ours, generation).await;
            assert!(!snap.leader, "{what}: {snap:?}");
        } else {
            let seen = ours
                .wait_seen(WAIT, |s| refusals(s) > refusals(&before))
                .await;
            assert!(seen.owned.is_empty(), "{what}: {seen:?}");
            if !before.owned.is_empty() {
                // What it owned was reported lost, for this reason.
                assert_eq!(
                    seen.lost_reasons[before.lost_reasons.len()..],
                    [Reason::InvalidAssignment],
                    "{what}"
                );
            }
        }
        assert_running(&ours, what).await;
        peak = peak.max(check_peak(&mark, what, assignment.len(), round));
    }
    let seen = ours.seen();
    assert_eq!(
        seen.lost_reasons,
        [Reason::InvalidAssignment],
        "the partitions owned before the first forged assignment are reported lost"
    );
    rogue.leave().await;
    let deadline = Instant::now() + WAIT;
    loop {
        let snap = ours.snapshot().await;
        if snap.leader
            && snap.state == MemberState::Stable
            && snap.assignment.len() == PARTITIONS as usize
        {
            break;
        }
        assert!(Instant::now() < deadline, "our member alone: {snap:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "forged assignments: peak live {peak} bytes, {:?}",
        started.elapsed()
    );
    ours.handle.close(CloseOptions::Default).await;
}
