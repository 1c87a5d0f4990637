//! The client's connection rules, sans-IO: which connection a request goes on, the requests in
//! flight on each connection (matched to their answers by correlation id), when they time out,
//! and what a failed connection takes with it. `TcpTransport` keeps each
//! of its connections' requests in a [`Pipeline`]; a client that runs its connections itself
//! (the simulation's `World`, the model checker) keeps all of them in [`Connections`].
//!
//! The rules (the Java client's `NetworkClient`):
//! - a request to a [`Target`] goes on the connection of its [`Route`]: one for
//!   [`Target::Bootstrap`], one per node id for [`Target::Node`] and another per node id for
//!   [`Target::Coordinator`]; a route whose connection failed or was closed gets a new one;
//! - requests reach their connection in the order they are sent, and several may be in flight on
//!   it at once; an answer is matched to its request by correlation id, and an answer to a request
//!   no longer in flight matches nothing;
//! - a request times out at its deadline (the instant it was sent plus its timeout; the time comes
//!   in, nothing here reads a clock) and fails with [`TransportError::Timeout`]; it closes its
//!   connection (`NetworkClient.handleTimedOutRequests`: answers come in request order, so the
//!   connection is stuck), and every other request in flight on it fails with
//!   [`TransportError::Disconnected`];
//! - a connection that fails (reset, closed by the peer, closed by the client, or a protocol
//!   violation) fails every request in flight on it with the connection's error
//!   (`NetworkClient.processDisconnection`), in the order they were sent, and a request sent on
//!   it afterwards fails with that error at once.

use std::time::{Duration, Instant};

use crate::error::TransportError;
use crate::request::{Api, Target};

/// The connection a request goes on: one per route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Route {
    /// Requests to any broker (FindCoordinator, Metadata).
    Bootstrap,
    /// The data-path connection to a node.
    Node(i32),
    /// The coordinator connection to a node, separate from its data-path connection.
    Coordinator(i32),
}

impl Route {
    /// The route of requests to `target`.
    pub fn of(target: &Target) -> Self {
        match target {
            Target::Bootstrap => Self::Bootstrap,
            Target::Node(b) => Self::Node(b.node_id),
            Target::Coordinator(b) => Self::Coordinator(b.node_id),
        }
    }
}

/// A request on its connection, waiting for its answer; `tag` is what the client needs to hand
/// the answer on (a request id, a reply channel).
#[derive(Debug)]
pub struct InFlight<R> {
    /// The client's own handle of the request.
    pub tag: R,
    /// The request's API.
    pub api: Api,
    /// When it times out.
    pub deadline: Instant,
    /// Its timeout, as the request gave it.
    pub timeout: Duration,
}

impl<R> InFlight<R> {
    /// A request sent at `now` with `timeout` (a timeout no clock reaches gives a deadline far
    /// away, never an overflow).
    pub fn new(tag: R, api: Api, timeout: Duration, now: Instant) -> Self {
        Self {
            tag,
            api,
            deadline: crate::machine::timer::after(now, timeout),
            timeout,
        }
    }

    /// The error the request fails with at its deadline.
    pub fn timed_out(&self) -> TransportError {
        TransportError::Timeout {
            api: self.api,
            timeout: self.timeout,
        }
    }
}

/// The error of the requests a closed or failed connection to `addr` takes with it.
pub fn disconnected(addr: impl std::fmt::Display, reason: &str) -> TransportError {
    TransportError::Disconnected {
        addr: addr.to_string(),
        reason: reason.to_owned(),
    }
}

/// One connection's requests in flight, by correlation id, and its failure once it failed.
#[derive(Debug)]
pub struct Pipeline<R> {
    pending: VecMap<i32, InFlight<R>>,
    failed: Option<TransportError>,
}

impl<R> Default for Pipeline<R> {
    fn default() -> Self {
        Self {
            pending: VecMap::default(),
            failed: None,
        }
    }
}

/// Requests failed with their connection, by correlation id, in the order they were sent.
pub type Failed<R> = Vec<(i32, InFlight<R>)>;

