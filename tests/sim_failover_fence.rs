#![cfg(feature = "sim")]
//! The self-fence through a coordinator failover, scripted in the simulation:
//!
//! 1. two static members `a` and `b` are Stable; the group's last committed record maps
//!    instance `inst-a` to `a`'s member id X;
//! 2. `a`'s process crashes; `b` changes its subscription, so the group prepares a rebalance;
//! 3. `a` restarts and joins with `""` and `inst-a`: the coordinator replaces X with a new member
//!    id Y (`GroupMetadataManager.updateStaticMemberThenRebalanceOrCompleteJoin` outside Stable:
//!    no record), the join completes (`completeClassicGroupJoin`: no record for a non-empty
//!    group) and the group waits for the leader's SyncGroup;
//! 4. the coordinator moves to node 2 before that SyncGroup's record commits: node 1 unloads the
//!    group (`onUnloaded`: parked SyncGroups answered NOT_COORDINATOR), node 2 loads the last
//!    committed record, which maps `inst-a` to X;
//! 5. `a` (member id Y) meets node 2: `ClassicGroup.validateMember` answers FENCED_INSTANCE_ID.
//!
//! With the Java client's reset policy, or with this crate's rule before the coordinator-failover
//! issue (the fence terminal), `a` stops fenced although no other process holds `inst-a`, and the
//! world flags the self-fence. With the current rule (the first FENCED_INSTANCE_ID from a
//! coordinator other than the one that registered the member id rejoins with `""`) `a` takes
//! its instance id back and the group settles. A genuine duplicate (two live processes with one
//! instance id) still ends fenced.

use std::time::Duration;

use consumer_membership::GroupError;
use consumer_membership::config::GroupConfig;
use consumer_membership::machine::classic::ClassicMember;
use consumer_membership::machine::events::MemberState;
use consumer_membership::sim::codes;
use consumer_membership::sim::coordinator::{AppendFault, GroupState, Residence};
use consumer_membership::sim::world::{MemberSlot, SimConfig, World};

const SEED: u64 = 16;

fn config(instance: &str, seed: u64) -> GroupConfig {
    let mut c = GroupConfig::new("g").with_instance_id(instance);
    c.session_timeout = Duration::from_secs(10);
    c.heartbeat_interval = Duration::from_secs(1);
    c.max_poll_interval = Duration::from_secs(10);
    c.request_timeout = Duration::from_secs(5);
    c.seed = Some(seed);
    c
}

/// How the restarted member `a` treats a FENCED_INSTANCE_ID.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Rule {
    /// The crate's rule: the first fence from a coordinator that took over is forgiven.
    Current,
    /// The rule before the coordinator-failover issue: every such fence is terminal.
    PreFix,
    /// The Java client (member id wiped on a suppressed leave, every fence terminal).
    Java,
}

fn setup(rule: Rule) -> impl FnOnce(&mut ClassicMember) {
    move |m: &mut ClassicMember| match rule {
        Rule::Current => {}
        Rule::PreFix => m.set_failover_fence_rule(false),
        Rule::Java => m.set_java_reset_policy(true),
    }
}

fn stable_pair(rule: Rule) -> (World, MemberSlot, MemberSlot) {
    let mut w = World::new(
        SimConfig::new(SEED).with_topic("t", 4).with_topic("u", 2),
        std::time::Instant::now(),
    );
    let a = w
        .add_classic("a", config("inst-a", 1), setup(rule))
        .unwrap();
    let b = w
        .add_classic("b", config("inst-b", 2), setup(rule))
        .unwrap();
    w.subscribe(a, &["t"]);
    w.subscribe(b, &["t"]);
    let stable = w.run_until(|w| w.all_stable(), Duration::from_secs(30));
    w.check(stable, "a and b reach Stable");
    w.run_for(Duration::from_secs(2));
    (w, a, b)
}

