//! Against a real Apache Kafka 4.x broker (KRaft, started by tests/kafka/with-broker.sh):
//! connect + ApiVersions, FindCoordinator for new groups, Metadata with topic ids, and the
//! transport's typed errors.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use consumer_membership::backoff::ExponentialBackoff;
use consumer_membership::machine::coordinator::{CoordinatorLookup, LookupConfig};
use consumer_membership::machine::metadata::ClusterMetadata;
use consumer_membership::request::{CoordinatorKeyType, Request, ResponseBody, Target};
use consumer_membership::transport::{TcpTransport, Transport};
use consumer_membership::{ClientConfig, TransportError, driver};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test]
async fn api_versions_negotiation_against_kafka_4() {
    let Some(b) = common::bootstrap() else { return };
    let (t, _) = common::transport(&b);
    let v = t
        .broker_versions(&Target::Bootstrap)
        .await
        .expect("connect + ApiVersions");
    // Kafka 4.x: KIP-848 heartbeats are served, OffsetCommit v0-1 are gone (KIP-896).
    assert_eq!(v.get(ApiKey::ConsumerGroupHeartbeat), Some(0..=1));
    assert_eq!(v.get(ApiKey::OffsetCommit).map(|r| *r.start()), Some(2));
    for (api, ours, want) in [
        (ApiKey::FindCoordinator, 0..=6, 6),
        (ApiKey::JoinGroup, 5..=9, 9),
        (ApiKey::SyncGroup, 5..=5, 5),
        (ApiKey::Heartbeat, 4..=4, 4),
        (ApiKey::LeaveGroup, 5..=5, 5),
        (ApiKey::Metadata, 12..=13, 13),
    ] {
        let got = v.negotiate(api, ours).expect("common version");
        println!("negotiated {api:?} v{got} (broker {:?})", v.get(api));
        assert_eq!(got, want, "{api:?}");
    }
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test]
async fn a_version_the_broker_lacks_is_a_typed_error_naming_the_api() {
    let Some(b) = common::bootstrap() else { return };
    let (t, _) = common::transport(&b);
    let join = Request::Raw {
        body: Box::new(RequestKind::JoinGroup(Default::default())),
        versions: 10..=12,
        fit: None,
    };
    let e = t
        .send(Target::Bootstrap, join, Duration::from_secs(5))
        .await
        .unwrap_err();
    println!("{e}");
    assert!(
        matches!(&e, TransportError::UnsupportedApi { api, broker: Some(r), .. }
            if *api == ApiKey::JoinGroup && *r.end() == 9),
        "{e:?}"
    );
    assert!(e.to_string().contains("JoinGroup"));
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test]
async fn find_coordinator_for_a_new_group() {
    let Some(b) = common::bootstrap() else { return };
    let (t, config) = common::transport(&b);
    let group = common::unique("fc");
    let started = Instant::now();
    let coordinator = driver::find_coordinator(&t, &config, &group)
        .await
        .expect("coordinator");
    println!(
        "coordinator of {group}: {coordinator} in {:?}",
        started.elapsed()
    );
    // A single node is the coordinator of every group, at the address we bootstrapped from.
    assert_eq!(coordinator.node_id, 1);
    assert_eq!(
        format!("{}:{}", coordinator.host, coordinator.port),
        b.split(',').next().unwrap()
    );
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test]
async fn batched_find_coordinator_resolves_several_groups_in_one_request() {
    let Some(b) = common::bootstrap() else { return };
    let (t, config) = common::transport(&b);
    let groups: Vec<String> = (0..3)
        .map(|i| common::unique(&format!("batch{i}")))
        .collect();
    let mut lookup = CoordinatorLookup::new(
        groups.clone(),
        LookupConfig {
            backoff: ExponentialBackoff::retry(config.retry_backoff, config.retry_backoff_max),
            request_timeout: config.request_timeout,
            seed: 1,
        },
    );
    let first = lookup.poll_request().expect("one request");
    match &first.request {
        Request::FindCoordinator { keys, .. } => {
            assert_eq!(keys.len(), 3, "all keys in one request")
        }
        other => panic!("{other:?}"),
    }
    let answer = t
        .send(first.target.clone(), first.request.clone(), first.timeout)
        .await;
    assert_eq!(answer.as_ref().map(|r| r.version).ok(), Some(6));
    lookup.handle_response(first.id, answer, Instant::now());
    // The rest of the lookup, driven one request at a time (sleeping out its retry backoff).
    let found = loop {
        let known = groups.iter().map(|g| lookup.coordinator(g).cloned());
        if let Some(found) = known.collect::<Option<Vec<_>>>() {
            break found;
        }
        if let Some(out) = lookup.poll_request() {
            let answer = t.send(out.target, out.request, out.timeout).await;
            lookup.handle_response(out.id, answer, Instant::now());
        } else if let Some((at, _)) = lookup.poll_timeout() {
            tokio::time::sleep_until(at.into()).await;
            lookup.handle_timeout(Instant::now());
        } else {
            panic!("the lookup stopped with coordinators unknown");
        }
    };
    assert!(found.iter().all(|c| c.node_id == 1), "{found:?}");
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test]
async fn metadata_reports_topic_ids_for_a_created_topic() {
    let Some(b) = common::bootstrap() else { return };
    let (t, _) = common::transport(&b);
    let topic = common::unique("md");
    common::create_topic(&*t, &topic, 3).await;
    let request = Request::Metadata {
        topics: Some(vec![topic.clone()]),
        allow_auto_topic_creation: false,
    };
    let r = t
        .send(Target::Bootstrap, request, Duration::from_secs(10))
        .await
        .expect("Metadata");
    assert!(r.version >= 12, "v{}", r.version);
    let md = ClusterMetadata::from_response(&r).expect("valid metadata");
    let tm = &md.topics[&topic];
    println!(
        "{topic}: id {} partitions {:?} (Metadata v{})",
        tm.id, tm.partitions, r.version
    );
    assert_eq!(tm.error_code, 0);
    assert_ne!(
        tm.id,
        uuid::Uuid::nil(),
        "Metadata v12+ carries the topic id"
    );
    assert_eq!(tm.partitions, vec![0, 1, 2]);
    assert_eq!(md.brokers.len(), 1);
    assert!(md.cluster_id.is_some());

    // An unknown topic is reported by code, not invented.
    let missing = common::unique("missing");
    let request = Request::Metadata {
        topics: Some(vec![missing.clone()]),
        allow_auto_topic_creation: false,
    };
    let r = t
        .send(Target::Bootstrap, request, Duration::from_secs(10))
        .await
        .unwrap();
    let md = ClusterMetadata::from_response(&r).unwrap();
    assert_eq!(
        md.topics[&missing].error_code, 3,
        "UNKNOWN_TOPIC_OR_PARTITION"
    );
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test]
async fn many_requests_in_flight_on_one_connection() {
    let Some(b) = common::bootstrap() else { return };
    let (t, _) = common::transport(&b);
    let groups: Vec<String> = (0..32).map(|i| common::unique(&format!("p{i}"))).collect();
    let sends = groups.iter().map(|g| {
        let t = t.clone();
        let request = Request::FindCoordinator {
            key_type: CoordinatorKeyType::Group,
            keys: vec![g.clone()],
        };
        async move {
            t.send(Target::Bootstrap, request, Duration::from_secs(10))
                .await
        }
    });
    let answers = futures_join_all(sends).await;
    for (g, a) in groups.iter().zip(answers) {
        let a = a.expect("answer");
        let ResponseBody::Kafka(ResponseKind::FindCoordinator(r)) = a.body else {
            panic!()
        };
        assert_eq!(
            r.coordinators[0].key.as_str(),
            g,
            "answers matched to their requests"
        );
    }
}

