//! A [`StreamsMember`] as a [`SimMember`]: the world drives it like any other member, and its
//! application is simulated as the world simulates every application (it polls, and hands a
//! revocation ticket back after [`SimConfig::revocation_delay`](super::world::SimConfig)).
//!
//! The streams member's events are told to the world as the member events it knows: tasks
//! become [`TopicPartition`]s named after their subtopology (`TasksAssigned` ⇒
//! [`Event::Assigned`], `TasksRevoking` ⇒ [`Event::Revoking`] with the ticket,
//! `TasksReleased` ⇒ [`Event::Revoked`], `TasksLost` ⇒ [`Event::Lost`]); the rest (the guard's
//! interventions, statuses, endpoints) becomes trace notes ([`SimMember::take_notes`]). The
//! invariants read the member itself ([`SimMember::streams`]): the tasks it holds by role, the
//! tasks it withholds, its process.
//!
//! The application's state stores are simulated too, for the task offsets the member reports
//! (`set_task_offsets`: what Kafka Streams sums over a task's changelogs): every changelog ends
//! at [`CHANGELOG_END`]; a task the member holds (any role) restores from 0 from the moment it
//! was handed to the application, at a rate drawn from the member id (between
//! [`RESTORE_RATE_MIN`] and [`RESTORE_RATE_MAX`] offsets a second), while the application polls;
//! a task released is forgotten (no dormant state on disk). Offsets are reported for every task
//! held, stateless or not (the simulated topologies are stateful).

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use super::world::SimMember;
use crate::config::GroupProtocol;
use crate::error::{ApiMisuse, GroupError, TransportError};
use crate::machine::events::{
    CloseOptions, CommitId, CommitOffset, Event, MemberState, RevokeTicket,
};
use crate::machine::streams::{StreamsEvent, StreamsMember, StreamsTasks, TaskId};
use crate::machine::timer::Timer;
use crate::machine::{Machine, TopicPartition};
use crate::request::{Broker, Outbound, RequestId, Response};

/// The end offset of every simulated changelog.
pub const CHANGELOG_END: i64 = 100_000;
/// The slowest restoration, offsets a second.
pub const RESTORE_RATE_MIN: i64 = 15_000;
/// The fastest restoration, offsets a second.
pub const RESTORE_RATE_MAX: i64 = 60_000;

/// A streams member in the simulated world (see the module docs).
#[derive(Debug)]
pub struct SimStreamsMember {
    member: StreamsMember,
    events: VecDeque<Event>,
    notes: Vec<String>,
    /// Since when the application holds each task it holds (its restoration's start).
    restoring: BTreeMap<TaskId, Instant>,
    /// The member's restoration rate, offsets a second.
    restore_rate: i64,
}

/// A task as the world's partition type: the subtopology as the topic.
fn tp(t: &TaskId) -> TopicPartition {
    TopicPartition::new(t.subtopology.clone(), t.partition)
}

fn tps<'a>(tasks: impl IntoIterator<Item = &'a TaskId>) -> Vec<TopicPartition> {
    tasks.into_iter().map(tp).collect()
}

/// Every task of `t`, whatever its role.
fn all(t: &StreamsTasks) -> Vec<TopicPartition> {
    tps(t.active.iter().chain(&t.standby).chain(&t.warmup))
}

/// `A[0_1] S[0_2] W[]`.
pub(super) fn fmt_tasks(t: &StreamsTasks) -> String {
    let f = |s: &std::collections::BTreeSet<TaskId>| {
        s.iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        "A[{}] S[{}] W[{}]",
        f(&t.active),
        f(&t.standby),
        f(&t.warmup)
    )
}

impl SimStreamsMember {
    /// Runs `member` in the simulation.
    pub fn new(member: StreamsMember) -> Self {
        // FNV-1a over the member id: a rate that differs between members, seeded as the id is.
        let hash = member
            .member_id()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
        let span = u64::try_from(RESTORE_RATE_MAX - RESTORE_RATE_MIN + 1).unwrap_or(1);
        let restore_rate = RESTORE_RATE_MIN + i64::try_from(hash % span).unwrap_or(0);
        Self {
            member,
            events: VecDeque::new(),
            notes: Vec::new(),
            restoring: BTreeMap::new(),
            restore_rate,
        }
    }

    /// The simulated state stores at `now` (see the module docs): tasks handed over since the
    /// last call start restoring, tasks released are forgotten, and the member is told every
    /// held task's offset and end offset.
    fn restore(&mut self, now: Instant) {
        let held = self.member.tasks();
        let held: Vec<&TaskId> = held
            .active
            .iter()
            .chain(&held.standby)
            .chain(&held.warmup)
            .collect();
        self.restoring.retain(|t, _| held.contains(&t));
        for t in held {
            self.restoring.entry(t.clone()).or_insert(now);
        }
        let rate = self.restore_rate;
        let offsets: BTreeMap<TaskId, i64> = self
            .restoring
            .iter()
            .map(|(t, since)| {
                let ms = i64::try_from(now.saturating_duration_since(*since).as_millis())
                    .unwrap_or(i64::MAX);
                (
                    t.clone(),
                    ms.saturating_mul(rate / 1_000).min(CHANGELOG_END),
                )
            })
            .collect();
        let ends = self
            .restoring
            .keys()
            .map(|t| (t.clone(), CHANGELOG_END))
            .collect();
        self.member.set_task_offsets(offsets, ends);
    }