/// Steps 2-4: a rebalance, the replacement of `inst-a` during it by the process `join` starts
/// (it returns its slot), the move before the SyncGroup commits. Returns the member id the last
/// committed record maps `inst-a` to (X) and the slot that replaced it.
fn replace_during_rebalance_then_move(
    w: &mut World,
    x: String,
    b: MemberSlot,
    join: impl FnOnce(&mut World) -> MemberSlot,
) -> (String, MemberSlot) {
    let generation = w.coordinator().generation();
    w.note("b changes its subscription: the group prepares a rebalance");
    w.subscribe(b, &["t", "u"]);
    let preparing = w.run_until(
        |w| w.coordinator().state() == Some(GroupState::PreparingRebalance),
        Duration::from_secs(5),
    );
    w.check(preparing, "the group prepares a rebalance");
    let holder = join(w);
    let completing = w.run_until(
        |w| {
            w.coordinator().state() == Some(GroupState::CompletingRebalance)
                && w.coordinator().generation() == generation + 1
                && !w.member(holder).member_id().is_empty()
        },
        Duration::from_secs(20),
    );
    w.check(
        completing,
        "the join phase completes with a's new member id",
    );
    let y = w.member(holder).member_id();
    w.check(
        w.coordinator().static_member("inst-a") == Some(y.as_str()) && x != y,
        format!("inst-a replaced: {x} -> {y}"),
    );
    // The leader (the replacement inherited the leadership) sends its assignment: the record
    // is appended; the coordinator moves before it commits.
    let appended = w.run_until(
        |w| w.coordinator().pending_writes() == 1,
        Duration::from_secs(1),
    );
    w.check(
        appended && w.coordinator().state() == Some(GroupState::CompletingRebalance),
        "the leader's assignment is appended, not committed",
    );
    w.move_coordinator(2, Duration::from_millis(300), Duration::from_millis(500), 0);
    (x, holder)
}

fn scenario(rule: Rule) -> (World, MemberSlot, String) {
    let (mut w, a, b) = stable_pair(rule);
    let x = w.member(a).member_id();
    w.note("a's process crashes");
    w.kill(a);
    let (x, _) = replace_during_rebalance_then_move(&mut w, x, b, |w| {
        w.note("a restarts and joins with \"\" and inst-a");
        w.restart_classic(a, config("inst-a", 3), setup(rule))
            .unwrap();
        w.subscribe(a, &["t"]);
        a
    });
    w.run_for(Duration::from_secs(60));
    (w, a, x)
}

fn ends_fenced(w: &World, h: MemberSlot) -> bool {
    w.alive(h)
        && w.member(h).state() == MemberState::Fatal
        && matches!(
            w.member(h).fatal_error(),
            Some(GroupError::FencedInstanceId { .. })
        )
}

/// The fence came from node 2, after it loaded X: the scenario reached the broker's rule.
fn check_fenced_by_the_new_coordinator(w: &World, a: MemberSlot, x: &str) {
    w.check(w.coordinator().node_id() == 2, "the coordinator is node 2");
    w.check(
        w.trace()
            .iter()
            .any(|l| l.contains("onLoaded") && l.contains("2 members")),
        "node 2 loaded the committed record (a as X, and b)",
    );
    w.check(
        w.trace()
            .iter()
            .any(|l| l.contains("unload") && l.contains("1 pending writes fail")),
        "the assignment's write was pending at the unload",
    );
    w.check(
        w.ever_seen(a, codes::FENCED_INSTANCE_ID),
        "a received FENCED_INSTANCE_ID",
    );
    w.check(
        w.trace()
            .iter()
            .any(|l| l.contains("validateMember") && l.contains("FENCED_INSTANCE_ID")),
        format!("validateMember fenced a, inst-a being mapped back to {x}"),
    );
}

/// Under `rule`, `a` stops fenced and the world flags the self-fence.
fn ends_self_fenced(rule: Rule) {
    let (w, a, x) = scenario(rule);
    check_fenced_by_the_new_coordinator(&w, a, &x);
    w.check(ends_fenced(&w, a), "a stops on FENCED_INSTANCE_ID");
    w.check(
        w.violations()
            .iter()
            .any(|v| v.contains("self-fencing through failover")),
        format!("the world flags the self-fence: {:?}", w.violations()),
    );
}

#[test]
fn the_pre_fix_rule_ends_fenced_after_the_failover() {
    ends_self_fenced(Rule::PreFix);
}

#[test]
fn the_java_reset_policy_ends_fenced_after_the_failover() {
    ends_self_fenced(Rule::Java);
}

#[test]
fn the_current_rule_survives_the_failover() {
    let (w, a, x) = scenario(Rule::Current);
    check_fenced_by_the_new_coordinator(&w, a, &x);
    w.check(
        w.violations().is_empty(),
        format!("no violations: {:?}", w.violations()),
    );
    w.check(w.all_stable(), "a and b settle at node 2");
    let id = w.member(a).member_id();
    w.check(
        w.coordinator().static_member("inst-a") == Some(id.as_str()) && id != x,
        format!("inst-a maps to a's live member id {id}"),
    );
    let owned: usize = w.ownership().values().map(Vec::len).sum();
    w.check(
        owned == 6,
        format!("every partition owned: {:?}", w.ownership()),
    );
}

