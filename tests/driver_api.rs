//! The driver's public contract, end to end over the in-memory transport and a scripted
//! one-member classic coordinator: what `close()` reports, events as a `Stream` (the streams
//! member's too), calls after `close()`, and errors that convert into
//! `consumer_membership::Error`.

use std::pin::Pin;
use std::sync::atomic::AtomicI16;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use consumer_membership::error::error_name;
use consumer_membership::machine::classic::subscription::Assignment;
use consumer_membership::request::RequestBody;
use consumer_membership::transport::MemoryTransport;
use consumer_membership::{
    ApiMisuse, CloseOptions, CloseOutcome, CommitError, Error, Event, GroupConfig, GroupMember,
    GroupProtocol, TopicPartition, TransportError,
};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::{
    MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, FindCoordinatorResponse, HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse,
    MetadataRequest, MetadataResponse, RequestKind, ResponseKind, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_owned())
}

/// The `leave_error` of a coordinator whose LeaveGroup is never delivered (the connection resets).
const UNDELIVERED: i16 = i16::MIN;

/// A classic coordinator for one member: names it "m-1", makes it a follower, assigns `t-0`, and
/// answers its LeaveGroup with `leave_error` on the member ([`UNDELIVERED`]: not at all).
fn coordinator(leave_error: i16) -> MemoryTransport {
    coordinator_seen_by(leave_error, Arc::default(), Arc::default())
}

/// As [`coordinator`], and the name of the thread each request is handled on goes to `threads`.
/// Heartbeats are answered with the code in `heartbeat_error` at the time.
fn coordinator_seen_by(
    leave_error: i16,
    threads: Arc<Mutex<Vec<String>>>,
    heartbeat_error: Arc<AtomicI16>,
) -> MemoryTransport {
    MemoryTransport::new(move |_: &_, body: RequestBody, version: i16| {
        let thread = std::thread::current().name().unwrap_or("?").to_owned();
        threads.lock().unwrap().push(thread);
        Ok(match body {
            RequestBody::Kafka(RequestKind::FindCoordinator(r)) => {
                let node = |c: Coordinator| {
                    c.with_node_id(BrokerId(1))
                        .with_host(s("127.0.0.1"))
                        .with_port(9092)
                };
                let mut answer = FindCoordinatorResponse::default();
                if version >= 4 {
                    answer.coordinators = (r.coordinator_keys.into_iter())
                        .map(|key| node(Coordinator::default().with_key(key)))
                        .collect();
                } else {
                    let c = node(Coordinator::default());
                    answer = answer
                        .with_node_id(c.node_id)
                        .with_host(c.host)
                        .with_port(c.port);
                }
                ResponseKind::FindCoordinator(answer)
            }
            RequestBody::Kafka(RequestKind::JoinGroup(_)) => ResponseKind::JoinGroup(
                JoinGroupResponse::default()
                    .with_generation_id(1)
                    .with_protocol_type(Some(s("consumer")))
                    .with_protocol_name(Some(s("range")))
                    .with_leader(s("someone-else"))
                    .with_member_id(s("m-1")),
            ),
            RequestBody::Kafka(RequestKind::SyncGroup(_)) => {
                let assignment = Assignment {
                    partitions: vec![TopicPartition::new("t", 0)],
                    user_data: None,
                };
                ResponseKind::SyncGroup(
                    SyncGroupResponse::default()
                        .with_protocol_type(Some(s("consumer")))
                        .with_protocol_name(Some(s("range")))
                        .with_assignment(assignment.encode()),
                )
            }
            RequestBody::Kafka(RequestKind::Heartbeat(_)) => ResponseKind::Heartbeat(
                HeartbeatResponse::default().with_error_code(heartbeat_error.load(SeqCst)),
            ),
            RequestBody::Kafka(RequestKind::Metadata(r)) => ResponseKind::Metadata(metadata(r)),
            RequestBody::Kafka(RequestKind::LeaveGroup(_)) if leave_error == UNDELIVERED => {
                return Err(TransportError::Disconnected {
                    addr: "127.0.0.1:9092".into(),
                    reason: "reset by the test".into(),
                });
            }
            RequestBody::Kafka(RequestKind::LeaveGroup(r)) => {
                let member = |m: kafka_protocol::messages::leave_group_request::MemberIdentity| {
                    MemberResponse::default()
                        .with_member_id(m.member_id)
                        .with_error_code(leave_error)
                };
                ResponseKind::LeaveGroup(
                    LeaveGroupResponse::default()
                        .with_members(r.members.into_iter().map(member).collect()),
                )
            }
            // Commits find the coordinator loading, always.
            RequestBody::Kafka(RequestKind::OffsetCommit(r)) => {
                use kafka_protocol::messages::offset_commit_response::{
                    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
                };
                let topic = |t: kafka_protocol::messages::offset_commit_request::OffsetCommitRequestTopic| {
                    let loading = |p: kafka_protocol::messages::offset_commit_request::OffsetCommitRequestPartition| {
                        OffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(14)
                    };
                    OffsetCommitResponseTopic::default()
                        .with_name(t.name)
                        .with_partitions(t.partitions.into_iter().map(loading).collect())
                };
                ResponseKind::OffsetCommit(
                    kafka_protocol::messages::OffsetCommitResponse::default()
                        .with_topics(r.topics.into_iter().map(topic).collect()),
                )
            }
            other => panic!("the scripted coordinator does not answer {other:?}"),
        })
    })
}

