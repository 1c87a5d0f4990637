//! The share world: [`ShareConsumer`]s with their applications, the [`Brokers`], a network of
//! per-connection ordered requests with seeded faults, and a virtual clock that jumps to the
//! next thing due. See the module docs of [`super`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, Instant};

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, FindCoordinatorResponse, MetadataResponse, RequestKind, ResponseKind,
    ShareFetchRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::broker::{Brokers, RecordState};
use crate::config::GroupConfig;
use crate::error::TransportError;
use crate::machine::events::{CloseOptions, Event};
use crate::machine::share::{
    AckMode, AcknowledgeType, ShareConsumer, ShareEvent, ShareFetchSettings, SharePartition,
};
use crate::member_id::MemberId;
use crate::request::{Outbound, Request, RequestId, Response, ResponseBody, Target};
use crate::sim::world::clock_step;

/// Settings of a [`ShareWorld`].
#[derive(Debug, Clone)]
pub struct ShareSimConfig {
    /// Seeds the network, the applications and the member ids.
    pub seed: u64,
    /// Brokers (1-3), node ids 1..=brokers.
    pub brokers: i32,
    /// Partitions of the topic "t".
    pub partitions: i32,
    /// Records per partition.
    pub records: i64,
    /// ShareFetch MaxRecords.
    pub max_records: i32,
    /// Probability that a request's connection resets before the broker reads it.
    pub reset_before: f64,
    /// Probability that a request's connection resets after the broker processed it (the
    /// answer is lost).
    pub reset_after: f64,
    /// Probability of a slow answer, and how slow at most.
    pub slow: f64,
    /// The extra delay of a slow answer, at most.
    pub slow_extra: Duration,
    /// Probability that the application RELEASEs a range instead of ACCEPTing it.
    pub release: f64,
    /// Probability that the application pauses (up to `pause_max`) before acknowledging.
    pub pause: f64,
    /// The longest pause.
    pub pause_max: Duration,
    /// Keep a trace (one line per step).
    pub trace: bool,
}

impl ShareSimConfig {
    /// A quiet world for `seed`: 2 brokers, 2 partitions of 20 records, no faults.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            brokers: 2,
            partitions: 2,
            records: 20,
            max_records: 10,
            reset_before: 0.0,
            reset_after: 0.0,
            slow: 0.0,
            slow_extra: Duration::ZERO,
            release: 0.0,
            pause: 0.0,
            pause_max: Duration::ZERO,
            trace: false,
        }
    }
}

/// A member slot: one process at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot(pub usize);

/// The application of one process.
#[derive(Debug, Default)]
struct App {
    /// Delivered ranges it holds: (partition, first, last).
    holding: Vec<(SharePartition, i64, i64)>,
    /// When it is done with what it holds (acknowledges, asks for more).
    due: Option<Instant>,
}

/// A connection, as a process sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Conn {
    Bootstrap,
    Coordinator(i32),
    Node(i32),
}

#[derive(Debug, Default, Clone, Copy)]
struct ConnState {
    generation: u64,
    last_process: Option<Instant>,
    last_answer: Option<Instant>,
}

struct Proc {
    name: String,
    consumer: ShareConsumer,
    member_id: String,
    app: App,
    conns: BTreeMap<Conn, ConnState>,
    closing: bool,
    closed: bool,
    /// A deadline `handle_timeout` did not move: ignored until the next input.
    stuck: Option<Instant>,
}

struct SlotState {
    proc: Option<Proc>,
    incarnation: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Normal,
    ResetBefore,
    ResetAfter,
}

struct Flight {
    slot: usize,
    incarnation: u32,
    id: RequestId,
    conn: Conn,
    generation: u64,
    node: i32,
    out: Outbound,
    fate: Fate,
    extra: Duration,
    answer: Option<Response>,
    /// A parked ShareFetch: the session it waits on.
    parked: Option<u64>,
}

enum Ev {
    Process(u64),
    Complete(u64),
    Deliver(u64),
    Reset(u64),
    App(usize, u32),
    Script(Box<dyn FnOnce(&mut ShareWorld)>),
}

/// The simulated share world.
pub struct ShareWorld {
    config: ShareSimConfig,
    rng: ChaCha8Rng,
    start: Instant,
    now: Instant,
    brokers: Brokers,
    slots: Vec<SlotState>,
    flights: BTreeMap<u64, Flight>,
    next_flight: u64,
    events: BTreeMap<(Instant, u64), Ev>,
    next_event: u64,
    faults: bool,
    /// Values the applications were handed: (partition, offset).
    seen: BTreeSet<(i32, i64)>,
    trace: Vec<String>,
    violations: Vec<String>,
    anomalies: Vec<String>,
    steps: u64,
    steps_at_now: u64,
    /// Acknowledgements reported: (ok, failed).
    pub acks_reported: (u64, u64),
    /// Processes started (restarts included).
    pub processes: u64,
    /// Error codes the brokers answered, by API ("ShareFetch" for request-level codes,
    /// "ShareFetch/partition" and "ShareFetch/ack" for partition-level ones), for coverage.
    pub answered: BTreeMap<(&'static str, i16), u64>,
}

impl fmt::Debug for ShareWorld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShareWorld")
            .field("seed", &self.config.seed)
            .field("elapsed", &self.elapsed())
            .field("steps", &self.steps)
            .finish_non_exhaustive()
    }
}

