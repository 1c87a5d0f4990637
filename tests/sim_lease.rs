#![cfg(feature = "sim")]
//! The membership lease in the simulation, per protocol: a member whose heartbeats go
//! unanswered (the coordinator stalls, its answers are lost one way, or the member's process is
//! starved of CPU) reports its partitions / tasks lost at the lease bound, before the other
//! member of the group is given any of them; at no step of the run do the two members both
//! report a partition (an active task) owned. Afterwards the member rejoins with its member id.

use std::collections::BTreeMap;
use std::time::Duration;

use consumer_membership::MemberId;
use consumer_membership::config::{GroupConfig, GroupProtocol};
use consumer_membership::machine::TopicPartition;
use consumer_membership::machine::consumer::ConsumerMember;
use consumer_membership::machine::events::MemberState;
use consumer_membership::machine::member::Member;
use consumer_membership::machine::streams::{
    InternalTopic, StreamsConfig, StreamsProcess, StreamsTopology, Subtopology,
};
use consumer_membership::sim::world::{MemberSlot, SimConfig, World};

/// The session timeout of every protocol here; with a 1 s heartbeat interval the lease holds
/// 9 s from the send of the last answered heartbeat.
const SESSION: Duration = Duration::from_secs(10);
const INTERVAL: Duration = Duration::from_secs(1);
/// How long the fault lasts: well past the session.
const FAULT: Duration = Duration::from_secs(25);

#[derive(Debug, Clone, Copy)]
enum Protocol {
    Classic,
    Consumer,
    Streams,
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    /// The coordinator processes nothing.
    Stall,
    /// Requests reach the coordinator; every answer to our member is lost.
    DropAnswers,
    /// Our member's process is not driven at all.
    Starve,
}

fn config(protocol: Protocol, n: u8, assumed_session: Duration) -> GroupConfig {
    let mut c = GroupConfig::new(if matches!(protocol, Protocol::Streams) {
        "app"
    } else {
        "g"
    });
    c.instance_id = Some(format!("inst-{n}"));
    c.session_timeout = SESSION;
    c.heartbeat_interval = INTERVAL;
    c.group_session_timeout = assumed_session;
    c.max_poll_interval = Duration::from_secs(60);
    c.request_timeout = Duration::from_secs(5);
    c.seed = Some(u64::from(n));
    let mut bytes = [9u8; 16];
    bytes[0] = n;
    c.member_id = Some(MemberId::from_bytes(bytes).expect("not reserved"));
    if matches!(protocol, Protocol::Consumer) {
        c.protocol = GroupProtocol::Consumer;
    }
    c
}

fn world(protocol: Protocol, assumed_session: Duration) -> (World, MemberSlot, MemberSlot) {
    let mut sim = SimConfig::new(7).with_topic("t", 4);
    sim.coordinator.consumer_session_timeout = SESSION;
    sim.coordinator.consumer_heartbeat_interval = INTERVAL;
    sim.coordinator.streams.session_timeout = SESSION;
    sim.coordinator.streams.heartbeat_interval = INTERVAL;
    sim.coordinator.streams.num_standby_replicas = 0;
    if matches!(protocol, Protocol::Streams) {
        sim = sim.with_topic("store-changelog", 4);
        sim.group_id = "app".into();
    }
    let mut w = World::new(sim, std::time::Instant::now());
    let add = |w: &mut World, n: u8| -> MemberSlot {
        let name = format!("m{n}");
        let c = config(protocol, n, assumed_session);
        match protocol {
            Protocol::Classic => w.add_classic(&name, c, |_| {}).unwrap(),
            Protocol::Consumer => {
                let id = c.member_id.unwrap();
                let m = ConsumerMember::with_member_id(c, id, w.now()).unwrap();
                w.add_member(&name, Box::new(Member::Consumer(m)))
            }
            Protocol::Streams => {
                let topology = StreamsConfig::new(StreamsTopology::new(
                    0,
                    vec![
                        Subtopology::new("0", ["t"])
                            .with_changelog(InternalTopic::new("store-changelog")),
                    ],
                ));
                let process = StreamsProcess::new(format!("process-{n}"), None);
                w.add_streams(&name, c, topology, process).unwrap()
            }
        }
    };
    let ours = add(&mut w, 1);
    let other = add(&mut w, 2);
    let topics: &[&str] = match protocol {
        // A streams member joins with its topology.
        Protocol::Streams => &[],
        _ => &["t"],
    };
    for h in [ours, other] {
        w.subscribe(h, topics);
    }
    let stable = w.run_until(|w| settled(w, protocol), Duration::from_secs(60));
    w.check(stable, "the group is stable before the fault");
    w.run_for(Duration::from_secs(5));
    (w, ours, other)
}

/// Every member is stable (and, but for streams groups, the coordinator holds exactly them).
fn settled(w: &World, protocol: Protocol) -> bool {
    let all = w
        .handles()
        .iter()
        .all(|h| w.member(*h).state() == MemberState::Stable);
    all && (matches!(protocol, Protocol::Streams) || w.all_stable())
}

/// The first event of `h` at or after `since` whose text contains `what`, and its time.
fn first_event(w: &World, h: MemberSlot, since: Duration, what: &str) -> Option<Duration> {
    w.events(h)
        .iter()
        .find(|(at, e)| *at >= since && e.contains(what))
        .map(|(at, _)| *at)
}

/// What the scenario measured.
#[derive(Debug)]
struct Outcome {
    /// From the fault to our member's lease Lost.
    lost_after: Duration,
    /// From the fault to the other member holding one of ours.
    other_took_after: Option<Duration>,
}

