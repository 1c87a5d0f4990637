//! Client connections as a Kafka broker sees them.
//!
//! What the model keeps from a real broker (apache/kafka `SocketServer` / `Selector` and the
//! group coordinator runtime):
//! - per connection, bytes arrive in order; the broker reads one request, mutes the connection,
//!   and reads the next only after the answer to the first went out;
//! - requests are processed in the order they were READ, not sent: the coordinator works through
//!   one queue ordered by read time (group APIs), while FindCoordinator / Metadata are answered
//!   by the request handlers directly (at once, or one per
//!   [`Network::set_broker_service_time`]);
//! - a coordinator stall holds up the queue (reading goes on);
//! - a connection the client closed still has the requests it already delivered read and
//!   processed in turn; their answers go nowhere;
//! - answers travel back in order, after a seeded delay; faults may drop an answer (the client
//!   then times the request out) or deliver it twice.
//!
//! [`World`](super::world::World) lets time decide what happens next. A caller that explores
//! every order instead (`tests/model_check.rs`) makes each choice through the same rules:
//! [`Network::take_coordinator_work`] / [`Network::take_coordinator_head`] (the coordinator
//! processes, or its runtime fails, the head of its queue), [`Network::take_answer`] (the next
//! answer on a connection arrives, or is lost), [`Network::close`] (the client drops a
//! connection); [`Network::connections`], [`Network::coordinator_queue`] and
//! [`Network::in_transit`] show the state.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::ConnId;
use super::coordinator::SimCoordinator;

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
    /// Probability that an answer never reaches the client.
    pub drop_answer: f64,
    /// Probability that an answer reaches the client twice.
    pub duplicate_answer: f64,
    /// Probability that an answer is delayed by an extra `slow_extra`.
    pub slow_answer: f64,
    /// The extra delay of a slow answer.
    pub slow_extra: Duration,
}

impl Default for NetConfig {
    fn default() -> Self {
        Self {
            latency_min: Duration::from_millis(1),
            latency_max: Duration::from_millis(3),
            service_time: Duration::from_millis(1),
            drop_answer: 0.0,
            duplicate_answer: 0.0,
            slow_answer: 0.0,
            slow_extra: Duration::from_secs(2),
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
    pub api: ApiKey,
    /// The version it was sent at.
    pub version: i16,
    /// The client id from the request header.
    pub client_id: String,
    /// The body.
    pub body: RequestKind,
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
    pub api: ApiKey,
    /// The version.
    pub version: i16,
    /// The answer.
    pub body: ResponseKind,
    /// Whether this is a duplicate of an answer already delivered.
    pub duplicate: bool,
}

/// What became of an answer the coordinator produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerFate {
    /// The client had closed the connection: dropped.
    ConnectionClosed,
    /// Lost by a fault.
    Lost,
    /// On its way (twice when `duplicate`).
    Sent {
        /// Whether a duplicate follows.
        duplicate: bool,
    },
    /// The connection is unknown.
    UnknownConnection,
}

#[derive(Debug)]
struct Conn {
    client: usize,
    kind: ConnKind,
    open: bool,
    /// Delivered but not read (the connection is muted while a request is in flight).
    inbox: VecDeque<Frame>,
    /// Read, not answered yet: (correlation, api, version).
    in_flight: Option<(i32, ApiKey, i16)>,
    last_up: Instant,
    last_down: Instant,
}

/// A request the broker read, waiting to be processed.
#[derive(Debug, Clone)]
pub struct Queued {
    /// When it was read.
    pub read_at: Instant,
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
        /// Whether the connection is muted (a request in flight), so it stays unread.
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
    down: BTreeMap<(Instant, u64), Delivery>,
    broker_queue: VecDeque<Queued>,
    coordinator_queue: VecDeque<Queued>,
    stalled_until: Option<Instant>,
    busy_until: Option<Instant>,
    /// Time the broker's request handlers spend on one FindCoordinator / Metadata request
    /// (zero unless [`Network::set_broker_service_time`] changed it).
    broker_service_time: Duration,
    broker_busy_until: Option<Instant>,
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
            events: Vec::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &NetConfig {
        &self.config
    }

    /// Changes delays and fault rates from now on.
    pub fn set_config(&mut self, config: NetConfig) {
        self.config = config;
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
                inbox: VecDeque::new(),
                in_flight: None,
                last_up: now,
                last_down: now,
            },
        );
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

    /// The client closes `conn`. Bytes already sent are still delivered, read and processed;
    /// answers on it are dropped from now on.
    pub fn close(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.open = false;
        }
        self.down.retain(|_, d| d.conn != conn);
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

