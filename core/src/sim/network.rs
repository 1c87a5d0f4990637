//! Client connections as a Kafka broker sees them.
//!
//! What the model keeps from a real broker (Apache Kafka 4.x `SocketServer.Processor`, the
//! `Selector` / `KafkaChannel` of kafka-clients it runs on, and the request handlers):
//! - per connection, bytes arrive in order; the broker reads one request, mutes the connection
//!   (`Processor.processCompletedReceives`: `selector.mute` on every completed receive), and
//!   unmutes it only once the answer went out (`Processor.processCompletedSends`:
//!   `tryUnmuteChannel`), so at most one request per connection is with the handlers;
//! - requests of different connections are handled in any order once read (several network
//!   threads, several request handler threads, `num.network.threads` / `num.io.threads`): a read
//!   request reaches its handler after a seeded delay of up to [`NetConfig::reorder_window`];
//!   the coordinator then works through one queue in that order (group APIs), while
//!   FindCoordinator / Metadata are answered by the request handlers directly (at once, or one
//!   per [`Network::set_broker_service_time`]);
//! - a coordinator stall holds up the queue (reading goes on);
//! - a connection the client closed: the request with the handlers is still processed (the
//!   handlers never look at the socket); its answer is written into the dead socket. The write
//!   fails when the client's side already reset the connection (`Selector.pollSelectionKeys`
//!   closes the channel on the write error, `CloseMode.NOTIFY_ONLY`, and what was not read is
//!   discarded); otherwise it goes out (`Processor.processCompletedSends` unmutes the channel)
//!   and the client's kernel answers those bytes with a reset, so the broker reads at most one
//!   more request, whose answer write fails, and the rest is discarded. The client's side resets
//!   at once when an answer was still on its way to it when it closed (bytes reaching a closed
//!   socket), and after the first answer written into it;
//! - an answer is never lost nor delivered twice on a live connection (TCP): a fault resets the
//!   connection instead ([`NetConfig::reset_before_answer`], [`NetConfig::reset_after_answer`],
//!   [`Network::reset`]): the broker reads nothing more from it, and the client sees the
//!   connection fail after the answers already on their way ([`Arrival::Closed`]), so every
//!   request in flight on it fails;
//! - throttling (KIP-219, `RequestHandlerHelper.sendMaybeThrottle`): the answer is sent at once
//!   carrying `throttle_time_ms` (at the versions that have the field), and the broker mutes the
//!   connection for that time (`ClientQuotaManager.throttle`, `KafkaChannel` state
//!   `MUTED_AND_THROTTLED`): the next request on it is read once the throttle ended
//!   ([`NetConfig::throttle`]);
//! - the broker closes idle connections (`Selector.maybeCloseOldestConnection`,
//!   `connections.max.idle.ms`, [`NetConfig::max_idle`]);
//! - answers travel back in order, after a seeded delay; a fault may slow an answer.
//!
//! [`World`](super::world::World) lets time decide what happens next. A caller that explores
//! every order instead (`tests/model_check.rs`) makes each choice through the same rules:
//! [`Network::take_coordinator_work`] / [`Network::take_coordinator_head`] (the coordinator
//! processes, or its runtime fails, the head of its queue), [`Network::take_answer`] (the next
//! answer on a connection arrives), [`Network::abort`] (the connection is reset),
//! [`Network::close`] (the client drops a connection); [`Network::connections`],
//! [`Network::coordinator_queue`] and [`Network::in_transit`] show the state.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, ResponseKind};

use crate::request::{Api, RequestBody, ResponseBody};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::ConnId;
use super::coordinator::SimCoordinator;

/// The broker's default `connections.max.idle.ms`.
pub const DEFAULT_MAX_IDLE: Duration = Duration::from_secs(600);

/// Delays and fault rates of a [`Network`].
#[derive(Debug, Clone)]
pub struct NetConfig {
    /// Shortest one-way delay of a frame.
    pub latency_min: Duration,
    /// Longest one-way delay of a frame.
    pub latency_max: Duration,
    /// Time the coordinator spends on one group request; the queue drains one request per
    /// `service_time`.
    pub service_time: Duration,
    /// Probability that the connection is reset as the broker writes an answer: the request was
    /// processed, its answer never arrives, the client sees the connection fail.
    pub reset_before_answer: f64,
    /// Probability that the connection is reset right after an answer: the answer arrives, then
    /// the client sees the connection fail (the requests it pipelined behind are never read).
    pub reset_after_answer: f64,
    /// Probability that an answer is delayed by an extra `slow_extra`.
    pub slow_answer: f64,
    /// The extra delay of a slow answer.
    pub slow_extra: Duration,
    /// Probability that an answer is throttled (KIP-219): it carries a throttle time of up to
    /// `throttle_max` and the broker reads nothing more on its connection until that time passed.
    pub throttle: f64,
    /// The longest throttle time.
    pub throttle_max: Duration,
    /// Requests of different connections read within this window of each other may reach the
    /// handlers in any order (network and handler threads); zero keeps the read order.
    pub reorder_window: Duration,
    /// `connections.max.idle.ms`: the broker closes a connection it read nothing from and wrote
    /// nothing to for this long (`None`: never). A throttled connection is not expired before
    /// its throttle ends (keep `throttle_max` below this).
    pub max_idle: Option<Duration>,
}

impl Default for NetConfig {
    fn default() -> Self {
        Self {
            latency_min: Duration::from_millis(1),
            latency_max: Duration::from_millis(3),
            service_time: Duration::from_millis(1),
            reset_before_answer: 0.0,
            reset_after_answer: 0.0,
            slow_answer: 0.0,
            slow_extra: Duration::from_secs(2),
            throttle: 0.0,
            throttle_max: Duration::from_secs(1),
            reorder_window: Duration::ZERO,
            max_idle: Some(DEFAULT_MAX_IDLE),
        }
    }
}

/// Which client connection a frame uses: the transport keeps one per target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConnKind {
    /// Any broker, for FindCoordinator and Metadata.
    Bootstrap,
    /// The group coordinator's dedicated connection.
    Coordinator,
}

/// A request as the broker decoded it.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// The correlation id.
    pub correlation: i32,
    /// The API.
    pub api: Api,
    /// The version it was sent at.
    pub version: i16,
    /// The client id from the request header.
    pub client_id: String,
    /// The body.
    pub body: RequestBody,
}

