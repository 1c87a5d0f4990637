//! A TCP fault proxy between a client and Kafka brokers on loopback, for the real-broker tests.
//!
//! Every client connection gets its own upstream connection. The proxy reads whole frames
//! (`[i32 size][body]`) in both directions, so it knows which API each request is (api key at
//! bytes 4..6 of the frame), matches answers to requests by correlation id, and can:
//!
//! - **stall** a connection: client->broker frames are held in the proxy instead of forwarded
//!   (now, after the next N requests, or at the first request of a given API), and **release**
//!   them later, in order;
//! - **drop answers** (broker->client) of a connection;
//! - keep a connection's upstream side open after the **client closed** it: held frames stay
//!   held, and a later release still delivers them to the broker on that old upstream
//!   connection, whose answers are then recorded and dropped. This is "bytes already delivered on
//!   a connection the client closed are still processed";
//! - apply a policy to **new connections** (the global switch).
//!
//! Advertised addresses: FindCoordinator and Metadata answers name the brokers' real host:port,
//! so a client would bypass the proxy for every connection but the bootstrap one. The proxy
//! decodes those answers (kafka_protocol), replaces each broker address by the address of a
//! proxy listener for it (created on first sight), and re-encodes them. Every path to every
//! broker thus goes through the proxy, whatever the client does with the addresses.
//!
//! Everything that passes is recorded with a timestamp ([`Proxy::records`], [`Proxy::log_text`]).
//! Odd input (a negative or huge size prefix, a short frame, an unknown correlation id, an
//! undecodable body) never panics: framing errors close that connection, decoding errors only
//! lose the detail in the record (the bytes are forwarded unchanged).
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use consumer_membership::request::{Api, RequestBody, ResponseBody};
use consumer_membership::transport::wire;
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// Frames larger than this close the connection (the broker's socket.request.max.bytes is 100 MiB).
const MAX_FRAME: usize = 100 * 1024 * 1024;
/// How long the upstream side of a client-closed connection stays open, after its last held
/// frame was delivered, waiting for the answers.
const LINGER: Duration = Duration::from_secs(30);

/// A connection's id: `c1`, `c2`, ... in accept order.
pub type ConnId = u64;

/// What a new connection starts with (see [`Proxy::new_connections`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnPolicy {
    /// Forward this many requests, then hold the rest.
    pub stall_after: Option<usize>,
    /// Hold from the first request of this API on.
    pub stall_at_api: Option<ApiKey>,
    /// Drop every answer.
    pub drop_answers: bool,
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum What {
    /// A client connected (and the upstream connection was opened).
    Accepted,
    /// A request frame arrived from the client (`detail` says "held" when it is not forwarded
    /// at once).
    Received,
    /// A request frame was written to the broker.
    Forwarded,
    /// An answer arrived from the broker and was passed on to the client.
    Answered,
    /// An answer arrived from the broker and was dropped (answers dropped, or client gone).
    AnswerDropped,
    /// The client closed its side.
    ClientClosed,
    /// The broker closed its side (or the upstream connection failed).
    UpstreamClosed,
    /// The connection started holding requests.
    Stalled,
    /// Held requests were released.
    Released,
    /// A test's note (conn 0).
    Note,
}

/// One line of the log.
#[derive(Debug, Clone)]
pub struct Record {
    /// Since the proxy started.
    pub at: Duration,
    pub conn: ConnId,
    pub what: What,
    pub api: Option<ApiKey>,
    pub version: i16,
    pub correlation: i32,
    /// Of an answer: the first non-zero error code in it (0 if none), when decodable.
    pub error_code: Option<i16>,
    /// Decoded fields worth printing (member id, generation, ...).
    pub detail: String,
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.at.as_secs_f64();
        if self.what == What::Note {
            return write!(f, "{t:>8.3}s      -- {}", self.detail);
        }
        let arrow = match self.what {
            What::Received => "c->p",
            What::Forwarded => "p->b",
            What::Answered => "p->c",
            What::AnswerDropped => "b->p",
            _ => "    ",
        };
        write!(f, "{t:>8.3}s c{:<3} {arrow} {:?}", self.conn, self.what)?;
        if let Some(api) = self.api {
            write!(f, " {api:?} v{} #{}", self.version, self.correlation)?;
        }
        if let Some(code) = self.error_code {
            write!(f, " error={code}")?;
        }
        if !self.detail.is_empty() {
            write!(f, " {}", self.detail)?;
        }
        Ok(())
    }
}

