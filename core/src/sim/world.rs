//! The simulated world: members, the coordinator, the network, and a virtual clock that jumps
//! from one deadline to the next.
//!
//! A member is any [`SimMember`] (this crate's [`ClassicMember`] and [`Member`] implement it, so
//! can a user's own consumer; a [`StreamsMember`] joins through
//! [`SimStreamsMember`], [`World::add_streams`]). Each
//! slot holds one process at a time; [`World::restart`] replaces it with a new process (the old
//! one is dead: its connections are closed; what it already sent is still delivered, and the
//! broker processes what it has of it as a real broker does, see [`super::network`]).
//!
//! The client side behaves like a Kafka transport: one connection per target (bootstrap, and one
//! per coordinator node), requests encoded at the highest version both sides speak, a request
//! that times out closes its connection (every other request on it fails with
//! `TransportError::Disconnected`, as it does when the connection fails under the client: a
//! reset, or the broker closing it), and, with [`SimConfig::close_on_coordinator_loss`] (the Java
//! client's `markCoordinatorUnknown`, which disconnects), a member that forgets its coordinator
//! closes the coordinator connection.
//!
//! Every step is traced (one line per delivered request, read, processed request, answer, event);
//! [`World::violations`] lists broken invariants, checked after every step.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::ConnId;
use super::coordinator::{
    self, CoordinatorConfig, SimCoordinator, describe_request, describe_response, response_error,
};
use super::invariants::Snapshot;
use super::network::{
    AnswerFate, Arrival, ConnKind, Delivery, Frame, NetConfig, NetEvent, Network,
};
use super::streams_member::SimStreamsMember;
use crate::config::{GroupConfig, GroupProtocol};
use crate::connections::{self, Connections, Failed, Route, VecMap};
use crate::error::ApiMisuse;
use crate::error::{ConfigError, GroupError, TransportError};
use crate::machine::classic::ClassicMember;
use crate::machine::events::{
    CloseOptions, CommitId, CommitOffset, Event, MemberState, RevokeTicket,
};
use crate::machine::member::Member;
use crate::machine::streams::{Interventions, StreamsConfig, StreamsMember, StreamsProcess};
use crate::machine::{Machine, TopicPartition};
use crate::request::{
    Api, Broker, Outbound, RequestBody, RequestId, Response, ResponseBody, Target,
};
use crate::wire::{self, BrokerVersions};

/// What the world needs from a member: the sans-IO drive contract ([`Machine`]) plus the
/// commands a schedule uses and the accessors invariants read.
pub trait SimMember: Machine<Event = Event> + fmt::Debug {
    /// The application's poll loop ran.
    fn poll(&mut self, now: Instant);
    /// Subscribes to topics.
    fn subscribe(&mut self, topics: Vec<String>, now: Instant) -> Result<(), ApiMisuse>;
    /// Unsubscribes.
    fn unsubscribe(&mut self, now: Instant);
    /// Closes the member.
    fn close(&mut self, options: CloseOptions, now: Instant);
    /// Commits offsets.
    fn commit(&mut self, offsets: Vec<CommitOffset>, now: Instant) -> CommitId;
    /// Hands back a revocation ticket.
    fn complete_revocation(&mut self, ticket: RevokeTicket, now: Instant) -> Result<(), ApiMisuse>;
    /// The member id.
    fn member_id(&self) -> String;
    /// The generation (classic) or member epoch (consumer).
    fn generation(&self) -> i32;
    /// Where the member stands.
    fn state(&self) -> MemberState;
    /// The partitions the member owns.
    fn assignment(&self) -> Vec<TopicPartition>;
    /// The coordinator, when known.
    fn coordinator(&self) -> Option<Broker>;
    /// The static member's instance id.
    fn instance_id(&self) -> Option<String>;
    /// The terminal error, once stopped on one.
    fn fatal_error(&self) -> Option<GroupError>;
    /// The group protocol the member speaks: classic or consumer (KIP-848). The world checks
    /// each protocol's invariants (see [`World::violations`]).
    fn protocol(&self) -> GroupProtocol;
    /// A streams-group member (KIP-1071) shows itself here; the world then checks the streams
    /// invariants for it instead of the classic / consumer ones.
    fn streams(&self) -> Option<&StreamsMember> {
        None
    }
    /// Lines for the trace about what the member did that its [`Event`]s do not say (drained
    /// after every input).
    fn take_notes(&mut self) -> Vec<String> {
        Vec::new()
    }
}

/// Implements [`SimMember`] for a member type whose inherent methods of the same names do the
/// work.
macro_rules! sim_member {
    ($ty:ident) => {
        impl SimMember for $ty {
            fn poll(&mut self, now: Instant) {
                $ty::poll(self, now)
            }
            fn subscribe(&mut self, topics: Vec<String>, now: Instant) -> Result<(), ApiMisuse> {
                $ty::subscribe(self, topics, now)
            }
            fn unsubscribe(&mut self, now: Instant) {
                $ty::unsubscribe(self, now)
            }
            fn close(&mut self, options: CloseOptions, now: Instant) {
                $ty::close(self, options, now)
            }
            fn commit(&mut self, offsets: Vec<CommitOffset>, now: Instant) -> CommitId {
                $ty::commit(self, offsets, now)
            }
            fn complete_revocation(
                &mut self,
                ticket: RevokeTicket,
                now: Instant,
            ) -> Result<(), ApiMisuse> {
                $ty::complete_revocation(self, ticket, now)
            }
            fn member_id(&self) -> String {
                $ty::member_id(self).to_owned()
            }
            fn generation(&self) -> i32 {
                $ty::generation(self)
            }
            fn state(&self) -> MemberState {
                $ty::state(self)
            }
            fn assignment(&self) -> Vec<TopicPartition> {
                $ty::assignment(self)
            }
            fn coordinator(&self) -> Option<Broker> {
                $ty::coordinator(self).cloned()
            }
            fn instance_id(&self) -> Option<String> {
                self.config().instance_id.clone()
            }
            fn fatal_error(&self) -> Option<GroupError> {
                $ty::fatal_error(self).cloned()
            }
            fn protocol(&self) -> GroupProtocol {
                $ty::protocol(self)
            }
        }
    };
}

sim_member!(ClassicMember);
sim_member!(Member);

/// Settings of a [`World`].
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Seeds every random choice (network delays, faults, member ids, members' jitter when
    /// their config has no seed).
    pub seed: u64,
    /// The group the coordinator serves.
    pub group_id: String,
    /// Topics and partition counts.
    pub topics: Vec<(String, i32)>,
    /// The network's delays and faults.
    pub net: NetConfig,
    /// The coordinator's settings (`group_id`, `topics` and `seed` are taken from above).
    pub coordinator: CoordinatorConfig,
    /// A member that forgets its coordinator closes the coordinator connection (the Java
    /// client's `markCoordinatorUnknown` disconnects; this crate's TCP transport keeps it).
    pub close_on_coordinator_loss: bool,
    /// The application polls whenever its member does anything (never misses
    /// `max.poll.interval.ms`); switch off per member with [`World::set_polling`].
    pub app_polls: bool,
    /// How long the application takes to hand back a revocation ticket.
    pub revocation_delay: Duration,
    /// Encode and decode every request and answer through [`crate::wire`].
    pub wire_codec: bool,
    /// Keep a trace (one line per step).
    pub trace: bool,
    /// The API versions the broker serves.
    pub versions: BrokerVersions,
}

/// The API ranges a 4.x broker serves (protocol.md §1; OffsetCommit/Fetch up to 9 as the classic
/// client caps them, ConsumerGroupHeartbeat 0-1, StreamsGroupHeartbeat / StreamsGroupDescribe
/// 0-1).
pub fn broker_versions_4x() -> BrokerVersions {
    let mut v = BrokerVersions::default();
    for (api, lo, hi) in [
        (ApiKey::ApiVersions, 0, 4),
        (ApiKey::Metadata, 0, 13),
        (ApiKey::FindCoordinator, 0, 6),
        (ApiKey::JoinGroup, 0, 9),
        (ApiKey::SyncGroup, 0, 5),
        (ApiKey::Heartbeat, 0, 4),
        (ApiKey::LeaveGroup, 0, 5),
        (ApiKey::OffsetCommit, 2, 9),
        (ApiKey::OffsetFetch, 1, 9),
        (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    ] {
        v.set(api, Some(lo..=hi));
    }
    // KIP-1071 streams groups (GA in 4.2; static members in 4.4).
    v.set(Api::STREAMS_GROUP_HEARTBEAT, Some(0..=1));
    v.set(Api::STREAMS_GROUP_DESCRIBE, Some(0..=1));
    v
}

impl SimConfig {
    /// Defaults for `seed`: group "g", no topics, a quiet network, Java-like connection closing,
    /// an application that always polls and hands tickets back at once, the wire codec on.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            group_id: "g".into(),
            topics: Vec::new(),
            net: NetConfig::default(),
            coordinator: CoordinatorConfig::new("g"),
            close_on_coordinator_loss: true,
            app_polls: true,
            revocation_delay: Duration::ZERO,
            wire_codec: true,
            trace: true,
            versions: broker_versions_4x(),
        }
    }

    /// Adds a topic with `partitions` partitions.
    pub fn with_topic(mut self, topic: &str, partitions: i32) -> Self {
        self.topics.push((topic.to_owned(), partitions));
        self
    }
}