const LATENCY_MIN_MS: u64 = 1;
const LATENCY_MAX_MS: u64 = 10;

impl ShareWorld {
    /// A world for `config`, its virtual clock starting at `start`.
    pub fn new(config: ShareSimConfig, start: Instant) -> Self {
        let nodes: Vec<i32> = (1..=config.brokers.clamp(1, 3)).collect();
        let brokers = Brokers::new(nodes, config.partitions, config.records);
        Self {
            rng: ChaCha8Rng::seed_from_u64(config.seed ^ 0x5a4e_5a4e),
            config,
            start,
            now: start,
            brokers,
            slots: Vec::new(),
            flights: BTreeMap::new(),
            next_flight: 0,
            events: BTreeMap::new(),
            next_event: 0,
            faults: true,
            seen: BTreeSet::new(),
            trace: Vec::new(),
            violations: Vec::new(),
            anomalies: Vec::new(),
            steps: 0,
            steps_at_now: 0,
            acks_reported: (0, 0),
            processes: 0,
            answered: BTreeMap::new(),
        }
    }

    /// Virtual time now.
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

    /// The brokers' state.
    pub fn brokers(&self) -> &Brokers {
        &self.brokers
    }

    /// The brokers, to change them.
    pub fn brokers_mut(&mut self) -> &mut Brokers {
        &mut self.brokers
    }

    /// Invariants broken so far (the brokers' own included).
    pub fn violations(&self) -> Vec<String> {
        let mut v = self.violations.clone();
        v.extend(self.brokers.violations.iter().cloned());
        v
    }

    /// Deadlines at or before now that `handle_timeout` did not move (a real driver would spin
    /// on one until some other input arrives; the world ignores it until then). Each is a
    /// violation too; kept apart to be counted by kind.
    pub fn anomalies(&self) -> &[String] {
        &self.anomalies
    }

    /// The trace, one line per step.
    pub fn trace(&self) -> &[String] {
        &self.trace
    }

    /// The trace as text.
    pub fn trace_text(&self) -> String {
        let mut out = format!(
            "--- share simulation trace (seed {}, {} steps, {:?} virtual) ---\n",
            self.config.seed,
            self.steps,
            self.elapsed()
        );
        for l in &self.trace {
            out.push_str(l);
            out.push('\n');
        }
        out
    }

    fn log(&mut self, line: impl FnOnce() -> String) {
        if self.config.trace {
            let t = self.elapsed().as_millis();
            let l = line();
            self.trace.push(format!("{t:>7} {l}"));
        }
    }

    /// Writes `text` into the trace.
    pub fn note(&mut self, text: &str) {
        self.log(|| format!("## {text}"));
    }

    /// Faults (resets, slow answers) on or off from now on.
    pub fn set_faults(&mut self, on: bool) {
        self.faults = on;
    }

    /// The member id of the process in `slot`, if alive.
    pub fn member_id(&self, slot: Slot) -> Option<&str> {
        (self.slots.get(slot.0)?.proc.as_ref()).map(|p| p.member_id.as_str())
    }

    /// Whether `slot` holds a live process that has not closed.
    pub fn alive(&self, slot: Slot) -> bool {
        (self.slots.get(slot.0)).is_some_and(|s| s.proc.as_ref().is_some_and(|p| !p.closed))
    }

    /// The consumer of `slot`, if alive.
    pub fn consumer(&self, slot: Slot) -> Option<&ShareConsumer> {
        (self.slots.get(slot.0)?.proc.as_ref()).map(|p| &p.consumer)
    }

    /// Values the applications were handed.
    pub fn seen(&self) -> &BTreeSet<(i32, i64)> {
        &self.seen
    }

    // ------------------------------------------------------------------ processes

    /// Adds a slot and starts a process in it: subscribed to "t", asking for records.
    pub fn add_member(&mut self) -> Slot {
        self.slots.push(SlotState {
            proc: None,
            incarnation: 0,
        });
        let slot = Slot(self.slots.len() - 1);
        self.start_process(slot);
        slot
    }

