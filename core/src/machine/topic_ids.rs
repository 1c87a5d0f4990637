//! Assignments by topic id (KIP-848 consumer groups and KIP-932 share groups assign
//! `(topic id, partition)`): what the member owns and is targeted, and the topic names Metadata
//! answers taught it. A partition of a topic whose name is not known yet is carried in the target
//! until a Metadata answer names it; it is never owned before.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use uuid::Uuid;

use crate::error::ApiMisuse;
use crate::machine::TopicPartition;
use crate::machine::epoch::{EpochMember, EpochProtocol, Phase, Sent};
use crate::machine::events::Reason;
use crate::machine::metadata::ClusterMetadata;
use crate::machine::shell::Skeleton;
use crate::machine::timer::{Timer, after};
use crate::request::{Outbound, Reply};

/// A partition by topic id.
pub(crate) type IdPartition = (Uuid, i32);

/// What an id-assigned member holds, is targeted, and knows of topic names.
#[derive(Debug, Default)]
pub struct IdAssignment {
    /// Owned partitions by topic id (what acknowledgements carry).
    pub(crate) owned: BTreeSet<IdPartition>,
    /// The latest target assignment from the coordinator, sanitised (shared with a
    /// reconciliation rather than copied).
    pub(crate) target: Option<Arc<BTreeSet<IdPartition>>>,
    /// Topic names by id, each shared by the partitions named with it.
    names: BTreeMap<Uuid, Arc<str>>,
    metadata_in_flight: bool,
    /// Ask for the subscribed topics' metadata right after the coordinator lookup: the broker
    /// assigns by topic id, and knowing the names before the first assignment arrives saves a
    /// round trip on the join and rejoin path.
    pub(crate) prefetch: bool,
}

/// One step towards the target: what to give up, what can be taken (named), and which topic
/// ids still have no name.
#[derive(Debug)]
pub(crate) struct Step {
    pub(crate) revoked: BTreeSet<IdPartition>,
    pub(crate) added: Vec<IdPartition>,
    pub(crate) unresolved: bool,
}

impl IdAssignment {
    /// `tp` by name, once its topic's name is known.
    pub(crate) fn named(&self, (id, p): &IdPartition) -> Option<TopicPartition> {
        self.names.get(id).map(|n| TopicPartition::new(n, *p))
    }

    /// `partitions` by name, those of unnamed topics left out, sorted.
    pub(crate) fn names_of<'a>(
        &self,
        partitions: impl IntoIterator<Item = &'a IdPartition>,
    ) -> Vec<TopicPartition> {
        let mut v: Vec<TopicPartition> = partitions
            .into_iter()
            .filter_map(|tp| self.named(tp))
            .collect();
        v.sort();
        v
    }

    /// Whether a topic named `topic` has a known id.
    pub(crate) fn knows_name(&self, topic: &str) -> bool {
        self.names.values().any(|n| **n == *topic)
    }

    /// Records a new target: `(topic id, partitions)` pairs as the coordinator sent them,
    /// sanitised (sorted, no duplicates, no negative partitions).
    pub(crate) fn set_target<'a>(&mut self, topics: impl IntoIterator<Item = (Uuid, &'a [i32])>) {
        let target = topics
            .into_iter()
            .flat_map(|(id, ps)| ps.iter().filter(|p| **p >= 0).map(move |p| (id, *p)))
            .collect();
        self.target = Some(Arc::new(target));
    }

    /// Everything owned, by name; nothing is owned after.
    pub(crate) fn take_owned(&mut self) -> Vec<TopicPartition> {
        let partitions = self.names_of(&self.owned);
        self.owned.clear();
        partitions
    }

    /// The next step from what is owned towards `target`.
    pub(crate) fn step(&self, target: &BTreeSet<IdPartition>) -> Step {
        let unresolved = target.iter().any(|(id, _)| !self.names.contains_key(id));
        let revoked = self.owned.difference(target).cloned().collect();
        let added = target
            .iter()
            .filter(|tp| self.names.contains_key(&tp.0) && !self.owned.contains(tp))
            .cloned()
            .collect();
        Step {
            revoked,
            added,
            unresolved,
        }
    }
}