    /// The client writes `frame` on `conn` at `now`; it arrives after a delay, in order.
    pub fn send(&mut self, conn: ConnId, frame: Frame, now: Instant, rng: &mut ChaCha8Rng) {
        let delay = self.delay(rng);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let at = (now + delay).max(c.last_up);
        c.last_up = at;
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
    pub fn deliver_up(&mut self, now: Instant) -> Option<(ConnId, i32)> {
        let key = *self.up.keys().next().filter(|(t, _)| *t <= now)?;
        let (conn, frame) = self.up.remove(&key).expect("key exists");
        let correlation = frame.correlation;
        let c = self.conns.get_mut(&conn)?;
        let unread = c.in_flight.is_some();
        self.events.push(NetEvent::Delivered {
            conn,
            correlation,
            unread,
        });
        if unread || !c.inbox.is_empty() {
            c.inbox.push_back(frame);
            self.try_read(conn, now);
        } else {
            // Not muted, nothing buffered before it: read at once.
            self.read(conn, frame, now);
        }
        Some((conn, correlation))
    }

    /// Reads the next request of `conn` if it is not muted.
    fn try_read(&mut self, conn: ConnId, now: Instant) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.in_flight.is_some() {
            return;
        }
        let Some(frame) = c.inbox.pop_front() else {
            return;
        };
        if c.inbox.is_empty() {
            // Give the buffer back: most connections never have more than one request.
            c.inbox = VecDeque::new();
        }
        self.read(conn, frame, now);
    }

    /// The broker reads `frame` from `conn` (not muted): the connection is muted until the
    /// answer goes out, the request queued for its handler.
    fn read(&mut self, conn: ConnId, frame: Frame, now: Instant) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.in_flight = Some((frame.correlation, frame.api, frame.version));
        let correlation = frame.correlation;
        let group = SimCoordinator::is_group_api(frame.api);
        let queued = Queued {
            read_at: now,
            conn,
            frame,
        };
        let position = if group {
            self.coordinator_queue.push_back(queued);
            self.coordinator_queue.len()
        } else {
            self.broker_queue.push_back(queued);
            0
        };
        self.events.push(NetEvent::Read {
            conn,
            correlation,
            position,
        });
    }

    /// When the broker's request handlers have work (FindCoordinator, Metadata): the head of
    /// their queue, once they are done with the previous request.
    pub fn next_broker_work(&self) -> Option<Instant> {
        let head = self.broker_queue.front()?.read_at;
        Some(self.broker_busy_until.map_or(head, |b| head.max(b)))
    }

    /// The next request for the broker's own handlers, taken at `now` (they are busy with it for
    /// the broker service time).
    pub fn take_broker_work(&mut self, now: Instant) -> Option<Queued> {
        if !self.broker_service_time.is_zero() {
            self.broker_busy_until = Some(now + self.broker_service_time);
        }
        let q = self.broker_queue.pop_front();
        release_if_drained(&mut self.broker_queue);
        q
    }

    /// When the head of the broker's own queue was read.
    pub fn broker_queue_head(&self) -> Option<Instant> {
        self.broker_queue.front().map(|q| q.read_at)
    }

    /// When the coordinator can process its next queued request (after stalls and service time).
    pub fn next_coordinator_work(&self) -> Option<Instant> {
        let head = self.coordinator_queue.front()?.read_at;
        let mut at = head;
        if let Some(b) = self.busy_until {
            at = at.max(b);
        }
        if let Some(s) = self.stalled_until {
            at = at.max(s);
        }
        Some(at)
    }

    /// The queued group requests, oldest read first.
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

    /// The broker sends an answer on `conn` at `now`: the connection is unmuted (and its next
    /// request read); a closed connection drops the answer.
    pub fn answer(
        &mut self,
        conn: ConnId,
        correlation: i32,
        version: i16,
        body: ResponseKind,
        now: Instant,
        rng: &mut ChaCha8Rng,
    ) -> AnswerFate {
        let delay = self.delay(rng);
        let (lost, dup, slow) = (
            rng.random_bool(self.config.drop_answer.clamp(0.0, 1.0)),
            rng.random_bool(self.config.duplicate_answer.clamp(0.0, 1.0)),
            rng.random_bool(self.config.slow_answer.clamp(0.0, 1.0)),
        );
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
        let fate = if !c.open {
            AnswerFate::ConnectionClosed
        } else if lost {
            AnswerFate::Lost
        } else {
            let at = (now + delay + extra).max(c.last_down);
            c.last_down = at;
            let delivery = Delivery {
                conn,
                client: c.client,
                correlation,
                api,
                version,
                body,
                duplicate: false,
            };
            self.seq += 1;
            self.down.insert((at, self.seq), delivery.clone());
            if dup {
                self.seq += 1;
                self.down.insert(
                    (at, self.seq),
                    Delivery {
                        duplicate: true,
                        ..delivery
                    },
                );
            }
            AnswerFate::Sent { duplicate: dup }
        };
        self.try_read(conn, now);
        fate
    }

    /// When the next answer reaches its client.
    pub fn next_down(&self) -> Option<Instant> {
        self.down.keys().next().map(|(t, _)| *t)
    }

    /// The next answer due at `now`.
    pub fn deliver_down(&mut self, now: Instant) -> Option<Delivery> {
        let key = *self.down.keys().next().filter(|(t, _)| *t <= now)?;
        self.down.remove(&key)
    }

    /// The answers on their way to their clients, in the order they arrive.
    pub fn in_transit(&self) -> impl Iterator<Item = &Delivery> {
        self.down.values()
    }

    /// Takes the first answer on its way on `conn`, whatever its arrival time: for a caller that
    /// chooses which answer arrives next (it hands it to the client) or is lost (it drops it).
    /// Answers on one connection still arrive in order.
    pub fn take_answer(&mut self, conn: ConnId) -> Option<Delivery> {
        let key = *self.down.iter().find(|(_, d)| d.conn == conn)?.0;
        self.down.remove(&key)
    }

    /// Every connection, in the order they were opened (closed ones included).
    pub fn connections(&self) -> impl Iterator<Item = ConnView<'_>> {
        self.conns.iter().map(|(id, c)| ConnView {
            id: *id,
            client: c.client,
            kind: c.kind,
            open: c.open,
            unread: &c.inbox,
            in_flight: c.in_flight.map(|(correlation, _, _)| correlation),
        })
    }

    /// Whether anything is on the wire, unread, queued or in flight at the broker for `client`.
    pub fn has_pending(&self, client: usize) -> bool {
        self.conns
            .iter()
            .any(|(_, c)| c.client == client && (c.in_flight.is_some() || !c.inbox.is_empty()))
            || self
                .up
                .values()
                .any(|(conn, _)| self.conns.get(conn).is_some_and(|c| c.client == client))
    }
}

