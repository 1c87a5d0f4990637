#![cfg(feature = "sim")]
//! Model checking (stateright, breadth-first and exhaustive up to a bound) of small
//! configurations of both protocols, driving this crate's real state machines.
//!
//! # What is explored
//! The checked system is the crate's sans-IO members ([`ClassicMember`] and [`ConsumerMember`]
//! through the [`Member`] facade) and the simulated coordinator ([`SimCoordinator`], the broker
//! rules of `core/src/sim/coordinator/`), connected by the simulation's own network ([`Network`],
//! `core/src/sim/network.rs`, the one `sim::world::World` runs on) with its rules:
//! - the broker reads one request per connection and reads the next only after the answer went
//!   out; group requests are processed in the order they were READ (one coordinator queue);
//!   FindCoordinator / Metadata are answered by the broker's own handlers;
//! - of the requests a client already wrote on a connection it then closed, the broker
//!   processes the one with its handlers and at most one more (the first answer goes into the
//!   dead socket, the client's side resets, the next write fails and the rest is discarded);
//!   their answers are dropped;
//! - answers on one connection arrive in order; an answer is never lost on a live connection:
//!   a loss is a connection reset.
//!
//! The client side follows the crate's client connection rules (`transport::connections`, which
//! `TcpTransport` and `World` follow too): a client keeps one bootstrap connection and one
//! connection per coordinator node; a request that times out closes its connection (every other
//! request on it fails with `Disconnected`), and a member that forgets its coordinator closes the
//! coordinator connection (the Java client's `markCoordinatorUnknown`;
//! `SimConfig::close_on_coordinator_loss`).
//!
//! The network runs without delays, service time or random faults: requests reach the broker,
//! and FindCoordinator / Metadata are answered, before the next choice (their latency is far
//! below every timer, as in the simulation). The nondeterministic choices (the model's actions)
//! are made through the network's own operations: the coordinator processes the head of its
//! queue ([`Network::take_coordinator_work`]); an answer in transit on a connection reaches its
//! client ([`Network::take_answer`]); virtual time jumps to the next deadline (member timers,
//! request timeouts, coordinator timers); and, within a fault budget, the coordinator runtime
//! fails the head of its queue with COORDINATOR_NOT_AVAILABLE ([`Network::take_coordinator_head`]
//! and [`Queued::fail`], as `World::fail_queued_head`), the client resets its coordinator
//! connection ([`Network::close`]), the connection is reset as an answer travels (the answer is
//! lost, every request in flight on it fails, the broker reads nothing more from it:
//! [`Network::abort`]), or an answer is overtaken by the next deadline (a slow answer); within an application budget, the
//! application unsubscribes and subscribes again, commits its partitions, or closes. The
//! coordinator may sit on its queue for any number of deadlines: that is a coordinator stall.
//!
//! # Why the states are replayed, and what the fingerprint keeps
//! Neither the members nor the simulated coordinator nor its network nor `sim::world::World`
//! implement `Clone` (and `World` holds `Box<dyn SimMember>` and scheduled closures, so it is not
//! `Send` either), so a state cannot carry a copy of the system. A state here carries the path of
//! choices from the initial state instead; `next_state` rebuilds the system by replaying that
//! path from scratch (every piece is deterministic: seeded RNGs, no clock reads, no hash-map
//! iteration) and applies one more choice. The cost is one replay per transition.
//!
//! Hash and equality of a state are those of a canonical summary built from public accessors
//! only: per member its state name, member id, generation, owned partitions, whether the
//! coordinator is known, its terminal error and its next deadline relative to the virtual clock;
//! per connection (relabelled in creation order) whether it is open, the requests unread and
//! read, and the answers in transit; the coordinator's queue; the coordinator's group
//! state, generation, leader, members (id, instance id, parked join/sync, epoch, assignment) and
//! next deadline relative to the clock; the budgets used; the property flags. Member ids are
//! renamed by first appearance (the coordinator draws them from a seeded RNG, so equivalent paths
//! produce different strings) and times are relative, so heartbeat cycles fold onto themselves.
//! The summary ignores what the accessors do not show (a member's later timers, backoff counters,
//! quarantine, request ids, the coordinator's other deadlines): two states that differ only there
//! are merged and only the first one reached is expanded. That can hide a behaviour (it makes the
//! check an under-approximation of the bounded space), never invent one: every reported path is
//! replayed from scratch and its last state is the one judged.
//!
//! # Checks
//! Bounds count the choices after the initial state; every check prints
//! "explored N states (M unique)". The properties: no FENCED_INSTANCE_ID reaches a member (each
//! instance id is used by one process only here), no member stops on FENCED_INSTANCE_ID, no
//! partition owned by two live members in one generation, no step panics (a panicking step
//! becomes a state of its own, with the panic), every member reaches Stable (a "sometimes");
//! for KIP-848 also: no member stops on UNRELEASED_INSTANCE_ID, the coordinator never holds two
//! members for one instance id nor a member id no process uses, and a closed member is not held
//! with a live epoch once what it sent was processed (unless the coordinator failed its leave,
//! which is sent once).
//! - `classic_static_member_never_fences_itself`: one static member, this crate's policy (the
//!   member id survives a suppressed LeaveGroup), from scratch, 18 choices, one fault (coordinator
//!   failure or connection reset), one unsubscribe + subscribe, one commit;
//! - `classic_static_member_from_stable_never_fences_itself`: the same from Stable, 12 choices;
//! - `classic_java_reset_policy_from_stable_is_kafka_20985`: the same with
//!   `set_java_reset_policy(true)` and no commit: the checker finds KAFKA-20985 itself;
//! - `classic_java_reset_policy_is_a_counterexample`: the Java policy from scratch: two empty-id
//!   joins of one process race and the one read last fences the other;
//! - `classic_two_static_members`: two static members forming a group, 24 choices, no faults;
//! - `consumer_static_member_recovers_from_its_own_join`: KIP-848, one static member, 13
//!   choices, two faults of any kind (lost or slow answers too), one unsubscribe + subscribe,
//!   one close;
//! - `consumer_dynamic_member_leaves_no_ghost`: KIP-848, one dynamic member, 16 choices, two
//!   faults, one close.
//!
//! `MODEL_DEPTH_EXTRA=n` deepens every bound by `n` (slower; for exploring by hand).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::hash::{Hash, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use consumer_membership::GroupError;
use consumer_membership::MemberId;
use consumer_membership::config::{GroupConfig, GroupProtocol};
use consumer_membership::machine::classic::ClassicMember;
use consumer_membership::machine::consumer::ConsumerMember;
use consumer_membership::machine::events::MemberState;
use consumer_membership::machine::events::{CloseOptions, CommitOffset, Event};
use consumer_membership::machine::member::Member;
use consumer_membership::request::{Outbound, RequestBody, RequestId, Response, ResponseBody};
use consumer_membership::sim::ConnId;
use consumer_membership::sim::codes;
use consumer_membership::sim::coordinator::{
    CoordinatorConfig, SimCoordinator, name as code_name, response_error,
};
use consumer_membership::sim::network::{
    AnswerFate, ConnKind, ConnView, Frame, NetConfig, NetEvent, Network, Queued,
};
use consumer_membership::sim::world::{SimMember, broker_versions_4x};
use consumer_membership::transport::connections::{Connections, Failed, Route, disconnected};
use consumer_membership::transport::wire::{self, BrokerVersions};
use kafka_protocol::messages::{RequestKind, ResponseKind};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use stateright::{Checker, HasDiscoveries, Model, Property};

