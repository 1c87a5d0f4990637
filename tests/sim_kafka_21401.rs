#![cfg(feature = "sim")]
//! KAFKA-21401 (../shared/seeds/KAFKA-21401-streams-task-ownership.txt), steps 1-8, with this
//! crate's streams members (`StreamsMember` + the per-process task guard) in the simulated world
//! against the simulated coordinator with the broker's per-process ownership index: three
//! stateful tasks 0_0, 0_1, 0_2, two standby replicas; static members A1 and A2 on process Pold,
//! B on Q (a helper member C on Q joins first and leaves, as `streams::scenario` does, so the
//! assignor's choices fall as in the seed); A1 and A2 leave with -2 and restart on Pnew with new
//! member ids and the same instance ids; B leaves with -1; A3 joins on Pnew. The member ids are
//! `streams::scenario::ids`'s (the assignor breaks ties in member-id order).
//!
//! Heartbeats are 30 s apart, so between the scripted steps only the members' own urgent
//! heartbeats (joins, acknowledgements, given-up tasks) and the scripted ones happen; each step
//! runs until the group is quiet.

use std::collections::BTreeSet;
use std::time::Duration;

use consumer_membership::MemberId;
use consumer_membership::config::GroupConfig;
use consumer_membership::machine::events::{CloseOptions, MemberState};
use consumer_membership::machine::streams::{
    InternalTopic, StreamsConfig, StreamsProcess, StreamsTopology, Subtopology, TaskId,
};
use consumer_membership::request::Api;
use consumer_membership::sim::coordinator::streams::{MemberView, OwnershipIndex, Task};
use consumer_membership::sim::world::{MemberSlot, SimConfig, World};

/// A 22-character member id starting with `prefix`, so ids sort as `streams::scenario::ids`.
fn id(prefix: &str) -> MemberId {
    let mut s = prefix.to_owned();
    while s.len() < 22 {
        s.push('A');
    }
    MemberId::parse(&s).expect("a valid member id")
}

fn topology() -> StreamsConfig {
    StreamsConfig::new(StreamsTopology::new(
        0,
        vec![
            Subtopology::new("0", ["input"]).with_changelog(InternalTopic::new("store-changelog")),
        ],
    ))
}

fn config(member: &str, instance: Option<&str>) -> GroupConfig {
    let mut c = GroupConfig::new("app");
    c.member_id = Some(id(member));
    c.instance_id = instance.map(str::to_owned);
    // The group's session timeout, as the coordinator below applies it (the membership lease
    // runs on it).
    c.group_session_timeout = Duration::from_secs(300);
    c
}

fn world(index: OwnershipIndex) -> World {
    let mut sim = SimConfig::new(21401)
        .with_topic("input", 3)
        .with_topic("store-changelog", 3);
    sim.group_id = "app".into();
    sim.coordinator.streams.num_standby_replicas = 2;
    sim.coordinator.streams.ownership_index = index;
    sim.coordinator.streams.heartbeat_interval = Duration::from_secs(30);
    sim.coordinator.streams.session_timeout = Duration::from_secs(300);
    World::new(sim, std::time::Instant::now())
}

fn t(p: i32) -> Task {
    ("0".to_owned(), p)
}

fn task(p: i32) -> TaskId {
    TaskId::new("0", p)
}

/// The coordinator's member with an id starting with `prefix`.
fn view(w: &World, prefix: &str) -> MemberView {
    w.coordinator()
        .streams()
        .members("app")
        .into_iter()
        .find(|m| m.member_id.starts_with(prefix))
        .unwrap_or_else(|| panic!("no member {prefix}"))
}

fn set(ps: &[i32]) -> BTreeSet<Task> {
    ps.iter().map(|p| t(*p)).collect()
}

/// Every live streams member is Stable and holds exactly what the coordinator assigned it, and
/// the coordinator's members are reconciled (nothing pending).
fn quiet(w: &World) -> bool {
    let members = w.coordinator().streams().members("app");
    let Some((_, group_epoch, assignment_epoch)) = w.coordinator().streams().epochs("app") else {
        return false;
    };
    let coordinator_quiet = group_epoch == assignment_epoch
        && members.iter().all(|m| {
            m.epoch < 0
                || (m.epoch == group_epoch
                    && m.state == "STABLE"
                    && m.pending_active.is_empty()
                    && m.pending_standby.is_empty()
                    && m.target_active == m.active
                    && m.target_standby == m.standby)
        });
    coordinator_quiet
        && w.handles().into_iter().filter(|h| w.alive(*h)).all(|h| {
            let m = w.member(h);
            let Some(s) = m.streams() else { return true };
            matches!(m.state(), MemberState::Stable | MemberState::Closed)
                && s.withheld().is_empty()
                && members.iter().any(|v| {
                    v.member_id == s.member_id()
                        && v.active
                            .iter()
                            .map(|(_, p)| task(*p))
                            .collect::<BTreeSet<_>>()
                            == s.tasks().active
                        && v.standby
                            .iter()
                            .map(|(_, p)| task(*p))
                            .collect::<BTreeSet<_>>()
                            == s.tasks().standby
                })
                || m.state() == MemberState::Closed
        })
}