/// Topic `t` (one partition) exists, no other.
fn metadata(r: MetadataRequest) -> MetadataResponse {
    let topic = |t: MetadataRequestTopic| {
        let name = t.name.expect("named");
        let exists = name.0.as_str() == "t";
        let partitions = [MetadataResponsePartition::default().with_leader_id(BrokerId(1))];
        MetadataResponseTopic::default()
            .with_topic_id(uuid::Uuid::from_u128(u128::from(exists)))
            .with_error_code(if exists { 0 } else { 3 })
            .with_partitions(if exists { partitions.to_vec() } else { vec![] })
            .with_name(Some(name))
    };
    let topics = r.topics.unwrap_or_default().into_iter().map(topic);
    MetadataResponse::default().with_topics(topics.collect())
}

fn config() -> GroupConfig {
    GroupConfig::new("g")
        .with_protocol(GroupProtocol::Classic)
        .with_heartbeat_interval(Duration::from_millis(100))
        .with_request_timeout(Duration::from_secs(5))
}

/// Starts a member on `t`, subscribes to `t` and waits for its assignment.
async fn assigned(t: &Arc<MemoryTransport>, config: GroupConfig) -> GroupMember {
    let mut m = GroupMember::start(t.clone(), config).expect("valid config");
    subscribed_and_assigned(&mut m).await;
    m
}

/// Subscribes `m` to `t` and waits until it owns `t-0`.
async fn subscribed_and_assigned(m: &mut GroupMember) {
    m.subscribe(["t".to_string()]).await.expect("subscribed");
    let within = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match m.next_event().await.expect("member running") {
                Event::Assigned { owned, .. } => return owned,
                Event::Fatal(e) => panic!("member stopped: {e}"),
                _ => {}
            }
        }
    });
    let owned = within.await.expect("assigned within 20 s");
    assert_eq!(owned, [TopicPartition::new("t", 0)]);
}

/// The events left after a close, until the stream ends.
async fn drain(m: &mut GroupMember) -> Vec<Event> {
    let mut events = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(e) = m.next_event().await {
            events.push(e);
        }
    });
    ended.await.expect("the event stream ends after close");
    events
}

/// `start_on` outside any runtime: the member's task and its requests run on the membership
/// runtime's thread, while the application uses the member from another runtime.
#[test]
fn a_member_started_on_its_own_runtime_runs_there_and_serves_another() {
    let membership = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let threads = Arc::new(Mutex::new(Vec::new()));
    let t = Arc::new(coordinator_seen_by(0, threads.clone(), Arc::default()));
    let member = GroupMember::start_on(membership.handle(), t, config());
    let mut m = member.expect("valid config");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let driver = std::thread::Builder::new()
        .name("membership".into())
        .spawn(move || drop(membership.block_on(stopped)))
        .unwrap();
    let app = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    app.block_on(async {
        subscribed_and_assigned(&mut m).await;
        assert_eq!(
            m.close(CloseOptions::Default).await,
            CloseOutcome::Left { error: None }
        );
        assert_eq!(drain(&mut m).await.last(), Some(&Event::Closed));
    });
    drop(stop);
    driver.join().unwrap();
    let threads = threads.lock().unwrap();
    assert!(threads.len() >= 4, "{threads:?}"); // lookup, join, sync, leave at least
    assert!(threads.iter().all(|t| t == "membership"), "{threads:?}");
}