    /// Starts a new process in `slot` (a new member id, KIP-1082: a new process draws its
    /// own): it subscribes to "t" and asks for records. Whatever ran there is dropped first.
    pub fn start_process(&mut self, slot: Slot) {
        self.crash(slot);
        let seed: u64 = self.rng.random();
        let id = MemberId::from_seed(seed);
        let mut config = GroupConfig::new("g").with_member_id(id);
        config.seed = Some(seed);
        let settings = ShareFetchSettings {
            max_records: self.config.max_records,
            batch_size: self.config.max_records,
            ..ShareFetchSettings::default()
        };
        let consumer = ShareConsumer::new(config, settings, AckMode::Explicit, self.now)
            .expect("a valid share configuration");
        let s = &mut self.slots[slot.0];
        s.incarnation += 1;
        let name = format!("m{}.{}", slot.0, s.incarnation);
        let member_id = consumer.member_id().to_owned();
        if member_id != id.as_str() {
            self.violations.push(format!(
                "{name}: the consumer's member id {member_id} is not the configured {id}"
            ));
        }
        self.slots[slot.0].proc = Some(Proc {
            name: name.clone(),
            consumer,
            member_id: member_id.clone(),
            app: App::default(),
            conns: BTreeMap::new(),
            closing: false,
            closed: false,
            stuck: None,
        });
        self.processes += 1;
        self.log(|| format!("{name}: process started, member id {member_id}"));
        let now = self.now;
        if let Some(p) = self.proc_mut(slot.0) {
            let r = p.consumer.subscribe(["t".to_string()], now);
            debug_assert!(r.is_ok());
            p.consumer.fetch_more(now);
        }
        self.pump(slot.0);
    }

    /// The process in `slot` dies without a word: its connections close (its sessions are
    /// gone from the brokers), its acquired records come back when their locks expire, its
    /// group membership when its session times out. Requests it already sent are still
    /// processed; their answers are dropped.
    pub fn crash(&mut self, slot: Slot) {
        let Some(p) = self.slots.get_mut(slot.0).and_then(|s| s.proc.take()) else {
            return;
        };
        self.brokers.drop_sessions(&p.member_id);
        let name = p.name;
        self.log(|| format!("{name}: crashed"));
    }

    /// The application of `slot` closes its consumer (after acknowledging what it holds).
    pub fn close(&mut self, slot: Slot) {
        let now = self.now;
        let Some(p) = self.proc_mut(slot.0) else {
            return;
        };
        if p.closing {
            return;
        }
        p.closing = true;
        for (part, first, last) in std::mem::take(&mut p.app.holding) {
            let _ = p
                .consumer
                .acknowledge(part, first, last, AcknowledgeType::Accept);
        }
        p.app.due = None;
        p.consumer.close(CloseOptions::Default, now);
        let name = p.name.clone();
        self.log(|| format!("{name}: close"));
        self.pump(slot.0);
    }

    /// Partition `p` moves to the next broker.
    pub fn move_leader(&mut self, p: usize) {
        let nodes = self.brokers.nodes.len() as i32;
        if nodes < 2 || p >= self.brokers.leaders.len() {
            return;
        }
        let from = self.brokers.leaders[p];
        let to = from % nodes + 1;
        self.brokers.move_leader(p, to);
        self.log(|| format!("## leader of t-{p} moves {from} -> {to}"));
    }

    /// The coordinator moves to the next broker, loading for `load`.
    pub fn move_coordinator(&mut self, load: Duration) {
        let nodes = self.brokers.nodes.len() as i32;
        let from = self.brokers.coordinator;
        let to = from % nodes + 1;
        let now = self.now;
        self.brokers.move_coordinator(to, load, now);
        self.log(|| format!("## coordinator moves {from} -> {to} (loading {load:?})"));
    }

    /// Runs `f` at `at` (virtual time since the start).
    pub fn schedule(&mut self, at: Duration, f: impl FnOnce(&mut ShareWorld) + 'static) {
        let at = self.start + at;
        self.push(at, Ev::Script(Box::new(f)));
    }

    fn push(&mut self, at: Instant, ev: Ev) {
        self.next_event += 1;
        self.events.insert((at.max(self.now), self.next_event), ev);
    }

    fn proc_mut(&mut self, slot: usize) -> Option<&mut Proc> {
        self.slots.get_mut(slot)?.proc.as_mut()
    }

    // ------------------------------------------------------------------ running

    /// Runs until `pred` holds (true) or `limit` of virtual time passed (false).
    pub fn run_until(
        &mut self,
        mut pred: impl FnMut(&ShareWorld) -> bool,
        limit: Duration,
    ) -> bool {
        let end = self.now + limit;
        loop {
            if pred(self) {
                return true;
            }
            match self.next_due() {
                Some(at) if at <= end => self.step(),
                _ => {
                    self.now = self.now.max(end);
                    return pred(self);
                }
            }
        }
    }

    fn next_due(&self) -> Option<Instant> {
        let ev = self.events.keys().next().map(|k| k.0);
        let timers = (self.slots.iter())
            .filter_map(|s| s.proc.as_ref())
            .filter_map(|p| {
                let (at, _) = p.consumer.poll_timeout()?;
                (p.stuck != Some(at)).then_some(at.max(self.now))
            })
            .min();
        [ev, timers].into_iter().flatten().min()
    }

