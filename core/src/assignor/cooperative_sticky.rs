//! The cooperative sticky assignor (Java's `CooperativeStickyAssignor`, `"cooperative-sticky"`,
//! KIP-429).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};

use super::{
    Assignor, MemberMetadata, RebalanceProtocol, assignable_topics, empty_assignment,
    partition_count, unique_members,
};
use crate::partition::TopicPartition;
use crate::wire::subscription::Subscription;

pub(super) const NAME: &str = "cooperative-sticky";

/// Java's `AbstractStickyAssignor.DEFAULT_GENERATION`.
const DEFAULT_GENERATION: i32 = -1;

/// A balanced assignment that moves as few partitions as balance allows, handed out
/// cooperatively.
///
/// **Ownership.** A member's current partitions are its `subscription.owned_partitions`. When
/// several members claim one partition, the claim with the highest generation wins (the
/// subscription's `generation_id`, or for a pre-v2 subscription the generation this assignor
/// encodes in `user_data`, as Java's `CooperativeStickyAssignor.memberData` reads it); when the
/// highest generation is claimed twice, nobody owns the partition (Java's
/// `AbstractStickyAssignor.allSubscriptionsEqual`). Claims on partitions that no longer exist are
/// dropped.
///
/// **Balance first, then stickiness.** The assignment minimises the sum of the squared assignment
/// sizes, so members with identical subscriptions end up at most one partition apart, and, among
/// the most balanced assignments, keeps as many owned partitions with their owner as possible:
/// - when every member subscribes to the same topics (Java's `ConstrainedAssignmentBuilder`) each
///   member gets `floor(P/N)` or `ceil(P/N)` partitions, the larger shares going to the members
///   owning the most; a member keeps its owned partitions up to its share (lowest partition
///   numbers first, as Java sorts them) and the rest are dealt round-robin to members below
///   their share. O(P log P).
/// - otherwise (Java's `GeneralAssignmentBuilder`, whose heuristics this does not copy) the same
///   objective is solved exactly as a min-cost flow from topics to subscribers, in
///   O(P · S · log(T + N)) for S (topic, subscriber) pairs.
///
/// **Cooperative.** A partition that changes owner is left out of its new owner's assignment this
/// round (Java's `CooperativeStickyAssignor.adjustAssignment`): its old owner sees it missing from
/// its own assignment, revokes it and rejoins, and the follow-up rebalance hands it over. So a
/// member is only given a partition it owns or that no other member claims, and the follow-up
/// rebalance completes the assignment (the owner of every partition then is unambiguous, and an
/// exactly optimal assignment keeps all of it).
///
/// Rack-aware assignment is not implemented: `rack_id` is ignored.
#[derive(Debug, Clone, Copy, Default)]
pub struct CooperativeSticky;

impl Assignor for CooperativeSticky {
    fn name(&self) -> &str {
        NAME
    }

    fn protocol(&self) -> RebalanceProtocol {
        RebalanceProtocol::Cooperative
    }

    fn assign(
        &self,
        partitions: &BTreeMap<String, i32>,
        members: &[MemberMetadata],
    ) -> BTreeMap<String, Vec<TopicPartition>> {
        let members = unique_members(members);
        let group = Group::new(partitions, &members);
        let target = group.sticky_balanced();

        let mut assignment = empty_assignment(&members);
        for (m, member) in members.iter().enumerate() {
            let Some(list) = assignment.get_mut(&member.member_id) else {
                continue;
            };
            for &(t, p) in &target[m] {
                // CooperativeStickyAssignor.adjustAssignment: keep a partition from its new owner
                // while someone else may still hold it.
                if group.may_receive(m, t, p) {
                    list.push(TopicPartition::new(group.topics[t], p));
                }
            }
            list.sort_unstable();
        }
        assignment
    }
}

impl CooperativeSticky {
    /// Java's `CooperativeStickyAssignor.subscriptionUserData`: the generation as one int32
    /// (schema `generation: INT32`), which leaders that predate subscription v2 (Kafka < 3.4)
    /// read (this crate's members send subscription v3, whose `generation_id` carries it).
    #[cfg(test)]
    fn subscription_user_data(&self, generation: i32) -> Option<bytes::Bytes> {
        Some(bytes::Bytes::copy_from_slice(&generation.to_be_bytes()))
    }
}

/// The generation of a member's owned partitions: the v2+ `generation_id` when set, else the
/// int32 at the start of cooperative-sticky user data, else -1 (Java's
/// `CooperativeStickyAssignor.memberData`: unreadable user data also means the default).
fn member_generation(subscription: &Subscription) -> i32 {
    if subscription.generation_id >= 0 {
        return subscription.generation_id;
    }
    match subscription.user_data.as_deref() {
        Some([a, b, c, d, ..]) => i32::from_be_bytes([*a, *b, *c, *d]),
        _ => DEFAULT_GENERATION,
    }
}