#[tokio::test]
async fn close_reports_the_answered_leave_and_the_events_drain_to_closed() {
    let t = Arc::new(coordinator(0));
    let mut m = assigned(&t, config()).await;
    let outcome = m.close(CloseOptions::Default).await;
    assert_eq!(outcome, CloseOutcome::Left { error: None });
    let events = drain(&mut m).await;
    assert!(
        events.contains(&Event::Revoked {
            partitions: vec![TopicPartition::new("t", 0)]
        }),
        "{events:?}"
    );
    assert_eq!(events.last(), Some(&Event::Closed), "{events:?}");
    // Calls after close are refused with a typed error, which converts into crate::Error.
    let after: Result<(), Error> = m.unsubscribe().await.map_err(Error::from);
    assert!(
        matches!(after, Err(Error::Misuse(ApiMisuse::Stopped))),
        "{after:?}"
    );
    let commit = m.commit(Vec::new()).await;
    assert_eq!(commit, Err(CommitError::Closed));
    assert_eq!(m.close(CloseOptions::Default).await, CloseOutcome::NotDue);
}

#[tokio::test]
async fn close_reports_the_error_the_leave_was_answered_with() {
    let unknown_member = 25;
    let t = Arc::new(coordinator(unknown_member));
    let mut m = assigned(&t, config()).await;
    let outcome = m.close(CloseOptions::LeaveGroup).await;
    assert_eq!(
        outcome,
        CloseOutcome::Left {
            error: Some(unknown_member)
        }
    );
    assert_eq!(error_name(unknown_member), "UNKNOWN_MEMBER_ID");
    assert_eq!(drain(&mut m).await.last(), Some(&Event::Closed));
}

#[tokio::test]
async fn a_static_member_that_stays_in_the_group_reports_no_leave_due() {
    let t = Arc::new(coordinator(0));
    let mut m = assigned(&t, config().with_instance_id("i-1")).await;
    assert_eq!(m.close(CloseOptions::Default).await, CloseOutcome::NotDue);
    assert_eq!(drain(&mut m).await.last(), Some(&Event::Closed));
    let leaves = t.sent().into_iter();
    let leaves = leaves
        .filter(|(_, body, _)| matches!(body, RequestBody::Kafka(RequestKind::LeaveGroup(_))));
    assert_eq!(
        leaves.count(),
        0,
        "a static member's default close sends no LeaveGroup"
    );
}

/// A closed member's events, read as a `Stream` until it ends (within 20 s).
async fn drain_stream<S: futures_core::Stream + Unpin>(member: &mut S) -> Vec<S::Item> {
    let mut events = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(e) = std::future::poll_fn(|cx| Pin::new(&mut *member).poll_next(cx)).await {
            events.push(e);
        }
    });
    ended.await.expect("the stream ends after close");
    events
}

#[tokio::test]
async fn events_are_a_stream() {
    let t = Arc::new(coordinator(0));
    let mut m = assigned(&t, config()).await;
    let _ = m.close(CloseOptions::RemainInGroup).await;
    let events = drain_stream(&mut m).await;
    assert_eq!(events.last(), Some(&Event::Closed), "{events:?}");
}

