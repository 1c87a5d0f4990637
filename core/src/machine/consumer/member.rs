//! The consumer member's state machine: the KIP-848 protocol's own part of an
//! [`EpochMember`]; its rules are the docs of the parent module.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, RequestKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::error::{ApiMisuse, GroupError};
use crate::machine::TopicPartition;
use crate::machine::epoch::{EpochMember, EpochProtocol, Phase, epoch_answer, raw_heartbeat};
use crate::machine::events::{CloseOptions, CommitId, CommitOffset, Event, FetchId, Reason};
use crate::machine::session;
use crate::machine::shell::{Skeleton, millis};

use crate::machine::topic_ids::IdAssignment;
use crate::request::Request;

/// ConsumerGroupHeartbeat v1: client-generated member ids are mandatory (KIP-1082).
const HEARTBEAT_VERSIONS: std::ops::RangeInclusive<i16> = 1..=1;

/// The fields a heartbeat carried; once answered they are what the broker knows, so later
/// heartbeats leave unchanged fields out (protocol.md §6.3).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SentFields {
    topics: Option<Vec<String>>,
    regex: Option<String>,
    rebalance_timeout: i32,
    assignor: Option<String>,
    owned: BTreeSet<(Uuid, i32)>,
}

/// The KIP-848 consumer protocol's part of a [`ConsumerMember`]: its subscription, its
/// partitions by topic id, and what the broker knows of them.
#[derive(Debug, Default)]
pub struct ConsumerProtocol {
    /// Test only: the Java reset policy a classic member built by the `auto` fallback runs.
    #[cfg(feature = "sim")]
    pub(crate) java_reset_policy: bool,
    topics: BTreeSet<String>,
    regex: Option<String>,
    /// Owned and target partitions by topic id, and the topic names.
    ids: IdAssignment,
    /// What the broker knows; `None` makes the next heartbeat full.
    known: Option<SentFields>,
    /// The owned partitions as of the last answered heartbeat (what the broker last read from
    /// this member). Unlike the other known fields it survives a failed heartbeat.
    acked_owned: Option<BTreeSet<(Uuid, i32)>>,
}

/// A KIP-848 consumer-protocol member (sans-IO), with the same inputs, outputs and events as
/// [`ClassicMember`](crate::machine::classic::ClassicMember); its state diagram and identity
/// rules are the docs of [`machine::consumer`](crate::machine::consumer), what it shares with
/// the other epoch-heartbeat members those of [`machine::epoch`](crate::machine::epoch).
pub type ConsumerMember = EpochMember<ConsumerProtocol>;

epoch_answer!(kafka ConsumerGroupHeartbeat: ConsumerGroupHeartbeatResponse);

impl EpochProtocol for ConsumerProtocol {
    const SESSION: session::Keys = session::CONSUMER;
    /// What the heartbeat carried, and whether it listed the owned partitions (full, or they
    /// changed).
    type Heartbeat = (SentFields, bool);
    type Revoking = BTreeSet<(Uuid, i32)>;
    type Answer = ConsumerGroupHeartbeatResponse;

    fn unsupported() -> GroupError {
        GroupError::ConsumerProtocolUnsupported
    }

    fn heartbeat(m: &mut ConsumerMember) -> (Request, Self::Heartbeat) {
        m.heartbeat_request()
    }

    fn leave(m: &ConsumerMember, epoch: i32) -> Request {
        heartbeat_request(m.base_heartbeat(epoch))
    }

    fn reported_owned(sent: &Self::Heartbeat) -> bool {
        sent.1
    }