/// Who, if anyone, holds a partition before this rebalance.
#[derive(Debug, Clone, Copy, Default)]
struct Claims {
    /// Some member claims it.
    claimed: bool,
    /// The highest generation claiming it, and who (the last one seen).
    best: Option<(i32, usize)>,
    /// Two members claim it at the highest generation.
    tied: bool,
}

impl Claims {
    fn add(&mut self, member: usize, generation: i32) {
        self.claimed = true;
        match self.best {
            Some((g, _)) if generation < g => {}
            Some((g, other)) if generation == g => self.tied |= other != member,
            _ => {
                self.best = Some((generation, member));
                self.tied = false;
            }
        }
    }

    /// The single member owning it, if ownership is unambiguous.
    fn owner(&self) -> Option<usize> {
        match self.best {
            Some((_, m)) if !self.tied => Some(m),
            _ => None,
        }
    }
}

/// The group in index form: members in member-id order, topics (those with partitions and at
/// least one subscriber) in name order.
struct Group<'a> {
    topics: Vec<&'a str>,
    counts: Vec<usize>,
    /// Per member, the indices of its assignable topics, ascending.
    subscriptions: Vec<Vec<usize>>,
    /// Per topic, per partition.
    claims: Vec<Vec<Claims>>,
    /// Per member, the partitions it owns unambiguously in topics it still subscribes to, sorted
    /// by (partition, topic), as Java's ConstrainedAssignmentBuilder sorts owned partitions.
    keepable: Vec<Vec<(usize, i32)>>,
}

