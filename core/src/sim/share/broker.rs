//! The simulated brokers of a share group: the group coordinator (ShareGroupHeartbeat v1) and
//! the share-partition leaders (ShareFetch v1, ShareAcknowledge v1, with their share
//! sessions). Every rule names the Kafka 4.4 code it models; the module docs of
//! [`super`] list what is left out.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::share_acknowledge_request as ack_req;
use kafka_protocol::messages::share_acknowledge_response as ack_resp;
use kafka_protocol::messages::share_fetch_request as fetch_req;
use kafka_protocol::messages::share_fetch_response as sf;
use kafka_protocol::messages::share_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{
    ShareAcknowledgeRequest, ShareAcknowledgeResponse, ShareFetchRequest, ShareFetchResponse,
    ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::error::codes;
use crate::machine::share::AcknowledgeType;

/// The state of one record of a share partition (`SharePartition.RecordState`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordState {
    /// May be acquired.
    Available,
    /// Acquired by `member` until `until` (the acquisition lock).
    Acquired {
        /// The acquiring member id.
        member: String,
        /// When the acquisition lock expires.
        until: Instant,
    },
    /// ACCEPTed: terminal.
    Acknowledged,
    /// REJECTed, or delivered `group.share.delivery.count.limit` times: terminal.
    Archived,
}

/// One record of a share partition.
#[derive(Debug, Clone)]
pub struct Record {
    /// Its state.
    pub state: RecordState,
    /// How many times it was acquired.
    pub deliveries: i16,
    /// How many ACCEPTs were applied to it (1 at most when the rules hold).
    pub accepts: u32,
}

/// An acknowledgement batch as sent: first offset, last offset, acknowledge types.
type Batch = (i64, i64, Vec<i8>);

/// An acknowledgement batch a leader applied: (member id, partition, first, last, type).
pub type Applied = (String, i32, i64, i64, AcknowledgeType);

/// A share session on one broker (`ShareSession`): the member's partitions and the epoch the
/// next request must carry.
#[derive(Debug, Clone)]
pub struct Session {
    /// The next epoch expected.
    pub epoch: i32,
    /// The partitions in the session.
    pub partitions: BTreeSet<i32>,
    /// Tells sessions apart across replacements (a parked fetch checks it).
    pub id: u64,
}

/// A member of the share group, as the coordinator knows it.
#[derive(Debug, Clone)]
pub struct GroupMember {
    /// Its epoch (the group epoch once it heartbeated).
    pub epoch: i32,
    /// Whether it subscribes to the topic.
    pub subscribed: bool,
    /// Its last heartbeat (the session timer).
    pub last_heartbeat: Instant,
    /// The assignment last sent to it.
    pub sent: Option<Vec<i32>>,
}

/// What the brokers hold: the group, the share partitions and the sessions.
#[derive(Debug)]
pub struct Brokers {
    /// The topic name.
    pub topic: String,
    /// The topic id.
    pub topic_id: Uuid,
    /// Node ids of the brokers.
    pub nodes: Vec<i32>,
    /// The leader of each partition.
    pub leaders: Vec<i32>,
    /// The leader epoch of each partition.
    pub leader_epochs: Vec<i32>,
    /// The records of each partition.
    pub records: Vec<Vec<Record>>,
    /// Share sessions by (node, member id).
    pub sessions: BTreeMap<(i32, String), Session>,
    next_session: u64,
    /// Every (member id, partition, offset, delivery count) acquired.
    pub acquisitions: BTreeSet<(String, i32, i64, i16)>,
    /// Acknowledgement batches applied and not yet matched with a success the client reported.
    pub applied: Vec<Applied>,
    /// The coordinator's node.
    pub coordinator: i32,
    /// The coordinator loads the group until then (COORDINATOR_LOAD_IN_PROGRESS).
    pub loading_until: Option<Instant>,
    /// The group epoch.
    pub group_epoch: i32,
    /// The members by id.
    pub members: BTreeMap<String, GroupMember>,
    /// The target assignment by member id.
    pub target: BTreeMap<String, Vec<i32>>,
    /// `group.share.record.lock.duration.ms`.
    pub lock: Duration,
    /// `group.share.delivery.count.limit`.
    pub delivery_limit: i16,
    /// `group.share.session.timeout.ms`.
    pub session_timeout: Duration,
    /// `group.share.heartbeat.interval.ms`.
    pub heartbeat_interval: Duration,
    /// Rule breaks seen by the brokers (requests no client should send).
    pub violations: Vec<String>,
}

