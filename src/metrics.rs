//! Rebalance metrics through the [`metrics`](https://docs.rs/metrics) facade: install any recorder
//! (Prometheus, OpenTelemetry, StatsD, ...) and the members report to it; without one, recording
//! costs next to nothing.
//!
//! A [`MemberMetrics`] watches one member: the driver hands it every [`Event`] the member emits,
//! and the send and answer of every request. The names mirror the Java client's
//! `consumer-coordinator-metrics` group; where Java keeps an `-avg`/`-max`/`-rate` sensor, this
//! crate records a histogram or counter from which the recorder derives those. Every metric has
//! the labels `group` (`group.id`) and `protocol` (`classic` or `consumer`; it changes to
//! `classic` when `group.protocol=auto` falls back).
//!
//! | metric | kind | extra labels | Java (`consumer-coordinator-metrics`) |
//! |---|---|---|---|
//! | `consumer_coordinator.rebalance_total` | counter | | `rebalance-total`, `rebalance-rate-per-hour` |
//! | `consumer_coordinator.rebalance_latency_ms` | histogram | | `rebalance-latency-avg`, `-max`, `-total` |
//! | `consumer_coordinator.failed_rebalance_total` | counter | | `failed-rebalance-total`, `failed-rebalance-rate-per-hour` |
//! | `consumer_coordinator.time_to_first_assignment_ms` | histogram | | none (this crate's) |
//! | `consumer_coordinator.heartbeat_response_time_ms` | histogram | | `heartbeat-response-time-max`; its count: `heartbeat-total`, `heartbeat-rate` |
//! | `consumer_coordinator.join_time_ms` | histogram | | `join-time-avg`, `-max`; its count: `join-total`, `join-rate` |
//! | `consumer_coordinator.sync_time_ms` | histogram | | `sync-time-avg`, `-max`; its count: `sync-total`, `sync-rate` |
//! | `consumer_coordinator.commit_latency_ms` | histogram | | `commit-latency-avg`, `-max`; its count: `commit-total`, `commit-rate` |
//! | `consumer_coordinator.commit_failed_total` | counter | `reason` | none (Java throws `CommitFailedException` and friends) |
//! | `consumer_coordinator.fenced_total` | counter | `reason` | none (Java logs the fencing) |
//! | `consumer_coordinator.assigned_partitions` | gauge | | `assigned-partitions` |
//! | `consumer_coordinator.task_guard_interventions_total` | counter | `kind` | none (this crate's; streams members only, `protocol` is `streams`) |
//! | `consumer_coordinator.lease_expired_total` | counter | | none (this crate's; every protocol, `protocol` `streams` for streams members) |
//!
//! What each one measures:
//! - A rebalance starts when the member enters a rebalancing state (anything but `Stable`,
//!   `Unsubscribed`, `Leaving`, `PollExpired`, `Stale`, `Closed`, `Fatal`) while none is under way:
//!   on leaving `Stable`, on the first join, and on a rejoin after an unsubscribe or a poll
//!   timeout. It succeeds at the next change to `Stable` (`rebalance_total` plus one,
//!   `rebalance_latency_ms` the time since the start, retries included, as Java's
//!   `rebalance-latency` is). A member that unsubscribes, closes or misses its poll deadline
//!   meanwhile abandons it: neither counted nor timed.
//! - `failed_rebalance_total`: a rebalance under way that loses partitions (`Event::Lost`) or
//!   stops the member (`Event::Fatal`); a Lost followed by the Fatal counts once. Java counts
//!   every JoinGroup/SyncGroup round that failed, `MEMBER_ID_REQUIRED` and
//!   `REBALANCE_IN_PROGRESS` included, so its number is higher for the same history.
//! - `time_to_first_assignment_ms`: from the observer's creation (the member's start) to the first
//!   `Event::Assigned`.
//! - `heartbeat_response_time_ms`: Heartbeat and ConsumerGroupHeartbeat answers, errors
//!   included (Java records every answer); `commit_latency_ms` likewise for OffsetCommit;
//!   `join_time_ms` and `sync_time_ms` only answers without an error (as Java). A request that
//!   got no answer (a transport error) is not timed.
//! - `commit_failed_total`: every `Event::Committed` with an error, including attempts the
//!   handle retries, with `reason` one of `rebalance_in_progress`, `not_member`,
//!   `fenced_instance_id`, `retriable`, `rejected`, `stopped`, `transport`, `lease_expired`.
//! - `fenced_total`: a state change whose reason is `UNKNOWN_MEMBER_ID`, `ILLEGAL_GENERATION`,
//!   `FENCED_MEMBER_EPOCH` or `self-fenced` (the member rejoins), and a fatal `FENCED_INSTANCE_ID`
//!   (another process holds the static member's `group.instance.id`); `reason` names which.
//!
//! - `task_guard_interventions_total`: every time a streams member's per-process task guard
//!   stepped in ([`StreamsEvent::GuardIntervened`](crate::machine::streams::StreamsEvent::GuardIntervened)),
//!   `kind` `withheld` (assigned a task another member of the process holds) or `given_up` (a
//!   standby or warm-up given up for another local member's active assignment): the coordinator
//!   assigned one task twice within a process (KAFKA-21401). The member also logs a `warn`.
//!
//! - `lease_expired_total`: every time a member's membership lease ran out while it owned
//!   partitions or tasks: no heartbeat sent within the session timeout less one heartbeat
//!   interval was answered, so the member reported them lost (the `Event::Lost` /
//!   `StreamsEvent::TasksLost` with reason `LeaseExpired`; see [`crate::machine`], "The
//!   membership lease"). Java has no lease: it keeps the partitions until an answer fences it.
//!
//! Not mapped: Java's `last-rebalance-seconds-ago` and `last-heartbeat-seconds-ago` (a recorder
//! keeps when it last saw a sample) and `partition-{assigned,revoked,lost}-latency` (the
//! application handles those events at its own pace).
//!
//! Call [`describe`] once after installing a recorder to give exporters the units and help texts.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::metrics::{
    Label, SharedString, Unit, counter, describe_counter, describe_gauge, describe_histogram,
    gauge, histogram,
};
use kafka_protocol::messages::{ApiKey, ResponseKind};