/// The topic-name lookups of a member whose protocol assigns by topic id
/// ([`EpochProtocol::ids`]); for any other protocol these do nothing.
impl<P: EpochProtocol> EpochMember<P> {
    /// Asks for topic metadata, unless a request is in flight already.
    pub(crate) fn request_metadata(&mut self) {
        let Some(ids) = self.proto.ids_mut() else {
            return;
        };
        if ids.metadata_in_flight {
            return;
        }
        ids.metadata_in_flight = true;
        let topics = self.proto.metadata_topics();
        self.shell.send_metadata(topics, Sent::Metadata);
    }

    /// The metadata prefetch asked for when the member subscribed, sent first once the member
    /// has anything to do (`needed`).
    pub(crate) fn prefetch(&mut self, needed: bool) -> Option<Outbound> {
        let ids = self.proto.ids_mut()?;
        if !(ids.prefetch && needed) {
            return None;
        }
        ids.prefetch = false;
        self.request_metadata();
        self.shell.outbound.pop_front()
    }

    /// Whether the member acts on `timer` now: no metadata refresh while a request is in flight.
    pub(crate) fn ids_act_on(&self, timer: Timer) -> bool {
        timer != Timer::MetadataRefresh
            || !self.proto.ids().is_some_and(|ids| ids.metadata_in_flight)
    }

    /// A Metadata answer: the names it teaches; ids still unknown are asked for again after
    /// `retry.backoff.max.ms`; a member in the group reconciles.
    pub(crate) fn on_metadata(&mut self, result: Reply) {
        let Some(ids) = self.proto.ids_mut() else {
            return;
        };
        ids.metadata_in_flight = false;
        match result
            .map_err(|e| e.to_string())
            .and_then(|r| ClusterMetadata::from_response(&r).map_err(|e| e.to_string()))
        {
            Ok(m) => {
                for (name, t) in m.topics {
                    if !t.id.is_nil() {
                        // A name already known stays shared with the partitions named with it.
                        if ids.names.get(&t.id).is_none_or(|n| **n != *name) {
                            ids.names.insert(t.id, name.into());
                        }
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "metadata for topic ids failed"),
        }
        let unresolved = (ids.target.as_ref())
            .is_some_and(|t| t.iter().any(|(id, _)| !ids.names.contains_key(id)));
        if unresolved {
            let at = after(self.shell.now, self.shell.config.retry_backoff_max);
            self.shell.timers.set(Timer::MetadataRefresh, at);
        }
        if matches!(
            self.phase,
            Phase::Reconciling | Phase::Stable | Phase::Acknowledging
        ) {
            P::reconcile(self);
        }
    }

    /// Subscribes to `topics` by name (`set` stores them in the protocol) and joins, or tells
    /// the coordinator the new subscription. Joining, the names of the subscribed topics are
    /// needed as soon as the first assignment arrives, so they are asked for right behind the
    /// coordinator lookup (a member in the group resolves new ids when they come).
    pub(crate) fn subscribe_names(
        &mut self,
        topics: impl IntoIterator<Item = String>,
        now: Instant,
        set: impl FnOnce(&mut P, BTreeSet<String>),
    ) -> Result<(), ApiMisuse> {
        let topics = self.subscription(topics, now)?;
        let joining = matches!(self.phase, Phase::Unsubscribed | Phase::Stale);
        if let Some(ids) = self.proto.ids_mut() {
            ids.prefetch = joining && topics.iter().any(|t| !ids.knows_name(t));
        }
        set(&mut self.proto, topics);
        self.start(now);
        Ok(())
    }

    /// The next step towards the target, the names of its unnamed topics asked for (unless a
    /// refresh is already timed); `None` without a target, when a joining member is stable.
    pub(crate) fn next_step(&mut self) -> Option<Step> {
        let step =
            (self.proto.ids()).and_then(|ids| ids.target.as_ref().map(|target| ids.step(target)));
        let Some(step) = step else {
            if matches!(self.phase, Phase::Joining) {
                self.set_phase(Phase::Stable, Reason::Joined);
            }
            return None;
        };
        if step.unresolved && self.shell.timers.get(Timer::MetadataRefresh).is_none() {
            self.request_metadata();
        }
        Some(step)
    }

    /// The metadata refresh timer fired: reconcile (which asks again) in the group.
    pub(crate) fn metadata_refresh_due(&mut self) {
        if self.proto.ids().is_some()
            && self.shell.expired(Timer::MetadataRefresh)
            && matches!(
                self.phase,
                Phase::Reconciling | Phase::Stable | Phase::Acknowledging
            )
        {
            P::reconcile(self);
        }
    }
}
