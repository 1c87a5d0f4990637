//! The reconciliation of one member towards its target assignment
//! (`streams/CurrentAssignmentBuilder.java`): revoke before assigning, and grant a task only
//! once its previous owner has released it, as the ownership index tells.

use std::collections::BTreeSet;

use super::group::{Member, MemberState, Ownership, TaskId, Tasks};

/// `CurrentAssignmentBuilder`.
pub(crate) struct Reconciler<'a> {
    pub(crate) member: &'a Member,
    pub(crate) target_epoch: i32,
    pub(crate) target: &'a Tasks,
    pub(crate) index: &'a Ownership,
    /// The tasks the member reported owning, if it reported them.
    pub(crate) owned: Option<&'a Tasks>,
}

/// What one role of the assignment difference yields.
#[derive(Default)]
struct Diff {
    assigned: BTreeSet<TaskId>,
    revoke: BTreeSet<TaskId>,
    pending: BTreeSet<TaskId>,
    unreleased: bool,
}

/// `computeAssignmentDifference`: kept = current ∩ target, revoke = current - target,
/// pending = target - current - unreleased.
fn diff(
    current: &BTreeSet<TaskId>,
    target: &BTreeSet<TaskId>,
    unreleased: impl Fn(&TaskId) -> bool,
) -> Diff {
    let mut d = Diff {
        assigned: current.intersection(target).cloned().collect(),
        revoke: current.difference(target).cloned().collect(),
        ..Diff::default()
    };
    for t in target.difference(current) {
        if unreleased(t) {
            d.unreleased = true;
        } else {
            d.pending.insert(t.clone());
        }
    }
    d
}

impl Reconciler<'_> {
    /// `CurrentAssignmentBuilder.build`.
    pub(crate) fn build(&self) -> Member {
        let m = self.member;
        match m.state {
            MemberState::Stable => {
                if m.epoch != self.target_epoch {
                    self.next(m.epoch, &m.assigned)
                } else {
                    m.clone()
                }
            }
            MemberState::UnrevokedTasks => {
                if self.not_released(&m.pending_revocation) {
                    m.clone()
                } else {
                    self.next(m.epoch + 1, &m.assigned)
                }
            }
            MemberState::UnreleasedTasks => self.next(m.epoch, &m.assigned),
        }
    }

    /// `hasNotReleased`: without a report of owned tasks, nothing counts as released.
    fn not_released(&self, tasks: &Tasks) -> bool {
        self.owned.is_none_or(|o| o.contains_any(tasks))
    }

    /// `isUnreleasedActiveTask`: an active task waits for its owner anywhere in the group, and
    /// for a standby / warm-up holder on this member's process other than this member (whose
    /// own standby / warm-up is promoted in place).
    fn unreleased_active(&self, current: &Tasks, t: &TaskId) -> bool {
        let p = &self.member.process_id;
        self.index.active_owned(t)
            || (self.index.standby_on(t, p) && !current.standby.contains(t))
            || (self.index.warmup_on(t, p) && !current.warmup.contains(t))
    }

    /// `isUnreleasedStandbyTask`: waits for an active holder on this process other than this
    /// member, any standby holder on this process, and a warm-up holder on this process other
    /// than this member.
    fn unreleased_standby(&self, current: &Tasks, t: &TaskId) -> bool {
        let p = &self.member.process_id;
        (self.index.active_on(t, p) && !current.active.contains(t))
            || self.index.standby_on(t, p)
            || (self.index.warmup_on(t, p) && !current.warmup.contains(t))
    }

    /// `isUnreleasedWarmupTask`.
    fn unreleased_warmup(&self, current: &Tasks, t: &TaskId) -> bool {
        let p = &self.member.process_id;
        self.index.active_on(t, p)
            || (self.index.standby_on(t, p) && !current.standby.contains(t))
            || self.index.warmup_on(t, p)
    }

    /// `computeNextAssignment`.
    fn next(&self, member_epoch: i32, current: &Tasks) -> Member {
        let tgt = self.target;
        let mut a = diff(&current.active, &tgt.active, |t| {
            self.unreleased_active(current, t)
        });
        let mut s = diff(&current.standby, &tgt.standby, |t| {
            self.unreleased_standby(current, t)
        });
        let mut w = diff(&current.warmup, &tgt.warmup, |t| {
            self.unreleased_warmup(current, t)
        });
        let unreleased = a.unreleased || s.unreleased || w.unreleased;
        // `demoteActiveTasksToStandby`: an active task that becomes a standby of the same member
        // is granted as a standby at once (the active stays pending revocation).
        for t in &current.active {
            if s.pending.remove(t) {
                s.assigned.insert(t.clone());
            }
        }
        // `convertReplicaRole`, standby -> warm-up and warm-up -> standby: in place, no ack.
        for t in &current.standby {
            if w.pending.remove(t) {
                w.assigned.insert(t.clone());
                s.revoke.remove(t);
            }
        }
        for t in &current.warmup {
            if s.pending.remove(t) {
                s.assigned.insert(t.clone());
                w.revoke.remove(t);
            }
        }
        // `applyPromotionsToActive`: a standby / warm-up this member holds and is to run as
        // active leaves the revocation set; it stays assigned until the active is granted.
        for t in &current.standby {
            if tgt.active.contains(t) {
                s.revoke.remove(t);
            }
        }
        for t in &current.warmup {
            if tgt.active.contains(t) {
                w.revoke.remove(t);
            }
        }
        let revoke = Tasks {
            active: a.revoke.clone(),
            standby: s.revoke.clone(),
            warmup: w.revoke.clone(),
        };
        let must_revoke = !revoke.is_empty() && self.not_released(&revoke);
        // `keepPromotedTasksUntilGranted`.
        for (held, assigned) in [
            (&current.standby, &mut s.assigned),
            (&current.warmup, &mut w.assigned),
        ] {
            for t in held {
                let promoted_now = !must_revoke && a.pending.contains(t);
                if tgt.active.contains(t) && !promoted_now {
                    assigned.insert(t.clone());
                }
            }
        }
        let assigned = Tasks {
            active: std::mem::take(&mut a.assigned),
            standby: std::mem::take(&mut s.assigned),
            warmup: std::mem::take(&mut w.assigned),
        };
        let pending = Tasks {
            active: a.pending,
            standby: s.pending,
            warmup: w.pending,
        };
        // `buildNewMember`.
        let mut m = self.member.clone();
        if must_revoke {
            m = m.with_epoch(member_epoch, MemberState::UnrevokedTasks);
            m.assigned = assigned;
            m.pending_revocation = revoke;
        } else if !pending.is_empty() {
            let state = if unreleased {
                MemberState::UnreleasedTasks
            } else {
                MemberState::Stable
            };
            m = m.with_epoch(self.target_epoch, state);
            m.assigned = assigned.merge(&pending);
            m.pending_revocation = Tasks::default();
        } else {
            let state = if unreleased {
                MemberState::UnreleasedTasks
            } else {
                MemberState::Stable
            };
            m = m.with_epoch(self.target_epoch, state);
            m.assigned = assigned;
            m.pending_revocation = Tasks::default();
        }
        m
    }
}
