//! Kafka over TCP: one connection per target, ApiVersions at connect, reconnects with backoff.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::ResponseKind;
use tokio::net::TcpStream;

use super::Transport;
use super::conn::Connection;
use super::connections::Route;
use crate::backoff::{ExponentialBackoff, JitterRng};
use crate::config::ClientConfig;
use crate::error::{ConfigError, TransportError};
use crate::request::{Broker, Request, Response, ResponseBody, Target};

type Slot = Arc<tokio::sync::Mutex<Option<Arc<Connection>>>>;

/// A slot and when a request last went through it.
struct Entry {
    slot: Slot,
    used: tokio::time::Instant,
}

/// Node and coordinator connections kept beyond two per known broker (a node and a coordinator
/// connection each) before the least recently used idle one is closed.
const SPARE_NODE_CONNECTIONS: usize = 4;

/// How often the broker list behind discovery is read again (the Java client's
/// `metadata.max.age.ms` default).
const BROKERS_MAX_AGE: Duration = Duration::from_secs(300);

/// The Kafka wire protocol over tokio TCP.
///
/// Cheap to clone; clones share connections. Requests to the same target share one connection and
/// may be in flight together; each connection negotiates API versions once, at connect.
///
/// Failure handling follows the Java client's `NetworkClient`:
/// - a connection to a broker that refuses it, resets it, or does not finish the setup within
///   `socket.connection.setup.timeout.ms` fails the request at once (a coordinator's requests
///   then make the member look the coordinator up again, with its KIP-580 backoff), and the
///   address waits out a reconnect backoff (`reconnect.backoff.ms` doubling up to
///   `reconnect.backoff.max.ms`, ±20 % jitter) before it is dialled again. A request's own
///   timeout never stretches the connect: a JoinGroup that the broker may park for the whole
///   rebalance timeout still gives up on a dead coordinator within about a second;
/// - [`Target::Bootstrap`] requests (FindCoordinator, Metadata) go to any live broker: those
///   the latest Metadata answer named (learned from answers passing through, and read at the
///   first bootstrap connection), the least loaded first (a live connection with the fewest
///   requests in flight, then brokers not in reconnect backoff), and the configured bootstrap
///   addresses only after them. Losing the broker behind the only bootstrap address is then
///   no outage.
///
/// What it holds, and when that grows:
/// - one connection for [`Target::Bootstrap`], and one per node id of a [`Target::Node`] or
///   [`Target::Coordinator`]. A node connection that carried no request for
///   `connections.max.idle.ms` (9 min by default) is closed, and beyond two per known broker
///   (the brokers of the latest Metadata answer, or the bootstrap addresses) plus four, the
///   least recently used idle one is closed when a new node id comes: a broker that names a
///   new coordinator node id each time does not pile up connections. Connections with requests
///   in flight are never closed this way;
/// - per connection, the requests in flight: each holds its encoded frame (in the connection's
///   write queue until written, which is not bounded: a sender waits for its answer, not for
///   room in the queue) and an entry matching its answer, until the answer, the request's
///   timeout or the connection's failure. That is at most what callers have in flight at once;
/// - a reconnect backoff per address whose connect failed, until a connect to it succeeds or
///   it was not dialled for `connections.max.idle.ms`.
///
/// The settings are checked when the transport is built: [`try_new`](Self::try_new) returns a
/// [`ConfigError`] for a config that fails [`ClientConfig::validate`] (say SASL credentials
/// with `security.protocol=PLAINTEXT`), and a transport from [`new`](Self::new) fails each
/// request with [`TransportError::Config`] instead of connecting without the security the
/// config asks for. Settings that are allowed but weaken the connection (no host name
/// verification, SASL PLAIN over a cleartext connection) log a warning once, when the transport
/// is built.
#[derive(Clone)]
pub struct TcpTransport {
    inner: Arc<Inner>,
}

struct Inner {
    config: ClientConfig,
    /// Why the config cannot be used, if it cannot (every request fails with it).
    invalid: Option<ConfigError>,
    slots: Mutex<HashMap<Route, Entry>>,
    /// Where the next bootstrap connect starts among equally good addresses (rotation).
    next_address: std::sync::atomic::AtomicUsize,
    /// Reconnect backoff per address.
    dialled: Mutex<HashMap<String, Dialled>>,
    /// The brokers the latest Metadata answer named, and when it came.
    brokers: Mutex<Brokers>,
    /// Jitter of the reconnect backoff.
    jitter: Mutex<JitterRng>,
    #[cfg(feature = "tls")]
    tls: std::sync::OnceLock<Result<tokio_rustls::TlsConnector, TransportError>>,
}