/// Two live processes with one instance id: the second one's join replaces the first during the
/// rebalance (node 1 fences the first's parked join), the coordinator moves, and the fight goes
/// on at node 2. Whatever the forgiveness, one of them ends fenced, and the world accepts it.
#[test]
fn a_genuine_duplicate_still_ends_fenced() {
    let (mut w, a, b) = stable_pair(Rule::Current);
    let x = w.member(a).member_id();
    let (_, d) = replace_during_rebalance_then_move(&mut w, x, b, |w| {
        w.note("a second live process with inst-a joins");
        let d = w.add_classic("a-dup", config("inst-a", 4), |_| {}).unwrap();
        w.subscribe(d, &["t"]);
        d
    });
    w.run_for(Duration::from_secs(60));
    w.check(
        ends_fenced(&w, a) || ends_fenced(&w, d),
        format!(
            "one of the duplicates ends fenced: a {} {:?}, a-dup {} {:?}",
            w.member(a).state(),
            w.member(a).fatal_error(),
            w.member(d).state(),
            w.member(d).fatal_error()
        ),
    );
    // Two live processes with one instance id may both own the same partitions in one
    // generation until the broker fences the one replaced (a static replacement in Stable hands
    // the new member id the old one's assignment without a rebalance, and the old process learns
    // of it only at its next request): the world reports that overlap, and nothing else.
    let others: Vec<&String> = w
        .violations()
        .iter()
        .filter(|v| !(v.contains(" owned by a and a-dup ") || v.contains(" owned by a-dup and a ")))
        .collect();
    w.check(
        others.is_empty(),
        format!("a genuine duplicate is no self-fence: {:?}", w.violations()),
    );
}

#[test]
fn the_failover_scenario_replays_identically_from_its_seed() {
    let (a, _, _) = scenario(Rule::Current);
    let (b, _, _) = scenario(Rule::Current);
    a.check(a.trace() == b.trace(), "same seed, same trace");
}

/// A write timeout answers COORDINATOR_NOT_AVAILABLE while the change still commits
/// (CoordinatorRuntime's OperationTimeout): the Stable static replacement is reverted in
/// memory (its appendFuture fails) and answered with an empty member id, but its record
/// commits, so the coordinator that loads the log next maps the instance id to the new member
/// id. With the append failing at once instead, nothing reaches the log.
#[test]
fn a_timed_out_replacement_is_reverted_but_its_record_commits() {
    for (fault, committed) in [
        (AppendFault::Slow(Duration::from_secs(1)), true),
        (AppendFault::Fail(codes::COORDINATOR_NOT_AVAILABLE), false),
    ] {
        let (mut w, a, _) = stable_pair(Rule::Current);
        let x = w.member(a).member_id();
        w.coordinator_mut().fault_next_append(fault);
        w.restart_classic(a, config("inst-a", 3), |_| {}).unwrap();
        w.subscribe(a, &["t"]);
        let answered = w.run_until(
            |w| {
                w.seen(a)
                    .iter()
                    .any(|s| s.code == codes::COORDINATOR_NOT_AVAILABLE)
            },
            Duration::from_secs(10),
        );
        w.check(
            answered,
            format!("{fault:?}: the replacement's JoinGroup fails"),
        );
        // No retry: the only replacement is the one whose append met the fault.
        w.kill(a);
        w.check(
            w.coordinator().static_member("inst-a") == Some(x.as_str()),
            format!("{fault:?}: the replacement is reverted in memory"),
        );
        // The late record commits (or nothing does); then the group moves.
        w.run_until(
            |w| w.coordinator().pending_writes() == 0,
            Duration::from_secs(5),
        );
        let replacements = w
            .trace()
            .iter()
            .filter(|l| l.contains("classicGroupJoinNewStaticMember") && l.contains("replacing"))
            .count();
        w.check(replacements == 1, "one replacement");
        let in_log = w
            .trace()
            .iter()
            .find(|l| l.contains("classicGroupJoinNewStaticMember") && l.contains("replacing"))
            .and_then(|l| l.split("replacing with ").nth(1))
            .map(str::to_owned)
            .unwrap_or_default();
        w.move_coordinator(2, Duration::ZERO, Duration::from_millis(100), 0);
        w.run_until(
            |w| w.coordinator().residence() == Residence::Active,
            Duration::from_secs(1),
        );
        let loaded = w.coordinator().static_member("inst-a").map(str::to_owned);
        if committed {
            w.check(
                loaded.as_deref() == Some(in_log.as_str()) && in_log != x,
                format!("the timed-out record committed: {loaded:?} (replacement {in_log})"),
            );
        } else {
            w.check(
                loaded.as_deref() == Some(x.as_str()),
                format!("the failed append left nothing: {loaded:?}"),
            );
        }
    }
}