async fn futures_join_all<F: std::future::Future + Send + 'static>(
    fs: impl IntoIterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = fs.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test]
async fn a_response_above_the_frame_limit_is_typed() {
    let Some(b) = common::bootstrap() else { return };
    let mut config = ClientConfig::new(&b).unwrap();
    // Kafka's ApiVersions answer lists ~90 APIs: far above 64 bytes.
    config.max_response_size = 64;
    config.request_timeout = Duration::from_secs(5);
    let t = TcpTransport::new(config);
    let e = t.broker_versions(&Target::Bootstrap).await.unwrap_err();
    assert!(
        matches!(e, TransportError::FrameTooLarge { max: 64, .. }),
        "{e:?}"
    );
}

/// A port nothing listens on (bound, then released).
fn refused_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn metadata() -> Request {
    Request::Metadata {
        topics: None,
        allow_auto_topic_creation: false,
    }
}

#[tokio::test]
async fn connection_refused_retries_with_backoff_then_fails_typed() {
    let port = refused_port();
    let mut config = ClientConfig::new(&format!("127.0.0.1:{port}")).unwrap();
    config.request_timeout = Duration::from_millis(800);
    let t = Arc::new(TcpTransport::new(config));
    let started = Instant::now();
    let e = t
        .send(Target::Bootstrap, metadata(), Duration::from_millis(800))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(&e, TransportError::Connect { reason, .. } if reason.contains("gave up")),
        "{e:?}"
    );
    // Discovery kept trying its only address (reconnect backoff 50 ms doubling, ±20 %), not
    // failing at the first refusal; it stops once the next attempt would start past the
    // timeout.
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

