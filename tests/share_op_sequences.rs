//! Random operation sequences against the sans-IO KIP-932 share member
//! ([`ShareMember`], `core/src/machine/share`), with its rules checked after every step and on
//! every request it sends.
//!
//! A run ([`Run`]) builds one member (a member id of its own, a rack or none) and applies
//! [`Op`]s: `subscribe` (a subset of three topics; the empty one is refused), `unsubscribe`,
//! `close` (every [`CloseOptions`]), the application's `poll`, clock jumps that fire timers
//! (heartbeat, backoff, the membership lease, `max.poll.interval.ms`), answers to any request
//! still outstanding (the oldest, or one picked at random: answers arrive late and out of order
//! wherever the member has several in flight), and answers delivered a second time. An answer
//! is built for the request it answers by a small broker model: FindCoordinator found or an
//! error; Metadata naming the asked topics by their fixed topic ids (some left out or unknown);
//! ShareGroupHeartbeat with an error code of [`HEARTBEAT_CODES`] (or none), an epoch (the
//! broker's monotone one, a random one, 0, or a negative one) and an assignment by topic id
//! (of subscribed topics, of a topic never subscribed and of a topic id no Metadata names); or a
//! transport error (timeouts, resets, closed connections, refused connects, rarely
//! UnsupportedApi). With feature `sim` every answer goes through the wire codec at the version
//! the request was sent at, as a broker's would. Every run ends by closing the member and
//! answering and ticking until it stops.
//!
//! Checked on every ShareGroupHeartbeat (decoded from the `Request::Raw` body):
//! - the member id is the configured one, never empty (through fencing, lease expiry, poll
//!   timeouts, coordinator moves, unsubscribe and resubscribe, leave); the group id is ours;
//! - the epoch is never below -1 (no -2: share groups have no static membership, the request
//!   has no instance id field); -1 only as a leave (the member is Leaving), at most one per
//!   leave; a regular heartbeat's epoch is 0 or the last epoch a coordinator answer gave the
//!   member; at most one regular heartbeat outstanding (only the leave overlaps it);
//! - an epoch-0 heartbeat carries the whole subscription (non-empty); so does every heartbeat
//!   after a failed one (error code or transport error); the subscription, when carried, is the
//!   application's; when left out, the last one sent is still the application's; a rack only
//!   at epoch 0, and only the configured one.
//!
//! Checked on the other requests: request ids are never reused; nothing is sent once the member
//! is Closed or Fatal; FindCoordinator names our group; Metadata names the subscribed topics
//! (never all topics); after `close()` only the leave (at most one, none for a
//! `close(RemainInGroup)` that did not interrupt a leave) and the coordinator lookup it needs.
//!
//! Checked after every step: no panic; `member_id()`, `topics()` are what the application set;
//! `epoch()` is 0 or the last epoch given; `assignment()` has no partition twice and equals
//! the union of the `Assigned` events' `added` minus the `Revoked` and `Lost` partitions (and
//! every `Assigned.owned` is that set; nothing is revoked or lost that was not owned; no
//! `Revoking` ticket, share members revoke at once); after `close()` the member is Leaving,
//! Closed or Fatal, `subscribe` answers `ApiMisuse::Stopped`; one `Closed` event at most;
//! Closed and Fatal members own nothing; a due `poll_timeout()` is cleared by
//! `handle_timeout(now)`; an answer delivered again changes nothing. The outcome of an answer to
//! the heartbeat the member waits for is the documented one: an accepted epoch becomes the
//! member's; FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID (and GROUP_ID_NOT_FOUND in the group) lose
//! everything and rejoin at epoch 0; GROUP_ID_NOT_FOUND answering a join,
//! GROUP_MAX_SIZE_REACHED, INVALID_REQUEST, GROUP_AUTHORIZATION_FAILED and unknown codes stop
//! the member; NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE forget the coordinator;
//! COORDINATOR_LOAD_IN_PROGRESS and TOPIC_AUTHORIZATION_FAILED change neither state nor epoch.
//! At the end the closed member stops (Closed, or Fatal) within a bounded number of answers
//! and clock jumps.
//!
//! `cargo test --all-features --test share_op_sequences`: 2,000 cases of up to 150 ops
//! (`PROPTEST_CASES` overrides). A violation panics with the step, the op and the run's trace;
//! proptest then shrinks the sequence.
//!
//! Found by this test and fixed: `a_negative_epoch_answer_does_not_hide_a_changed_subscription`
//! (an ignored answer left the subscription it carried recorded as unsent-but-known).

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::time::{Duration, Instant};

use consumer_membership::MemberId;
use consumer_membership::config::GroupConfig;
use consumer_membership::error::{ApiMisuse, TransportError};
use consumer_membership::kafka_protocol::messages::find_coordinator_response::Coordinator;
use consumer_membership::kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use consumer_membership::kafka_protocol::messages::share_group_heartbeat_response::{
    Assignment, TopicPartitions,
};
use consumer_membership::kafka_protocol::messages::{
    BrokerId, FindCoordinatorResponse, MetadataResponse, RequestKind, ResponseKind,
    ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse, TopicName,
};
use consumer_membership::kafka_protocol::protocol::StrBytes;
use consumer_membership::machine::TopicPartition;
use consumer_membership::machine::events::{CloseOptions, Event, MemberState};
use consumer_membership::machine::share::ShareMember;
use consumer_membership::request::{
    Api, Outbound, Request, RequestId, Response, ResponseBody, Target,
};
use uuid::Uuid;

// ------------------------------------------------------------------------------ the cluster