// ---------------------------------------------------------------------------------- setup

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Classic,
    Consumer,
}

#[derive(Debug, Clone)]
struct MemberSpec {
    protocol: Proto,
    instance: Option<&'static str>,
    /// Classic only: the Java client's id reset on a suppressed LeaveGroup.
    java: bool,
}

/// One configuration to explore.
#[derive(Debug, Clone)]
struct Setup {
    members: Vec<MemberSpec>,
    partitions: i32,
    /// Faults in total (all kinds together).
    max_faults: u8,
    fail_head: bool,
    reset_conn: bool,
    lose_answer: bool,
    slow_answer: bool,
    /// Unsubscribe + subscribe, per member.
    resubscribes: u8,
    /// Commit of the owned partitions, per member.
    commits: u8,
    /// Close (default options), per member.
    closes: u8,
    /// Paths longer than this are not extended.
    depth: usize,
    /// Start from the state where every member is Stable, reached by the first enabled of
    /// process / deliver / tick at each step (no faults, no application actions).
    warm: bool,
}

fn classic_config(i: usize, instance: Option<&str>) -> GroupConfig {
    let mut c = GroupConfig::new("g");
    c.instance_id = instance.map(String::from);
    c.session_timeout = Duration::from_secs(10);
    c.heartbeat_interval = Duration::from_secs(3);
    // JoinGroup timeout = max(request.timeout.ms, max.poll.interval.ms + 5 s) = 8 s.
    c.max_poll_interval = Duration::from_secs(3);
    c.request_timeout = Duration::from_secs(3);
    c.seed = Some(20_985 + i as u64);
    c
}

fn consumer_config(i: usize, instance: Option<&str>) -> GroupConfig {
    let mut c = GroupConfig::new("g");
    c.protocol = GroupProtocol::Consumer;
    c.instance_id = instance.map(String::from);
    c.request_timeout = Duration::from_secs(3);
    c.seed = Some(848 + i as u64);
    c
}

fn build_member(i: usize, spec: &MemberSpec, now: Instant) -> Member {
    match spec.protocol {
        Proto::Classic => {
            let mut m = ClassicMember::new(classic_config(i, spec.instance), now).expect("config");
            m.set_java_reset_policy(spec.java);
            Member::Classic(m)
        }
        Proto::Consumer => {
            let mut bytes = [7u8; 16];
            bytes[0] = i as u8 + 1;
            let id = MemberId::from_bytes(bytes).expect("not reserved");
            let c = consumer_config(i, spec.instance);
            Member::Consumer(ConsumerMember::with_member_id(c, id, now).expect("config"))
        }
    }
}

// ---------------------------------------------------------------------------------- world

/// One nondeterministic choice. Connection numbers are the network's [`ConnId`]s, member numbers
/// indexes of the slots, in the world the state was replayed into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Choice {
    /// The coordinator processes the head of its queue.
    Process,
    /// The answer at the head of connection `.0`'s downstream reaches its client.
    Deliver(u16),
    /// Virtual time jumps to the next deadline; everything due fires.
    Tick,
    /// Fault: as `Tick`, while answers are still in transit (they arrive late).
    SlowTick,
    /// Fault: the coordinator runtime answers its queue head COORDINATOR_NOT_AVAILABLE.
    FailHead,
    /// Fault: the answer at the head of connection `.0`'s downstream is lost.
    Lose(u16),
    /// Fault: member `.0` resets its coordinator connection.
    Reset(u8),
    /// Application of member `.0`: unsubscribe, then subscribe again.
    Resubscribe(u8),
    /// Application of member `.0`: commit offset 42 for every owned partition.
    Commit(u8),
    /// Application of member `.0`: close with the default options.
    Close(u8),
}

struct Slot {
    member: Member,
    /// Its connections and the requests in flight on them.
    conns: Connections<ConnId, RequestId>,
    resubscribes: u8,
    commits: u8,
    closes: u8,
    /// A leave of this member was failed by the coordinator runtime (fire-once: no ghost check).
    leave_failed: bool,
}

/// What the properties look at; part of the fingerprint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct Flags {
    /// FENCED_INSTANCE_ID reached a member (one process per instance id here: self-fencing).
    fenced: Option<String>,
    /// A member stopped on FENCED_INSTANCE_ID.
    fatal_fence: bool,
    /// Two live members own one partition in the same generation.
    double_owner: Option<String>,
    /// A step panicked.
    panic: Option<String>,
    /// A consumer-protocol member stopped on UNRELEASED_INSTANCE_ID.
    unreleased_fatal: bool,
    /// Two coordinator members for one instance id, a member id no process uses, or a closed
    /// member held with a live epoch once what it sent was processed.
    ghost: Option<String>,
}

/// The system: members, the simulated coordinator and the simulation's network
/// (`core/src/sim/network.rs`: connections, the coordinator queue, answers in transit).
struct ModelWorld {
    setup: Setup,
    now: Instant,
    start: Instant,
    versions: BrokerVersions,
    coordinator: SimCoordinator,
    network: Network,
    /// The network's RNG (no delays and no random faults here: the faults are choices).
    rng: ChaCha8Rng,
    slots: Vec<Slot>,
    faults: u8,
    flags: Flags,
    trace: Option<Vec<String>>,
}

/// The network of the model: no delays (requests reach the broker before time moves on, their
/// latency being far below every timer, as in the simulation), no service time and no random
/// faults; which answer arrives next, and whether it is lost, are choices.
fn net_config() -> NetConfig {
    NetConfig {
        latency_min: Duration::ZERO,
        latency_max: Duration::ZERO,
        service_time: Duration::ZERO,
        // Time jumps from deadline to deadline; the broker's idle expiry is not a choice here.
        max_idle: None,
        ..NetConfig::default()
    }
}