impl<R> Pipeline<R> {
    /// Puts `request` in flight under `correlation`; on a failed connection it is not, and the
    /// connection's error comes back.
    pub fn send(&mut self, correlation: i32, request: InFlight<R>) -> Result<(), TransportError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.pending.insert(correlation, request);
        Ok(())
    }

    /// The request `correlation` answers, taken out of flight (`None` when none is in flight).
    pub fn answered(&mut self, correlation: i32) -> Option<InFlight<R>> {
        self.pending.remove(&correlation)
    }

    /// Requests in flight.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether no request is in flight.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The error the connection failed with, once it failed.
    pub fn failure(&self) -> Option<&TransportError> {
        self.failed.as_ref()
    }

    /// The connection fails with `error` (its first failure is kept): every request in flight
    /// is taken out and fails with the connection's error, which comes back with them.
    pub fn fail(&mut self, error: TransportError) -> (TransportError, Failed<R>) {
        let error = self.failed.get_or_insert(error).clone();
        (error, self.pending.take())
    }

    /// Request `correlation` timed out: it is taken out (if still in flight), and the
    /// connection fails with `closing`, as [`fail`](Self::fail): the others in flight fail.
    pub fn time_out(
        &mut self,
        correlation: i32,
        closing: TransportError,
    ) -> (Option<InFlight<R>>, TransportError, Failed<R>) {
        let request = self.pending.remove(&correlation);
        let (error, failed) = self.fail(closing);
        (request, error, failed)
    }

    /// The earliest deadline of the requests in flight.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.pending.values().map(|r| r.deadline).min()
    }

    /// The request whose deadline passed first by `now` (the first sent among equals).
    fn expired(&self, now: Instant) -> Option<(i32, Instant)> {
        self.pending
            .iter()
            .filter(|(_, r)| r.deadline <= now)
            .map(|(c, r)| (*c, r.deadline))
            .min_by_key(|(_, deadline)| *deadline)
    }

    /// The requests in flight, in the order they were sent.
    pub fn iter(&self) -> impl Iterator<Item = (i32, &InFlight<R>)> {
        self.pending.iter().map(|(c, r)| (*c, r))
    }
}

/// A request that timed out: its connection is closed, and took the other requests with it.
#[derive(Debug)]
pub struct Expired<C, R> {
    /// Its connection, closed now.
    pub conn: C,
    /// Its correlation id.
    pub correlation: i32,
    /// The request (fails with [`InFlight::timed_out`]).
    pub request: InFlight<R>,
    /// The other requests in flight on the connection (fail with [`disconnected`]).
    pub failed: Failed<R>,
}

/// A client's connections, one per [`Route`], and the requests in flight on each, for a client
/// that runs its connections itself: `C` names a connection. Correlation ids count up from 1
/// across the client's connections.
#[derive(Debug)]
pub struct Connections<C, R> {
    routes: VecMap<Route, C>,
    pipelines: VecMap<C, Pipeline<R>>,
    next_correlation: i32,
}

impl<C, R> Default for Connections<C, R> {
    fn default() -> Self {
        Self {
            routes: VecMap::default(),
            pipelines: VecMap::default(),
            next_correlation: 0,
        }
    }
}

impl<C: Copy + Ord, R> Connections<C, R> {
    /// The connection requests on `route` go on, if it has one.
    pub fn conn(&self, route: Route) -> Option<C> {
        self.routes.get(&route).copied()
    }

    /// `conn` is the new connection of `route`.
    pub fn opened(&mut self, route: Route, conn: C) {
        self.routes.insert(route, conn);
        self.pipelines.get_or_default(conn);
    }