/// With no coordinator to be found, a committed-offsets call (and a commit) fails typed after
/// `default.api.timeout.ms` instead of waiting forever, as the Java client's `committed` does.
#[tokio::test]
async fn committed_offsets_give_up_after_default_api_timeout() {
    use consumer_membership::config::GroupConfig;
    use consumer_membership::machine::TopicPartition;
    use consumer_membership::machine::events::CommitError;
    let port = refused_port();
    let t = Arc::new(TcpTransport::new(
        ClientConfig::new(&format!("127.0.0.1:{port}")).unwrap(),
    ));
    let mut g = GroupConfig::new(common::unique("no-coordinator"));
    g.default_api_timeout = Duration::from_millis(500);
    let m = driver::GroupMember::start(t, g).unwrap();
    let started = Instant::now();
    let e = m
        .committed(vec![TopicPartition::new("t", 0)])
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(matches!(e, CommitError::TimedOut { .. }), "{e:?}");
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

/// A coordinator whose broker is gone fails the request at once, whatever the request's timeout
/// (a JoinGroup's is the rebalance timeout + 5 s): the member looks the coordinator up again
/// instead of waiting on a dead address. The next connect to it waits out the reconnect backoff
/// (at most `reconnect.backoff.max.ms`), then fails as fast.
#[tokio::test]
async fn a_coordinator_that_refuses_connections_fails_its_requests_at_once() {
    let port = refused_port();
    let config = ClientConfig::new("127.0.0.1:1").unwrap();
    let t = Arc::new(TcpTransport::new(config));
    let dead = Target::Coordinator(consumer_membership::request::Broker {
        node_id: 7,
        host: "127.0.0.1".into(),
        port,
    });
    let join_timeout = Duration::from_secs(305);
    for attempt in 0..4 {
        let started = Instant::now();
        let e = t
            .send(dead.clone(), metadata(), join_timeout)
            .await
            .unwrap_err();
        let took = started.elapsed();
        println!("attempt {attempt}: {e} after {took:?}");
        assert!(
            matches!(&e, TransportError::Connect { addr, .. } if addr.ends_with(&port.to_string())),
            "{e:?}"
        );
        // reconnect.backoff.max.ms is 1 s (+20 % jitter): never the request's 305 s.
        assert!(
            took < Duration::from_millis(1500),
            "attempt {attempt}: {took:?}"
        );
    }
}

/// A coordinator that accepts the TCP connection but never answers (a frozen process, a black
/// hole) costs one connection setup timeout, not the request's timeout.
#[tokio::test]
async fn a_silent_coordinator_costs_one_connection_setup_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((c, _)) = listener.accept().await {
            conns.push(c);
        }
    });
    let mut config = ClientConfig::new("127.0.0.1:1").unwrap();
    config.socket_connection_setup_timeout = Duration::from_millis(300);
    let t = Arc::new(TcpTransport::new(config));
    let frozen = Target::Coordinator(consumer_membership::request::Broker {
        node_id: 3,
        host: "127.0.0.1".into(),
        port,
    });
    let started = Instant::now();
    let e = t
        .send(frozen, metadata(), Duration::from_secs(305))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(&e, TransportError::Connect { reason, .. } if reason.contains("setup")),
        "{e:?}"
    );
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_secs(2),
        "{took:?}"
    );
    held.abort();
}