impl ModelWorld {
    fn new(setup: &Setup, trace: bool) -> Self {
        let start = Instant::now();
        let mut cc = CoordinatorConfig::new("g");
        cc.topics = vec![("t".into(), setup.partitions)];
        cc.seed = 0xc00d;
        let mut coordinator = SimCoordinator::new(cc, start);
        coordinator.set_notes(trace);
        let slots = setup
            .members
            .iter()
            .enumerate()
            .map(|(i, spec)| Slot {
                member: build_member(i, spec, start),
                conns: Connections::default(),
                resubscribes: 0,
                commits: 0,
                closes: 0,
                leave_failed: false,
            })
            .collect();
        let mut w = ModelWorld {
            setup: setup.clone(),
            now: start,
            start,
            versions: broker_versions_4x(),
            coordinator,
            network: Network::new(net_config()),
            rng: ChaCha8Rng::seed_from_u64(0),
            slots,
            faults: 0,
            flags: Flags::default(),
            trace: trace.then(Vec::new),
        };
        for s in 0..w.slots.len() {
            w.log(|| format!("m{s}: subscribe [t]"));
            let now = w.now;
            let _ = w.slots[s].member.subscribe(["t".to_owned()], now);
            w.drain(s);
        }
        w.settle();
        if setup.warm {
            for _ in 0..200 {
                if w.slots
                    .iter()
                    .all(|s| s.member.state() == MemberState::Stable)
                {
                    break;
                }
                let next = w
                    .enabled()
                    .into_iter()
                    .find(|c| matches!(c, Choice::Process | Choice::Deliver(_) | Choice::Tick));
                match next {
                    Some(c) => w.apply(c),
                    None => break,
                }
            }
            assert!(
                w.slots
                    .iter()
                    .all(|s| s.member.state() == MemberState::Stable),
                "the warm-up reaches Stable"
            );
            w.log(|| "=== warm-up done: every member is Stable".into());
        }
        w.observe();
        w
    }

    fn log(&mut self, f: impl FnOnce() -> String) {
        let at = self.now - self.start;
        if let Some(t) = &mut self.trace {
            t.push(format!("{:>7.3}s  {}", at.as_secs_f64(), f()));
        }
    }

    fn notes(&mut self) {
        for n in self.coordinator.take_notes() {
            self.log(|| format!("      rule: {n}"));
        }
    }

    // ------------------------------------------------------------------ client side

    /// Drains the member's outputs until nothing changes; the application polls all the time and
    /// hands revocation tickets back at once.
    fn drain(&mut self, s: usize) {
        for _ in 0..100 {
            let now = self.now;
            let mut progress = false;
            self.slots[s].member.poll(now);
            while let Some(out) = self.slots[s].member.poll_request() {
                progress = true;
                self.send(s, out);
            }
            while let Some(e) = self.slots[s].member.poll_event() {
                progress = true;
                match e {
                    Event::Revoking { ticket, .. } => {
                        self.log(|| format!("m{s}: revoking; ticket handed back"));
                        let _ = self.slots[s].member.complete_revocation(ticket, now);
                    }
                    Event::StateChanged {
                        from, to, reason, ..
                    } => self.log(|| format!("m{s}: {from} -> {to} ({reason})")),
                    Event::Fatal(err) => self.log(|| format!("m{s}: FATAL {err}")),
                    _ => {}
                }
            }
            // The Java client disconnects from a coordinator it marks unknown.
            let keep = self.slots[s].member.coordinator().map(|b| b.node_id);
            let stale = |r| matches!(r, Route::Coordinator(node) if Some(node) != keep);
            for c in self.conns_of(s, stale) {
                progress = true;
                self.close_conn(s, c, "coordinator marked unknown");
            }
            if !progress {
                return;
            }
        }
        panic!("member {s}: outputs did not settle after 100 rounds");
    }

    fn send(&mut self, s: usize, out: Outbound) {
        let now = self.now;
        let (api, version, body) = match wire::build(&out.request, &self.versions) {
            Ok(b) => b,
            Err(e) => {
                self.slots[s].member.handle_response(out.id, Err(e), now);
                return;
            }
        };
        let route = Route::of(&out.target);
        let open = self.slots[s].conns.conn(route);
        let conn = match (open.filter(|c| self.network.is_open(*c)), route) {
            (Some(c), _) => c,
            (None, Route::Node(_)) => {
                let e = disconnected(&out.target, "no data-path brokers in the model");
                self.slots[s].member.handle_response(out.id, Err(e), now);
                return;
            }
            (None, Route::Bootstrap) => self.open(s, route, ConnKind::Bootstrap),
            (None, Route::Coordinator(_)) => self.open(s, route, ConnKind::Coordinator),
        };
        let correlation = self.slots[s]
            .conns
            .send(conn, out.id, api, out.timeout, now);
        self.log(|| format!("m{s} -> {conn}#{correlation} {}", describe_req(&body)));
        let frame = Frame {
            correlation,
            api,
            version,
            client_id: "model".into(),
            body,
        };
        self.network.send(conn, frame, now, &mut self.rng);
    }

    fn open(&mut self, s: usize, route: Route, kind: ConnKind) -> ConnId {
        let c = self.network.open(s, kind, self.now);
        self.log(|| format!("m{s}: opens {c} ({kind:?})"));
        self.slots[s].conns.opened(route, c);
        c
    }

    /// The connections of member `s` whose route `which` takes.
    fn conns_of(&self, s: usize, which: impl Fn(Route) -> bool) -> Vec<ConnId> {
        let routes = self.slots[s].conns.routes();
        routes.filter(|(r, _)| which(*r)).map(|(_, c)| c).collect()
    }

    /// The client closes `conn`: the network drops the answers on it (what the client already
    /// wrote is still read and processed), its requests fail with `Disconnected`.
    fn close_conn(&mut self, s: usize, conn: ConnId, reason: &str) {
        if !self.network.is_open(conn) {
            return;
        }
        let failed = self.slots[s].conns.close(conn);
        self.closed(s, conn, reason, failed);
    }

    /// The client closed `conn` (its route forgotten): the network closes it, and `failed`, the
    /// requests that were in flight on it, fail with `Disconnected`.
    fn closed(&mut self, s: usize, conn: ConnId, reason: &str, failed: Failed<RequestId>) {
        if self.network.is_open(conn) {
            self.network.close(conn);
        }
        self.log(|| format!("m{s}: closes {conn} ({reason})"));
        let now = self.now;
        for (corr, p) in failed {
            self.log(|| format!("m{s}: {conn}#{corr} {:?} fails: disconnected", p.api));
            let e = disconnected(conn, reason);
            self.slots[s].member.handle_response(p.tag, Err(e), now);
        }
    }

