//! The program written from the crate's front page (examples/quickstart.rs), two of it against
//! the real broker, in each protocol with the default timeouts: the first member joins and is
//! assigned, the second joins and takes a partition from it, so the first commits and hands its
//! revocation back; then both commit and close, and their events drain to `Closed`.

mod common;
#[allow(dead_code)]
#[path = "../examples/quickstart.rs"]
mod quickstart;

use std::time::Duration;

use consumer_membership::{CloseOutcome, Event, GroupProtocol, TopicPartition};
use tokio::sync::{mpsc, oneshot};

/// What the test needs of an event (events themselves are not `Clone`: they carry tickets).
#[derive(Debug)]
enum Seen {
    Assigned { owned: usize },
    Revoking,
    Other,
}

impl From<&Event> for Seen {
    fn from(e: &Event) -> Self {
        match e {
            Event::Assigned { owned, .. } => Seen::Assigned { owned: owned.len() },
            Event::Revoking { .. } => Seen::Revoking,
            _ => Seen::Other,
        }
    }
}

/// Waits up to 90 s for an event `f` accepts.
async fn wait(rx: &mut mpsc::UnboundedReceiver<Seen>, what: &str, f: impl Fn(&Seen) -> bool) {
    let within = tokio::time::timeout(Duration::from_secs(90), async {
        while let Some(e) = rx.recv().await {
            if f(&e) {
                return;
            }
        }
        panic!("events ended before {what}");
    });
    within
        .await
        .unwrap_or_else(|_| panic!("no {what} within 90 s"))
}

async fn two_members(protocol: GroupProtocol) {
    let Some(b) = common::bootstrap() else { return };
    let (t, _) = common::transport(&b);
    let topic = common::unique("quickstart");
    let group = common::unique("quickstart-group");
    common::create_topic(&*t, &topic, 2).await;

    let start = |name: &'static str| {
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (seen_tx, seen_rx) = mpsc::unbounded_channel::<Seen>();
        let (b, group, topic) = (b.clone(), group.clone(), topic.clone());
        let run = tokio::spawn(async move {
            let stop = async move { drop(stop_rx.await) };
            let seen = move |e: &Event| {
                eprintln!("{name}: {e:?}");
                drop(seen_tx.send(Seen::from(e)));
            };
            quickstart::run(&b, &group, &topic, protocol, stop, seen).await
        });
        (stop_tx, seen_rx, run)
    };
    let (stop_a, mut seen_a, run_a) = start("a");
    wait(&mut seen_a, "assignment of a", |e| {
        matches!(e, Seen::Assigned { owned: 2 })
    })
    .await;
    let (stop_b, mut seen_b, run_b) = start("b");
    wait(&mut seen_a, "revocation on a", |e| {
        matches!(e, Seen::Revoking)
    })
    .await;
    wait(
        &mut seen_b,
        "assignment of b",
        |e| matches!(e, Seen::Assigned { owned } if *owned > 0),
    )
    .await;
    let _ = (stop_a.send(()), stop_b.send(()));
    for (name, run) in [("a", run_a), ("b", run_b)] {
        let report = run.await.expect("task").expect("the run succeeded");
        eprintln!("{name}: {report:?}");
        assert_eq!(report.close, Some(CloseOutcome::Left { error: None }));
        assert_eq!(report.last_event, Some(Event::Closed));
        if name == "a" {
            // Its revocation's commit (the final one may meet the other member's rebalance).
            assert!(report.commits >= 1, "a committed: {report:?}");
            assert!(report.revocations >= 1, "a handed a revocation back");
            let mut all = report.assigned.clone();
            all.sort();
            all.dedup();
            let want = [
                TopicPartition::new(&topic, 0),
                TopicPartition::new(&topic, 1),
            ];
            assert_eq!(all, want);
        }
    }
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_page_program_classic() {
    two_members(GroupProtocol::Classic).await
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_page_program_consumer() {
    two_members(GroupProtocol::Consumer).await
}