fn code(e: ResponseError) -> i16 {
    e.code()
}

/// The member id a ShareFetch or ShareAcknowledge carries (empty without one).
fn member_of(id: &Option<StrBytes>) -> String {
    id.as_ref().map(|m| m.to_string()).unwrap_or_default()
}

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_owned())
}

impl Brokers {
    /// `partitions` partitions of `records` records each, led round robin by `nodes`.
    pub fn new(nodes: Vec<i32>, partitions: i32, records: i64) -> Self {
        let n = partitions.max(1) as usize;
        let leaders = (0..n).map(|p| nodes[p % nodes.len()]).collect();
        let record = Record {
            state: RecordState::Available,
            deliveries: 0,
            accepts: 0,
        };
        Self {
            topic: "t".into(),
            topic_id: Uuid::from_u128(0x5ea7_0000_0000_0000_0000_0000_0000_0001),
            coordinator: nodes[0],
            nodes,
            leaders,
            leader_epochs: vec![0; n],
            records: vec![vec![record; records.max(0) as usize]; n],
            sessions: BTreeMap::new(),
            next_session: 0,
            acquisitions: BTreeSet::new(),
            applied: Vec::new(),
            loading_until: None,
            group_epoch: 0,
            members: BTreeMap::new(),
            target: BTreeMap::new(),
            lock: Duration::from_secs(30),
            delivery_limit: 5,
            session_timeout: Duration::from_secs(45),
            heartbeat_interval: Duration::from_secs(5),
            violations: Vec::new(),
        }
    }

    /// Whether every record is in a terminal state (Acknowledged or Archived).
    pub fn all_terminal(&self) -> bool {
        (self.records.iter().flatten())
            .all(|r| matches!(r.state, RecordState::Acknowledged | RecordState::Archived))
    }

    // ------------------------------------------------------------------ group coordinator

    /// Removes members whose session expired (`GroupMetadataManager.shareGroupSessionTimeout`:
    /// a member without a heartbeat for `group.share.session.timeout.ms` is removed and the
    /// group epoch bumps). Evaluated when the coordinator handles a heartbeat.
    fn expire_members(&mut self, now: Instant) {
        let timeout = self.session_timeout;
        let before = self.members.len();
        self.members
            .retain(|_, m| now.saturating_duration_since(m.last_heartbeat) < timeout);
        if self.members.len() != before {
            self.bump();
        }
    }

    /// The group epoch bumps and the target is recomputed (`shareGroupHeartbeat`: a membership
    /// or subscription change bumps the group epoch; the `SimpleAssignor` for share groups:
    /// with fewer members than partitions every partition goes to one member round robin,
    /// otherwise each member gets one partition and each partition ceil(members / partitions)
    /// members; every partition is assigned while a member subscribes; assignments are not
    /// exclusive).
    fn bump(&mut self) {
        self.group_epoch += 1;
        let subscribed: Vec<String> = (self.members.iter())
            .filter(|(_, m)| m.subscribed)
            .map(|(id, _)| id.clone())
            .collect();
        let p = self.records.len();
        let mut target: BTreeMap<String, Vec<i32>> = subscribed
            .iter()
            .map(|id| (id.clone(), Vec::new()))
            .collect();
        if !subscribed.is_empty() {
            if subscribed.len() <= p {
                for part in 0..p {
                    let id = &subscribed[part % subscribed.len()];
                    if let Some(v) = target.get_mut(id) {
                        v.push(part as i32);
                    }
                }
            } else {
                for (j, id) in subscribed.iter().enumerate() {
                    if let Some(v) = target.get_mut(id) {
                        v.push((j % p) as i32);
                    }
                }
            }
        }
        self.target = target;
    }

    /// The coordinator moves to `to`, loading the group for `load` (the new node answers
    /// COORDINATOR_LOAD_IN_PROGRESS meanwhile, the old one NOT_COORDINATOR). The group state
    /// survives (it is replayed from `__consumer_offsets`); session timers restart at the load
    /// (`GroupMetadataManager.onLoaded` reschedules every member's session timeout).
    pub fn move_coordinator(&mut self, to: i32, load: Duration, now: Instant) {
        self.coordinator = to;
        self.loading_until = Some(now + load);
        for m in self.members.values_mut() {
            m.last_heartbeat = m.last_heartbeat.max(now + load);
        }
    }

