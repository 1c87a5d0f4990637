//! The assignment refiner (`streams/AssignmentRefiner.java`): it turns the assignor's target
//! assignment into the intermediate assignment the members are reconciled toward, handing a
//! member that is to take over a stateful task a warm-up task first.
//!
//! Kafka 4.4's `AssignmentRefiner.refine` is scaffolding: it returns the target assignment as it
//! is ("No warm-up tasks are inserted yet"), and `group.streams.num.warmup.replicas` (2) and
//! `group.streams.acceptable.recovery.lag` (10000) are internal configs that nothing reads but
//! this call (KAFKA-20891: "Warmup tasks are not yet supported with Kafka 4.4.0 release").
//! [`WarmupRefiner::Kafka44`] is that refiner and the default.
//!
//! [`WarmupRefiner::CurrentOwnerWarmup`] is NOT a Kafka 4.4 rule: it models what
//! `AssignmentRefiner`'s own documentation says the refiner is for, with the movement rule of
//! Kafka Streams' client-side high-availability assignor
//! (`assignment/TaskMovement.assignActiveTaskMovements`,
//! `tryToMoveActiveToCaughtUpClientAndTryToWarmUp`): a stateful active task the target moves to
//! a process that has not caught up on it stays with its current owner, and the new owner's
//! member gets a warm-up task of it, within a group-wide budget of warm-up tasks; once the
//! warm-up's reported lag is within the acceptable recovery lag a later refinement step (an
//! epoch of its own, `GroupMetadataManager.streamsGroupHeartbeat`'s REFINED bump) moves the
//! task. It lets the simulation hand our member warm-up tasks the way a broker with warm-ups
//! would, through Kafka 4.4's refinement plumbing.

use std::collections::{BTreeMap, BTreeSet};

use super::group::{Member, MemberTaskOffsets, TaskId, Tasks};

/// Which refiner the simulated coordinator runs (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WarmupRefiner {
    /// Kafka 4.4: `AssignmentRefiner.refine` returns the target assignment.
    #[default]
    Kafka44,
    /// Not Kafka 4.4: a task moving to a process that is not caught up stays with its current
    /// owner while the new owner warms it up (see the module docs).
    CurrentOwnerWarmup,
}

/// What the refiner sees (`AssignmentRefiner.refine`'s parameters).
pub(crate) struct RefineInput<'a> {
    /// `members`: the group's members as recorded (before the request's records).
    pub(crate) members: &'a BTreeMap<String, Member>,
    /// `targetAssignment`.
    pub(crate) target: &'a BTreeMap<String, Tasks>,
    /// `taskOffsets`.
    pub(crate) offsets: &'a BTreeMap<String, MemberTaskOffsets>,
    /// The stateful subtopologies of `configuredTopology` (only those are warmed up).
    pub(crate) stateful: BTreeSet<&'a str>,
    /// `numWarmupReplicas`.
    pub(crate) num_warmup_replicas: u32,
    /// `acceptableRecoveryLag`.
    pub(crate) acceptable_recovery_lag: i64,
}

/// `AssignmentRefiner.refine`.
pub(crate) fn refine(kind: WarmupRefiner, input: &RefineInput<'_>) -> BTreeMap<String, Tasks> {
    match kind {
        // "No warm-up tasks are inserted yet, so the intermediate assignment is the target
        // assignment."
        WarmupRefiner::Kafka44 => input.target.clone(),
        WarmupRefiner::CurrentOwnerWarmup => current_owner_warmup(input),
    }
}

/// `AssignmentRefiner.preservesActiveTaskCount`.
pub(crate) fn preserves_active_task_count(
    target: &BTreeMap<String, Tasks>,
    refined: &BTreeMap<String, Tasks>,
) -> bool {
    let count = |a: &BTreeMap<String, Tasks>| a.values().map(|t| t.active.len()).sum::<usize>();
    count(target) == count(refined)
}

