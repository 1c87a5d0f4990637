//! The sans-IO share member ([`ShareMember`], KIP-932) against the real Kafka 4.4 broker
//! (tests/kafka/with-broker.sh; share groups are on by default there), driven over our
//! `TcpTransport` by a plain loop (no tokio driver of its own yet), with the Java client's
//! default timeouts (GroupConfig defaults; the group's share session and heartbeat interval are
//! the broker's, 45 s and 5 s):
//!
//! - two members of one share group split the partitions of a topic between them (the simple
//!   assignor), ShareGroupDescribe lists both under the member ids they generated, and the ids
//!   never change;
//! - a member that closes leaves at once (epoch -1): the describe lists only the other one
//!   right after, without waiting for the 45 s session, and the other takes every partition;
//! - two members with share sessions (`ShareSessions`, ShareFetch / ShareAcknowledge v1)
//!   receive every produced record once between them, acknowledge each ACCEPT (every
//!   acknowledgement answered without error), and close their sessions with epoch -1.

mod common;
#[path = "../examples/common/fetch.rs"]
mod fetch;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::unique;
use consumer_membership::config::GroupConfig;
use consumer_membership::kafka_protocol::messages::{RequestKind, ResponseKind};
use consumer_membership::machine::TopicPartition;
use consumer_membership::machine::events::{CloseOptions, Event, MemberState};
use consumer_membership::machine::share::ShareMember;
use consumer_membership::request::{Request, Response, ResponseBody, Target};
use consumer_membership::transport::Transport;
use consumer_membership::{MemberId, TcpTransport};
use tokio::task::JoinSet;

/// A share member, its own transport, and what it told the application.
struct Ours {
    member: ShareMember,
    transport: Arc<TcpTransport>,
    events: Vec<Event>,
}

impl Ours {
    fn new(bootstrap: &str, group: &str) -> Self {
        let (transport, _) = common::transport(bootstrap);
        let config = GroupConfig::new(group).with_member_id(MemberId::generate());
        let member = ShareMember::new(config, Instant::now()).expect("a valid share config");
        Self {
            member,
            transport,
            events: Vec::new(),
        }
    }
}

type Answered = (usize, consumer_membership::request::RequestId, Reply);
type Reply = Result<Response, consumer_membership::TransportError>;

/// Drives `members` until `done` holds or `limit` passes (then false): each request goes out
/// at once on its member's transport, answers are fed back as they arrive, deadlines fire, the
/// application polls before every input, and events are collected.
async fn drive(
    members: &mut [Ours],
    limit: Duration,
    mut done: impl FnMut(&[Ours]) -> bool,
) -> bool {
    let until = Instant::now() + limit;
    let mut in_flight: JoinSet<Answered> = JoinSet::new();
    loop {
        for (i, m) in members.iter_mut().enumerate() {
            while let Some(out) = m.member.poll_request() {
                let t = m.transport.clone();
                in_flight.spawn(async move {
                    let result = t.send(out.target, out.request, out.timeout).await;
                    (i, out.id, result)
                });
            }
            while let Some(e) = m.member.poll_event() {
                m.events.push(e);
            }
        }
        if done(members) {
            return true;
        }
        let now = Instant::now();
        if now >= until {
            return false;
        }
        let deadline = (members.iter())
            .filter_map(|m| m.member.poll_timeout().map(|(at, _)| at))
            .chain([until])
            .min()
            .unwrap_or(until);
        let sleep = tokio::time::sleep_until(deadline.max(now).into());
        tokio::select! {
            Some(answered) = in_flight.join_next(), if !in_flight.is_empty() => {
                let (i, id, result) = answered.expect("a send task");
                let now = Instant::now();
                members[i].member.poll(now);
                members[i].member.handle_response(id, result, now);
            }
            _ = sleep => {
                let now = Instant::now();
                for m in members.iter_mut() {
                    m.member.poll(now);
                    m.member.handle_timeout(now);
                }
            }
        }
    }
}