    // ------------------------------------------------------------------ broker side

    /// What the network does without a choice: requests on the wire reach the broker (and are
    /// read unless their connection is muted), and the broker's own handlers answer
    /// FindCoordinator / Metadata as they read them.
    fn settle(&mut self) {
        let now = self.now;
        loop {
            if self.network.deliver_up(now, &mut self.rng).is_some() {
                self.net_events();
                continue;
            }
            match self.network.take_broker_work(now) {
                Some(q) => self.handle(q, "broker"),
                None => return,
            }
        }
    }

    /// The coordinator (or the broker's handlers) processes a request read from the network.
    fn handle(&mut self, q: Queued, who: &str) {
        let (conn, corr) = (q.conn, q.frame.correlation);
        self.log(|| {
            format!(
                "    {who}: processes {conn}#{corr} {}",
                describe_req(&q.frame.body)
            )
        });
        q.process(&mut self.coordinator, self.now);
        self.route();
    }

    /// Sends the coordinator's answers through the network: each unmutes its connection (whose
    /// next request is read) and travels to the client unless the client closed the connection.
    fn route(&mut self) {
        self.notes();
        while let Some(r) = self.coordinator.poll_response() {
            let (conn, corr) = (r.conn, r.correlation);
            let summary = describe_resp(&r.body);
            let now = self.now;
            let fate = self
                .network
                .answer(conn, corr, r.version, r.body, now, &mut self.rng);
            self.log(|| {
                let dropped = match fate {
                    AnswerFate::Sent { .. } => "",
                    AnswerFate::WrittenToClosed => " -> into the closed connection",
                    _ => " -> dropped: connection closed",
                };
                format!("    broker: answers {conn}#{corr} {summary}{dropped}")
            });
            self.net_events();
        }
    }

    fn net_events(&mut self) {
        for e in self.network.take_events() {
            if let NetEvent::Read {
                conn,
                correlation,
                position,
                ..
            } = e
                && position > 0
            {
                self.log(|| format!("    broker: reads {conn}#{correlation} (queue #{position})"));
            }
        }
    }

    /// The connections with answers on their way, each once.
    fn in_transit(&self) -> BTreeSet<ConnId> {
        self.network.in_transit().map(|d| d.conn).collect()
    }

    // ------------------------------------------------------------------ choices

    fn enabled(&self) -> Vec<Choice> {
        let mut v = Vec::new();
        if self.flags.panic.is_some() || self.violated() {
            return v;
        }
        let all_stopped = self
            .slots
            .iter()
            .all(|s| matches!(s.member.state(), MemberState::Fatal | MemberState::Closed));
        let transit = self.in_transit();
        let quiet =
            transit.is_empty() && (0..self.slots.len()).all(|s| !self.network.has_pending(s));
        if all_stopped && quiet {
            return v;
        }
        let fault = self.faults < self.setup.max_faults;
        let queued = self.network.coordinator_queue().next().is_some();
        if queued {
            v.push(Choice::Process);
        }
        for c in &transit {
            v.push(Choice::Deliver(c.0 as u16));
        }
        if self.next_deadline().is_some() {
            if transit.is_empty() {
                v.push(Choice::Tick);
            } else if fault && self.setup.slow_answer {
                v.push(Choice::SlowTick);
            }
        }
        if fault && self.setup.fail_head && queued {
            v.push(Choice::FailHead);
        }
        if fault && self.setup.lose_answer {
            for c in &transit {
                v.push(Choice::Lose(c.0 as u16));
            }
        }
        for (i, s) in self.slots.iter().enumerate() {
            let state = s.member.state();
            let stopped = matches!(state, MemberState::Fatal | MemberState::Closed);
            let coordinator = s
                .conns
                .routes()
                .any(|(r, _)| matches!(r, Route::Coordinator(_)));
            if fault && self.setup.reset_conn && coordinator && !stopped {
                v.push(Choice::Reset(i as u8));
            }
            if s.resubscribes < self.setup.resubscribes
                && !stopped
                && state != MemberState::Unsubscribed
            {
                v.push(Choice::Resubscribe(i as u8));
            }
            if s.commits < self.setup.commits
                && state == MemberState::Stable
                && !s.member.assignment().is_empty()
            {
                v.push(Choice::Commit(i as u8));
            }
            if s.closes < self.setup.closes && !stopped {
                v.push(Choice::Close(i as u8));
            }
        }
        v
    }

    fn next_deadline(&self) -> Option<Instant> {
        let mut next = self.coordinator.poll_timeout();
        let mut consider = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
        for s in &self.slots {
            if let Some((t, _)) = s.member.poll_timeout() {
                consider(t);
            }
            if let Some(t) = s.conns.next_deadline() {
                consider(t);
            }
        }
        next
    }

