//! The per-process task guard: what every streams member of one OS process shares (process id,
//! user endpoint) and the one place that knows which local member holds which task in which
//! role. Its rules are the docs of the parent module ("The task guard").

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use super::topology::{TaskId, TaskRole, UserEndpoint};

/// How often the guard had to step in, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Interventions {
    /// A member was assigned a task another local member held (or an active assignment of
    /// another local member had reserved), and withheld it.
    pub withheld: u64,
    /// A member gave up a standby or warm-up task because another local member was assigned it
    /// as active.
    pub given_up: u64,
}

/// What the guard did, as a member reports it in
/// [`StreamsEvent::GuardIntervened`](super::StreamsEvent::GuardIntervened).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InterventionKind {
    /// This member withholds the task: another local member holds it.
    Withheld,
    /// This member gave the task up for another local member's active assignment.
    GaveUp,
}

/// One intervention of the guard: the task, this member's role, and the other local member and
/// its role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intervention {
    /// What happened.
    pub kind: InterventionKind,
    /// The task.
    pub task: TaskId,
    /// The role this member was assigned (withheld) or held (gave up).
    pub role: TaskRole,
    /// The other local member.
    pub other_member: String,
    /// Its role: the role it holds the task in (withheld), or was assigned (gave up).
    pub other_role: TaskRole,
}

/// The outcome of [`StreamsProcess::acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// The member holds the task in the role now.
    Granted,
    /// Another local member holds it (or has it reserved for its active role); `new` when this
    /// is the first refusal of this (member, task, role) claim, which the guard counted.
    Withheld {
        holder: String,
        holder_role: TaskRole,
        new: bool,
    },
}

/// A task one member holds, or waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    member: String,
    role: TaskRole,
}

#[derive(Debug)]
struct Inner {
    process_id: String,
    endpoint: Option<UserEndpoint>,
    guarded: bool,
    /// Holders per task: at most one when guarded.
    held: BTreeMap<TaskId, Vec<Entry>>,
    /// Members waiting for a task they were assigned, in arrival order.
    claims: BTreeMap<TaskId, Vec<Entry>>,
    interventions: Interventions,
}

/// The streams process: shared by all [`StreamsMember`](super::StreamsMember)s of one OS
/// process (clone the handle), it holds the process id and user endpoint they join with, and
/// keeps two members of the process from holding one task at once (the guard).
///
/// ```
/// use consumer_membership_core::machine::streams::{StreamsProcess, UserEndpoint};
///
/// let process = StreamsProcess::new("8b1c...-uuid", Some(UserEndpoint::new("10.0.0.7", 8080)));
/// let same = process.clone(); // hand one to each member
/// assert_eq!(same.process_id(), "8b1c...-uuid");
/// assert!(process.is_guarded());
/// assert_eq!(process.interventions().withheld, 0);
/// ```
#[derive(Clone)]
pub struct StreamsProcess {
    inner: Arc<Mutex<Inner>>,
}

impl fmt::Debug for StreamsProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = self.lock();
        f.debug_struct("StreamsProcess")
            .field("process_id", &i.process_id)
            .field("guarded", &i.guarded)
            .field("interventions", &i.interventions)
            .finish()
    }
}

impl StreamsProcess {
    /// A guarded process: `process_id` (a UUID string, the same for every member of the
    /// process) and the endpoint it serves Interactive Queries on, if any.
    pub fn new(process_id: impl Into<String>, endpoint: Option<UserEndpoint>) -> Self {
        Self::build(process_id.into(), endpoint, true)
    }

    /// The same process without the guard: every member takes what the coordinator assigns,
    /// as the Java client does (the guard only records holders, so a test can see the
    /// coordinator's double ownership, KAFKA-21401).
    pub fn unguarded(process_id: impl Into<String>, endpoint: Option<UserEndpoint>) -> Self {
        Self::build(process_id.into(), endpoint, false)
    }