/// A connection as the test sees it.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub id: ConnId,
    /// The broker address this connection goes to.
    pub upstream: String,
    pub client_open: bool,
    pub upstream_open: bool,
    pub stalled: bool,
    /// Requests held in the proxy.
    pub held: usize,
    /// Requests forwarded so far.
    pub forwarded: usize,
    /// Requests forwarded and not answered yet.
    pub in_flight: usize,
}

struct Frame {
    bytes: Bytes,
    api: Option<ApiKey>,
    /// The API, also of the APIs kafka-protocol lacks (the streams-group ones).
    any_api: Option<Api>,
    version: i16,
    correlation: i32,
}

struct Conn {
    upstream: String,
    client_open: bool,
    upstream_open: bool,
    stalled: bool,
    /// Stall once `forwarded` reaches this.
    stall_at_count: Option<usize>,
    stall_at_api: Option<ApiKey>,
    drop_answers: bool,
    queue: VecDeque<Frame>,
    forwarded: usize,
    /// Correlation id -> (api, version) of forwarded requests not answered yet.
    pending: HashMap<i32, (Api, i16)>,
    /// Wakes the upstream writer.
    wake: Arc<Notify>,
}

#[derive(Default)]
struct State {
    /// Upstream address -> local listener address.
    listeners: BTreeMap<String, String>,
    conns: BTreeMap<ConnId, Conn>,
    next_conn: ConnId,
    policy: ConnPolicy,
    /// One answer to drop, then reset its client connection (see [`Proxy::reset_on_answer`]).
    reset_rule: Option<ResetRule>,
    /// When the last reset rule fired (the answer dropped).
    reset_fired_at: Option<Instant>,
    records: Vec<Record>,
    tasks: Vec<JoinHandle<()>>,
}

struct Inner {
    t0: Instant,
    state: Mutex<State>,
}

/// Which answer [`Proxy::reset_on_answer`] drops.
type ResetRule = (Api, Box<dyn Fn(&ResponseBody) -> bool + Send>);

/// The proxy. Dropping it stops every listener and connection.
pub struct Proxy {
    inner: Arc<Inner>,
    bootstrap: String,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let tasks = std::mem::take(&mut lock(&self.inner).tasks);
        for t in tasks {
            t.abort();
        }
    }
}

fn lock(inner: &Inner) -> std::sync::MutexGuard<'_, State> {
    // A panicking test thread must not turn every later call into a second panic.
    inner.state.lock().unwrap_or_else(|e| e.into_inner())
}

impl Proxy {
    /// A proxy in front of `upstream` (a comma-separated bootstrap list): one listener per
    /// entry. Must run inside a tokio runtime.
    pub async fn start(upstream: &str) -> std::io::Result<Proxy> {
        let inner = Arc::new(Inner {
            t0: Instant::now(),
            state: Mutex::new(State {
                next_conn: 1,
                ..State::default()
            }),
        });
        let mut local = Vec::new();
        for addr in upstream.split(',').map(str::trim).filter(|a| !a.is_empty()) {
            local.push(listener_for(&inner, addr)?);
        }
        if local.is_empty() {
            return Err(std::io::Error::other("no upstream address"));
        }
        Ok(Proxy {
            inner,
            bootstrap: local.join(","),
        })
    }

    /// The proxy's bootstrap list, in the order of the upstream list.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// Since the proxy started.
    pub fn elapsed(&self) -> Duration {
        self.inner.t0.elapsed()
    }

    /// Applies `policy` to connections accepted from now on.
    pub fn new_connections(&self, policy: ConnPolicy) {
        lock(&self.inner).policy = policy;
    }

    /// Holds `conn`'s requests from now on.
    pub fn stall(&self, conn: ConnId) {
        self.update(conn, |c| {
            c.stall_at_count = Some(c.forwarded);
        });
    }

