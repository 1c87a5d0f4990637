#![cfg(feature = "sim")]
//! KIP-848 members against the simulated coordinator: a lost first heartbeat answer (the
//! connection resets as the broker writes it) and a close before the first answer leave no
//! ghost member (KIP-1082 ids, KAFKA-19233 idempotent rejoin).

use std::time::{Duration, Instant};

use consumer_membership::MemberId;
use consumer_membership::config::{GroupConfig, GroupProtocol};
use consumer_membership::machine::consumer::ConsumerMember;
use consumer_membership::machine::events::CloseOptions;
use consumer_membership::machine::events::MemberState;
use consumer_membership::machine::member::Member;
use consumer_membership::sim::network::NetConfig;
use consumer_membership::sim::world::{MemberSlot, SimConfig, World};

fn consumer(w: &World, id: u8, instance: Option<&str>) -> Member {
    let mut c = GroupConfig::new("g");
    c.protocol = GroupProtocol::Consumer;
    c.instance_id = instance.map(String::from);
    c.request_timeout = Duration::from_secs(3);
    c.seed = Some(u64::from(id));
    let mut bytes = [7u8; 16];
    bytes[0] = id;
    let member_id = MemberId::from_bytes(bytes).expect("not reserved");
    Member::Consumer(ConsumerMember::with_member_id(c, member_id, w.now()).expect("valid config"))
}

fn world(seed: u64) -> World {
    World::new(
        SimConfig::new(seed).with_topic("t", 4),
        std::time::Instant::now(),
    )
}

fn add(w: &mut World, id: u8, instance: Option<&str>) -> MemberSlot {
    let m = consumer(w, id, instance);
    w.add_member(&format!("k{id}"), Box::new(m))
}

fn lose_answers(w: &mut World, on: bool) {
    let mut net = NetConfig::default();
    if on {
        net.reset_before_answer = 1.0;
    }
    w.network_mut().set_config(net);
}

#[test]
fn lost_first_heartbeat_answer_leaves_one_member() {
    for instance in [None, Some("k-static")] {
        let mut w = world(848);
        let k = add(&mut w, 1, instance);
        // FindCoordinator goes through; the first ConsumerGroupHeartbeat's answer is lost: the
        // connection resets as the broker writes it.
        w.subscribe(k, &["t"]);
        w.run_until(
            |w| w.member(k).coordinator().is_some(),
            Duration::from_secs(1),
        );
        lose_answers(&mut w, true);
        w.run_until(
            |w| w.coordinator().members().len() == 1,
            Duration::from_secs(1),
        );
        lose_answers(&mut w, false);
        let stable = w.run_until(
            |w| w.member(k).state() == MemberState::Stable || w.member(k).fatal_error().is_some(),
            Duration::from_secs(60),
        );
        w.run_for(Duration::from_secs(5));
        println!("{}", w.trace_text());
        let members = w.coordinator().members();
        w.check(
            members.len() == 1 && members[0].member_id == w.member(k).member_id(),
            format!("exactly our member at the coordinator: {members:?}"),
        );
        w.check(
            stable && w.member(k).state() == MemberState::Stable,
            format!(
                "{instance:?}: the member recovers to Stable, got {} ({:?})",
                w.member(k).state(),
                w.member(k).fatal_error()
            ),
        );
        w.check(
            w.member(k).assignment().len() == 4,
            "owns the topic's partitions",
        );
        w.check(w.violations().is_empty(), format!("{:?}", w.violations()));
    }
}

#[test]
fn close_before_the_first_answer_leaves_no_ghost() {
    let mut w = world(849);
    let k = add(&mut w, 2, None);
    w.subscribe(k, &["t"]);
    w.run_until(
        |w| w.member(k).coordinator().is_some(),
        Duration::from_secs(1),
    );
    // The join is on the wire; the application closes before any answer.
    w.run_for(Duration::from_micros(10));
    let t0: Instant = w.now();
    w.close(k, CloseOptions::Default);
    w.run_for(Duration::from_secs(10));
    println!("{}", w.trace_text());
    let _ = t0;
    w.check(
        w.coordinator().members().is_empty(),
        format!("no ghost member: {:?}", w.coordinator().members()),
    );
    w.check(
        w.member(k).state() == MemberState::Closed,
        format!("closed, got {}", w.member(k).state()),
    );
}