impl<'a> Group<'a> {
    fn new(partitions: &BTreeMap<String, i32>, members: &[&'a MemberMetadata]) -> Self {
        let member_topics: Vec<BTreeSet<&'a str>> = members
            .iter()
            .map(|m| assignable_topics(partitions, m))
            .collect();
        let topics: Vec<&'a str> = member_topics
            .iter()
            .flatten()
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let topic_index: BTreeMap<&str, usize> =
            topics.iter().enumerate().map(|(i, &t)| (t, i)).collect();
        let counts: Vec<usize> = topics
            .iter()
            .map(|t| partition_count(partitions, t).unwrap_or(0) as usize)
            .collect();
        let subscriptions: Vec<Vec<usize>> = member_topics
            .iter()
            .map(|set| {
                set.iter()
                    .filter_map(|t| topic_index.get(t).copied())
                    .collect()
            })
            .collect();

        let mut claims: Vec<Vec<Claims>> =
            counts.iter().map(|&n| vec![Claims::default(); n]).collect();
        let mut owned: Vec<BTreeSet<(usize, i32)>> = vec![BTreeSet::new(); members.len()];
        for (m, member) in members.iter().enumerate() {
            let generation = member_generation(&member.subscription);
            // A partition listed twice by one member is one claim.
            let mine: BTreeSet<(usize, i32)> = member
                .subscription
                .owned_partitions
                .iter()
                .filter_map(|tp| {
                    let t = *topic_index.get(tp.topic())?;
                    (usize::try_from(tp.partition).ok()? < counts[t]).then_some((t, tp.partition))
                })
                .collect();
            for &(t, p) in &mine {
                claims[t][p as usize].add(m, generation);
            }
            owned[m] = mine;
        }
        let keepable = owned
            .iter()
            .enumerate()
            .map(|(m, mine)| {
                let mut list: Vec<(usize, i32)> = mine
                    .iter()
                    .copied()
                    .filter(|&(t, p)| {
                        claims[t][p as usize].owner() == Some(m)
                            && subscriptions[m].binary_search(&t).is_ok()
                    })
                    .collect();
                list.sort_unstable_by_key(|&(t, p)| (p, t));
                list
            })
            .collect();
        Group {
            topics,
            counts,
            subscriptions,
            claims,
            keepable,
        }
    }

    /// Whether member `m` may be given (t, p) in this round: it owns it, or nobody claims it.
    fn may_receive(&self, m: usize, t: usize, p: i32) -> bool {
        let claims = &self.claims[t][p as usize];
        !claims.claimed || claims.owner() == Some(m)
    }

    /// The balanced, sticky assignment before the cooperative adjustment: per member, (topic
    /// index, partition) pairs.
    fn sticky_balanced(&self) -> Vec<Vec<(usize, i32)>> {
        let n = self.subscriptions.len();
        if n == 0 || self.topics.is_empty() {
            return vec![Vec::new(); n];
        }
        if self
            .subscriptions
            .iter()
            .all(|s| *s == self.subscriptions[0])
        {
            self.constrained()
        } else {
            self.general()
        }
    }

    /// Every member subscribes to every topic here. Java's ConstrainedAssignmentBuilder, with the
    /// larger shares given to the members that own the most (Java gives them to whichever member
    /// owning at least `ceil(P/N)` it meets first, and the rest round-robin).
    fn constrained(&self) -> Vec<Vec<(usize, i32)>> {
        let n = self.subscriptions.len();
        let total: usize = self.counts.iter().sum();
        let min_quota = total / n;
        let with_extra = total % n;
        let max_quota = min_quota + usize::from(with_extra > 0);

        let mut by_owned: Vec<usize> = (0..n).collect();
        by_owned.sort_by_key(|&m| (Reverse(self.keepable[m].len().min(max_quota)), m));
        let mut quota = vec![min_quota; n];
        for &m in by_owned.iter().take(with_extra) {
            quota[m] = max_quota;
        }

        let mut assigned: Vec<Vec<bool>> = self.counts.iter().map(|&c| vec![false; c]).collect();
        let mut result: Vec<Vec<(usize, i32)>> = Vec::with_capacity(n);
        for (keepable, &quota) in self.keepable.iter().zip(&quota) {
            let kept: Vec<(usize, i32)> = keepable.iter().copied().take(quota).collect();
            for &(t, p) in &kept {
                assigned[t][p as usize] = true;
            }
            result.push(kept);
        }

        // Deal the rest round-robin over the members below their quota, in member-id order.
        let mut unfilled: VecDeque<usize> =
            (0..n).filter(|&m| result[m].len() < quota[m]).collect();
        for (t, flags) in assigned.iter().enumerate() {
            for (p, _) in flags.iter().enumerate().filter(|(_, taken)| !**taken) {
                let Some(m) = unfilled.pop_front() else {
                    break;
                };
                result[m].push((t, p as i32));
                if result[m].len() < quota[m] {
                    unfilled.push_back(m);
                }
            }
        }
        result
    }

    /// Different subscriptions: the exact optimum of `K·Σ size² − kept` as a min-cost flow, then
    /// turned into partitions.
    fn general(&self) -> Vec<Vec<(usize, i32)>> {
        let n = self.subscriptions.len();
        // Per member, topic -> how many of its partitions the member gets.
        let mut room = TopicFlow::solve(self).share;

        let mut assigned: Vec<Vec<bool>> = self.counts.iter().map(|&c| vec![false; c]).collect();
        let mut result: Vec<Vec<(usize, i32)>> = vec![Vec::new(); n];
        // Owned partitions first: in an optimal flow a member's share of a topic covers what it
        // can keep of it, or is all kept partitions.
        for m in 0..n {
            let mut keep: Vec<(usize, i32)> = self.keepable[m].clone();
            keep.sort_unstable();
            for (t, p) in keep {
                if let Some(r) = room[m].get_mut(&t).filter(|r| **r > 0) {
                    *r -= 1;
                    assigned[t][p as usize] = true;
                    result[m].push((t, p));
                }
            }
        }
        // Then the free partitions of each topic, lowest first, to its subscribers in member-id
        // order.
        for (t, flags) in assigned.iter().enumerate() {
            let mut free = flags
                .iter()
                .enumerate()
                .filter(|(_, taken)| !**taken)
                .map(|(p, _)| p as i32);
            for m in 0..n {
                let need = room[m].get(&t).copied().unwrap_or(0);
                result[m].extend(free.by_ref().take(need).map(|p| (t, p)));
            }
        }
        result
    }
}

/// Distance for unreached nodes.
const UNREACHED: i64 = i64::MAX / 4;

/// A residual arc of the flow network.
#[derive(Debug, Clone, Copy)]
struct Edge {
    to: usize,
    /// Residual capacity.
    cap: usize,
    cost: i64,
    /// Index of the reverse arc in `to`'s list.
    rev: usize,
}

/// The min-cost flow behind [`Group::general`]: source -> topic (capacity: its partition count) ->
/// subscriber (an arc of cost -1 and capacity "partitions of the topic the member can keep", and
/// one of cost 0) -> sink, where the sink arc of a member that already has `c` partitions costs
/// `K·(2c+1)` (so the total is `K·Σ size²`). With `K` larger than the number of partitions a
/// better balance always beats any number of kept partitions. Primal-dual successive shortest
/// paths: Dijkstra over reduced costs (Johnson potentials), then as many partitions as fit along
/// zero-reduced-cost paths (a Dinic blocking flow), repeated; exact because every partition
/// extends an optimal flow by a cheapest path. A round places up to one partition per member, so
/// there are about P/N + (distinct costs) rounds of O(S log(T + N)).
struct TopicFlow {
    /// Per member, topic -> how many of its partitions the member gets.
    share: Vec<BTreeMap<usize, usize>>,
}

impl TopicFlow {
    fn solve(group: &Group<'_>) -> TopicFlow {
        let topics = group.topics.len();
        let members = group.subscriptions.len();
        let source = 0;
        let topic_node = |t: usize| 1 + t;
        let member_node = |m: usize| 1 + topics + m;
        let sink = 1 + topics + members;
        let nodes = sink + 1;
        let total: usize = group.counts.iter().sum();
        let k = total as i64 + 1;

        let mut graph: Vec<Vec<Edge>> = vec![Vec::new(); nodes];
        let add_arc =
            |graph: &mut Vec<Vec<Edge>>, from: usize, to: usize, cap: usize, cost: i64| {
                let rev_from = graph[to].len();
                let rev_to = graph[from].len();
                graph[from].push(Edge {
                    to,
                    cap,
                    cost,
                    rev: rev_from,
                });
                graph[to].push(Edge {
                    to: from,
                    cap: 0,
                    cost: -cost,
                    rev: rev_to,
                });
            };
        for t in 0..topics {
            add_arc(&mut graph, source, topic_node(t), group.counts[t], 0);
        }
        let mut keepable_per_topic: Vec<BTreeMap<usize, usize>> = vec![BTreeMap::new(); members];
        for (m, keep) in group.keepable.iter().enumerate() {
            for &(t, _) in keep {
                *keepable_per_topic[m].entry(t).or_default() += 1;
            }
        }
        for (m, subscription) in group.subscriptions.iter().enumerate() {
            for &t in subscription {
                if let Some(&keep) = keepable_per_topic[m].get(&t) {
                    add_arc(&mut graph, topic_node(t), member_node(m), keep, -1);
                }
                add_arc(
                    &mut graph,
                    topic_node(t),
                    member_node(m),
                    group.counts[t],
                    0,
                );
            }
        }

        // The member -> sink arcs are implicit: member m's next partition costs k·(2·size+1).
        let mut size = vec![0usize; members];
        let sink_cost = |size: usize| k * (2 * size as i64 + 1);

        // Initial potentials: exact distances in the acyclic initial graph.
        let mut potential = vec![0i64; nodes];
        for m in 0..members {
            let node = member_node(m);
            let cheapest = graph[node]
                .iter()
                .filter(|back| graph[back.to][back.rev].cap > 0)
                .map(|back| -back.cost)
                .min();
            potential[node] = cheapest.unwrap_or(0);
        }
        potential[sink] = (0..members)
            .filter(|&m| !group.subscriptions[m].is_empty())
            .map(|m| potential[member_node(m)] + sink_cost(0))
            .min()
            .unwrap_or(0);

        let is_member = |node: usize| node > topics && node < sink;
        let mut dist = vec![UNREACHED; nodes];
        let mut heap = BinaryHeap::new();
        let mut level = vec![usize::MAX; nodes];
        let mut queue = VecDeque::new();
        let mut current = vec![0usize; nodes];
        let mut stack: Vec<usize> = Vec::new();
        let mut path: Vec<(usize, usize)> = Vec::new();
        let mut placed = 0;
        while placed < total {
            // Shortest distances over reduced costs (Dijkstra, stopped at the sink).
            dist.fill(UNREACHED);
            heap.clear();
            dist[source] = 0;
            heap.push(Reverse((0i64, source)));
            while let Some(Reverse((d, u))) = heap.pop() {
                if d > dist[u] {
                    continue;
                }
                if u == sink {
                    break;
                }
                for arc in &graph[u] {
                    let nd = d + arc.cost + potential[u] - potential[arc.to];
                    if arc.cap > 0 && nd < dist[arc.to] {
                        dist[arc.to] = nd;
                        heap.push(Reverse((nd, arc.to)));
                    }
                }
                if is_member(u) {
                    let nd = d + sink_cost(size[u - 1 - topics]) + potential[u] - potential[sink];
                    if nd < dist[sink] {
                        dist[sink] = nd;
                        heap.push(Reverse((nd, sink)));
                    }
                }
            }
            let reached = dist[sink];
            if reached >= UNREACHED {
                // Cannot happen (every topic has a subscriber); stop rather than loop.
                break;
            }
            // Every residual arc keeps a non-negative reduced cost, and those on shortest paths
            // drop to zero ("admissible").
            for (p, d) in potential.iter_mut().zip(&dist) {
                *p += (*d).min(reached);
            }

            // Push partitions along admissible paths until none is left (Dinic: level graph,
            // then paths through it). Each is a cheapest path, so the flow stays optimal; a
            // member's sink arc takes one partition at this price, the next costs 2k more.
            let placed_before = placed;
            loop {
                level.fill(usize::MAX);
                level[source] = 0;
                queue.clear();
                queue.push_back(source);
                while let Some(u) = queue.pop_front() {
                    for arc in &graph[u] {
                        if arc.cap > 0
                            && level[arc.to] == usize::MAX
                            && arc.cost + potential[u] - potential[arc.to] == 0
                        {
                            level[arc.to] = level[u] + 1;
                            queue.push_back(arc.to);
                        }
                    }
                    if is_member(u)
                        && level[sink] == usize::MAX
                        && sink_cost(size[u - 1 - topics]) + potential[u] - potential[sink] == 0
                    {
                        level[sink] = level[u] + 1;
                    }
                }
                if level[sink] == usize::MAX {
                    break;
                }
                current.fill(0);
                'paths: while placed < total {
                    stack.clear();
                    path.clear();
                    stack.push(source);
                    // Depth-first along the levels to a member whose sink arc is admissible.
                    let member = loop {
                        let Some(&u) = stack.last() else {
                            break 'paths;
                        };
                        if is_member(u)
                            && level[sink] == level[u] + 1
                            && sink_cost(size[u - 1 - topics]) + potential[u] - potential[sink] == 0
                        {
                            break u;
                        }
                        let mut next = None;
                        while let Some(arc) = graph[u].get(current[u]) {
                            if arc.cap > 0
                                && level[arc.to] == level[u] + 1
                                && arc.cost + potential[u] - potential[arc.to] == 0
                            {
                                next = Some(arc.to);
                                break;
                            }
                            current[u] += 1;
                        }
                        match next {
                            Some(v) => {
                                path.push((u, current[u]));
                                stack.push(v);
                            }
                            None => {
                                // Dead end: never come back here in this level graph.
                                stack.pop();
                                level[u] = usize::MAX;
                                if let Some((from, _)) = path.pop() {
                                    current[from] += 1;
                                }
                            }
                        }
                    };
                    for &(from, i) in &path {
                        let arc = graph[from][i];
                        graph[from][i].cap -= 1;
                        graph[arc.to][arc.rev].cap += 1;
                    }
                    size[member - 1 - topics] += 1;
                    placed += 1;
                }
            }
            if placed == placed_before {
                // Cannot happen (the shortest path just found is admissible); stop rather than
                // loop.
                break;
            }
        }