const GROUP: &str = "g";
/// The topics the application may subscribe to (ids `topic_id(0..3)`, three partitions each).
const TOPICS: [&str; 3] = ["a", "b", "c"];
/// A topic that exists but the member never subscribes to (the broker may still assign it).
const OTHER_TOPIC: Uuid = Uuid::from_u128(0x5eed_0003);
/// A topic id no Metadata answer names.
const UNKNOWN_TOPIC: Uuid = Uuid::from_u128(0xdead_beef);
/// The rack a member may be configured with.
const RACK: &str = "rack-1";

/// Error codes of ShareGroupHeartbeat answers: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
/// COORDINATOR_LOAD_IN_PROGRESS, UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, GROUP_ID_NOT_FOUND,
/// TOPIC_AUTHORIZATION_FAILED; then those that stop the member: GROUP_MAX_SIZE_REACHED,
/// INVALID_REQUEST, GROUP_AUTHORIZATION_FAILED, and one Kafka does not define.
const HEARTBEAT_CODES: [i16; 11] = [16, 15, 14, 25, 110, 69, 29, 81, 42, 30, 9999];
/// FindCoordinator error codes: COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS,
/// NOT_COORDINATOR; then GROUP_AUTHORIZATION_FAILED and an unknown code, which stop the member.
const LOOKUP_CODES: [i16; 5] = [15, 14, 16, 30, 9999];
/// How many codes at the start of those lists leave the member running.
const LOOKUP_RETRIABLE: usize = 3;
const HEARTBEAT_RUNNING: usize = 7;

/// The code `i` picks of `codes`: seven times in eight one of the first `running`.
fn pick_code(codes: &[i16], running: usize, i: u8) -> i16 {
    let i = usize::from(i);
    if i % 8 == 0 {
        codes[i / 8 % codes.len()]
    } else {
        codes[i % running]
    }
}

fn topic_id(name: &str) -> Uuid {
    let i = TOPICS
        .iter()
        .position(|t| *t == name)
        .expect("one of TOPICS");
    Uuid::from_u128(0x5eed_0000 + i as u128)
}

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_owned())
}

/// A splitmix64 stream seeded by an answer's seed: the choices one answer makes.
struct Choices(u64);

impl Choices {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n.max(1)
    }
    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

// ---------------------------------------------------------------------------------- the ops

/// How an outstanding request is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reply {
    /// A plain success: the coordinator found, the topics named, a heartbeat accepted at the
    /// broker's epoch with no new assignment.
    Plain,
    /// A success whose details (epoch, member id, assignment, missing topics) the seed picks.
    Ok(u32),
    /// An error code of the request's API, picked by the index; the seed shapes the rest.
    Code(u8, u32),
    /// A transport error, its kind picked by the number.
    Transport(u8),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    /// Subscribe to the topics of the bit mask over [`TOPICS`] (0: refused as empty).
    Subscribe(u8),
    Unsubscribe,
    Close(CloseOptions),
    /// The application polled.
    Poll,
    /// The clock moves on this many milliseconds; `handle_timeout`.
    Tick(u32),
    /// Answer an outstanding request: the oldest, or (`pick % 4 == 0`) the one `pick` picks.
    Answer {
        pick: u8,
        reply: Reply,
    },
    /// Deliver an answer delivered before again.
    Redeliver(u8),
}

// ------------------------------------------------------------------------------ the harness

#[derive(Debug, Clone)]
enum Kind {
    Lookup,
    Metadata(Vec<String>),
    /// A ShareGroupHeartbeat at `epoch` (-1: the leave); `membership` is the run's count of
    /// memberships when it went out.
    Heartbeat {
        epoch: i32,
        membership: u64,
    },
    Other(Api),
}

#[derive(Debug, Clone)]
struct Sent {
    out: Outbound,
    kind: Kind,
}

/// One run: the member, the clock, what is outstanding, and what the application was told.
struct Run {
    m: ShareMember,
    member_id: String,
    rack: Option<String>,
    start: Instant,
    now: Instant,
    outstanding: Vec<Sent>,
    delivered: VecDeque<(RequestId, Result<Response, TransportError>)>,
    ids: HashSet<RequestId>,
    /// The application's subscription.
    subscription: BTreeSet<String>,
    /// The assignment as the events told it.
    owned: BTreeSet<TopicPartition>,
    /// The epoch the member last accepted from a coordinator answer (0 before any).
    given: i32,
    /// The broker's epoch (monotone; random answers may give others).
    broker_epoch: i32,
    /// A regular heartbeat failed since the last full one went out: the next is full.
    full_due: bool,
    /// The subscription the last full regular heartbeat carried.
    last_names: Option<Vec<String>>,
    /// Counts the member's memberships: a heartbeat sent in an earlier one is answered for a
    /// membership that is gone (the member ignores the answer).
    membership: u64,
    /// `close()` was called on a running member: with these options, and whether it was
    /// Leaving then (its leave is sent whatever the options).
    closing: Option<(CloseOptions, bool)>,
    leaves_after_close: u32,
    leaves_this_episode: u32,
    closed_events: u32,
    /// What the run reached (states, events, outcomes), for the coverage report.
    reached: BTreeMap<String, u64>,
    step: usize,
    trace: Vec<String>,
}

fn stopped(state: MemberState) -> bool {
    matches!(state, MemberState::Closed | MemberState::Fatal)
}

fn in_group(state: MemberState) -> bool {
    matches!(
        state,
        MemberState::Joining
            | MemberState::Reconciling
            | MemberState::Acknowledging
            | MemberState::Stable
    )
}

