//! The share member's state machine: the KIP-932 protocol's own part of an [`EpochMember`]; its
//! rules are the docs of the parent module.

use std::collections::BTreeSet;
use std::time::Instant;

use kafka_protocol::messages::{
    RequestKind, ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::config::GroupConfig;
use crate::error::{ApiMisuse, ConfigError, GroupError, codes};
use crate::machine::TopicPartition;
use crate::machine::epoch::{EpochMember, EpochProtocol, Phase, epoch_answer, raw_heartbeat};
use crate::machine::events::{CloseOptions, Event, Reason};
use crate::machine::session;

use crate::machine::topic_ids::IdAssignment;
use crate::request::Request;

/// ShareGroupHeartbeat v1 (v0 was the early-access version of Kafka 4.0, removed in 4.1).
const HEARTBEAT_VERSIONS: std::ops::RangeInclusive<i16> = 1..=1;

/// The KIP-932 share protocol's part of a [`ShareMember`]: its subscription, its partitions by
/// topic id, and the subscription the broker knows.
#[derive(Debug, Default)]
pub struct ShareProtocol {
    topics: BTreeSet<String>,
    ids: IdAssignment,
    /// The subscription the broker last read; `None` makes the next heartbeat full.
    known_topics: Option<Vec<String>>,
}

/// A KIP-932 share-group member (sans-IO): the same inputs and outputs as the other members;
/// its events are [`Event::Assigned`], [`Event::Revoked`] (a partition the target dropped,
/// released at once) and [`Event::Lost`], with the state changes. Its rules are the docs of
/// [`machine::share`](crate::machine::share), what it shares with the other epoch-heartbeat
/// members those of [`machine::epoch`](crate::machine::epoch).
pub type ShareMember = EpochMember<ShareProtocol>;

epoch_answer!(kafka ShareGroupHeartbeat: ShareGroupHeartbeatResponse);

impl EpochProtocol for ShareProtocol {
    const SESSION: session::Keys = session::SHARE;
    /// The subscription the heartbeat carried, if it carried one.
    type Heartbeat = Option<Vec<String>>;
    /// Never used: a share member revokes nothing with a ticket.
    type Revoking = ();
    type Answer = ShareGroupHeartbeatResponse;

    /// Share groups have no static membership: the heartbeat has no instance id field.
    fn validate(&self, config: &GroupConfig) -> Result<(), ConfigError> {
        if config.instance_id.is_some() {
            return Err(ConfigError {
                key: "group.instance.id",
                rule: "share groups have no static membership (KIP-932); leave it unset".into(),
            });
        }
        Ok(())
    }

    fn unsupported() -> GroupError {
        GroupError::ShareProtocolUnsupported
    }

    /// GROUP_ID_NOT_FOUND answering a join: the id names a group of another type
    /// (`getOrMaybeCreateShareGroup`); a join cannot fix that. In the group, the table's rule
    /// (rejoin) applies.
    fn own_error(m: &ShareMember, a: &ShareGroupHeartbeatResponse) -> Option<GroupError> {
        (a.error_code == codes::GROUP_ID_NOT_FOUND && m.epoch() == 0).then(|| {
            GroupError::GroupIdNotFound {
                group: m.config().group_id.clone(),
                message: a.error_message.as_ref().map(|s| s.to_string()),
            }
        })
    }

    fn heartbeat(m: &mut ShareMember) -> (Request, Self::Heartbeat) {
        m.heartbeat_request()
    }

    fn leave(m: &ShareMember, epoch: i32) -> Request {
        heartbeat_request(m.base_heartbeat(epoch))
    }

    fn reported_owned(_sent: &Self::Heartbeat) -> bool {
        false
    }

    fn answered(
        m: &mut ShareMember,
        _sent_epoch: i32,
        sent: Self::Heartbeat,
        r: ShareGroupHeartbeatResponse,
    ) {
        m.accept(r.member_epoch);
        let p = &mut m.proto;
        if sent.is_some() {
            p.known_topics = sent;
        }
        if let Some(a) = r.assignment {
            let topics = a.topic_partitions.iter();
            (p.ids).set_target(topics.map(|t| (t.topic_id, &t.partitions[..])));
        }
    }

    fn forget_sent(&mut self, _refused: bool) {
        self.known_topics = None;
    }

    fn subscribed(&self) -> bool {
        !self.topics.is_empty()
    }

    fn unsubscribed(&mut self) {
        self.topics.clear();
    }

    fn revoked(_m: &mut ShareMember, _revoking: ()) {}

    fn release_except(_m: &mut ShareMember, _revoking: &()) {}

    fn ids(&self) -> Option<&IdAssignment> {
        Some(&self.ids)
    }

    fn ids_mut(&mut self) -> Option<&mut IdAssignment> {
        Some(&mut self.ids)
    }

    fn metadata_topics(&self) -> Option<Vec<String>> {
        Some(self.topics.iter().cloned().collect())
    }

    fn reconcile(m: &mut ShareMember) {
        m.reconcile();
    }

    fn take_owned(m: &mut ShareMember) -> Vec<TopicPartition> {
        m.proto.ids.take_owned()
    }
}

/// ShareGroupHeartbeat `r`, as the member sends it.
fn heartbeat_request(r: ShareGroupHeartbeatRequest) -> Request {
    raw_heartbeat(RequestKind::ShareGroupHeartbeat(r), HEARTBEAT_VERSIONS)
}

impl ShareMember {
    /// The partitions assigned to this member, by name (those of topics whose name is not known
    /// yet are not assigned yet). Other members may be assigned the same ones.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        let p = &self.proto.ids;
        p.names_of(&p.owned)
    }

    /// The subscription (topic names).
    pub fn topics(&self) -> Vec<String> {
        self.proto.topics.iter().cloned().collect()
    }

    /// Subscribes to `topics` by name and joins (or tells the coordinator the new subscription).
    ///
    /// Errors with [`ApiMisuse::Stopped`] once [`close`](Self::close) was called or the member
    /// stopped, and with [`ApiMisuse::EmptySubscription`] without topics.
    pub fn subscribe(
        &mut self,
        topics: impl IntoIterator<Item = String>,
        now: Instant,
    ) -> Result<(), ApiMisuse> {
        self.subscribe_names(topics, now, |p, topics| p.topics = topics)
    }

    /// Leaves the subscription: the partitions are released ([`Event::Revoked`]) and the member
    /// leaves (epoch -1). Does nothing once [`close`](Self::close) was called.
    pub fn unsubscribe(&mut self, now: Instant) {
        self.leave_subscription(CloseOptions::Default, now);
    }

    /// Moves to the target at once: what it dropped is released, then what it adds (of named
    /// topics) is taken. Nothing needs acknowledging: the coordinator set the member's
    /// assignment to the target when it answered (a share group's assignment is not exclusive).
    fn reconcile(&mut self) {
        let Some(step) = self.next_step() else {
            return;
        };
        let ids = &mut self.proto.ids;
        if !step.revoked.is_empty() {
            let partitions = ids.names_of(&step.revoked);
            for tp in &step.revoked {
                ids.owned.remove(tp);
            }
            self.shell.report_revoked(partitions);
        }
        let ids = &mut self.proto.ids;
        if !step.added.is_empty() || matches!(self.phase, Phase::Joining) {
            ids.owned.extend(step.added.iter().cloned());
            let added = ids.names_of(&step.added);
            self.shell.events.push_back(Event::Assigned {
                added,
                owned: self.assignment(),
                generation: self.epoch(),
            });
        }
        let waiting = step.unresolved.then_some(Reason::AwaitingTopicMetadata);
        self.reconciled(true, waiting);
    }

    fn base_heartbeat(&self, epoch: i32) -> ShareGroupHeartbeatRequest {
        ShareGroupHeartbeatRequest::default()
            .with_group_id(self.shell.group_id())
            .with_member_id(StrBytes::from_string(self.member_id().to_owned()))
            .with_member_epoch(epoch)
    }

    /// Full (the subscription, and the rack at epoch 0) when joining or after any failure, else
    /// the subscription only when it changed.
    fn heartbeat_request(&mut self) -> (Request, Option<Vec<String>>) {
        let epoch = self.epoch();
        let p = &self.proto;
        let topics: Vec<String> = p.topics.iter().cloned().collect();
        let full = epoch == 0 || p.known_topics.is_none();
        let sent = (full || p.known_topics.as_ref() != Some(&topics)).then_some(topics);
        let mut r = self.base_heartbeat(epoch);
        r.subscribed_topic_names = sent.as_ref().map(|ts| {
            ts.iter()
                .map(|t| TopicName(StrBytes::from_string(t.clone())))
                .collect()
        });
        if epoch == 0 {
            r.rack_id = self.shell.config.rack_id.clone().map(StrBytes::from_string);
        }
        (heartbeat_request(r), sent)
    }
}