    /// Every route's connection, bootstrap first, then by node id.
    pub fn routes(&self) -> impl Iterator<Item = (Route, C)> + '_ {
        self.routes.iter().map(|(r, c)| (*r, *c))
    }

    /// Puts a request in flight on `conn`; returns its correlation id.
    pub fn send(&mut self, conn: C, tag: R, api: Api, timeout: Duration, now: Instant) -> i32 {
        self.next_correlation = self.next_correlation.wrapping_add(1);
        let correlation = self.next_correlation;
        // A connection this client does not know yet gets its pipeline; a known one never failed
        // (a failed connection is forgotten), so the request always goes in flight.
        let request = InFlight::new(tag, api, timeout, now);
        let _ = self
            .pipelines
            .get_or_default(conn)
            .send(correlation, request);
        correlation
    }

    /// The request the answer `correlation` on `conn` is for, taken out of flight.
    pub fn answered(&mut self, conn: C, correlation: i32) -> Option<InFlight<R>> {
        self.pipelines.get_mut(&conn)?.answered(correlation)
    }

    /// The earliest deadline of the requests in flight.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.pipelines
            .values()
            .filter_map(Pipeline::next_deadline)
            .min()
    }

    /// The request whose deadline passed first by `now` (among equals, the first by connection
    /// and correlation id), taken out of flight with its connection, which is closed and
    /// forgotten: its other requests come with it.
    pub fn time_out(&mut self, now: Instant) -> Option<Expired<C, R>> {
        let (conn, correlation, _) = self
            .pipelines
            .iter()
            .filter_map(|(c, p)| p.expired(now).map(|(corr, at)| (*c, corr, at)))
            .min_by_key(|(_, _, at)| *at)?;
        let mut pipeline = self.forget(conn)?;
        let request = pipeline.answered(correlation)?;
        let failed = pipeline.pending.take();
        Some(Expired {
            conn,
            correlation,
            request,
            failed,
        })
    }

    /// Closes `conn` (the client closes it, or it failed under the client): its route is
    /// forgotten, and its requests in flight come back, in the order they were sent, to fail.
    pub fn close(&mut self, conn: C) -> Failed<R> {
        self.forget(conn)
            .map(|mut p| p.pending.take())
            .unwrap_or_default()
    }

    fn forget(&mut self, conn: C) -> Option<Pipeline<R>> {
        self.routes.retain(|_, c| *c != conn);
        self.pipelines.remove(&conn)
    }

    /// Forgets every connection and request (the client is gone).
    pub fn clear(&mut self) {
        self.routes.clear();
        self.pipelines.clear();
    }

    /// Every request in flight with its connection and correlation id, by connection, then in
    /// the order they were sent.
    pub fn in_flight(&self) -> impl Iterator<Item = (C, i32, &InFlight<R>)> {
        self.pipelines
            .iter()
            .flat_map(|(c, p)| p.iter().map(move |(corr, r)| (*c, corr, r)))
    }
}

/// A small map kept as a vector sorted by key: what a client holds a few of (connections,
/// requests in flight), without a B-tree node per client.
#[derive(Debug, Clone)]
pub(crate) struct VecMap<K, V>(Vec<(K, V)>);

impl<K, V> Default for VecMap<K, V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

// The simulation uses a few of these for its own bookkeeping; without it they are unused.
#[cfg_attr(not(feature = "sim"), allow(dead_code))]
impl<K: Ord, V> VecMap<K, V> {
    pub(crate) fn new() -> Self {
        Self(Vec::new())
    }