/// A slot in the world: one process at a time (see [`World::restart`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberSlot(pub usize);

/// An answer a process received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// When.
    pub at: Duration,
    /// The API.
    pub api: Api,
    /// The (first) error code.
    pub code: i16,
}

pub(super) struct Process {
    pub(super) name: String,
    slot: usize,
    pub(super) member: Option<Box<dyn SimMember>>,
    pub(super) instance_id: Option<String>,
    pub(super) started_at: Instant,
    pub(super) last_processed_at: Option<Instant>,
    /// Its connections and the requests in flight on them (the client's connection rules).
    conns: Connections<ConnId, RequestId>,
    tickets: VecDeque<(Instant, RevokeTicket)>,
    /// Partitions of the revocation tickets the application still holds (it is still
    /// processing / committing them), by ticket id.
    pub(super) revoking: BTreeMap<u64, Vec<TopicPartition>>,
    seen: Vec<Seen>,
    events: Vec<(Duration, String)>,
    polling: bool,
    timer_floor: Option<Instant>,
    /// Answers to the process are dropped until then (one-way loss: its requests still reach
    /// the broker), see [`World::drop_answers`].
    deaf_until: Option<Instant>,
    /// The process is not driven until then (starved of CPU), see [`World::starve`]: its
    /// timers wait, and its answers are held in `held`.
    pub(super) frozen_until: Option<Instant>,
    held: Vec<Delivery>,
    /// Highest generation seen per member id (invariant: never goes backwards).
    pub(super) generations: BTreeMap<String, i32>,
    /// Member ids the process held when the coordinator moved: their generations may go back
    /// (see `World::move_coordinator`).
    pub(super) moved_ids: BTreeSet<String>,
    /// KIP-848: the highest member epoch the process held (invariant: a later epoch is 0 or at
    /// least this).
    pub(super) max_epoch: i32,
    /// KIP-848: every member id the process sent in a ConsumerGroupHeartbeat.
    pub(super) member_ids: VecMap<String, ()>,
    /// KIP-848 instance-id conflicts answered to the process, by request: the code and the
    /// member id that held the instance id when the coordinator answered.
    pub(super) conflicts: BTreeMap<(ConnId, i32), (i16, Option<String>)>,
    /// Whether the last UNRELEASED_INSTANCE_ID the process received was answered while another
    /// process's member id held the instance id.
    pub(super) unreleased_elsewhere: bool,
    /// The member as the invariants last saw it (`None` once dead).
    pub(super) snapshot: Option<Snapshot>,
    /// The member's `poll_timeout`, re-read after every input that reached it.
    deadline: Option<Instant>,
    /// The process's entries in the world's action index (effective and original time) for
    /// `RequestTimeout`, `Ticket` and `MemberTimer`, as last queued.
    queued: [Option<(Instant, Instant)>; 3],
    /// KIP-848: the partitions the process is registered as owning in the world's ownership
    /// index (nothing while it is a zombie, dead, or speaks the classic protocol).
    pub(super) claimed: Vec<TopicPartition>,
    /// Classic: the (partition, generation) pairs the process is registered as owning.
    pub(super) classic_claimed: Vec<(TopicPartition, (u32, i32))>,
    /// Classic: which coordinator incarnation ([`World::move_coordinator`] starts a new one)
    /// answered the process's JoinGroups, by generation: generation numbers repeat across a
    /// move (the new coordinator starts from the last committed one).
    pub(super) gen_incarnation: BTreeMap<i32, u32>,
    /// KIP-848: partitions the process owns that the coordinator released on a stale heartbeat
    /// of the process (see [`World::hazards`]), until the process no longer owns them.
    pub(super) stale_acked: BTreeSet<TopicPartition>,
    /// KIP-848: the highest correlation id of the process's ConsumerGroupHeartbeats the
    /// coordinator processed (correlation ids grow across the process's connections).
    pub(super) heartbeat_processed: i32,
    /// After a stale heartbeat was processed: answers to this process's heartbeats up to this
    /// correlation were computed before it, so what they assign may already be gone at the
    /// coordinator (see `note_stale_ack`).
    pub(super) stale_answers_upto: i32,
}

impl fmt::Debug for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Process")
            .field("name", &self.name)
            .field("alive", &self.member.is_some())
            .finish_non_exhaustive()
    }
}

/// Which processes the last step (or the commands since) may have changed.
#[derive(Debug, Clone, Default)]
pub(super) struct Touched {
    all: bool,
    procs: Vec<usize>,
}

impl Touched {
    fn add(&mut self, p: usize) {
        if !self.all && self.procs.last() != Some(&p) {
            self.procs.push(p);
        }
    }

    fn add_all(&mut self) {
        self.all = true;
        self.procs.clear();
    }

    /// The processes, in order, each once; empties the set.
    pub(super) fn take(&mut self, procs: usize) -> Vec<usize> {
        let t = std::mem::take(self);
        if t.all {
            return (0..procs).collect();
        }
        let mut v = t.procs;
        v.sort_unstable();
        v.dedup();
        v
    }
}

type Script = Box<dyn FnOnce(&mut World)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Action {
    Script,
    Up,
    NetTimer,
    Broker,
    CoordinatorTimer,
    Coordinator,
    Down,
    RequestTimeout(usize),
    Ticket(usize),
    MemberTimer(usize),
}

/// The simulated world (see the module docs).
pub struct World {
    config: SimConfig,
    start: Instant,
    now: Instant,
    rng: ChaCha8Rng,
    pub(super) coordinator: SimCoordinator,
    network: Network,
    pub(super) procs: Vec<Process>,
    slots: Vec<usize>,
    scripts: BTreeMap<(Instant, u64), Script>,
    script_seq: u64,
    /// Which process opened each connection (kept after the connection closes).
    conn_owner: BTreeMap<ConnId, usize>,
    /// The node each coordinator connection goes to.
    conn_node: BTreeMap<ConnId, i32>,
    /// When the coordinator last moved ([`World::move_coordinator`]).
    pub(super) coordinator_moved_at: Option<Instant>,
    /// How many times the coordinator moved: its incarnation.
    pub(super) coordinator_moves: u32,
    /// Static registrations (instance id, member id) the coordinator reverted after answering
    /// them ([`SimCoordinator::take_reverted_registrations`]).
    pub(super) reverted_registrations: BTreeSet<(String, String)>,
    /// Processes answered FENCED_INSTANCE_ID by a coordinator that took over since they started
    /// while no other process held their instance id (see `check_fence`).
    pub(super) excused_fences: BTreeSet<usize>,
    trace: Vec<String>,
    pub(super) violations: Vec<String>,
    anomalies: Vec<String>,
    pub(super) hazards: Vec<String>,
    steps: u64,
    steps_at_now: u64,
    /// Answers delivered to the request they answer, by API key.
    delivered: Vec<u64>,
    pub(super) touched: Touched,
    /// Processes whose cached deadline may be stale.
    stale_deadlines: Touched,
    /// The processes' timed actions by (effective time, original time, action), and the same
    /// by (original time, action, effective time): `next_action` reads the earliest without a
    /// scan of every process.
    by_at: BTreeSet<(Instant, Instant, Action)>,
    by_orig: BTreeSet<(Instant, Action, Instant)>,
    /// KIP-848 ownership index: for each partition, the processes registered as owning it
    /// (see `Process::claimed`), in process order.
    pub(super) claims: BTreeMap<TopicPartition, Vec<usize>>,
    /// Classic ownership index: for each (partition, generation), its owners in process order.
    pub(super) classic_claims: BTreeMap<(TopicPartition, (u32, i32)), Vec<usize>>,
    /// Live processes by the member id of their last snapshot.
    pub(super) by_member_id: BTreeMap<String, Vec<usize>>,
    /// Processes whose KIP-848 ownership must be re-read at the next observation.
    pub(super) recheck: BTreeSet<usize>,
    /// Processes with partitions in `stale_acked`.
    pub(super) stale_procs: BTreeSet<usize>,
    /// Whether the last observation saw a KIP-848 group at the coordinator.
    pub(super) consumer_group_seen: bool,
    /// The streams processes (task guards) of the streams members added, by process id.
    pub(super) streams_processes: BTreeMap<String, StreamsProcess>,
    /// Streams: tasks held by two members of one unguarded process at one instant (the
    /// coordinator's double ownership, KAFKA-21401), one line per occurrence.
    pub(super) process_doubles: Vec<String>,
}