/// An answer on its way to a client.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// The connection.
    pub conn: ConnId,
    /// The client owning the connection.
    pub client: usize,
    /// The correlation id it answers.
    pub correlation: i32,
    /// The API.
    pub api: Api,
    /// The version.
    pub version: i16,
    /// The answer.
    pub body: ResponseBody,
    /// The throttle time the answer carries (zero when the version has no such field).
    pub throttle: Duration,
    /// Whether a client must hold back its next request on the connection for `throttle`
    /// (`AbstractResponse.shouldClientThrottle` of the answer's version; the Java
    /// `NetworkClient.maybeThrottle` honours it).
    pub client_throttles: bool,
}

/// Why a connection closed under a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseCause {
    /// A connection reset (a fault).
    Reset,
    /// The broker closed it after `connections.max.idle.ms` without traffic.
    Idle,
}

impl CloseCause {
    /// For traces and transport errors.
    pub fn as_str(self) -> &'static str {
        match self {
            CloseCause::Reset => "connection reset",
            CloseCause::Idle => "closed by the broker: idle (connections.max.idle.ms)",
        }
    }
}

/// What reaches a client.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // nearly every arrival is an answer: boxing buys nothing
pub enum Arrival {
    /// An answer.
    Answer(Delivery),
    /// The connection failed under the client (after every answer sent before): the client
    /// fails every request in flight on it.
    Closed {
        /// The connection.
        conn: ConnId,
        /// The client owning it.
        client: usize,
        /// Why.
        cause: CloseCause,
    },
}

/// What became of an answer the coordinator produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerFate {
    /// The client had closed the connection and its side had not reset yet: the bytes went
    /// into the dead socket (its kernel resets the connection), and the broker reads the next
    /// request, if one is buffered.
    WrittenToClosed,
    /// The client had closed the connection and its side reset it: the write failed, the broker
    /// closed the connection and discarded this many unread requests.
    WriteFailed {
        /// Requests never read.
        discarded: usize,
    },
    /// The broker had closed the connection already (idle, reset): the answer is dropped.
    BrokerClosed,
    /// The connection was reset as the answer was written (a fault): lost, and the client sees
    /// the connection fail.
    ResetBefore,
    /// On its way.
    Sent {
        /// The throttle time: the broker reads nothing more on the connection until it passed.
        throttle: Duration,
        /// The connection is reset right after the answer (a fault).
        reset_after: bool,
    },
    /// The connection is unknown.
    UnknownConnection,
}

impl AnswerFate {
    /// Whether the answer is on its way to the client.
    pub fn sent(self) -> bool {
        matches!(self, AnswerFate::Sent { .. })
    }
}

#[derive(Debug)]
struct Conn {
    client: usize,
    kind: ConnKind,
    /// The client still has it open.
    open: bool,
    /// The broker still reads it (false once the broker closed it or discarded it).
    reading: bool,
    /// The client closed it and its side reset the connection: the broker's next write fails.
    peer_reset: bool,
    /// Expired as idle while a request was with the handlers: closed when its answer is written
    /// (`Selector.close` keeps a muted channel as closing; the send on it fails).
    expiring: bool,
    /// Delivered but not read (the connection is muted while a request is in flight).
    inbox: VecDeque<Frame>,
    /// Frames on the wire towards the broker.
    on_wire: usize,
    /// Read, not answered yet: (correlation, api, version).
    in_flight: Option<(i32, Api, i16)>,
    /// Muted by a throttle until then (KIP-219).
    throttled_until: Option<Instant>,
    /// Last read or write by the broker (the `Selector`'s idle expiry).
    last_active: Instant,
    /// The connection's entry in `Network::timers`.
    timer: Option<Instant>,
    last_up: Instant,
    last_down: Instant,
}

impl Conn {
    fn muted(&self, now: Instant) -> bool {
        self.in_flight.is_some() || self.throttled_until.is_some_and(|t| t > now)
    }
}

/// A request the broker read, waiting to be processed.
#[derive(Debug, Clone)]
pub struct Queued {
    /// When it was read.
    pub read_at: Instant,
    /// When it reaches its handler (`read_at`, plus up to [`NetConfig::reorder_window`]).
    pub ready_at: Instant,
    /// The connection it came on.
    pub conn: ConnId,
    /// The request.
    pub frame: Frame,
}

impl Queued {
    /// The broker hands the request to its handler (the simulated coordinator answers the
    /// broker-level APIs too) at `now`; the answers come out of
    /// [`SimCoordinator::poll_response`].
    pub fn process(self, coordinator: &mut SimCoordinator, now: Instant) {
        coordinator.handle_request(
            self.conn,
            self.frame.correlation,
            &self.frame.client_id,
            self.frame.version,
            self.frame.body,
            now,
        );
    }

    /// The coordinator runtime fails the request with `code` without processing it
    /// ([`SimCoordinator::fail_request`]).
    pub fn fail(&self, coordinator: &mut SimCoordinator, code: i16) {
        coordinator.fail_request(
            self.conn,
            self.frame.correlation,
            self.frame.version,
            &self.frame.body,
            code,
        );
    }
}

/// A connection as [`Network::connections`] shows it.
#[derive(Debug, Clone, Copy)]
pub struct ConnView<'a> {
    /// The connection.
    pub id: ConnId,
    /// The client owning it.
    pub client: usize,
    /// What the client uses it for.
    pub kind: ConnKind,
    /// Whether the client still has it open.
    pub open: bool,
    /// Whether the broker still reads it.
    pub broker_open: bool,
    /// Requests delivered but not read yet (the connection is muted while one is in flight).
    pub unread: &'a VecDeque<Frame>,
    /// The correlation id of the request read and not answered yet.
    pub in_flight: Option<i32>,
}

/// Something that happened on the network (for the trace).
#[derive(Debug, Clone, PartialEq)]
pub enum NetEvent {
    /// A request's bytes arrived in the connection's receive buffer.
    Delivered {
        /// The connection.
        conn: ConnId,
        /// The correlation id.
        correlation: i32,
        /// Whether the connection is muted (a request in flight, or throttled), so it stays
        /// unread.
        unread: bool,
    },
    /// The broker read a request and queued it.
    Read {
        /// The connection.
        conn: ConnId,
        /// The correlation id.
        correlation: i32,
        /// Position in the coordinator queue (0 for the broker's own queue).
        position: usize,
        /// How many requests read before it (on other connections) it overtook on its way to the
        /// handlers.
        overtook: usize,
    },
    /// A request the broker will never read: its connection was closed.
    Discarded {
        /// The connection.
        conn: ConnId,
        /// The correlation id.
        correlation: i32,
    },
    /// The broker closed a connection (idle) or saw it reset; the client learns it after the
    /// answers already on their way.
    BrokerClosed {
        /// The connection.
        conn: ConnId,
        /// Why.
        cause: CloseCause,
    },
}