/// Discovery goes through any broker the cluster metadata names: once the only bootstrap address
/// is gone, FindCoordinator still reaches the cluster through the broker a Metadata answer
/// advertised. The bootstrap address here is a forwarder to the real broker, shut down midway.
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test]
async fn discovery_outlives_the_only_bootstrap_address() {
    let Some(b) = common::bootstrap() else { return };
    let real = b.split(',').next().unwrap().trim().to_owned();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let forwarder = listener.local_addr().unwrap().to_string();
    let upstream = real.clone();
    let forwarding = tokio::spawn(async move {
        let mut pipes = tokio::task::JoinSet::new();
        while let Ok((mut client, _)) = listener.accept().await {
            let upstream = upstream.clone();
            pipes.spawn(async move {
                if let Ok(mut broker) = tokio::net::TcpStream::connect(&upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut broker).await;
                }
            });
        }
    });
    let t = Arc::new(TcpTransport::new(ClientConfig::new(&forwarder).unwrap()));
    let find = || Request::FindCoordinator {
        key_type: CoordinatorKeyType::Group,
        keys: vec![common::unique("discovery")],
    };
    let timeout = Duration::from_secs(10);
    t.send(Target::Bootstrap, find(), timeout)
        .await
        .expect("through the bootstrap address");
    // The first bootstrap connection reads the broker list in the background.
    let deadline = Instant::now() + Duration::from_secs(10);
    while t.known_brokers().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let known = t.known_brokers();
    assert!(
        known.iter().any(|(_, addr)| *addr == real),
        "{known:?} names {real}"
    );
    // The bootstrap broker goes away: listener and every forwarded connection.
    forwarding.abort();
    let _ = forwarding.await;
    let started = Instant::now();
    let mut answered = None;
    while answered.is_none() && started.elapsed() < Duration::from_secs(10) {
        match t.send(Target::Bootstrap, find(), timeout).await {
            Ok(r) => answered = Some(r),
            // The connection that was open to the forwarder reports its loss once.
            Err(e) => println!("while the bootstrap address is gone: {e}"),
        }
    }
    let r = answered.expect("FindCoordinator through a broker from the metadata");
    assert!(matches!(
        r.body,
        ResponseBody::Kafka(ResponseKind::FindCoordinator(_))
    ));
    println!(
        "discovery moved to {real} {:?} after the bootstrap address died",
        started.elapsed()
    );
    assert!(
        tokio::net::TcpStream::connect(&forwarder).await.is_err(),
        "the bootstrap address is really gone"
    );
}

/// A coordinator on the broker FindCoordinator went to takes that connection over (no second
/// connect + ApiVersions on the rejoin path); the next bootstrap request opens a connection of
/// its own, so a parked JoinGroup never holds up Metadata or FindCoordinator.
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test]
async fn the_coordinator_takes_over_the_bootstrap_connection_to_its_broker() {
    use common::proxy::{Proxy, What};
    use kafka_protocol::messages::{DescribeGroupsRequest, GroupId, MetadataRequest};
    use kafka_protocol::protocol::StrBytes;

    let Some(b) = common::bootstrap() else { return };
    let proxy = Proxy::start(&b).await.expect("proxy");
    let (t, config) = common::transport(proxy.bootstrap());
    let group = common::unique("takeover");
    let coordinator = driver::find_coordinator(&t, &config, &group)
        .await
        .expect("coordinator");
    let describe = Request::Raw {
        body: Box::new(RequestKind::DescribeGroups(
            DescribeGroupsRequest::default()
                .with_groups(vec![GroupId(StrBytes::from_string(group.clone()))]),
        )),
        versions: 0..=5,
        fit: None,
    };
    t.send(
        Target::Coordinator(coordinator),
        describe,
        Duration::from_secs(10),
    )
    .await
    .expect("DescribeGroups");
    let metadata = Request::Raw {
        body: Box::new(RequestKind::Metadata(MetadataRequest::default())),
        versions: 12..=13,
        fit: None,
    };
    t.send(Target::Bootstrap, metadata, Duration::from_secs(10))
        .await
        .expect("Metadata");

    let records = proxy.records();
    let conn_of = |api: ApiKey| {
        records
            .iter()
            .find(|r| r.what == What::Forwarded && r.api == Some(api))
            .map(|r| r.conn)
            .unwrap_or_else(|| panic!("no {api:?} forwarded:\n{}", proxy.log_text()))
    };
    let api_versions = records
        .iter()
        .filter(|r| r.what == What::Forwarded && r.api == Some(ApiKey::ApiVersions))
        .count();
    println!("{}", proxy.log_text());
    assert_eq!(
        conn_of(ApiKey::FindCoordinator),
        conn_of(ApiKey::DescribeGroups),
        "the coordinator reuses the FindCoordinator connection"
    );
    // The last Metadata is the one sent above (the first bootstrap connection also read the
    // broker list, in the background).
    let metadata_conn = records
        .iter()
        .rev()
        .find(|r| r.what == What::Forwarded && r.api == Some(ApiKey::Metadata))
        .map(|r| r.conn);
    assert_ne!(
        metadata_conn,
        Some(conn_of(ApiKey::DescribeGroups)),
        "the bootstrap gets a connection of its own again"
    );
    assert_eq!(api_versions, 2, "one ApiVersions per connection");
}