    /// Forwards `n` more requests of `conn`, then holds the rest.
    pub fn stall_after(&self, conn: ConnId, n: usize) {
        self.update(conn, |c| {
            c.stall_at_count = Some(c.forwarded + n);
        });
    }

    /// Holds `conn`'s requests from the next one of `api` on.
    pub fn stall_at_api(&self, conn: ConnId, api: ApiKey) {
        self.update(conn, |c| c.stall_at_api = Some(api));
    }

    /// Forwards `conn`'s held requests, in order, and stops holding (also after the client
    /// closed the connection: they go to the broker on the old upstream connection).
    pub fn release(&self, conn: ConnId) {
        release(&self.inner, conn, None);
    }

    /// Forwards the first `n` of `conn`'s held requests and keeps holding the rest.
    pub fn release_some(&self, conn: ConnId, n: usize) {
        release(&self.inner, conn, Some(n));
    }

    /// Drops (or stops dropping) `conn`'s answers.
    pub fn drop_answers(&self, conn: ConnId, on: bool) {
        self.update(conn, |c| c.drop_answers = on);
    }

    /// Drops (or stops dropping) every answer: on the connections so far and on those accepted
    /// from now on (the rest of the new-connection policy stays).
    /// The next answer of `api` (any connection) for which `matches` holds is dropped and its
    /// client connection reset at once, as if the connection broke after the broker processed
    /// the request and before its answer arrived: "exactly that answer is lost". The rest of
    /// that connection's answers are dropped too (the client no longer has the connection).
    /// One shot; [`Proxy::reset_rule_pending`] says whether it fired.
    pub fn reset_on_answer(
        &self,
        api: Api,
        matches: impl Fn(&ResponseBody) -> bool + Send + 'static,
    ) {
        lock(&self.inner).reset_rule = Some((api, Box::new(matches)));
    }

    /// Whether a [`reset_on_answer`](Self::reset_on_answer) rule waits for its answer.
    pub fn reset_rule_pending(&self) -> bool {
        lock(&self.inner).reset_rule.is_some()
    }

    /// When the last [`reset_on_answer`](Self::reset_on_answer) rule fired, as the proxy saw
    /// it (a caller polling for it may notice later, on a busy machine).
    #[allow(dead_code)]
    pub fn reset_fired_at(&self) -> Option<Instant> {
        lock(&self.inner).reset_fired_at
    }

    pub fn drop_all_answers(&self, on: bool) {
        lock(&self.inner).policy.drop_answers = on;
        for c in self.connections() {
            self.drop_answers(c.id, on);
        }
    }

    /// Every connection so far.
    pub fn connections(&self) -> Vec<ConnInfo> {
        lock(&self.inner)
            .conns
            .iter()
            .map(|(&id, c)| ConnInfo {
                id,
                upstream: c.upstream.clone(),
                client_open: c.client_open,
                upstream_open: c.upstream_open,
                stalled: c.stalled,
                held: c.queue.len(),
                forwarded: c.forwarded,
                in_flight: c.pending.len(),
            })
            .collect()
    }

    /// Everything recorded so far.
    pub fn records(&self) -> Vec<Record> {
        lock(&self.inner).records.clone()
    }

    /// Adds a line of the test's own to the log.
    pub fn note(&self, text: impl Into<String>) {
        self.record(0, What::Note, None, text.into());
    }

    /// The log, one record a line.
    pub fn log_text(&self) -> String {
        let mut out = String::new();
        for r in lock(&self.inner).records.iter() {
            out.push_str(&r.to_string());
            out.push('\n');
        }
        out
    }