use crate::config::GroupProtocol;
use crate::error::{GroupError, TransportError, codes};
use crate::machine::events::{CommitError, Event, MemberState, Reason};
use crate::request::{Api, RequestId, Response, ResponseBody};

/// Successful rebalances (counter).
pub const REBALANCE_TOTAL: &str = "consumer_coordinator.rebalance_total";
/// Rebalances that lost partitions or stopped the member (counter).
pub const FAILED_REBALANCE_TOTAL: &str = "consumer_coordinator.failed_rebalance_total";
/// Time from the start of a rebalance to `Stable`, in milliseconds (histogram).
pub const REBALANCE_LATENCY_MS: &str = "consumer_coordinator.rebalance_latency_ms";
/// Time from the member's start to its first assignment, in milliseconds (histogram).
pub const TIME_TO_FIRST_ASSIGNMENT_MS: &str = "consumer_coordinator.time_to_first_assignment_ms";
/// Heartbeat / ConsumerGroupHeartbeat round trips, in milliseconds (histogram).
pub const HEARTBEAT_RESPONSE_TIME_MS: &str = "consumer_coordinator.heartbeat_response_time_ms";
/// Successful JoinGroup round trips, in milliseconds (histogram).
pub const JOIN_TIME_MS: &str = "consumer_coordinator.join_time_ms";
/// Successful SyncGroup round trips, in milliseconds (histogram).
pub const SYNC_TIME_MS: &str = "consumer_coordinator.sync_time_ms";
/// OffsetCommit round trips, in milliseconds (histogram).
pub const COMMIT_LATENCY_MS: &str = "consumer_coordinator.commit_latency_ms";
/// Commits that failed, by `reason` (counter).
pub const COMMIT_FAILED_TOTAL: &str = "consumer_coordinator.commit_failed_total";
/// Times the member was fenced, by `reason` (counter).
pub const FENCED_TOTAL: &str = "consumer_coordinator.fenced_total";
/// Partitions the member owns (gauge).
pub const ASSIGNED_PARTITIONS: &str = "consumer_coordinator.assigned_partitions";
/// Times a streams member's per-process task guard stepped in, by `kind` (counter).
pub const TASK_GUARD_INTERVENTIONS_TOTAL: &str =
    "consumer_coordinator.task_guard_interventions_total";

/// Times the membership lease ran out while the member owned partitions or tasks (counter).
pub const LEASE_EXPIRED_TOTAL: &str = "consumer_coordinator.lease_expired_total";

/// Counts one lease expiry of a streams member of `group` (the other protocols' are counted by
/// [`MemberMetrics`]).
pub(crate) fn streams_lease_expired(group: &str) {
    counter!(
        LEASE_EXPIRED_TOTAL,
        "group" => group.to_owned(),
        "protocol" => "streams"
    )
    .increment(1);
}

/// Counts one intervention of the task guard for a streams member of `group` (`kind`:
/// `withheld` or `given_up`).
pub(crate) fn task_guard_intervened(group: &str, kind: &'static str) {
    counter!(
        TASK_GUARD_INTERVENTIONS_TOTAL,
        "group" => group.to_owned(),
        "protocol" => "streams",
        "kind" => kind
    )
    .increment(1);
}

/// More requests in flight than this means answers went missing; the oldest timings are dropped
/// rather than kept for ever.
const MAX_IN_FLIGHT: usize = 1024;