/// Gives a drained queue's buffer back once it held many requests (after many clients started
/// at once), so that a peak is not kept for the rest of the run.
fn release_if_drained(q: &mut VecDeque<Queued>) {
    if q.is_empty() && q.capacity() > 64 {
        *q = VecDeque::new();
    }
}

/// The API of an answer.
pub fn api_of(body: &ResponseKind) -> ApiKey {
    match body {
        ResponseKind::JoinGroup(_) => ApiKey::JoinGroup,
        ResponseKind::SyncGroup(_) => ApiKey::SyncGroup,
        ResponseKind::Heartbeat(_) => ApiKey::Heartbeat,
        ResponseKind::LeaveGroup(_) => ApiKey::LeaveGroup,
        ResponseKind::OffsetCommit(_) => ApiKey::OffsetCommit,
        ResponseKind::OffsetFetch(_) => ApiKey::OffsetFetch,
        ResponseKind::FindCoordinator(_) => ApiKey::FindCoordinator,
        ResponseKind::Metadata(_) => ApiKey::Metadata,
        ResponseKind::ConsumerGroupHeartbeat(_) => ApiKey::ConsumerGroupHeartbeat,
        _ => ApiKey::ApiVersions,
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};
    use rand::SeedableRng;

    use super::*;

    fn heartbeat(correlation: i32) -> Frame {
        Frame {
            correlation,
            api: ApiKey::Heartbeat,
            version: 4,
            client_id: "t".into(),
            body: RequestKind::Heartbeat(HeartbeatRequest::default()),
        }
    }

    fn answer(n: &mut Network, conn: ConnId, correlation: i32, now: Instant, rng: &mut ChaCha8Rng) {
        let body = ResponseKind::Heartbeat(HeartbeatResponse::default());
        assert_eq!(
            n.answer(conn, correlation, 4, body, now, rng),
            AnswerFate::Sent { duplicate: false }
        );
    }

    /// The explicit choices keep the network's rules: one request read per connection until it
    /// is answered, answers taken per connection in order, a closed connection's answers gone.
    #[test]
    fn explicit_choices_keep_the_rules() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut n = Network::new(NetConfig {
            latency_min: Duration::ZERO,
            latency_max: Duration::ZERO,
            service_time: Duration::ZERO,
            ..NetConfig::default()
        });
        let now = Instant::now();
        let a = n.open(0, ConnKind::Coordinator, now);
        let b = n.open(1, ConnKind::Coordinator, now);
        for (conn, correlation) in [(a, 1), (a, 2), (b, 1)] {
            n.send(conn, heartbeat(correlation), now, &mut rng);
        }
        while n.deliver_up(now).is_some() {}
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
}
