//! The `sticky` task assignor (`streams/assignor/StickyTaskAssignor.java`,
//! `streams/assignor/ProcessState.java`), deterministic: where Java's hash maps and priority
//! queues leave ties to iteration order, members are taken in member-id order and processes of
//! equal load in process-id order.
//!
//! Reported task offsets rank the standby candidates (`collectStandbyCandidates`,
//! `rankStandbyCandidates`, KAFKA-20116). The assignor assigns no warm-up tasks: the refiner
//! (`refiner`) is what would add them.

use std::collections::{BTreeMap, BTreeSet};

use super::group::{TaskId, Tasks};

/// A member as the assignor sees it (`MemberMetadataAndStateImpl`): its process and the tasks it
/// currently holds (`TargetAssignmentBuilder.createMemberMetadataAndState`).
pub(crate) struct AssignorMember<'a> {
    pub(crate) member_id: &'a str,
    pub(crate) process_id: &'a str,
    pub(crate) current: &'a Tasks,
    /// The task offsets the member last reported (`MemberAssignmentState.taskOffsets`).
    pub(crate) task_offsets: Option<&'a BTreeMap<TaskId, i64>>,
}

/// A subtopology as the assignor sees it (`TopologyDescriber`).
pub(crate) struct AssignorSubtopology<'a> {
    pub(crate) id: &'a str,
    pub(crate) num_tasks: i32,
    pub(crate) stateful: bool,
}

/// `ProcessState`.
#[derive(Default)]
struct Process {
    capacity: usize,
    task_count: usize,
    member_counts: BTreeMap<String, usize>,
    tasks: BTreeSet<TaskId>,
}

impl Process {
    /// `ProcessState.load`.
    fn load(&self) -> f64 {
        if self.capacity == 0 {
            -1.0
        } else {
            self.task_count as f64 / self.capacity as f64
        }
    }
}

/// `StickyTaskAssignor.LocalState`.
struct State {
    processes: BTreeMap<String, Process>,
    out: BTreeMap<String, Tasks>,
    active_prev: BTreeMap<TaskId, (String, String)>,
    standby_prev: BTreeMap<TaskId, Vec<(String, String)>>,
    num_standby: u32,
    total_active: usize,
    total_tasks: usize,
    members_with_active_capacity: usize,
    members_with_capacity: usize,
    active_per_member: usize,
    tasks_per_member: usize,
}

fn per_member(tasks: usize, members: usize) -> usize {
    if members == 0 {
        0
    } else {
        tasks.div_ceil(members)
    }
}

impl State {
    /// `ProcessState.addTask`: the member's new task count.
    fn add(&mut self, process: &str, member: &str, task: &TaskId, active: bool) -> usize {
        let Some(p) = self.processes.get_mut(process) else {
            return 0;
        };
        p.task_count += 1;
        p.tasks.insert(task.clone());
        let c = p.member_counts.entry(member.to_owned()).or_default();
        *c += 1;
        let count = *c;
        let tasks = self.out.entry(member.to_owned()).or_default();
        if active {
            tasks.active.insert(task.clone());
        } else {
            tasks.standby.insert(task.clone());
        }
        count
    }

    /// `ProcessState.addTaskToLeastLoadedMember` (ties: member-id order).
    fn add_least_loaded(&mut self, process: &str, task: &TaskId, active: bool) -> Option<usize> {
        let member = self
            .processes
            .get(process)?
            .member_counts
            .iter()
            .min_by_key(|(id, c)| (**c, *id))?
            .0
            .clone();
        Some(self.add(process, &member, task, active))
    }

    fn member_count(&self, process: &str, member: &str) -> usize {
        self.processes
            .get(process)
            .and_then(|p| p.member_counts.get(member))
            .copied()
            .unwrap_or(0)
    }

    fn has_task(&self, process: &str, task: &TaskId) -> bool {
        self.processes
            .get(process)
            .is_some_and(|p| p.tasks.contains(task))
    }

    /// `maybeUpdateActiveTasksPerMember`.
    fn after_active(&mut self, count: usize) {
        if count == self.active_per_member {
            self.members_with_active_capacity = self.members_with_active_capacity.saturating_sub(1);
            self.total_active = self.total_active.saturating_sub(count);
            self.active_per_member =
                per_member(self.total_active, self.members_with_active_capacity);
        }
    }