        let share = (0..members)
            .map(|m| {
                let mut per_topic = BTreeMap::new();
                // Flow on topic -> member arcs shows as capacity on their reverse arcs.
                // (A member node has no other arcs: its sink arc is implicit.)
                for back in &graph[member_node(m)] {
                    if (1..=topics).contains(&back.to) && back.cap > 0 {
                        *per_topic.entry(back.to - 1).or_default() += back.cap;
                    }
                }
                per_topic
            })
            .collect();
        TopicFlow { share }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::super::test_support::*;
    use super::*;

    fn tp(topic: &str, p: i32) -> TopicPartition {
        TopicPartition::new(topic, p)
    }

    fn claims_of(members: &[MemberMetadata], tp: &TopicPartition) -> Vec<(usize, i32)> {
        members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.subscription.owned_partitions.contains(tp))
            .map(|(i, m)| (i, member_generation(&m.subscription)))
            .collect()
    }

    /// KIP-429 safety: a member only gets a partition it owns (with the highest generation among
    /// all claimants), or one nobody claims.
    fn check_cooperative(members: &[MemberMetadata], result: &Result) {
        for (i, m) in members.iter().enumerate() {
            for tp in &result[&m.member_id] {
                let claims = claims_of(members, tp);
                if claims.is_empty() {
                    continue;
                }
                let mine = claims.iter().find(|(j, _)| *j == i);
                let Some(&(_, my_generation)) = mine else {
                    panic!("{} got {tp} owned by another member", m.member_id);
                };
                assert!(
                    claims.iter().all(|&(j, g)| j == i || g < my_generation),
                    "{} got {tp} also claimed at generation >= {my_generation}",
                    m.member_id
                );
            }
        }
    }