    /// One step: the earliest event, or member timer.
    pub fn step(&mut self) {
        let Some(at) = self.next_due() else {
            return;
        };
        let (now, steps) = (&mut self.now, &mut self.steps);
        if let Some(stuck) = clock_step(now, steps, &mut self.steps_at_now, at, 20_000) {
            let elapsed = stuck - self.start;
            (self.violations).push(format!("livelock: over 20000 steps at {elapsed:?}"));
        }
        if let Some((&key, _)) = self.events.first_key_value()
            && key.0 <= self.now
        {
            let ev = self.events.remove(&key).expect("present");
            self.perform(ev);
            return;
        }
        let now = self.now;
        let due: Vec<usize> = (0..self.slots.len())
            .filter(|i| {
                (self.slots[*i].proc.as_ref()).is_some_and(|p| {
                    p.consumer
                        .poll_timeout()
                        .is_some_and(|(at, _)| at <= now && p.stuck != Some(at))
                })
            })
            .collect();
        let start = self.start;
        for i in due {
            let Some(p) = self.proc_mut(i) else {
                continue;
            };
            let before = p.consumer.poll_timeout();
            p.consumer.handle_timeout(now);
            self.pump(i);
            let Some(p) = self.proc_mut(i) else {
                continue;
            };
            let after = p.consumer.poll_timeout();
            if let Some((at, timer)) = after
                && at <= now
                && after == before
            {
                p.stuck = Some(at);
                let line = format!(
                    "{}: deadline {timer:?} at {:?} not moved by handle_timeout at {:?} (closing {}, closed {})",
                    p.name,
                    at - start,
                    now - start,
                    p.closing,
                    p.closed
                );
                self.log(|| format!("!! {line}"));
                // A driver would spin on it: a violation (kept apart too, to count by kind).
                self.violations.push(line.clone());
                self.anomalies.push(line);
            }
        }
    }

    fn perform(&mut self, ev: Ev) {
        match ev {
            Ev::Script(f) => f(self),
            Ev::App(slot, inc) => self.app_done(slot, inc),
            Ev::Process(f) => self.process(f),
            Ev::Complete(f) => self.complete(f),
            Ev::Deliver(f) => self.deliver(f),
            Ev::Reset(f) => self.reset(f),
        }
    }

    /// Sends what the process has to send and hands its events to its application, until it
    /// has neither.
    fn pump(&mut self, slot: usize) {
        if let Some(p) = self.proc_mut(slot) {
            p.stuck = None;
        }
        loop {
            let mut progressed = false;
            while let Some(out) = self.proc_mut(slot).and_then(|p| p.consumer.poll_request()) {
                progressed = true;
                self.send(slot, out);
            }
            while let Some(e) = self.proc_mut(slot).and_then(|p| p.consumer.poll_event()) {
                progressed = true;
                self.event(slot, e);
            }
            if !progressed {
                return;
            }
        }
    }

    fn event(&mut self, slot: usize, e: ShareEvent) {
        let now = self.now;
        let Some(p) = self.slots[slot].proc.as_mut() else {
            return;
        };
        let name = p.name.clone();
        let member = p.member_id.clone();
        match e {
            ShareEvent::Records { topic, records } => {
                if topic != "t" {
                    self.violations
                        .push(format!("{name}: records of topic {topic:?}"));
                }
                let part = records.partition;
                for a in &records.acquired {
                    for o in a.first..=a.last {
                        let k = (member.clone(), part.partition, o, a.delivery_count);
                        if !self.brokers.acquisitions.contains(&k) {
                            self.violations.push(format!(
                                "{name}: handed t-{}@{o} (delivery {}) that no leader acquired for it",
                                part.partition, a.delivery_count
                            ));
                        }
                        self.seen.insert((part.partition, o));
                    }
                    p.app.holding.push((part, a.first, a.last));
                }
                if p.app.due.is_none() && !p.closing {
                    let pause = self.faults && self.rng.random_bool(self.config.pause);
                    let d = if pause {
                        let max = self.config.pause_max.as_millis().max(1) as u64;
                        Duration::from_millis(self.rng.random_range(1..=max))
                    } else {
                        Duration::from_millis(self.rng.random_range(0..=50))
                    };
                    p.app.due = Some(now + d);
                    let inc = self.slots[slot].incarnation;
                    self.push(now + d, Ev::App(slot, inc));
                }
                self.log(|| {
                    let ranges: Vec<String> = (records.acquired.iter())
                        .map(|a| format!("{}..={}(d{})", a.first, a.last, a.delivery_count))
                        .collect();
                    format!("{name}: records t-{} {}", part.partition, ranges.join(","))
                });
            }
            ShareEvent::Acknowledged(a) => {
                match &a.result {
                    Ok(()) => {
                        self.acks_reported.0 += 1;
                        let k = (
                            member.clone(),
                            a.partition.partition,
                            a.first,
                            a.last,
                            a.kind,
                        );
                        match self.brokers.applied.iter().position(|x| *x == k) {
                            Some(i) => {
                                self.brokers.applied.swap_remove(i);
                            }
                            None => self.violations.push(format!(
                                "{name}: acknowledgement {:?} of t-{} {}..={} reported Ok, never applied by a leader",
                                a.kind, a.partition.partition, a.first, a.last
                            )),
                        }
                    }
                    Err(_) => self.acks_reported.1 += 1,
                }
                self.log(|| {
                    format!(
                        "{name}: acknowledged {:?} t-{} {}..={}: {:?}",
                        a.kind, a.partition.partition, a.first, a.last, a.result
                    )
                });
            }
            ShareEvent::Member(e) => {
                if matches!(e, Event::Closed | Event::Fatal(_)) {
                    p.closed = true;
                }
                if let Event::Fatal(err) = &e {
                    self.violations
                        .push(format!("{name}: stopped on a fatal error: {err}"));
                }
                self.log(|| format!("{name}: {e:?}"));
            }
            ShareEvent::FetchError(e) => self.log(|| format!("{name}: fetch error {e:?}")),
            #[allow(unreachable_patterns)]
            other => self.log(|| format!("{name}: {other:?}")),
        }
    }