    /// `maybeUpdateTotalTasksPerMember`.
    fn after_any(&mut self, count: usize) {
        if count == self.tasks_per_member {
            self.members_with_capacity = self.members_with_capacity.saturating_sub(1);
            self.total_tasks = self.total_tasks.saturating_sub(count);
            self.tasks_per_member = per_member(self.total_tasks, self.members_with_capacity);
        }
    }

    /// Processes by load, least loaded first (ties: process-id order): the order the broker's
    /// `PriorityQueue<ProcessState>` polls them.
    fn by_load(&self) -> Vec<String> {
        let mut ids: Vec<(f64, &String)> = self
            .processes
            .iter()
            .map(|(id, p)| (p.load(), id))
            .collect();
        ids.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)));
        ids.into_iter().map(|(_, id)| id.clone()).collect()
    }

    /// `findPrevMemberWithLeastLoad`: the first candidate, replaced only by one whose process
    /// AND member are both strictly less loaded; with `standby_of`, processes that already have
    /// the task are skipped.
    fn prev_with_least_load(
        &self,
        candidates: Option<&Vec<(String, String)>>,
        standby_of: Option<&TaskId>,
    ) -> Option<(String, String)> {
        let mut best: Option<(&(String, String), f64, usize)> = None;
        for c in candidates? {
            let (member, process) = c;
            if standby_of.is_some_and(|t| self.has_task(process, t)) {
                continue;
            }
            let pl = self.processes.get(process).map_or(f64::MAX, Process::load);
            let ml = self.member_count(process, member);
            match best {
                Some((_, bpl, bml)) if !(pl < bpl && ml < bml) => {}
                _ => best = Some((c, pl, ml)),
            }
        }
        best.map(|(c, _, _)| c.clone())
    }
}