/// Whether a member of `process` reported a lag within the acceptable recovery lag for `t`
/// (`TaskMovement.taskIsCaughtUpOnClient`; the state directory is the process's, shared by
/// its members, as a Kafka Streams client's is shared by its stream threads).
fn caught_up(input: &RefineInput<'_>, process: &str, t: &TaskId) -> bool {
    input.members.values().any(|m| {
        m.process_id == process
            && input
                .offsets
                .get(&m.member_id)
                .and_then(|o| o.lag(t))
                .is_some_and(|lag| lag <= input.acceptable_recovery_lag)
    })
}

/// The modelled warm-up refiner (see the module docs). Deterministic: moves are taken with the
/// warm-ups already held first (a started warm-up keeps its place in the budget), then in task
/// order.
fn current_owner_warmup(input: &RefineInput<'_>) -> BTreeMap<String, Tasks> {
    let mut out = input.target.clone();
    if input.num_warmup_replicas == 0 {
        return out;
    }
    // The current active owner of each task (tasks being revoked are no one's to keep).
    let mut owner: BTreeMap<&TaskId, &Member> = BTreeMap::new();
    for m in input.members.values() {
        for t in &m.assigned.active {
            owner.entry(t).or_insert(m);
        }
    }
    let process_of = |id: &str| input.members.get(id).map(|m| m.process_id.as_str());
    // Whether a member of `process` other than `except` has `t` in the target, in any role.
    let target_on = |process: &str, t: &TaskId, except: &str| {
        input.target.iter().any(|(id, tasks)| {
            id != except
                && process_of(id) == Some(process)
                && (tasks.active.contains(t)
                    || tasks.standby.contains(t)
                    || tasks.warmup.contains(t))
        })
    };
    // (already warming up, task, destination member, source member)
    let mut moves: Vec<(bool, &TaskId, &str, &str)> = Vec::new();
    for (dest, tasks) in input.target {
        let Some(d) = input.members.get(dest) else {
            // A member the group does not record yet (joining, or replacing a static member):
            // nothing is known of its process's state; the task moves as the target says.
            continue;
        };
        for t in &tasks.active {
            if !input.stateful.contains(t.0.as_str()) {
                // "Only stateful tasks are warmed up; a stateless task has no state to restore."
                continue;
            }
            let Some(s) = owner.get(t) else {
                // No current owner: nothing to keep it with.
                continue;
            };
            if s.member_id == *dest
                || s.process_id == d.process_id
                // A static member that left (-2) runs nothing: the task moves now.
                || s.epoch < 0
                || !input.target.contains_key(&s.member_id)
                // Keeping it with the source must not put the task twice on the source's process.
                || target_on(&s.process_id, t, &s.member_id)
                // `taskIsCaughtUpOnClient`: the destination's process can take it over now.
                || caught_up(input, &d.process_id, t)
            {
                continue;
            }
            moves.push((d.assigned.warmup.contains(t), t, dest, &s.member_id));
        }
    }
    moves.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    let mut budget = input.num_warmup_replicas;
    for (_, t, dest, src) in moves {
        // `tryToMoveActiveToCaughtUpClientAndTryToWarmUp`: the active stays with the caught-up
        // source (a standby or warm-up the target gave it makes way for the active)...
        if let Some(s) = out.get_mut(src) {
            s.active.insert(t.clone());
            s.standby.remove(t);
            s.warmup.remove(t);
        }
        let dest_process = process_of(dest).unwrap_or_default().to_owned();
        let held_on_dest_process = out.iter().any(|(id, tasks)| {
            process_of(id) == Some(dest_process.as_str())
                && (tasks.active.contains(t)
                    || tasks.standby.contains(t)
                    || tasks.warmup.contains(t))
                && id != dest
        });
        if let Some(d) = out.get_mut(dest) {
            d.active.remove(t);
            // ... and the destination warms it up while the budget lasts
            // (`remainingWarmupReplicas`), never on a process that has the task already.
            if budget > 0 && !held_on_dest_process && !d.standby.contains(t) {
                d.warmup.insert(t.clone());
                budget -= 1;
            }
        }
    }
    out
}
