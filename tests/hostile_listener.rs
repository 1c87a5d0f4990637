//! Listeners that answer something other than a Kafka broker's answers: an HTTP service, forged
//! ApiVersions and FindCoordinator answers (the forged sizes of publish-check/tests/forged.rs),
//! the real broker's TLS listener spoken to in plaintext and its plaintext listener spoken to in
//! TLS. `find_coordinator` ends within `default.api.timeout.ms` with a typed error naming the
//! API, the broker and the cause; a member started against such a listener reports
//! `Event::ConnectionTrouble` after the first failure, once, while it keeps retrying. Nothing a
//! hostile peer sends makes the client allocate out of proportion.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use consumer_membership::driver::find_coordinator;
use consumer_membership::error::{Error, GroupError, TransportError};
use consumer_membership::machine::events::Event;
use consumer_membership::request::Api;
use consumer_membership::transport::wire;
use consumer_membership::{ClientConfig, GroupConfig, GroupMember, TcpTransport};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse, ResponseKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The largest single allocation of the whole test binary.
struct Largest;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Largest = Largest;

/// The `default.api.timeout.ms` of these tests.
const API_TIMEOUT: Duration = Duration::from_secs(3);

/// No allocation of the binary so far was larger than this (the answers claim gigabytes).
fn assert_memory_bounded() {
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(largest < 8 << 20, "an allocation of {largest} bytes");
}

fn client(bootstrap: &str) -> ClientConfig {
    ClientConfig::new(bootstrap)
        .expect("config")
        .with_default_api_timeout(API_TIMEOUT)
}

/// Runs `find_coordinator` against `config` and checks it ends within the timeout (plus a
/// margin) with a `TimedOut` error naming FindCoordinator and `port`; returns the error's
/// transport cause, and how long it took.
async fn timed_out_lookup(config: ClientConfig, port: u16) -> (TransportError, Duration) {
    let transport = Arc::new(TcpTransport::new(config.clone()));
    let started = Instant::now();
    let r = tokio::time::timeout(
        API_TIMEOUT * 3,
        find_coordinator(&transport, &config, "hostile"),
    )
    .await;
    let took = started.elapsed();
    let e = match r {
        Ok(Err(e)) => e,
        Ok(Ok(b)) => panic!("found a coordinator {b:?} at a hostile listener"),
        Err(_) => panic!("find_coordinator still running after {took:?}"),
    };
    println!("after {took:?}: {e}");
    assert!(
        took >= API_TIMEOUT && took < API_TIMEOUT + Duration::from_millis(1500),
        "{took:?}"
    );
    let text = e.to_string();
    assert!(text.contains("FindCoordinator"), "{text}");
    assert!(text.contains(&format!(":{port}")), "{text}");
    match e {
        Error::Group(GroupError::TimedOut {
            api,
            broker,
            after,
            transport: Some(cause),
            ..
        }) => {
            assert_eq!(api, Api::from(ApiKey::FindCoordinator));
            assert_eq!(after, API_TIMEOUT);
            assert!(broker.contains(&format!(":{port}")), "{broker}");
            assert!(cause.is_persistent(), "{cause:?}");
            (*cause, took)
        }
        other => panic!("expected a timed-out lookup with a transport cause, got {other:?}"),
    }
}

/// Reads one request frame; its correlation id, `None` once the peer is gone.
async fn read_request(s: &mut TcpStream) -> Option<(i16, i16, i32)> {
    let mut size = [0u8; 4];
    s.read_exact(&mut size).await.ok()?;
    let mut req = vec![0u8; i32::from_be_bytes(size).clamp(8, 1 << 20) as usize];
    s.read_exact(&mut req).await.ok()?;
    let api = i16::from_be_bytes([req[0], req[1]]);
    let version = i16::from_be_bytes([req[2], req[3]]);
    Some((
        api,
        version,
        i32::from_be_bytes([req[4], req[5], req[6], req[7]]),
    ))
}