/// Registers units and help texts of every metric with the installed recorder.
pub fn describe() {
    describe_counter!(REBALANCE_TOTAL, Unit::Count, "Successful rebalances");
    describe_counter!(
        FAILED_REBALANCE_TOTAL,
        Unit::Count,
        "Rebalances that lost partitions or stopped the member"
    );
    describe_histogram!(
        REBALANCE_LATENCY_MS,
        Unit::Milliseconds,
        "Time from the start of a rebalance (retries included) until the member is stable"
    );
    describe_histogram!(
        TIME_TO_FIRST_ASSIGNMENT_MS,
        Unit::Milliseconds,
        "Time from the member's start to its first assignment"
    );
    describe_histogram!(
        HEARTBEAT_RESPONSE_TIME_MS,
        Unit::Milliseconds,
        "Heartbeat and ConsumerGroupHeartbeat round trips"
    );
    describe_histogram!(
        JOIN_TIME_MS,
        Unit::Milliseconds,
        "Successful JoinGroup round trips"
    );
    describe_histogram!(
        SYNC_TIME_MS,
        Unit::Milliseconds,
        "Successful SyncGroup round trips"
    );
    describe_histogram!(
        COMMIT_LATENCY_MS,
        Unit::Milliseconds,
        "OffsetCommit round trips"
    );
    describe_counter!(COMMIT_FAILED_TOTAL, Unit::Count, "Failed commits by reason");
    describe_counter!(
        FENCED_TOTAL,
        Unit::Count,
        "Times the coordinator fenced the member, by reason"
    );
    describe_gauge!(
        ASSIGNED_PARTITIONS,
        Unit::Count,
        "Partitions the member owns"
    );
    describe_counter!(
        TASK_GUARD_INTERVENTIONS_TOTAL,
        Unit::Count,
        "Times a streams member's task guard stepped in, by kind"
    );
    describe_counter!(
        LEASE_EXPIRED_TOTAL,
        Unit::Count,
        "Times the membership lease ran out while the member owned partitions or tasks"
    );
}

/// Records one member's metrics (see the module docs). The driver owns it and feeds it; it keeps
/// no reference to the member and reads no clock.
#[derive(Debug)]
pub struct MemberMetrics {
    group: SharedString,
    labels: Vec<Label>,
    created: Instant,
    assigned_once: bool,
    /// Start of the rebalance under way.
    rebalance: Option<Instant>,
    /// The rebalance under way already counted as failed (an `Event::Lost`); the `Fatal` that may
    /// follow is not counted again.
    failure_counted: bool,
    /// A rebalance that ended in state `Fatal`: counted as failed when `Event::Fatal` follows, or
    /// resumed when `group.protocol=auto` falls back to classic instead.
    ended_fatal: Option<Instant>,
    owned: usize,
    in_flight: HashMap<RequestId, (Api, Instant)>,
}

impl MemberMetrics {
    /// An observer for a member of `group` speaking `protocol` (classic or consumer), started at
    /// `now`.
    pub fn new(group: &str, protocol: GroupProtocol, now: Instant) -> Self {
        let group = SharedString::from_shared(Arc::<str>::from(group));
        Self {
            labels: Self::labels_for(&group, protocol),
            group,
            created: now,
            assigned_once: false,
            rebalance: None,
            failure_counted: false,
            ended_fatal: None,
            owned: 0,
            in_flight: HashMap::new(),
        }
    }

    fn labels_for(group: &SharedString, protocol: GroupProtocol) -> Vec<Label> {
        vec![
            Label::new("group", group.clone()),
            Label::new("protocol", protocol.as_str()),
        ]
    }

    fn labels_with(&self, key: &'static str, value: &'static str) -> Vec<Label> {
        let mut labels = self.labels.clone();
        labels.push(Label::new(key, value));
        labels
    }

    /// Feeds an event the member emitted at `now` (before the driver routes or drops it).
    pub fn on_event(&mut self, event: &Event, now: Instant) {
        match event {
            Event::StateChanged {
                from, to, reason, ..
            } => self.on_state_changed(*from, *to, *reason, now),
            Event::Assigned { owned, .. } => {
                if !self.assigned_once {
                    self.assigned_once = true;
                    histogram!(TIME_TO_FIRST_ASSIGNMENT_MS, self.labels.iter())
                        .record(millis(now.saturating_duration_since(self.created)));
                }
                self.set_owned(owned.len());
            }
            Event::Revoking { partitions, .. } | Event::Revoked { partitions } => {
                self.set_owned(self.owned.saturating_sub(partitions.len()));
            }
            Event::Lost { partitions, reason } => {
                self.set_owned(self.owned.saturating_sub(partitions.len()));
                if *reason == Reason::LeaseExpired {
                    counter!(LEASE_EXPIRED_TOTAL, self.labels.iter()).increment(1);
                }
                if self.rebalance.is_some() && !self.failure_counted {
                    self.failure_counted = true;
                    counter!(FAILED_REBALANCE_TOTAL, self.labels.iter()).increment(1);
                }
            }
            Event::Committed { result: Err(e), .. } => {
                counter!(
                    COMMIT_FAILED_TOTAL,
                    self.labels_with("reason", commit_error_reason(e))
                )
                .increment(1);
            }
            Event::Fatal(e) => {
                if matches!(e, GroupError::FencedInstanceId { .. }) {
                    self.fenced("FENCED_INSTANCE_ID");
                }
                if self.ended_fatal.take().is_some() && !self.failure_counted {
                    counter!(FAILED_REBALANCE_TOTAL, self.labels.iter()).increment(1);
                }
                self.failure_counted = false;
            }
            _ => {}
        }
    }