    /// The application is done with what it holds: acknowledges each range (ACCEPT, rarely
    /// RELEASE), then asks for more.
    fn app_done(&mut self, slot: usize, inc: u32) {
        if self.slots[slot].incarnation != inc {
            return;
        }
        let now = self.now;
        let release = if self.faults {
            self.config.release
        } else {
            0.0
        };
        let Some(p) = self.slots[slot].proc.as_mut() else {
            return;
        };
        if p.closing {
            return;
        }
        p.app.due = None;
        let name = p.name.clone();
        let mut acked = Vec::new();
        for (part, first, last) in std::mem::take(&mut p.app.holding) {
            let kind = if self.rng.random_bool(release) {
                AcknowledgeType::Release
            } else {
                AcknowledgeType::Accept
            };
            // Refused when the session that delivered them ended (the records come back).
            let r = p.consumer.acknowledge(part, first, last, kind);
            acked.push(format!(
                "{kind:?} t-{} {first}..={last} {}",
                part.partition,
                if r.is_ok() { "" } else { "(refused)" }
            ));
        }
        p.consumer.fetch_more(now);
        self.log(|| {
            format!(
                "{name}: app acknowledges [{}], fetch_more",
                acked.join(", ")
            )
        });
        self.pump(slot);
    }

    // ------------------------------------------------------------------ network

    fn latency(&mut self) -> Duration {
        Duration::from_millis(self.rng.random_range(LATENCY_MIN_MS..=LATENCY_MAX_MS))
    }

    fn send(&mut self, slot: usize, out: Outbound) {
        let now = self.now;
        let (conn, node) = match &out.target {
            Target::Bootstrap => {
                let n = self.brokers.nodes.len();
                (
                    Conn::Bootstrap,
                    self.brokers.nodes[self.rng.random_range(0..n)],
                )
            }
            Target::Coordinator(b) => (Conn::Coordinator(b.node_id), b.node_id),
            Target::Node(b) => (Conn::Node(b.node_id), b.node_id),
            #[allow(unreachable_patterns)]
            _ => (Conn::Bootstrap, self.brokers.nodes[0]),
        };
        self.check_request(slot, &out);
        let fate = if !self.faults {
            Fate::Normal
        } else {
            let r: f64 = self.rng.random();
            if r < self.config.reset_before {
                Fate::ResetBefore
            } else if r < self.config.reset_before + self.config.reset_after {
                Fate::ResetAfter
            } else {
                Fate::Normal
            }
        };
        let extra = if self.faults && self.rng.random_bool(self.config.slow) {
            let max = self.config.slow_extra.as_millis().max(1) as u64;
            Duration::from_millis(self.rng.random_range(1..=max))
        } else {
            Duration::ZERO
        };
        let lat = self.latency();
        let inc = self.slots[slot].incarnation;
        let p = self.slots[slot]
            .proc
            .as_mut()
            .expect("a live process sends");
        let c = p.conns.entry(conn).or_default();
        let at = (now + lat).max(c.last_process.unwrap_or(now));
        c.last_process = Some(at);
        let generation = c.generation;
        let name = p.name.clone();
        self.next_flight += 1;
        let f = self.next_flight;
        self.log(|| {
            format!(
                "{name}: -> node {node} {} {:?} ({fate:?})",
                out.id,
                summary(&out)
            )
        });
        self.flights.insert(
            f,
            Flight {
                slot,
                incarnation: inc,
                id: out.id,
                conn,
                generation,
                node,
                out,
                fate,
                extra,
                answer: None,
                parked: None,
            },
        );
        match fate {
            Fate::ResetBefore => self.push(now + lat, Ev::Reset(f)),
            _ => self.push(at, Ev::Process(f)),
        }
    }