fn heartbeat_of(out: &Outbound) -> Option<&ShareGroupHeartbeatRequest> {
    match &out.request {
        Request::Raw { body, .. } => match &**body {
            RequestKind::ShareGroupHeartbeat(b) => Some(b),
            _ => None,
        },
        _ => None,
    }
}

fn names_of(b: &ShareGroupHeartbeatRequest) -> Option<Vec<String>> {
    (b.subscribed_topic_names.as_ref()).map(|ts| ts.iter().map(|t| t.0.to_string()).collect())
}

/// The response `body` of API `api` at `version`, through the wire codec as a broker's.
#[cfg(feature = "sim")]
fn response(api: Api, version: i16, body: ResponseKind) -> Response {
    use consumer_membership::transport::wire;
    let body = ResponseBody::Kafka(body);
    let frame = wire::encode_response(&body, api, version, 7)
        .unwrap_or_else(|e| panic!("answer {api:?} v{version} does not encode: {e}: {body:?}"));
    let decoded = wire::decode_response(frame.freeze().slice(4..), api, version)
        .unwrap_or_else(|e| panic!("answer {api:?} v{version} does not decode: {e}"));
    assert_eq!(decoded.body, body, "{api:?} v{version} does not round-trip");
    decoded
}

/// The response `body` at `version` (no wire codec to encode it without feature `sim`).
#[cfg(not(feature = "sim"))]
fn response(_api: Api, version: i16, body: ResponseKind) -> Response {
    Response {
        version,
        body: ResponseBody::Kafka(body),
    }
}

fn transport_error(out: &Outbound, k: u8) -> TransportError {
    let api = out.request.api_key();
    match k % 32 {
        0..=9 => TransportError::Disconnected {
            addr: "h:9092".into(),
            reason: "connection reset by peer".into(),
        },
        10..=19 => TransportError::Timeout {
            api,
            timeout: out.timeout,
        },
        20..=24 => TransportError::Closed,
        25..=30 => TransportError::Connect {
            addr: "h:9092".into(),
            reason: "connection refused".into(),
        },
        _ => TransportError::UnsupportedApi {
            api,
            ours: out.request.versions(),
            broker: None,
        },
    }
}

impl Run {
    fn new(seed: u64, rack: bool) -> Self {
        let now = Instant::now();
        let id = MemberId::from_seed(seed);
        let mut c = GroupConfig::new(GROUP);
        c.member_id = Some(id);
        c.rack_id = rack.then(|| RACK.to_owned());
        c.session_timeout = Duration::from_secs(10);
        c.heartbeat_interval = Duration::from_secs(1);
        c.max_poll_interval = Duration::from_secs(30);
        c.request_timeout = Duration::from_secs(5);
        c.retry_backoff = Duration::from_millis(100);
        c.retry_backoff_max = Duration::from_secs(1);
        // The membership lease runs on the group's session (the broker's 45 s by default).
        c.group_session_timeout = Duration::from_secs(10);
        c.seed = Some(seed);
        let m = ShareMember::new(c, now).expect("a valid share member config");
        Self {
            member_id: id.to_string(),
            m,
            rack: rack.then(|| RACK.to_owned()),
            start: now,
            now,
            outstanding: Vec::new(),
            delivered: VecDeque::new(),
            ids: HashSet::new(),
            subscription: BTreeSet::new(),
            owned: BTreeSet::new(),
            given: 0,
            broker_epoch: 0,
            full_due: false,
            last_names: None,
            membership: 0,
            closing: None,
            leaves_after_close: 0,
            leaves_this_episode: 0,
            closed_events: 0,
            reached: BTreeMap::new(),
            step: 0,
            trace: Vec::new(),
        }
    }

    fn log(&mut self, line: String) {
        if self.trace.len() >= 300 {
            self.trace.drain(..100);
        }
        self.trace.push(line);
    }

    fn reach(&mut self, what: String) {
        *self.reached.entry(what).or_default() += 1;
    }

    #[track_caller]
    fn violation(&self, what: &str) -> ! {
        panic!(
            "share member rule broken at step {}: {what}\nstate {} epoch {} member id {} at +{:?}\ntrace:\n{}",
            self.step,
            self.m.state(),
            self.m.epoch(),
            self.m.member_id(),
            self.now - self.start,
            self.trace.join("\n")
        )
    }

    fn apply(&mut self, op: &Op) {
        self.step += 1;
        self.log(format!(
            "#{} +{}ms {op:?} [{} epoch {} owns {:?}]",
            self.step,
            (self.now - self.start).as_millis(),
            self.m.state(),
            self.m.epoch(),
            self.owned
        ));
        let before = self.m.state();
        let now = self.now;
        match op {
            Op::Subscribe(mask) => {
                let topics: BTreeSet<String> = (TOPICS.iter().enumerate())
                    .filter(|(i, _)| mask >> i & 1 == 1)
                    .map(|(_, t)| t.to_string())
                    .collect();
                let expected = if stopped(before) || self.closing.is_some() {
                    Err(ApiMisuse::Stopped)
                } else if topics.is_empty() {
                    Err(ApiMisuse::EmptySubscription)
                } else {
                    Ok(())
                };
                let r = self.m.subscribe(topics.iter().cloned(), now);
                if r != expected {
                    self.violation(&format!("subscribe returned {r:?}, expected {expected:?}"));
                }
                if r.is_ok() {
                    self.subscription = topics;
                }
            }
            Op::Unsubscribe => {
                self.m.unsubscribe(now);
                if self.closing.is_none() && !stopped(before) {
                    self.subscription.clear();
                }
            }
            Op::Close(options) => {
                if !stopped(before) && self.closing.is_none() {
                    self.closing = Some((*options, before == MemberState::Leaving));
                    self.subscription.clear();
                }
                self.m.close(*options, now);
            }
            Op::Poll => self.m.poll(now),
            Op::Tick(ms) => {
                self.now += Duration::from_millis(u64::from(*ms));
                self.m.handle_timeout(self.now);
            }
            Op::Answer { pick, reply } => self.answer(*pick, reply),
            Op::Redeliver(pick) => return self.redeliver(*pick),
        }
        self.drain();
        self.check_deadline();
        self.check_after();
    }