    /// ShareGroupHeartbeat v1 received by `node` (`GroupMetadataManager.shareGroupHeartbeat`).
    pub fn heartbeat(
        &mut self,
        node: i32,
        r: &ShareGroupHeartbeatRequest,
        now: Instant,
    ) -> ShareGroupHeartbeatResponse {
        let error = |c: i16| ShareGroupHeartbeatResponse::default().with_error_code(c);
        // GroupCoordinatorService: a node that is not the group's coordinator answers
        // NOT_COORDINATOR; the new coordinator answers COORDINATOR_LOAD_IN_PROGRESS while it
        // replays the log.
        if node != self.coordinator {
            return error(codes::NOT_COORDINATOR);
        }
        if self.loading_until.is_some_and(|t| now < t) {
            return error(codes::COORDINATOR_LOAD_IN_PROGRESS);
        }
        self.loading_until = None;
        let id = r.member_id.to_string();
        // throwIfShareGroupHeartbeatRequestIsInvalid: a member id is required (KIP-1082), the
        // epoch is 0, -1 or positive.
        if id.is_empty() {
            self.violations
                .push("ShareGroupHeartbeat with an empty member id".into());
            return error(codes::INVALID_REQUEST);
        }
        if r.member_epoch < -1 {
            self.violations.push(format!(
                "ShareGroupHeartbeat of {id} with epoch {} (share groups have no -2)",
                r.member_epoch
            ));
            return error(codes::INVALID_REQUEST);
        }
        self.expire_members(now);
        let subscribed = (r.subscribed_topic_names.as_ref())
            .map(|ts| ts.iter().any(|t| t.0.as_str() == self.topic));
        if r.member_epoch == -1 {
            // shareGroupLeave: the member is removed, the group epoch bumps; an unknown
            // member is UNKNOWN_MEMBER_ID (getOrMaybeCreateMember without create).
            if self.members.remove(&id).is_none() {
                return error(codes::UNKNOWN_MEMBER_ID);
            }
            self.bump();
            return ShareGroupHeartbeatResponse::default()
                .with_member_id(Some(s(&id)))
                .with_member_epoch(-1);
        }
        let full = r.subscribed_topic_names.is_some();
        if r.member_epoch == 0 {
            // A join (or a rejoin with the same id): the member is created if new
            // (getOrMaybeCreateMember with create = true) and its subscription recorded.
            let subscribed = subscribed.unwrap_or(false);
            let changed = match self.members.get(&id) {
                None => true,
                Some(m) => m.subscribed != subscribed,
            };
            let m = self.members.entry(id.clone()).or_insert(GroupMember {
                epoch: 0,
                subscribed,
                last_heartbeat: now,
                sent: None,
            });
            m.subscribed = subscribed;
            m.last_heartbeat = now;
            m.sent = None;
            if changed {
                self.bump();
            }
        } else {
            // throwIfShareGroupMemberEpochIsInvalid: an unknown member is UNKNOWN_MEMBER_ID;
            // an epoch other than the member's is FENCED_MEMBER_EPOCH (share members have no
            // previous-epoch grace: they own nothing to revoke).
            let Some(m) = self.members.get_mut(&id) else {
                return error(codes::UNKNOWN_MEMBER_ID);
            };
            if r.member_epoch != m.epoch {
                return error(codes::FENCED_MEMBER_EPOCH);
            }
            m.last_heartbeat = now;
            let changed = subscribed.is_some_and(|s| s != m.subscribed);
            if let Some(sub) = subscribed {
                m.subscribed = sub;
            }
            if changed {
                self.bump();
            }
        }
        // The member's epoch is the group epoch at once (no reconciliation: the assignment is
        // not exclusive); the assignment goes out when it changed or the request was full
        // (isFullRequest).
        let epoch = self.group_epoch;
        let assigned = self.target.get(&id).cloned().unwrap_or_default();
        let m = self.members.get_mut(&id).expect("just inserted");
        m.epoch = epoch;
        let send = full || m.sent.as_ref() != Some(&assigned);
        m.sent = Some(assigned.clone());
        let assignment = send.then(|| {
            let tps = if assigned.is_empty() {
                Vec::new()
            } else {
                vec![
                    TopicPartitions::default()
                        .with_topic_id(self.topic_id)
                        .with_partitions(assigned),
                ]
            };
            Assignment::default().with_topic_partitions(tps)
        });
        ShareGroupHeartbeatResponse::default()
            .with_member_id(Some(s(&id)))
            .with_member_epoch(epoch)
            .with_heartbeat_interval_ms(self.heartbeat_interval.as_millis() as i32)
            .with_assignment(assignment)
    }

