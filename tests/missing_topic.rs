//! A subscribed topic that does not exist, against the real broker with the Java client's
//! default timeouts, in both protocols: the member reports it (`Event::TopicsMissing`, and a log
//! line) instead of sitting silently in the group with nothing assigned; once the topic is
//! created it reports it again (`Event::TopicsAppeared`) and is assigned its partitions. The
//! member never creates the topic itself.

mod common;

use std::sync::Arc;
use std::time::Duration;

use consumer_membership::{
    CloseOptions, Event, GroupConfig, GroupMember, GroupProtocol, TcpTransport, TopicPartition,
};

/// Reads events until `f` returns a value, for at most `within`.
async fn until<R>(
    m: &mut GroupMember,
    within: Duration,
    what: &str,
    mut f: impl FnMut(Event) -> Option<R>,
) -> R {
    let found = tokio::time::timeout(within, async {
        loop {
            match m.next_event().await {
                Some(Event::Fatal(e)) => panic!("member stopped: {e}"),
                Some(e) => {
                    if let Some(r) = f(e) {
                        return r;
                    }
                }
                None => panic!("events ended before {what}"),
            }
        }
    });
    found
        .await
        .unwrap_or_else(|_| panic!("no {what} within {within:?}"))
}

async fn reported_then_assigned(protocol: GroupProtocol) {
    common::init_tracing();
    let Some(b) = common::bootstrap() else { return };
    let (admin, client) = common::transport(&b);
    let topic = common::unique("not-yet");
    let group = GroupConfig::new(common::unique("missing-topic")).with_protocol(protocol);
    let mut m = GroupMember::start(Arc::new(TcpTransport::new(client)), group).unwrap();
    m.subscribe([topic.clone()]).await.unwrap();

    let missing = until(
        &mut m,
        Duration::from_secs(60),
        "TopicsMissing",
        |e| match e {
            Event::TopicsMissing { topics } => Some(topics),
            Event::Assigned { owned, .. } if !owned.is_empty() => panic!("assigned {owned:?}"),
            _ => None,
        },
    )
    .await;
    assert_eq!(missing, std::slice::from_ref(&topic));
    // Still missing a few re-checks later: the member did not create it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let snapshot = m.snapshot().await.expect("running");
    assert!(snapshot.assignment.is_empty(), "{snapshot:?}");

    common::create_topic(&*admin, &topic, 2).await;
    // Both follow, in either order: the consumer protocol's broker may assign before the
    // member's own check sees the topic.
    let (mut appeared, mut owned) = (None, None);
    until(
        &mut m,
        Duration::from_secs(120),
        "TopicsAppeared and the assignment",
        |e| {
            match e {
                Event::TopicsAppeared { topics } => appeared = Some(topics),
                Event::Assigned { owned: o, .. } if o.len() == 2 => owned = Some(o),
                _ => {}
            }
            (appeared.is_some() && owned.is_some()).then_some(())
        },
    )
    .await;
    assert_eq!(appeared.unwrap(), std::slice::from_ref(&topic));
    let want = [
        TopicPartition::new(&topic, 0),
        TopicPartition::new(&topic, 1),
    ];
    let owned = owned.unwrap();
    assert_eq!(owned, want);
    let _ = m.close(CloseOptions::Default).await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_topic_is_reported_then_assigned_once_created_classic() {
    reported_then_assigned(GroupProtocol::Classic).await
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_topic_is_reported_then_assigned_once_created_consumer() {
    reported_then_assigned(GroupProtocol::Consumer).await
}