/// The network between clients and the broker (see the module docs).
#[derive(Debug)]
pub struct Network {
    config: NetConfig,
    conns: BTreeMap<ConnId, Conn>,
    next_conn: u64,
    seq: u64,
    up: BTreeMap<(Instant, u64), (ConnId, Frame)>,
    down: BTreeMap<(Instant, u64), Arrival>,
    broker_queue: VecDeque<Queued>,
    coordinator_queue: VecDeque<Queued>,
    stalled_until: Option<Instant>,
    busy_until: Option<Instant>,
    /// Time the broker's request handlers spend on one FindCoordinator / Metadata request
    /// (zero unless [`Network::set_broker_service_time`] changed it).
    broker_service_time: Duration,
    broker_busy_until: Option<Instant>,
    /// Per connection, its next throttle end (with a request waiting) or idle expiry.
    timers: BTreeSet<(Instant, ConnId)>,
    events: Vec<NetEvent>,
}

impl Network {
    /// A network without connections.
    pub fn new(config: NetConfig) -> Self {
        Self {
            config,
            conns: BTreeMap::new(),
            next_conn: 0,
            seq: 0,
            up: BTreeMap::new(),
            down: BTreeMap::new(),
            broker_queue: VecDeque::new(),
            coordinator_queue: VecDeque::new(),
            stalled_until: None,
            busy_until: None,
            broker_service_time: Duration::ZERO,
            broker_busy_until: None,
            timers: BTreeSet::new(),
            events: Vec::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &NetConfig {
        &self.config
    }

    /// Changes delays and fault rates from now on.
    pub fn set_config(&mut self, config: NetConfig) {
        let idle_changed = config.max_idle != self.config.max_idle;
        self.config = config;
        if idle_changed {
            let ids: Vec<ConnId> = self.timers.iter().map(|(_, c)| *c).collect();
            for id in ids {
                self.retime(id);
            }
            let fresh: Vec<ConnId> = self
                .conns
                .iter()
                .filter(|(_, c)| c.reading && c.timer.is_none())
                .map(|(id, _)| *id)
                .collect();
            for id in fresh {
                self.retime(id);
            }
        }
    }

    /// The time the broker's request handlers spend on each request they serve themselves
    /// (FindCoordinator, Metadata): they work through their queue one request per `d`, as the
    /// coordinator does with [`NetConfig::service_time`]. Zero (the default) answers them as
    /// soon as they are read. A real broker spends time in proportion to what it answers (a
    /// Metadata answer for a topic of thousands of partitions): with many clients starting at
    /// once, this paces the answers as the broker's handler threads would.
    pub fn set_broker_service_time(&mut self, d: Duration) {
        self.broker_service_time = d;
    }

    /// See [`Network::set_broker_service_time`].
    pub fn broker_service_time(&self) -> Duration {
        self.broker_service_time
    }

    /// Opens a connection for `client`.
    pub fn open(&mut self, client: usize, kind: ConnKind, now: Instant) -> ConnId {
        self.next_conn += 1;
        let id = ConnId(self.next_conn);
        self.conns.insert(
            id,
            Conn {
                client,
                kind,
                open: true,
                reading: true,
                peer_reset: false,
                expiring: false,
                inbox: VecDeque::new(),
                on_wire: 0,
                in_flight: None,
                throttled_until: None,
                last_active: now,
                timer: None,
                last_up: now,
                last_down: now,
            },
        );
        self.retime(id);
        id
    }

    /// Whether the client still has `conn` open.
    pub fn is_open(&self, conn: ConnId) -> bool {
        self.conns.get(&conn).is_some_and(|c| c.open)
    }

    /// The client owning `conn`.
    pub fn client(&self, conn: ConnId) -> Option<usize> {
        self.conns.get(&conn).map(|c| c.client)
    }

    /// The kind of `conn`.
    pub fn kind(&self, conn: ConnId) -> Option<ConnKind> {
        self.conns.get(&conn).map(|c| c.kind)
    }

    /// The client closes `conn`: answers on their way are dropped (and, reaching a closed
    /// socket, make the client's side reset the connection); what the client already sent is
    /// delivered, and the broker processes the request it has, plus at most one more (see the
    /// module docs).
    pub fn close(&mut self, conn: ConnId) {
        let mut had_answers = false;
        self.down.retain(|_, a| match a {
            Arrival::Answer(d) if d.conn == conn => {
                had_answers = true;
                false
            }
            Arrival::Closed { conn: c, .. } => *c != conn,
            Arrival::Answer(_) => true,
        });
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.open = false;
        if had_answers {
            c.peer_reset = true;
        }
        self.maybe_eof(conn);
        self.retime(conn);
    }

    /// A client-closed connection with nothing left to read: the broker reads the end of the
    /// stream and closes it (`Selector.pollSelectionKeys`, EOF: `close(channel, GRACEFUL)` with
    /// no receive pending).
    fn maybe_eof(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn)
            && !c.open
            && c.reading
            && c.in_flight.is_none()
            && c.inbox.is_empty()
            && c.on_wire == 0
        {
            c.reading = false;
        }
    }

    /// The broker stops reading `conn` and discards what it did not read (the request with the
    /// handlers, if any, is still processed; its answer is dropped).
    fn stop_reading(&mut self, conn: ConnId) -> usize {
        let Some(c) = self.conns.get_mut(&conn) else {
            return 0;
        };
        c.reading = false;
        let unread = std::mem::take(&mut c.inbox);
        let n = unread.len();
        for f in unread {
            self.events.push(NetEvent::Discarded {
                conn,
                correlation: f.correlation,
            });
        }
        self.retime(conn);
        n
    }

    /// The broker's side closes `conn` (idle) or sees it reset: it reads nothing more from it,
    /// and the client sees it fail at `at` (after the answers already on their way).
    fn broker_close(&mut self, conn: ConnId, at: Instant, cause: CloseCause) {
        self.stop_reading(conn);
        self.events.push(NetEvent::BrokerClosed { conn, cause });
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if !c.open {
            return;
        }
        let at = at.max(c.last_down);
        c.last_down = at;
        let client = c.client;
        self.seq += 1;
        self.down.insert(
            (at, self.seq),
            Arrival::Closed {
                conn,
                client,
                cause,
            },
        );
    }

    /// A connection reset on `conn` at `now` (a fault; the broker's `Processor.close` of a
    /// connection reads the same): the broker reads nothing more from it (the request with the
    /// handlers is still processed, its answer dropped), and the client sees the connection
    /// fail one delay later, after the answers already on their way. False when the client had
    /// closed it already.
    pub fn reset(&mut self, conn: ConnId, now: Instant, rng: &mut ChaCha8Rng) -> bool {
        if !self.is_open(conn) {
            return false;
        }
        let at = now + self.delay(rng);
        self.broker_close(conn, at, CloseCause::Reset);
        true
    }

    /// A connection reset on `conn` that both sides see at once (for a caller that fails the
    /// client's requests itself, e.g. a model checker): the answers on their way are lost, the
    /// broker reads nothing more from it, and the client's side is closed.
    pub fn abort(&mut self, conn: ConnId) {
        self.down.retain(|_, a| match a {
            Arrival::Answer(d) => d.conn != conn,
            Arrival::Closed { conn: c, .. } => *c != conn,
        });
        self.stop_reading(conn);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.open = false;
        }
    }

