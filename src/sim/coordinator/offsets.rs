//! Offset rules: OffsetCommit (`OffsetMetadataManager.commitOffset` with the group's
//! `validateOffsetCommit`) and OffsetFetch.

use std::collections::BTreeMap;

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartitions, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    OffsetCommitRequest, OffsetFetchRequest, OffsetFetchResponse, ResponseKind,
};

use super::classic::{ClassicGroup, GroupState};
use super::messages::offset_commit_answer;
use super::{Append, Parked, Reply, SimCoordinator, name, s};
use crate::sim::codes::*;

impl SimCoordinator {
    /// `OffsetMetadataManager.commitOffset` with `ClassicGroup.validateOffsetCommit` (classic) or
    /// `ConsumerGroup.validateOffsetCommit` (4.0-4.2 rule: the epoch must be the member's).
    pub(super) fn offset_commit(&mut self, p: Parked, r: OffsetCommitRequest) {
        let generation = r.generation_id_or_member_epoch;
        let member_id = r.member_id.to_string();
        let instance = r.group_instance_id.as_ref().map(|i| i.to_string());
        let code = if r.group_id.0.as_str() != self.config.group_id {
            NOT_COORDINATOR
        } else if let Some(g) = &self.classic {
            self.validate_classic_commit(g, generation, &member_id, instance.as_deref())
        } else if let Some(c) = &self.consumer {
            match c.members.get(&member_id) {
                _ if generation < 0 && c.members.is_empty() => NONE,
                None => UNKNOWN_MEMBER_ID,
                Some(_) if p.version < 9 => UNSUPPORTED_VERSION,
                Some(m) if m.epoch != generation => STALE_MEMBER_EPOCH,
                Some(_) => NONE,
            }
        } else if generation < 0 {
            // A simple group: offsets of a group that does not use group management.
            NONE
        } else if p.version >= 9 {
            GROUP_ID_NOT_FOUND
        } else {
            ILLEGAL_GENERATION
        };
        if code == NONE {
            // In the classic protocol, commits keep the session alive in Stable and
            // PreparingRebalance.
            if let Some(g) = &self.classic
                && matches!(g.state, GroupState::Stable | GroupState::PreparingRebalance)
                && g.members.contains_key(&member_id)
            {
                self.reschedule_heartbeat(&member_id, None);
            }
            for t in &r.topics {
                for part in &t.partitions {
                    self.offsets.insert(
                        (t.name.0.to_string(), part.partition_index),
                        (
                            part.committed_offset,
                            part.committed_metadata.as_ref().map(|m| m.to_string()),
                        ),
                    );
                }
            }
        } else {
            self.note(|| {
                format!(
                    "OffsetCommit by {member_id} gen {generation}: {}",
                    name(code)
                )
            });
        }
        let reply = Reply {
            conn: p.conn,
            correlation: p.correlation,
            version: p.version,
            body: ResponseKind::OffsetCommit(offset_commit_answer(&r, code)),
        };
        if code == NONE {
            // The answer waits for the offset records to be committed.
            self.appends.push_back((
                self.now + self.config.append_latency,
                Append::Answer(Box::new(reply)),
            ));
        } else {
            self.replies.push_back(reply);
        }
    }

    /// `ClassicGroup.validateOffsetCommit`.
    fn validate_classic_commit(
        &self,
        g: &ClassicGroup,
        generation: i32,
        member_id: &str,
        instance: Option<&str>,
    ) -> i16 {
        if g.state == GroupState::Dead {
            return COORDINATOR_NOT_AVAILABLE;
        }
        if generation < 0 && g.state == GroupState::Empty {
            return NONE;
        }
        if generation >= 0 || !member_id.is_empty() || instance.is_some() {
            if let Err(code) = g.validate_member(member_id, instance) {
                return code;
            }
            if generation != g.generation {
                return ILLEGAL_GENERATION;
            }
        } else if g.state != GroupState::Empty {
            return UNKNOWN_MEMBER_ID;
        }
        if g.state == GroupState::CompletingRebalance {
            return REBALANCE_IN_PROGRESS;
        }
        NONE
    }

    /// OffsetFetch: the stored offsets (-1 when none). No pending transactional offsets exist, so
    /// RequireStable never waits.
    pub(super) fn offset_fetch(&mut self, p: Parked, r: OffsetFetchRequest) {
        let lookup = |offsets: &BTreeMap<(String, i32), (i64, Option<String>)>, t: &str, i: i32| {
            offsets
                .get(&(t.to_owned(), i))
                .cloned()
                .unwrap_or((-1, None))
        };
        if p.version >= 8 {
            let groups = r
                .groups
                .iter()
                .map(|g| {
                    let topics = g
                        .topics
                        .clone()
                        .unwrap_or_default()
                        .iter()
                        .map(|t| {
                            OffsetFetchResponseTopics::default()
                                .with_name(t.name.clone())
                                .with_topic_id(t.topic_id)
                                .with_partitions(
                                    t.partition_indexes
                                        .iter()
                                        .map(|i| {
                                            let (o, m) = lookup(&self.offsets, &t.name.0, *i);
                                            OffsetFetchResponsePartitions::default()
                                                .with_partition_index(*i)
                                                .with_committed_offset(o)
                                                .with_metadata(m.map(|m| s(&m)))
                                        })
                                        .collect(),
                                )
                        })
                        .collect();
                    OffsetFetchResponseGroup::default()
                        .with_group_id(g.group_id.clone())
                        .with_topics(topics)
                })
                .collect();
            return self.reply(
                p,
                ResponseKind::OffsetFetch(OffsetFetchResponse::default().with_groups(groups)),
            );
        }
        self.reply(
            p,
            ResponseKind::OffsetFetch(
                OffsetFetchResponse::default().with_error_code(UNSUPPORTED_VERSION),
            ),
        );
    }
}