/// Failed connects to one address in a row, and when it may be dialled again.
#[derive(Debug, Clone)]
struct Dialled {
    failures: u32,
    retry_at: tokio::time::Instant,
    failed_at: tokio::time::Instant,
    last_error: String,
}

#[derive(Debug, Default)]
struct Brokers {
    /// `host:port` by node id.
    addrs: BTreeMap<i32, String>,
    learned: Option<tokio::time::Instant>,
    /// A refresh is under way.
    refreshing: bool,
}

/// A byte stream a connection runs over: TCP, or TLS over TCP.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> Io for T {}

impl std::fmt::Debug for TcpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpTransport")
            .field("bootstrap", &self.inner.config.bootstrap_servers)
            .finish_non_exhaustive()
    }
}

impl TcpTransport {
    /// A transport for the cluster `config` names; connects lazily.
    ///
    /// A config that fails [`ClientConfig::validate`] is logged as an error, and every request
    /// then fails with [`TransportError::Config`]; [`try_new`](Self::try_new) returns the error
    /// instead.
    pub fn new(config: ClientConfig) -> Self {
        let invalid = config.validate().err();
        if let Some(e) = &invalid {
            tracing::error!(error = %e, "invalid transport config: every request will fail");
        }
        Self::build(config, invalid)
    }

