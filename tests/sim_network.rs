#![cfg(feature = "sim")]
//! The simulated network as the client sees it (`sim::network`): a connection reset fails every
//! request in flight on it and the answer to the request the broker was processing never
//! arrives; the broker closes idle connections under the client; a throttled answer carries its
//! throttle time and holds the next request on the connection. The member recovers each time.

use std::time::Duration;

use consumer_membership::config::GroupConfig;
use consumer_membership::machine::events::MemberState;
use consumer_membership::sim::network::NetConfig;
use consumer_membership::sim::world::{MemberSlot, SimConfig, World};
use kafka_protocol::messages::ApiKey;

fn stable_member(seed: u64, net: NetConfig) -> (World, MemberSlot) {
    let mut sim = SimConfig::new(seed).with_topic("t", 4);
    sim.net = net;
    let mut w = World::new(sim, std::time::Instant::now());
    let mut c = GroupConfig::new("g");
    c.session_timeout = Duration::from_secs(10);
    c.heartbeat_interval = Duration::from_secs(1);
    c.max_poll_interval = Duration::from_secs(20);
    c.request_timeout = Duration::from_secs(5);
    let h = w.add_classic("m", c, |_| {}).expect("valid config");
    w.subscribe(h, &["t"]);
    let ok = w.run_until(
        |w| w.member(h).state() == MemberState::Stable,
        Duration::from_secs(30),
    );
    w.check(ok, "the member reaches Stable");
    (w, h)
}

fn lines_with<'a>(w: &'a World, needles: &[&str]) -> Vec<&'a String> {
    w.trace()
        .iter()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .collect()
}

fn recovers(w: &mut World, h: MemberSlot, id: &str) {
    let ok = w.run_until(
        |w| w.member(h).state() == MemberState::Stable,
        Duration::from_secs(30),
    );
    w.check(
        ok && w.member(h).member_id() == id,
        "the member is Stable again under its member id",
    );
    w.check(w.violations().is_empty(), format!("{:?}", w.violations()));
}

/// The coordinator stalls with a heartbeat read; the connection resets: the heartbeat fails
/// for the client at once (no timeout), the broker still processes it after the stall, and its
/// answer is dropped, never delivered on a later connection.
#[test]
fn a_reset_fails_the_requests_in_flight_and_drops_the_answer() {
    let (mut w, h) = stable_member(7, NetConfig::default());
    let id = w.member(h).member_id();
    w.stall(Duration::from_secs(4));
    w.run_for(Duration::from_millis(1_500));
    let answered = w.delivered(ApiKey::Heartbeat);
    w.reset_connections(h);
    w.run_for(Duration::from_millis(50));
    let failed = lines_with(&w, &["Heartbeat fails: disconnected"]);
    w.check(
        failed.len() == 1,
        format!("the heartbeat in flight fails once: {failed:?}"),
    );
    w.check(
        w.delivered(ApiKey::Heartbeat) == answered,
        "no heartbeat answer arrived",
    );
    w.run_for(Duration::from_secs(4));
    let dropped = lines_with(&w, &["answers", "dropped: the broker closed it"]);
    w.check(
        !dropped.is_empty(),
        "the broker processed the heartbeat it had read and dropped its answer",
    );
    recovers(&mut w, h, &id);
}

/// `connections.max.idle.ms`: the bootstrap connection, unused once the coordinator is known,
/// is closed by the broker; the coordinator connection, with a heartbeat every second, is not.
#[test]
fn the_broker_closes_the_idle_bootstrap_connection() {
    let net = NetConfig {
        max_idle: Some(Duration::from_secs(5)),
        ..NetConfig::default()
    };
    let (mut w, h) = stable_member(8, net);
    let id = w.member(h).member_id();
    w.run_for(Duration::from_secs(12));
    let conn_after = |line: &str, verb: &str| {
        line.split(verb)
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .map(str::to_owned)
    };
    let closed: Vec<Option<String>> = lines_with(&w, &["idle (connections.max.idle.ms)"])
        .into_iter()
        .filter(|l| l.contains("m: closes"))
        .map(|l| conn_after(l, "closes "))
        .collect();
    let bootstrap: Vec<Option<String>> = lines_with(&w, &["m: opens", "(bootstrap)"])
        .into_iter()
        .map(|l| conn_after(l, "opens "))
        .collect();
    w.check(
        bootstrap.len() == 1 && closed == bootstrap,
        format!("only the bootstrap connection closes as idle: {closed:?} {bootstrap:?}"),
    );
    w.check(
        w.member(h).state() == MemberState::Stable,
        "the member stays Stable",
    );
    recovers(&mut w, h, &id);
}

/// KIP-219: throttled answers carry their throttle time; the member keeps heartbeating through
/// the muted connection and stays in the group.
#[test]
fn throttled_answers_carry_their_throttle_time() {
    let net = NetConfig {
        throttle: 1.0,
        throttle_max: Duration::from_millis(800),
        ..NetConfig::default()
    };
    let (mut w, h) = stable_member(9, net);
    let id = w.member(h).member_id();
    w.run_for(Duration::from_secs(10));
    let throttled = lines_with(&w, &["m <-", "Heartbeat", "(throttle_time_ms"]);
    w.check(
        throttled.len() >= 5,
        format!("heartbeat answers carry a throttle time: {throttled:?}"),
    );
    let held = lines_with(&w, &["delivered (connection muted: unread)"]);
    w.check(!held.is_empty(), "a request waited for a throttle to end");
    recovers(&mut w, h, &id);
}