    fn get_or_default(&mut self, key: K) -> &mut V
    where
        V: Default,
    {
        let i = match self.find(&key) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (key, V::default()));
                i
            }
        };
        &mut self.0[i].1
    }

    fn get_mut<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: std::borrow::Borrow<Q>,
    {
        let i = self.find(key).ok()?;
        Some(&mut self.0[i].1)
    }

    /// Every entry, taken out in key order.
    fn take(&mut self) -> Vec<(K, V)> {
        std::mem::take(&mut self.0)
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn find<Q: Ord + ?Sized>(&self, key: &Q) -> Result<usize, usize>
    where
        K: std::borrow::Borrow<Q>,
    {
        self.0.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                self.0.insert(i, (key, value));
                None
            }
        }
    }

    fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
    {
        let i = self.find(key).ok()?;
        let (_, v) = self.0.remove(i);
        if self.0.is_empty() {
            self.0 = Vec::new();
        }
        Some(v)
    }

    fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: std::borrow::Borrow<Q>,
    {
        self.find(key).ok().map(|i| &self.0[i].1)
    }

    pub(crate) fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        K: std::borrow::Borrow<Q>,
    {
        self.find(key).is_ok()
    }

    fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &K> {
        self.0.iter().map(|(k, _)| k)
    }

    fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|(_, v)| v)
    }

    fn clear(&mut self) {
        self.0 = Vec::new();
    }

    fn retain(&mut self, mut f: impl FnMut(&K, &mut V) -> bool) {
        self.0.retain_mut(|(k, v)| f(k, v));
        if self.0.is_empty() {
            self.0 = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Broker;
    use kafka_protocol::messages::ApiKey;

    const S: Duration = Duration::from_secs(1);

    fn coordinator(node_id: i32) -> Target {
        Target::Coordinator(Broker {
            node_id,
            host: "b".into(),
            port: 9092,
        })
    }

    #[test]
    fn a_coordinator_connection_is_apart_from_the_data_connection_to_its_node() {
        let node = Target::Node(Broker {
            node_id: 1,
            host: "b".into(),
            port: 9092,
        });
        assert_eq!(Route::of(&coordinator(1)), Route::Coordinator(1));
        assert_eq!(Route::of(&node), Route::Node(1));
        assert_eq!(Route::of(&Target::Bootstrap), Route::Bootstrap);
    }

    #[test]
    fn a_timed_out_request_closes_its_connection_and_fails_the_rest_on_it() {
        let t0 = crate::testutil::epoch();
        let mut c: Connections<u8, &str> = Connections::default();
        c.opened(Route::Bootstrap, 0);
        c.opened(Route::Coordinator(1), 1);
        let find = ApiKey::FindCoordinator.into();
        let join = ApiKey::JoinGroup.into();
        assert_eq!(c.send(0, "find", find, 3 * S, t0), 1);
        assert_eq!(c.send(1, "join", join, 5 * S, t0), 2);
        assert_eq!(c.send(1, "hb", join, 2 * S, t0 + S), 3);
        assert_eq!(c.next_deadline(), Some(t0 + 3 * S));
        assert!(c.time_out(t0 + 2 * S).is_none());
        let e = c.time_out(t0 + 10 * S).expect("two are due");
        assert_eq!((e.conn, e.correlation, e.request.tag), (0, 1, "find"));
        assert!(e.failed.is_empty());
        assert_eq!(c.conn(Route::Bootstrap), None);
        let e = c.time_out(t0 + 10 * S).expect("due");
        assert_eq!((e.conn, e.correlation, e.request.tag), (1, 3, "hb"));
        assert_eq!(e.failed.len(), 1);
        assert_eq!(e.failed[0].1.tag, "join");
        assert!(c.time_out(t0 + 10 * S).is_none());
        assert_eq!(c.routes().count(), 0);
    }

    #[test]
    fn a_failed_connection_fails_its_requests_in_order_and_refuses_new_ones() {
        let t0 = crate::testutil::epoch();
        let mut p: Pipeline<u8> = Pipeline::default();
        let api = ApiKey::Heartbeat.into();
        p.send(7, InFlight::new(1, api, S, t0)).unwrap();
        p.send(8, InFlight::new(2, api, S, t0)).unwrap();
        assert!(
            p.answered(9).is_none(),
            "an unknown correlation id matches nothing"
        );
        let (e, failed) = p.fail(disconnected("b:9092", "reset"));
        assert_eq!(failed.iter().map(|(c, _)| *c).collect::<Vec<_>>(), [7, 8]);
        let (again, none) = p.fail(disconnected("b:9092", "later"));
        assert_eq!(again, e, "the first failure is kept");
        assert!(none.is_empty());
        assert_eq!(p.send(9, InFlight::new(3, api, S, t0)), Err(e));
        assert!(p.is_empty());
    }

    #[test]
    fn a_timeout_no_clock_reaches_is_a_deadline_far_away() {
        let t0 = crate::testutil::epoch();
        let r = InFlight::new((), ApiKey::JoinGroup.into(), Duration::MAX, t0);
        assert!(r.deadline > t0);
    }
}