    // ------------------------------------------------------------------ share partitions

    /// Lock expiry (`SharePartition.AcquisitionLockTimerTask`): an acquired record whose lock
    /// expired goes back to Available with its delivery count, or to Archived once delivered
    /// `group.share.delivery.count.limit` times. Evaluated before each share request.
    pub fn expire_locks(&mut self, now: Instant) {
        let limit = self.delivery_limit;
        for r in self.records.iter_mut().flatten() {
            if let RecordState::Acquired { until, .. } = r.state
                && until <= now
            {
                r.state = release_state(r.deliveries, limit);
            }
        }
    }

    /// Releases every record of `partition` acquired by `member` (`releaseAcquiredRecords`).
    fn release_member(&mut self, partition: usize, member: Option<&str>) {
        let limit = self.delivery_limit;
        for r in &mut self.records[partition] {
            if let RecordState::Acquired { member: m, .. } = &r.state
                && member.is_none_or(|x| x == m)
            {
                r.state = release_state(r.deliveries, limit);
            }
        }
    }

    /// Partition `p` moves to leader `to` (the leader epoch bumps). The new leader's
    /// SharePartition is initialized from the share coordinator's persisted state, which
    /// holds no acquisitions: records acquired at the old leader are Available again (their
    /// delivery counts kept, the limit archiving them). The old leader answers
    /// NOT_LEADER_OR_FOLLOWER for `p` from now on.
    pub fn move_leader(&mut self, p: usize, to: i32) {
        self.leaders[p] = to;
        self.leader_epochs[p] += 1;
        self.release_member(p, None);
    }

    /// A process died: its connections closed, its sessions are gone from every broker; its
    /// acquired records come back when their locks expire.
    pub fn drop_sessions(&mut self, member: &str) {
        self.sessions.retain(|(_, m), _| m != member);
    }

    /// Applies the acknowledgement batches of one partition (`SharePartition.acknowledge`):
    /// every offset must be acquired by `member`, else the whole partition's acknowledgement
    /// fails with INVALID_RECORD_STATE and nothing is applied. ACCEPT -> Acknowledged,
    /// RELEASE -> Available (Archived at the delivery limit), REJECT -> Archived.
    fn acknowledge(&mut self, node: i32, member: &str, p: i32, batches: &[Batch]) -> i16 {
        let Some(records) = usize::try_from(p).ok().and_then(|i| self.records.get(i)) else {
            return code(ResponseError::UnknownTopicOrPartition);
        };
        if self.leaders[p as usize] != node {
            return code(ResponseError::NotLeaderOrFollower);
        }
        let mut parsed = Vec::new();
        for (first, last, types) in batches {
            let kind = match types.as_slice() {
                [0] => AcknowledgeType::Gap,
                [1] => AcknowledgeType::Accept,
                [2] => AcknowledgeType::Release,
                [3] => AcknowledgeType::Reject,
                _ => return codes::INVALID_REQUEST,
            };
            if *first < 0 || first > last || *last >= records.len() as i64 {
                return code(ResponseError::InvalidRecordState);
            }
            for o in *first..=*last {
                match &records[o as usize].state {
                    RecordState::Acquired { member: m, .. } if m == member => {}
                    _ => return code(ResponseError::InvalidRecordState),
                }
            }
            parsed.push((*first, *last, kind));
        }
        let limit = self.delivery_limit;
        for (first, last, kind) in parsed {
            for o in first..=last {
                let r = &mut self.records[p as usize][o as usize];
                r.state = match kind {
                    AcknowledgeType::Accept => {
                        r.accepts += 1;
                        RecordState::Acknowledged
                    }
                    AcknowledgeType::Release => release_state(r.deliveries, limit),
                    AcknowledgeType::Reject | AcknowledgeType::Gap => RecordState::Archived,
                };
            }
            self.applied.push((member.to_owned(), p, first, last, kind));
        }
        0
    }