    /// Waits until a record from index `from` on satisfies `pred`; returns its index and it.
    pub async fn wait_for(
        &self,
        from: usize,
        timeout: Duration,
        pred: impl Fn(&Record) -> bool,
    ) -> Option<(usize, Record)> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            {
                let s = lock(&self.inner);
                if let Some((i, r)) = s
                    .records
                    .iter()
                    .enumerate()
                    .skip(from)
                    .find(|(_, r)| pred(r))
                {
                    return Some((i, r.clone()));
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// How many records there are (a `from` for [`wait_for`](Self::wait_for)).
    pub fn records_len(&self) -> usize {
        lock(&self.inner).records.len()
    }

    fn update<R>(&self, conn: ConnId, f: impl FnOnce(&mut Conn) -> R) -> Option<R> {
        let mut s = lock(&self.inner);
        let c = s.conns.get_mut(&conn)?;
        let r = f(c);
        c.wake.notify_one();
        Some(r)
    }

    fn record(&self, conn: ConnId, what: What, api: Option<ApiKey>, detail: String) {
        push(&self.inner, conn, what, api, 0, 0, None, detail);
    }
}

/// Stops holding `conn`'s requests (after `n` more, if given); the log line comes first.
fn release(inner: &Inner, conn: ConnId, n: Option<usize>) {
    let Some(held) = lock(inner).conns.get(&conn).map(|c| c.queue.len()) else {
        return;
    };
    let detail = match n {
        Some(n) => format!("{} of {held} held request(s)", n.min(held)),
        None => format!("{held} held request(s)"),
    };
    push(inner, conn, What::Released, None, 0, 0, None, detail);
    let mut s = lock(inner);
    if let Some(c) = s.conns.get_mut(&conn) {
        c.stalled = false;
        c.stall_at_count = n.map(|n| c.forwarded + n);
        c.stall_at_api = None;
        c.wake.notify_one();
    }
}

#[allow(clippy::too_many_arguments)]
fn push(
    inner: &Inner,
    conn: ConnId,
    what: What,
    api: Option<ApiKey>,
    version: i16,
    correlation: i32,
    error_code: Option<i16>,
    detail: String,
) {
    let at = inner.t0.elapsed();
    lock(inner).records.push(Record {
        at,
        conn,
        what,
        api,
        version,
        correlation,
        error_code,
        detail,
    });
}

/// The local address of the listener for `upstream`, created (and its acceptor spawned) on
/// first use.
fn listener_for(inner: &Arc<Inner>, upstream: &str) -> std::io::Result<String> {
    if let Some(local) = lock(inner).listeners.get(upstream) {
        return Ok(local.clone());
    }
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    std_listener.set_nonblocking(true)?;
    let local = std_listener.local_addr()?.to_string();
    let listener = TcpListener::from_std(std_listener)?;
    let mut s = lock(inner);
    if let Some(existing) = s.listeners.get(upstream) {
        // Another task created one meanwhile; this one is dropped unused.
        return Ok(existing.clone());
    }
    s.listeners.insert(upstream.to_owned(), local.clone());
    let task = tokio::spawn(accept_loop(inner.clone(), listener, upstream.to_owned()));
    s.tasks.push(task);
    Ok(local)
}

async fn accept_loop(inner: Arc<Inner>, listener: TcpListener, upstream: String) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let task = tokio::spawn(serve(inner.clone(), client, upstream.clone()));
        lock(&inner).tasks.push(task);
    }
}

async fn serve(inner: Arc<Inner>, client: TcpStream, upstream: String) {
    let (id, wake) = {
        let mut s = lock(&inner);
        let id = s.next_conn;
        s.next_conn += 1;
        let policy = s.policy;
        let wake = Arc::new(Notify::new());
        s.conns.insert(
            id,
            Conn {
                upstream: upstream.clone(),
                client_open: true,
                upstream_open: false,
                stalled: false,
                stall_at_count: policy.stall_after,
                stall_at_api: policy.stall_at_api,
                drop_answers: policy.drop_answers,
                queue: VecDeque::new(),
                forwarded: 0,
                pending: HashMap::new(),
                wake: wake.clone(),
            },
        );
        (id, wake)
    };
    let up = match tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(&upstream)).await
    {
        Ok(Ok(up)) => up,
        Ok(Err(e)) => return closed_before_start(&inner, id, format!("connect {upstream}: {e}")),
        Err(_) => return closed_before_start(&inner, id, format!("connect {upstream}: timeout")),
    };
    let _ = client.set_nodelay(true);
    let _ = up.set_nodelay(true);
    if let Some(c) = lock(&inner).conns.get_mut(&id) {
        c.upstream_open = true;
    }
    push(
        &inner,
        id,
        What::Accepted,
        None,
        0,
        0,
        None,
        format!("to {upstream}"),
    );
    let (client_rd, client_wr) = client.into_split();
    let (up_rd, up_wr) = up.into_split();
    let tasks = [
        tokio::spawn(client_reader(inner.clone(), id, client_rd)),
        tokio::spawn(upstream_writer(inner.clone(), id, up_wr, wake)),
        tokio::spawn(upstream_reader(inner.clone(), id, up_rd, client_wr)),
    ];
    lock(&inner).tasks.extend(tasks);
}