    /// The group after every member applied `result` (revoking what it lost) in `generation`.
    fn next_round(
        members: &[MemberMetadata],
        result: &Result,
        generation: i32,
    ) -> Vec<MemberMetadata> {
        members
            .iter()
            .map(|m| {
                let mut next = m.clone();
                next.subscription.owned_partitions = result[&m.member_id].clone();
                next.subscription.generation_id = generation;
                next
            })
            .collect()
    }

    /// Members not subscribed to a partition's topic never keep it; locally balanced: no member
    /// could take a partition from one holding two or more partitions more than itself.
    fn check_locally_balanced(members: &[MemberMetadata], result: &Result) {
        for a in members {
            let size_a = result[&a.member_id].len();
            for tp in &result[&a.member_id] {
                for b in members {
                    if b.subscription.topics.iter().any(|t| **t == *tp.topic) {
                        let size_b = result[&b.member_id].len();
                        assert!(
                            size_a <= size_b + 1,
                            "{} ({size_a}) could give {tp} to {} ({size_b})",
                            a.member_id,
                            b.member_id
                        );
                    }
                }
            }
        }
    }

    fn stable_group(
        ids: &[&str],
        topic: &str,
        partitions: i32,
        generation: i32,
    ) -> Vec<MemberMetadata> {
        let n = ids.len() as i32;
        ids.iter()
            .enumerate()
            .map(|(i, id)| {
                let owned: Vec<TopicPartition> = (0..partitions)
                    .filter(|p| p % n == i as i32)
                    .map(|p| tp(topic, p))
                    .collect();
                owning(id, &[topic], &owned, generation)
            })
            .collect()
    }