    /// Acquires up to `max` available records of `p` for `member`
    /// (`SharePartition.acquire`): lowest offsets first, each delivery count + 1, locked for
    /// `group.share.record.lock.duration.ms`; one AcquiredRecords per run of consecutive
    /// offsets with one delivery count.
    fn acquire(
        &mut self,
        member: &str,
        p: usize,
        max: &mut i32,
        now: Instant,
    ) -> Vec<sf::AcquiredRecords> {
        let until = now + self.lock;
        let mut out: Vec<sf::AcquiredRecords> = Vec::new();
        for (o, r) in self.records[p].iter_mut().enumerate() {
            if *max <= 0 {
                break;
            }
            if r.state != RecordState::Available {
                continue;
            }
            r.deliveries += 1;
            r.state = RecordState::Acquired {
                member: member.to_owned(),
                until,
            };
            *max -= 1;
            let o = o as i64;
            self.acquisitions
                .insert((member.to_owned(), p as i32, o, r.deliveries));
            match out.last_mut() {
                Some(a) if a.last_offset + 1 == o && a.delivery_count == r.deliveries => {
                    a.last_offset = o;
                }
                _ => out.push(
                    sf::AcquiredRecords::default()
                        .with_first_offset(o)
                        .with_last_offset(o)
                        .with_delivery_count(r.deliveries),
                ),
            }
        }
        out
    }

    fn not_leader(&self, p: i32) -> sf::LeaderIdAndEpoch {
        let i = p.max(0) as usize;
        sf::LeaderIdAndEpoch::default()
            .with_leader_id(self.leaders.get(i).copied().unwrap_or(-1))
            .with_leader_epoch(self.leader_epochs.get(i).copied().unwrap_or(-1))
    }

    /// ShareFetch v1 received by `node`: the session (`SharePartitionManager.newContext`),
    /// the piggybacked acknowledgements, then the acquisition. Returns the answer and whether
    /// it is empty (nothing acquired, no acknowledgement, no error): such a fetch waits
    /// MaxWaitMs for records (`DelayedShareFetch`) and is completed by [`Self::complete`].
    pub fn share_fetch(
        &mut self,
        node: i32,
        r: &ShareFetchRequest,
        now: Instant,
    ) -> (ShareFetchResponse, Option<u64>) {
        self.expire_locks(now);
        let member = member_of(&r.member_id);
        let top = |c: i16| (ShareFetchResponse::default().with_error_code(c), None);
        if member.is_empty() {
            self.violations
                .push("ShareFetch without a member id".into());
            return top(codes::INVALID_REQUEST);
        }
        let topic_ok = |t: &Uuid| *t == self.topic_id;
        let mut acks: BTreeMap<i32, Vec<Batch>> = BTreeMap::new();
        let mut named = BTreeSet::new();
        for t in r.topics.iter().filter(|t| topic_ok(&t.topic_id)) {
            for p in &t.partitions {
                named.insert(p.partition_index);
                if !p.acknowledgement_batches.is_empty() {
                    let b = batches(&p.acknowledgement_batches);
                    acks.entry(p.partition_index).or_default().extend(b);
                }
            }
        }
        let forgotten: BTreeSet<i32> = (r.forgotten_topics_data.iter())
            .filter(|t| topic_ok(&t.topic_id))
            .flat_map(|t| t.partitions.iter().copied())
            .collect();
        let key = (node, member.clone());
        let session_id = match r.share_session_epoch {
            // newContext, epoch 0: acknowledgements are refused (INVALID_REQUEST); the
            // member's session on this broker is removed and a new one made of the partitions
            // named (the old one's acquisitions run out with their locks).
            0 => {
                if !acks.is_empty() {
                    return top(codes::INVALID_REQUEST);
                }
                self.next_session += 1;
                let id = self.next_session;
                self.sessions.insert(
                    key.clone(),
                    Session {
                        epoch: 1,
                        partitions: named.clone(),
                        id,
                    },
                );
                id
            }
            // ShareFetch at the final epoch closes the session (acknowledgements only).
            -1 => {
                if !self.sessions.contains_key(&key) {
                    return top(code(ResponseError::ShareSessionNotFound));
                }
                let answer = self.apply_fetch_acks(node, &member, &acks);
                self.close_session(&key);
                return (answer, None);
            }
            // newContext, epoch > 0: the session must exist (SHARE_SESSION_NOT_FOUND) and the
            // epoch be the one expected (INVALID_SHARE_SESSION_EPOCH); ShareSession.update adds
            // the partitions named, then forgets; the epoch moves on (nextEpoch: wraps to 1).
            e => {
                let Some(session) = self.sessions.get_mut(&key) else {
                    return top(code(ResponseError::ShareSessionNotFound));
                };
                if session.epoch != e {
                    return top(code(ResponseError::InvalidShareSessionEpoch));
                }
                session.partitions.extend(named.iter().copied());
                for p in &forgotten {
                    session.partitions.remove(p);
                }
                session.epoch = if e == i32::MAX { 1 } else { e + 1 };
                session.id
            }
        };
        let mut answer = self.apply_fetch_acks(node, &member, &acks);
        let parts: Vec<i32> = self.sessions[&key].partitions.iter().copied().collect();
        let acquired = self.fetch_into(node, &member, &parts, r.max_records, &mut answer, now);
        answer.acquisition_lock_timeout_ms = self.lock.as_millis() as i32;
        let empty = !acquired && answer.responses.is_empty();
        (answer, empty.then_some(session_id))
    }

