//! The in-memory transport and the driver, end to end without sockets: every request is encoded
//! and decoded at the negotiated version, as over TCP.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use consumer_membership::request::{RequestBody, ResponseBody, Target};
use consumer_membership::transport::MemoryTransport;
use consumer_membership::transport::wire::BrokerVersions;
use consumer_membership::{ClientConfig, Error, GroupError, driver};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{
    ApiKey, BrokerId, FindCoordinatorResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

fn config() -> ClientConfig {
    let mut c = ClientConfig::new("memory:9092").unwrap();
    c.retry_backoff = Duration::from_millis(1);
    c.retry_backoff_max = Duration::from_millis(5);
    c
}

/// A coordinator that answers COORDINATOR_NOT_AVAILABLE `failures` times, then node 7.
fn coordinator(failures: usize) -> (MemoryTransport, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let t = MemoryTransport::new(move |target: &Target, body: RequestBody, version: i16| {
        assert_eq!(target, &Target::Bootstrap);
        let RequestBody::Kafka(RequestKind::FindCoordinator(req)) = body else {
            panic!("unexpected {body:?}")
        };
        let n = seen.fetch_add(1, Ordering::SeqCst);
        let (code, node) = if n < failures { (15, -1) } else { (0, 7) };
        let mut r = FindCoordinatorResponse::default();
        if version >= 4 {
            r.coordinators = req
                .coordinator_keys
                .iter()
                .map(|k| {
                    Coordinator::default()
                        .with_key(k.clone())
                        .with_error_code(code)
                        .with_node_id(BrokerId(node))
                        .with_host(StrBytes::from_static_str("127.0.0.1"))
                        .with_port(9092)
                })
                .collect();
        } else {
            assert_eq!(req.key.as_str(), "g", "v{version} carries the key itself");
            r = r
                .with_error_code(code)
                .with_node_id(BrokerId(node))
                .with_host(StrBytes::from_static_str("127.0.0.1"))
                .with_port(9092);
        }
        Ok(ResponseKind::FindCoordinator(r))
    });
    (t, calls)
}

#[tokio::test]
async fn find_coordinator_retries_until_the_coordinator_is_available() {
    let (t, calls) = coordinator(3);
    let t = Arc::new(t);
    let b = driver::find_coordinator(&t, &config(), "g").await.unwrap();
    assert_eq!((b.node_id, b.port), (7, 9092));
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    // Sent at the highest version both sides speak.
    assert!(t.sent().iter().all(|(_, _, v)| *v == 6));
}

#[tokio::test]
async fn find_coordinator_speaks_v3_to_an_older_broker() {
    let (t, _) = coordinator(0);
    let mut v = BrokerVersions::all();
    v.set(ApiKey::FindCoordinator, Some(0..=3));
    t.set_versions(v);
    let t = Arc::new(t);
    let b = driver::find_coordinator(&t, &config(), "g").await.unwrap();
    assert_eq!(b.node_id, 7);
    assert_eq!(t.sent()[0].2, 3);
}

#[tokio::test]
async fn group_authorization_failure_is_returned_typed() {
    let t = Arc::new(MemoryTransport::new(
        |_: &Target, _: RequestBody, _: i16| {
            Ok(ResponseKind::FindCoordinator(
                FindCoordinatorResponse::default().with_coordinators(vec![
                    Coordinator::default()
                        .with_key(StrBytes::from_static_str("g"))
                        .with_error_code(30),
                ]),
            ))
        },
    ));
    let e = driver::find_coordinator(&t, &config(), "g")
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Group(GroupError::GroupAuthorizationFailed { group }) if group == "g"),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_broker_without_find_coordinator_is_a_typed_error() {
    let (t, _) = coordinator(0);
    let mut v = BrokerVersions::all();
    v.set(ApiKey::FindCoordinator, None);
    t.set_versions(v);
    let e = driver::find_coordinator(&Arc::new(t), &config(), "g")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("FindCoordinator"), "{e}");
}

#[tokio::test]
async fn a_member_started_by_the_driver_draws_its_id_from_the_os_not_from_its_seed() {
    use consumer_membership::MemberId;
    use consumer_membership::config::{GroupConfig, GroupProtocol};

    let start = |member_id: Option<MemberId>| async move {
        // Nothing is sent before `subscribe`.
        let t = MemoryTransport::new(
            |_: &Target, body: RequestBody, _: i16| -> Result<ResponseBody, _> {
                panic!("unexpected {body:?}")
            },
        );
        let mut c = GroupConfig::new("g");
        c.protocol = GroupProtocol::Consumer;
        c.seed = Some(1);
        c.member_id = member_id;
        let m = driver::GroupMember::start(Arc::new(t), c).expect("valid config");
        let id = m.snapshot().await.expect("running").member_id;
        m.close(Default::default()).await;
        MemberId::parse(&id).expect("a KIP-1082 id")
    };
    // The same seed, two processes: two ids from the OS CSPRNG, neither the seed's.
    let (a, b) = (start(None).await, start(None).await);
    assert_ne!(a, b);
    assert_ne!(a, MemberId::from_seed(1));
    assert!(!a.as_str().contains('-') && !b.as_str().contains('-'));
    // A configured id is the member's.
    let given = MemberId::parse("Zm9vYmFyYmF6cXV4MTIzNA").unwrap();
    assert_eq!(start(Some(given)).await, given);
}

#[tokio::test]
async fn a_streams_group_heartbeat_goes_through_the_memory_transport() {
    use consumer_membership::messages::{
        StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse,
    };
    use consumer_membership::request::{Api, Request};
    use consumer_membership::transport::Transport;

    let t = MemoryTransport::new(|_: &Target, body: RequestBody, version: i16| {
        let RequestBody::StreamsGroupHeartbeat(r) = body else {
            panic!("unexpected {body:?}")
        };
        assert_eq!(version, 1);
        Ok(ResponseBody::StreamsGroupHeartbeat(
            StreamsGroupHeartbeatResponse::default()
                .with_member_id(r.member_id)
                .with_member_epoch(r.member_epoch + 1),
        ))
    });
    let request = Request::StreamsGroupHeartbeat {
        body: Box::new(
            StreamsGroupHeartbeatRequest::default()
                .with_member_id(StrBytes::from_static_str("m"))
                .with_member_epoch(1),
        ),
        versions: 0..=1,
    };
    let r = t
        .send(Target::Bootstrap, request.clone(), Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(r.version, 1);
    let ResponseBody::StreamsGroupHeartbeat(body) = &r.body else {
        panic!("{r:?}")
    };
    assert_eq!((body.member_id.as_str(), body.member_epoch), ("m", 2));
    assert_eq!(t.sent().len(), 1);
    // A broker that does not serve it: typed, nothing sent.
    let mut old = BrokerVersions::all();
    old.set(Api::STREAMS_GROUP_HEARTBEAT, None);
    t.set_versions(old);
    let e = t
        .send(Target::Bootstrap, request, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, consumer_membership::TransportError::UnsupportedApi { api, .. }
            if *api == Api::STREAMS_GROUP_HEARTBEAT),
        "{e:?}"
    );
    assert_eq!(t.sent().len(), 1);
}