fn closed_before_start(inner: &Inner, id: ConnId, reason: String) {
    if let Some(c) = lock(inner).conns.get_mut(&id) {
        c.client_open = false;
    }
    push(inner, id, What::UpstreamClosed, None, 0, 0, None, reason);
    // Dropping the client stream closes it: the client sees the broker as unreachable.
}

/// Reads one frame (size prefix included). `Ok(None)` on a clean end before a frame.
async fn read_frame<R: AsyncReadExt + Unpin>(rd: &mut R) -> Result<Option<Bytes>, String> {
    let mut size = [0u8; 4];
    match rd.read(&mut size[..1]).await {
        Ok(0) => return Ok(None),
        Ok(_) => {}
        Err(e) => return Err(e.to_string()),
    }
    rd.read_exact(&mut size[1..])
        .await
        .map_err(|e| format!("truncated size prefix: {e}"))?;
    let n = i32::from_be_bytes(size);
    if n < 0 || n as usize > MAX_FRAME {
        return Err(format!("bad frame size {n}"));
    }
    let mut buf = BytesMut::zeroed(4 + n as usize);
    buf[..4].copy_from_slice(&size);
    rd.read_exact(&mut buf[4..])
        .await
        .map_err(|e| format!("truncated frame of {n} bytes: {e}"))?;
    Ok(Some(buf.freeze()))
}

fn i16_at(b: &[u8], at: usize) -> Option<i16> {
    b.get(at..at + 2).map(|x| i16::from_be_bytes([x[0], x[1]]))
}

fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    b.get(at..at + 4)
        .map(|x| i32::from_be_bytes([x[0], x[1], x[2], x[3]]))
}

/// Member fields of a group request, for the log.
fn describe_request(frame: &Bytes) -> String {
    let Ok((_, body)) = wire::decode_request(frame.slice(4..)) else {
        return String::new();
    };
    match body {
        RequestBody::Kafka(RequestKind::JoinGroup(r)) => format!(
            "member_id={:?} instance={:?}",
            r.member_id.as_str(),
            r.group_instance_id.as_deref()
        ),
        RequestBody::Kafka(RequestKind::SyncGroup(r)) => format!(
            "member_id={:?} generation={}",
            r.member_id.as_str(),
            r.generation_id
        ),
        RequestBody::Kafka(RequestKind::Heartbeat(r)) => format!(
            "member_id={:?} generation={}",
            r.member_id.as_str(),
            r.generation_id
        ),
        RequestBody::Kafka(RequestKind::OffsetCommit(r)) => format!(
            "member_id={:?} generation={}",
            r.member_id.as_str(),
            r.generation_id_or_member_epoch
        ),
        RequestBody::Kafka(RequestKind::ConsumerGroupHeartbeat(r)) => format!(
            "member_id={:?} epoch={}",
            r.member_id.as_str(),
            r.member_epoch
        ),
        RequestBody::Kafka(RequestKind::FindCoordinator(r)) => {
            let keys: Vec<&str> = r.coordinator_keys.iter().map(|k| k.as_str()).collect();
            format!("key={:?} keys={keys:?}", r.key.as_str())
        }
        _ => String::new(),
    }
}