    fn on_state_changed(
        &mut self,
        from: MemberState,
        to: MemberState,
        reason: Reason,
        now: Instant,
    ) {
        if (from, to) == (MemberState::Consumer, MemberState::Classic) {
            // group.protocol=auto fell back: the refused consumer-protocol join was not a failed
            // rebalance, and the classic join continues it.
            self.labels = Self::labels_for(&self.group, GroupProtocol::Classic);
            self.rebalance = self.ended_fatal.take().or(self.rebalance);
            self.failure_counted = false;
            return;
        }
        // The coordinator fenced the member (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
        // FENCED_MEMBER_EPOCH) or a static member was replaced (self-fenced).
        if reason.is_fencing() {
            self.fenced(reason.as_str());
        }
        match to {
            MemberState::Stable => {
                if let Some(started) = self.rebalance.take() {
                    counter!(REBALANCE_TOTAL, self.labels.iter()).increment(1);
                    histogram!(REBALANCE_LATENCY_MS, self.labels.iter())
                        .record(millis(now.saturating_duration_since(started)));
                }
                self.failure_counted = false;
            }
            // The Event::Fatal that follows decides (see `ended_fatal`).
            MemberState::Fatal => self.ended_fatal = self.rebalance.take(),
            // May end in Closed or Unsubscribed, or rejoin: decided by the next state.
            MemberState::Leaving => {}
            MemberState::Unsubscribed
            | MemberState::Closed
            | MemberState::PollExpired
            | MemberState::Stale => {
                self.rebalance = None;
                self.failure_counted = false;
            }
            // Only the auto fallback above moves between these.
            MemberState::Consumer | MemberState::Classic => {}
            MemberState::Rejoin
            | MemberState::AwaitRevoke
            | MemberState::Joining
            | MemberState::Assigning
            | MemberState::Syncing
            | MemberState::Reconciling
            | MemberState::Acknowledging => {
                self.rebalance.get_or_insert(now);
                self.failure_counted = false;
            }
            // A state the core adds later: the next state this recorder knows decides.
            _ => {}
        }
    }

    fn fenced(&self, reason: &'static str) {
        counter!(FENCED_TOTAL, self.labels_with("reason", reason)).increment(1);
    }

    fn set_owned(&mut self, owned: usize) {
        self.owned = owned;
        gauge!(ASSIGNED_PARTITIONS, self.labels.iter()).set(owned as f64);
    }

    /// Notes that request `id` for `api` was sent at `now`.
    pub fn on_request(&mut self, id: RequestId, api: impl Into<Api>, now: Instant) {
        if self.in_flight.len() >= MAX_IN_FLIGHT {
            self.in_flight.clear();
        }
        self.in_flight.insert(id, (api.into(), now));
    }

    /// Times the answer to request `id`, which arrived at `now` (a request not noted with
    /// [`on_request`](Self::on_request) is ignored).
    pub fn on_response(
        &mut self,
        id: RequestId,
        result: &Result<Response, TransportError>,
        now: Instant,
    ) {
        let Some((api, sent)) = self.in_flight.remove(&id) else {
            return;
        };
        // Java's sensors are fed by answers; a request that got none is not timed.
        if let Ok(response) = result {
            self.on_response_time(
                api,
                now.saturating_duration_since(sent),
                error_code(&response.body),
            );
        }
    }

