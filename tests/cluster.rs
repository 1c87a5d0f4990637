//! The 3-node KRaft variant of the test broker (tests/kafka/broker.sh --nodes 3): every node
//! answers, and all agree on a group's coordinator.

mod common;

use std::time::Duration;

use consumer_membership::driver;
use consumer_membership::machine::metadata::ClusterMetadata;
use consumer_membership::request::{Broker, Request, Target};
use consumer_membership::transport::Transport;

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test]
async fn three_node_cluster_agrees_on_the_coordinator() {
    // Needs no KAFKA_BOOTSTRAP: it starts (and stops) a cluster of its own. Under CI it must run;
    // elsewhere it runs whenever Java and Maven are there, as the README's command needs anyway.
    if common::bootstrap().is_none() {
        return;
    }
    let cluster = common::Cluster::start("kafka-it-cluster");
    let addrs: Vec<&str> = cluster.bootstrap.split(',').collect();
    assert_eq!(addrs.len(), 3, "{}", cluster.bootstrap);

    let (t, _) = common::transport(&cluster.bootstrap);
    let md = t
        .send(
            Target::Bootstrap,
            Request::Metadata {
                topics: None,
                allow_auto_topic_creation: false,
            },
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    let md = ClusterMetadata::from_response(&md).unwrap();
    assert_eq!(
        md.brokers.keys().copied().collect::<Vec<_>>(),
        vec![1, 2, 3]
    );

    // Ask each node on its own: the coordinator of a group is the same wherever you ask.
    let group = common::unique("cluster");
    let mut seen: Vec<Broker> = Vec::new();
    for addr in &addrs {
        let (t, config) = common::transport(addr);
        seen.push(
            driver::find_coordinator(&t, &config, &group)
                .await
                .expect("coordinator"),
        );
    }
    println!("coordinator of {group}: {}", seen[0]);
    assert!(seen.windows(2).all(|w| w[0] == w[1]), "{seen:?}");
    assert!(md.brokers.contains_key(&seen[0].node_id));
}