    #[test]
    fn fresh_group_is_balanced() {
        let partitions = topics(&[("t0", 3), ("t1", 3)]);
        let members = [member("C0", &["t0", "t1"]), member("C1", &["t0", "t1"])];
        let result = CooperativeSticky.assign(&partitions, &members);
        check_valid(&partitions, &members, &result);
        check_complete(&partitions, &members, &result);
        assert_eq!(result["C0"].len(), 3);
        assert_eq!(result["C1"].len(), 3);
    }

    #[test]
    fn three_members_twelve_partitions() {
        let partitions = topics(&[("t", 12)]);
        let members = [
            member("m1", &["t"]),
            member("m2", &["t"]),
            member("m3", &["t"]),
        ];
        let result = CooperativeSticky.assign(&partitions, &members);
        check_valid(&partitions, &members, &result);
        check_complete(&partitions, &members, &result);
        assert!(result.values().all(|a| a.len() == 4));

        // Stable: assigning again with that ownership changes nothing.
        let again = CooperativeSticky.assign(&partitions, &next_round(&members, &result, 1));
        assert_eq!(again, result);
    }

    #[test]
    fn a_fourth_member_gets_partitions_only_after_they_are_revoked() {
        let partitions = topics(&[("t", 12)]);
        let mut members = stable_group(&["a", "b", "c"], "t", 12, 5);
        members.push(member("d", &["t"]));

        let first = CooperativeSticky.assign(&partitions, &members);
        check_valid(&partitions, &members, &first);
        check_cooperative(&members, &first);
        for old in &members[..3] {
            let now = &first[&old.member_id];
            // Each keeps 3 of its 4 (exactly what balance needs) and gets nothing new.
            assert_eq!(now.len(), 3, "{}", old.member_id);
            assert!(
                now.iter()
                    .all(|p| old.subscription.owned_partitions.contains(p))
            );
        }
        // The newcomer gets nothing while the others still own what it will get.
        assert!(first["d"].is_empty());

        let members = next_round(&members, &first, 6);
        let second = CooperativeSticky.assign(&partitions, &members);
        check_valid(&partitions, &members, &second);
        check_complete(&partitions, &members, &second);
        assert!(second.values().all(|a| a.len() == 3));
        for m in &members[..3] {
            assert_eq!(second[&m.member_id], first[&m.member_id]);
        }
    }

    #[test]
    fn a_fourth_member_with_uneven_counts_takes_only_what_balance_needs() {
        // 13 partitions over a, b, c (5, 4, 4); d joins: shares 4, 3, 3, 3, and the member owning
        // five keeps four.
        let partitions = topics(&[("t", 13)]);
        let mut members = vec![
            owning(
                "a",
                &["t"],
                &tps(&[("t", 0), ("t", 3), ("t", 6), ("t", 9), ("t", 12)]),
                2,
            ),
            owning(
                "b",
                &["t"],
                &tps(&[("t", 1), ("t", 4), ("t", 7), ("t", 10)]),
                2,
            ),
            owning(
                "c",
                &["t"],
                &tps(&[("t", 2), ("t", 5), ("t", 8), ("t", 11)]),
                2,
            ),
        ];
        members.push(member("d", &["t"]));
        let first = CooperativeSticky.assign(&partitions, &members);
        check_cooperative(&members, &first);
        assert_eq!(first["a"], tps(&[("t", 0), ("t", 3), ("t", 6), ("t", 9)]));
        assert_eq!(first["b"], tps(&[("t", 1), ("t", 4), ("t", 7)]));
        assert_eq!(first["c"], tps(&[("t", 2), ("t", 5), ("t", 8)]));
        assert!(first["d"].is_empty());
        let second = CooperativeSticky.assign(&partitions, &next_round(&members, &first, 3));
        assert_eq!(second["d"], tps(&[("t", 10), ("t", 11), ("t", 12)]));
    }

    #[test]
    fn a_leaving_member_partitions_go_out_at_once() {
        // Nobody claims the leaver's partitions any more, so they are handed out immediately.
        let partitions = topics(&[("t", 12)]);
        let members = stable_group(&["a", "b", "c", "d"], "t", 12, 4);
        let remaining = &members[..3];
        let result = CooperativeSticky.assign(&partitions, remaining);
        check_valid(&partitions, remaining, &result);
        check_complete(&partitions, remaining, &result);
        for m in remaining {
            assert_eq!(result[&m.member_id].len(), 4);
            assert!(
                m.subscription
                    .owned_partitions
                    .iter()
                    .all(|p| result[&m.member_id].contains(p))
            );
        }
    }

    #[test]
    fn the_higher_generation_claim_wins() {
        let partitions = topics(&[("t", 4)]);
        // Both claim t-0 and t-1; b's claim is newer.
        let members = [
            owning("a", &["t"], &tps(&[("t", 0), ("t", 1)]), 3),
            owning("b", &["t"], &tps(&[("t", 0), ("t", 1)]), 4),
        ];
        let result = CooperativeSticky.assign(&partitions, &members);
        check_cooperative(&members, &result);
        assert_eq!(result["b"], tps(&[("t", 0), ("t", 1)]));
        assert_eq!(result["a"], tps(&[("t", 2), ("t", 3)]));
    }