/// The first non-zero error code of an answer (0 if none) and fields worth printing.
pub fn describe_response(body: &ResponseBody) -> (Option<i16>, String) {
    fn first(codes: impl IntoIterator<Item = i16>) -> i16 {
        codes.into_iter().find(|c| *c != 0).unwrap_or(0)
    }
    if let ResponseBody::StreamsGroupHeartbeat(r) = body {
        let active = r.active_tasks.as_ref().map(|ts| {
            ts.iter()
                .map(|t| format!("{}:{:?}", t.subtopology_id.as_str(), t.partitions))
                .collect::<Vec<_>>()
        });
        return (
            Some(r.error_code),
            format!(
                "member_id={:?} epoch={} active={active:?}",
                r.member_id.as_str(),
                r.member_epoch
            ),
        );
    }
    let ResponseBody::Kafka(body) = body else {
        return (None, String::new());
    };
    match body {
        ResponseKind::JoinGroup(r) => (
            Some(r.error_code),
            format!(
                "member_id={:?} generation={} leader={:?}",
                r.member_id.as_str(),
                r.generation_id,
                r.leader.as_str()
            ),
        ),
        ResponseKind::SyncGroup(r) => (Some(r.error_code), String::new()),
        ResponseKind::Heartbeat(r) => (Some(r.error_code), String::new()),
        ResponseKind::LeaveGroup(r) => (
            Some(first(
                std::iter::once(r.error_code).chain(r.members.iter().map(|m| m.error_code)),
            )),
            String::new(),
        ),
        ResponseKind::OffsetCommit(r) => (
            Some(first(
                r.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
            )),
            String::new(),
        ),
        ResponseKind::OffsetFetch(r) => (
            Some(first(
                std::iter::once(r.error_code).chain(r.groups.iter().map(|g| g.error_code)),
            )),
            String::new(),
        ),
        ResponseKind::FindCoordinator(r) => {
            let code = first(
                std::iter::once(r.error_code).chain(r.coordinators.iter().map(|c| c.error_code)),
            );
            (Some(code), String::new())
        }
        ResponseKind::ConsumerGroupHeartbeat(r) => (
            Some(r.error_code),
            format!(
                "member_id={:?} epoch={}",
                r.member_id.as_deref().unwrap_or(""),
                r.member_epoch
            ),
        ),
        _ => (None, String::new()),
    }
}

/// Replaces every broker address in a FindCoordinator or Metadata answer by the proxy's listener
/// for it; `true` if anything changed.
fn rewrite_addresses(inner: &Arc<Inner>, body: &mut ResponseBody) -> Result<Vec<String>, String> {
    let mut changes = Vec::new();
    let mut map = |host: &mut kafka_protocol::protocol::StrBytes, port: &mut i32| {
        if host.is_empty() || *port <= 0 {
            return Ok(());
        }
        let upstream = format!("{}:{}", host.as_str(), port);
        let local = listener_for(inner, &upstream).map_err(|e| e.to_string())?;
        let (h, p) = local.rsplit_once(':').ok_or("listener address")?;
        let p: i32 = p.parse().map_err(|_| "listener port")?;
        changes.push(format!("{upstream}=>{local}"));
        *host = kafka_protocol::protocol::StrBytes::from_string(h.to_owned());
        *port = p;
        Ok::<(), String>(())
    };
    let ResponseBody::Kafka(body) = body else {
        return Ok(changes);
    };
    match body {
        ResponseKind::FindCoordinator(r) => {
            map(&mut r.host, &mut r.port)?;
            for c in &mut r.coordinators {
                map(&mut c.host, &mut c.port)?;
            }
        }
        ResponseKind::Metadata(r) => {
            for b in &mut r.brokers {
                map(&mut b.host, &mut b.port)?;
            }
        }
        _ => {}
    }
    Ok(changes)
}

fn mark_client_closed(inner: &Inner, id: ConnId, reason: &str) {
    let newly = {
        let mut s = lock(inner);
        match s.conns.get_mut(&id) {
            Some(c) if c.client_open => {
                c.client_open = false;
                c.wake.notify_one();
                Some(c.queue.len())
            }
            _ => None,
        }
    };
    if let Some(held) = newly {
        push(
            inner,
            id,
            What::ClientClosed,
            None,
            0,
            0,
            None,
            format!("{reason}; {held} request(s) not forwarded yet"),
        );
    }
}