    fn apply(&mut self, choice: Choice) {
        let now = self.now;
        match choice {
            Choice::Process => {
                let q = self.network.take_coordinator_work(now).expect("enabled");
                self.handle(q, "coordinator");
            }
            Choice::FailHead => {
                self.faults += 1;
                let q = self.network.take_coordinator_head().expect("enabled");
                self.log(|| {
                    format!(
                        "!! coordinator fails {}#{} {} with COORDINATOR_NOT_AVAILABLE",
                        q.conn,
                        q.frame.correlation,
                        describe_req(&q.frame.body)
                    )
                });
                if let RequestBody::Kafka(RequestKind::ConsumerGroupHeartbeat(r)) = &q.frame.body
                    && r.member_epoch < 0
                    && let Some(s) = self.network.client(q.conn)
                {
                    self.slots[s].leave_failed = true;
                }
                q.fail(&mut self.coordinator, codes::COORDINATOR_NOT_AVAILABLE);
                self.route();
            }
            Choice::Deliver(c) => self.deliver(ConnId(u64::from(c))),
            Choice::Lose(c) => {
                self.faults += 1;
                let conn = ConnId(u64::from(c));
                let a = self.network.take_answer(conn).expect("enabled");
                self.log(|| {
                    format!(
                        "!! connection reset: answer {}#{} {} lost",
                        a.conn,
                        a.correlation,
                        describe_resp(&a.body)
                    )
                });
                self.close_conn(a.client, conn, "connection reset");
                self.network.abort(conn);
                self.net_events();
                self.drain(a.client);
            }
            Choice::Tick => self.tick(),
            Choice::SlowTick => {
                self.faults += 1;
                self.log(|| "!! answers in transit are slow".into());
                self.tick();
            }
            Choice::Reset(s) => {
                self.faults += 1;
                let s = s as usize;
                for c in self.conns_of(s, |r| matches!(r, Route::Coordinator(_))) {
                    self.close_conn(s, c, "!! connection reset");
                }
                self.drain(s);
            }
            Choice::Resubscribe(s) => {
                let s = s as usize;
                self.slots[s].resubscribes += 1;
                self.log(|| format!("m{s}: unsubscribe"));
                self.slots[s].member.unsubscribe(now);
                self.drain(s);
                self.log(|| format!("m{s}: subscribe [t]"));
                let _ = self.slots[s].member.subscribe(["t".to_owned()], now);
                self.drain(s);
            }
            Choice::Commit(s) => {
                let s = s as usize;
                self.slots[s].commits += 1;
                self.log(|| format!("m{s}: commit owned partitions"));
                let offsets = self.slots[s]
                    .member
                    .assignment()
                    .into_iter()
                    .map(|partition| CommitOffset {
                        partition,
                        offset: 42,
                        metadata: None,
                    })
                    .collect();
                self.slots[s].member.commit(offsets, now);
                self.drain(s);
            }
            Choice::Close(s) => {
                let s = s as usize;
                self.slots[s].closes += 1;
                self.log(|| format!("m{s}: close"));
                self.slots[s].member.close(CloseOptions::Default, now);
                self.drain(s);
            }
        }
        self.settle();
        self.observe();
    }

    fn deliver(&mut self, conn: ConnId) {
        let a = self.network.take_answer(conn).expect("enabled");
        let s = a.client;
        let now = self.now;
        let Some(p) = self.slots[s].conns.answered(conn, a.correlation) else {
            return;
        };
        self.log(|| {
            format!(
                "m{s} <- {conn}#{} {}",
                a.correlation,
                describe_resp(&a.body)
            )
        });
        if response_error(&a.body) == codes::FENCED_INSTANCE_ID && self.flags.fenced.is_none() {
            self.flags.fenced = Some(format!(
                "m{s} received FENCED_INSTANCE_ID answering {:?} although no other process uses its instance id",
                p.api
            ));
        }
        self.slots[s].member.handle_response(
            p.tag,
            Ok(Response {
                version: a.version,
                body: a.body,
            }),
            now,
        );
        self.drain(s);
    }

    fn tick(&mut self) {
        let Some(at) = self.next_deadline() else {
            return;
        };
        if at > self.now {
            self.now = at;
        }
        let now = self.now;
        self.log(|| "tick".into());
        self.coordinator.handle_timeout(now);
        self.route();
        for s in 0..self.slots.len() {
            // A timed-out request closes its connection (NetworkClient).
            while let Some(e) = self.slots[s].conns.time_out(now) {
                let (conn, api) = (e.conn, e.request.api);
                self.log(|| format!("m{s}: {conn}#{} {api:?} timed out", e.correlation));
                let timed_out = e.request.timed_out();
                self.slots[s]
                    .member
                    .handle_response(e.request.tag, Err(timed_out), now);
                self.closed(s, conn, "a request timed out", e.failed);
            }
            self.slots[s].member.poll(now);
            self.slots[s].member.handle_timeout(now);
            self.drain(s);
        }
    }

    // ------------------------------------------------------------------ properties

    fn observe(&mut self) {
        // No partition owned by two live members in the same generation.
        let mut owners: BTreeMap<(String, i32), usize> = BTreeMap::new();
        for (i, s) in self.slots.iter().enumerate() {
            if matches!(s.member.state(), MemberState::Fatal | MemberState::Closed) {
                continue;
            }
            let g = s.member.generation();
            for tp in s.member.assignment() {
                if let Some(o) = owners.insert((tp.to_string(), g), i)
                    && self.flags.double_owner.is_none()
                {
                    self.flags.double_owner =
                        Some(format!("{tp} owned by m{o} and m{i} in generation {g}"));
                }
            }
        }
        for s in &self.slots {
            match SimMember::fatal_error(&s.member) {
                Some(GroupError::FencedInstanceId { .. }) => self.flags.fatal_fence = true,
                Some(GroupError::UnreleasedInstanceId { .. }) => self.flags.unreleased_fatal = true,
                _ => {}
            }
        }
        // KIP-848: at most one registered member per instance id, and only ids a process uses.
        if self
            .setup
            .members
            .iter()
            .any(|m| m.protocol == Proto::Consumer)
            && self.flags.ghost.is_none()
        {
            let ours: Vec<String> = self
                .slots
                .iter()
                .map(|s| s.member.member_id().to_owned())
                .collect();
            let members = self.coordinator.members();
            let mut per_instance: BTreeMap<&str, usize> = BTreeMap::new();
            for m in &members {
                if let Some(i) = &m.instance_id {
                    *per_instance.entry(i).or_default() += 1;
                }
                if !ours.contains(&m.member_id) {
                    self.flags.ghost =
                        Some(format!("member {} is used by no process", m.member_id));
                }
            }
            if let Some((i, n)) = per_instance.iter().find(|(_, n)| **n > 1) {
                self.flags.ghost = Some(format!("{n} members registered for instance id {i}"));
            }
            // A member that closed, once everything it sent was processed, is not registered
            // with a live epoch (a static member's -2 leave keeps it with epoch -2).
            for (i, s) in self.slots.iter().enumerate() {
                let quiet = !self.network.has_pending(i);
                if s.member.state() == MemberState::Closed
                    && quiet
                    && !s.leave_failed
                    && let Some(m) = members
                        .iter()
                        .find(|m| m.member_id == s.member.member_id() && m.epoch >= 0)
                {
                    self.flags.ghost = Some(format!(
                        "m{i} closed but the coordinator holds it with epoch {}",
                        m.epoch
                    ));
                }
            }
        }
    }

    fn violated(&self) -> bool {
        let f = &self.flags;
        f.fenced.is_some()
            || f.double_owner.is_some()
            || f.unreleased_fatal
            || f.ghost.is_some()
            || f.fatal_fence
    }

    // ------------------------------------------------------------------ fingerprint