    fn delay(&self, rng: &mut ChaCha8Rng) -> Duration {
        let lo = self.config.latency_min;
        let hi = self.config.latency_max.max(lo);
        let span = (hi - lo).as_micros() as u64;
        lo + Duration::from_micros(if span == 0 {
            0
        } else {
            rng.random_range(0..=span)
        })
    }

    /// The client writes `frame` on `conn` at `now`; it arrives after a delay, in order (and is
    /// discarded on arrival when the broker no longer reads the connection).
    pub fn send(&mut self, conn: ConnId, frame: Frame, now: Instant, rng: &mut ChaCha8Rng) {
        let delay = self.delay(rng);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let at = (now + delay).max(c.last_up);
        c.last_up = at;
        c.on_wire += 1;
        self.seq += 1;
        self.up.insert((at, self.seq), (conn, frame));
    }

    /// The coordinator stops processing until `until` (extends a stall under way).
    pub fn stall(&mut self, until: Instant) {
        self.stalled_until = Some(self.stalled_until.map_or(until, |s| s.max(until)));
    }

    /// Whether the coordinator is stalled at `now`.
    pub fn stalled(&self, now: Instant) -> bool {
        self.stalled_until.is_some_and(|s| s > now)
    }

    /// When the current stall ends.
    pub fn stalled_until(&self) -> Option<Instant> {
        self.stalled_until
    }

    /// Network events since the last call.
    pub fn take_events(&mut self) -> Vec<NetEvent> {
        std::mem::take(&mut self.events)
    }

    /// When the next frame reaches the broker.
    pub fn next_up(&self) -> Option<Instant> {
        self.up.keys().next().map(|(t, _)| *t)
    }

    /// Delivers the next frame due at `now` into its connection's buffer, and reads it if the
    /// connection is not muted.
    pub fn deliver_up(&mut self, now: Instant, rng: &mut ChaCha8Rng) -> Option<(ConnId, i32)> {
        let key = *self.up.keys().next().filter(|(t, _)| *t <= now)?;
        let (conn, frame) = self.up.remove(&key).expect("key exists");
        let correlation = frame.correlation;
        let c = self.conns.get_mut(&conn)?;
        c.on_wire -= 1;
        if !c.reading {
            self.events.push(NetEvent::Discarded { conn, correlation });
            return Some((conn, correlation));
        }
        let unread = c.muted(now);
        self.events.push(NetEvent::Delivered {
            conn,
            correlation,
            unread,
        });
        c.inbox.push_back(frame);
        self.try_read(conn, now, rng);
        self.retime(conn);
        Some((conn, correlation))
    }