fn mark_upstream_closed(inner: &Inner, id: ConnId, reason: &str) {
    let newly = {
        let mut s = lock(inner);
        match s.conns.get_mut(&id) {
            Some(c) if c.upstream_open => {
                c.upstream_open = false;
                c.wake.notify_one();
                true
            }
            _ => false,
        }
    };
    if newly {
        push(
            inner,
            id,
            What::UpstreamClosed,
            None,
            0,
            0,
            None,
            reason.to_owned(),
        );
    }
}

/// Client -> proxy: frames into the connection's queue.
async fn client_reader(inner: Arc<Inner>, id: ConnId, mut rd: OwnedReadHalf) {
    loop {
        let frame = match read_frame(&mut rd).await {
            Ok(Some(f)) => f,
            Ok(None) => return mark_client_closed(&inner, id, "EOF"),
            Err(e) => return mark_client_closed(&inner, id, &e),
        };
        let api = i16_at(&frame, 4).and_then(|k| ApiKey::try_from(k).ok());
        let any_api = i16_at(&frame, 4).and_then(Api::from_key);
        let version = i16_at(&frame, 6).unwrap_or(-1);
        let correlation = i32_at(&frame, 8).unwrap_or(-1);
        let detail = if api.is_some() {
            describe_request(&frame)
        } else {
            "unparsable request header".to_owned()
        };
        let held = {
            let mut s = lock(&inner);
            let Some(c) = s.conns.get_mut(&id) else {
                return;
            };
            c.queue.push_back(Frame {
                bytes: frame,
                api,
                any_api,
                version,
                correlation,
            });
            c.wake.notify_one();
            c.stalled
                || c.stall_at_count
                    .is_some_and(|n| c.forwarded + c.queue.len() > n)
                || (c.stall_at_api.is_some() && c.stall_at_api == api)
        };
        let detail = if held {
            format!("{detail} (held)").trim_start().to_owned()
        } else {
            detail
        };
        push(
            &inner,
            id,
            What::Received,
            api,
            version,
            correlation,
            None,
            detail,
        );
    }
}

/// What the upstream writer does next.
enum Step {
    Write(Frame),
    Stall,
    Wait,
    Finish,
}

/// Proxy -> broker: forwards queued frames unless stalled; after the client closed and nothing
/// is held any more, lingers for the answers and closes the upstream side.
async fn upstream_writer(inner: Arc<Inner>, id: ConnId, mut wr: OwnedWriteHalf, wake: Arc<Notify>) {
    let mut drained_at: Option<tokio::time::Instant> = None;
    loop {
        let step = {
            let mut s = lock(&inner);
            let Some(c) = s.conns.get_mut(&id) else {
                return;
            };
            if !c.upstream_open {
                Step::Finish
            } else if let Some(front) = c.queue.front() {
                let stall_now = c.stalled
                    || c.stall_at_count.is_some_and(|n| c.forwarded >= n)
                    || (c.stall_at_api.is_some() && c.stall_at_api == front.api);
                if stall_now && !c.stalled {
                    c.stalled = true;
                    Step::Stall
                } else if stall_now {
                    Step::Wait
                } else {
                    let f = c.queue.pop_front().expect("front exists");
                    if let Some(api) = f.any_api {
                        c.pending.insert(f.correlation, (api, f.version));
                    }
                    c.forwarded += 1;
                    Step::Write(f)
                }
            } else if !c.client_open {
                // Nothing held any more: wait for the answers of what was forwarded, then close.
                let at = *drained_at.get_or_insert_with(|| tokio::time::Instant::now() + LINGER);
                if c.pending.is_empty() || tokio::time::Instant::now() >= at {
                    Step::Finish
                } else {
                    Step::Wait
                }
            } else {
                Step::Wait
            }
        };
        match step {
            Step::Write(f) => {
                // Logged before the write: the answer may come back before the write returns.
                let client_open = lock(&inner).conns.get(&id).is_some_and(|c| c.client_open);
                let detail = if client_open {
                    String::new()
                } else {
                    "(client already closed this connection)".to_owned()
                };
                push(
                    &inner,
                    id,
                    What::Forwarded,
                    f.api,
                    f.version,
                    f.correlation,
                    None,
                    detail,
                );
                if let Err(e) = wr.write_all(&f.bytes).await {
                    mark_upstream_closed(&inner, id, &format!("write: {e}"));
                    return;
                }
            }
            Step::Stall => {
                let held = lock(&inner).conns.get(&id).map_or(0, |c| c.queue.len());
                push(
                    &inner,
                    id,
                    What::Stalled,
                    None,
                    0,
                    0,
                    None,
                    format!("holding {held} request(s)"),
                );
            }
            Step::Wait => {
                // Woken by any change; the timeout re-checks the linger deadline.
                let _ = tokio::time::timeout(Duration::from_millis(200), wake.notified()).await;
            }
            Step::Finish => {
                let _ = wr.shutdown().await;
                return;
            }
        }
    }
}