    /// Delivers an answer delivered before: the member must not act on it.
    fn redeliver(&mut self, pick: u8) {
        if self.delivered.is_empty() {
            return;
        }
        let (id, result) = self.delivered[usize::from(pick) % self.delivered.len()].clone();
        let (state, epoch, assignment) = (self.m.state(), self.m.epoch(), self.m.assignment());
        self.m.handle_response(id, result, self.now);
        if let Some(e) = self.m.poll_event() {
            self.violation(&format!("an answer to {id} delivered again gave {e:?}"));
        }
        if let Some(out) = self.m.poll_request() {
            self.violation(&format!("an answer to {id} delivered again sent {out:?}"));
        }
        if (self.m.state(), self.m.epoch(), self.m.assignment()) != (state, epoch, assignment) {
            self.violation(&format!(
                "an answer to {id} delivered again changed the member"
            ));
        }
    }

    // ---------------------------------------------------------------------------- requests

    fn drain(&mut self) {
        for round in 0.. {
            if round > 64 {
                self.violation("requests and events never drain");
            }
            let mut progressed = self.events();
            let mut sent = 0;
            loop {
                let state = self.m.state();
                let Some(out) = self.m.poll_request() else {
                    break;
                };
                progressed = true;
                sent += 1;
                if sent > 16 {
                    self.violation("the member keeps emitting requests");
                }
                if stopped(state) {
                    self.violation(&format!("a request once {state}: {out:?}"));
                }
                // Events a request queued (a leave skipped) come before the request's checks.
                self.events();
                self.on_request(out);
            }
            progressed |= self.events();
            if !progressed {
                return;
            }
        }
    }

    fn on_request(&mut self, out: Outbound) {
        if !self.ids.insert(out.id) {
            self.violation(&format!("request id {} used twice", out.id));
        }
        let state = self.m.state();
        let leaving = state == MemberState::Leaving;
        let kind = match &out.request {
            Request::FindCoordinator { keys, .. } => {
                if keys != &[GROUP.to_string()] || out.target != Target::Bootstrap {
                    self.violation(&format!("a lookup of another group: {out:?}"));
                }
                if self.closing.is_some() && !leaving {
                    self.violation("a coordinator lookup after close() with no leave to send");
                }
                Kind::Lookup
            }
            Request::Metadata { topics, .. } => {
                let want: Vec<String> = self.subscription.iter().cloned().collect();
                match topics {
                    Some(ts) if !ts.is_empty() && *ts == want => {}
                    _ => self.violation(&format!(
                        "Metadata for {topics:?}, the subscription is {want:?}"
                    )),
                }
                if self.closing.is_some() {
                    self.violation("a Metadata request after close()");
                }
                Kind::Metadata(want)
            }
            _ => match heartbeat_of(&out) {
                Some(b) => {
                    let b = b.clone();
                    self.check_heartbeat(&out, &b, state);
                    Kind::Heartbeat {
                        epoch: b.member_epoch,
                        membership: self.membership,
                    }
                }
                None => Kind::Other(out.request.api_key()),
            },
        };
        self.log(format!("   -> {} {kind:?}", out.id));
        self.outstanding.push(Sent { out, kind });
    }

    // One arm per case of the rule, each with its own check, reads better than guards.
    #[allow(clippy::collapsible_match)]
    fn check_heartbeat(
        &mut self,
        out: &Outbound,
        b: &ShareGroupHeartbeatRequest,
        state: MemberState,
    ) {
        let names = names_of(b);
        self.log(format!(
            "   heartbeat epoch {} names {names:?} rack {:?}",
            b.member_epoch, b.rack_id
        ));
        if !matches!(out.target, Target::Coordinator(_)) {
            self.violation(&format!(
                "a heartbeat not to the coordinator: {:?}",
                out.target
            ));
        }
        if !out.request.versions().contains(&1) {
            self.violation(&format!("heartbeat versions {:?}", out.request.versions()));
        }
        if b.member_id.is_empty() || b.member_id.as_str() != self.member_id {
            self.violation(&format!(
                "heartbeat with member id {:?}, configured {:?}",
                b.member_id.as_str(),
                self.member_id
            ));
        }
        if b.group_id.as_str() != GROUP {
            self.violation(&format!("heartbeat for group {:?}", b.group_id.as_str()));
        }
        let epoch = b.member_epoch;
        if epoch < -1 {
            self.violation(&format!(
                "heartbeat epoch {epoch}: a share member has no -2"
            ));
        }
        self.reach(format!(
            "heartbeat epoch {} names {}",
            epoch.signum(),
            names.is_some()
        ));
        if epoch == -1 {
            if state != MemberState::Leaving {
                self.violation(&format!("a leave heartbeat (-1) in state {state}"));
            }
            self.leaves_this_episode += 1;
            if self.leaves_this_episode > 1 {
                self.violation("a second leave heartbeat for one leave");
            }
            if let Some((options, was_leaving)) = self.closing {
                self.leaves_after_close += 1;
                if self.leaves_after_close > 1 {
                    self.violation("more than one leave after close()");
                }
                if options == CloseOptions::RemainInGroup && !was_leaving {
                    self.violation("a leave after close(RemainInGroup) of a dynamic member");
                }
            }
            return;
        }
        // A regular heartbeat.
        if self.closing.is_some() {
            self.violation(&format!(
                "a regular heartbeat (epoch {epoch}) after close()"
            ));
        }
        if !in_group(state) {
            self.violation(&format!("a regular heartbeat in state {state}"));
        }
        let others = (self.outstanding.iter())
            .filter(|s| matches!(s.kind, Kind::Heartbeat { epoch, .. } if epoch >= 0))
            .map(|s| s.out.id.to_string())
            .collect::<Vec<_>>();
        if !others.is_empty() {
            self.violation(&format!(
                "a regular heartbeat while {others:?} are outstanding"
            ));
        }
        if epoch != 0 && epoch != self.given {
            self.violation(&format!(
                "heartbeat epoch {epoch}: the coordinator last gave {}",
                self.given
            ));
        }
        let want: Vec<String> = self.subscription.iter().cloned().collect();
        match &names {
            Some(ns) => {
                if ns.is_empty() || *ns != want {
                    self.violation(&format!("heartbeat names {ns:?}, subscribed to {want:?}"));
                }
            }
            None if epoch == 0 => self.violation("an epoch-0 heartbeat without the subscription"),
            None if self.full_due => {
                self.violation("a heartbeat after a failed one without the subscription")
            }
            None if self.last_names.as_ref() != Some(&want) => self.violation(&format!(
                "the subscription changed to {want:?} since {:?} went out, and is left out",
                self.last_names
            )),
            None => {}
        }
        let rack = b.rack_id.as_ref().map(|r| r.to_string());
        let want_rack = if epoch == 0 { self.rack.clone() } else { None };
        if rack != want_rack {
            self.violation(&format!("heartbeat at epoch {epoch} with rack {rack:?}"));
        }
        if names.is_some() {
            self.full_due = false;
            self.last_names = names;
        }
    }

