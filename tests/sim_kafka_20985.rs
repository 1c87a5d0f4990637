#![cfg(feature = "sim")]
//! KAFKA-20985 (seeds/KAFKA-20985-static-member-self-fencing.txt), scripted step by step in the
//! simulation:
//!
//! 1. a lone static member calls `unsubscribe()` (no LeaveGroup: static) and subscribes again;
//! 2. it rejoins at once (Join #1);
//! 3. the coordinator is stalled; on the member's coordinator connection HB1 sits in the
//!    coordinator's queue and a second request ("HB2", here an offset commit) was delivered but
//!    not read, because the broker reads one request per connection at a time; Join #1's bytes
//!    land behind HB2, unread. HB1 is answered COORDINATOR_NOT_AVAILABLE; the client marks the
//!    coordinator unknown and closes the connection (cancelling HB2 and Join #1 in its own
//!    bookkeeping only), rediscovers the coordinator and sends Join #2 on a new connection;
//! 4. Join #2 is read at once, ~15 s ahead of Join #1; when the stall clears, HB2 runs (its answer
//!    is dropped), the old connection is read again and Join #1 is queued behind Join #2.
//!
//! With the Java client's policy (`set_java_reset_policy(true)`: the member id is wiped when the
//! LeaveGroup is suppressed) both joins carry `""` + the instance id: Join #2 replaces the
//! registered member, then Join #1 replaces Join #2's member and `replaceStaticMember` answers
//! Join #2's parked future with FENCED_INSTANCE_ID on a connection that is still open. With this
//! crate's policy (the member id is kept) both joins are rejoins of the known member and nothing
//! is fenced.

use std::time::Duration;

use consumer_membership::config::GroupConfig;
use consumer_membership::machine::events::MemberState;
use consumer_membership::sim::codes;
use consumer_membership::sim::world::{MemberSlot, SimConfig, World};

const STALL: Duration = Duration::from_secs(15);

fn config() -> GroupConfig {
    let mut c = GroupConfig::new("g").with_instance_id("i1");
    c.session_timeout = Duration::from_secs(10);
    c.heartbeat_interval = Duration::from_secs(1);
    // Join timeout = max(request.timeout.ms, max.poll.interval.ms + 5 s) = 8 s: shorter than the
    // stall, so the client's own bookkeeping gives up on Join #1 while it is still unread.
    c.max_poll_interval = Duration::from_secs(3);
    c.request_timeout = Duration::from_secs(3);
    c.seed = Some(20985);
    c
}

/// Index of the first trace line containing every needle.
fn line_of(w: &World, needles: &[&str]) -> Option<usize> {
    w.trace()
        .iter()
        .position(|l| needles.iter().all(|n| l.contains(n)))
}

/// Runs the seed's sequence; returns the world and the member.
fn scenario(java_policy: bool) -> (World, MemberSlot) {
    let mut w = World::new(
        SimConfig::new(20985).with_topic("t", 4),
        std::time::Instant::now(),
    );
    let m = w
        .add_classic("m", config(), |c| c.set_java_reset_policy(java_policy))
        .unwrap();
    w.subscribe(m, &["t"]);
    let stable = w.run_until(
        |w| w.member(m).state() == MemberState::Stable,
        Duration::from_secs(30),
    );
    w.check(stable, "the lone static member reaches Stable");
    let first_id = w.member(m).member_id();
    w.run_for(Duration::from_millis(1500));

    // Step 3: the coordinator stalls; HB1 is read and sits in its queue.
    w.note("the coordinator stalls (e.g. __consumer_offsets reloading after a leader change)");
    w.stall(STALL);
    let queued = w.run_until(
        |w| w.network().coordinator_queue().count() == 1,
        Duration::from_secs(2),
    );
    w.check(queued, "HB1 is in the coordinator's queue");
    // HB2: a second request on the same connection, delivered but unread (connection muted).
    w.note("HB2: a second request on the coordinator connection, delivered but unread");
    w.commit_owned(m, 42);
    w.run_for(Duration::from_millis(20));

    // Steps 1 and 2: unsubscribe (static: no LeaveGroup) and rejoin at once: Join #1.
    w.unsubscribe(m);
    w.subscribe(m, &["t"]);
    w.run_for(Duration::from_millis(20));
    w.check(
        w.member(m).state() == MemberState::Joining,
        "Join #1 is in flight behind HB2",
    );
    w.check(
        w.network().coordinator_queue().count() == 1,
        "only HB1 is read; HB2 and Join #1 are unread",
    );

    // HB1 is answered COORDINATOR_NOT_AVAILABLE; the client marks the coordinator unknown and
    // closes the connection (the Java client's HeartbeatResponseHandler + markCoordinatorUnknown).
    let answered = w.fail_queued_head(codes::COORDINATOR_NOT_AVAILABLE);
    w.check(answered, "HB1 answered");
    w.run_for(Duration::from_millis(10));
    w.note("the client marks the coordinator unknown and disconnects");
    w.drop_connections(m);

    // The client rediscovers the coordinator and sends Join #2 on a new connection; the stall
    // clears; the backlog drains.
    w.run_for(STALL + Duration::from_secs(30));
    w.note(&format!(
        "end: state {}, member id {:?} (first {:?}), generation {}",
        w.member(m).state(),
        w.member(m).member_id(),
        first_id,
        w.member(m).generation()
    ));
    (w, m)
}