    /// A transport for the cluster `config` names, once `config` passes
    /// [`ClientConfig::validate`]; connects lazily.
    ///
    /// ```
    /// use consumer_membership::ClientConfig;
    /// use consumer_membership::config::{SaslMechanism, Secret, SecurityConfig};
    /// use consumer_membership::transport::TcpTransport;
    ///
    /// // SASL credentials, but security.protocol left at PLAINTEXT.
    /// let config = ClientConfig::new("kafka-1:9092")?.with_security(
    ///     SecurityConfig::default().with_sasl(SaslMechanism::ScramSha512, "alice", Secret::new("pw")),
    /// );
    /// let err = TcpTransport::try_new(config).unwrap_err();
    /// assert_eq!(err.key, "sasl.mechanism");
    /// # Ok::<(), consumer_membership::ConfigError>(())
    /// ```
    pub fn try_new(config: ClientConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self::build(config, None))
    }

    fn build(config: ClientConfig, invalid: Option<ConfigError>) -> Self {
        if invalid.is_none() {
            for weakness in config.security.weaknesses() {
                tracing::warn!(bootstrap = ?config.bootstrap_servers, "{weakness}");
            }
        }
        Self {
            inner: Arc::new(Inner {
                config,
                invalid,
                slots: Mutex::new(HashMap::new()),
                next_address: std::sync::atomic::AtomicUsize::new(0),
                dialled: Mutex::new(HashMap::new()),
                brokers: Mutex::new(Brokers::default()),
                jitter: Mutex::new(JitterRng::from_seed(rand::random())),
                #[cfg(feature = "tls")]
                tls: std::sync::OnceLock::new(),
            }),
        }
    }

    /// The versions the broker behind `target` advertised, connecting first if needed.
    pub async fn broker_versions(
        &self,
        target: &Target,
    ) -> Result<super::wire::BrokerVersions, TransportError> {
        self.usable()?;
        let timeout = self.inner.config.request_timeout;
        Ok(self.connection(target, timeout).await?.versions().clone())
    }

    /// Drops every connection (requests in flight fail with a disconnect).
    pub fn close_all(&self) {
        self.inner.slots.lock().expect("lock").clear();
    }

    /// The brokers discovery may ask (node id and `host:port`), as the latest Metadata answer
    /// named them; empty before one came.
    pub fn known_brokers(&self) -> Vec<(i32, String)> {
        let brokers = self.inner.brokers.lock().expect("lock");
        brokers
            .addrs
            .iter()
            .map(|(id, a)| (*id, a.clone()))
            .collect()
    }

    /// The error every request fails with when the config is invalid.
    fn usable(&self) -> Result<(), TransportError> {
        match &self.inner.invalid {
            Some(e) => Err(TransportError::Config(e.clone())),
            None => Ok(()),
        }
    }

    /// Every slot, taken out of the map's lock.
    fn all_slots(&self) -> Vec<Slot> {
        let slots = self.inner.slots.lock().expect("lock");
        slots.values().map(|e| e.slot.clone()).collect()
    }

    /// Open connections (bootstrap, node and coordinator), for tests.
    #[cfg(test)]
    fn open_connections(&self) -> usize {
        self.all_slots()
            .iter()
            .filter(|s| s.try_lock().map_or(true, |c| c.is_some()))
            .count()
    }

    /// The slot of `target`'s connection, marked used now; closes idle node connections first
    /// (see [`Self::close_idle`]).
    fn slot(&self, key: &Route) -> Slot {
        let now = tokio::time::Instant::now();
        let mut slots = self.inner.slots.lock().expect("lock");
        self.close_idle(&mut slots, key, now);
        let entry = slots.entry(*key).or_insert_with(|| Entry {
            slot: Slot::default(),
            used: now,
        });
        entry.used = now;
        entry.slot.clone()
    }

    /// Marks `key`'s connection used now (a request on it ended).
    fn touch(&self, key: &Route) {
        if let Some(entry) = self.inner.slots.lock().expect("lock").get_mut(key) {
            entry.used = tokio::time::Instant::now();
        }
    }

    /// Drops the node and coordinator connections (other than `keep`'s) that carried no request
    /// for `connections.max.idle.ms`, then, while there are more than two per known broker plus
    /// [`SPARE_NODE_CONNECTIONS`], the least recently used idle one. A connection with requests
    /// in flight, or being connected, stays; a request that holds one keeps it until it ends.
    fn close_idle(
        &self,
        slots: &mut HashMap<Route, Entry>,
        keep: &Route,
        now: tokio::time::Instant,
    ) {
        let max_idle = self.inner.config.connections_max_idle;
        let idle = |key: &Route, e: &Entry| {
            key != keep
                && *key != Route::Bootstrap
                && e.slot
                    .try_lock()
                    .is_ok_and(|c| c.as_ref().is_none_or(|c| c.in_flight() == 0))
        };
        slots.retain(|key, e| !(idle(key, e) && now.saturating_duration_since(e.used) >= max_idle));
        let brokers = self
            .inner
            .brokers
            .lock()
            .expect("lock")
            .addrs
            .len()
            .max(self.inner.config.bootstrap_servers.len());
        let most = 2 * brokers + SPARE_NODE_CONNECTIONS;
        let nodes = |slots: &HashMap<Route, Entry>| {
            slots.keys().filter(|k| **k != Route::Bootstrap).count()
                + usize::from(!slots.contains_key(keep))
        };
        while nodes(slots) > most {
            let Some(oldest) = slots
                .iter()
                .filter(|(k, e)| idle(k, e))
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| *k)
            else {
                break;
            };
            tracing::debug!(?oldest, "closing the least recently used idle connection");
            slots.remove(&oldest);
        }
        let mut dialled = self.inner.dialled.lock().expect("lock");
        dialled.retain(|_, d| now.saturating_duration_since(d.failed_at) < max_idle);
    }

    async fn connection(
        &self,
        target: &Target,
        timeout: Duration,
    ) -> Result<Arc<Connection>, TransportError> {
        let key = Route::of(target);
        let slot = self.slot(&key);
        let addr = address_of(target);
        // Holding the slot while connecting makes concurrent senders share one connect (bounded
        // by the connection setup timeout, never by a request's timeout).
        let mut slot = slot.lock().await;
        if let Some(c) = slot.as_ref()
            && !c.is_failed()
            && addr.as_deref().is_none_or(|a| a == c.addr())
        {
            if addr.is_none() {
                self.refresh_brokers_if_stale(c);
            }
            return Ok(c.clone());
        }
        *slot = None;
        let conn = match addr {
            Some(addr) => {
                if matches!(target, Target::Coordinator(_))
                    && let Some(conn) = self.take_bootstrap(&addr)
                {
                    conn
                } else {
                    Arc::new(self.connect_node(&addr, timeout).await?)
                }
            }
            None => {
                let conn = Arc::new(self.connect_any(timeout).await?);
                self.refresh_brokers_if_stale(&conn);
                conn
            }
        };
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// The live bootstrap connection, when it goes to `addr`, moved out of the bootstrap
    /// slot: a new coordinator then starts on the connection FindCoordinator just used instead of
    /// a new connect and ApiVersions round trip on the rejoin path. The coordinator still gets a
    /// connection of its own (the next bootstrap request opens a new one), so a JoinGroup the
    /// broker parks never holds up Metadata or FindCoordinator (the broker reads one request
    /// per connection at a time). Skipped while the bootstrap slot is busy connecting.
    fn take_bootstrap(&self, addr: &str) -> Option<Arc<Connection>> {
        let slot = self
            .inner
            .slots
            .lock()
            .expect("lock")
            .get(&Route::Bootstrap)?
            .slot
            .clone();
        let mut slot = slot.try_lock().ok()?;
        let usable = slot
            .as_ref()
            .is_some_and(|c| !c.is_failed() && c.addr() == addr);
        if usable { slot.take() } else { None }
    }

    /// One connection to the broker at `addr` (a coordinator or a data-path node): after the
    /// address's reconnect backoff, if one is running (at most `reconnect.backoff.max.ms`), a
    /// single attempt bounded by the connection setup timeout. A failure is returned at once:
    /// the caller decides whether to look the broker up again (the Java client's
    /// `DisconnectException` for a request whose node cannot be reached).
    async fn connect_node(
        &self,
        addr: &str,
        timeout: Duration,
    ) -> Result<Connection, TransportError> {
        let started = tokio::time::Instant::now();
        if let Some(d) = self.backoff_of(addr)
            && d.retry_at > started
        {
            if d.retry_at - started >= timeout {
                return Err(TransportError::Connect {
                    addr: addr.to_owned(),
                    reason: format!("in reconnect backoff after: {}", d.last_error),
                });
            }
            tokio::time::sleep_until(d.retry_at).await;
        }
        let left = timeout.saturating_sub(started.elapsed());
        self.attempt(addr, left).await
    }

    /// A connection to any live broker, for [`Target::Bootstrap`]: the candidates of
    /// [`Self::candidates`] one after another, each attempt bounded by the connection setup
    /// timeout, an address that failed skipped until its reconnect backoff passed; until one
    /// connects or `timeout` runs out.
    async fn connect_any(&self, timeout: Duration) -> Result<Connection, TransportError> {
        let deadline = crate::transport::later(tokio::time::Instant::now(), timeout);
        let mut last = String::from("no address to connect to");
        let mut attempts = 0u32;
        loop {
            let now = tokio::time::Instant::now();
            let candidates = self.candidates();
            let ready = candidates
                .iter()
                .find(|a| self.backoff_of(a).is_none_or(|d| d.retry_at <= now));
            let addr = match ready {
                Some(a) => a.clone(),
                None => {
                    // Every candidate is backing off: wait for the first to come out of it. An
                    // attempt of this call's own is the better cause; before one, theirs.
                    if attempts == 0
                        && let Some(d) = candidates
                            .iter()
                            .filter_map(|a| self.backoff_of(a))
                            .max_by_key(|d| d.failed_at)
                    {
                        last = d.last_error;
                    }
                    let next = candidates
                        .iter()
                        .filter_map(|a| self.backoff_of(a).map(|d| d.retry_at))
                        .min();
                    match next {
                        Some(at) if at < deadline => {
                            tokio::time::sleep_until(at).await;
                            continue;
                        }
                        _ => {
                            return Err(TransportError::Connect {
                                addr: candidates.join(","),
                                reason: format!("gave up after {timeout:?}: {last}"),
                            });
                        }
                    }
                }
            };
            let left = deadline.saturating_duration_since(now);
            if left.is_zero() {
                return Err(TransportError::Connect {
                    addr: candidates.join(","),
                    reason: format!("gave up after {timeout:?}: {last}"),
                });
            }
            attempts += 1;
            match self.attempt(&addr, left).await {
                Ok(conn) => return Ok(conn),
                // A broker that answers with something broken (oversized, undecodable, no
                // common version, refused credentials) will answer the same way again.
                Err(
                    e @ (TransportError::Connect { .. }
                    | TransportError::Disconnected { .. }
                    | TransportError::Timeout { .. }),
                ) => {
                    tracing::debug!(error = %e, "connect failed, trying the next broker");
                    last = e.to_string();
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Where a bootstrap request may go, best first: brokers from the latest Metadata answer,
    /// the least loaded first (a live connection to it with the fewest requests in flight,
    /// then the others in rotation), then the configured bootstrap addresses (in rotation).
    /// Addresses in reconnect backoff stay in the list; the caller skips them until it passed.
    fn candidates(&self) -> Vec<String> {
        let known: Vec<String> = self
            .inner
            .brokers
            .lock()
            .expect("lock")
            .addrs
            .values()
            .cloned()
            .collect();
        let load = self.load_by_address();
        let start = self
            .inner
            .next_address
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let rotated = |list: &[String]| -> Vec<String> {
            let n = list.len().max(1);
            (0..list.len())
                .map(|i| list[(start + i) % n].clone())
                .collect()
        };
        let mut out = rotated(&known);
        // Stable sort: live connections by load first, the rest keep the rotation.
        out.sort_by_key(|a| load.get(a).copied().unwrap_or(usize::MAX));
        for a in rotated(&self.inner.config.bootstrap_servers) {
            if !out.contains(&a) {
                out.push(a);
            }
        }
        out
    }

    /// Requests in flight on each address this transport has a live connection to.
    fn load_by_address(&self) -> HashMap<String, usize> {
        let mut load = HashMap::new();
        for slot in self.all_slots() {
            // A slot being connected is skipped: it has nothing live to count.
            if let Ok(guard) = slot.try_lock()
                && let Some(c) = guard.as_ref()
                && !c.is_failed()
            {
                *load.entry(c.addr().to_owned()).or_insert(0) += c.in_flight();
            }
        }
        load
    }

    fn backoff_of(&self, addr: &str) -> Option<Dialled> {
        self.inner.dialled.lock().expect("lock").get(addr).cloned()
    }

    /// Records a failed connect to `addr` and starts its reconnect backoff: `reconnect.backoff.ms`
    /// doubling per failure in a row up to `reconnect.backoff.max.ms`, ±20 % jitter (the Java
    /// client's `ClusterConnectionStates`, which uses the same `ExponentialBackoff` as KIP-580).
    fn dial_failed(&self, addr: &str, error: &TransportError) {
        let cfg = &self.inner.config;
        let backoff = ExponentialBackoff::retry(cfg.reconnect_backoff, cfg.reconnect_backoff_max);
        let mut dialled = self.inner.dialled.lock().expect("lock");
        let failures = dialled.get(addr).map_or(0, |d| d.failures);
        let delay = backoff.delay(failures, &mut self.inner.jitter.lock().expect("lock"));
        tracing::debug!(%addr, failures, ?delay, %error, "connect failed; reconnect backoff");
        let now = tokio::time::Instant::now();
        dialled.insert(
            addr.to_owned(),
            Dialled {
                failures: failures.saturating_add(1),
                retry_at: crate::transport::later(now, delay),
                failed_at: now,
                last_error: error.to_string(),
            },
        );
    }

    /// One connection attempt to `addr`: TCP, TLS and SASL when configured, ApiVersions; all
    /// within the connection setup timeout (and `budget`).
    async fn attempt(&self, addr: &str, budget: Duration) -> Result<Connection, TransportError> {
        let cfg = &self.inner.config;
        let attempt_timeout = cfg.socket_connection_setup_timeout.min(budget);
        let setup = async {
            // A literal address connects at once; a name goes through the resolver (a blocking
            // getaddrinfo on tokio's blocking pool, a thread start on first use).
            let stream = match addr.parse::<std::net::SocketAddr>() {
                Ok(literal) => TcpStream::connect(literal).await,
                Err(_) => TcpStream::connect(addr).await,
            }
            .map_err(|e| TransportError::Connect {
                addr: addr.to_owned(),
                reason: e.to_string(),
            })?;
            let _ = stream.set_nodelay(true);
            tracing::debug!(%addr, "connected");
            let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).to_owned();
            let io = self.secure(&host, stream).await?;
            let conn = Connection::establish(
                io,
                addr.to_owned(),
                cfg.client_id.clone(),
                cfg.max_response_size,
                attempt_timeout,
            )
            .await?;
            self.authenticate(&conn, attempt_timeout).await?;
            Ok(conn)
        };
        let result = match tokio::time::timeout(attempt_timeout, setup).await {
            Ok(result) => result,
            Err(_) => Err(TransportError::Connect {
                addr: addr.to_owned(),
                reason: format!("no answer to the connection setup within {attempt_timeout:?}"),
            }),
        };
        match &result {
            Ok(_) => {
                self.inner.dialled.lock().expect("lock").remove(addr);
            }
            Err(e) => self.dial_failed(addr, e),
        }
        // The setup's own failures surface as connect failures of this address, except those
        // that say something about the broker's answers (no common version, bad credentials).
        result.map_err(|e| match e {
            TransportError::Disconnected { addr, reason } => {
                TransportError::Connect { addr, reason }
            }
            TransportError::Timeout { api, timeout } => TransportError::Connect {
                addr: addr.to_owned(),
                reason: format!("no answer to the connection setup ({api:?}) within {timeout:?}"),
            },
            other => other,
        })
    }

    /// Reads the broker list over `conn` (a Metadata request for no topic) when none was read
    /// yet or the last is older than `metadata.max.age.ms`; in the background, so the request
    /// that opened the connection is not held up. Classic members that do not lead never ask
    /// for Metadata themselves, and discovery needs the list once the bootstrap broker is gone.
    fn refresh_brokers_if_stale(&self, conn: &Arc<Connection>) {
        {
            let mut b = self.inner.brokers.lock().expect("lock");
            let fresh = b.learned.is_some_and(|at| at.elapsed() < BROKERS_MAX_AGE);
            if fresh || b.refreshing {
                return;
            }
            b.refreshing = true;
        }
        let this = self.clone();
        let conn = conn.clone();
        let timeout = self.inner.config.request_timeout;
        tokio::spawn(async move {
            let request = Request::Metadata {
                topics: Some(Vec::new()),
                allow_auto_topic_creation: false,
            };
            match conn.send(&request, timeout).await {
                Ok(response) => this.learn(&response),
                Err(e) => tracing::debug!(error = %e, "reading the broker list failed"),
            }
            this.inner.brokers.lock().expect("lock").refreshing = false;
        });
    }

    /// Takes the broker list from a Metadata answer.
    fn learn(&self, response: &Response) {
        let ResponseBody::Kafka(ResponseKind::Metadata(r)) = &response.body else {
            return;
        };
        let addrs: BTreeMap<i32, String> = r
            .brokers
            .iter()
            .filter(|b| b.port > 0 && b.port <= i32::from(u16::MAX) && !b.host.is_empty())
            .map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port)))
            .collect();
        if addrs.is_empty() {
            return;
        }
        let mut brokers = self.inner.brokers.lock().expect("lock");
        if brokers.addrs != addrs {
            tracing::debug!(?addrs, "brokers known for discovery");
        }
        brokers.addrs = addrs;
        brokers.learned = Some(tokio::time::Instant::now());
    }
}