impl fmt::Debug for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("World")
            .field("seed", &self.config.seed)
            .field("elapsed", &self.elapsed())
            .field("procs", &self.procs)
            .finish_non_exhaustive()
    }
}

impl World {
    /// A world at virtual time zero, which is `start`: any instant (the caller's clock read,
    /// or a test's base). The world never reads the clock; every time it measures counts from
    /// `start`, so the same seed replays the same way whatever `start` is.
    pub fn new(config: SimConfig, start: Instant) -> Self {
        let mut coordinator_config = config.coordinator.clone();
        coordinator_config.group_id = config.group_id.clone();
        coordinator_config.topics = config.topics.clone();
        coordinator_config.seed = config.seed ^ 0xc00d;
        let mut coordinator = SimCoordinator::new(coordinator_config, start);
        coordinator.set_notes(config.trace);
        Self {
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            network: Network::new(config.net.clone()),
            coordinator,
            config,
            start,
            now: start,
            procs: Vec::new(),
            slots: Vec::new(),
            scripts: BTreeMap::new(),
            script_seq: 0,
            conn_owner: BTreeMap::new(),
            conn_node: BTreeMap::new(),
            coordinator_moved_at: None,
            coordinator_moves: 0,
            excused_fences: BTreeSet::new(),
            reverted_registrations: BTreeSet::new(),
            trace: Vec::new(),
            violations: Vec::new(),
            anomalies: Vec::new(),
            hazards: Vec::new(),
            steps: 0,
            steps_at_now: 0,
            delivered: Vec::new(),
            touched: Touched::default(),
            stale_deadlines: Touched::default(),
            by_at: BTreeSet::new(),
            by_orig: BTreeSet::new(),
            claims: BTreeMap::new(),
            classic_claims: BTreeMap::new(),
            by_member_id: BTreeMap::new(),
            recheck: BTreeSet::new(),
            stale_procs: BTreeSet::new(),
            consumer_group_seen: false,
            streams_processes: BTreeMap::new(),
            process_doubles: Vec::new(),
        }
    }