/// `StickyTaskAssignor.assign`: the target assignment by member id (every member present).
pub(crate) fn assign(
    members: &[AssignorMember<'_>],
    subtopologies: &[AssignorSubtopology<'_>],
    num_standby: u32,
) -> BTreeMap<String, Tasks> {
    let mut st = State {
        processes: BTreeMap::new(),
        out: BTreeMap::new(),
        active_prev: BTreeMap::new(),
        standby_prev: BTreeMap::new(),
        num_standby,
        total_active: 0,
        total_tasks: 0,
        members_with_active_capacity: members.len(),
        members_with_capacity: members.len(),
        active_per_member: 0,
        tasks_per_member: 0,
    };
    // `initialize`.
    for s in subtopologies {
        let n = usize::try_from(s.num_tasks).unwrap_or(0);
        st.total_tasks += n;
        st.total_active += n;
        if s.stateful {
            st.total_tasks += n * num_standby as usize;
        }
    }
    st.active_per_member = per_member(st.total_active, st.members_with_active_capacity);
    st.tasks_per_member = per_member(st.total_tasks, st.members_with_capacity);
    for m in members {
        st.out.insert(m.member_id.to_owned(), Tasks::default());
        let p = st.processes.entry(m.process_id.to_owned()).or_default();
        p.member_counts.insert(m.member_id.to_owned(), 0);
        p.capacity += 1;
        let who = (m.member_id.to_owned(), m.process_id.to_owned());
        for t in &m.current.active {
            st.active_prev.insert(t.clone(), who.clone());
        }
    }
    st.standby_prev = rank_standby_candidates(members);
    if members.is_empty() {
        return st.out;
    }
    let mut active: Vec<TaskId> = Vec::new();
    let mut stateful: Vec<TaskId> = Vec::new();
    for s in subtopologies {
        for p in 0..s.num_tasks.max(0) {
            active.push((s.id.to_owned(), p));
            if s.stateful {
                stateful.push((s.id.to_owned(), p));
            }
        }
    }
    assign_active(&mut st, active);
    if st.num_standby > 0 {
        assign_standby(&mut st, stateful);
    }
    st.out
}

/// `StickyTaskAssignor.collectStandbyCandidates` and `rankStandbyCandidates`: per task, the
/// members that held it as a standby (with their reported offset, 0 if none:
/// `reportedOffsetSum`), then the members that reported an offset for it without holding it as
/// a standby (state on local disk: weaker candidates); ranked previous standbys first, then by
/// offset, highest first (`STANDBY_CANDIDATE_ORDER`; the sort is stable, members in member-id
/// order).
fn rank_standby_candidates(
    members: &[AssignorMember<'_>],
) -> BTreeMap<TaskId, Vec<(String, String)>> {
    // Per task: (a previous standby, offset, (member, process)).
    type Candidate = (bool, i64, (String, String));
    let mut candidates: BTreeMap<TaskId, Vec<Candidate>> = BTreeMap::new();
    for m in members {
        let who = (m.member_id.to_owned(), m.process_id.to_owned());
        let offset = |t: &TaskId| m.task_offsets.and_then(|o| o.get(t)).copied().unwrap_or(0);
        for t in &m.current.standby {
            candidates
                .entry(t.clone())
                .or_default()
                .push((true, offset(t), who.clone()));
        }
        for (t, o) in m.task_offsets.into_iter().flatten() {
            if m.current.standby.contains(t) {
                continue;
            }
            candidates
                .entry(t.clone())
                .or_default()
                .push((false, *o, who.clone()));
        }
    }
    candidates
        .into_iter()
        .map(|(t, mut c)| {
            c.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.1.cmp(&a.1)));
            (t, c.into_iter().map(|(_, _, who)| who).collect())
        })
        .collect()
}

/// `StickyTaskAssignor.assignActive`.
fn assign_active(st: &mut State, mut tasks: Vec<TaskId>) {
    tasks.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    // 1. Previous active owners keep their tasks while under the active quota.
    let mut rest = Vec::new();
    for t in tasks {
        if let Some((m, p)) = st.active_prev.get(&t).cloned() {
            if st.member_count(&p, &m) < st.active_per_member {
                let c = st.add(&p, &m, &t, true);
                st.after_active(c);
                st.after_any(c);
                continue;
            }
        }
        rest.push(t);
    }
    // 2. Previous standby owners take them over.
    let mut rest2 = Vec::new();
    for t in rest {
        if let Some((m, p)) = st.prev_with_least_load(st.standby_prev.get(&t), None) {
            if st.member_count(&p, &m) < st.active_per_member {
                let c = st.add(&p, &m, &t, true);
                st.after_active(c);
                st.after_any(c);
                continue;
            }
        }
        rest2.push(t);
    }
    // 3. The rest go to the least loaded process, by subtopology then partition.
    rest2.sort();
    for t in rest2 {
        let Some(p) = st.by_load().into_iter().next() else {
            return;
        };
        if let Some(c) = st.add_least_loaded(&p, &t, true) {
            st.after_active(c);
            st.after_any(c);
        }
    }
}

/// `StickyTaskAssignor.assignStandby`: never on a process that has the task (as active or
/// standby).
fn assign_standby(st: &mut State, mut tasks: Vec<TaskId>) {
    tasks.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
    let mut to_least_loaded: Vec<(TaskId, u32)> = Vec::new();
    for t in tasks {
        for i in 0..st.num_standby {
            // The previous active owner keeps the task as a standby.
            if let Some((m, p)) = st.active_prev.get(&t).cloned() {
                if !st.has_task(&p, &t) && st.member_count(&p, &m) < st.tasks_per_member {
                    let c = st.add(&p, &m, &t, false);
                    st.after_any(c);
                    continue;
                }
            }
            // Then the previous standby owners.
            if let Some((m, p)) = st.prev_with_least_load(st.standby_prev.get(&t), Some(&t)) {
                if st.member_count(&p, &m) < st.tasks_per_member {
                    let c = st.add(&p, &m, &t, false);
                    st.after_any(c);
                    continue;
                }
            }
            to_least_loaded.push((t.clone(), st.num_standby - i));
            break;
        }
    }
    to_least_loaded.sort_by(|a, b| b.0.cmp(&a.0));
    for (t, remaining) in to_least_loaded {
        for _ in 0..remaining {
            // `assignStandbyToMemberWithLeastLoad`: the least loaded process without the task.
            let Some(p) = st.by_load().into_iter().find(|p| !st.has_task(p, &t)) else {
                break;
            };
            match st.add_least_loaded(&p, &t, false) {
                Some(c) => st.after_any(c),
                None => break,
            }
        }
    }
}