fn settle(w: &mut World, what: &str) {
    let ok = w.run_until(quiet, Duration::from_secs(120));
    w.check(ok, format!("not quiet after {what}"));
    w.check(w.violations().is_empty(), format!("{:?}", w.violations()));
}

/// Slots: C, B, A1, A2, A3.
struct Slots {
    b: MemberSlot,
    a1: MemberSlot,
    a2: MemberSlot,
    a3: MemberSlot,
}

/// What a run saw: the instants of double ownership within one process, and per step the
/// guard's interventions so far.
struct Run {
    w: World,
    slots: Slots,
    interventions_before_step7: u64,
}

/// Steps 1-8; `process` builds a process (guarded or not).
fn run(index: OwnershipIndex, process: fn(&str) -> StreamsProcess) -> Run {
    let mut w = world(index);
    let q = process("Q");
    let pold = process("Pold");
    let pnew = process("Pnew");
    // 1. The initial state: C and B on Q, A2 and A1 on Pold, joined one after the other; C leaves.
    let c = w
        .add_streams("C", config("m0c", None), topology(), q.clone())
        .unwrap();
    w.subscribe(c, &[]);
    settle(&mut w, "C joined");
    let b = w
        .add_streams("B", config("m3b", None), topology(), q.clone())
        .unwrap();
    w.subscribe(b, &[]);
    settle(&mut w, "B joined");
    let a2 = w
        .add_streams("A2", config("m2a2", Some("A2")), topology(), pold.clone())
        .unwrap();
    w.subscribe(a2, &[]);
    settle(&mut w, "A2 joined");
    let a1 = w
        .add_streams("A1", config("m1a1", Some("A1")), topology(), pold.clone())
        .unwrap();
    w.subscribe(a1, &[]);
    settle(&mut w, "A1 joined");
    w.close(c, CloseOptions::LeaveGroup);
    settle(&mut w, "C left");
    w.note("step 1 reached");
    let (va1, va2, vb) = (view(&w, "m1a1"), view(&w, "m2a2"), view(&w, "m3b"));
    w.check(
        (va1.active.clone(), va1.standby.clone()) == (set(&[0]), set(&[]))
            && (va2.active.clone(), va2.standby.clone()) == (set(&[1]), set(&[2]))
            && (vb.active.clone(), vb.standby.clone()) == (set(&[2]), set(&[0, 1])),
        format!("step 1 differs from the seed: {va1:?} {va2:?} {vb:?}"),
    );
    // 2. A1 and A2 leave temporarily (-2, the default close of a static member).
    w.close(a1, CloseOptions::Default);
    w.close(a2, CloseOptions::Default);
    w.run_until(
        |w| {
            w.coordinator()
                .streams()
                .members("app")
                .iter()
                .filter(|m| m.epoch == -2)
                .count()
                == 2
        },
        Duration::from_secs(10),
    );
    w.note("step 2 reached");
    // 3. A1 restarts on Pnew (new member id, same instance id).
    w.restart_streams(a1, config("m5a1", Some("A1")), topology(), pnew.clone())
        .unwrap();
    w.subscribe(a1, &[]);
    w.run_until(
        |w| w.member(a1).state() == MemberState::Stable,
        Duration::from_secs(10),
    );
    w.note("step 3 reached");
    let v = view(&w, "m5a1");
    w.check(
        (v.active.clone(), v.standby.clone()) == (set(&[0]), set(&[1, 2])),
        format!("step 3 differs from the seed: {v:?}"),
    );
    // 4.-6. A2 restarts on Pnew; A1 is told to revoke its standbys and acknowledges.
    w.restart_streams(a2, config("m4a2", Some("A2")), topology(), pnew.clone())
        .unwrap();
    w.subscribe(a2, &[]);
    settle(&mut w, "A2 rejoined on Pnew");
    w.note("step 6 reached");
    let (va1, va2, vb) = (view(&w, "m5a1"), view(&w, "m4a2"), view(&w, "m3b"));
    w.check(
        (va1.active.clone(), va1.standby.clone()) == (set(&[0]), set(&[]))
            && (va2.active.clone(), va2.standby.clone()) == (set(&[1]), set(&[2]))
            && (vb.active.clone(), vb.standby.clone()) == (set(&[2]), set(&[0, 1])),
        format!("step 6 differs from the seed: {va1:?} {va2:?} {vb:?}"),
    );
    let interventions_before_step7 = {
        let i = pnew.interventions();
        i.withheld + i.given_up
    };
    // 7. B leaves for good; 8. A3 joins on Pnew before anyone else heartbeats: right when both
    // A1 and A2 heard a heartbeat answer within the last second (their next ones are ~30 s
    // away).
    let recent = |w: &World, h: MemberSlot| {
        w.seen(h).iter().any(|s| {
            s.api == Api::STREAMS_GROUP_HEARTBEAT && s.at + Duration::from_secs(1) > w.elapsed()
        })
    };
    let ok = w.run_until(|w| recent(w, a1) && recent(w, a2), Duration::from_secs(40));
    w.check(ok, "A1 and A2 never heartbeated within one second");
    w.close(b, CloseOptions::LeaveGroup);
    w.run_until(
        |w| !w.alive(b) || w.member(b).state() == MemberState::Closed,
        Duration::from_secs(5),
    );
    w.note("step 7 reached");
    let a3 = w
        .add_streams("A3", config("m6a3", None), topology(), pnew.clone())
        .unwrap();
    w.subscribe(a3, &[]);
    w.run_until(
        |w| w.member(a3).state() != MemberState::Joining,
        Duration::from_secs(5),
    );
    w.note("step 8 reached");
    let (va1, va2, va3) = (view(&w, "m5a1"), view(&w, "m4a2"), view(&w, "m6a3"));
    w.check(
        (va1.active.clone(), va1.standby.clone()) == (set(&[0]), set(&[]))
            && (va2.active.clone(), va2.standby.clone()) == (set(&[1]), set(&[2]))
            && va3.target_active == set(&[2]),
        format!("step 8 differs from the seed: {va1:?} {va2:?} {va3:?}"),
    );
    settle(&mut w, "A3 joined");
    Run {
        w,
        slots: Slots { b, a1, a2, a3 },
        interventions_before_step7,
    }
}