    /// Rules on what a member sends: its heartbeats carry its one member id (never empty) and
    /// an epoch of -1 or more; its share requests carry the same id.
    fn check_request(&mut self, slot: usize, out: &Outbound) {
        let Some(p) = self.slots[slot].proc.as_ref() else {
            return;
        };
        let Request::Raw { body, .. } = &out.request else {
            return;
        };
        let (id, epoch) = match &**body {
            RequestKind::ShareGroupHeartbeat(r) => (r.member_id.to_string(), Some(r.member_epoch)),
            RequestKind::ShareFetch(r) => (r.member_id.as_deref().unwrap_or("").to_owned(), None),
            RequestKind::ShareAcknowledge(r) => {
                (r.member_id.as_deref().unwrap_or("").to_owned(), None)
            }
            _ => return,
        };
        let name = &p.name;
        if id.is_empty() {
            self.violations
                .push(format!("{name}: {} with an empty member id", summary(out)));
        } else if id != p.member_id || p.consumer.member_id() != p.member_id {
            self.violations.push(format!(
                "{name}: member id changed: {id} (consumer says {}), started as {}",
                p.consumer.member_id(),
                p.member_id
            ));
        }
        if let Some(e) = epoch
            && e < -1
        {
            self.violations
                .push(format!("{name}: ShareGroupHeartbeat with epoch {e}"));
        }
    }

    fn process(&mut self, f: u64) {
        let now = self.now;
        let Some(flight) = self.flights.get(&f) else {
            return;
        };
        let node = flight.node;
        let version = *flight.out.request.versions().end();
        let mut parked = None;
        let body: ResponseKind = match &flight.out.request {
            Request::FindCoordinator { keys, .. } => {
                // FindCoordinator: the group's coordinator, from any broker.
                let c = self.brokers.coordinator;
                let cs = keys
                    .iter()
                    .map(|k| {
                        Coordinator::default()
                            .with_key(StrBytes::from_string(k.clone()))
                            .with_node_id(BrokerId(c))
                            .with_host(host(c))
                            .with_port(port(c))
                    })
                    .collect();
                ResponseKind::FindCoordinator(
                    FindCoordinatorResponse::default()
                        .with_node_id(BrokerId(c))
                        .with_host(host(c))
                        .with_port(port(c))
                        .with_coordinators(cs),
                )
            }
            Request::Metadata { .. } => ResponseKind::Metadata(self.metadata()),
            Request::Raw { body, .. } => match &**body {
                RequestKind::ShareGroupHeartbeat(r) => {
                    let r = r.clone();
                    ResponseKind::ShareGroupHeartbeat(self.brokers.heartbeat(node, &r, now))
                }
                RequestKind::ShareFetch(r) => {
                    let r = r.clone();
                    let (answer, park) = self.brokers.share_fetch(node, &r, now);
                    parked = park;
                    ResponseKind::ShareFetch(answer)
                }
                RequestKind::ShareAcknowledge(r) => {
                    let r = r.clone();
                    ResponseKind::ShareAcknowledge(self.brokers.share_acknowledge(node, &r, now))
                }
                other => {
                    self.violations
                        .push(format!("unexpected request {:?}", summary_kind(other)));
                    return;
                }
            },
            other => {
                self.violations
                    .push(format!("unexpected request {:?}", other.api_key()));
                return;
            }
        };
        self.count(&body);
        let response = Response {
            version,
            body: ResponseBody::Kafka(body),
        };
        let flight = self.flights.get_mut(&f).expect("present");
        flight.answer = Some(response);
        if let Some(session) = parked {
            // DelayedShareFetch: no records now; the fetch waits MaxWaitMs.
            flight.parked = Some(session);
            let wait = match &flight.out.request {
                Request::Raw { body, .. } => match &**body {
                    RequestKind::ShareFetch(r) => {
                        Duration::from_millis(r.max_wait_ms.max(0) as u64)
                    }
                    _ => Duration::ZERO,
                },
                _ => Duration::ZERO,
            };
            self.push(now + wait, Ev::Complete(f));
            return;
        }
        self.answer_at(f);
    }

    /// Schedules the answer (or the reset that loses it) of a processed flight.
    fn answer_at(&mut self, f: u64) {
        let now = self.now;
        let lat = self.latency();
        let Some(flight) = self.flights.get(&f) else {
            return;
        };
        let (slot, inc, conn, fate, extra) = (
            flight.slot,
            flight.incarnation,
            flight.conn,
            flight.fate,
            flight.extra,
        );
        let mut at = now + lat + extra;
        if self.slots[slot].incarnation == inc
            && let Some(p) = self.slots[slot].proc.as_mut()
        {
            let c = p.conns.entry(conn).or_default();
            at = at.max(c.last_answer.unwrap_or(at));
            c.last_answer = Some(at);
        }
        match fate {
            Fate::ResetAfter => self.push(at, Ev::Reset(f)),
            _ => self.push(at, Ev::Deliver(f)),
        }
    }

    fn complete(&mut self, f: u64) {
        let now = self.now;
        let Some(flight) = self.flights.get(&f) else {
            return;
        };
        let (node, session) = (flight.node, flight.parked.unwrap_or(0));
        let Request::Raw { body, .. } = &flight.out.request else {
            return;
        };
        let RequestKind::ShareFetch(r) = &**body else {
            return;
        };
        let r: ShareFetchRequest = r.clone();
        let answer = self.brokers.complete(node, &r, session, now);
        if let Some(flight) = self.flights.get_mut(&f)
            && let Some(resp) = flight.answer.as_mut()
        {
            resp.body = ResponseBody::Kafka(ResponseKind::ShareFetch(answer));
        }
        self.answer_at(f);
    }