fn partitions_of(m: &Ours) -> BTreeSet<i32> {
    m.member
        .assignment()
        .iter()
        .map(|tp| tp.partition)
        .collect()
}

#[tokio::test]
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: tests/kafka/with-broker.sh"
)]
async fn two_share_members_split_a_topic_and_a_close_leaves_at_once() {
    common::init_tracing();
    let bootstrap = common::bootstrap().unwrap();
    let topic = unique("share-topic");
    let group = unique("share-group");
    let (t, _) = common::transport(&bootstrap);
    common::create_topic(&*t, &topic, 4).await;
    let mut members = vec![Ours::new(&bootstrap, &group), Ours::new(&bootstrap, &group)];
    let ids: Vec<String> = (members.iter())
        .map(|m| m.member.member_id().to_owned())
        .collect();
    let now = Instant::now();
    for m in &mut members {
        m.member.subscribe([topic.clone()], now).unwrap();
    }
    let all: BTreeSet<i32> = (0..4).collect();
    // Both in the group, every partition assigned to one of them, and no partition to both
    // (the simple assignor spreads 4 partitions over 2 members without sharing).
    let split = drive(&mut members, Duration::from_secs(60), |ms| {
        let (a, b) = (partitions_of(&ms[0]), partitions_of(&ms[1]));
        ms.iter().all(|m| m.member.state() == MemberState::Stable)
            && !a.is_empty()
            && !b.is_empty()
            && a.union(&b).copied().collect::<BTreeSet<i32>>() == all
    })
    .await;
    let states: Vec<_> = (members.iter())
        .map(|m| {
            (
                m.member.state(),
                m.member.assignment(),
                m.member.fatal_error(),
            )
        })
        .collect();
    assert!(split, "not split within 60 s: {states:?}");
    let described_now = common::share_group_members(&bootstrap, &group).await;
    let mut want: Vec<String> = ids.clone();
    want.sort();
    assert_eq!(
        described_now
            .iter()
            .map(|(id, _)| id.clone())
            .collect::<Vec<_>>(),
        want,
        "the broker lists the ids our members generated"
    );
    for (m, id) in members.iter().zip(&ids) {
        assert_eq!(m.member.member_id(), id, "the member id never changes");
        assert!(
            !m.events
                .iter()
                .any(|e| matches!(e, Event::Fatal(_) | Event::Lost { .. })),
            "{:?}",
            m.events
        );
    }

    // The first member closes: its leave (-1) goes out and is answered at once.
    let started = Instant::now();
    members[0]
        .member
        .close(CloseOptions::Default, Instant::now());
    let closed = drive(&mut members, Duration::from_secs(15), |ms| {
        ms[0].member.state() == MemberState::Closed
    })
    .await;
    assert!(closed, "{:?}", members[0].member.state());
    let after_close = common::share_group_members(&bootstrap, &group).await;
    assert_eq!(
        after_close
            .iter()
            .map(|(id, _)| id.clone())
            .collect::<Vec<_>>(),
        vec![ids[1].clone()],
        "left at once (closed after {:?}; the share session is 45 s)",
        started.elapsed()
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    // The remaining member takes every partition (within a heartbeat interval or two).
    let took_all = drive(&mut members[1..], Duration::from_secs(30), |ms| {
        partitions_of(&ms[0]) == all
    })
    .await;
    assert!(took_all, "{:?}", members[1].member.assignment());
    assert_eq!(members[1].member.member_id(), ids[1]);
    let mut want_all: Vec<TopicPartition> =
        (0..4).map(|p| TopicPartition::new(&topic, p)).collect();
    want_all.sort();
    assert_eq!(members[1].member.assignment(), want_all);
}

/// Sends `body` (v1) to `broker`; the Kafka answer, or the transport's failure.
async fn at_node(
    t: &TcpTransport,
    broker: consumer_membership::request::Broker,
    body: RequestKind,
) -> Result<ResponseKind, consumer_membership::TransportError> {
    let request = Request::Raw {
        body: Box::new(body),
        versions: 1..=1,
        fit: None,
    };
    match t
        .send(Target::Node(broker), request, Duration::from_secs(15))
        .await?
    {
        Response {
            body: ResponseBody::Kafka(r),
            ..
        } => Ok(r),
        other => panic!("not a Kafka answer: {other:?}"),
    }
}

/// Produces `per_partition` records `v-{p}-{i}` to each partition of `topic` (leadership may
/// still settle right after CreateTopics: retried for 20 s).
async fn produce_values(bootstrap: &str, topic: &str, partitions: i32, per_partition: usize) {
    use bytes::Bytes;
    let (t, config) = common::transport(bootstrap);
    let deadline = Instant::now() + Duration::from_secs(20);
    for p in 0..partitions {
        let tp = TopicPartition::new(topic, p);
        let records: Vec<(Option<Bytes>, Option<Bytes>)> = (0..per_partition)
            .map(|i| (None, Some(Bytes::from(format!("v-{p}-{i}")))))
            .collect();
        fetch::produce_settling(&*t, &tp, &records, config.request_timeout, deadline)
            .await
            .unwrap_or_else(|e| panic!("produce to {tp}: {e}"));
    }
}

#[tokio::test]
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: tests/kafka/with-broker.sh"
)]
async fn share_sessions_deliver_every_record_once_and_acknowledge_it() {
    use std::collections::BTreeMap;

    use consumer_membership::machine::metadata::ClusterMetadata;
    use consumer_membership::machine::share::session::{
        AckMode, AcknowledgeType, ShareFetchSettings, SharePartition, ShareSessions,
    };

    common::init_tracing();
    let bootstrap = common::bootstrap().unwrap();
    let topic = unique("share-records");
    let group = unique("share-records-group");
    let (t, config) = common::transport(&bootstrap);
    const PARTITIONS: i32 = 2;
    const PER_PARTITION: usize = 100;
    common::create_topic(&*t, &topic, PARTITIONS).await;
    produce_values(&bootstrap, &topic, PARTITIONS, PER_PARTITION).await;
    let metadata = t
        .send(
            Target::Bootstrap,
            Request::Metadata {
                topics: Some(vec![topic.clone()]),
                allow_auto_topic_creation: false,
            },
            config.request_timeout,
        )
        .await
        .expect("Metadata answered");
    let metadata = ClusterMetadata::from_response(&metadata).expect("a Metadata answer");
    let topic_id = metadata.topics[&topic].id;
    let leaders = fetch::leaders(&*t, std::slice::from_ref(&topic), config.request_timeout)
        .await
        .expect("leaders");

    // A share group starts at the latest offset unless told otherwise (the group config
    // `share.auto.offset.reset`, default latest): the records were produced before it exists.
    common::set_group_configs(
        &bootstrap,
        &group,
        &[("share.auto.offset.reset", "earliest")],
    )
    .await;
    let mut members = vec![Ours::new(&bootstrap, &group), Ours::new(&bootstrap, &group)];
    let now = Instant::now();
    for m in &mut members {
        m.member.subscribe([topic.clone()], now).unwrap();
    }
    let split = drive(&mut members, Duration::from_secs(60), |ms| {
        ms.iter().all(|m| !m.member.assignment().is_empty())
    })
    .await;
    assert!(split, "both members assigned within 60 s");
    let mut sessions: Vec<ShareSessions> = (members.iter())
        .map(|m| {
            let id = MemberId::parse(m.member.member_id()).unwrap();
            let mut s =
                ShareSessions::new(&group, id, ShareFetchSettings::default(), AckMode::Explicit);
            s.set_assignment(m.member.assignment().iter().map(|tp| {
                let leader = leaders.partitions.get(tp).copied().flatten();
                (SharePartition::new(topic_id, tp.partition), leader)
            }));
            s
        })
        .collect();

    // Fetch and acknowledge until every record was accepted once (60 s at most).
    let mut accepted: BTreeMap<String, usize> = BTreeMap::new();
    let (mut acks_ok, mut acks_failed) = (0usize, Vec::new());
    let until = Instant::now() + Duration::from_secs(60);
    let total = PARTITIONS as usize * PER_PARTITION;
    while accepted.len() < total && Instant::now() < until {
        for s in &mut sessions {
            // One request per session and round: the sessions take turns.
            if let Some(call) = s.poll_fetch(Instant::now()) {
                let broker = leaders.brokers[&call.node].clone();
                let answer = at_node(&t, broker, RequestKind::ShareFetch(call.request))
                    .await
                    .map(|r| match r {
                        ResponseKind::ShareFetch(r) => r,
                        other => panic!("not a ShareFetch answer: {other:?}"),
                    });
                let out = s.handle_fetch(call.token, answer, Instant::now()).unwrap();
                assert!(out.errors.is_empty(), "{:?}", out.errors);
                for a in &out.acknowledgements {
                    match &a.result {
                        Ok(()) => acks_ok += 1,
                        Err(e) => acks_failed.push(format!("{a:?}: {e:?}")),
                    }
                }
                for batch in out.records {
                    let tp = TopicPartition::new(&topic, batch.partition.partition);
                    let (records, _) = fetch::decode_records(&tp, batch.records, 0).unwrap();
                    for range in &batch.acquired {
                        for r in (records.iter())
                            .filter(|r| (range.first..=range.last).contains(&r.offset))
                        {
                            let value =
                                String::from_utf8_lossy(r.value.as_deref().unwrap_or_default())
                                    .to_string();
                            *accepted.entry(value).or_default() += 1;
                        }
                        s.acknowledge(
                            batch.partition,
                            range.first,
                            range.last,
                            AcknowledgeType::Accept,
                        )
                        .unwrap();
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let per_partition: BTreeMap<String, usize> =
        accepted.keys().fold(BTreeMap::new(), |mut m, v| {
            *m.entry(v.rsplit_once('-').map_or("", |x| x.0).to_owned())
                .or_default() += 1;
            m
        });
    let assigned: Vec<_> = members.iter().map(|m| m.member.assignment()).collect();
    assert_eq!(
        accepted.len(),
        total,
        "every record delivered: per partition {per_partition:?}, assignments {assigned:?}, epochs {:?}",
        sessions.iter().map(|s| s.epoch(1)).collect::<Vec<_>>()
    );
    let twice: Vec<_> = accepted.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");

    // Close: the pending acknowledgements go with the epoch -1 ShareAcknowledge.
    for s in &mut sessions {
        let (calls, out) = s.close();
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        for call in calls {
            let broker = leaders.brokers[&call.node].clone();
            let answer = at_node(&t, broker, RequestKind::ShareAcknowledge(call.request))
                .await
                .map(|r| match r {
                    ResponseKind::ShareAcknowledge(r) => r,
                    other => panic!("not a ShareAcknowledge answer: {other:?}"),
                });
            let out = s.handle_ack(call.token, answer).unwrap();
            for a in &out.acknowledgements {
                match &a.result {
                    Ok(()) => acks_ok += 1,
                    Err(e) => acks_failed.push(format!("{a:?}: {e:?}")),
                }
            }
        }
        assert!(s.is_closed());
    }
    assert!(acks_failed.is_empty(), "{acks_failed:?}");
    assert!(acks_ok > 0);
    for m in &mut members {
        m.member.close(CloseOptions::Default, Instant::now());
    }
    drive(&mut members, Duration::from_secs(15), |ms| {
        ms.iter().all(|m| m.member.state() == MemberState::Closed)
    })
    .await;
}