    fn answered(
        m: &mut ConsumerMember,
        sent_epoch: i32,
        (fields, _): Self::Heartbeat,
        r: ConsumerGroupHeartbeatResponse,
    ) {
        m.accept(r.member_epoch);
        let p = &mut m.proto;
        // What this heartbeat carried is what the broker knows now.
        let mut known = p.known.take().unwrap_or_default();
        if sent_epoch == 0 {
            known = fields;
        } else {
            known.rebalance_timeout = fields.rebalance_timeout;
            known.topics = fields.topics;
            known.regex = fields.regex;
            known.assignor = fields.assignor;
            known.owned = fields.owned;
        }
        p.acked_owned = Some(known.owned.clone());
        p.known = Some(known);
        if let Some(a) = r.assignment {
            let topics = a.topic_partitions.iter();
            p.ids
                .set_target(topics.map(|t| (t.topic_id, &t.partitions[..])));
        }
    }

    fn reconcile(m: &mut ConsumerMember) {
        m.reconcile();
    }

    fn forget_sent(&mut self, _refused: bool) {
        self.known = None;
    }

    fn reset(&mut self) {
        self.known = None;
        self.acked_owned = None;
        self.ids.target = None;
    }

    fn subscribed(&self) -> bool {
        !self.topics.is_empty() || self.regex.is_some()
    }

    fn unsubscribed(&mut self) {
        self.topics.clear();
        self.regex = None;
    }

    fn revoked(m: &mut ConsumerMember, revoking: Self::Revoking) {
        for tp in revoking {
            m.proto.ids.owned.remove(&tp);
        }
    }

    fn release_except(m: &mut ConsumerMember, revoking: &Self::Revoking) {
        let p = &mut m.proto.ids;
        let released: Vec<(Uuid, i32)> = (p.owned.iter())
            .filter(|tp| !revoking.contains(tp))
            .cloned()
            .collect();
        if !released.is_empty() {
            let partitions = released.iter().filter_map(|tp| p.named(tp)).collect();
            for tp in &released {
                p.owned.remove(tp);
            }
            m.shell.events.push_back(Event::Revoked { partitions });
        }
    }

    // Everything the application holds, the partitions of an outstanding revocation ticket
    // included: a member that is fenced or leaves on a poll timeout while the application still
    // revokes them has lost those too (the broker drops their pending revocation), as the Java
    // client's onPartitionsLost covers them. Released partitions leave `owned` before this runs
    // (`complete_revocation`, `release_except`), so a release never names a ticket's partitions.
    fn take_owned(m: &mut ConsumerMember) -> Vec<TopicPartition> {
        m.proto.ids.take_owned()
    }

    /// What the member may commit: what it owns (the partitions being revoked stay owned until
    /// the ticket is back).
    fn ids(&self) -> Option<&IdAssignment> {
        Some(&self.ids)
    }

    fn ids_mut(&mut self) -> Option<&mut IdAssignment> {
        Some(&mut self.ids)
    }

    // Subscribed by names: those topics; by pattern: every topic.
    fn metadata_topics(&self) -> Option<Vec<String>> {
        (self.regex.is_none()).then(|| self.topics.iter().cloned().collect())
    }

    fn committable(m: &ConsumerMember) -> BTreeSet<TopicPartition> {
        let p = &m.proto.ids;
        p.owned.iter().filter_map(|tp| p.named(tp)).collect()
    }
}

/// ConsumerGroupHeartbeat `r`, as the member sends it.
fn heartbeat_request(r: ConsumerGroupHeartbeatRequest) -> Request {
    raw_heartbeat(RequestKind::ConsumerGroupHeartbeat(r), HEARTBEAT_VERSIONS)
}

impl ConsumerMember {
    // ------------------------------------------------------------------ accessors

    /// Owned partitions, by name (partitions of topics not yet resolved are not owned yet).
    pub fn assignment(&self) -> Vec<TopicPartition> {
        let revoking = self.revoking();
        let p = &self.proto.ids;
        p.names_of(
            p.owned
                .iter()
                .filter(|tp| revoking.is_none_or(|r| !r.contains(tp))),
        )
    }

    /// The subscription (topic names), for a fallback to the classic protocol.
    pub fn topics(&self) -> Vec<String> {
        self.proto.topics.iter().cloned().collect()
    }

    /// The regex subscription (`subscribe_regex`), if that is how the member is subscribed.
    pub fn regex(&self) -> Option<&str> {
        self.proto.regex.as_deref()
    }