    /// A parked fetch's wait is over: acquires what is available now for the member's
    /// session `session_id` (nothing if the session was replaced or closed meanwhile).
    pub fn complete(
        &mut self,
        node: i32,
        r: &ShareFetchRequest,
        session_id: u64,
        now: Instant,
    ) -> ShareFetchResponse {
        self.expire_locks(now);
        let member = member_of(&r.member_id);
        let mut answer = ShareFetchResponse::default()
            .with_acquisition_lock_timeout_ms(self.lock.as_millis() as i32);
        let parts: Vec<i32> = match self.sessions.get(&(node, member.clone())) {
            Some(s) if s.id == session_id => s.partitions.iter().copied().collect(),
            _ => return answer,
        };
        self.fetch_into(node, &member, &parts, r.max_records, &mut answer, now);
        answer
    }

    /// Acquires for the partitions `parts` of a session into `answer`; true if any record was
    /// acquired.
    fn fetch_into(
        &mut self,
        node: i32,
        member: &str,
        parts: &[i32],
        max_records: i32,
        answer: &mut ShareFetchResponse,
        now: Instant,
    ) -> bool {
        let mut max = max_records.max(1);
        let mut any = false;
        for &p in parts {
            let Some(i) = usize::try_from(p).ok().filter(|i| *i < self.records.len()) else {
                let e = code(ResponseError::UnknownTopicOrPartition);
                partition_mut(answer, self.topic_id, p).error_code = e;
                continue;
            };
            if self.leaders[i] != node {
                // ReplicaManager: a broker that does not lead the partition answers
                // NOT_LEADER_OR_FOLLOWER with the current leader.
                let leader = self.not_leader(p);
                let d = partition_mut(answer, self.topic_id, p);
                d.error_code = code(ResponseError::NotLeaderOrFollower);
                d.current_leader = leader;
                continue;
            }
            let acquired = self.acquire(member, i, &mut max, now);
            if acquired.is_empty() {
                continue;
            }
            any = true;
            let (first, last) = (
                acquired[0].first_offset,
                acquired.last().map_or(0, |a| a.last_offset),
            );
            let d = partition_mut(answer, self.topic_id, p);
            d.records = Some(Bytes::from(format!("{p}:{first}..={last}")));
            d.acquired_records = acquired;
        }
        any
    }

    fn apply_fetch_acks(
        &mut self,
        node: i32,
        member: &str,
        acks: &BTreeMap<i32, Vec<Batch>>,
    ) -> ShareFetchResponse {
        let mut answer = ShareFetchResponse::default();
        for (p, b) in acks {
            let c = self.acknowledge(node, member, *p, b);
            let leader = self.not_leader(*p);
            let d = partition_mut(&mut answer, self.topic_id, *p);
            d.acknowledge_error_code = c;
            if c == code(ResponseError::NotLeaderOrFollower) {
                d.current_leader = leader;
            }
        }
        answer
    }