    // ------------------------------------------------------------------------------ events

    /// Takes the member's events; whether there were any.
    fn events(&mut self) -> bool {
        let mut any = false;
        while let Some(e) = self.m.poll_event() {
            any = true;
            self.on_event(e);
        }
        any
    }

    fn on_event(&mut self, e: Event) {
        self.log(format!("   event {e:?}"));
        match e {
            Event::StateChanged {
                from,
                to,
                reason,
                member_id,
                generation,
            } => {
                self.reach(format!("state {to} ({reason})"));
                if member_id != self.member_id {
                    self.violation(&format!("state event with member id {member_id:?}"));
                }
                if generation < 0 {
                    self.violation(&format!("state event at epoch {generation}"));
                }
                if from == MemberState::Leaving {
                    self.leaves_this_episode = 0;
                }
                if !matches!(
                    to,
                    MemberState::Reconciling | MemberState::Acknowledging | MemberState::Stable
                ) {
                    // Left, stopped, or (re)joining: what was sent before answers for a
                    // membership that is gone.
                    self.membership += 1;
                }
            }
            Event::Assigned { added, owned, .. } => {
                let set: BTreeSet<TopicPartition> = added.iter().cloned().collect();
                if set.len() != added.len() {
                    self.violation(&format!("Assigned names a partition twice: {added:?}"));
                }
                if let Some(tp) = set.intersection(&self.owned).next() {
                    self.violation(&format!("Assigned {tp} already owned"));
                }
                self.reach(format!("Assigned {} partitions", set.len().min(3)));
                self.owned.extend(set);
                let expected: Vec<TopicPartition> = self.owned.iter().cloned().collect();
                if owned != expected {
                    self.violation(&format!(
                        "Assigned says {owned:?} owned, the events add up to {expected:?}"
                    ));
                }
            }
            Event::Revoked { partitions } | Event::Lost { partitions, .. } => {
                self.reach(format!(
                    "Revoked or Lost {} partitions",
                    partitions.len().min(3)
                ));
                for tp in &partitions {
                    if !self.owned.remove(tp) {
                        self.violation(&format!("{tp} revoked or lost but not owned"));
                    }
                }
            }
            Event::Revoking { .. } => self.violation("a revocation ticket from a share member"),
            Event::Fatal(e) => {
                let name = format!("{e:?}");
                let name = name
                    .split([' ', '{', '('])
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                self.reach(format!("Fatal {name}"));
            }
            Event::Closed => {
                self.closed_events += 1;
                if self.closed_events > 1 || self.closing.is_none() {
                    self.violation("a Closed event without close(), or twice");
                }
            }
            _ => {}
        }
    }

    // ----------------------------------------------------------------------------- answers

    fn answer(&mut self, pick: u8, reply: &Reply) {
        if self.outstanding.is_empty() {
            return;
        }
        let i = if pick.is_multiple_of(4) {
            usize::from(pick / 4) % self.outstanding.len()
        } else {
            0
        };
        let sent = self.outstanding.remove(i);
        let state = self.m.state();
        let current = matches!(sent.kind, Kind::Heartbeat { epoch, membership } if epoch >= 0 && membership == self.membership)
            && in_group(state);
        let (result, summary) = self.build(&sent, reply);
        self.log(format!("   <- {} {summary}", sent.out.id));
        if self.delivered.len() >= 16 {
            self.delivered.pop_front();
        }
        self.delivered.push_back((sent.out.id, result.clone()));
        let regular = matches!(sent.kind, Kind::Heartbeat { epoch, .. } if epoch >= 0);
        let failed = match &result {
            Err(_) => true,
            Ok(r) => match r.kafka() {
                Some(ResponseKind::ShareGroupHeartbeat(a)) => a.error_code != 0,
                _ => false,
            },
        };
        if regular && failed {
            self.full_due = true;
        }
        let epoch_before = self.m.epoch();
        self.m
            .handle_response(sent.out.id, result.clone(), self.now);
        if current {
            self.check_outcome(&sent, &result, state, epoch_before);
        }
    }