    // ------------------------------------------------------------------ commands

    /// Subscribes to `topics` by name and joins (or tells the coordinator the new subscription).
    ///
    /// Errors with [`ApiMisuse::Stopped`] once [`close`](Self::close) was called (the close goes
    /// on) or the member stopped, and with [`ApiMisuse::EmptySubscription`] without topics.
    pub fn subscribe(
        &mut self,
        topics: impl IntoIterator<Item = String>,
        now: Instant,
    ) -> Result<(), ApiMisuse> {
        self.subscribe_names(topics, now, |p, topics| {
            p.topics = topics;
            p.regex = None;
        })
    }

    /// Subscribes by a server-side regular expression (RE2/J syntax, `SubscribedTopicRegex`, v1).
    /// Errors as [`subscribe`](Self::subscribe) does.
    ///
    /// Only the consumer protocol evaluates a regex: with `group.protocol=auto`, a broker that
    /// refuses the consumer protocol stops the member with
    /// [`GroupError::RegexNeedsConsumerProtocol`] instead of falling back to classic (see
    /// [`Member::poll_event`](crate::machine::member::Member::poll_event)).
    pub fn subscribe_regex(
        &mut self,
        pattern: impl Into<String>,
        now: Instant,
    ) -> Result<(), ApiMisuse> {
        self.shell.advance(now);
        if self.closing() {
            return Err(ApiMisuse::Stopped);
        }
        let pattern = pattern.into();
        if pattern.trim().is_empty() {
            return Err(ApiMisuse::EmptySubscription);
        }
        self.proto.topics.clear();
        self.proto.regex = Some(pattern);
        // By pattern the metadata would be every topic's: fetched only for ids assigned.
        self.proto.ids.prefetch = false;
        self.start(now);
        Ok(())
    }

    /// Leaves the subscription: the application releases its partitions ([`Event::Revoked`]) and
    /// the member leaves (-1; -2 for a static member, which keeps its partitions at the broker for
    /// a return within the session timeout).
    ///
    /// Does nothing once [`close`](Self::close) was called: the close goes on as asked (also a
    /// close waiting for a revocation ticket).
    pub fn unsubscribe(&mut self, now: Instant) {
        self.leave_subscription(CloseOptions::Default, now);
    }

    /// Fetches committed offsets (OffsetFetch v9 with member id and epoch while in the group).
    pub fn fetch_offsets(&mut self, partitions: Vec<TopicPartition>, now: Instant) -> FetchId {
        self.queue_fetch(partitions, now)
    }

    /// Commits `offsets` with the member id and epoch (OffsetCommit v9). Outside the group:
    /// [`CommitError::NotMember`](crate::error::CommitError::NotMember) at once.
    pub fn commit(&mut self, offsets: Vec<CommitOffset>, now: Instant) -> CommitId {
        self.commit_offsets(offsets, now)
    }

    // ------------------------------------------------------------------ reconciliation

    /// Revoke first, then assign, then acknowledge (AbstractMembershipManager.maybeReconcile).
    fn reconcile(&mut self) {
        let Some(step) = self.next_step() else {
            return;
        };
        let p = &self.proto.ids;
        let (revoked, added) = (step.revoked, step.added);
        if !revoked.is_empty() {
            let partitions = revoked.iter().filter_map(|tp| p.named(tp)).collect();
            return self.start_revocation(revoked, |m, ticket| {
                (m.shell.events).push_back(Event::Revoking { partitions, ticket })
            });
        }
        if !added.is_empty() && self.report_pending() {
            // Take them once that heartbeat is answered (see `report_pending`).
            return self.set_phase(Phase::Reconciling, Reason::AwaitingHeartbeat);
        }
        if !added.is_empty() || matches!(self.phase, Phase::Joining) {
            self.proto.ids.owned.extend(added.iter().cloned());
            let added = added
                .iter()
                .filter_map(|tp| self.proto.ids.named(tp))
                .collect();
            self.shell.events.push_back(Event::Assigned {
                added,
                owned: self.assignment(),
                generation: self.epoch,
            });
        }
        let p = &self.proto;
        let acked = p.known.as_ref().is_some_and(|k| k.owned == p.ids.owned);
        let waiting = step.unresolved.then_some(Reason::AwaitingTopicMetadata);
        self.reconciled(acked, waiting);
    }