    /// Reads the next request of `conn` if it is not muted.
    fn try_read(&mut self, conn: ConnId, now: Instant, rng: &mut ChaCha8Rng) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if !c.reading || c.muted(now) {
            return;
        }
        let Some(frame) = c.inbox.pop_front() else {
            return;
        };
        if c.inbox.is_empty() {
            // Give the buffer back: most connections never have more than one request.
            c.inbox = VecDeque::new();
        }
        self.read(conn, frame, now, rng);
    }

    /// The broker reads `frame` from `conn` (not muted): the connection is muted until the
    /// answer goes out (`Processor.processCompletedReceives`), the request queued for its
    /// handler, which it reaches after up to the reorder window (network and handler threads).
    fn read(&mut self, conn: ConnId, frame: Frame, now: Instant, rng: &mut ChaCha8Rng) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.in_flight = Some((frame.correlation, frame.api, frame.version));
        c.last_active = now;
        let correlation = frame.correlation;
        let group = SimCoordinator::is_group_api(frame.api);
        let window = self.config.reorder_window.as_micros() as u64;
        let ready_at = if window == 0 {
            now
        } else {
            now + Duration::from_micros(rng.random_range(0..=window))
        };
        let queued = Queued {
            read_at: now,
            ready_at,
            conn,
            frame,
        };
        let queue = if group {
            &mut self.coordinator_queue
        } else {
            &mut self.broker_queue
        };
        // Behind every request that reaches the handlers no later than this one.
        let at = queue.partition_point(|q| q.ready_at <= ready_at);
        let overtook = queue.len() - at;
        queue.insert(at, queued);
        let position = if group { at + 1 } else { 0 };
        self.events.push(NetEvent::Read {
            conn,
            correlation,
            position,
            overtook,
        });
    }

    /// When the broker's request handlers have work (FindCoordinator, Metadata): the head of
    /// their queue, once they are done with the previous request.
    pub fn next_broker_work(&self) -> Option<Instant> {
        let head = self.broker_queue.front()?.ready_at;
        Some(self.broker_busy_until.map_or(head, |b| head.max(b)))
    }

    /// The next request for the broker's own handlers, taken at `now` (they are busy with it for
    /// the broker service time).
    pub fn take_broker_work(&mut self, now: Instant) -> Option<Queued> {
        if self.broker_queue.front()?.ready_at > now {
            return None;
        }
        if !self.broker_service_time.is_zero() {
            self.broker_busy_until = Some(now + self.broker_service_time);
        }
        let q = self.broker_queue.pop_front();
        release_if_drained(&mut self.broker_queue);
        q
    }

    /// When the head of the broker's own queue reaches the handlers.
    pub fn broker_queue_head(&self) -> Option<Instant> {
        self.broker_queue.front().map(|q| q.ready_at)
    }

    /// When the coordinator can process its next queued request (after stalls and service time).
    pub fn next_coordinator_work(&self) -> Option<Instant> {
        let head = self.coordinator_queue.front()?.ready_at;
        let mut at = head;
        if let Some(b) = self.busy_until {
            at = at.max(b);
        }
        if let Some(s) = self.stalled_until {
            at = at.max(s);
        }
        Some(at)
    }

    /// The queued group requests, in the order the coordinator takes them.
    pub fn coordinator_queue(&self) -> impl Iterator<Item = &Queued> {
        self.coordinator_queue.iter()
    }

    /// Takes the next group request for the coordinator, if one may be processed at `now`.
    pub fn take_coordinator_work(&mut self, now: Instant) -> Option<Queued> {
        if self.next_coordinator_work()? > now {
            return None;
        }
        self.busy_until = Some(now + self.config.service_time);
        let q = self.coordinator_queue.pop_front();
        release_if_drained(&mut self.coordinator_queue);
        q
    }

    /// Takes the head of the coordinator queue regardless of stalls (for scripted failures).
    pub fn take_coordinator_head(&mut self) -> Option<Queued> {
        let q = self.coordinator_queue.pop_front();
        release_if_drained(&mut self.coordinator_queue);
        q
    }

    /// The broker writes an answer on `conn` at `now` (`Processor.sendResponse`): the
    /// connection is unmuted, unless throttled (and its next request read); what becomes of the
    /// answer follows the module docs.
    pub fn answer(
        &mut self,
        conn: ConnId,
        correlation: i32,
        version: i16,
        mut body: ResponseBody,
        now: Instant,
        rng: &mut ChaCha8Rng,
    ) -> AnswerFate {
        let delay = self.delay(rng);
        let (reset_before, reset_after, slow, throttled) = (
            rng.random_bool(self.config.reset_before_answer.clamp(0.0, 1.0)),
            rng.random_bool(self.config.reset_after_answer.clamp(0.0, 1.0)),
            rng.random_bool(self.config.slow_answer.clamp(0.0, 1.0)),
            rng.random_bool(self.config.throttle.clamp(0.0, 1.0)),
        );
        let throttle = if throttled {
            let max = self.config.throttle_max.as_millis().max(1) as u64;
            Duration::from_millis(rng.random_range(1..=max))
        } else {
            Duration::ZERO
        };
        let extra = if slow {
            self.config.slow_extra
        } else {
            Duration::ZERO
        };
        let Some(c) = self.conns.get_mut(&conn) else {
            return AnswerFate::UnknownConnection;
        };
        let api = match c.in_flight {
            Some((corr, api, _)) if corr == correlation => {
                c.in_flight = None;
                api
            }
            // An answer to a request that is not the one in flight (e.g. an answer for a parked
            // request whose connection was since reused): keep the connection muted as it is.
            _ => api_of(&body),
        };
        c.last_active = now;
        let fate = if !c.reading {
            // Processor.sendResponse: no open channel any more (closed idle, or reset): dropped.
            AnswerFate::BrokerClosed
        } else if c.expiring {
            // Selector.send on a closing channel (expired idle while muted): the send fails and
            // the channel is closed (Selector.clear), what was not read discarded.
            let at = now + delay;
            self.broker_close(conn, at, CloseCause::Idle);
            AnswerFate::BrokerClosed
        } else if !c.open {
            if c.peer_reset {
                // The write meets the client's reset: Selector.pollSelectionKeys closes the
                // channel (CloseMode.NOTIFY_ONLY), the unread requests are discarded.
                let discarded = self.stop_reading(conn);
                AnswerFate::WriteFailed { discarded }
            } else {
                // Written into the dead socket: Processor.processCompletedSends unmutes the
                // channel; the client's kernel answers the bytes with a reset, which fails the
                // next write.
                c.peer_reset = true;
                self.try_read(conn, now, rng);
                self.maybe_eof(conn);
                AnswerFate::WrittenToClosed
            }
        } else if reset_before {
            self.broker_close(conn, now + delay, CloseCause::Reset);
            AnswerFate::ResetBefore
        } else {
            // RequestHandlerHelper.sendMaybeThrottle: the throttle time goes into the answer
            // (AbstractResponse.maybeSetThrottleTimeMs; only versions with the field carry it)
            // and ClientQuotaManager.throttle mutes the channel for that time.
            let carried = set_throttle_time(&mut body, version, throttle);
            if !throttle.is_zero() {
                c.throttled_until = Some(now + throttle);
            }
            let at = (now + delay + extra).max(c.last_down);
            c.last_down = at;
            let delivery = Delivery {
                conn,
                client: c.client,
                correlation,
                api,
                version,
                body,
                throttle: if carried { throttle } else { Duration::ZERO },
                client_throttles: carried && should_client_throttle(api, version),
            };
            self.seq += 1;
            self.down.insert((at, self.seq), Arrival::Answer(delivery));
            if reset_after {
                self.broker_close(conn, at, CloseCause::Reset);
            } else {
                self.try_read(conn, now, rng);
            }
            AnswerFate::Sent {
                throttle,
                reset_after,
            }
        };
        self.retime(conn);
        fate
    }

    /// When the network next has something to do by itself: a throttle ending on a connection
    /// with a request waiting, or an idle connection to expire.
    pub fn next_timer(&self) -> Option<Instant> {
        self.timers.first().map(|(t, _)| *t)
    }

    /// Ends the throttles due at `now` (the waiting request is read) and closes the connections
    /// idle for `connections.max.idle.ms` (`Selector.maybeCloseOldestConnection`; a connection
    /// with a request at the handlers is closed when its answer is written).
    pub fn handle_timers(&mut self, now: Instant, rng: &mut ChaCha8Rng) {
        while let Some(&(at, conn)) = self.timers.first() {
            if at > now {
                return;
            }
            self.timers.remove(&(at, conn));
            let Some(c) = self.conns.get_mut(&conn) else {
                continue;
            };
            c.timer = None;
            let idle = c.reading
                && c.open
                && !c.expiring
                && self
                    .config
                    .max_idle
                    .is_some_and(|m| idle_since(c) + m <= now);
            if idle {
                if c.in_flight.is_some() {
                    c.expiring = true;
                } else {
                    let at = now + self.delay(rng);
                    self.broker_close(conn, at, CloseCause::Idle);
                }
            } else {
                self.try_read(conn, now, rng);
            }
            self.retime(conn);
        }
    }

    /// Re-files the connection's timer: its throttle end when a request waits for it, else its
    /// idle expiry.
    fn retime(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let throttle_end = c
            .throttled_until
            .filter(|_| c.reading && c.in_flight.is_none() && !c.inbox.is_empty());
        let idle = self
            .config
            .max_idle
            .filter(|_| c.reading && c.open && !c.expiring)
            .map(|m| idle_since(c) + m);
        let next = match (throttle_end, idle) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if next == c.timer {
            return;
        }
        if let Some(old) = c.timer {
            self.timers.remove(&(old, conn));
        }
        if let Some(t) = next {
            self.timers.insert((t, conn));
        }
        c.timer = next;
    }

    /// When the next answer (or connection failure) reaches its client.
    pub fn next_down(&self) -> Option<Instant> {
        self.down.keys().next().map(|(t, _)| *t)
    }

    /// The next arrival due at `now`. On [`Arrival::Closed`] the client closes its side
    /// ([`Network::close`]) and fails the requests in flight on it.
    pub fn deliver_down(&mut self, now: Instant) -> Option<Arrival> {
        let key = *self.down.keys().next().filter(|(t, _)| *t <= now)?;
        self.down.remove(&key)
    }

    /// The answers on their way to their clients, in the order they arrive.
    pub fn in_transit(&self) -> impl Iterator<Item = &Delivery> {
        self.down.values().filter_map(|a| match a {
            Arrival::Answer(d) => Some(d),
            Arrival::Closed { .. } => None,
        })
    }

    /// Takes the first answer on its way on `conn`, whatever its arrival time: for a caller that
    /// chooses which answer arrives next (it hands it to the client). Answers on one connection
    /// still arrive in order.
    pub fn take_answer(&mut self, conn: ConnId) -> Option<Delivery> {
        let key = *self
            .down
            .iter()
            .find(|(_, a)| matches!(a, Arrival::Answer(d) if d.conn == conn))?
            .0;
        match self.down.remove(&key) {
            Some(Arrival::Answer(d)) => Some(d),
            _ => None,
        }
    }

    /// Every connection, in the order they were opened (closed ones included).
    pub fn connections(&self) -> impl Iterator<Item = ConnView<'_>> {
        self.conns.iter().map(|(id, c)| ConnView {
            id: *id,
            client: c.client,
            kind: c.kind,
            open: c.open,
            broker_open: c.reading,
            unread: &c.inbox,
            in_flight: c.in_flight.map(|(correlation, _, _)| correlation),
        })
    }

    /// Whether anything is on the wire, unread, queued or in flight at the broker for `client`.
    pub fn has_pending(&self, client: usize) -> bool {
        self.conns.values().any(|c| {
            c.client == client && (c.in_flight.is_some() || !c.inbox.is_empty() || c.on_wire > 0)
        })
    }
}