    #[test]
    fn a_partition_claimed_twice_in_one_generation_is_withheld() {
        let partitions = topics(&[("t", 4)]);
        let members = [
            owning("a", &["t"], &tps(&[("t", 0), ("t", 1)]), 4),
            owning("b", &["t"], &tps(&[("t", 1), ("t", 2)]), 4),
        ];
        let result = CooperativeSticky.assign(&partitions, &members);
        check_cooperative(&members, &result);
        // t-1 has no valid owner: it goes to someone, but only after both let go of it.
        assert!(!result.values().flatten().any(|p| *p == tp("t", 1)));
        assert!(result["a"].contains(&tp("t", 0)));
        assert!(result["b"].contains(&tp("t", 2)));
    }

    #[test]
    fn generation_falls_back_to_user_data() {
        let mut old = owning("a", &["t"], &tps(&[("t", 0)]), -1);
        old.subscription.user_data = CooperativeSticky.subscription_user_data(9);
        assert_eq!(member_generation(&old.subscription), 9);
        let newer = owning("b", &["t"], &tps(&[("t", 0)]), 7);
        let partitions = topics(&[("t", 2)]);
        let result = CooperativeSticky.assign(&partitions, &[old.clone(), newer]);
        assert_eq!(result["a"], tps(&[("t", 0)]));

        old.subscription.user_data = Some(Bytes::from_static(b"\x01"));
        assert_eq!(member_generation(&old.subscription), DEFAULT_GENERATION);
        old.subscription.user_data = None;
        assert_eq!(member_generation(&old.subscription), DEFAULT_GENERATION);
    }

    #[test]
    fn unsubscribed_topics_are_revoked_and_not_given_away_the_same_round() {
        let partitions = topics(&[("t", 2), ("u", 2)]);
        // a owned u but now only subscribes to t; b subscribes to u.
        let members = [
            owning("a", &["t"], &tps(&[("u", 0), ("u", 1)]), 2),
            owning("b", &["t", "u"], &tps(&[]), 2),
        ];
        let first = CooperativeSticky.assign(&partitions, &members);
        check_valid(&partitions, &members, &first);
        check_cooperative(&members, &first);
        assert!(first["b"].iter().all(|p| p.topic() == "t"));
        let second = CooperativeSticky.assign(&partitions, &next_round(&members, &first, 3));
        check_complete(&partitions, &members, &second);
        assert_eq!(second["b"].iter().filter(|p| p.topic() == "u").count(), 2);
    }

    #[test]
    fn general_case_keeps_owned_partitions() {
        // a: t0, t1; b: t1; c: t1, t2. A stable assignment is kept as is.
        let partitions = topics(&[("t0", 2), ("t1", 3), ("t2", 1)]);
        let members = [
            owning("a", &["t0", "t1"], &tps(&[("t0", 0), ("t0", 1)]), 1),
            owning("b", &["t1"], &tps(&[("t1", 0), ("t1", 1)]), 1),
            owning("c", &["t1", "t2"], &tps(&[("t1", 2), ("t2", 0)]), 1),
        ];
        let result = CooperativeSticky.assign(&partitions, &members);
        for m in &members {
            assert_eq!(result[&m.member_id], m.subscription.owned_partitions);
        }
    }

    /// Σ size² and kept count of an assignment given as (partition -> member index) choices.
    fn score(group: &Group<'_>, assignment: &[Vec<(usize, i32)>]) -> (usize, usize) {
        let squares = assignment.iter().map(|a| a.len() * a.len()).sum();
        let kept = assignment
            .iter()
            .enumerate()
            .map(|(m, a)| a.iter().filter(|x| group.keepable[m].contains(x)).count())
            .sum();
        (squares, kept)
    }