    fn build(process_id: String, endpoint: Option<UserEndpoint>, guarded: bool) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                process_id,
                endpoint,
                guarded,
                held: BTreeMap::new(),
                claims: BTreeMap::new(),
                interventions: Interventions::default(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves consistent maps (every update is a
        // single insert or remove): keep going.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The process id members join with.
    pub fn process_id(&self) -> String {
        self.lock().process_id.clone()
    }

    /// The user endpoint members join with.
    pub fn endpoint(&self) -> Option<UserEndpoint> {
        self.lock().endpoint.clone()
    }

    /// Whether the guard is on.
    pub fn is_guarded(&self) -> bool {
        self.lock().guarded
    }

    /// How often the guard stepped in so far.
    pub fn interventions(&self) -> Interventions {
        self.lock().interventions
    }

    /// Which local members hold `task`, in which role (at most one when guarded).
    pub fn holders(&self, task: &TaskId) -> Vec<(String, TaskRole)> {
        self.lock()
            .held
            .get(task)
            .map(|v| v.iter().map(|e| (e.member.clone(), e.role)).collect())
            .unwrap_or_default()
    }

    /// Every task held by more than one local member, with its holders (never any when
    /// guarded).
    pub fn doubly_held(&self) -> Vec<(TaskId, Vec<(String, TaskRole)>)> {
        self.lock()
            .held
            .iter()
            .filter(|(_, v)| v.len() > 1)
            .map(|(t, v)| {
                (
                    t.clone(),
                    v.iter().map(|e| (e.member.clone(), e.role)).collect(),
                )
            })
            .collect()
    }

    /// `member` takes `task` in `role`, atomically: granted when no other local member holds it
    /// and no other member's active assignment reserved it (an active claim also wins over a
    /// standby or warm-up claim that came first); otherwise the claim is recorded (counted and
    /// logged the first time) and withheld. A role change of a task the member holds itself is
    /// always granted. Unguarded: always granted.
    pub(crate) fn acquire(&self, member: &str, task: &TaskId, role: TaskRole) -> Acquire {
        let mut i = self.lock();
        let guarded = i.guarded;
        let holder = i
            .held
            .get(task)
            .and_then(|v| v.iter().find(|e| e.member != member).cloned());
        let reserved = || {
            // Another member's active claim reserves the task against every other claim but an
            // earlier active one.
            i.claims.get(task).and_then(|claims| {
                let first_active = claims.iter().find(|c| c.role == TaskRole::Active)?;
                (first_active.member != member).then(|| first_active.clone())
            })
        };
        // A member that holds the task itself changes its role in place: it stays the only
        // holder, whatever others wait for.
        let holds = i
            .held
            .get(task)
            .is_some_and(|v| v.iter().any(|e| e.member == member));
        let blocker = match (guarded, holder) {
            (false, _) => None,
            (true, Some(h)) => Some(h),
            (true, None) if holds => None,
            (true, None) => reserved(),
        };
        match blocker {
            None => {
                let held = i.held.entry(task.clone()).or_default();
                held.retain(|e| e.member != member);
                held.push(Entry {
                    member: member.to_owned(),
                    role,
                });
                drop_claim(&mut i.claims, member, task);
                Acquire::Granted
            }
            Some(other) => {
                let claims = i.claims.entry(task.clone()).or_default();
                let new = !claims.iter().any(|c| c.member == member && c.role == role);
                if new {
                    claims.retain(|c| c.member != member);
                    claims.push(Entry {
                        member: member.to_owned(),
                        role,
                    });
                    i.interventions.withheld += 1;
                    tracing::warn!(process_id = %i.process_id, %task, member_id = member, role = %role, holder = %other.member, holder_role = %other.role, "task guard: the coordinator assigned a task another member of this process holds; withholding it until released");
                }
                Acquire::Withheld {
                    holder: other.member,
                    holder_role: other.role,
                    new,
                }
            }
        }
    }

    /// `member` no longer holds `task` (in any role).
    pub(crate) fn release(&self, member: &str, task: &TaskId) {
        let mut i = self.lock();
        if let Some(v) = i.held.get_mut(task) {
            v.retain(|e| e.member != member);
            if v.is_empty() {
                i.held.remove(task);
            }
        }
    }

    /// Drops `member`'s claims on tasks `keep` refuses (the coordinator no longer assigns them).
    pub(crate) fn retain_claims(&self, member: &str, keep: impl Fn(&TaskId, TaskRole) -> bool) {
        let mut i = self.lock();
        for (task, claims) in i.claims.iter_mut() {
            claims.retain(|c| c.member != member || keep(task, c.role));
        }
        i.claims.retain(|_, v| !v.is_empty());
    }

    /// The standby and warm-up tasks `member` holds that another local member was assigned as
    /// active and waits for: `member` gives them up now (they are released here, counted and
    /// logged), and reads what it gave up, with the active claimant.
    pub(crate) fn yield_to_active(&self, member: &str) -> Vec<Intervention> {
        let mut i = self.lock();
        if !i.guarded {
            return Vec::new();
        }
        let mut gave_up = Vec::new();
        for (task, claims) in &i.claims {
            let Some(claimant) = claims
                .iter()
                .find(|c| c.role == TaskRole::Active && c.member != member)
            else {
                continue;
            };
            let mine = i
                .held
                .get(task)
                .and_then(|v| v.iter().find(|e| e.member == member));
            if let Some(mine) = mine
                && mine.role != TaskRole::Active
            {
                gave_up.push(Intervention {
                    kind: InterventionKind::GaveUp,
                    task: task.clone(),
                    role: mine.role,
                    other_member: claimant.member.clone(),
                    other_role: TaskRole::Active,
                });
            }
        }
        for g in &gave_up {
            if let Some(v) = i.held.get_mut(&g.task) {
                v.retain(|e| e.member != member);
                if v.is_empty() {
                    i.held.remove(&g.task);
                }
            }
            i.interventions.given_up += 1;
            tracing::warn!(process_id = %i.process_id, task = %g.task, member_id = member, role = %g.role, active_member = %g.other_member, "task guard: another member of this process was assigned this task as active; giving up the {} task", g.role);
        }
        gave_up
    }

    /// Whether another local member's active claim waits for a task `member` holds as a
    /// standby or warm-up (it gives it up at its next input).
    pub(crate) fn must_yield(&self, member: &str) -> bool {
        let i = self.lock();
        i.guarded
            && i.claims.iter().any(|(task, claims)| {
                claims
                    .iter()
                    .any(|c| c.role == TaskRole::Active && c.member != member)
                    && i.held.get(task).is_some_and(|v| {
                        v.iter()
                            .any(|e| e.member == member && e.role != TaskRole::Active)
                    })
            })
    }

    /// `member` is gone (closed, dropped): everything it held or waited for is released.
    pub(crate) fn forget(&self, member: &str) {
        let mut i = self.lock();
        for v in i.held.values_mut() {
            v.retain(|e| e.member != member);
        }
        i.held.retain(|_, v| !v.is_empty());
        for v in i.claims.values_mut() {
            v.retain(|e| e.member != member);
        }
        i.claims.retain(|_, v| !v.is_empty());
    }
}

fn drop_claim(claims: &mut BTreeMap<TaskId, Vec<Entry>>, member: &str, task: &TaskId) {
    if let Some(v) = claims.get_mut(task) {
        v.retain(|c| c.member != member);
        if v.is_empty() {
            claims.remove(task);
        }
    }
}