    /// Removes a session and releases the records its member acquired on the partitions this
    /// node leads (`SharePartitionManager.releaseSession`).
    fn close_session(&mut self, key: &(i32, String)) {
        self.sessions.remove(key);
        for p in 0..self.records.len() {
            if self.leaders[p] == key.0 {
                self.release_member(p, Some(&key.1));
            }
        }
    }

    /// ShareAcknowledge v1 received by `node` (`KafkaApis.handleShareAcknowledgeRequest`,
    /// `SharePartitionManager.acknowledgeSessionUpdate`): epoch 0 is INVALID_REQUEST; -1 needs
    /// the session (SHARE_SESSION_NOT_FOUND), applies the acknowledgements, then closes the
    /// session and releases its acquired records; a positive epoch must be the expected one.
    pub fn share_acknowledge(
        &mut self,
        node: i32,
        r: &ShareAcknowledgeRequest,
        now: Instant,
    ) -> ShareAcknowledgeResponse {
        self.expire_locks(now);
        let member = member_of(&r.member_id);
        let top = |c: i16| ShareAcknowledgeResponse::default().with_error_code(c);
        if member.is_empty() {
            self.violations
                .push("ShareAcknowledge without a member id".into());
            return top(codes::INVALID_REQUEST);
        }
        let key = (node, member.clone());
        match r.share_session_epoch {
            0 => return top(codes::INVALID_REQUEST),
            -1 => {
                if !self.sessions.contains_key(&key) {
                    return top(code(ResponseError::ShareSessionNotFound));
                }
            }
            e => {
                let Some(session) = self.sessions.get_mut(&key) else {
                    return top(code(ResponseError::ShareSessionNotFound));
                };
                if session.epoch != e {
                    return top(code(ResponseError::InvalidShareSessionEpoch));
                }
                session.epoch = if e == i32::MAX { 1 } else { e + 1 };
            }
        }
        let mut responses: Vec<ack_resp::PartitionData> = Vec::new();
        for t in &r.topics {
            for p in &t.partitions {
                let c = if t.topic_id != self.topic_id {
                    code(ResponseError::UnknownTopicId)
                } else {
                    let b = ack_batches(&p.acknowledgement_batches);
                    self.acknowledge(node, &member, p.partition_index, &b)
                };
                let mut d = ack_resp::PartitionData::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(c);
                if c == code(ResponseError::NotLeaderOrFollower) {
                    let l = self.not_leader(p.partition_index);
                    d.current_leader = ack_resp::LeaderIdAndEpoch::default()
                        .with_leader_id(l.leader_id)
                        .with_leader_epoch(l.leader_epoch);
                }
                responses.push(d);
            }
        }
        if r.share_session_epoch == -1 {
            self.close_session(&key);
        }
        let topics = if responses.is_empty() {
            Vec::new()
        } else {
            vec![
                ack_resp::ShareAcknowledgeTopicResponse::default()
                    .with_topic_id(self.topic_id)
                    .with_partitions(responses),
            ]
        };
        ShareAcknowledgeResponse::default().with_responses(topics)
    }
}

/// Released or lock-expired: Available, or Archived at the delivery limit
/// (`SharePartition.updateRecordState` with `maxDeliveryCount`).
fn release_state(deliveries: i16, limit: i16) -> RecordState {
    if deliveries >= limit {
        RecordState::Archived
    } else {
        RecordState::Available
    }
}

fn batches(b: &[fetch_req::AcknowledgementBatch]) -> Vec<Batch> {
    b.iter()
        .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()))
        .collect()
}

fn ack_batches(b: &[ack_req::AcknowledgementBatch]) -> Vec<Batch> {
    b.iter()
        .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()))
        .collect()
}

/// The answer's entry for partition `p` (made if missing).
fn partition_mut(answer: &mut ShareFetchResponse, topic: Uuid, p: i32) -> &mut sf::PartitionData {
    if !answer.responses.iter().any(|t| t.topic_id == topic) {
        answer
            .responses
            .push(sf::ShareFetchableTopicResponse::default().with_topic_id(topic));
    }
    let t = (answer.responses.iter_mut())
        .find(|t| t.topic_id == topic)
        .expect("just added");
    if let Some(i) = t.partitions.iter().position(|d| d.partition_index == p) {
        return &mut t.partitions[i];
    }
    t.partitions
        .push(sf::PartitionData::default().with_partition_index(p));
    t.partitions.last_mut().expect("just pushed")
}