    fn deliver(&mut self, f: u64) {
        let Some(flight) = self.flights.remove(&f) else {
            return;
        };
        let answer = flight.answer.expect("processed");
        self.hand(flight.slot, flight.incarnation, flight.id, Ok(answer));
    }

    fn hand(
        &mut self,
        slot: usize,
        inc: u32,
        id: RequestId,
        result: Result<Response, TransportError>,
    ) {
        if self.slots[slot].incarnation != inc {
            return;
        }
        let now = self.now;
        let Some(p) = self.slots[slot].proc.as_mut() else {
            return;
        };
        let name = p.name.clone();
        self.log(|| match &result {
            Ok(r) => format!("{name}: <- {id} {}", answer_summary(&r.body)),
            Err(e) => format!("{name}: <- {id} failed: {e}"),
        });
        let p = self.slots[slot].proc.as_mut().expect("checked");
        p.consumer.handle_response(id, result, now);
        self.pump(slot);
    }

    /// The connection of flight `f` resets: every request on it not answered yet fails
    /// (Disconnected); those the broker had not read are never processed. The process's next
    /// request to that target opens a new connection.
    fn reset(&mut self, f: u64) {
        let Some(flight) = self.flights.get(&f) else {
            return;
        };
        let (slot, inc, conn, generation) = (
            flight.slot,
            flight.incarnation,
            flight.conn,
            flight.generation,
        );
        let victims: Vec<u64> = (self.flights.iter())
            .filter(|(_, x)| {
                x.slot == slot
                    && x.incarnation == inc
                    && x.conn == conn
                    && x.generation == generation
            })
            .map(|(k, _)| *k)
            .collect();
        if self.slots[slot].incarnation == inc
            && let Some(p) = self.slots[slot].proc.as_mut()
        {
            let c = p.conns.entry(conn).or_default();
            if c.generation == generation {
                c.generation += 1;
                c.last_process = None;
                c.last_answer = None;
            }
        }
        for v in victims {
            let Some(x) = self.flights.remove(&v) else {
                continue;
            };
            let error = TransportError::Disconnected {
                addr: format!("{}:{}", host(x.node), port(x.node)),
                reason: "connection reset (simulated)".into(),
            };
            self.hand(x.slot, x.incarnation, x.id, Err(error));
        }
    }

    fn count(&mut self, body: &ResponseKind) {
        let mut seen: Vec<(&'static str, i16)> = Vec::new();
        match body {
            ResponseKind::ShareGroupHeartbeat(r) => {
                seen.push(("ShareGroupHeartbeat", r.error_code))
            }
            ResponseKind::ShareFetch(r) => {
                seen.push(("ShareFetch", r.error_code));
                for p in r.responses.iter().flat_map(|t| &t.partitions) {
                    if p.error_code != 0 {
                        seen.push(("ShareFetch/partition", p.error_code));
                    }
                    if p.acknowledge_error_code != 0 {
                        seen.push(("ShareFetch/ack", p.acknowledge_error_code));
                    }
                }
            }
            ResponseKind::ShareAcknowledge(r) => {
                seen.push(("ShareAcknowledge", r.error_code));
                for p in r.responses.iter().flat_map(|t| &t.partitions) {
                    if p.error_code != 0 {
                        seen.push(("ShareAcknowledge/partition", p.error_code));
                    }
                }
            }
            _ => {}
        }
        for k in seen {
            *self.answered.entry(k).or_default() += 1;
        }
    }

    fn metadata(&self) -> MetadataResponse {
        let b = &self.brokers;
        let brokers = (b.nodes.iter())
            .map(|n| {
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(*n))
                    .with_host(host(*n))
                    .with_port(port(*n))
            })
            .collect();
        let partitions = (0..b.leaders.len())
            .map(|p| {
                MetadataResponsePartition::default()
                    .with_partition_index(p as i32)
                    .with_leader_id(BrokerId(b.leaders[p]))
                    .with_leader_epoch(b.leader_epochs[p])
            })
            .collect();
        let topic = MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(b.topic.clone()))))
            .with_topic_id(b.topic_id)
            .with_partitions(partitions);
        MetadataResponse::default()
            .with_brokers(brokers)
            .with_topics(vec![topic])
    }

    // ------------------------------------------------------------------ the end

    /// The end-state rules, once every record is terminal: each record ACCEPTed at most once,
    /// each ACCEPTed record handed to an application. Returns (accepted, archived) counts.
    pub fn check_end(&mut self) -> (usize, usize) {
        let mut accepted = 0;
        let mut archived = 0;
        let mut not_terminal = 0;
        let mut open = None;
        let mut problems = Vec::new();
        for (p, records) in self.brokers.records.iter().enumerate() {
            for (o, r) in records.iter().enumerate() {
                if r.accepts > 1 {
                    problems.push(format!("t-{p}@{o} ACCEPTed {} times", r.accepts));
                }
                match r.state {
                    RecordState::Acknowledged => {
                        accepted += 1;
                        if r.accepts != 1 {
                            problems.push(format!("t-{p}@{o} acknowledged without one ACCEPT"));
                        }
                        if !self.seen.contains(&(p as i32, o as i64)) {
                            problems.push(format!(
                                "t-{p}@{o} ACCEPTed but never handed to an application"
                            ));
                        }
                    }
                    RecordState::Archived => archived += 1,
                    _ => {
                        if open.is_none() {
                            open = Some(format!("t-{p}@{o} {:?}", r.state));
                        }
                        not_terminal += 1;
                    }
                }
            }
        }
        if let Some(first) = open {
            problems.push(format!(
                "{not_terminal} records not terminal at the end (first: {first})"
            ));
        }
        self.violations.extend(problems);
        (accepted, archived)
    }

    /// Lock expiry at the current instant (the leaders evaluate it lazily).
    pub fn expire_locks(&mut self) {
        let now = self.now;
        self.brokers.expire_locks(now);
    }
}