    /// The canonical summary (see the module docs).
    fn summary(&self) -> String {
        let now = self.now;
        let rel = |t: Instant| t.saturating_duration_since(now);
        let mut ids = Canon::default();
        for s in &self.slots {
            ids.id(s.member.member_id());
        }
        if let Some(l) = self.coordinator.leader() {
            ids.id(l);
        }
        for spec in &self.setup.members {
            if let Some(i) = spec.instance
                && let Some(id) = self.coordinator.static_member(i)
            {
                ids.id(id);
            }
        }
        // Connections worth listing, relabelled in creation order.
        let transit = self.in_transit();
        let listed: Vec<ConnView> = self
            .network
            .connections()
            .filter(|c| {
                c.open || !c.unread.is_empty() || c.in_flight.is_some() || transit.contains(&c.id)
            })
            .collect();
        let label = |id: ConnId| match listed.iter().position(|c| c.id == id) {
            Some(l) => format!("L{l}"),
            None => "L?".to_owned(),
        };
        let mut out = String::new();
        for (i, s) in self.slots.iter().enumerate() {
            let m = &s.member;
            let fatal = SimMember::fatal_error(m).map(|e| {
                let text = format!("{e:?}");
                text.split([' ', '{', '('])
                    .next()
                    .unwrap_or_default()
                    .to_owned()
            });
            let _ = write!(
                out,
                "m{i}[{} {} g{} own{:?} co{} fatal{:?} next{:?}",
                m.state(),
                ids.id(m.member_id()),
                m.generation(),
                m.assignment()
                    .iter()
                    .map(|tp| tp.partition)
                    .collect::<Vec<_>>(),
                u8::from(m.coordinator().is_some()),
                fatal,
                m.poll_timeout().map(|(t, timer)| (rel(t), timer)),
            );
            for (c, _, p) in s.conns.in_flight() {
                let _ = write!(out, " {}:{:?}@{:?}", label(c), p.api, rel(p.deadline));
            }
            let _ = write!(
                out,
                " r{} k{} x{}{}] ",
                s.resubscribes,
                s.commits,
                s.closes,
                if s.leave_failed { "!" } else { "" }
            );
        }
        for c in &listed {
            let _ = write!(
                out,
                "{}[m{} {:?} {} in[",
                label(c.id),
                c.client,
                c.kind,
                if c.open { "open" } else { "closed" },
            );
            for f in c.unread {
                let _ = write!(out, "{},", canon_req(&f.body, &mut ids));
            }
            let _ = write!(out, "] rd{} dn[", u8::from(c.in_flight.is_some()));
            for d in self.network.in_transit().filter(|d| d.conn == c.id) {
                let _ = write!(out, "{},", canon_resp(&d.body, &mut ids));
            }
            out.push_str("]] ");
        }
        out.push_str("q[");
        for q in self.network.coordinator_queue() {
            let _ = write!(
                out,
                "{}:{},",
                label(q.conn),
                canon_req(&q.frame.body, &mut ids)
            );
        }
        let co = &self.coordinator;
        let _ = write!(
            out,
            "] co[{:?} g{} L{} next{:?} members[",
            co.state(),
            co.generation(),
            co.leader().map_or("-".into(), |l| ids.id(l)),
            co.poll_timeout().map(rel),
        );
        let mut members = co.members();
        members.sort_by(|a, b| {
            (
                &a.instance_id,
                a.awaiting_join,
                a.awaiting_sync,
                a.epoch,
                &a.assignment,
            )
                .cmp(&(
                    &b.instance_id,
                    b.awaiting_join,
                    b.awaiting_sync,
                    b.epoch,
                    &b.assignment,
                ))
        });
        for m in &members {
            let _ = write!(
                out,
                "{}/{:?}/j{}s{}/e{}/a{},",
                ids.id(&m.member_id),
                m.instance_id,
                u8::from(m.awaiting_join),
                u8::from(m.awaiting_sync),
                m.epoch,
                m.assignment.len()
            );
        }
        let _ = write!(out, "]] f{} {:?}", self.faults, self.flags);
        out
    }
}

/// Renames member ids by first appearance.
#[derive(Default)]
struct Canon {
    ids: Vec<String>,
}

impl Canon {
    fn id(&mut self, raw: &str) -> String {
        if raw.is_empty() {
            return "\"\"".into();
        }
        let i = match self.ids.iter().position(|x| x == raw) {
            Some(i) => i,
            None => {
                self.ids.push(raw.to_owned());
                self.ids.len() - 1
            }
        };
        format!("M{i}")
    }
}

fn canon_req(body: &RequestBody, ids: &mut Canon) -> String {
    let RequestBody::Kafka(body) = body else {
        return format!("{:?}", body.api());
    };
    match body {
        RequestKind::JoinGroup(r) => format!("Join({})", ids.id(&r.member_id)),
        RequestKind::SyncGroup(r) => format!(
            "Sync({},g{},{})",
            ids.id(&r.member_id),
            r.generation_id,
            r.assignments.len()
        ),
        RequestKind::Heartbeat(r) => format!("Hb({},g{})", ids.id(&r.member_id), r.generation_id),
        RequestKind::LeaveGroup(r) => {
            let v: Vec<String> = r.members.iter().map(|m| ids.id(&m.member_id)).collect();
            format!("Leave({})", v.join("+"))
        }
        RequestKind::OffsetCommit(r) => format!(
            "Commit({},g{})",
            ids.id(&r.member_id),
            r.generation_id_or_member_epoch
        ),
        RequestKind::ConsumerGroupHeartbeat(r) => format!(
            "Cgh({},e{},{})",
            ids.id(&r.member_id),
            r.member_epoch,
            if r.topic_partitions.is_some() {
                "full"
            } else {
                "partial"
            }
        ),
        other => consumer_membership::request::api_key_of(other)
            .map_or_else(|| "unlisted request".into(), |k| format!("{k:?}")),
    }
}

fn canon_resp(body: &ResponseBody, ids: &mut Canon) -> String {
    let code = code_name(response_error(body));
    let ResponseBody::Kafka(kafka) = body else {
        return format!("{:?}:{code}", body.api());
    };
    match kafka {
        ResponseKind::JoinGroup(r) => format!(
            "Join:{code}({},g{},L{},n{})",
            ids.id(&r.member_id),
            r.generation_id,
            ids.id(&r.leader),
            r.members.len()
        ),
        ResponseKind::SyncGroup(r) => format!("Sync:{code}({}B)", r.assignment.len()),
        ResponseKind::ConsumerGroupHeartbeat(r) => format!(
            "Cgh:{code}(e{},{})",
            r.member_epoch,
            u8::from(r.assignment.is_some())
        ),
        _ => format!(
            "{:?}:{code}",
            consumer_membership::sim::network::api_of(body)
        ),
    }
}