fn holds(w: &World, h: MemberSlot) -> consumer_membership::machine::streams::StreamsTasks {
    w.member(h)
        .streams()
        .expect("a streams member")
        .tasks()
        .clone()
}

/// (i) Guard off: the coordinator's double ownership reaches the application: A2 holds standby
/// 0_2 while A3 holds active 0_2, both on Pnew, at one instant (the seed's step 8).
#[test]
fn without_the_guard_two_members_of_pnew_hold_task_0_2() {
    let r = run(OwnershipIndex::PerProcess, |p| {
        StreamsProcess::unguarded(p, None)
    });
    let w = &r.w;
    let step8 = w
        .process_doubles()
        .iter()
        .find(|d| d.contains("task 0_2 held by A2#2 (standby) and A3 (active) of process Pnew"));
    w.check(
        step8.is_some(),
        format!(
            "no A2 standby / A3 active double ownership of 0_2: {:?}",
            w.process_doubles()
        ),
    );
    // The coordinator granted it while A2 held the standby: its per-process index had lost Pnew.
    w.check(
        w.violations().is_empty(),
        format!("violations: {:?}", w.violations()),
    );
    assert_eq!(
        w.guard_interventions().withheld + w.guard_interventions().given_up,
        0
    );
    println!("guard off, doubles: {:#?}", w.process_doubles());
}

/// (ii) Guard on: never two members of one process with one task, at any step; 0_2 becomes
/// active on A3 once A2 gave its standby up (the guard intervened).
#[test]
fn with_the_guard_task_0_2_moves_to_a3_only_after_a2_gave_it_up() {
    let r = run(OwnershipIndex::PerProcess, |p| StreamsProcess::new(p, None));
    let w = &r.w;
    w.check(w.violations().is_empty(), format!("{:?}", w.violations()));
    w.check(
        w.process_doubles().is_empty(),
        "a guarded process held a task twice",
    );
    assert!(
        holds(w, r.slots.a3).active.contains(&task(2)),
        "A3 ends holding active 0_2"
    );
    assert!(!holds(w, r.slots.a2).standby.contains(&task(2)));
    let i = w.guard_interventions();
    let at_step8 = i.withheld + i.given_up - r.interventions_before_step7;
    assert!(at_step8 >= 2, "A3 withheld 0_2 and A2 gave it up: {i:?}");
    let trace = w.trace_text();
    assert!(
        trace.contains("A2#2: GUARD GaveUp 0_2 (standby;"),
        "A2 gave standby 0_2 up to A3's active"
    );
    let _ = r.slots.b;
    let _ = r.slots.a1;
    println!("guard on: interventions {i:?}, {at_step8} at steps 7-8");
}

/// (iii) The per-member index with the guard on: the coordinator itself withholds 0_2 from A3
/// until A2 released its standby, so steps 7-8 need no intervention.
#[test]
fn with_the_per_member_index_steps_7_and_8_need_no_intervention() {
    let r = run(OwnershipIndex::PerMember, |p| StreamsProcess::new(p, None));
    let w = &r.w;
    w.check(w.violations().is_empty(), format!("{:?}", w.violations()));
    assert!(
        holds(w, r.slots.a3).active.contains(&task(2)),
        "A3 ends holding active 0_2"
    );
    let i = w.guard_interventions();
    assert_eq!(
        i.withheld + i.given_up,
        r.interventions_before_step7,
        "no intervention at steps 7-8: {i:?}"
    );
    println!(
        "per-member index: interventions {i:?} ({} before step 7)",
        r.interventions_before_step7
    );
}