fn host(node: i32) -> StrBytes {
    StrBytes::from_string(format!("b{node}"))
}

fn port(node: i32) -> i32 {
    9090 + node
}

fn summary(out: &Outbound) -> String {
    match &out.request {
        Request::Raw { body, .. } => summary_kind(body),
        other => format!("{:?}", other.api_key()),
    }
}

/// The acknowledgement batches of a ShareFetch's or ShareAcknowledge's `topics`, as text.
macro_rules! acks_text {
    ($topics:expr) => {{
        let acks: Vec<String> = ($topics.iter())
            .flat_map(|t| &t.partitions)
            .flat_map(|p| {
                (p.acknowledgement_batches.iter()).map(move |b| {
                    format!(
                        "{}:{}..={}={:?}",
                        p.partition_index, b.first_offset, b.last_offset, b.acknowledge_types
                    )
                })
            })
            .collect();
        acks.join(" ")
    }};
}

fn summary_kind(body: &RequestKind) -> String {
    match body {
        RequestKind::ShareGroupHeartbeat(r) => format!(
            "ShareGroupHeartbeat epoch {} topics {:?}",
            r.member_epoch,
            r.subscribed_topic_names.as_ref().map(|t| t.len())
        ),
        RequestKind::ShareFetch(r) => {
            let acks = acks_text!(r.topics);
            let parts: Vec<i32> = (r.topics.iter())
                .flat_map(|t| &t.partitions)
                .map(|p| p.partition_index)
                .collect();
            let forgotten: Vec<i32> = (r.forgotten_topics_data.iter())
                .flat_map(|t| t.partitions.iter().copied())
                .collect();
            format!(
                "ShareFetch epoch {} partitions {parts:?} forgotten {forgotten:?} acks [{}]",
                r.share_session_epoch, acks
            )
        }
        RequestKind::ShareAcknowledge(r) => {
            let acks = acks_text!(r.topics);
            format!(
                "ShareAcknowledge epoch {} acks [{}]",
                r.share_session_epoch, acks
            )
        }
        _ => "other".into(),
    }
}

fn answer_summary(body: &ResponseBody) -> String {
    match body.kafka() {
        Some(ResponseKind::ShareGroupHeartbeat(r)) => format!(
            "ShareGroupHeartbeat error {} epoch {} assignment {:?}",
            r.error_code,
            r.member_epoch,
            (r.assignment.as_ref()).map(|a| a
                .topic_partitions
                .iter()
                .flat_map(|t| t.partitions.clone())
                .collect::<Vec<_>>())
        ),
        Some(ResponseKind::ShareFetch(r)) => {
            let parts: Vec<String> = (r.responses.iter())
                .flat_map(|t| &t.partitions)
                .map(|p| {
                    let acq: Vec<String> = (p.acquired_records.iter())
                        .map(|a| {
                            format!(
                                "{}..={}(d{})",
                                a.first_offset, a.last_offset, a.delivery_count
                            )
                        })
                        .collect();
                    format!(
                        "{}: err {} ack {} [{}]",
                        p.partition_index,
                        p.error_code,
                        p.acknowledge_error_code,
                        acq.join(",")
                    )
                })
                .collect();
            format!("ShareFetch error {} {{{}}}", r.error_code, parts.join("; "))
        }
        Some(ResponseKind::ShareAcknowledge(r)) => {
            let parts: Vec<String> = (r.responses.iter())
                .flat_map(|t| &t.partitions)
                .map(|p| format!("{}: err {}", p.partition_index, p.error_code))
                .collect();
            format!(
                "ShareAcknowledge error {} {{{}}}",
                r.error_code,
                parts.join("; ")
            )
        }
        Some(ResponseKind::FindCoordinator(r)) => format!(
            "FindCoordinator {:?}",
            r.coordinators
                .iter()
                .map(|c| c.node_id.0)
                .collect::<Vec<_>>()
        ),
        Some(ResponseKind::Metadata(_)) => "Metadata".into(),
        _ => "other".into(),
    }
}