    // ------------------------------------------------------------------ accessors

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.config.seed
    }

    /// The virtual time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Virtual time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// Steps taken.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// How many answers of `api` reached the request they answer (a request/answer cycle each;
    /// answers to requests that timed out or whose connection closed are not counted).
    pub fn delivered(&self, api: impl Into<Api>) -> u64 {
        usize::try_from(api.into().key())
            .ok()
            .and_then(|i| self.delivered.get(i).copied())
            .unwrap_or(0)
    }

    /// The coordinator.
    pub fn coordinator(&self) -> &SimCoordinator {
        &self.coordinator
    }

    /// The coordinator, to change it (e.g. [`SimCoordinator::set_active`]).
    pub fn coordinator_mut(&mut self) -> &mut SimCoordinator {
        &mut self.coordinator
    }

    /// The network.
    pub fn network(&self) -> &Network {
        &self.network
    }

    /// The network, to change its configuration.
    pub fn network_mut(&mut self) -> &mut Network {
        &mut self.network
    }

    /// The slot's current member (of a dead process when the slot was killed).
    ///
    /// # Panics
    /// When the slot's process is dead.
    pub fn member(&self, h: MemberSlot) -> &dyn SimMember {
        self.procs[self.slots[h.0]]
            .member
            .as_deref()
            .expect("the slot's process is dead")
    }

    /// Whether the slot's process is alive.
    pub fn alive(&self, h: MemberSlot) -> bool {
        self.procs[self.slots[h.0]].member.is_some()
    }

    /// The slots.
    pub fn handles(&self) -> Vec<MemberSlot> {
        (0..self.slots.len()).map(MemberSlot).collect()
    }

    /// The answers the slot's current process received.
    pub fn seen(&self, h: MemberSlot) -> &[Seen] {
        &self.procs[self.slots[h.0]].seen
    }

    /// KIP-848 and streams groups: whether the last UNRELEASED_INSTANCE_ID the slot's current process received was
    /// answered while a member id of another process held the instance id (the broker's rule
    /// for a new member id; a fatal error is then the Java client's behaviour too), rather than
    /// the process's own earlier registration.
    pub fn unreleased_by_other_process(&self, h: MemberSlot) -> bool {
        self.procs[self.slots[h.0]].unreleased_elsewhere
    }

    /// Whether any process of the slot (current or earlier) received `code`.
    pub fn ever_seen(&self, h: MemberSlot, code: i16) -> bool {
        self.procs
            .iter()
            .filter(|p| p.slot == h.0)
            .any(|p| p.seen.iter().any(|s| s.code == code))
    }

    /// The events of the slot's current process, with their times.
    pub fn events(&self, h: MemberSlot) -> &[(Duration, String)] {
        &self.procs[self.slots[h.0]].events
    }

    /// Invariants broken so far, checked after every step:
    /// - every answer encodes at its version (with the wire codec on);
    /// - classic: FENCED_INSTANCE_ID only while another process holds the instance id (alive, or
    ///   its request was processed after this process started), or from a coordinator that took
    ///   over since the process started (it loaded an older registration), or for a registration
    ///   the coordinator reverted after answering it ([`World::hazards`]); a member never stops on
    ///   a FENCED_INSTANCE_ID of the coordinator that took over unless another process holds the
    ///   instance id (the self-fence through failover); no partition owned by two live members
    ///   of the same generation; a generation never goes backwards under one member id (except
    ///   for a member id held across a coordinator move: the new coordinator starts from the last
    ///   committed generation);
    /// - KIP-848: FENCED_INSTANCE_ID only while a member id of another process holds the
    ///   instance id; the member epoch never decreases except to 0; no partition owned by two
    ///   live members the coordinator holds, at any instant, and a held member owns only what
    ///   the coordinator assigned to it or awaits it to revoke (owned = the assignment plus the
    ///   partitions of revocation tickets not handed back); the coordinator's own invariants
    ///   ([`SimCoordinator::check_invariants`]);
    /// - streams groups (KIP-1071), over what the members' applications hold: no task held by two
    ///   members of one process whose task guard is on, at any instant (an unguarded process's
    ///   double ownership is recorded in [`World::process_doubles`] instead), and no active task
    ///   held by two live members at once, a zombie (a member the coordinator no longer holds
    ///   that has not heard yet) aside.
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// Oddities that are not invariant violations (e.g. a member reporting a deadline in the past
    /// that `handle_timeout` does not clear, which makes a real driver spin).
    pub fn anomalies(&self) -> &[String] {
        &self.anomalies
    }

    /// Protocol hazards the broker's rules allow (not member bugs, not invariant violations):
    /// KIP-848, a heartbeat processed after a later one of the same member (it was still buffered
    /// on a connection the member had closed) carries an epoch the broker still accepts (the
    /// current or previous one, `throwIfConsumerGroupMemberEpochIsInvalid`; any for epoch 0,
    /// KAFKA-19233) and an owned-partition set from before; `CurrentAssignmentBuilder.
    /// ownsRevokedPartitions` takes it as the acknowledgement of a revocation (or, for a stale
    /// -2 leave, `consumerGroupStaticMemberGroupLeave` drops the pending revocations), so the
    /// coordinator releases partitions the member owns by then. Until the member stops owning them, the
    /// ownership invariants leave those partitions out. Also the coordinator's
    /// ([`SimCoordinator::take_hazards`], [`SimCoordinator::take_reverted_registrations`]): a
    /// KIP-848 member restored by a failed append without its session timeout, and a static
    /// registration reverted by a failed or timed-out append after a rebalance answered it.
    pub fn hazards(&self) -> &[String] {
        &self.hazards
    }

    /// The trace so far, one line per step.
    pub fn trace(&self) -> &[String] {
        &self.trace
    }

    /// The trace as text, headed by the seed.
    pub fn trace_text(&self) -> String {
        let mut out = format!(
            "--- simulation trace (seed {}, {} steps, {:?} virtual) ---\n",
            self.config.seed,
            self.steps,
            self.elapsed()
        );
        for line in &self.trace {
            out.push_str(line);
            out.push('\n');
        }
        out
    }

    /// Panics with `msg`, the seed and the trace unless `cond` holds.
    #[track_caller]
    pub fn check(&self, cond: bool, msg: impl fmt::Display) {
        if !cond {
            panic!(
                "simulation check failed (seed {}): {msg}\n{}",
                self.config.seed,
                self.trace_text()
            );
        }
    }

    pub(super) fn log(&mut self, text: impl FnOnce() -> String) {
        if self.config.trace {
            let e = self.now - self.start;
            self.trace.push(format!(
                "{:>5}.{:03}s  {}",
                e.as_secs(),
                e.subsec_millis(),
                text()
            ));
        }
    }

    /// Adds a note to the trace.
    pub fn note(&mut self, text: &str) {
        self.log(|| format!("## {text}"));
    }

    // ------------------------------------------------------------------ members

    /// Adds a member in a new slot.
    pub fn add_member(&mut self, name: &str, member: Box<dyn SimMember>) -> MemberSlot {
        let slot = self.slots.len();
        let proc = self.new_process(name.to_owned(), slot, member);
        self.slots.push(proc);
        self.touch(proc);
        self.log(|| format!("{name}: process started"));
        MemberSlot(slot)
    }

    /// Adds a classic member built from `config` (seeded from the world when it has no seed);
    /// `setup` may adjust it first (e.g. `set_java_reset_policy`).
    pub fn add_classic(
        &mut self,
        name: &str,
        config: GroupConfig,
        setup: impl FnOnce(&mut ClassicMember),
    ) -> Result<MemberSlot, ConfigError> {
        let member = self.build_classic(config, setup)?;
        Ok(self.add_member(name, Box::new(member)))
    }

    fn build_classic(
        &mut self,
        mut config: GroupConfig,
        setup: impl FnOnce(&mut ClassicMember),
    ) -> Result<ClassicMember, ConfigError> {
        if config.seed.is_none() {
            config.seed = Some(self.rng.random());
        }
        config.group_id = self.config.group_id.clone();
        let mut m = ClassicMember::new(config, self.now)?;
        setup(&mut m);
        Ok(m)
    }

    /// Adds a streams member (KIP-1071) of `process` in a new slot, built from `config`
    /// (seeded from the world when it has neither a seed nor a member id) and `streams`; its
    /// `subscribe` joins with the topology. Several slots may share one process (one task
    /// guard), and a restart may bring a new one ([`World::restart_streams`]).
    pub fn add_streams(
        &mut self,
        name: &str,
        config: GroupConfig,
        streams: StreamsConfig,
        process: StreamsProcess,
    ) -> Result<MemberSlot, ConfigError> {
        let member = self.build_streams(config, streams, process)?;
        Ok(self.add_member(name, Box::new(member)))
    }

    /// Restarts the slot with a streams member (see [`World::add_streams`]).
    pub fn restart_streams(
        &mut self,
        h: MemberSlot,
        config: GroupConfig,
        streams: StreamsConfig,
        process: StreamsProcess,
    ) -> Result<(), ConfigError> {
        let member = self.build_streams(config, streams, process)?;
        self.restart(h, Box::new(member));
        Ok(())
    }

    fn build_streams(
        &mut self,
        mut config: GroupConfig,
        streams: StreamsConfig,
        process: StreamsProcess,
    ) -> Result<SimStreamsMember, ConfigError> {
        if config.seed.is_none() && config.member_id.is_none() {
            config.seed = Some(self.rng.random());
        }
        config.group_id = self.config.group_id.clone();
        let member = SimStreamsMember::new(StreamsMember::new(
            config,
            streams,
            process.clone(),
            self.now,
        )?);
        self.streams_processes
            .entry(process.process_id())
            .or_insert(process);
        Ok(member)
    }

    /// The streams processes of the streams members added so far, by process id.
    pub fn streams_processes(&self) -> &BTreeMap<String, StreamsProcess> {
        &self.streams_processes
    }

    /// How often the task guards of all streams processes stepped in so far.
    pub fn guard_interventions(&self) -> Interventions {
        let mut sum = Interventions::default();
        for p in self.streams_processes.values() {
            let i = p.interventions();
            sum.withheld += i.withheld;
            sum.given_up += i.given_up;
        }
        sum
    }

    /// Streams: every instant a task was held by two members of one unguarded process (the
    /// coordinator's double ownership the guard prevents), as seen after each step.
    pub fn process_doubles(&self) -> &[String] {
        &self.process_doubles
    }

    fn new_process(&mut self, name: String, slot: usize, member: Box<dyn SimMember>) -> usize {
        let generation = self.procs.iter().filter(|p| p.slot == slot).count();
        let name = if generation == 0 {
            name
        } else {
            format!("{name}#{}", generation + 1)
        };
        self.procs.push(Process {
            name,
            slot,
            instance_id: member.instance_id(),
            member: Some(member),
            started_at: self.now,
            last_processed_at: None,
            conns: Connections::default(),
            tickets: VecDeque::new(),
            revoking: BTreeMap::new(),
            seen: Vec::new(),
            events: Vec::new(),
            polling: self.config.app_polls,
            timer_floor: None,
            deaf_until: None,
            frozen_until: None,
            held: Vec::new(),
            generations: BTreeMap::new(),
            moved_ids: BTreeSet::new(),
            max_epoch: 0,
            member_ids: VecMap::new(),
            conflicts: BTreeMap::new(),
            unreleased_elsewhere: false,
            snapshot: None,
            deadline: None,
            queued: [None; 3],
            claimed: Vec::new(),
            classic_claimed: Vec::new(),
            gen_incarnation: BTreeMap::new(),
            stale_acked: BTreeSet::new(),
            heartbeat_processed: 0,
            stale_answers_upto: 0,
        });
        self.procs.len() - 1
    }

    /// Kills the slot's process: its member is dropped without a word, its connections close;
    /// what it already sent still reaches the broker.
    pub fn kill(&mut self, h: MemberSlot) {
        let p = self.slots[h.0];
        if self.procs[p].member.take().is_none() {
            return;
        }
        for c in self.conns_of(p, |_| true) {
            self.network.close(c);
        }
        self.touch(p);
        self.procs[p].conns.clear();
        self.procs[p].tickets.clear();
        self.procs[p].revoking.clear();
        let name = self.procs[p].name.clone();
        self.log(|| format!("{name}: process killed"));
    }

    /// Replaces the slot's process with a new one running `member` (the old one is killed first).
    pub fn restart(&mut self, h: MemberSlot, member: Box<dyn SimMember>) {
        self.kill(h);
        let base = self.procs[self.slots[h.0]]
            .name
            .split('#')
            .next()
            .unwrap_or_default()
            .to_owned();
        let p = self.new_process(base, h.0, member);
        self.slots[h.0] = p;
        self.touch(p);
        let name = self.procs[p].name.clone();
        self.log(|| format!("{name}: process started (restart)"));
    }

    /// Restarts the slot with a classic member built from `config`.
    pub fn restart_classic(
        &mut self,
        h: MemberSlot,
        config: GroupConfig,
        setup: impl FnOnce(&mut ClassicMember),
    ) -> Result<(), ConfigError> {
        let member = self.build_classic(config, setup)?;
        self.restart(h, Box::new(member));
        Ok(())
    }

    /// Runs a command on the slot's member at the current time, then drains its outputs.
    pub fn with<R>(
        &mut self,
        h: MemberSlot,
        what: &str,
        f: impl FnOnce(&mut dyn SimMember, Instant) -> R,
    ) -> Option<R> {
        let p = self.slots[h.0];
        let now = self.now;
        let name = self.procs[p].name.clone();
        self.log(|| format!("{name}: {what}"));
        self.touch(p);
        let r = f(self.procs[p].member.as_deref_mut()?, now);
        self.drain(p);
        Some(r)
    }

    /// Subscribes the slot's member to `topics`.
    pub fn subscribe(&mut self, h: MemberSlot, topics: &[&str]) {
        let topics: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
        let what = format!("subscribe {topics:?}");
        self.with(h, &what, |m, now| {
            let _ = m.subscribe(topics, now);
        });
    }

    /// Unsubscribes the slot's member.
    pub fn unsubscribe(&mut self, h: MemberSlot) {
        self.with(h, "unsubscribe", |m, now| m.unsubscribe(now));
    }

    /// Closes the slot's member.
    pub fn close(&mut self, h: MemberSlot, options: CloseOptions) {
        let what = format!("close {options:?}");
        self.with(h, &what, |m, now| m.close(options, now));
        // The close takes every revocation ticket back: the application stopped processing
        // (and committed) before it closed, so it holds nothing the close released.
        let p = self.slots[h.0];
        self.procs[p].tickets.clear();
        self.procs[p].revoking.clear();
    }

    /// Commits offset `offset` for every partition the slot's member owns.
    pub fn commit_owned(&mut self, h: MemberSlot, offset: i64) {
        self.with(h, "commit owned partitions", |m, now| {
            let offsets = m
                .assignment()
                .into_iter()
                .map(|partition| CommitOffset {
                    partition,
                    offset,
                    metadata: None,
                })
                .collect();
            m.commit(offsets, now);
        });
    }

    /// Whether the application of the slot polls (see [`SimConfig::app_polls`]).
    pub fn set_polling(&mut self, h: MemberSlot, on: bool) {
        let p = self.slots[h.0];
        self.procs[p].polling = on;
        let name = self.procs[p].name.clone();
        self.log(|| {
            format!(
                "{name}: application polling {}",
                if on { "on" } else { "off" }
            )
        });
    }

    /// Closes the slot's coordinator connections (the client drops them): requests in flight on
    /// them fail with `Disconnected`; the broker processes what it has of them as it does for
    /// any connection the client closed (see [`super::network`]).
    pub fn drop_connections(&mut self, h: MemberSlot) {
        let p = self.slots[h.0];
        self.touch(p);
        for c in self.conns_of(p, |r| matches!(r, Route::Coordinator(_))) {
            self.close_conn(p, c, "connection reset");
        }
        self.drain(p);
    }

    /// Resets the slot's connections (a network fault, or the broker closing them: the
    /// `Processor.close` of a connection reads the same): the broker reads nothing more from
    /// them (requests already with its handlers are processed, their answers dropped), and the
    /// client sees them fail one delay later, after the answers already on their way: every
    /// request in flight on them fails with `Disconnected`.
    pub fn reset_connections(&mut self, h: MemberSlot) {
        let p = self.slots[h.0];
        let now = self.now;
        for c in self.conns_of(p, |_| true) {
            if self.network.reset(c, now, &mut self.rng) {
                self.log(|| format!("network: resets {c}"));
            }
        }
        self.net_events();
    }

    // ------------------------------------------------------------------ faults and scripts

    /// For `d`, every answer to the slot's process is lost on its way (the broker read and
    /// processed the requests; the connections stay up): its requests in flight time out.
    pub fn drop_answers(&mut self, h: MemberSlot, d: Duration) {
        let p = self.slots[h.0];
        self.procs[p].deaf_until = Some(self.now + d);
        let name = self.procs[p].name.clone();
        self.log(|| format!("network: drops every answer to {name} for {d:?}"));
    }

    /// The slot's process is not driven for `d` (starved of CPU): no timer fires and no answer
    /// is handed to it meanwhile. Then its timers catch up first (`handle_timeout`), and the
    /// answers that arrived meanwhile follow, in order.
    pub fn starve(&mut self, h: MemberSlot, d: Duration) {
        let p = self.slots[h.0];
        let until = self.now + d;
        self.procs[p].frozen_until = Some(until);
        self.touch(p);
        let name = self.procs[p].name.clone();
        self.log(|| format!("{name}: process starved of CPU for {d:?}"));
        let at = until - self.start;
        self.schedule(at, move |w| w.thaw(p));
    }

    /// The end of a [`starve`](Self::starve): timers first, then the held answers.
    fn thaw(&mut self, p: usize) {
        if self.procs[p].frozen_until.take().is_none() {
            return;
        }
        let now = self.now;
        let name = self.procs[p].name.clone();
        self.log(|| format!("{name}: process runs again"));
        if let Some(m) = self.procs[p].member.as_deref_mut() {
            m.handle_timeout(now);
        }
        self.drain(p);
        for d in std::mem::take(&mut self.procs[p].held) {
            self.deliver(d);
        }
        self.touch(p);
    }

    /// An answer on its way to a process that drops ([`drop_answers`](Self::drop_answers)) or
    /// holds ([`starve`](Self::starve)) it: `None` then.
    fn intercept(&mut self, d: Delivery) -> Option<Delivery> {
        let p = self.proc_of_conn(d.conn)?;
        let now = self.now;
        if self.procs[p].deaf_until.is_some_and(|t| t > now) {
            let name = self.procs[p].name.clone();
            self.log(|| {
                format!(
                    "network: drops the answer {}#{} to {name}",
                    d.conn, d.correlation
                )
            });
            return None;
        }
        if self.procs[p].frozen_until.is_some_and(|t| t > now) {
            self.procs[p].held.push(d);
            return None;
        }
        Some(d)
    }

    /// The coordinator processes nothing for `d` (requests are still read and queued).
    pub fn stall(&mut self, d: Duration) {
        let until = self.now + d;
        self.network.stall(until);
        self.log(|| format!("coordinator stalls for {d:?}"));
    }

    /// The coordinator answers the oldest queued group request with `code` without processing
    /// it, even during a stall (see [`SimCoordinator::fail_request`]). False if none is queued.
    pub fn fail_queued_head(&mut self, code: i16) -> bool {
        let Some(q) = self.network.take_coordinator_head() else {
            return false;
        };
        let (conn, corr) = (q.conn, q.frame.correlation);
        self.log(|| {
            format!(
                "coordinator fails {conn}#{corr} {} with {}",
                describe_request(&q.frame.body),
                coordinator::name(code)
            )
        });
        q.fail(&mut self.coordinator, code);
        self.route_replies();
        true
    }

    /// The group's coordinator moves to node `to` (a leader change of its `__consumer_offsets`
    /// partition; a move before the previous one's load supersedes it): the coordinator unloads
    /// the group now ([`SimCoordinator::unload`]; the first
    /// `survivors` pending writes had reached the new leader and are replayed there), no broker
    /// leads the partition for `gap` (FindCoordinator answers COORDINATOR_NOT_AVAILABLE), then
    /// node `to` loads the committed records for `load` (COORDINATOR_LOAD_IN_PROGRESS) and serves
    /// the group. Requests on connections to any other node get NOT_COORDINATOR, so members must
    /// rediscover the coordinator.
    pub fn move_coordinator(&mut self, to: i32, gap: Duration, load: Duration, survivors: usize) {
        let from = self.coordinator.node_id();
        self.log(|| {
            format!("coordinator moves from node {from} to node {to} (gap {gap:?}, load {load:?})")
        });
        self.coordinator_moved_at = Some(self.now);
        self.coordinator_moves += 1;
        // ClassicGroup.fromRecord: the new coordinator starts from the last committed generation,
        // and completeClassicGroupJoin writes no record for a non-empty group, so the generations
        // it hands out may repeat ones the old coordinator handed out (under the same member ids).
        for p in &mut self.procs {
            let ids: Vec<String> = p.generations.keys().cloned().collect();
            p.moved_ids.extend(ids);
            p.generations.clear();
        }
        self.coordinator.unload(survivors);
        self.route_replies();
        self.touch_all();
        let at = self.elapsed() + gap;
        let incarnation = self.coordinator_moves;
        self.schedule(at, move |w| {
            // A later move (before this load) supersedes this one.
            if w.coordinator_moves == incarnation {
                w.coordinator.load(to, load);
                w.route_replies();
            }
        });
    }

    /// Runs `f` at `at` (virtual time since the start).
    pub fn schedule(&mut self, at: Duration, f: impl FnOnce(&mut World) + 'static) {
        self.script_seq += 1;
        self.scripts
            .insert((self.start + at, self.script_seq), Box::new(f));
    }

    // ------------------------------------------------------------------ running

    /// Runs steps until `pred` holds (true) or `limit` of virtual time passed (false).
    pub fn run_until(&mut self, mut pred: impl FnMut(&World) -> bool, limit: Duration) -> bool {
        let end = self.now + limit;
        loop {
            if pred(self) {
                return true;
            }
            self.refresh_deadlines();
            match self.next_action() {
                Some((at, action)) if at <= end => self.step_to(at, action),
                _ => {
                    self.now = self.now.max(end);
                    return pred(self);
                }
            }
        }
    }

    /// Runs for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        self.run_until(|_| false, d);
    }

    /// Performs the next action (advancing the clock to it). False when nothing is left to do.
    pub fn step(&mut self) -> bool {
        self.refresh_deadlines();
        let Some((at, action)) = self.next_action() else {
            return false;
        };
        self.step_to(at, action);
        true
    }

    /// Re-reads the deadlines of the members an input reached since the last read.
    fn refresh_deadlines(&mut self) {
        for i in self.stale_deadlines.take(self.procs.len()) {
            self.procs[i].deadline = self.procs[i]
                .member
                .as_deref()
                .and_then(|m| m.poll_timeout().map(|(at, _)| at));
            self.requeue(i);
        }
    }

    /// Updates the process's entries in the action index: its earliest request timeout, its
    /// next ticket hand-back and its member's timer (none once dead).
    fn requeue(&mut self, i: usize) {
        let p = &self.procs[i];
        let next = if p.member.is_some() {
            [
                p.conns.next_deadline().map(|t| (t, t)),
                p.tickets.front().map(|(t, _)| (*t, *t)),
                p.deadline
                    .map(|t| (p.timer_floor.map_or(t, |f| f.max(t)), t)),
            ]
        } else {
            [None; 3]
        };
        // A starved process does nothing before it runs again.
        let floor = p.frozen_until;
        let next = next.map(|e| e.map(|(at, orig)| (floor.map_or(at, |f| at.max(f)), orig)));
        let actions = [
            Action::RequestTimeout(i),
            Action::Ticket(i),
            Action::MemberTimer(i),
        ];
        for (k, action) in actions.into_iter().enumerate() {
            let old = self.procs[i].queued[k];
            if old == next[k] {
                continue;
            }
            if let Some((at, orig)) = old {
                self.by_at.remove(&(at, orig, action));
                self.by_orig.remove(&(orig, action, at));
            }
            if let Some((at, orig)) = next[k] {
                self.by_at.insert((at, orig, action));
                self.by_orig.insert((orig, action, at));
            }
            self.procs[i].queued[k] = next[k];
        }
    }

    /// Performs `action`, due at `at`.
    fn step_to(&mut self, at: Instant, action: Action) {
        let (now, steps) = (&mut self.now, &mut self.steps);
        if let Some(stuck) = clock_step(now, steps, &mut self.steps_at_now, at, 100_000) {
            let elapsed = stuck - self.start;
            (self.anomalies).push(format!("over 100000 steps at {elapsed:?}: livelock"));
        }
        self.perform(action);
        self.observe(action);
    }

    fn next_action(&self) -> Option<(Instant, Action)> {
        // (effective time, original time, action)
        let mut best: Option<(Instant, Instant, Action)> = None;
        let mut consider = |at: Instant, orig: Instant, a: Action| {
            let at = at.max(self.now);
            let cand = (at, orig, a);
            if best.is_none_or(|b| (cand.0, cand.1, cand.2) < (b.0, b.1, b.2)) {
                best = Some(cand);
            }
        };
        if let Some(((t, _), _)) = self.scripts.iter().next() {
            consider(*t, *t, Action::Script);
        }
        if let Some(t) = self.network.next_up() {
            consider(t, t, Action::Up);
        }
        if let Some(t) = self.network.next_timer() {
            consider(t, t, Action::NetTimer);
        }
        if let Some(t) = self.network.next_broker_work() {
            let orig = self.network.broker_queue_head().unwrap_or(t);
            consider(t, orig, Action::Broker);
        }
        if let Some(t) = self.coordinator.poll_timeout() {
            let eff = self.network.stalled_until().map_or(t, |s| s.max(t));
            consider(eff, t, Action::CoordinatorTimer);
        }
        if let Some(t) = self.network.next_coordinator_work() {
            let orig = self
                .network
                .coordinator_queue()
                .next()
                .map_or(t, |q| q.read_at);
            consider(t, orig, Action::Coordinator);
        }
        if let Some(t) = self.network.next_down() {
            consider(t, t, Action::Down);
        }
        // The processes' actions (`requeue`): every one due by now counts as due now, so the
        // earliest of those is the least by (original time, action); else the least by time.
        let now = self.now;
        let due = self
            .by_orig
            .iter()
            .take_while(|(orig, _, _)| *orig <= now)
            .find(|(_, _, at)| *at <= now);
        match due {
            Some(&(orig, a, at)) => consider(at, orig, a),
            None => {
                if let Some(&(at, orig, a)) = self.by_at.first() {
                    consider(at, orig, a);
                }
            }
        }
        best.map(|(at, _, a)| (at, a))
    }

    fn perform(&mut self, action: Action) {
        let now = self.now;
        match action {
            Action::Script => self.touch_all(),
            Action::RequestTimeout(p) | Action::Ticket(p) | Action::MemberTimer(p) => self.touch(p),
            // Answers reach one process (`deliver` names it); the rest touches no member.
            _ => {}
        }
        match action {
            Action::Script => {
                let key = *self.scripts.keys().next().expect("scheduled");
                let f = self.scripts.remove(&key).expect("scheduled");
                f(self);
            }
            Action::Up => {
                self.network.deliver_up(now, &mut self.rng);
                self.net_events();
            }
            Action::NetTimer => {
                self.network.handle_timers(now, &mut self.rng);
                self.net_events();
            }
            Action::Broker => {
                if let Some(q) = self.network.take_broker_work(now) {
                    self.process(q, false);
                }
            }
            Action::CoordinatorTimer => {
                self.coordinator.handle_timeout(now);
                self.route_replies();
            }
            Action::Coordinator => {
                if let Some(q) = self.network.take_coordinator_work(now) {
                    self.process(q, true);
                }
            }
            Action::Down => match self.network.deliver_down(now) {
                Some(Arrival::Answer(d)) => {
                    if let Some(d) = self.intercept(d) {
                        self.deliver(d);
                    }
                }
                Some(Arrival::Closed { conn, cause, .. }) => {
                    // The connection failed under the client: every request in flight on it
                    // fails (NetworkClient.processDisconnection).
                    if let Some(p) = self.proc_of_conn(conn) {
                        self.close_conn(p, conn, cause.as_str());
                        self.drain(p);
                    }
                }
                None => {}
            },
            Action::RequestTimeout(p) => self.request_timeout(p),
            Action::Ticket(p) => {
                let Some((_, ticket)) = self.procs[p].tickets.pop_front() else {
                    return;
                };
                let name = self.procs[p].name.clone();
                self.log(|| format!("{name}: application hands back {ticket:?}"));
                self.procs[p].revoking.remove(&ticket.id);
                if let Some(m) = self.procs[p].member.as_deref_mut() {
                    let _ = m.complete_revocation(ticket, now);
                }
                self.drain(p);
            }
            Action::MemberTimer(p) => {
                let polling = self.procs[p].polling;
                let Some(m) = self.procs[p].member.as_deref_mut() else {
                    return;
                };
                // An application that polls continuously polled just now.
                if polling {
                    m.poll(now);
                }
                m.handle_timeout(now);
                self.drain(p);
                let still = self.procs[p]
                    .member
                    .as_deref()
                    .and_then(|m| m.poll_timeout())
                    .is_some_and(|(t, _)| t <= now);
                if still {
                    let state = self.procs[p]
                        .member
                        .as_deref()
                        .map_or("dead", |m| m.state().as_str());
                    let msg = format!(
                        "{}: deadline in the past not cleared by handle_timeout at {:?} (state {state}); a driver would spin",
                        self.procs[p].name,
                        self.elapsed()
                    );
                    if !self.anomalies.contains(&msg) {
                        self.anomalies.push(msg.clone());
                    }
                    self.log(|| format!("!! {msg}"));
                    self.procs[p].timer_floor = Some(now + Duration::from_millis(1));
                } else {
                    self.procs[p].timer_floor = None;
                }
            }
        }
    }

    /// Notes that a step (or a command between steps) may have changed these processes.
    fn touch(&mut self, p: usize) {
        self.touched.add(p);
        self.stale_deadlines.add(p);
    }

    /// Notes that any process may have changed.
    fn touch_all(&mut self) {
        self.touched.add_all();
        self.stale_deadlines.add_all();
    }

    fn net_events(&mut self) {
        for e in self.network.take_events() {
            match e {
                NetEvent::Delivered {
                    conn,
                    correlation,
                    unread,
                } => self.log(|| {
                    format!(
                        "    broker: {conn}#{correlation} delivered{}",
                        if unread {
                            " (connection muted: unread)"
                        } else {
                            ""
                        }
                    )
                }),
                NetEvent::Read {
                    conn,
                    correlation,
                    position,
                    overtook,
                } => self.log(|| {
                    let overtook = if overtook > 0 {
                        format!(", ahead of {overtook} read before it")
                    } else {
                        String::new()
                    };
                    if position > 0 {
                        format!(
                            "    broker: reads {conn}#{correlation} (coordinator queue #{position}{overtook})"
                        )
                    } else {
                        format!("    broker: reads {conn}#{correlation}{overtook}")
                    }
                }),
                NetEvent::Discarded { conn, correlation } => self.log(|| {
                    format!("    broker: {conn}#{correlation} never read: connection closed")
                }),
                NetEvent::BrokerClosed { conn, cause } => {
                    self.log(|| format!("    broker: {conn} closed ({})", cause.as_str()))
                }
            }
        }
    }

    pub(super) fn proc_of_conn(&self, conn: ConnId) -> Option<usize> {
        self.conn_owner.get(&conn).copied()
    }

    fn process(&mut self, q: super::network::Queued, group: bool) {
        let now = self.now;
        if let Some(p) = self.proc_of_conn(q.conn) {
            self.procs[p].last_processed_at = Some(now);
        }
        let (conn, corr) = (q.conn, q.frame.correlation);
        let stale = self.stale_heartbeat(&q);
        let who = if group { "coordinator" } else { "broker" };
        self.log(|| {
            format!(
                "    {who}: processes {conn}#{corr} {} v{}",
                describe_request(&q.frame.body),
                q.frame.version
            )
        });
        match self.conn_node.get(&conn) {
            // CoordinatorRuntime.contextOrThrow on a broker that does not lead the group's
            // partition (any more): NOT_COORDINATOR.
            Some(&node) if group && node != self.coordinator.node_id() => {
                self.log(|| format!("      rule: node {node} does not lead the group's partition: NOT_COORDINATOR"));
                q.fail(&mut self.coordinator, super::codes::NOT_COORDINATOR);
            }
            _ => q.process(&mut self.coordinator, now),
        }
        self.route_replies();
        if let Some((p, epoch)) = stale {
            self.procs[p].stale_answers_upto = self.procs[p].heartbeat_processed;
            self.note_stale_ack(p, epoch);
        }
    }

    fn route_replies(&mut self) {
        for n in self.coordinator.take_notes() {
            self.log(|| format!("      rule: {n}"));
        }
        for h in self.coordinator.take_hazards() {
            let msg = format!("{:?}: {h}", self.elapsed());
            self.log(|| format!("   hazard: {msg}"));
            self.hazards.push(msg);
        }
        for (instance, member_id) in self.coordinator.take_reverted_registrations() {
            let msg = format!(
                "{:?}: the registration of {member_id} for instance {instance:?} was reverted after it was answered (a static replacement's append failed or timed out after a rebalance answered it): its next request is fenced",
                self.elapsed()
            );
            self.hazards.push(msg);
            self.reverted_registrations.insert((instance, member_id));
        }
        while let Some(r) = self.coordinator.poll_response() {
            let now = self.now;
            let api = super::network::api_of(&r.body);
            self.note_instance_conflict(&r);
            if let ResponseBody::Kafka(ResponseKind::JoinGroup(j)) = &r.body
                && j.error_code == super::codes::NONE
                && let Some(p) = self.proc_of_conn(r.conn)
            {
                let incarnation = self.coordinator_moves;
                self.procs[p]
                    .gen_incarnation
                    .insert(j.generation_id, incarnation);
            }
            let body = if self.config.wire_codec {
                match roundtrip_response(&r.body, api, r.version, r.correlation) {
                    Ok(b) => b,
                    Err(e) => {
                        self.violations.push(format!(
                            "{:?}: the coordinator's {api:?} v{} answer does not encode: {e}",
                            self.elapsed(),
                            r.version
                        ));
                        r.body.clone()
                    }
                }
            } else {
                r.body.clone()
            };
            let summary = if self.config.trace {
                describe_response(&body)
            } else {
                String::new()
            };
            let fate =
                self.network
                    .answer(r.conn, r.correlation, r.version, body, now, &mut self.rng);
            let (conn, corr) = (r.conn, r.correlation);
            self.log(|| {
                let fate = match fate {
                    AnswerFate::WrittenToClosed => {
                        " -> into the socket the client closed (its side resets)".to_owned()
                    }
                    AnswerFate::WriteFailed { discarded } => format!(
                        " -> write fails: the client closed and reset; {discarded} unread discarded"
                    ),
                    AnswerFate::BrokerClosed => " -> dropped: the broker closed it".into(),
                    AnswerFate::ResetBefore => " -> LOST: connection reset (fault)".into(),
                    AnswerFate::Sent {
                        throttle,
                        reset_after,
                    } => format!(
                        "{}{}",
                        if throttle.is_zero() {
                            String::new()
                        } else {
                            format!(" (throttled {throttle:?})")
                        },
                        if reset_after {
                            " then connection reset (fault)"
                        } else {
                            ""
                        }
                    ),
                    AnswerFate::UnknownConnection => " -> unknown connection".into(),
                };
                format!("    broker: answers {conn}#{corr} {summary}{fate}")
            });
            self.net_events();
        }
    }

    fn deliver(&mut self, d: Delivery) {
        let Some(p) = self.proc_of_conn(d.conn) else {
            return;
        };
        self.touch(p);
        let now = self.now;
        let code = response_error(&d.body);
        let key = (d.conn, d.correlation);
        let Some(f) = self.procs[p].conns.answered(d.conn, d.correlation) else {
            return;
        };
        let id = f.tag;
        if let Ok(i) = usize::try_from(d.api.key()) {
            if self.delivered.len() <= i {
                self.delivered.resize(i + 1, 0);
            }
            self.delivered[i] += 1;
        }
        let name = self.procs[p].name.clone();
        let summary = if self.config.trace {
            describe_response(&d.body)
        } else {
            String::new()
        };
        self.log(|| {
            let throttle = if d.throttle.is_zero() {
                String::new()
            } else {
                format!(" (throttle_time_ms {})", d.throttle.as_millis())
            };
            format!("{name} <- {}#{} {summary}{throttle}", d.conn, d.correlation)
        });
        let at = self.elapsed();
        self.procs[p].seen.push(Seen {
            at,
            api: d.api,
            code,
        });
        if d.api == ApiKey::ConsumerGroupHeartbeat || d.api == Api::STREAMS_GROUP_HEARTBEAT {
            if matches!(
                code,
                super::codes::FENCED_INSTANCE_ID | super::codes::UNRELEASED_INSTANCE_ID
            ) {
                self.check_instance_conflict(p, key, code);
            }
        } else if code == super::codes::FENCED_INSTANCE_ID && d.api != Api::STREAMS_GROUP_HEARTBEAT
        {
            // The classic member's id now: a fence answering an earlier request may arrive
            // after the member rejoined with "" (`registration_reverted` looks at every id).
            if let Some(id) = self.procs[p].member.as_deref().map(|m| m.member_id())
                && !id.is_empty()
            {
                self.procs[p].member_ids.insert(id, ());
            }
            self.check_fence(p);
        }
        let Some(m) = self.procs[p].member.as_deref_mut() else {
            return;
        };
        m.handle_response(
            id,
            Ok(Response {
                version: d.version,
                body: d.body,
            }),
            now,
        );
        let epoch = m.generation();
        if d.api == ApiKey::ConsumerGroupHeartbeat
            && d.correlation <= self.procs[p].stale_answers_upto
        {
            // An answer computed before a stale heartbeat of this member was processed: the
            // stale one may have moved the member's assignment since (a request of a connection
            // the client closed is still processed, SocketServer), so what this answer assigns
            // may be gone at the coordinator already.
            self.note_stale_ack(p, epoch);
        }
        self.drain(p);
    }

    fn request_timeout(&mut self, p: usize) {
        let now = self.now;
        // A timed-out request closes its connection (NetworkClient.handleTimedOutRequests).
        let Some(e) = self.procs[p].conns.time_out(now) else {
            return;
        };
        let name = self.procs[p].name.clone();
        let (conn, api) = (e.conn, e.request.api);
        self.log(|| format!("{name}: {conn}#{} {api:?} timed out", e.correlation));
        if let Some(m) = self.procs[p].member.as_deref_mut() {
            m.handle_response(e.request.tag, Err(e.request.timed_out()), now);
        }
        self.closed(p, conn, "closed after a request timed out", e.failed);
        self.drain(p);
    }

    /// The connections of `p` whose route `which` takes: bootstrap first, then by node id.
    fn conns_of(&self, p: usize, which: impl Fn(Route) -> bool) -> Vec<ConnId> {
        let routes = self.procs[p].conns.routes();
        routes.filter(|(r, _)| which(*r)).map(|(_, c)| c).collect()
    }

    /// The client closes `conn`: requests in flight on it fail with Disconnected.
    fn close_conn(&mut self, p: usize, conn: ConnId, reason: &str) {
        if !self.network.is_open(conn) {
            return;
        }
        let failed = self.procs[p].conns.close(conn);
        self.closed(p, conn, reason, failed);
    }

    /// The client closed `conn` (its route forgotten): the network closes it, and `failed`, the
    /// requests that were in flight on it, fail with Disconnected.
    fn closed(&mut self, p: usize, conn: ConnId, reason: &str, failed: Failed<RequestId>) {
        self.touch(p);
        if self.network.is_open(conn) {
            self.network.close(conn);
        }
        let name = self.procs[p].name.clone();
        self.log(|| format!("{name}: closes {conn} ({reason})"));
        let now = self.now;
        for (corr, f) in failed {
            self.log(|| format!("{name}: {conn}#{corr} {:?} fails: disconnected", f.api));
            if let Some(m) = self.procs[p].member.as_deref_mut() {
                m.handle_response(f.tag, Err(connections::disconnected(conn, reason)), now);
            }
        }
    }

    /// Drains the process's member: requests go out, events are recorded, tickets scheduled;
    /// repeats until nothing changes.
    fn drain(&mut self, p: usize) {
        self.touch(p);
        let now = self.now;
        for _ in 0..1000 {
            let mut progress = false;
            if self.procs[p].polling
                && let Some(m) = self.procs[p].member.as_deref_mut()
            {
                m.poll(now);
            }
            while let Some(out) = self.procs[p]
                .member
                .as_deref_mut()
                .and_then(|m| m.poll_request())
            {
                progress = true;
                self.send(p, out);
            }
            while let Some(e) = self.procs[p]
                .member
                .as_deref_mut()
                .and_then(|m| m.poll_event())
            {
                progress = true;
                self.event(p, e);
            }
            let notes = self.procs[p]
                .member
                .as_deref_mut()
                .map(|m| m.take_notes())
                .unwrap_or_default();
            if !notes.is_empty() {
                let name = self.procs[p].name.clone();
                for n in notes {
                    self.log(|| format!("{name}: {n}"));
                }
            }
            // The Java client disconnects from a coordinator it marks unknown.
            if self.config.close_on_coordinator_loss
                && let Some(m) = self.procs[p].member.as_deref()
            {
                let keep = m.coordinator().map(|b| b.node_id);
                let stale = |r| matches!(r, Route::Coordinator(node) if Some(node) != keep);
                for c in self.conns_of(p, stale) {
                    progress = true;
                    self.close_conn(p, c, "coordinator marked unknown");
                }
            }
            if !progress {
                return;
            }
        }
        self.anomalies.push(format!(
            "{}: outputs did not settle after 1000 rounds at {:?}",
            self.procs[p].name,
            self.elapsed()
        ));
    }

    fn event(&mut self, p: usize, e: Event) {
        let now = self.now;
        let at = self.elapsed();
        let name = self.procs[p].name.clone();
        let text = match &e {
            Event::StateChanged {
                from,
                to,
                reason,
                member_id,
                generation,
            } => format!("{from} -> {to} ({reason}) member={member_id:?} gen={generation}"),
            Event::Assigned {
                added,
                owned,
                generation,
            } => format!(
                "assigned gen {generation}: +{} owned {}",
                fmt_partitions(added),
                fmt_partitions(owned)
            ),
            Event::Revoking { partitions, ticket } => {
                format!("revoking {} ({ticket:?})", fmt_partitions(partitions))
            }
            Event::Revoked { partitions } => format!("revoked {}", fmt_partitions(partitions)),
            Event::Lost { partitions, reason } => {
                format!("lost {} ({reason})", fmt_partitions(partitions))
            }
            Event::Committed { id, result } => format!("commit {id:?}: {result:?}"),
            Event::OffsetsFetched { id, result } => format!("fetch {id:?}: {:?}", result.is_ok()),
            Event::Fatal(err) => format!("FATAL: {err}"),
            Event::Closed => "closed".into(),
            Event::TopicsMissing { topics } => format!("topics missing {topics:?}"),
            Event::TopicsAppeared { topics } => format!("topics appeared {topics:?}"),
            Event::ConnectionTrouble { broker, error } => {
                format!("connection trouble with {broker}: {error}")
            }
            Event::NotJoined { error } => format!("not joined: {error}"),
            Event::InstanceHeld { instance_id, limit } => {
                format!("instance id {instance_id} held elsewhere; waiting up to {limit:?}")
            }
        };
        self.log(|| format!("{name}: event {text}"));
        if self.config.trace || matches!(e, Event::Fatal(_)) {
            self.procs[p].events.push((at, text));
        }
        if let Event::Fatal(GroupError::FencedInstanceId { .. }) = &e {
            self.check_fatal_fence(p);
        }
        if matches!(e, Event::Lost { .. } | Event::Fatal(_)) {
            // The member declared its partitions lost: the application stops processing them,
            // including those it was still revoking.
            self.procs[p].revoking.clear();
        }
        if let Event::Revoking { ticket, partitions } = e {
            self.procs[p].revoking.insert(ticket.id, partitions);
            let delay = self.config.revocation_delay;
            self.procs[p].tickets.push_back((now + delay, ticket));
        }
    }

    fn send(&mut self, p: usize, out: Outbound) {
        let now = self.now;
        let name = self.procs[p].name.clone();
        let fail = |w: &mut World, e: TransportError| {
            if let Some(m) = w.procs[p].member.as_deref_mut() {
                m.handle_response(out.id, Err(e), now);
            }
        };
        let built = wire::build(&out.request, &self.config.versions);
        let (api, version, body) = match built {
            Ok(b) => b,
            Err(e) => {
                self.log(|| format!("{name}: cannot build {:?}: {e}", out.request.api_key()));
                return fail(self, e);
            }
        };
        if let Target::Node(b) = &out.target {
            let e = connections::disconnected(b.addr(), "the simulation has no data-path brokers");
            return fail(self, e);
        }
        let route = Route::of(&out.target);
        let open = self.procs[p].conns.conn(route);
        let conn = match (open.filter(|c| self.network.is_open(*c)), route) {
            (Some(c), _) => c,
            (None, Route::Bootstrap | Route::Node(_)) => {
                let c = self.network.open(p, ConnKind::Bootstrap, now);
                self.log(|| format!("{name}: opens {c} (bootstrap)"));
                c
            }
            (None, Route::Coordinator(node)) => {
                let c = self.network.open(p, ConnKind::Coordinator, now);
                self.conn_node.insert(c, node);
                self.log(|| format!("{name}: opens {c} (coordinator node {node})"));
                c
            }
        };
        if open != Some(conn) {
            self.conn_owner.insert(conn, p);
            self.procs[p].conns.opened(route, conn);
        }
        match &body {
            RequestBody::Kafka(RequestKind::ConsumerGroupHeartbeat(r)) => {
                self.procs[p].member_ids.insert(r.member_id.to_string(), ());
            }
            RequestBody::StreamsGroupHeartbeat(r) => {
                self.procs[p].member_ids.insert(r.member_id.to_string(), ());
            }
            _ => {}
        }
        let correlation = self.procs[p]
            .conns
            .send(conn, out.id, api, out.timeout, now);
        let client_id = format!("sim-{}", self.procs[p].name);
        let body = if self.config.wire_codec {
            match roundtrip_request(&body, api, version, correlation, &client_id) {
                Ok(b) => b,
                Err(e) => {
                    self.log(|| format!("{name}: {api:?} v{version} does not encode: {e}"));
                    self.procs[p].conns.answered(conn, correlation);
                    return fail(self, e);
                }
            }
        } else {
            body
        };
        self.log(|| {
            format!(
                "{name} -> {conn}#{correlation} {} v{version}",
                describe_request(&body)
            )
        });
        let frame = Frame {
            correlation,
            api,
            version,
            client_id,
            body,
        };
        self.network.send(conn, frame, now, &mut self.rng);
    }

    /// Whether every live member subscribed or not is `Stable`, and the coordinator's group
    /// holds exactly them.
    pub fn all_stable(&self) -> bool {
        let live: BTreeSet<String> = self
            .procs
            .iter()
            .filter_map(|p| p.member.as_deref())
            .map(|m| m.member_id())
            .collect();
        let all = self
            .procs
            .iter()
            .filter_map(|p| p.member.as_deref())
            .all(|m| m.state() == MemberState::Stable);
        let members: BTreeSet<String> = self
            .coordinator
            .members()
            .into_iter()
            .map(|m| m.member_id)
            .collect();
        all && live == members
    }

    /// The partitions each live member owns, by slot name.
    pub fn ownership(&self) -> BTreeMap<String, Vec<TopicPartition>> {
        self.procs
            .iter()
            .filter_map(|p| {
                p.member
                    .as_deref()
                    .map(|m| (p.name.clone(), m.assignment()))
            })
            .collect()
    }
}