    /// Records the round trip of an answered `api` request whose top-level error code is `code`
    /// (for a driver that times requests itself).
    pub fn on_response_time(&self, api: impl Into<Api>, latency: Duration, code: i16) {
        let api = api.into();
        // The streams heartbeat feeds the same sensor (Java's HeartbeatMetricsManager, shared by
        // the consumer and streams heartbeat request managers).
        let name = if api == Api::STREAMS_GROUP_HEARTBEAT {
            HEARTBEAT_RESPONSE_TIME_MS
        } else {
            match api.kafka() {
                Some(ApiKey::Heartbeat | ApiKey::ConsumerGroupHeartbeat) => {
                    HEARTBEAT_RESPONSE_TIME_MS
                }
                Some(ApiKey::OffsetCommit) => COMMIT_LATENCY_MS,
                Some(ApiKey::JoinGroup) if code == codes::NONE => JOIN_TIME_MS,
                Some(ApiKey::SyncGroup) if code == codes::NONE => SYNC_TIME_MS,
                _ => return,
            }
        };
        histogram!(name, self.labels.iter()).record(millis(latency));
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The top-level error code of the group APIs' answers (OffsetCommit has none: 0).
fn error_code(body: &ResponseBody) -> i16 {
    let body = match body {
        ResponseBody::Kafka(body) => body,
        ResponseBody::StreamsGroupHeartbeat(r) => return r.error_code,
        _ => return 0,
    };
    match body {
        ResponseKind::JoinGroup(r) => r.error_code,
        ResponseKind::SyncGroup(r) => r.error_code,
        ResponseKind::Heartbeat(r) => r.error_code,
        ResponseKind::ConsumerGroupHeartbeat(r) => r.error_code,
        _ => 0,
    }
}

fn commit_error_reason(e: &CommitError) -> &'static str {
    match e {
        CommitError::RebalanceInProgress => "rebalance_in_progress",
        CommitError::NotMember { .. } => "not_member",
        CommitError::LeaseExpired => "lease_expired",
        CommitError::FencedInstanceId { .. } => "fenced_instance_id",
        CommitError::Retriable { .. } => "retriable",
        CommitError::Rejected { .. } => "rejected",
        CommitError::NotOwned { .. } => "not_owned",
        CommitError::Closed | CommitError::Fatal(_) => "stopped",
        CommitError::Transport(_) => "transport",
        CommitError::TimedOut { .. } => "timed_out",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use crate::error::codes;
    use std::collections::BTreeMap;

    use kafka_protocol::messages::{
        ConsumerGroupHeartbeatResponse, HeartbeatResponse, JoinGroupResponse, OffsetCommitResponse,
        SyncGroupResponse,
    };
    use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

    use super::*;
    use crate::machine::TopicPartition;
    use crate::machine::events::CommitId;
    use crate::machine::events::{MemberState as S, Reason as R};

    /// Metric name + sorted labels -> value, from one snapshot.
    type Values = BTreeMap<(String, Vec<(String, String)>), DebugValue>;

    fn run(f: impl FnOnce()) -> Values {
        let recorder = DebuggingRecorder::new();
        let snapshotter: Snapshotter = recorder.snapshotter();
        ::metrics::with_local_recorder(&recorder, f);
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let mut labels: Vec<(String, String)> = key
                    .key()
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()))
                    .collect();
                labels.sort();
                ((key.key().name().to_owned(), labels), value)
            })
            .collect()
    }

    fn labels(extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut l: Vec<(String, String)> = [("group", "g"), ("protocol", "classic")]
            .iter()
            .chain(extra)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        l.sort();
        l
    }

    fn counter(values: &Values, name: &str, extra: &[(&str, &str)]) -> u64 {
        match values.get(&(name.to_owned(), labels(extra))) {
            Some(DebugValue::Counter(n)) => *n,
            None => 0,
            Some(other) => panic!("{name} is {other:?}"),
        }
    }

    fn samples(values: &Values, name: &str) -> Vec<f64> {
        match values.get(&(name.to_owned(), labels(&[]))) {
            Some(DebugValue::Histogram(v)) => v.iter().map(|f| f.into_inner()).collect(),
            None => Vec::new(),
            Some(other) => panic!("{name} is {other:?}"),
        }
    }

    fn state(from: S, to: S, reason: R) -> Event {
        Event::StateChanged {
            from,
            to,
            reason,
            member_id: "m".into(),
            generation: 1,
        }
    }

    fn tps(n: i32) -> Vec<TopicPartition> {
        (0..n).map(|p| TopicPartition::new("t", p)).collect()
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn first_join_and_later_rebalance_are_counted_and_timed() {
        let t0 = Instant::now();
        let values = run(|| {
            let mut m = MemberMetrics::new("g", GroupProtocol::Classic, t0);
            m.on_event(&state(S::Unsubscribed, S::Rejoin, R::Subscribed), t0 + MS);
            m.on_event(
                &state(S::Rejoin, S::Joining, R::SendingJoinGroup),
                t0 + 2 * MS,
            );
            m.on_event(
                &state(S::Joining, S::Syncing, R::SendingSyncGroup),
                t0 + 5 * MS,
            );
            m.on_event(
                &Event::Assigned {
                    added: tps(3),
                    owned: tps(3),
                    generation: 1,
                },
                t0 + 40 * MS,
            );
            m.on_event(
                &state(S::Syncing, S::Stable, R::SyncGroupAnswered),
                t0 + 41 * MS,
            );
            // A second rebalance: cooperative revoke of one partition.
            m.on_event(
                &state(S::Stable, S::Rejoin, R::RebalanceInProgress),
                t0 + 1000 * MS,
            );
            m.on_event(
                &state(S::Rejoin, S::Joining, R::SendingJoinGroup),
                t0 + 1001 * MS,
            );
            m.on_event(&Event::Revoked { partitions: tps(1) }, t0 + 1002 * MS);
            m.on_event(
                &state(S::Joining, S::Stable, R::SyncGroupAnswered),
                t0 + 1100 * MS,
            );
            // Assigned again: time to first assignment is recorded once only.
            m.on_event(
                &Event::Assigned {
                    added: vec![],
                    owned: tps(2),
                    generation: 2,
                },
                t0 + 1100 * MS,
            );
        });
        assert_eq!(counter(&values, REBALANCE_TOTAL, &[]), 2);
        assert_eq!(counter(&values, FAILED_REBALANCE_TOTAL, &[]), 0);
        assert_eq!(samples(&values, REBALANCE_LATENCY_MS), [40.0, 100.0]);
        assert_eq!(samples(&values, TIME_TO_FIRST_ASSIGNMENT_MS), [40.0]);
        assert_eq!(
            values.get(&(ASSIGNED_PARTITIONS.to_owned(), labels(&[]))),
            Some(&DebugValue::Gauge(2.0.into()))
        );
    }

    #[test]
    fn consumer_protocol_reconciliation_is_a_rebalance() {
        let t0 = Instant::now();
        let values = run(|| {
            let mut m = MemberMetrics::new("g", GroupProtocol::Consumer, t0);
            m.on_event(&state(S::Unsubscribed, S::Joining, R::Subscribed), t0);
            m.on_event(
                &state(S::Joining, S::Reconciling, R::AwaitingTopicMetadata),
                t0 + 10 * MS,
            );
            m.on_event(
                &state(S::Reconciling, S::Stable, R::AssignmentReconciled),
                t0 + 30 * MS,
            );
            m.on_event(
                &state(S::Stable, S::Reconciling, R::AwaitingTopicMetadata),
                t0 + 50 * MS,
            );
            m.on_event(
                &state(S::Reconciling, S::Acknowledging, R::AcknowledgingAssignment),
                t0 + 55 * MS,
            );
            m.on_event(
                &state(S::Acknowledging, S::Stable, R::AssignmentReconciled),
                t0 + 60 * MS,
            );
        });
        let consumer = |name: &str| match values.get(&(
            name.to_owned(),
            vec![
                ("group".into(), "g".into()),
                ("protocol".into(), "consumer".into()),
            ],
        )) {
            Some(v) => format!("{v:?}"),
            None => "none".into(),
        };
        assert_eq!(consumer(REBALANCE_TOTAL), "Counter(2)");
        assert_eq!(consumer(REBALANCE_LATENCY_MS), "Histogram([30.0, 10.0])");
    }

    #[test]
    fn lease_expiries_are_counted_once_each() {
        let t0 = Instant::now();
        let values = run(|| {
            let mut m = MemberMetrics::new("g", GroupProtocol::Consumer, t0);
            for _ in 0..2 {
                m.on_event(
                    &Event::Lost {
                        partitions: tps(2),
                        reason: Reason::LeaseExpired,
                    },
                    t0,
                );
                m.on_event(&state(S::Stable, S::Joining, R::LeaseExpired), t0);
            }
            // Other losses are not lease expiries.
            m.on_event(
                &Event::Lost {
                    partitions: tps(1),
                    reason: Reason::FencedMemberEpoch,
                },
                t0,
            );
            streams_lease_expired("app");
        });
        let lease = |group: &str, protocol: &str| {
            values.get(&(
                LEASE_EXPIRED_TOTAL.to_owned(),
                vec![
                    ("group".into(), group.into()),
                    ("protocol".into(), protocol.into()),
                ],
            ))
        };
        assert_eq!(format!("{:?}", lease("g", "consumer")), "Some(Counter(2))");
        assert_eq!(format!("{:?}", lease("app", "streams")), "Some(Counter(1))");
    }

    #[test]
    fn lost_or_fatal_during_a_rebalance_fails_it_once() {
        let t0 = Instant::now();
        let values = run(|| {
            let mut m = MemberMetrics::new("g", GroupProtocol::Classic, t0);
            // Fenced while syncing: partitions lost, rejoin, then stable.
            m.on_event(&state(S::Stable, S::Rejoin, R::RebalanceInProgress), t0);
            m.on_event(&state(S::Rejoin, S::Syncing, R::SendingSyncGroup), t0);
            m.on_event(
                &Event::Lost {
                    partitions: tps(2),
                    reason: Reason::UnknownMemberId,
                },
                t0,
            );
            m.on_event(&state(S::Syncing, S::Rejoin, R::UnknownMemberId), t0);
            m.on_event(
                &state(S::Rejoin, S::Stable, R::SyncGroupAnswered),
                t0 + 10 * MS,
            );
            // Fatal during a rebalance with partitions: Lost + Fatal count once.
            m.on_event(&state(S::Stable, S::Rejoin, R::RebalanceInProgress), t0);
            m.on_event(
                &Event::Lost {
                    partitions: tps(1),
                    reason: Reason::FatalError,
                },
                t0,
            );
            m.on_event(&state(S::Rejoin, S::Fatal, R::FatalError), t0);
            m.on_event(
                &Event::Fatal(GroupError::Fatal {
                    api: ApiKey::JoinGroup.into(),
                    code: codes::INVALID_GROUP_ID,
                }),
                t0,
            );
            // Fatal during a join without partitions: counted by the Fatal.
            m.on_event(&state(S::Unsubscribed, S::Rejoin, R::Subscribed), t0);
            m.on_event(&state(S::Rejoin, S::Fatal, R::FatalError), t0);
            m.on_event(
                &Event::Fatal(GroupError::FencedInstanceId {
                    group: "g".into(),
                    instance_id: "i".into(),
                }),
                t0,
            );
            // Fatal while stable is no failed rebalance.
            m.on_event(&state(S::Stable, S::Fatal, R::FatalError), t0);
            m.on_event(
                &Event::Fatal(GroupError::GroupAuthorizationFailed { group: "g".into() }),
                t0,
            );
            // Lost outside a rebalance (heartbeat fenced while stable) neither.
            m.on_event(
                &Event::Lost {
                    partitions: tps(1),
                    reason: Reason::IllegalGeneration,
                },
                t0,
            );
            m.on_event(&state(S::Stable, S::Rejoin, R::IllegalGeneration), t0);
        });
        assert_eq!(counter(&values, FAILED_REBALANCE_TOTAL, &[]), 3);
        assert_eq!(counter(&values, REBALANCE_TOTAL, &[]), 1);
        assert_eq!(samples(&values, REBALANCE_LATENCY_MS), [10.0]);
        assert_eq!(
            counter(&values, FENCED_TOTAL, &[("reason", "UNKNOWN_MEMBER_ID")]),
            1
        );
        assert_eq!(
            counter(&values, FENCED_TOTAL, &[("reason", "ILLEGAL_GENERATION")]),
            1
        );
        assert_eq!(
            counter(&values, FENCED_TOTAL, &[("reason", "FENCED_INSTANCE_ID")]),
            1
        );
    }

    #[test]
    fn abandoned_rebalances_are_neither_counted_nor_timed() {
        let t0 = Instant::now();
        let values = run(|| {
            let mut m = MemberMetrics::new("g", GroupProtocol::Classic, t0);
            m.on_event(&state(S::Unsubscribed, S::Rejoin, R::Subscribed), t0);
            m.on_event(&state(S::Rejoin, S::Unsubscribed, R::Unsubscribed), t0);
            m.on_event(
                &state(S::Unsubscribed, S::Rejoin, R::Subscribed),
                t0 + 100 * MS,
            );
            m.on_event(
                &state(S::Rejoin, S::PollExpired, R::PollTimeout),
                t0 + 150 * MS,
            );
            // The rejoin after the poll timeout is a new rebalance.
            m.on_event(
                &state(S::PollExpired, S::Rejoin, R::PolledAfterPollTimeout),
                t0 + 200 * MS,
            );
            m.on_event(
                &state(S::Rejoin, S::Stable, R::SyncGroupAnswered),
                t0 + 210 * MS,
            );
            m.on_event(&state(S::Stable, S::Leaving, R::Closed), t0 + 300 * MS);
            m.on_event(&state(S::Leaving, S::Closed, R::Left), t0 + 301 * MS);
            m.on_event(&Event::Closed, t0 + 301 * MS);
        });
        assert_eq!(counter(&values, REBALANCE_TOTAL, &[]), 1);
        assert_eq!(samples(&values, REBALANCE_LATENCY_MS), [10.0]);
        assert_eq!(counter(&values, FAILED_REBALANCE_TOTAL, &[]), 0);
    }

    #[test]
    fn auto_fallback_resumes_the_join_as_classic() {
        let t0 = Instant::now();
        let values = run(|| {
            let mut m = MemberMetrics::new("g", GroupProtocol::Consumer, t0);
            m.on_event(&state(S::Unsubscribed, S::Joining, R::Subscribed), t0);
            m.on_event(&state(S::Joining, S::Fatal, R::FatalError), t0 + MS);
            // The member replaces the Fatal event with this one.
            m.on_event(
                &state(S::Consumer, S::Classic, R::ConsumerProtocolRefused),
                t0 + MS,
            );
            m.on_event(
                &state(S::Unsubscribed, S::Rejoin, R::Subscribed),
                t0 + 2 * MS,
            );
            m.on_event(
                &state(S::Rejoin, S::Stable, R::SyncGroupAnswered),
                t0 + 20 * MS,
            );
        });
        assert_eq!(counter(&values, FAILED_REBALANCE_TOTAL, &[]), 0);
        assert_eq!(counter(&values, REBALANCE_TOTAL, &[]), 1);
        assert_eq!(samples(&values, REBALANCE_LATENCY_MS), [20.0]);
    }

    #[test]
    fn fencing_reasons_and_failed_commits() {
        let t0 = Instant::now();
        let values = run(|| {
            let mut m = MemberMetrics::new("g", GroupProtocol::Classic, t0);
            m.on_event(&state(S::Stable, S::Joining, R::FencedMemberEpoch), t0);
            m.on_event(&state(S::Joining, S::Rejoin, R::SelfFenced), t0);
            m.on_event(&state(S::Joining, S::Rejoin, R::MemberIdRequired), t0);
            for result in [
                Err(CommitError::RebalanceInProgress),
                Err(CommitError::Retriable {
                    code: codes::COORDINATOR_LOAD_IN_PROGRESS,
                }),
                Err(CommitError::Retriable {
                    code: codes::NOT_COORDINATOR,
                }),
                Err(CommitError::NotMember { reason: "x".into() }),
                Ok(()),
            ] {
                m.on_event(
                    &Event::Committed {
                        id: CommitId::from_raw(1),
                        result,
                    },
                    t0,
                );
            }
        });
        for (reason, n) in [("FENCED_MEMBER_EPOCH", 1), ("self-fenced", 1)] {
            assert_eq!(counter(&values, FENCED_TOTAL, &[("reason", reason)]), n);
        }
        assert_eq!(
            counter(&values, FENCED_TOTAL, &[("reason", "MEMBER_ID_REQUIRED")]),
            0
        );
        for (reason, n) in [
            ("rebalance_in_progress", 1),
            ("retriable", 2),
            ("not_member", 1),
        ] {
            assert_eq!(
                counter(&values, COMMIT_FAILED_TOTAL, &[("reason", reason)]),
                n
            );
        }
    }

    #[test]
    fn response_times_by_api() {
        let t0 = Instant::now();
        let ok = |body| -> Result<Response, TransportError> { Ok(Response { version: 4, body }) };
        let values = run(|| {
            let mut m = MemberMetrics::new("g", GroupProtocol::Classic, t0);
            let answers = [
                (
                    1,
                    ApiKey::Heartbeat,
                    ok(ResponseBody::Kafka(ResponseKind::Heartbeat(
                        HeartbeatResponse::default(),
                    ))),
                    3,
                ),
                // Errors in heartbeat answers are timed too (REBALANCE_IN_PROGRESS).
                (
                    2,
                    ApiKey::Heartbeat,
                    ok(ResponseBody::Kafka(ResponseKind::Heartbeat(
                        HeartbeatResponse::default().with_error_code(codes::REBALANCE_IN_PROGRESS),
                    ))),
                    5,
                ),
                (
                    3,
                    ApiKey::ConsumerGroupHeartbeat,
                    ok(ResponseBody::Kafka(ResponseKind::ConsumerGroupHeartbeat(
                        ConsumerGroupHeartbeatResponse::default(),
                    ))),
                    7,
                ),
                // No answer: not timed.
                (4, ApiKey::Heartbeat, Err(TransportError::Closed), 9),
                (
                    5,
                    ApiKey::JoinGroup,
                    ok(ResponseBody::Kafka(ResponseKind::JoinGroup(
                        JoinGroupResponse::default(),
                    ))),
                    11,
                ),
                // A failed join is not timed (as Java).
                (
                    6,
                    ApiKey::JoinGroup,
                    ok(ResponseBody::Kafka(ResponseKind::JoinGroup(
                        JoinGroupResponse::default().with_error_code(codes::MEMBER_ID_REQUIRED),
                    ))),
                    13,
                ),
                (
                    7,
                    ApiKey::SyncGroup,
                    ok(ResponseBody::Kafka(ResponseKind::SyncGroup(
                        SyncGroupResponse::default(),
                    ))),
                    15,
                ),
                (
                    8,
                    ApiKey::OffsetCommit,
                    ok(ResponseBody::Kafka(ResponseKind::OffsetCommit(
                        OffsetCommitResponse::default(),
                    ))),
                    17,
                ),
                (9, ApiKey::Metadata, Err(TransportError::Closed), 19),
            ];
            for (id, api, _, _) in &answers {
                m.on_request(RequestId::from_raw(*id), *api, t0);
            }
            for (id, _, result, ms) in &answers {
                m.on_response(RequestId::from_raw(*id), result, t0 + *ms * MS);
            }
            // The streams heartbeat feeds the heartbeat sensor too; a describe feeds none.
            let streams = [
                (
                    10,
                    Api::STREAMS_GROUP_HEARTBEAT,
                    ok(ResponseBody::StreamsGroupHeartbeat(Default::default())),
                    21,
                ),
                (
                    11,
                    Api::STREAMS_GROUP_DESCRIBE,
                    ok(ResponseBody::StreamsGroupDescribe(Default::default())),
                    23,
                ),
            ];
            for (id, api, result, ms) in &streams {
                m.on_request(RequestId::from_raw(*id), *api, t0);
                m.on_response(RequestId::from_raw(*id), result, t0 + *ms * MS);
            }
            // Unknown and repeated ids are ignored.
            m.on_response(RequestId::from_raw(1), &answers[0].2, t0 + 100 * MS);
            m.on_response(RequestId::from_raw(99), &answers[0].2, t0 + 100 * MS);
            assert!(m.in_flight.is_empty());
        });
        assert_eq!(
            samples(&values, HEARTBEAT_RESPONSE_TIME_MS),
            [3.0, 5.0, 7.0, 21.0]
        );
        assert_eq!(samples(&values, JOIN_TIME_MS), [11.0]);
        assert_eq!(samples(&values, SYNC_TIME_MS), [15.0]);
        assert_eq!(samples(&values, COMMIT_LATENCY_MS), [17.0]);
    }

    #[test]
    fn in_flight_timings_are_bounded() {
        let t0 = Instant::now();
        let mut m = MemberMetrics::new("g", GroupProtocol::Classic, t0);
        for id in 0..(3 * MAX_IN_FLIGHT as u64) {
            m.on_request(RequestId::from_raw(id), ApiKey::Heartbeat, t0);
        }
        assert!(m.in_flight.len() <= MAX_IN_FLIGHT);
    }

    #[test]
    fn describe_registers_every_metric() {
        let recorder = DebuggingRecorder::new();
        ::metrics::with_local_recorder(&recorder, describe);
        // Described but never recorded metrics are not in a snapshot; describing must not panic
        // and must not record values.
        assert!(recorder.snapshotter().snapshot().into_vec().is_empty());
    }
}