    /// The streams member.
    pub fn inner(&self) -> &StreamsMember {
        &self.member
    }

    fn translate(&mut self, e: StreamsEvent) {
        let event = match e {
            StreamsEvent::TasksAssigned {
                added,
                owned,
                epoch,
            } => {
                self.notes.push(format!(
                    "tasks +{} holds {}",
                    fmt_tasks(&added),
                    fmt_tasks(&owned)
                ));
                Event::Assigned {
                    added: all(&added),
                    owned: all(&owned),
                    generation: epoch,
                }
            }
            StreamsEvent::TasksRevoking { active, ticket } => Event::Revoking {
                partitions: tps(&active),
                ticket,
            },
            StreamsEvent::TasksReleased {
                tasks,
                owned,
                reason,
            } => {
                self.notes.push(format!(
                    "tasks released {} ({reason:?}), holds {}",
                    fmt_tasks(&tasks),
                    fmt_tasks(&owned)
                ));
                Event::Revoked {
                    partitions: all(&tasks),
                }
            }
            StreamsEvent::TasksLost { tasks, reason } => Event::Lost {
                partitions: all(&tasks),
                reason,
            },
            StreamsEvent::GuardIntervened(i) => {
                self.notes.push(format!(
                    "GUARD {:?} {} ({}; {} holds/claims it as {})",
                    i.kind, i.task, i.role, i.other_member, i.other_role
                ));
                return;
            }
            StreamsEvent::StatusChanged { statuses } => {
                let codes: Vec<String> = statuses.iter().map(|s| format!("{:?}", s.code)).collect();
                self.notes.push(format!("statuses {codes:?}"));
                return;
            }
            StreamsEvent::EndpointsChanged { epoch, .. } => {
                self.notes.push(format!("endpoints epoch {epoch}"));
                return;
            }
            StreamsEvent::TasksRefused { refused } => {
                self.notes.push(format!(
                    "refused subtopologies {:?}",
                    refused.subtopologies()
                ));
                return;
            }
            // The rest is shared with the other members.
            shared => match shared.into_shared() {
                Ok(event) => event,
                Err(own) => {
                    self.notes.push(format!("no member form of {own:?}"));
                    return;
                }
            },
        };
        self.events.push_back(event);
    }
}

impl Machine for SimStreamsMember {
    type Event = Event;

    fn poll_request(&mut self) -> Option<Outbound> {
        self.member.poll_request()
    }

    fn poll_event(&mut self) -> Option<Event> {
        while self.events.is_empty() {
            let e = self.member.poll_event()?;
            self.translate(e);
        }
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<(Instant, Timer)> {
        self.member.poll_timeout()
    }

    fn handle_response(
        &mut self,
        id: RequestId,
        result: Result<Response, TransportError>,
        now: Instant,
    ) {
        self.member.handle_response(id, result, now)
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.member.handle_timeout(now)
    }
}

impl SimMember for SimStreamsMember {
    /// The application polls: its state stores restore (`restore`) and
    /// the member polls.
    fn poll(&mut self, now: Instant) {
        self.restore(now);
        self.member.poll(now)
    }

    /// Joins with the member's topology (the topics are the topology's).
    fn subscribe(&mut self, _topics: Vec<String>, now: Instant) -> Result<(), ApiMisuse> {
        self.member.join(now)
    }

    fn unsubscribe(&mut self, now: Instant) {
        self.member.unsubscribe(now)
    }

    fn close(&mut self, options: CloseOptions, now: Instant) {
        self.member.close(options, now)
    }

    /// Streams members commit through their own producers and consumers, not the group
    /// member: nothing is sent.
    fn commit(&mut self, _offsets: Vec<CommitOffset>, _now: Instant) -> CommitId {
        CommitId(0)
    }

    fn complete_revocation(&mut self, ticket: RevokeTicket, now: Instant) -> Result<(), ApiMisuse> {
        self.member.complete_revocation(ticket, now)
    }

    fn member_id(&self) -> String {
        self.member.member_id().to_owned()
    }

    /// The member epoch.
    fn generation(&self) -> i32 {
        self.member.epoch()
    }

    fn state(&self) -> MemberState {
        self.member.state()
    }

    /// Every task the application holds (any role), as partitions of the subtopology.
    fn assignment(&self) -> Vec<TopicPartition> {
        all(self.member.tasks())
    }

    fn coordinator(&self) -> Option<Broker> {
        self.member.coordinator().cloned()
    }

    fn instance_id(&self) -> Option<String> {
        self.member.config().instance_id.clone()
    }

    fn fatal_error(&self) -> Option<GroupError> {
        self.member.fatal_error().cloned()
    }

    /// The closest of the two: a heartbeat protocol with member epochs. The world tells a
    /// streams member by [`SimMember::streams`] and checks the streams invariants for it only.
    fn protocol(&self) -> GroupProtocol {
        GroupProtocol::Consumer
    }

    fn streams(&self) -> Option<&StreamsMember> {
        Some(&self.member)
    }

    fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }
}