/// Since when the broker counts `c` idle: its last read or write, or the end of its throttle.
fn idle_since(c: &Conn) -> Instant {
    c.throttled_until
        .map_or(c.last_active, |t| t.max(c.last_active))
}

/// Gives a drained queue's buffer back once it held many requests (after many clients started
/// at once), so that a peak is not kept for the rest of the run.
fn release_if_drained(q: &mut VecDeque<Queued>) {
    if q.is_empty() && q.capacity() > 64 {
        *q = VecDeque::new();
    }
}

/// Sets the answer's `throttle_time_ms` when its version has the field
/// (`AbstractResponse.maybeSetThrottleTimeMs`); whether it does.
fn set_throttle_time(body: &mut ResponseBody, version: i16, throttle: Duration) -> bool {
    let ms = i32::try_from(throttle.as_millis()).unwrap_or(i32::MAX);
    let body = match body {
        ResponseBody::Kafka(body) => body,
        ResponseBody::StreamsGroupHeartbeat(r) => {
            r.throttle_time_ms = ms;
            return true;
        }
        ResponseBody::StreamsGroupDescribe(r) => {
            r.throttle_time_ms = ms;
            return true;
        }
        ResponseBody::StreamsGroupTopologyDescriptionUpdate(r) => {
            r.throttle_time_ms = ms;
            return true;
        }
    };
    let field = match body {
        ResponseKind::Heartbeat(r) if version >= 1 => &mut r.throttle_time_ms,
        ResponseKind::JoinGroup(r) if version >= 2 => &mut r.throttle_time_ms,
        ResponseKind::SyncGroup(r) if version >= 1 => &mut r.throttle_time_ms,
        ResponseKind::LeaveGroup(r) if version >= 1 => &mut r.throttle_time_ms,
        ResponseKind::OffsetCommit(r) if version >= 3 => &mut r.throttle_time_ms,
        ResponseKind::OffsetFetch(r) if version >= 3 => &mut r.throttle_time_ms,
        ResponseKind::FindCoordinator(r) if version >= 1 => &mut r.throttle_time_ms,
        ResponseKind::Metadata(r) if version >= 3 => &mut r.throttle_time_ms,
        ResponseKind::ConsumerGroupHeartbeat(r) => &mut r.throttle_time_ms,
        _ => return false,
    };
    *field = ms;
    true
}

/// `AbstractResponse.shouldClientThrottle`: from which version the client, not the broker's
/// delay, enforces the throttle (KIP-219). ConsumerGroupHeartbeatResponse and the
/// StreamsGroup responses do not override it.
fn should_client_throttle(api: Api, version: i16) -> bool {
    let Some(api) = api.kafka() else {
        return false;
    };
    match api {
        ApiKey::FindCoordinator | ApiKey::SyncGroup | ApiKey::Heartbeat | ApiKey::LeaveGroup => {
            version >= 2
        }
        ApiKey::JoinGroup => version >= 3,
        ApiKey::OffsetCommit | ApiKey::OffsetFetch => version >= 4,
        ApiKey::Metadata => version >= 6,
        _ => false,
    }
}