    #[test]
    fn optimal_against_brute_force_on_small_groups() {
        // Every way to place up to 7 partitions over up to 3 members: the assignment before the
        // cooperative adjustment must have the least Σ size², and among those the most kept.
        let (mut checked, mut general) = (0, 0);
        for_random_groups_up_to(2000, 0x5eed_0004, (3, 3, 3), |case| {
            let members = unique_members(&case.members);
            let group = Group::new(&case.partitions, &members);
            let all: Vec<(usize, i32)> = group
                .counts
                .iter()
                .enumerate()
                .flat_map(|(t, &c)| (0..c as i32).map(move |p| (t, p)))
                .collect();
            if members.len() > 3 || all.len() > 7 {
                return;
            }
            checked += 1;
            if group
                .subscriptions
                .iter()
                .any(|s| *s != group.subscriptions[0])
            {
                general += 1;
            }
            let eligible: Vec<Vec<usize>> = all
                .iter()
                .map(|&(t, _)| {
                    (0..members.len())
                        .filter(|&m| group.subscriptions[m].contains(&t))
                        .collect()
                })
                .collect();
            let mut best: Option<(usize, Reverse<usize>)> = None;
            let mut choice = vec![0usize; all.len()];
            loop {
                let mut assignment = vec![Vec::new(); members.len()];
                for (i, &c) in choice.iter().enumerate() {
                    assignment[eligible[i][c]].push(all[i]);
                }
                let (squares, kept) = score(&group, &assignment);
                let candidate = (squares, Reverse(kept));
                if best.is_none_or(|b| candidate < b) {
                    best = Some(candidate);
                }
                // Next combination.
                let mut i = 0;
                while i < all.len() {
                    choice[i] += 1;
                    if choice[i] < eligible[i].len() {
                        break;
                    }
                    choice[i] = 0;
                    i += 1;
                }
                if i == all.len() {
                    break;
                }
            }
            let ours = group.sticky_balanced();
            let (squares, kept) = score(&group, &ours);
            assert_eq!(Some((squares, Reverse(kept))), best, "{ours:?}");
        });
        assert!(checked > 1000, "only {checked} small cases");
        assert!(general > 300, "only {general} small general cases");
    }

    #[test]
    fn randomized_properties_over_two_rounds() {
        for_random_groups(1500, 0x5eed_0003, |case| {
            let partitions = &case.partitions;
            let first = CooperativeSticky.assign(partitions, &case.members);
            check_valid(partitions, &case.members, &first);
            check_cooperative(&case.members, &first);
            check_deterministic(&CooperativeSticky, case);

            // Sticky: a member keeps every unambiguously owned partition of a subscribed topic
            // up to the smaller share.
            if case.equal_subscriptions() {
                let members = unique_members(&case.members);
                let group = Group::new(partitions, &members);
                let total: usize = group.counts.iter().sum();
                let min_share = total / members.len().max(1);
                for (m, member) in members.iter().enumerate() {
                    let kept = first[&member.member_id]
                        .iter()
                        .filter(|p| {
                            group.keepable[m]
                                .iter()
                                .any(|&(t, q)| group.topics[t] == p.topic() && q == p.partition)
                        })
                        .count();
                    assert!(kept >= group.keepable[m].len().min(min_share));
                }
            }

            // The follow-up rebalance, everyone having revoked what it lost.
            let members = next_round(&case.members, &first, 10);
            let second = CooperativeSticky.assign(partitions, &members);
            check_valid(partitions, &members, &second);
            check_complete(partitions, &members, &second);
            check_cooperative(&members, &second);
            for m in &members {
                let kept = &first[&m.member_id];
                assert!(
                    kept.iter().all(|p| second[&m.member_id].contains(p)),
                    "{} lost partitions in the follow-up round",
                    m.member_id
                );
            }
            check_locally_balanced(&members, &second);
            if case.equal_subscriptions() {
                check_balanced_within(&second, 1);
            }
            // And it is stable from there.
            let third = CooperativeSticky.assign(partitions, &next_round(&members, &second, 11));
            assert_eq!(third, second);
        });
    }

    #[test]
    fn hundred_members_thousand_partitions_is_fast() {
        assert_fast(&CooperativeSticky);
    }

    #[test]
    fn hundred_members_thousand_partitions_with_churn_is_fast() {
        // A stable group of 100 owning 1000 partitions; 10 leave and 10 join, and in the
        // general-case variant every member subscribes to all but one topic.
        for general in [false, true] {
            let topic_names: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
            let partitions: BTreeMap<String, i32> =
                topic_names.iter().map(|t| (t.clone(), 100)).collect();
            let all: Vec<TopicPartition> = topic_names
                .iter()
                .flat_map(|t| (0..100).map(move |p| TopicPartition::new(t.as_str(), p)))
                .collect();
            let members: Vec<MemberMetadata> = (0..100)
                .map(|i| {
                    let topics: Vec<&str> = topic_names
                        .iter()
                        .map(String::as_str)
                        .filter(|t| !general || *t != topic_names[i % 10])
                        .collect();
                    let owned: Vec<TopicPartition> = all
                        .iter()
                        .filter(|tp| {
                            (tp.partition as usize) % 100 == i && topics.contains(&tp.topic())
                        })
                        .cloned()
                        .collect();
                    if i < 10 {
                        member(&format!("new-{i:03}"), &topics)
                    } else {
                        owning(&format!("member-{i:03}"), &topics, &owned, 7)
                    }
                })
                .collect();
            let first = CooperativeSticky.assign(&partitions, &members);
            check_valid(&partitions, &members, &first);
            check_cooperative(&members, &first);
            let second = CooperativeSticky.assign(&partitions, &next_round(&members, &first, 8));
            check_complete(&partitions, &members, &second);
            check_balanced_within(&second, 1);
        }
    }
}