    /// The member's reaction to an answer to the heartbeat it waited for.
    // One arm per case of the rule, each with its own check, reads better than guards.
    #[allow(clippy::collapsible_match)]
    fn check_outcome(
        &mut self,
        sent: &Sent,
        result: &Result<Response, TransportError>,
        state: MemberState,
        epoch_before: i32,
    ) {
        let Kind::Heartbeat {
            epoch: sent_epoch, ..
        } = sent.kind
        else {
            return;
        };
        let after = self.m.state();
        let a = match result {
            Ok(r) => match r.kafka() {
                Some(ResponseKind::ShareGroupHeartbeat(a)) => a.clone(),
                _ => return,
            },
            Err(TransportError::UnsupportedApi { .. }) => {
                if after != MemberState::Fatal {
                    self.violation("UnsupportedApi for the heartbeat did not stop the member");
                }
                return;
            }
            Err(_) => {
                if self.m.epoch() != epoch_before {
                    self.violation("a heartbeat lost in the transport changed the epoch");
                }
                return;
            }
        };
        self.reach(format!(
            "current heartbeat (epoch {}) answered {}",
            sent_epoch.signum(),
            a.error_code
        ));
        let ours = a
            .member_id
            .as_ref()
            .is_none_or(|id| id.as_str() == self.member_id);
        match a.error_code {
            0 if a.member_epoch >= 0 && ours => {
                self.given = a.member_epoch;
                if self.m.epoch() != a.member_epoch {
                    self.violation(&format!(
                        "answered with epoch {}, the member holds {}",
                        a.member_epoch,
                        self.m.epoch()
                    ));
                }
            }
            0 if a.member_epoch >= 0 => {
                if after != MemberState::Fatal {
                    self.violation("an answer for another member id did not stop the member");
                }
            }
            0 => {
                if self.m.epoch() != epoch_before || after != state {
                    self.violation("an answer with a negative epoch changed the member");
                }
            }
            25 | 110 => self.expect_rejoin(a.error_code),
            69 if sent_epoch > 0 => self.expect_rejoin(69),
            69 | 81 | 42 | 30 | 9999 => {
                if after != MemberState::Fatal || self.m.fatal_error().is_none() {
                    self.violation(&format!("error {} did not stop the member", a.error_code));
                }
            }
            16 | 15 => {
                if self.m.coordinator().is_some() {
                    self.violation(&format!("error {} kept the coordinator", a.error_code));
                }
            }
            14 | 29 => {
                if self.m.epoch() != epoch_before || after != state {
                    self.violation(&format!(
                        "error {} changed the member ({state} -> {after})",
                        a.error_code
                    ));
                }
            }
            _ => {}
        }
    }

    fn expect_rejoin(&mut self, code: i16) {
        if self.m.epoch() != 0 || !self.m.assignment().is_empty() {
            self.violation(&format!(
                "fenced ({code}): epoch {} assignment {:?}",
                self.m.epoch(),
                self.m.assignment()
            ));
        }
        if self.m.state() != MemberState::Joining {
            self.violation(&format!("fenced ({code}): not rejoining"));
        }
    }

    /// The answer to `sent`, and a line for the trace.
    fn build(&mut self, sent: &Sent, reply: &Reply) -> (Result<Response, TransportError>, String) {
        let (code, seed) = match reply {
            Reply::Transport(k) => {
                let e = transport_error(&sent.out, *k);
                return (Err(e.clone()), format!("transport error {e}"));
            }
            Reply::Plain => (None, None),
            Reply::Ok(seed) => (None, Some(*seed)),
            Reply::Code(i, seed) => (Some(*i), Some(*seed)),
        };
        let mut c = Choices(u64::from(seed.unwrap_or(0)));
        let version = *sent.out.request.versions().end();
        let api = sent.out.request.api_key();
        let body = match &sent.kind {
            Kind::Lookup => {
                let code = code.map_or(0, |i| pick_code(&LOOKUP_CODES, LOOKUP_RETRIABLE, i));
                let node = if seed.is_some() && c.one_in(4) { 2 } else { 1 };
                let coordinator = Coordinator::default()
                    .with_key(s(GROUP))
                    .with_error_code(code)
                    .with_node_id(BrokerId(if code == 0 { node } else { -1 }))
                    .with_host(s(if code == 0 { "h" } else { "" }))
                    .with_port(if code == 0 { 9092 } else { -1 });
                ResponseKind::FindCoordinator(if version >= 4 {
                    FindCoordinatorResponse::default().with_coordinators(vec![coordinator])
                } else {
                    FindCoordinatorResponse::default()
                        .with_error_code(coordinator.error_code)
                        .with_node_id(coordinator.node_id)
                        .with_host(coordinator.host)
                        .with_port(coordinator.port)
                })
            }
            Kind::Metadata(asked) => {
                let mut topics = Vec::new();
                for name in asked {
                    if seed.is_some() && c.one_in(8) {
                        // Left out of the answer.
                        continue;
                    }
                    let t = MetadataResponseTopic::default().with_name(Some(TopicName(s(name))));
                    topics.push(if code.is_some() && c.one_in(2) {
                        // Not there (yet), or not ours to see: no id.
                        t.with_error_code(if c.one_in(2) { 3 } else { 29 })
                    } else {
                        let partitions = (0..3).map(|p| {
                            MetadataResponsePartition::default()
                                .with_partition_index(p)
                                .with_leader_id(BrokerId(1))
                        });
                        (t.with_topic_id(topic_id(name))).with_partitions(partitions.collect())
                    });
                }
                ResponseKind::Metadata(
                    MetadataResponse::default()
                        .with_brokers(vec![
                            MetadataResponseBroker::default()
                                .with_node_id(BrokerId(1))
                                .with_host(s("h"))
                                .with_port(9092),
                        ])
                        .with_topics(topics),
                )
            }
            Kind::Heartbeat { epoch, .. } => {
                ResponseKind::ShareGroupHeartbeat(self.heartbeat_answer(*epoch, code, seed, &mut c))
            }
            Kind::Other(api) => {
                let e = TransportError::Closed;
                return (
                    Err(e),
                    format!("{api:?} (not a share member's request): closed"),
                );
            }
        };
        let summary = match &body {
            ResponseKind::ShareGroupHeartbeat(a) => format!(
                "heartbeat answer code {} epoch {} member {:?} assignment {:?}",
                a.error_code,
                a.member_epoch,
                a.member_id.as_ref().map(|m| m.to_string()),
                a.assignment.as_ref().map(|a| (a.topic_partitions.iter())
                    .map(|t| (t.topic_id.as_u128() & 0xffff_ffff, t.partitions.clone()))
                    .collect::<Vec<_>>())
            ),
            other => format!("{other:?}"),
        };
        (Ok(response(api, version, body)), summary)
    }