    // ------------------------------------------------------------------ requests

    fn base_heartbeat(&self, epoch: i32) -> ConsumerGroupHeartbeatRequest {
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(self.shell.group_id())
            .with_member_id(StrBytes::from_string(self.member_id.to_string()))
            .with_member_epoch(epoch)
            // The Java client always sends the instance id, though the schema allows leaving it out.
            .with_instance_id(
                self.shell
                    .config
                    .instance_id
                    .clone()
                    .map(StrBytes::from_string),
            )
            .with_rebalance_timeout_ms(-1)
    }

    /// Full when joining or after any failure (the known fields were reset), else only what
    /// changed since the broker last answered (HeartbeatState.buildRequestData).
    fn heartbeat_request(&mut self) -> (Request, (SentFields, bool)) {
        let p = &self.proto;
        let full = self.epoch == 0 || p.known.is_none();
        let known = if full {
            SentFields::default()
        } else {
            p.known.clone().unwrap_or_default()
        };
        let fields = SentFields {
            topics: p
                .regex
                .is_none()
                .then(|| p.topics.iter().cloned().collect()),
            regex: p.regex.clone(),
            rebalance_timeout: millis(self.shell.config.max_poll_interval),
            assignor: self.shell.config.remote_assignor.clone(),
            owned: p.ids.owned.clone(),
        };
        let mut r = self.base_heartbeat(self.epoch);
        if full || fields.rebalance_timeout != known.rebalance_timeout {
            r.rebalance_timeout_ms = fields.rebalance_timeout;
        }
        let names = |ts: &[String]| {
            ts.iter()
                .map(|t| TopicName(StrBytes::from_string(t.clone())))
                .collect()
        };
        if full {
            r.subscribed_topic_names = fields.topics.as_deref().map(names);
        } else if fields.topics != known.topics {
            // Null would mean "unchanged": an empty list clears names the broker knows when the
            // member switched to a pattern.
            r.subscribed_topic_names = Some(names(fields.topics.as_deref().unwrap_or_default()));
        }
        if full && fields.regex.is_some() || fields.regex != known.regex {
            // "" clears a pattern the broker knows when the member switched to names.
            r.subscribed_topic_regex = Some(StrBytes::from_string(
                fields.regex.clone().unwrap_or_default(),
            ));
        }
        if (full || fields.assignor != known.assignor) && fields.assignor.is_some() {
            r.server_assignor = fields.assignor.clone().map(StrBytes::from_string);
        }
        // The owned partitions go out when joining or when they differ from what the broker last
        // read from this member; unlike the Java client, not again in every full heartbeat after
        // a failure. A heartbeat that failed in the transport may still be processed late, after
        // newer ones, at the previous epoch, which the broker accepts as a retry; a stale owned
        // list in it would read as revocations done (CurrentAssignmentBuilder) and free
        // partitions this member has taken since. The broker already holds an unchanged list.
        let list_owned = self.epoch == 0 || p.acked_owned.as_ref() != Some(&fields.owned);
        if list_owned {
            let mut by_topic: BTreeMap<Uuid, Vec<i32>> = BTreeMap::new();
            for (id, p) in &fields.owned {
                by_topic.entry(*id).or_default().push(*p);
            }
            r.topic_partitions = Some(
                by_topic
                    .into_iter()
                    .map(|(id, ps)| {
                        TopicPartitions::default()
                            .with_topic_id(id)
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        }
        if self.epoch == 0 {
            r.rack_id = self.shell.config.rack_id.clone().map(StrBytes::from_string);
        }
        let reported_owned = r.topic_partitions.is_some();
        (heartbeat_request(r), (fields, reported_owned))
    }
}