pub(super) fn fmt_partitions(ps: &[TopicPartition]) -> String {
    let v: Vec<String> = ps.iter().map(|p| p.to_string()).collect();
    format!("[{}]", v.join(","))
}

/// Encodes a request as the client would and decodes it as the broker would.
fn roundtrip_request(
    body: &RequestBody,
    api: Api,
    version: i16,
    correlation: i32,
    client_id: &str,
) -> Result<RequestBody, TransportError> {
    let frame = wire::encode_request(body, api, version, correlation, client_id)?;
    let frame = Bytes::from(frame).slice(4..);
    let (_, body) = wire::decode_request(frame)?;
    Ok(body)
}

/// Encodes an answer as the broker would and decodes it as the client would.
fn roundtrip_response(
    body: &ResponseBody,
    api: Api,
    version: i16,
    correlation: i32,
) -> Result<ResponseBody, TransportError> {
    let frame = wire::encode_response(body, api, version, correlation)?;
    let frame = Bytes::from(frame).slice(4..);
    Ok(wire::decode_response(frame, api, version)?.body)
}

/// Counts one step of a simulation's clock, due at `at`: `now` moves on to it (the steps at one
/// instant then count anew). More than `limit` steps at one instant is a livelock: the clock is
/// pushed on 1 ms and the instant it was stuck at is handed back, for the report.
pub(crate) fn clock_step(
    now: &mut Instant,
    steps: &mut u64,
    steps_at_now: &mut u64,
    at: Instant,
    limit: u64,
) -> Option<Instant> {
    if at > *now {
        *now = at;
        *steps_at_now = 0;
    }
    *steps += 1;
    *steps_at_now += 1;
    if *steps_at_now <= limit {
        return None;
    }
    let stuck = *now;
    *now += Duration::from_millis(1);
    *steps_at_now = 0;
    Some(stuck)
}