    fn heartbeat_answer(
        &mut self,
        sent_epoch: i32,
        code: Option<u8>,
        seed: Option<u32>,
        c: &mut Choices,
    ) -> ShareGroupHeartbeatResponse {
        let mut a = ShareGroupHeartbeatResponse::default()
            .with_member_id(Some(s(&self.member_id)))
            .with_heartbeat_interval_ms(1000);
        if let Some(i) = code {
            let code = pick_code(&HEARTBEAT_CODES, HEARTBEAT_RUNNING, i);
            return a
                .with_error_code(code)
                .with_error_message(c.one_in(2).then(|| s("refused")))
                .with_member_epoch(if c.one_in(2) { -1 } else { self.broker_epoch });
        }
        if sent_epoch < 0 {
            return a.with_member_epoch(-1);
        }
        self.broker_epoch += 1;
        let Some(_) = seed else {
            return a.with_member_epoch(self.broker_epoch);
        };
        let epoch = match c.below(20) {
            0 => 0,
            1 => -1,
            2 | 3 => c.below(40) as i32,
            4 | 5 if sent_epoch > 0 => sent_epoch,
            _ => self.broker_epoch,
        };
        a.member_epoch = epoch;
        a.heartbeat_interval_ms = [0, 50, 1000, 5000][c.below(4) as usize];
        match c.below(40) {
            0 => a.member_id = None,
            1 => a.member_id = Some(s(&MemberId::from_seed(7).to_string())),
            _ => {}
        }
        if !c.one_in(3) {
            let mut topics = Vec::new();
            let ids = TOPICS.iter().map(|t| topic_id(t));
            for id in ids.chain([OTHER_TOPIC, UNKNOWN_TOPIC]) {
                let odd = id == OTHER_TOPIC || id == UNKNOWN_TOPIC;
                if if odd { !c.one_in(6) } else { c.one_in(2) } {
                    continue;
                }
                let mut partitions: Vec<i32> = (0..4).filter(|_| c.one_in(2)).collect();
                if c.one_in(16) {
                    partitions.push(-1);
                }
                if c.one_in(16) && !partitions.is_empty() {
                    partitions.push(partitions[0]);
                }
                topics.push(
                    TopicPartitions::default()
                        .with_topic_id(id)
                        .with_partitions(partitions),
                );
            }
            a.assignment = Some(Assignment::default().with_topic_partitions(topics));
        }
        a
    }

    // ------------------------------------------------------------------------------ checks

    /// A deadline `poll_timeout()` gives at or before now is acted on by `handle_timeout(now)`.
    fn check_deadline(&mut self) {
        let Some((at, timer)) = self.m.poll_timeout() else {
            return;
        };
        if at > self.now {
            return;
        }
        self.log(format!("   {timer:?} due: handle_timeout"));
        self.m.handle_timeout(self.now);
        self.drain();
        if let Some((at, timer)) = self.m.poll_timeout()
            && at <= self.now
        {
            self.violation(&format!(
                "poll_timeout gives {timer:?} {:?} ago and handle_timeout(now) leaves it",
                self.now - at
            ));
        }
    }

    fn check_after(&mut self) {
        let state = self.m.state();
        if self.m.member_id() != self.member_id {
            self.violation(&format!("member_id() is {:?}", self.m.member_id()));
        }
        let topics: Vec<String> = self.subscription.iter().cloned().collect();
        if self.m.topics() != topics {
            self.violation(&format!(
                "topics() is {:?}, not {topics:?}",
                self.m.topics()
            ));
        }
        let assignment = self.m.assignment();
        let expected: Vec<TopicPartition> = self.owned.iter().cloned().collect();
        if assignment != expected {
            self.violation(&format!(
                "assignment() is {assignment:?}, the events add up to {expected:?}"
            ));
        }
        let epoch = self.m.epoch();
        if epoch < 0 || (epoch != 0 && epoch != self.given) {
            self.violation(&format!(
                "epoch() is {epoch}, the last given {}",
                self.given
            ));
        }
        if self.closing.is_some()
            && !matches!(
                state,
                MemberState::Leaving | MemberState::Closed | MemberState::Fatal
            )
        {
            self.violation(&format!("in state {state} after close()"));
        }
        if stopped(state) && !assignment.is_empty() {
            self.violation(&format!("{state} and still owns {assignment:?}"));
        }
        if state == MemberState::Fatal && self.m.fatal_error().is_none() {
            self.violation("Fatal without an error");
        }
        if state == MemberState::Closed && self.closed_events != 1 {
            self.violation("Closed without its event");
        }
    }