fn describe_req(body: &RequestBody) -> String {
    consumer_membership::sim::coordinator::describe_request(body)
}

fn describe_resp(body: &ResponseBody) -> String {
    consumer_membership::sim::coordinator::describe_response(body)
}

// ---------------------------------------------------------------------------------- model

/// A state: the path that leads to it (replayed on demand) and its canonical summary.
#[derive(Clone)]
struct State {
    path: Arc<Vec<Choice>>,
    summary: Arc<str>,
    enabled: Arc<Vec<Choice>>,
    flags: Flags,
    states: Vec<MemberState>,
}

impl Hash for State {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.summary.hash(h);
    }
}

impl PartialEq for State {
    fn eq(&self, other: &Self) -> bool {
        self.summary == other.summary
    }
}

impl fmt::Debug for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary)
    }
}

struct MembershipModel {
    setup: Setup,
}

impl MembershipModel {
    fn snapshot(w: &ModelWorld, path: Vec<Choice>) -> State {
        State {
            path: Arc::new(path),
            summary: w.summary().into(),
            enabled: Arc::new(w.enabled()),
            flags: w.flags.clone(),
            states: w.slots.iter().map(|s| s.member.state()).collect(),
        }
    }

    /// Replays `path` from the initial state (with a trace when asked).
    fn replay(&self, path: &[Choice], trace: bool) -> ModelWorld {
        let mut w = ModelWorld::new(&self.setup, trace);
        for c in path {
            w.apply(*c);
        }
        w
    }
}

impl Model for MembershipModel {
    type State = State;
    type Action = Choice;

    fn init_states(&self) -> Vec<State> {
        let w = ModelWorld::new(&self.setup, false);
        vec![Self::snapshot(&w, Vec::new())]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Choice>) {
        if state.path.len() < self.setup.depth {
            actions.extend(state.enabled.iter().copied());
        }
    }

    fn next_state(&self, last: &State, action: Choice) -> Option<State> {
        let mut path = Vec::with_capacity(last.path.len() + 1);
        path.extend(last.path.iter().copied());
        path.push(action);
        let run = catch_unwind(AssertUnwindSafe(|| {
            let mut w = self.replay(&last.path, false);
            // Replays are deterministic (seeded RNGs, relative times, no hash-map iteration):
            // the replayed world is the state it stands for.
            assert_eq!(*w.summary(), *last.summary, "the replay diverged");
            w.apply(action);
            w
        }));
        Some(match run {
            Ok(w) => Self::snapshot(&w, path),
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "panic".into());
                let flags = Flags {
                    panic: Some(msg),
                    ..last.flags.clone()
                };
                State {
                    summary: format!("PANIC {flags:?} after {path:?}").into(),
                    path: Arc::new(path),
                    enabled: Arc::new(Vec::new()),
                    flags,
                    states: last.states.clone(),
                }
            }
        })
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut p = vec![
            Property::<Self>::always(NO_SELF_FENCE, |_, s| s.flags.fenced.is_none()),
            Property::<Self>::always(NO_FATAL_FENCE, |_, s| !s.flags.fatal_fence),
            Property::<Self>::always(NO_DOUBLE_OWNER, |_, s| s.flags.double_owner.is_none()),
            Property::<Self>::always(NO_PANIC, |_, s| s.flags.panic.is_none()),
            Property::<Self>::sometimes(REACHES_STABLE, |_, s| {
                s.states.iter().all(|st| *st == MemberState::Stable)
            }),
        ];
        if self
            .setup
            .members
            .iter()
            .any(|m| m.protocol == Proto::Consumer)
        {
            p.push(Property::<Self>::always(NO_UNRELEASED_FATAL, |_, s| {
                !s.flags.unreleased_fatal
            }));
            p.push(Property::<Self>::always(NO_GHOST, |_, s| {
                s.flags.ghost.is_none()
            }));
        }
        p
    }
}

const NO_SELF_FENCE: &str = "no FENCED_INSTANCE_ID reaches a member (one process per instance id)";
const NO_FATAL_FENCE: &str = "no member stops on FENCED_INSTANCE_ID";
const NO_DOUBLE_OWNER: &str = "no partition owned by two live members in one generation";
const NO_PANIC: &str = "no step panics";
const REACHES_STABLE: &str = "every member reaches Stable";
const NO_UNRELEASED_FATAL: &str = "no member stops on UNRELEASED_INSTANCE_ID";
const NO_GHOST: &str = "one registered member per instance id, none unused";

const SAFETY: [&str; 6] = [
    NO_SELF_FENCE,
    NO_FATAL_FENCE,
    NO_DOUBLE_OWNER,
    NO_PANIC,
    NO_UNRELEASED_FATAL,
    NO_GHOST,
];

// ---------------------------------------------------------------------------------- runs

struct Outcome {
    discoveries: BTreeMap<&'static str, Vec<Choice>>,
    unique: usize,
    total: usize,
    max_depth: usize,
    elapsed: Duration,
}

