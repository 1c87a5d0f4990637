//! The KIP-848 server-side assignors of the simulated coordinator, as pure functions over the
//! members' subscriptions and the previous target assignment (`ConsumerGroupPartitionAssignor`
//! in the broker's `group-coordinator` module, `assignor/`):
//!
//! - `uniform` (`UniformAssignor.assign`): all members subscribed to the same topics ⇒ the
//!   homogeneous builder (`UniformHomogeneousAssignmentBuilder`), else the heterogeneous one
//!   (`UniformHeterogeneousAssignmentBuilder`). Both keep the previous target where it is
//!   balanced and move as few partitions as they can: balance first, then stickiness.
//! - `range` (`RangeAssignor.assign`): per topic, contiguous ranges over the topic's subscribers
//!   sorted static members first (by instance id), then by member id; recomputed from scratch.
//! - the simulation's round robin (churn mode, no broker counterpart): partition `i` of a topic
//!   goes to the `i % n`-th of its `n` subscribers in member-id order.
//!
//! Topics a member subscribes to that do not exist are left out (the broker resolves subscribed
//! names through its metadata image). Ties the broker breaks by hash order are broken here by
//! member id and topic name, so every result is deterministic.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use super::rules::ServerAssignor;

/// A partition: topic name and partition index.
pub(super) type Tp = (String, i32);

/// What an assignor knows of a member (`MemberSubscription`).
#[derive(Debug, Clone, Copy)]
pub(super) struct AssignorMember<'a> {
    pub(super) id: &'a str,
    pub(super) instance: Option<&'a str>,
    /// Subscribed topic names, sorted, without duplicates.
    pub(super) topics: &'a [String],
}

/// The partitions of every subscribed topic and their owners while an assignor works.
struct Work {
    /// Existing topics some member subscribes to, by name: name and partition count.
    topics: Vec<(String, i32)>,
    /// Per topic, the indices (into the members) of its subscribers, ascending.
    subscribers: Vec<Vec<usize>>,
    /// Per topic and partition, the owning member's index.
    owner: Vec<Vec<Option<usize>>>,
    /// Per member, how many partitions it owns.
    sizes: Vec<usize>,
}