    /// Closes the member (unless it closed or stopped) and answers and ticks until it stops.
    fn finish(&mut self) {
        self.log("-- finish".into());
        self.apply(&Op::Close(CloseOptions::Default));
        for _ in 0..200 {
            if stopped(self.m.state()) {
                let state = self.m.state();
                return self.reach(format!("ended {state}"));
            }
            if !self.outstanding.is_empty() {
                self.apply(&Op::Answer {
                    pick: 1,
                    reply: Reply::Plain,
                });
            } else {
                let wait = match self.m.poll_timeout() {
                    Some((at, _)) => at.saturating_duration_since(self.now),
                    None => Duration::from_secs(1),
                };
                let ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX).max(1);
                self.apply(&Op::Tick(ms));
            }
        }
        self.violation("closed, and still not stopped after 200 answers and clock jumps");
    }
}

// ------------------------------------------------------------------------------- open bugs

/// Found by the property test (in about one run of 2,000 cases in four). A regular heartbeat carried a new subscription (`["b"]`) and its answer
/// came back error-free but with member epoch -1 (Kafka answers -1 only to a leave; a broken
/// or hostile coordinator may send it). `EpochMember::heartbeat_ok` ignores such an answer
/// ("it only completes leaves") before `ShareProtocol::answered`, so `known_topics` still holds
/// the subscription before (`["a"]`) although the coordinator read `["b"]`; when the
/// application subscribes back to `["a"]`, the next heartbeat (epoch 1) leaves the subscription
/// out: the coordinator keeps assigning from `["b"]` until some failure makes a heartbeat full.
/// Breaks the rule "the subscription is sent whenever it differs from what the broker last
/// read". Fixed: the member forgets what it sent when it ignores an answer for its epoch, so
/// the next heartbeat is full.
#[test]
fn a_negative_epoch_answer_does_not_hide_a_changed_subscription() {
    let mut run = Run::new(0, false);
    run.apply(&Op::Subscribe(1));
    for _ in 0..3 {
        run.apply(&Op::Answer {
            pick: 1,
            reply: Reply::Plain,
        });
    }
    assert_eq!(run.m.state(), MemberState::Stable);
    // Epoch 1 with ["b"] goes out; this seed answers it error-free at epoch -1.
    run.apply(&Op::Subscribe(2));
    run.apply(&Op::Answer {
        pick: 1,
        reply: Reply::Ok(1_701_304_966),
    });
    assert!(
        run.trace.iter().any(|l| l.contains("code 0 epoch -1")),
        "{:#?}",
        run.trace
    );
    // Panics: "the subscription changed to ["a"] since Some(["b"]) went out, and is left out".
    run.apply(&Op::Subscribe(1));
}

// ------------------------------------------------------------------------------- proptest

#[path = "common/ops.rs"]
mod ops;

mod props {
    use super::ops::{check, subscribed_first, tick_ms};
    use super::*;
    use proptest::prelude::*;

    fn reply() -> impl Strategy<Value = Reply> {
        prop_oneof![
            10 => Just(Reply::Plain),
            14 => any::<u32>().prop_map(Reply::Ok),
            8 => (any::<u8>(), any::<u32>()).prop_map(|(i, seed)| Reply::Code(i, seed)),
            5 => any::<u8>().prop_map(Reply::Transport),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..8).prop_map(Op::Subscribe),
            2 => Just(Op::Unsubscribe),
            1 => prop_oneof![
                Just(CloseOptions::Default),
                Just(CloseOptions::RemainInGroup),
                Just(CloseOptions::LeaveGroup),
            ]
            .prop_map(Op::Close),
            4 => Just(Op::Poll),
            8 => tick_ms().prop_map(Op::Tick),
            40 => (any::<u8>(), reply()).prop_map(|(pick, reply)| Op::Answer { pick, reply }),
            2 => any::<u8>().prop_map(Op::Redeliver),
        ]
    }

    /// Cases.
    const CASES: u32 = 2_000;

    /// A subscription first, then up to 149 ops.
    fn ops() -> impl Strategy<Value = Vec<Op>> {
        subscribed_first(Op::Subscribe, op(), 150)
    }

    /// `(seed, rack, ops)` of a [`Run`] and its ops.
    fn runs() -> impl Strategy<Value = (u64, bool, Vec<Op>)> {
        (any::<u64>(), any::<bool>(), ops())
    }

    /// The run of `ops` from `seed` (with a rack or not), finished.
    fn run((seed, rack, ops): (u64, bool, Vec<Op>)) -> Run {
        let mut run = Run::new(seed, rack);
        for op in &ops {
            run.apply(op);
        }
        run.finish();
        run
    }

    /// What the sequences reach (`cargo test --all-features --test share_op_sequences --
    /// --ignored --nocapture reached`): states and reasons, events, heartbeats and outcomes.
    #[test]
    #[ignore = "a report, not a check"]
    fn reached() {
        for (k, n) in super::ops::reached(CASES, runs(), |case| run(case).reached) {
            eprintln!("{n:>9} {k}");
        }
    }

    #[test]
    fn share_member_op_sequences() {
        check("share member", CASES, runs(), |case| {
            run(case);
        });
    }
}