impl TcpTransport {
    /// TLS when `security.protocol` asks for it.
    async fn secure(&self, host: &str, stream: TcpStream) -> Result<Box<dyn Io>, TransportError> {
        use crate::config::SecurityProtocol::{SaslSsl, Ssl};
        if !matches!(self.inner.config.security.protocol, Ssl | SaslSsl) {
            return Ok(Box::new(stream));
        }
        #[cfg(feature = "tls")]
        {
            let connector = self
                .inner
                .tls
                .get_or_init(|| super::tls::connector(&self.inner.config.security))
                .clone()?;
            Ok(Box::new(
                super::tls::handshake(&connector, host, stream).await?,
            ))
        }
        #[cfg(not(feature = "tls"))]
        {
            let _ = (host, stream);
            Err(TransportError::Tls {
                reason: "security.protocol needs TLS, but this build has no `tls` feature".into(),
            })
        }
    }

    /// SASL when `security.protocol` asks for it.
    async fn authenticate(
        &self,
        conn: &Connection,
        timeout: Duration,
    ) -> Result<(), TransportError> {
        use crate::config::SecurityProtocol::{SaslPlaintext, SaslSsl};
        let security = &self.inner.config.security;
        if !matches!(security.protocol, SaslPlaintext | SaslSsl) {
            return Ok(());
        }
        let (Some(mechanism), Some(user), Some(password)) = (
            security.sasl_mechanism,
            &security.sasl_username,
            &security.sasl_password,
        ) else {
            return Err(TransportError::Authentication {
                mechanism: security.sasl_mechanism.map_or("none", |m| m.name()),
                reason: "sasl.mechanism, sasl.username and sasl.password are required".into(),
            });
        };
        if let Some(lifetime) =
            super::sasl::authenticate(conn, mechanism, user, password, timeout).await?
        {
            conn.set_session_lifetime(lifetime);
        }
        Ok(())
    }
}