/// The API of an answer.
pub fn api_of(body: &ResponseBody) -> Api {
    body.api()
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse, RequestKind};
    use rand::SeedableRng;

    use super::*;

    fn heartbeat(correlation: i32) -> Frame {
        Frame {
            correlation,
            api: ApiKey::Heartbeat.into(),
            version: 4,
            client_id: "t".into(),
            body: RequestKind::Heartbeat(HeartbeatRequest::default()).into(),
        }
    }

    fn quiet() -> NetConfig {
        NetConfig {
            latency_min: Duration::ZERO,
            latency_max: Duration::ZERO,
            service_time: Duration::ZERO,
            ..NetConfig::default()
        }
    }

    fn write(
        n: &mut Network,
        conn: ConnId,
        correlation: i32,
        now: Instant,
        rng: &mut ChaCha8Rng,
    ) -> AnswerFate {
        let body = ResponseKind::Heartbeat(HeartbeatResponse::default());
        n.answer(conn, correlation, 4, ResponseBody::Kafka(body), now, rng)
    }

    fn answer(n: &mut Network, conn: ConnId, correlation: i32, now: Instant, rng: &mut ChaCha8Rng) {
        assert!(write(n, conn, correlation, now, rng).sent());
    }

    /// Processes the coordinator queue until it is empty; the correlation ids processed and the
    /// fate of each answer.
    fn drain(n: &mut Network, now: Instant, rng: &mut ChaCha8Rng) -> Vec<(i32, AnswerFate)> {
        let mut out = Vec::new();
        while let Some(q) = n.take_coordinator_work(now) {
            let fate = write(n, q.conn, q.frame.correlation, now, rng);
            out.push((q.frame.correlation, fate));
            while n.deliver_up(now, rng).is_some() {}
        }
        out
    }

    /// A network with one connection on which heartbeats `1..=count` were written at `now` and
    /// delivered.
    fn pipelined(
        seed: u64,
        config: NetConfig,
        count: i32,
    ) -> (ChaCha8Rng, Network, Instant, ConnId) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut n = Network::new(config);
        let now = crate::testutil::epoch();
        let a = n.open(0, ConnKind::Coordinator, now);
        for correlation in 1..=count {
            n.send(a, heartbeat(correlation), now, &mut rng);
        }
        while n.deliver_up(now, &mut rng).is_some() {}
        (rng, n, now, a)
    }

    fn discarded(n: &mut Network) -> Vec<i32> {
        n.take_events()
            .into_iter()
            .filter_map(|e| match e {
                NetEvent::Discarded { correlation, .. } => Some(correlation),
                _ => None,
            })
            .collect()
    }

    /// The explicit choices keep the network's rules: one request read per connection until it
    /// is answered, answers taken per connection in order, a closed connection's answers gone.
    #[test]
    fn explicit_choices_keep_the_rules() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut n = Network::new(quiet());
        let now = crate::testutil::epoch();
        let a = n.open(0, ConnKind::Coordinator, now);
        let b = n.open(1, ConnKind::Coordinator, now);
        for (conn, correlation) in [(a, 1), (a, 2), (b, 1)] {
            n.send(conn, heartbeat(correlation), now, &mut rng);
        }
        while n.deliver_up(now, &mut rng).is_some() {}
        // a#2 stays unread behind a#1.
        let queued: Vec<(ConnId, i32)> = n
            .coordinator_queue()
            .map(|q| (q.conn, q.frame.correlation))
            .collect();
        assert_eq!(queued, [(a, 1), (b, 1)]);
        let view = n.connections().next().expect("a");
        assert_eq!(
            (view.id, view.in_flight, view.unread.len()),
            (a, Some(1), 1)
        );

        let q = n.take_coordinator_work(now).expect("a#1");
        answer(&mut n, q.conn, q.frame.correlation, now, &mut rng);
        // The answer unmuted a: a#2 is read.
        let q = n.take_coordinator_work(now).expect("b#1");
        assert_eq!((q.conn, q.frame.correlation), (b, 1));
        answer(&mut n, b, 1, now, &mut rng);
        let q = n.take_coordinator_work(now).expect("a#2");
        answer(&mut n, q.conn, q.frame.correlation, now, &mut rng);
        assert_eq!(n.client(b), Some(1));

        let transit: Vec<(ConnId, i32)> = n.in_transit().map(|d| (d.conn, d.correlation)).collect();
        assert_eq!(transit, [(a, 1), (b, 1), (a, 2)]);
        assert_eq!(n.take_answer(a).map(|d| d.correlation), Some(1));
        n.close(a);
        assert!(n.take_answer(a).is_none());
        assert_eq!(
            n.take_answer(b).map(|d| (d.client, d.correlation)),
            Some((1, 1))
        );
        assert!(n.in_transit().next().is_none());
    }

    /// A connection the client closed with four requests written: the broker processes the
    /// one with its handlers and one more (the first answer goes into the dead socket), the
    /// second answer's write fails, the last two are never read.
    #[test]
    fn a_closed_connection_yields_the_request_in_flight_and_one_more() {
        let (mut rng, mut n, now, a) = pipelined(2, quiet(), 4);
        n.close(a);
        let done = drain(&mut n, now, &mut rng);
        assert_eq!(
            done,
            [
                (1, AnswerFate::WrittenToClosed),
                (2, AnswerFate::WriteFailed { discarded: 2 })
            ]
        );
        assert_eq!(discarded(&mut n), [3, 4]);
        assert!(!n.has_pending(0));
        let view = n.connections().next().expect("a");
        assert!(!view.open && !view.broker_open);
    }

    /// The client closed while an answer was still on its way to it: the bytes reach a closed
    /// socket, its side resets at once, so the broker's next write fails and nothing more is
    /// read.
    #[test]
    fn a_close_with_an_answer_on_its_way_resets_at_once() {
        let (mut rng, mut n, now, a) = pipelined(3, quiet(), 3);
        let q = n.take_coordinator_work(now).expect("a#1");
        answer(&mut n, a, q.frame.correlation, now, &mut rng);
        // a#1's answer is on its way; a#2 is with the handlers.
        n.close(a);
        let done = drain(&mut n, now, &mut rng);
        assert_eq!(done, [(2, AnswerFate::WriteFailed { discarded: 1 })]);
        assert_eq!(discarded(&mut n), [3]);
    }

    /// A reset fault: the answer is lost (before) or arrives (after), then the client sees the
    /// connection fail, and what it pipelined behind is never read; nothing is ever delivered
    /// twice.
    #[test]
    fn a_reset_fails_the_connection_after_the_answers_on_their_way() {
        for before in [true, false] {
            let config = NetConfig {
                reset_before_answer: if before { 1.0 } else { 0.0 },
                reset_after_answer: if before { 0.0 } else { 1.0 },
                ..quiet()
            };
            let (mut rng, mut n, now, a) = pipelined(4, config, 2);
            let done = drain(&mut n, now, &mut rng);
            let fate = if before {
                AnswerFate::ResetBefore
            } else {
                AnswerFate::Sent {
                    throttle: Duration::ZERO,
                    reset_after: true,
                }
            };
            assert_eq!(done, [(1, fate)]);
            assert_eq!(discarded(&mut n), [2]);
            let mut arrivals = Vec::new();
            while let Some(x) = n.deliver_down(now) {
                arrivals.push(match x {
                    Arrival::Answer(d) => format!("answer {}", d.correlation),
                    Arrival::Closed { cause, .. } => format!("closed: {}", cause.as_str()),
                });
            }
            let mut expected = vec!["closed: connection reset".to_owned()];
            if !before {
                expected.insert(0, "answer 1".into());
            }
            assert_eq!(arrivals, expected);
            // Written after the reset, before the client learnt of it: never read.
            n.send(a, heartbeat(3), now, &mut rng);
            while n.deliver_up(now, &mut rng).is_some() {}
            assert_eq!(discarded(&mut n), [3]);
            assert!(n.coordinator_queue().next().is_none());
        }
    }

    /// KIP-219: a throttled answer carries the throttle time and the broker reads the next
    /// request on the connection only once it passed; other connections go on.
    #[test]
    fn a_throttle_mutes_the_connection_until_it_ends() {
        let config = NetConfig {
            throttle: 1.0,
            throttle_max: Duration::from_millis(500),
            ..quiet()
        };
        let (mut rng, mut n, now, a) = pipelined(5, config, 2);
        let q = n.take_coordinator_work(now).expect("a#1");
        let AnswerFate::Sent { throttle, .. } =
            write(&mut n, a, q.frame.correlation, now, &mut rng)
        else {
            panic!("sent");
        };
        assert!(!throttle.is_zero() && throttle <= Duration::from_millis(500));
        let Some(Arrival::Answer(d)) = n.deliver_down(now) else {
            panic!("the answer");
        };
        let ResponseBody::Kafka(ResponseKind::Heartbeat(r)) = &d.body else {
            panic!("a heartbeat answer");
        };
        assert_eq!(i64::from(r.throttle_time_ms), throttle.as_millis() as i64);
        assert_eq!((d.throttle, d.client_throttles), (throttle, true));
        // a#2 waits for the throttle.
        assert!(n.coordinator_queue().next().is_none());
        assert_eq!(n.next_timer(), Some(now + throttle));
        n.handle_timers(now + throttle - Duration::from_millis(1), &mut rng);
        assert!(n.coordinator_queue().next().is_none());
        n.handle_timers(now + throttle, &mut rng);
        let read: Vec<i32> = n.coordinator_queue().map(|q| q.frame.correlation).collect();
        assert_eq!(read, [2]);
    }

    /// Requests of different connections reach the coordinator in any order within the window;
    /// each connection's own requests keep their order (one at a time).
    #[test]
    fn reads_are_reordered_between_connections_only() {
        let mut swapped = false;
        for seed in 0..64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut n = Network::new(NetConfig {
                reorder_window: Duration::from_millis(10),
                ..quiet()
            });
            let t0 = crate::testutil::epoch();
            let a = n.open(0, ConnKind::Coordinator, t0);
            let b = n.open(1, ConnKind::Coordinator, t0);
            n.send(a, heartbeat(1), t0, &mut rng);
            n.send(a, heartbeat(2), t0, &mut rng);
            n.send(b, heartbeat(1), t0, &mut rng);
            while n.deliver_up(t0, &mut rng).is_some() {}
            let mut order = Vec::new();
            let end = t0 + Duration::from_secs(1);
            while let Some(at) = n.next_coordinator_work() {
                assert!(at <= end);
                let q = n.take_coordinator_work(at).expect("due");
                assert!(q.ready_at >= q.read_at);
                assert!(q.ready_at <= q.read_at + Duration::from_millis(10));
                order.push((q.conn, q.frame.correlation));
                answer(&mut n, q.conn, q.frame.correlation, at, &mut rng);
            }
            let of_a: Vec<i32> = order.iter().filter(|o| o.0 == a).map(|o| o.1).collect();
            assert_eq!(of_a, [1, 2]);
            swapped |= order[0] == (b, 1);
        }
        assert!(swapped, "b#1 never overtook a#1 read before it");
    }

    /// `connections.max.idle.ms`: a connection without traffic is closed by the broker and the
    /// client sees it fail; traffic keeps it open; one expired while a request is with the
    /// handlers closes when its answer is written, which is dropped.
    #[test]
    fn the_broker_closes_idle_connections() {
        let mut rng = ChaCha8Rng::seed_from_u64(6);
        let idle = Duration::from_secs(10);
        let mut n = Network::new(NetConfig {
            max_idle: Some(idle),
            ..quiet()
        });
        let t0 = crate::testutil::epoch();
        let a = n.open(0, ConnKind::Bootstrap, t0);
        let b = n.open(1, ConnKind::Coordinator, t0);
        let c = n.open(2, ConnKind::Coordinator, t0);
        let t = t0 + Duration::from_secs(6);
        n.send(b, heartbeat(1), t, &mut rng);
        n.send(c, heartbeat(1), t, &mut rng);
        while n.deliver_up(t, &mut rng).is_some() {}
        let q = n.take_coordinator_work(t).expect("b#1");
        answer(&mut n, b, q.frame.correlation, t, &mut rng);
        assert!(matches!(n.deliver_down(t), Some(Arrival::Answer(_))));
        // c#1 stays with the handlers (a stall) past the idle time.
        assert_eq!(n.next_timer(), Some(t0 + idle));
        n.handle_timers(t0 + idle, &mut rng);
        assert_eq!(
            n.deliver_down(t0 + idle),
            Some(Arrival::Closed {
                conn: a,
                client: 0,
                cause: CloseCause::Idle
            })
        );
        // Traffic on b (a request the broker's own handlers answer) keeps it open past c's
        // expiry.
        let t1 = t + Duration::from_secs(5);
        let find = Frame {
            correlation: 2,
            api: ApiKey::FindCoordinator.into(),
            version: 4,
            client_id: "t".into(),
            body: RequestKind::FindCoordinator(Default::default()).into(),
        };
        n.send(b, find, t1, &mut rng);
        while n.deliver_up(t1, &mut rng).is_some() {}
        let q = n.take_broker_work(t1).expect("b#2");
        assert_eq!(q.conn, b);
        answer(&mut n, b, 2, t1, &mut rng);
        assert!(matches!(n.deliver_down(t1), Some(Arrival::Answer(_))));
        let t2 = t + idle;
        n.handle_timers(t2, &mut rng);
        assert!(n.deliver_down(t2).is_none(), "c is closing, not closed");
        assert!(n.connections().all(|v| v.id == a || v.broker_open));
        let q = n.take_coordinator_work(t2).expect("c#1");
        assert_eq!(q.conn, c);
        let fate = write(&mut n, c, 1, t2, &mut rng);
        assert_eq!(fate, AnswerFate::BrokerClosed);
        assert_eq!(
            n.deliver_down(t2),
            Some(Arrival::Closed {
                conn: c,
                client: 2,
                cause: CloseCause::Idle
            })
        );
        let open: Vec<ConnId> = n
            .connections()
            .filter(|v| v.broker_open)
            .map(|v| v.id)
            .collect();
        assert_eq!(open, [b]);
    }
}