/// A streams member is a `Stream` of its events as a `GroupMember` is, with its handle's calls
/// on itself: closed before it ever reached a coordinator (every connection refused), its stream
/// ends after `Closed`.
#[tokio::test]
async fn streams_events_are_a_stream() {
    use consumer_membership::streams::{
        StreamsConfig, StreamsEvent, StreamsGroupMember, StreamsProcess, StreamsTopology,
        Subtopology,
    };
    let t = Arc::new(MemoryTransport::new(
        |_: &_, _: RequestBody, _: i16| -> Result<ResponseKind, TransportError> {
            Err(TransportError::Connect {
                addr: "127.0.0.1:9092".into(),
                reason: "refused".into(),
            })
        },
    ));
    let topology = StreamsTopology::new(0, vec![Subtopology::new("0", ["in".to_string()])]);
    let mut m = StreamsGroupMember::start(
        t,
        GroupConfig::new("app"),
        StreamsConfig::new(topology),
        StreamsProcess::new("p", None),
    )
    .expect("valid config");
    assert!(m.snapshot().await.is_some(), "the member's task runs");
    let _ = m.close(CloseOptions::Default).await;
    let events = drain_stream(&mut m).await;
    assert!(
        matches!(events.last(), Some(StreamsEvent::Closed)),
        "{events:?}"
    );
    assert_eq!(m.poll().await, Err(ApiMisuse::Stopped));
}

/// A whole loop in a function returning `consumer_membership::Error`: every call's error
/// converts with `?`.
async fn join_commit_close(t: Arc<MemoryTransport>) -> Result<CloseOutcome, Error> {
    let mut m = GroupMember::start(t, config())?;
    m.subscribe(["t".to_string()]).await?;
    while let Some(event) = m.next_event().await {
        if let Event::Assigned { .. } = event {
            break;
        }
    }
    Ok(m.close(CloseOptions::Default).await)
}

#[tokio::test]
async fn errors_convert_into_the_crate_error() {
    let bad = GroupMember::start(Arc::new(coordinator(0)), GroupConfig::new(""));
    let e: Error = bad.expect_err("an empty group id is refused").into();
    assert!(matches!(e, Error::Config(_)), "{e:?}");
    let outcome = join_commit_close(Arc::new(coordinator(0))).await;
    assert_eq!(outcome.unwrap(), CloseOutcome::Left { error: None });
}

#[tokio::test]
async fn a_subscribed_topic_that_does_not_exist_is_reported() {
    let t = Arc::new(coordinator(0));
    let mut m = GroupMember::start(t.clone(), config()).expect("valid config");
    m.subscribe(["t".to_string(), "nope".to_string()])
        .await
        .expect("subscribed");
    let missing = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match m.next_event().await.expect("member running") {
                Event::TopicsMissing { topics } => return topics,
                Event::Fatal(e) => panic!("member stopped: {e}"),
                _ => {}
            }
        }
    });
    assert_eq!(missing.await.expect("reported within 20 s"), ["nope"]);
    let asked = t.sent().into_iter().filter_map(|(_, body, _)| match body {
        RequestBody::Kafka(RequestKind::Metadata(r)) => Some(r.allow_auto_topic_creation),
        _ => None,
    });
    assert!(
        asked.collect::<Vec<_>>().iter().all(|create| !create),
        "the member never asks the broker to create topics"
    );
    assert_eq!(
        m.close(CloseOptions::Default).await,
        CloseOutcome::Left { error: None }
    );
}

/// An assigned member with a `max.poll.interval.ms` of 300 ms.
async fn assigned_polling_every_300ms() -> GroupMember {
    let t = Arc::new(coordinator(0));
    assigned(
        &t,
        config().with_max_poll_interval(Duration::from_millis(300)),
    )
    .await
}

/// Waiting for the next event counts as polling for as long as the wait lasts, as a wait in the
/// Java client's `poll()` does: a member parked in `next_event()` in a quiet group outlasts
/// `max.poll.interval.ms` many times over without a poll timeout (no `Lost`, no LeaveGroup,
/// no rebalance).
#[tokio::test]
async fn waiting_in_next_event_counts_as_polling() {
    let mut m = assigned_polling_every_300ms().await;
    let quiet = tokio::time::timeout(Duration::from_millis(1500), m.next_event()).await;
    assert!(quiet.is_err(), "the wait ended with {quiet:?}");
    let snapshot = m.snapshot().await.expect("running");
    assert_eq!(snapshot.assignment, [TopicPartition::new("t", 0)]);
    assert_eq!(snapshot.generation, 1, "no rejoin");
}