fn run(protocol: Protocol, fault: Fault) -> Outcome {
    run_assuming(protocol, fault, SESSION)
}

/// [`run`] with members that assume the group's session timeout is `assumed_session`.
fn run_assuming(protocol: Protocol, fault: Fault, assumed_session: Duration) -> Outcome {
    let (mut w, ours, other) = world(protocol, assumed_session);
    let name = |h: MemberSlot| format!("m{}", h.0 + 1);
    let before: Vec<TopicPartition> = w.ownership()[&name(ours)].clone();
    w.check(!before.is_empty(), "our member owns partitions");
    let member_id = w.member(ours).member_id();
    let start = w.elapsed();
    match fault {
        Fault::Stall => w.stall(FAULT),
        Fault::DropAnswers => w.drop_answers(ours, FAULT),
        Fault::Starve => w.starve(ours, FAULT),
    }
    let mut other_took = None;
    let end = start + FAULT + Duration::from_secs(60);
    while w.elapsed() < end && w.step() {
        // At every step: no partition reported owned by both members. A starved process does
        // nothing at all (neither reports nor processes) until it runs again; then its first
        // event is the loss (checked below).
        let owned = w.ownership();
        let starved = matches!(fault, Fault::Starve) && w.elapsed() < start + FAULT;
        let mut owners: BTreeMap<&TopicPartition, Vec<&String>> = BTreeMap::new();
        for (who, ps) in owned
            .iter()
            .filter(|(who, _)| !starved || **who != name(ours))
        {
            for tp in ps {
                owners.entry(tp).or_default().push(who);
            }
        }
        let doubles: Vec<_> = owners.iter().filter(|(_, o)| o.len() > 1).collect();
        w.check(
            doubles.is_empty(),
            format!("{protocol:?}/{fault:?}: owned twice: {doubles:?}"),
        );
        if other_took.is_none() && owned[&name(other)].iter().any(|tp| before.contains(tp)) {
            other_took = Some(w.elapsed() - start);
        }
    }
    let lost = first_event(&w, ours, start, "membership lease expired");
    w.check(
        lost.is_some(),
        format!("{protocol:?}/{fault:?}: our member reported its partitions lost"),
    );
    let lost_after = lost.unwrap() - start;
    if let Fault::Starve = fault {
        // The first thing the member reports once it runs again is the loss.
        let first = w.events(ours).iter().find(|(at, _)| *at > start);
        w.check(
            first.is_some_and(|(_, e)| e.contains("membership lease expired")),
            format!("{protocol:?}: the lease's Lost comes first after the starvation: {first:?}"),
        );
    }
    let stable = w.run_until(|w| settled(w, protocol), Duration::from_secs(60));
    w.check(
        stable,
        format!("{protocol:?}/{fault:?}: the group is stable again"),
    );
    w.check(
        w.member(ours).instance_id().as_deref() == Some("inst-1"),
        "the instance id is kept",
    );
    if !matches!(protocol, Protocol::Classic) {
        w.check(
            w.member(ours).member_id() == member_id,
            "the member id is kept",
        );
    }
    w.check(w.violations().is_empty(), format!("{:?}", w.violations()));
    let outcome = Outcome {
        lost_after,
        other_took_after: other_took,
    };
    println!("{protocol:?}/{fault:?}: {outcome:?}");
    // (A starved process cannot report before it runs again; it processes nothing meanwhile.)
    if let (Some(took), false) = (outcome.other_took_after, matches!(fault, Fault::Starve)) {
        w.check(
            outcome.lost_after <= took,
            format!("{protocol:?}/{fault:?}: lost before the other member took over: {outcome:?}"),
        );
    }
    outcome
}

/// The lease holds 9 s from the send of the last answered heartbeat: the loss comes 8-9 s after
/// the fault began (the last answered heartbeat went out up to one interval before).
fn check_bound(o: &Outcome, fault: Fault) {
    let lo = SESSION - INTERVAL * 2;
    let hi = match fault {
        // A starved member reports it when it runs again.
        Fault::Starve => FAULT + Duration::from_millis(10),
        _ => SESSION - INTERVAL + Duration::from_millis(10),
    };
    assert!(
        (lo..=hi).contains(&o.lost_after),
        "lost {:?} after the fault, expected within {lo:?}..={hi:?}",
        o.lost_after
    );
}

macro_rules! scenarios {
    ($($name:ident: $protocol:ident, $fault:ident;)*) => {
        $(
            #[test]
            fn $name() {
                let o = run(Protocol::$protocol, Fault::$fault);
                check_bound(&o, Fault::$fault);
            }
        )*
    };
}

scenarios! {
    classic_coordinator_stall: Classic, Stall;
    classic_answers_lost_one_way: Classic, DropAnswers;
    classic_process_starved: Classic, Starve;
    consumer_coordinator_stall: Consumer, Stall;
    consumer_answers_lost_one_way: Consumer, DropAnswers;
    consumer_process_starved: Consumer, Starve;
    streams_coordinator_stall: Streams, Stall;
    streams_answers_lost_one_way: Streams, DropAnswers;
    streams_process_starved: Streams, Starve;
}

/// The check has teeth: a consumer-protocol member that assumes a session longer than the
/// group's (here 60 s against the coordinator's 10 s) still believes it owns its partitions
/// when the coordinator hands them to the other member.
#[test]
#[should_panic(expected = "owned twice")]
fn a_member_assuming_a_longer_session_than_the_groups_is_caught_owning_twice() {
    run_assuming(
        Protocol::Consumer,
        Fault::DropAnswers,
        Duration::from_secs(60),
    );
}