/// The JoinGroups the coordinator processed, in order, as trace line indexes with their
/// connection ("cN#k").
fn processed_joins(w: &World) -> Vec<(usize, String)> {
    w.trace()
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains("coordinator: processes") && l.contains("JoinGroup"))
        .map(|(i, l)| {
            let conn = l
                .split_whitespace()
                .find(|t| t.starts_with('c') && t.contains('#'))
                .unwrap_or_default()
                .to_owned();
            (i, conn)
        })
        .collect()
}

#[test]
fn java_reset_policy_fences_itself() {
    let (w, m) = scenario(true);
    println!("{}", w.trace_text());
    // Join #2 (new connection) was processed before Join #1 (old connection).
    let joins = processed_joins(&w);
    w.check(joins.len() >= 3, format!("joins processed: {joins:?}"));
    let (first_conn, second_conn) = (&joins[0].1, &joins[1].1);
    let after_stall: Vec<&String> = joins[1..].iter().map(|(_, c)| c).collect();
    w.check(
        after_stall.len() >= 2 && after_stall[0] != after_stall[1],
        format!("two joins from different connections after the stall: {joins:?}"),
    );
    let conn_num = |c: &str| -> u64 {
        c.trim_start_matches('c')
            .split('#')
            .next()
            .unwrap_or("0")
            .parse()
            .unwrap_or(0)
    };
    // Join #1 is the one from the oldest connection; a join from a newer connection was
    // processed before it.
    let oldest = after_stall.iter().map(|c| conn_num(c)).min().unwrap_or(0);
    let first_oldest = after_stall
        .iter()
        .position(|c| conn_num(c) == oldest)
        .unwrap_or(0);
    w.check(
        first_oldest > 0,
        format!(
            "Join #2 (newer connection) is processed before Join #1: {first_conn} {second_conn} {after_stall:?}"
        ),
    );
    // The fence: replaceStaticMember answers Join #2's parked join with FENCED_INSTANCE_ID, on an
    // open connection, and the member receives it.
    w.check(
        line_of(&w, &["replaceStaticMember: parked JoinGroup", "fenced"]).is_some(),
        "replaceStaticMember fenced a parked JoinGroup",
    );
    w.check(
        w.ever_seen(m, codes::FENCED_INSTANCE_ID),
        "the member received FENCED_INSTANCE_ID",
    );
    w.check(
        w.violations().iter().any(|v| v.contains("self-fencing")),
        format!("the world flags the self-fencing: {:?}", w.violations()),
    );
    // The Java client stops here (FencedInstanceIdException is fatal); with the Java policy the
    // member has neither the quarantine nor the forgiveness, so it stops the same way.
    let state = w.member(m).state();
    w.check(
        state == MemberState::Fatal,
        format!("ends Fatal like the Java client, got {state}"),
    );
    w.check(
        matches!(
            w.member(m).fatal_error(),
            Some(consumer_membership::GroupError::FencedInstanceId { .. })
        ),
        format!(
            "fatal FENCED_INSTANCE_ID, got {:?}",
            w.member(m).fatal_error()
        ),
    );
    println!(
        "java policy: member ends {state} (fatal error: {:?})",
        w.member(m).fatal_error()
    );
}

#[test]
fn keeping_the_member_id_never_fences() {
    let (w, m) = scenario(false);
    println!("{}", w.trace_text());
    let joins = processed_joins(&w);
    w.check(joins.len() >= 3, format!("joins processed: {joins:?}"));
    w.check(
        !w.ever_seen(m, codes::FENCED_INSTANCE_ID),
        "the member never sees FENCED_INSTANCE_ID",
    );
    w.check(
        w.violations().is_empty(),
        format!("no violations: {:?}", w.violations()),
    );
    w.check(
        w.member(m).state() == MemberState::Stable,
        format!("ends Stable, got {}", w.member(m).state()),
    );
    let owned = w.member(m).assignment();
    w.check(
        owned.len() == 4,
        format!("owns its 4 partitions, got {owned:?}"),
    );
    w.check(
        w.coordinator().members().len() == 1,
        format!(
            "one member at the coordinator: {:?}",
            w.coordinator().members()
        ),
    );
}

#[test]
fn the_scenario_replays_identically_from_its_seed() {
    let (a, _) = scenario(true);
    let (b, _) = scenario(true);
    a.check(a.trace() == b.trace(), "same seed, same trace");
}