/// The same for the events as a `Stream`: a poll that is `Pending` waits.
#[tokio::test]
async fn waiting_on_the_event_stream_counts_as_polling() {
    use futures_core::Stream;
    let mut m = assigned_polling_every_300ms().await;
    let next = std::future::poll_fn(|cx| Pin::new(&mut m).poll_next(cx));
    let quiet = tokio::time::timeout(Duration::from_millis(1500), next).await;
    assert!(quiet.is_err(), "the wait ended with {quiet:?}");
    assert_eq!(m.snapshot().await.expect("running").generation, 1);
}

/// An application that does not come back for events within `max.poll.interval.ms` (busy
/// elsewhere, not waiting) still loses its partitions to the poll timeout.
#[tokio::test]
async fn an_application_that_stops_reading_events_still_times_out() {
    let mut m = assigned_polling_every_300ms().await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let lost = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Event::Lost { reason, .. } = m.next_event().await.expect("running") {
                return reason;
            }
        }
    });
    let reason = lost.await.expect("a poll timeout");
    assert_eq!(reason, consumer_membership::Reason::PollTimeout);
}

/// Durations no clock can reach (`Duration::MAX`) as backoff and metadata age are deadlines far
/// away, not an overflow that kills the member's task: the member joins, owns its partition and
/// closes as usual.
#[tokio::test]
async fn durations_no_clock_reaches_are_far_deadlines() {
    let t = Arc::new(coordinator(0));
    let config = config()
        .with_retry_backoff(Duration::MAX)
        .with_retry_backoff_max(Duration::MAX)
        .with_metadata_max_age(Duration::MAX);
    let mut m = assigned(&t, config).await;
    assert!(matches!(
        m.close(CloseOptions::Default).await,
        CloseOutcome::Left { error: None }
    ));
    assert_eq!(drain(&mut m).await.last(), Some(&Event::Closed));
}

/// A member's task that ends by a panic (here: the transport's) ends the event stream with a
/// typed `Fatal`, not a bare end; calls then say the member stopped.
#[tokio::test]
async fn a_task_that_panics_ends_the_events_with_a_typed_fatal() {
    let t = Arc::new(MemoryTransport::new(
        |_: &_, _: RequestBody, _: i16| -> Result<ResponseKind, _> { panic!("transport exploded") },
    ));
    let mut m = GroupMember::start(t, config()).expect("valid config");
    m.subscribe(["t".to_string()]).await.expect("subscribed");
    let events = drain_stream(&mut m).await;
    match events.last() {
        Some(Event::Fatal(consumer_membership::GroupError::TaskEnded { reason })) => {
            assert!(reason.contains("transport exploded"), "{reason}")
        }
        other => panic!("the stream ended with {other:?}"),
    }
    assert_eq!(m.poll().await, Err(ApiMisuse::Stopped));
}

/// `close()` while a `Revoking` event is still unread takes the ticket back and leaves at once:
/// the leave is answered well within `request.timeout.ms`, not `TimedOut` with no leave sent.
#[tokio::test]
async fn close_with_an_unread_revocation_leaves_at_once() {
    let rebalancing = Arc::new(AtomicI16::new(0));
    let t = Arc::new(coordinator_seen_by(0, Arc::default(), rebalancing.clone()));
    let mut m = assigned(&t, config()).await;
    // REBALANCE_IN_PROGRESS: the eager member revokes its partitions and waits for the ticket.
    rebalancing.store(27, SeqCst);
    let revoking = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let s = m.snapshot().await.expect("running");
            if s.state == consumer_membership::MemberState::AwaitRevoke {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    revoking.await.expect("a revocation under way");
    let started = std::time::Instant::now();
    let outcome = m.close(CloseOptions::Default).await;
    assert_eq!(outcome, CloseOutcome::Left { error: None });
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let events = drain_stream(&mut m).await;
    assert!(
        events.iter().any(|e| matches!(e, Event::Revoking { .. })),
        "the Revoking event was still unread: {events:?}"
    );
    assert_eq!(events.last(), Some(&Event::Closed));
}

/// Runs `future`, which must be ready at once (the memory transport answers within `send`): the
/// sans-IO programs below use no runtime.
fn at_once<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => panic!("the memory transport answers within send"),
    }
}

