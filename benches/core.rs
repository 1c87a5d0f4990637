//! Micro-benchmarks of the sans-IO core's building blocks: member id generation, backoff, and a
//! FindCoordinator round through the wire codec (build, encode, decode the answer, handle).

use std::hint::black_box;
use std::time::{Duration, Instant};

use consumer_membership::MemberId;
use consumer_membership::core::backoff::{ExponentialBackoff, JitterRng};
use consumer_membership::core::coordinator::{CoordinatorLookup, LookupConfig};
use consumer_membership::transport::wire::{self, BrokerVersions};
use criterion::{Criterion, criterion_group, criterion_main};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{ApiKey, BrokerId, FindCoordinatorResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

fn member_id(c: &mut Criterion) {
    c.bench_function("member_id/generate", |b| {
        b.iter(|| black_box(MemberId::generate()))
    });
    let id = MemberId::generate().to_string();
    c.bench_function("member_id/parse", |b| {
        b.iter(|| black_box(MemberId::parse(black_box(&id))))
    });
}

fn backoff(c: &mut Criterion) {
    let policy = ExponentialBackoff::retry(Duration::from_millis(100), Duration::from_secs(1));
    let mut rng = JitterRng::from_seed(1);
    c.bench_function("backoff/delay", |b| {
        b.iter(|| black_box(policy.delay(black_box(3), &mut rng)))
    });
}

fn find_coordinator_round(c: &mut Criterion) {
    let versions = BrokerVersions::all();
    let answer =
        ResponseKind::FindCoordinator(FindCoordinatorResponse::default().with_coordinators(vec![
        Coordinator::default()
            .with_key(StrBytes::from_static_str("g"))
            .with_node_id(BrokerId(1))
            .with_host(StrBytes::from_static_str("127.0.0.1"))
            .with_port(9092),
    ]));
    let config = LookupConfig {
        backoff: ExponentialBackoff::retry(Duration::from_millis(100), Duration::from_secs(1)),
        request_timeout: Duration::from_secs(30),
        seed: 1,
    };
    let now = Instant::now();
    c.bench_function("coordinator/find_round", |b| {
        b.iter(|| {
            let mut lookup = CoordinatorLookup::new(["g".to_owned()], config.clone());
            let out = lookup.poll_request().unwrap();
            let (api, version, body) = wire::build(&out.request, &versions).unwrap();
            let frame = wire::encode_request(&body, api, version, 1, "bench").unwrap();
            black_box(frame);
            let reply =
                wire::encode_response(&answer, ApiKey::FindCoordinator, version, 1).unwrap();
            let response = wire::decode_response(reply.freeze().slice(4..), api, version).unwrap();
            lookup.handle_response(out.id, Ok(response), now);
            black_box(lookup.coordinator("g").is_some())
        })
    });
}

criterion_group!(benches, member_id, backoff, find_coordinator_round);
criterion_main!(benches);