/// A listener whose every connection gets `answer(api, version, correlation id)` to each
/// request (`None`: the connection is closed).
async fn serve(
    answer: impl Fn(i16, i16, i32) -> Option<Vec<u8>> + Send + Sync + 'static,
) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                while let Some((api, version, id)) = read_request(&mut s).await {
                    let Some(bytes) = answer(api, version, id) else {
                        return;
                    };
                    if s.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A size-prefixed frame: the correlation id, a flexible header's tagged fields, `body`.
fn frame(correlation_id: i32, flexible_header: bool, body: &[u8]) -> Vec<u8> {
    let mut f = correlation_id.to_be_bytes().to_vec();
    if flexible_header {
        f.push(0);
    }
    f.extend_from_slice(body);
    let mut out = (f.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&f);
    out
}

/// A count or length of 2^32 - 2 (a compact size is the value + 1).
const HUGE_VARINT: [u8; 5] = [0xff, 0xff, 0xff, 0xff, 0x0f];

#[tokio::test]
async fn an_http_service_is_named_not_kafka_within_the_timeout() {
    let addr = serve(|_, _, _| {
        Some(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec())
    })
    .await;
    let (cause, _) = timed_out_lookup(client(&addr.to_string()), addr.port()).await;
    assert!(
        matches!(cause.root(), TransportError::NotKafka { start, .. } if start.contains("HTTP/1.1 400")),
        "{cause:?}"
    );
    assert_memory_bounded();
}

#[tokio::test]
async fn a_forged_api_versions_answer_is_a_named_decode_error_within_the_timeout() {
    // ApiVersions v3+: error code, then the compact array of APIs claiming 2^32 - 2 entries.
    let addr = serve(|_, _, id| {
        let mut body = vec![0, 0];
        body.extend_from_slice(&HUGE_VARINT);
        body.push(0);
        Some(frame(id, false, &body))
    })
    .await;
    let (cause, _) = timed_out_lookup(client(&addr.to_string()), addr.port()).await;
    assert!(
        matches!(cause.root(), TransportError::Decode { api, reason, .. }
            if *api == Api::from(ApiKey::ApiVersions)
                && reason.contains("field ApiKeys: forged size")),
        "{cause:?}"
    );
    assert_memory_bounded();
}

/// An ApiVersions entry: `api` from `min` to `max`.
fn serves(api: ApiKey, min: i16, max: i16) -> ApiVersion {
    ApiVersion::default()
        .with_api_key(api as i16)
        .with_min_version(min)
        .with_max_version(max)
}

/// A broker that advertises FindCoordinator at `version` only and answers it with `body`.
async fn forging_find_coordinator(version: i16, body: Vec<u8>) -> std::net::SocketAddr {
    let advertised = ResponseKind::ApiVersions(ApiVersionsResponse::default().with_api_keys(vec![
        serves(ApiKey::ApiVersions, 0, 4),
        serves(ApiKey::FindCoordinator, version, version),
    ]));
    serve(move |api, asked, id| {
        if api != ApiKey::ApiVersions as i16 {
            return Some(frame(id, version >= 3, &body));
        }
        let versions = advertised.clone().into();
        let answer = wire::encode_response(&versions, ApiKey::ApiVersions, asked, id);
        Some(answer.expect("encode").to_vec())
    })
    .await
}

#[tokio::test]
async fn forged_find_coordinator_answers_are_named_decode_errors_within_the_timeout() {
    let string = [vec![0; 6], i16::MAX.to_be_bytes().to_vec()].concat();
    let compact_array = [vec![0; 4], HUGE_VARINT.to_vec()].concat();
    let compact_string = [vec![0; 4], vec![2], HUGE_VARINT.to_vec()].concat();
    let cases = [
        (2, "string", "field ErrorMessage", string),
        (6, "compact array", "field Coordinators", compact_array),
        (
            4,
            "compact string",
            "field Coordinators.Key",
            compact_string,
        ),
    ];
    let lookups = cases.map(|(version, forged, field, body)| async move {
        let addr = forging_find_coordinator(version, body).await;
        let (cause, took) = timed_out_lookup(client(&addr.to_string()), addr.port()).await;
        assert!(
            matches!(cause.root(), TransportError::Decode { api, version: v, reason }
                if *api == Api::from(ApiKey::FindCoordinator) && *v == version
                    && reason.contains(&format!("{field}: forged size"))),
            "v{version} {forged}: {cause:?}"
        );
        println!("FindCoordinator v{version} forged {forged}: typed after {took:?}");
    });
    futures_join(lookups).await;
    assert_memory_bounded();
}

/// Runs the three futures concurrently (the timeouts overlap).
async fn futures_join<F: std::future::Future<Output = ()>>(fs: [F; 3]) {
    let [a, b, c] = fs;
    tokio::join!(a, b, c);
}

#[tokio::test]
async fn a_member_reports_connection_trouble_once_after_the_first_failure() {
    let addr = serve(|_, _, _| Some(b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec())).await;
    let transport = Arc::new(TcpTransport::new(client(&addr.to_string())));
    let mut member = GroupMember::start(transport, GroupConfig::new("hostile")).expect("start");
    let started = Instant::now();
    member
        .subscribe(["t".to_string()])
        .await
        .expect("subscribe");
    let mut troubles = Vec::new();
    let first = loop {
        let event = tokio::time::timeout(Duration::from_secs(5), member.next_event())
            .await
            .expect("an event within 5 s")
            .expect("the member runs");
        if let Event::ConnectionTrouble { broker, error } = event {
            break (broker, error, started.elapsed());
        }
    };
    println!("after {:?}: {} {}", first.2, first.0, first.1);
    assert!(first.0.contains(&addr.to_string()), "{}", first.0);
    assert!(
        matches!(first.1.root(), TransportError::NotKafka { .. }),
        "{:?}",
        first.1
    );
    assert!(first.2 < Duration::from_secs(2), "{:?}", first.2);
    // It keeps retrying (reconnect and retry backoff at most 1 s) without another report.
    let until = tokio::time::Instant::now() + Duration::from_secs(3);
    while let Ok(Some(event)) = tokio::time::timeout_at(until, member.next_event()).await {
        if matches!(event, Event::ConnectionTrouble { .. }) {
            troubles.push(event);
        }
    }
    assert!(troubles.is_empty(), "reported again: {troubles:?}");
    assert_memory_bounded();
}

/// The real broker's `KAFKA_...` listener variable.
fn listener(var: &str) -> Option<String> {
    common::bootstrap()?;
    Some(std::env::var(var).unwrap_or_else(|_| panic!("{var} not set")))
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .expect("host:port")
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test]
async fn a_tls_listener_spoken_to_in_plaintext_is_named_within_the_timeout() {
    let Some(addr) = listener("KAFKA_SASL_SSL_BOOTSTRAP") else {
        return;
    };
    let (cause, _) = timed_out_lookup(client(&addr), port_of(&addr)).await;
    // The broker answers with a TLS alert record.
    assert!(
        matches!(cause.root(), TransportError::NotKafka { guess, .. } if guess.contains("TLS")),
        "{cause:?}"
    );
    assert_memory_bounded();
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test]
async fn a_plaintext_listener_spoken_to_in_tls_is_named_within_the_timeout() {
    let Some(addr) = listener("KAFKA_BOOTSTRAP") else {
        return;
    };
    let mut config = client(&addr);
    config.security.protocol = consumer_membership::config::SecurityProtocol::Ssl;
    config.security.ssl_ca_location = Some(listener("KAFKA_TLS_CA").expect("CA").into());
    let (cause, _) = timed_out_lookup(config, port_of(&addr)).await;
    assert!(
        matches!(cause.root(), TransportError::Tls { reason } if reason.contains("security.protocol")),
        "{cause:?}"
    );
    assert_memory_bounded();
}

/// A member whose bootstrap broker is down is told within `default.api.timeout.ms` that it is
/// not in the group, and why (the lookup: connection refused), once; it keeps trying.
#[tokio::test]
async fn a_member_not_in_the_group_within_the_api_timeout_is_told_why() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    // The request timeout below the API timeout, as by default (30 s and 60 s): a lookup
    // request ends with the transport's failure before the member's wait is reported.
    let client = client(&format!("127.0.0.1:{port}")).with_request_timeout(API_TIMEOUT / 3);
    let transport = Arc::new(TcpTransport::new(client));
    let mut config = GroupConfig::new("nobody-home");
    config.default_api_timeout = API_TIMEOUT;
    config.request_timeout = API_TIMEOUT / 3;
    let mut member = GroupMember::start(transport, config).expect("start");
    let started = Instant::now();
    member
        .subscribe(["t".to_string()])
        .await
        .expect("subscribe");
    let error = loop {
        let event = tokio::time::timeout(API_TIMEOUT * 2, member.next_event())
            .await
            .expect("an event within twice the timeout")
            .expect("the member runs");
        if let Event::NotJoined { error } = event {
            break error;
        }
    };
    let took = started.elapsed();
    println!("after {took:?}: {error}");
    let GroupError::TimedOut {
        api,
        broker,
        after,
        transport,
        ..
    } = &error
    else {
        panic!("{error:?}");
    };
    assert_eq!(*api, Api::from(ApiKey::FindCoordinator));
    assert!(broker.contains(&port.to_string()), "{broker}");
    assert!(*after >= API_TIMEOUT, "{after:?}");
    assert!(
        matches!(
            transport.as_deref().map(TransportError::root),
            Some(TransportError::Connect { .. })
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("refused"), "{error}");
    assert!(took < API_TIMEOUT + Duration::from_secs(2), "{took:?}");
    // Once per wait: the member keeps trying and says nothing more.
    let until = tokio::time::Instant::now() + API_TIMEOUT + Duration::from_secs(1);
    while let Ok(Some(event)) = tokio::time::timeout_at(until, member.next_event()).await {
        assert!(!matches!(event, Event::NotJoined { .. }), "{event:?}");
    }
}