impl Transport for TcpTransport {
    async fn send(
        &self,
        target: Target,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, TransportError> {
        self.usable()?;
        let started = tokio::time::Instant::now();
        let conn = self
            .connection(&target, timeout)
            .await
            .map_err(|e| at_broker(e, self.last_dialled(&target)))?;
        let left = timeout.saturating_sub(started.elapsed());
        let response = conn
            .send(&request, left.max(Duration::from_millis(1)))
            .await;
        self.touch(&Route::of(&target));
        let response = response?;
        self.learn(&response);
        Ok(response)
    }
}

/// The address of `target`'s broker (none for [`Target::Bootstrap`]).
fn address_of(target: &Target) -> Option<String> {
    target.broker().map(Broker::addr)
}

/// A failed connection setup's `error` naming `addr`, when it does not name its broker itself.
fn at_broker(error: TransportError, addr: Option<String>) -> TransportError {
    match addr {
        Some(addr) => error.at_broker(&addr),
        None => error,
    }
}

impl TcpTransport {
    /// The address a connection to `target` was tried at last: the broker's own, or for
    /// [`Target::Bootstrap`] the address whose connect failed most recently.
    fn last_dialled(&self, target: &Target) -> Option<String> {
        address_of(target).or_else(|| {
            let dialled = self.inner.dialled.lock().expect("lock");
            let last = dialled.iter().max_by_key(|(_, d)| d.failed_at);
            last.map(|(a, _)| a.clone())
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use bytes::Bytes;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::{
        ApiKey, ApiVersionsResponse, FindCoordinatorResponse, RequestKind,
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::config::{SaslMechanism, Secret, SecurityConfig, SecurityProtocol};
    use crate::request::{Api, CoordinatorKeyType, RequestBody};
    use crate::transport::wire;

    /// Connections the fake broker has accepted and not yet seen closed, and all it accepted.
    #[derive(Default)]
    struct Counts {
        open: AtomicUsize,
        accepted: AtomicUsize,
    }

    /// A broker on a local port answering ApiVersions and FindCoordinator on any connection.
    async fn fake_broker() -> (u16, Arc<Counts>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let counts = Arc::new(Counts::default());
        let c = counts.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                c.open.fetch_add(1, Ordering::SeqCst);
                c.accepted.fetch_add(1, Ordering::SeqCst);
                let c = c.clone();
                tokio::spawn(async move {
                    let _ = serve(socket).await;
                    c.open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        (port, counts)
    }

    async fn serve(mut socket: TcpStream) -> std::io::Result<()> {
        loop {
            let mut size = [0u8; 4];
            socket.read_exact(&mut size).await?;
            let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
            socket.read_exact(&mut frame).await?;
            let (h, body) = wire::decode_request(Bytes::from(frame)).expect("a valid request");
            let answer = match body {
                RequestBody::Kafka(RequestKind::ApiVersions(_)) => ResponseKind::ApiVersions(
                    ApiVersionsResponse::default().with_api_keys(
                        [(ApiKey::ApiVersions, 4), (ApiKey::FindCoordinator, 6)]
                            .into_iter()
                            .map(|(k, hi)| {
                                ApiVersion::default()
                                    .with_api_key(k as i16)
                                    .with_max_version(hi)
                            })
                            .collect(),
                    ),
                ),
                _ => ResponseKind::FindCoordinator(FindCoordinatorResponse::default()),
            };
            let api = Api::from_key(h.request_api_key).unwrap();
            let frame = wire::encode_response(
                &ResponseBody::Kafka(answer),
                api,
                h.request_api_version,
                h.correlation_id,
            )
            .unwrap();
            socket.write_all(&frame).await?;
        }
    }

    fn find() -> Request {
        Request::FindCoordinator {
            key_type: CoordinatorKeyType::Group,
            keys: vec!["g".into()],
        }
    }

    fn coordinator(node_id: i32, port: u16) -> Target {
        Target::Coordinator(Broker {
            node_id,
            host: "127.0.0.1".into(),
            port,
        })
    }

    /// Waits (up to 5 s) until the broker sees at most `most` connections open.
    async fn open_at_broker_settles(counts: &Counts, most: usize) -> usize {
        for _ in 0..500 {
            let open = counts.open.load(Ordering::SeqCst);
            if open <= most {
                return open;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        counts.open.load(Ordering::SeqCst)
    }

    const T: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn a_new_coordinator_node_id_each_time_keeps_the_connections_bounded() {
        let (port, counts) = fake_broker().await;
        let t = TcpTransport::try_new(ClientConfig::new(&format!("127.0.0.1:{port}")).unwrap())
            .unwrap();
        // One bootstrap address and no broker list: two per broker plus the spare ones.
        let most = 2 + SPARE_NODE_CONNECTIONS;
        for node in 0..40 {
            t.send(coordinator(node, port), find(), T).await.unwrap();
            assert!(t.open_connections() <= most, "node {node}");
        }
        assert_eq!(counts.accepted.load(Ordering::SeqCst), 40);
        let open = open_at_broker_settles(&counts, most).await;
        assert!(open <= most, "{open} connections open at the broker");
        // The most recent node ids still have their connections.
        t.send(coordinator(39, port), find(), T).await.unwrap();
        assert_eq!(counts.accepted.load(Ordering::SeqCst), 40);
    }

    #[tokio::test]
    async fn a_node_connection_idle_for_connections_max_idle_is_closed() {
        let (port, counts) = fake_broker().await;
        let config = ClientConfig::new(&format!("127.0.0.1:{port}"))
            .unwrap()
            .with_connections_max_idle(Duration::from_millis(300));
        let t = TcpTransport::try_new(config).unwrap();
        t.send(coordinator(1, port), find(), T).await.unwrap();
        t.send(
            Target::Node(Broker {
                node_id: 2,
                host: "127.0.0.1".into(),
                port,
            }),
            find(),
            T,
        )
        .await
        .unwrap();
        assert_eq!(counts.open.load(Ordering::SeqCst), 2);
        tokio::time::sleep(Duration::from_millis(400)).await;
        t.send(coordinator(3, port), find(), T).await.unwrap();
        assert_eq!(t.open_connections(), 1);
        assert_eq!(open_at_broker_settles(&counts, 1).await, 1);
        // Within the idle time a connection is kept.
        t.send(coordinator(3, port), find(), T).await.unwrap();
        assert_eq!(counts.accepted.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn security_settings_without_their_protocol_are_a_typed_error_not_a_plain_connection() {
        let (port, counts) = fake_broker().await;
        let bootstrap = format!("127.0.0.1:{port}");
        let cases = [
            (
                SecurityConfig::default().with_sasl(
                    SaslMechanism::ScramSha512,
                    "alice",
                    Secret::new("pw"),
                ),
                "sasl.mechanism",
                "SASL_PLAINTEXT or SASL_SSL",
            ),
            (
                SecurityConfig::default().with_ssl_ca_location("/etc/kafka/ca.pem"),
                "ssl.ca.location",
                "SSL or SASL_SSL",
            ),
            (
                SecurityConfig::default().with_ssl_client_certificate("c.pem", "k.pem"),
                "ssl.certificate.location",
                "SSL or SASL_SSL",
            ),
        ];
        for (security, key, hint) in cases {
            let config = ClientConfig::new(&bootstrap)
                .unwrap()
                .with_security(security);
            let e = TcpTransport::try_new(config.clone()).unwrap_err();
            assert_eq!(e.key, key);
            assert!(e.rule.contains("PLAINTEXT") && e.rule.contains(hint), "{e}");
            let t = TcpTransport::new(config);
            let err = t.send(Target::Bootstrap, find(), T).await.unwrap_err();
            assert!(
                matches!(&err, TransportError::Config(c) if c.key == key),
                "{err:?}"
            );
            assert!(err.never_sent() && err.is_persistent());
            let err = t.broker_versions(&Target::Bootstrap).await.unwrap_err();
            assert!(matches!(err, TransportError::Config(_)), "{err:?}");
        }
        assert_eq!(
            counts.accepted.load(Ordering::SeqCst),
            0,
            "connected anyway"
        );
    }

    /// Log lines at WARN and above, as text.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn warnings_of_building(security: SecurityConfig) -> String {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let config = ClientConfig::new("127.0.0.1:9092")
                .unwrap()
                .with_security(security);
            let t = TcpTransport::new(config);
            // Clones share the transport: no second warning.
            let _ = t.clone();
        });
        String::from_utf8(captured.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn weakened_security_warns_once_at_construction() {
        let sasl = |protocol| {
            SecurityConfig::default().with_protocol(protocol).with_sasl(
                SaslMechanism::Plain,
                "alice",
                Secret::new("pw"),
            )
        };
        let log = warnings_of_building(
            SecurityConfig::default()
                .with_protocol(SecurityProtocol::Ssl)
                .with_ssl_verify_hostname(false),
        );
        assert_eq!(log.lines().count(), 1, "{log}");
        assert!(log.contains("WARN") && log.contains("ssl.endpoint.identification.algorithm"));
        let log = warnings_of_building(sasl(SecurityProtocol::SaslPlaintext));
        assert_eq!(log.lines().count(), 1, "{log}");
        assert!(log.contains("cleartext") && !log.contains("pw\""), "{log}");
        // Neither weakness: no warning.
        assert_eq!(warnings_of_building(sasl(SecurityProtocol::SaslSsl)), "");
        assert_eq!(warnings_of_building(SecurityConfig::default()), "");
    }
}