fn depth_extra() -> isize {
    std::env::var("MODEL_DEPTH_EXTRA")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn check(
    label: &str,
    mut setup: Setup,
    finish: Option<HasDiscoveries>,
) -> (Outcome, MembershipModel) {
    setup.depth = setup.depth.saturating_add_signed(depth_extra());
    let started = Instant::now();
    let model = MembershipModel {
        setup: setup.clone(),
    };
    let mut builder = model.checker().threads(1);
    if let Some(f) = finish {
        builder = builder.finish_when(f);
    }
    let checker = builder.spawn_bfs().join();
    let elapsed = started.elapsed();
    let discoveries: BTreeMap<&'static str, Vec<Choice>> = checker
        .discoveries()
        .into_iter()
        .map(|(k, p)| (k, p.into_actions()))
        .collect();
    let outcome = Outcome {
        discoveries,
        unique: checker.unique_state_count(),
        total: checker.state_count(),
        max_depth: checker.max_depth(),
        elapsed,
    };
    println!(
        "[{label}] explored {} states ({} unique), depth bound {}, max depth {}, in {:.1?}",
        outcome.total, outcome.unique, setup.depth, outcome.max_depth, outcome.elapsed
    );
    for (name, path) in &outcome.discoveries {
        println!(
            "[{label}]   discovery: {name} (path of {} choices)",
            path.len()
        );
    }
    (outcome, MembershipModel { setup })
}

/// Prints the replayed trace of a discovery.
fn print_path(model: &MembershipModel, label: &str, name: &str, path: &[Choice]) {
    let w = model.replay(path, true);
    println!("[{label}] --- {name}: {} choices: {path:?}", path.len());
    for line in w.trace.as_deref().unwrap_or_default() {
        println!("[{label}] {line}");
    }
    println!("[{label}] final flags: {:?}", w.flags);
}

fn assert_safe(label: &str, model: &MembershipModel, outcome: &Outcome) {
    let failures: Vec<&&str> = outcome
        .discoveries
        .keys()
        .filter(|k| SAFETY.contains(k))
        .collect();
    for name in &failures {
        print_path(model, label, name, &outcome.discoveries[**name]);
    }
    assert!(
        failures.is_empty(),
        "[{label}] counterexamples: {failures:?}"
    );
    assert!(
        outcome.discoveries.contains_key(REACHES_STABLE),
        "[{label}] no path reaches Stable"
    );
}

fn classic_one(java: bool) -> Setup {
    Setup {
        members: vec![MemberSpec {
            protocol: Proto::Classic,
            instance: Some("i1"),
            java,
        }],
        partitions: 2,
        max_faults: 1,
        fail_head: true,
        reset_conn: true,
        lose_answer: false,
        slow_answer: false,
        resubscribes: 1,
        commits: 1,
        closes: 0,
        depth: 18,
        warm: false,
    }
}

fn consumer_one(instance: Option<&'static str>) -> Setup {
    Setup {
        members: vec![MemberSpec {
            protocol: Proto::Consumer,
            instance,
            java: false,
        }],
        partitions: 2,
        max_faults: 2,
        fail_head: true,
        reset_conn: true,
        lose_answer: true,
        slow_answer: true,
        resubscribes: 1,
        commits: 0,
        closes: 1,
        depth: 13,
        warm: false,
    }
}

/// Runs a check that must find the self-fencing; prints and returns its path.
fn find_self_fence(label: &str, setup: Setup) -> Vec<Choice> {
    let (outcome, model) = check(
        label,
        setup,
        Some(HasDiscoveries::AnyOf([NO_SELF_FENCE].into_iter().collect())),
    );
    let path = outcome
        .discoveries
        .get(NO_SELF_FENCE)
        .unwrap_or_else(|| panic!("[{label}] the checker did not find the self-fencing"))
        .clone();
    print_path(&model, label, NO_SELF_FENCE, &path);
    println!(
        "[{label}] counterexample: path of {} choices, found after {} states ({} unique)",
        path.len(),
        outcome.total,
        outcome.unique
    );
    let w = model.replay(&path, false);
    assert!(
        w.flags.fenced.is_some(),
        "[{label}] the replayed path self-fences"
    );
    assert!(w.flags.fatal_fence, "[{label}] and the member stops on it");
    path
}

/// One static member from scratch, this crate's policy: faults, unsubscribe + subscribe and a
/// commit anywhere; no self-fencing, no double ownership, no panic, and Stable is reached.
#[test]
fn classic_static_member_never_fences_itself() {
    let label = "classic, 1 static, crate policy";
    let (outcome, model) = check(label, classic_one(false), None);
    assert_safe(label, &model, &outcome);
}

/// The same from Stable (the member holds an id and a generation), deeper after the warm-up:
/// this covers the class of schedules that fences the Java policy below.
#[test]
fn classic_static_member_from_stable_never_fences_itself() {
    let label = "classic, 1 static from Stable, crate policy";
    let setup = Setup {
        warm: true,
        depth: 12,
        ..classic_one(false)
    };
    let (outcome, model) = check(label, setup, None);
    assert_safe(label, &model, &outcome);
}

/// The Java client's policy from Stable: the checker finds KAFKA-20985 on its own (the member id
/// wiped by the suppressed LeaveGroup of `unsubscribe()`, an abandoned empty-id JoinGroup read
/// after the retry, the retry fenced by `replaceStaticMember`).
#[test]
fn classic_java_reset_policy_from_stable_is_kafka_20985() {
    let label = "classic, 1 static from Stable, Java reset policy";
    // No commits: with them the first self-fence found goes through an OffsetCommit accepted
    // while Stable, queued while the coordinator is looked up again and built after the
    // unsubscribe with the wiped id ("" + instance id), which the coordinator answers
    // FENCED_INSTANCE_ID (the Java client fails such a commit locally: no stable generation).
    let setup = Setup {
        warm: true,
        commits: 0,
        depth: 14,
        ..classic_one(true)
    };
    let path = find_self_fence(label, setup);
    assert!(
        path.iter().any(|c| matches!(c, Choice::Resubscribe(_))),
        "from Stable the self-fence needs the id wiped by the suppressed leave"
    );
}

/// The Java client's policy from scratch: two empty-id joins of one process race (no
/// quarantine), the later-read one fences the other.
#[test]
fn classic_java_reset_policy_is_a_counterexample() {
    find_self_fence("classic, 1 static, Java reset policy", classic_one(true));
}

/// Two static members forming a group from scratch: every interleaving of their joins, syncs,
/// heartbeats and the rebalance that splits the partitions (no faults, to afford the depth).
#[test]
fn classic_two_static_members() {
    let label = "classic, 2 static, crate policy";
    let spec = |i| MemberSpec {
        protocol: Proto::Classic,
        instance: Some(i),
        java: false,
    };
    let setup = Setup {
        members: vec![spec("i1"), spec("i2")],
        partitions: 2,
        max_faults: 0,
        fail_head: false,
        reset_conn: false,
        lose_answer: false,
        slow_answer: false,
        resubscribes: 0,
        commits: 0,
        closes: 0,
        depth: 24,
        warm: false,
    };
    let (outcome, model) = check(label, setup, None);
    assert_safe(label, &model, &outcome);
}

/// KIP-848, one static member, two faults (lost or slow answers, connection resets, coordinator
/// failures), one unsubscribe + subscribe and one close: it never stops on
/// UNRELEASED_INSTANCE_ID (its own earlier join is recovered from), the coordinator never holds
/// two members for the instance id nor a closed member with a live epoch.
#[test]
fn consumer_static_member_recovers_from_its_own_join() {
    let label = "KIP-848, 1 static";
    let (outcome, model) = check(label, consumer_one(Some("k1")), None);
    assert_safe(label, &model, &outcome);
}

/// KIP-848, one dynamic member: a close at any point (before the first answer too) leaves no
/// member registered once what it sent was processed.
#[test]
fn consumer_dynamic_member_leaves_no_ghost() {
    let label = "KIP-848, 1 dynamic";
    let setup = Setup {
        resubscribes: 0,
        depth: 16,
        ..consumer_one(None)
    };
    let (outcome, model) = check(label, setup, None);
    assert_safe(label, &model, &outcome);
}