impl Work {
    /// The subscribed topics and, when `sticky`, the previous target's owners restricted to
    /// what each member still subscribes to (`maybeRevokePartitions`: a topic a member left is
    /// taken from it whole).
    fn new(
        members: &[AssignorMember<'_>],
        partitions: &BTreeMap<String, i32>,
        previous: &BTreeMap<String, BTreeSet<Tp>>,
        sticky: bool,
    ) -> Self {
        let names: BTreeSet<&str> = members
            .iter()
            .flat_map(|m| m.topics.iter().map(String::as_str))
            .filter(|t| partitions.contains_key(*t))
            .collect();
        let topics: Vec<(String, i32)> = names
            .into_iter()
            .map(|t| (t.to_owned(), partitions[t].max(0)))
            .collect();
        let mut subscribers = vec![Vec::new(); topics.len()];
        for (i, m) in members.iter().enumerate() {
            for t in m.topics {
                if let Ok(k) = topics.binary_search_by(|(n, _)| n.as_str().cmp(t)) {
                    subscribers[k].push(i);
                }
            }
        }
        let mut w = Self {
            owner: topics
                .iter()
                .map(|(_, n)| vec![None; *n as usize])
                .collect(),
            topics,
            subscribers,
            sizes: vec![0; members.len()],
        };
        if sticky {
            for (i, m) in members.iter().enumerate() {
                for (t, p) in previous.get(m.id).into_iter().flatten() {
                    let Some(k) = w.topic(t) else { continue };
                    let slot = w.owner[k].get_mut(*p as usize);
                    if let Some(slot) = slot
                        && slot.is_none()
                        && m.topics.binary_search(t).is_ok()
                    {
                        *slot = Some(i);
                        w.sizes[i] += 1;
                    }
                }
            }
        }
        w
    }

    fn topic(&self, name: &str) -> Option<usize> {
        self.topics
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
    }

    fn give(&mut self, k: usize, p: usize, to: usize) {
        if let Some(from) = self.owner[k][p] {
            self.sizes[from] -= 1;
        }
        self.owner[k][p] = Some(to);
        self.sizes[to] += 1;
    }

    /// Writes the owners into `target`, touching only the partitions that changed hands.
    fn apply(&self, members: &[AssignorMember<'_>], target: &mut BTreeMap<String, BTreeSet<Tp>>) {
        let ids: BTreeSet<&str> = members.iter().map(|m| m.id).collect();
        target.retain(|id, _| ids.contains(id.as_str()));
        for (i, m) in members.iter().enumerate() {
            let set = target.entry(m.id.to_owned()).or_default();
            set.retain(|(t, p)| {
                self.topic(t)
                    .and_then(|k| self.owner[k].get(*p as usize).copied().flatten())
                    == Some(i)
            });
        }
        for (k, (t, _)) in self.topics.iter().enumerate() {
            for (p, o) in self.owner[k].iter().enumerate() {
                if let Some(i) = o {
                    let set = target
                        .get_mut(members[*i].id)
                        .expect("every member has an entry");
                    let tp = (t.clone(), p as i32);
                    if !set.contains(&tp) {
                        set.insert(tp);
                    }
                }
            }
        }
    }
}

/// Computes the target assignment of `members` (in member-id order) with `assignor`, starting
/// from the previous target in `target` (entries of members no longer listed are dropped).
pub(super) fn assign(
    assignor: ServerAssignor,
    members: &[AssignorMember<'_>],
    partitions: &BTreeMap<String, i32>,
    target: &mut BTreeMap<String, BTreeSet<Tp>>,
) {
    let w = match assignor {
        ServerAssignor::Uniform => {
            let mut w = Work::new(members, partitions, target, true);
            // UniformAssignor.assign: HOMOGENEOUS when every member subscribes to the same
            // topic names (ConsumerGroup.subscriptionType).
            let homogeneous = members.windows(2).all(|p| p[0].topics == p[1].topics);
            if homogeneous {
                uniform_homogeneous(&mut w);
            } else {
                uniform_heterogeneous(&mut w);
            }
            w
        }
        ServerAssignor::Range => {
            let mut w = Work::new(members, partitions, target, false);
            range(&mut w, members);
            w
        }
        ServerAssignor::RoundRobin => {
            let mut w = Work::new(members, partitions, target, false);
            for k in 0..w.topics.len() {
                let subs = w.subscribers[k].clone();
                for p in 0..w.owner[k].len() {
                    w.give(k, p, subs[p % subs.len()]);
                }
            }
            w
        }
    };
    w.apply(members, target);
}

/// `UniformHomogeneousAssignmentBuilder.build`: each member's quota is `total / n`, and
/// `total % n` members get one more; a member keeps its previous partitions up to its quota
/// (`maybeRevokePartitions`; the extra one goes preferably to members that already hold it:
/// a member below quota + 1 gives the extra up unless only the members left can take it), the
/// partitions nobody holds and the ones taken back go, in order, to the members below their
/// quota (`assignRemainingPartitions`).
fn uniform_homogeneous(w: &mut Work) {
    let n = w.sizes.len();
    let total: usize = w.owner.iter().map(Vec::len).sum();
    if n == 0 || total == 0 {
        return;
    }
    let mut unassigned: Vec<(usize, usize)> = Vec::new();
    let mut owned: Vec<Vec<(usize, usize)>> = vec![Vec::new(); n];
    for (k, owners) in w.owner.iter().enumerate() {
        for (p, o) in owners.iter().enumerate() {
            match o {
                Some(i) => owned[*i].push((k, p)),
                None => unassigned.push((k, p)),
            }
        }
    }
    let min_quota = total / n;
    let mut extra = total % n;
    let mut unfilled: Vec<(usize, usize)> = Vec::new();
    for (i, mine) in owned.iter().enumerate() {
        let mut quota = min_quota;
        let mut has_extra = false;
        if extra > 0 {
            quota += 1;
            has_extra = true;
        }
        for &(k, p) in mine {
            if quota > 0 {
                quota -= 1;
            } else {
                w.owner[k][p] = None;
                w.sizes[i] -= 1;
                unassigned.push((k, p));
            }
        }
        if quota > 0 && has_extra && n - i > extra {
            quota -= 1;
            has_extra = false;
        }
        if quota > 0 {
            unfilled.push((i, quota));
        }
        if has_extra {
            extra -= 1;
        }
    }
    let mut next = unassigned.into_iter();
    for (i, quota) in unfilled {
        for (k, p) in next.by_ref().take(quota) {
            w.give(k, p, i);
        }
    }
}

/// `UniformHeterogeneousAssignmentBuilder.build`: the partitions nobody holds go, topic by topic
/// (most partitions per subscriber first, then fewer subscribers, then by name:
/// `topicComparator`), each to the subscriber with the fewest partitions
/// (`assignRemainingPartitions`); then, for at most 16 rounds (`MAX_ITERATION_COUNT`) and only
/// for topics with two subscribers or more (`canTopicParticipateInReassignment`), partitions move
/// from the most loaded subscriber holding one of the topic to the least loaded subscriber while
/// their counts differ by more than one (`balanceTopic`).
fn uniform_heterogeneous(w: &mut Work) {
    let mut order: Vec<usize> = (0..w.topics.len())
        .filter(|k| !w.subscribers[*k].is_empty())
        .collect();
    order.sort_by(|&a, &b| {
        let (pa, sa) = (w.topics[a].1 as u64, w.subscribers[a].len() as u64);
        let (pb, sb) = (w.topics[b].1 as u64, w.subscribers[b].len() as u64);
        // Partitions per subscriber, descending: pb/sb vs pa/sa.
        (pb * sa)
            .cmp(&(pa * sb))
            .then(sa.cmp(&sb))
            .then(w.topics[a].0.cmp(&w.topics[b].0))
    });
    for &k in &order {
        for p in 0..w.owner[k].len() {
            if w.owner[k][p].is_none() {
                let to = least_loaded(w, k);
                w.give(k, p, to);
            }
        }
    }
    let movable: Vec<usize> = order
        .into_iter()
        .filter(|k| w.subscribers[*k].len() >= 2)
        .collect();
    for _ in 0..16 {
        let mut moved = false;
        for &k in &movable {
            loop {
                let to = least_loaded(w, k);
                let from = w.subscribers[k]
                    .iter()
                    .copied()
                    .filter(|i| w.owner[k].contains(&Some(*i)))
                    .max_by_key(|i| (w.sizes[*i], Reverse(*i)));
                let Some(from) = from else { break };
                if w.sizes[from] <= w.sizes[to] + 1 {
                    break;
                }
                let p = w.owner[k]
                    .iter()
                    .rposition(|o| *o == Some(from))
                    .expect("holds one");
                w.give(k, p, to);
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
}

/// The subscriber of topic `k` with the fewest partitions (the lowest index among equals).
fn least_loaded(w: &Work, k: usize) -> usize {
    w.subscribers[k]
        .iter()
        .copied()
        .min_by_key(|i| (w.sizes[*i], *i))
        .expect("a topic in the work has a subscriber")
}

/// `RangeAssignor.assign` (`assignHomogeneousGroup` / `assignHeterogeneousGroup`, which agree):
/// subscribers sorted by `sortMemberIds` (static members first, by instance id, then dynamic
/// members by member id); per topic, `count / n` partitions each, the first `count % n`
/// subscribers one more, as contiguous ranges in that order (`addPartitionsToAssignment`).
fn range(w: &mut Work, members: &[AssignorMember<'_>]) {
    let key = |i: usize| {
        let m = &members[i];
        match m.instance {
            Some(inst) => (0, inst, m.id),
            None => (1, "", m.id),
        }
    };
    for k in 0..w.topics.len() {
        let mut subs = w.subscribers[k].clone();
        if subs.is_empty() {
            continue;
        }
        subs.sort_by(|a, b| key(*a).cmp(&key(*b)));
        let count = w.owner[k].len();
        let (quota, mut extra) = (count / subs.len(), count % subs.len());
        let mut start = 0;
        for i in subs {
            let mut len = quota;
            if extra > 0 {
                len += 1;
                extra -= 1;
            }
            for p in start..(start + len).min(count) {
                w.give(k, p, i);
            }
            start += len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Group {
        members: Vec<(String, Option<String>, Vec<String>)>,
        partitions: BTreeMap<String, i32>,
    }

    impl Group {
        fn new(partitions: &[(&str, i32)]) -> Self {
            Self {
                members: Vec::new(),
                partitions: partitions
                    .iter()
                    .map(|(t, n)| (t.to_string(), *n))
                    .collect(),
            }
        }

        fn member(mut self, id: &str, topics: &[&str]) -> Self {
            self.add(id, None, topics);
            self
        }

        fn add(&mut self, id: &str, instance: Option<&str>, topics: &[&str]) {
            let mut topics: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
            topics.sort();
            topics.dedup();
            self.members
                .push((id.to_owned(), instance.map(str::to_owned), topics));
            self.members.sort();
        }

        fn remove(&mut self, id: &str) {
            self.members.retain(|m| m.0 != id);
        }

        fn run(&self, assignor: ServerAssignor, target: &mut BTreeMap<String, BTreeSet<Tp>>) {
            let members: Vec<AssignorMember<'_>> = self
                .members
                .iter()
                .map(|(id, inst, topics)| AssignorMember {
                    id,
                    instance: inst.as_deref(),
                    topics,
                })
                .collect();
            assign(assignor, &members, &self.partitions, target);
            self.check_complete(target);
        }

        /// Every partition of a subscribed topic has exactly one owner, who subscribes to it.
        fn check_complete(&self, target: &BTreeMap<String, BTreeSet<Tp>>) {
            let mut seen = BTreeSet::new();
            for (id, _, topics) in &self.members {
                for tp in &target[id] {
                    assert!(topics.contains(&tp.0), "{id} got {tp:?} unsubscribed");
                    assert!(seen.insert(tp.clone()), "{tp:?} assigned twice");
                }
            }
            for (t, n) in &self.partitions {
                if self.members.iter().any(|m| m.2.contains(t)) {
                    for p in 0..*n {
                        assert!(seen.contains(&(t.clone(), p)), "{t}-{p} unassigned");
                    }
                }
            }
            assert_eq!(target.len(), self.members.len());
        }
    }

    fn sizes(target: &BTreeMap<String, BTreeSet<Tp>>) -> Vec<usize> {
        target.values().map(BTreeSet::len).collect()
    }

    fn spread(target: &BTreeMap<String, BTreeSet<Tp>>) -> usize {
        let s = sizes(target);
        s.iter().max().unwrap_or(&0) - s.iter().min().unwrap_or(&0)
    }

    /// How many partitions changed owner between two targets.
    fn moved(a: &BTreeMap<String, BTreeSet<Tp>>, b: &BTreeMap<String, BTreeSet<Tp>>) -> usize {
        let owner = |t: &BTreeMap<String, BTreeSet<Tp>>| -> BTreeMap<Tp, String> {
            t.iter()
                .flat_map(|(id, s)| s.iter().map(move |tp| (tp.clone(), id.clone())))
                .collect()
        };
        let (oa, ob) = (owner(a), owner(b));
        ob.iter()
            .filter(|(tp, id)| oa.get(*tp) != Some(*id))
            .count()
    }

    #[test]
    fn uniform_homogeneous_is_balanced_within_one_and_moves_only_what_it_must() {
        let mut g = Group::new(&[("t", 7), ("u", 4)])
            .member("a", &["t", "u"])
            .member("b", &["t", "u"]);
        let mut target = BTreeMap::new();
        g.run(ServerAssignor::Uniform, &mut target);
        assert!(spread(&target) <= 1, "{target:?}");
        // A third member: each of the others gives up only its excess (11 = 4 + 4 + 3).
        let before = target.clone();
        g.add("c", None, &["t", "u"]);
        g.run(ServerAssignor::Uniform, &mut target);
        assert!(spread(&target) <= 1, "{target:?}");
        assert_eq!(moved(&before, &target), target["c"].len());
        assert!(target["c"].len() >= 3);
        // The old members kept everything they still have room for.
        for id in ["a", "b"] {
            assert!(
                target[id].is_subset(&before[id]),
                "{id} got a new partition"
            );
        }
        // A member leaves: only its partitions move.
        let before = target.clone();
        g.remove("a");
        g.run(ServerAssignor::Uniform, &mut target);
        assert!(spread(&target) <= 1);
        assert_eq!(moved(&before, &target), before["a"].len());
    }

    #[test]
    fn uniform_heterogeneous_balances_what_subscriptions_allow_and_is_sticky() {
        // a: t+u, b: t, c: u. Everyone can be within one of the others: 10 partitions / 3.
        let mut g = Group::new(&[("t", 6), ("u", 4)])
            .member("a", &["t", "u"])
            .member("b", &["t"])
            .member("c", &["u"]);
        let mut target = BTreeMap::new();
        g.run(ServerAssignor::Uniform, &mut target);
        assert!(spread(&target) <= 1, "{target:?}");
        // b leaves: t can only go to a, so balance wants all of u on c: a = t (6), c = u (4).
        g.remove("b");
        g.run(ServerAssignor::Uniform, &mut target);
        assert!(target["a"].iter().all(|(t, _)| t == "t"), "{target:?}");
        assert_eq!(target["c"].len(), 4, "{target:?}");
        // No partition could move to a less loaded subscriber of its topic and improve balance.
        for (id, set) in &target {
            for (t, _) in set {
                for (other, _, topics) in &g.members {
                    if topics.contains(t) {
                        assert!(target[id].len() <= target[other].len() + 1, "{target:?}");
                    }
                }
            }
        }
        // A heterogeneous group where balance is impossible: b alone on u (3), a alone on t (6).
        let g = Group::new(&[("t", 6), ("u", 3)])
            .member("a", &["t"])
            .member("b", &["u"]);
        let mut target = BTreeMap::new();
        g.run(ServerAssignor::Uniform, &mut target);
        assert_eq!(sizes(&target), vec![6, 3]);
    }

    #[test]
    fn uniform_keeps_a_balanced_target_untouched() {
        let g = Group::new(&[("t", 6)])
            .member("a", &["t"])
            .member("b", &["t"]);
        // An unusual but balanced previous target: a holds the odd partitions.
        let mut target: BTreeMap<String, BTreeSet<Tp>> = BTreeMap::new();
        target.insert("a".into(), [1, 3, 5].map(|p| ("t".to_owned(), p)).into());
        target.insert("b".into(), [0, 2, 4].map(|p| ("t".to_owned(), p)).into());
        let before = target.clone();
        g.run(ServerAssignor::Uniform, &mut target);
        assert_eq!(target, before);
        // The round robin reshuffles it (the churn mode).
        g.run(ServerAssignor::RoundRobin, &mut target);
        assert_eq!(moved(&before, &target), 6);
    }

    #[test]
    fn assignors_are_deterministic() {
        for assignor in [
            ServerAssignor::Uniform,
            ServerAssignor::Range,
            ServerAssignor::RoundRobin,
        ] {
            let mut g = Group::new(&[("t", 9), ("u", 5), ("v", 2)])
                .member("m3", &["t", "u"])
                .member("m1", &["t", "v"])
                .member("m2", &["u"]);
            let run = |g: &Group| {
                let mut target = BTreeMap::new();
                g.run(assignor, &mut target);
                target
            };
            let first = run(&g);
            assert_eq!(first, run(&g), "{assignor:?}");
            g.add("m0", None, &["t", "u", "v"]);
            let mut a = first.clone();
            let mut b = first.clone();
            g.run(assignor, &mut a);
            g.run(assignor, &mut b);
            assert_eq!(a, b, "{assignor:?}");
        }
    }

    #[test]
    fn range_gives_contiguous_ranges_static_members_first() {
        let mut g = Group::new(&[("t", 5), ("u", 2)]);
        g.add("z-dynamic", None, &["t", "u"]);
        g.add("a-dynamic", None, &["t"]);
        g.add("m-static", Some("inst-0"), &["t", "u"]);
        let mut target = BTreeMap::new();
        g.run(ServerAssignor::Range, &mut target);
        let of = |id: &str, t: &str| -> Vec<i32> {
            target[id]
                .iter()
                .filter(|(x, _)| x == t)
                .map(|(_, p)| *p)
                .collect()
        };
        // t: static first, then a-dynamic, z-dynamic: 2, 2, 1.
        assert_eq!(of("m-static", "t"), vec![0, 1]);
        assert_eq!(of("a-dynamic", "t"), vec![2, 3]);
        assert_eq!(of("z-dynamic", "t"), vec![4]);
        // u: m-static, z-dynamic.
        assert_eq!(of("m-static", "u"), vec![0]);
        assert_eq!(of("z-dynamic", "u"), vec![1]);
        // Balanced within one per topic, and not sticky: a new first member shifts the ranges.
        let before = target.clone();
        g.add("0-static", Some("a-inst"), &["t"]);
        g.run(ServerAssignor::Range, &mut target);
        assert!(moved(&before, &target) > 2);
    }

    #[test]
    fn unknown_topics_and_members_without_topics_get_nothing() {
        let g = Group::new(&[("t", 3)])
            .member("a", &["t", "missing"])
            .member("b", &[]);
        for assignor in [ServerAssignor::Uniform, ServerAssignor::Range] {
            let mut target = BTreeMap::new();
            g.run(assignor, &mut target);
            assert_eq!(target["a"].len(), 3, "{assignor:?}");
            assert!(target["b"].is_empty(), "{assignor:?}");
        }
    }
}