/// Broker -> proxy: records answers, rewrites advertised addresses, passes them on (or not).
async fn upstream_reader(
    inner: Arc<Inner>,
    id: ConnId,
    mut rd: OwnedReadHalf,
    mut client: OwnedWriteHalf,
) {
    let mut client_ok = true;
    loop {
        let frame = match read_frame(&mut rd).await {
            Ok(Some(f)) => f,
            Ok(None) => break mark_upstream_closed(&inner, id, "EOF from the broker"),
            Err(e) => break mark_upstream_closed(&inner, id, &e),
        };
        let correlation = i32_at(&frame, 4).unwrap_or(-1);
        let (request, drop, client_open) = {
            let mut s = lock(&inner);
            let Some(c) = s.conns.get_mut(&id) else {
                return;
            };
            let request = c.pending.remove(&correlation);
            c.wake.notify_one();
            (request, c.drop_answers, c.client_open)
        };
        let mut out = frame.clone();
        let mut error_code = None;
        let mut detail: String;
        let mut reset = false;
        if let Some((api, version)) = request {
            match wire::decode_response(frame.slice(4..), api, version) {
                Ok(mut r) => {
                    (error_code, detail) = describe_response(&r.body);
                    {
                        let mut s = lock(&inner);
                        if s.reset_rule
                            .as_ref()
                            .is_some_and(|(a, m)| *a == api && m(&r.body))
                        {
                            s.reset_rule = None;
                            s.reset_fired_at = Some(Instant::now());
                            reset = true;
                            detail = format!("{detail} (reset rule: dropped, connection reset)");
                        }
                    }
                    if matches!(
                        api.kafka(),
                        Some(ApiKey::FindCoordinator | ApiKey::Metadata)
                    ) {
                        match rewrite_addresses(&inner, &mut r.body) {
                            Ok(changes) if !changes.is_empty() => {
                                match wire::encode_response(&r.body, api, version, correlation) {
                                    Ok(b) => {
                                        out = b.freeze();
                                        detail = format!("{detail} rewrote {}", changes.join(" "));
                                    }
                                    Err(e) => detail = format!("{detail} re-encode failed: {e}"),
                                }
                            }
                            Ok(_) => {}
                            Err(e) => detail = format!("{detail} rewrite failed: {e}"),
                        }
                    }
                }
                Err(e) => detail = format!("undecodable: {e}"),
            }
        } else {
            detail = "answer to no request the proxy forwarded".to_owned();
        }
        let deliver = !drop && !reset && client_open && client_ok;
        // Logged before the write, so the log shows it before what the client does with it.
        let (api, version) = request.map_or((None, 0), |(a, v)| (a.kafka(), v));
        push(
            &inner,
            id,
            if deliver {
                What::Answered
            } else {
                What::AnswerDropped
            },
            api,
            version,
            correlation,
            error_code,
            detail.trim().to_owned(),
        );
        if deliver && let Err(e) = client.write_all(&out).await {
            // Logged as ClientClosed: the answer did not reach the client.
            client_ok = false;
            mark_client_closed(&inner, id, &format!("write: {e}"));
        }
        if reset {
            mark_client_closed(&inner, id, "reset after the answer the rule matched");
            break;
        }
    }
    // The broker is gone: so is the connection, for the client too.
    let _ = client.shutdown().await;
}