/// A sans-IO program over `t`, without tokio: a [`Member`] subscribed to `t` until assigned,
/// then closed with `options` until [`Event::Closed`]; returns what the member itself reports
/// of the close. Time is virtual: a wait jumps to the member's next deadline.
///
/// [`Member`]: consumer_membership::machine::member::Member
fn sans_io_close(t: &MemoryTransport, config: GroupConfig, options: CloseOptions) -> CloseOutcome {
    use consumer_membership::machine::member::Member;
    use consumer_membership::transport::Transport;
    let mut now = std::time::Instant::now();
    let mut config = config;
    config.seed = Some(7);
    let mut m = Member::new(config, now).expect("valid config");
    m.subscribe(["t".to_string()], now).expect("subscribed");
    let mut closing = false;
    for _ in 0..10_000 {
        let mut idle = true;
        while let Some(out) = m.poll_request() {
            idle = false;
            let answer = at_once(t.send(out.target, out.request, out.timeout));
            m.handle_response(out.id, answer, now);
        }
        while let Some(event) = m.poll_event() {
            idle = false;
            match event {
                Event::Assigned { .. } if !closing => {
                    closing = true;
                    m.close(options, now);
                }
                Event::Closed => return m.close_outcome().expect("closed"),
                _ => {}
            }
        }
        if idle {
            now = m.poll_timeout().map_or(now, |(at, _)| at.max(now));
            m.handle_timeout(now);
        }
    }
    panic!("the member did not close");
}

/// The member reports its close itself: a sans-IO program gets the outcome the driver's
/// `close()` returns, for a leave answered (with and without an error), a leave that was not
/// delivered, and a static member's close that sends no leave.
#[tokio::test]
async fn a_sans_io_close_reports_what_the_driver_returns() {
    let cases = [
        (0, config(), CloseOptions::Default),
        (25, config(), CloseOptions::LeaveGroup),
        (UNDELIVERED, config(), CloseOptions::Default),
        (0, config().with_instance_id("i-1"), CloseOptions::Default),
    ];
    let mut outcomes = Vec::new();
    for (leave, config, options) in cases {
        let sans_io = sans_io_close(&coordinator(leave), config.clone(), options);
        let t = Arc::new(coordinator(leave));
        let mut m = assigned(&t, config).await;
        let driven = m.close(options).await;
        assert_eq!(drain(&mut m).await.last(), Some(&Event::Closed));
        assert_eq!(sans_io, driven, "leave answered with {leave}, {options:?}");
        outcomes.push(driven);
    }
    assert_eq!(outcomes[0], CloseOutcome::Left { error: None });
    assert_eq!(outcomes[1], CloseOutcome::Left { error: Some(25) });
    assert!(
        matches!(
            outcomes[2],
            CloseOutcome::Failed(TransportError::Disconnected { .. })
        ),
        "{:?}",
        outcomes[2]
    );
    assert_eq!(outcomes[3], CloseOutcome::NotDue);
}

/// The member retries a commit itself (COORDINATOR_LOAD_IN_PROGRESS every time here) until
/// `default.api.timeout.ms` runs out; the driver only waits for the outcome. The driver's clock is
/// tokio's, so the minute passes in paused time.
#[tokio::test(start_paused = true)]
async fn a_commit_the_coordinator_keeps_loading_times_out_after_retries_in_paused_time() {
    let t = Arc::new(coordinator(0));
    let m = assigned(&t, config()).await;
    let started = tokio::time::Instant::now();
    let offsets = vec![consumer_membership::CommitOffset {
        partition: TopicPartition::new("t", 0),
        offset: 7,
        metadata: None,
    }];
    assert_eq!(
        m.commit(offsets).await,
        Err(CommitError::TimedOut {
            after: Duration::from_secs(60)
        })
    );
    assert!(started.elapsed() >= Duration::from_secs(60));
    let commits = (t.sent().into_iter())
        .filter(|(_, body, _)| matches!(body, RequestBody::Kafka(RequestKind::OffsetCommit(_))))
        .count();
    assert!(commits >= 10, "{commits} attempts");
}
