//! One Kafka connection over any byte stream: a writer task sends whole frames in order, a reader
//! task matches response frames to requests by correlation id. Several requests may be in flight.
//!
//! Any protocol violation by the peer (a truncated, oversized or undecodable frame, an unknown
//! correlation id) fails the connection: every request in flight gets the typed error and the
//! connection is closed, never a panic. The reader allocates in step with the bytes that actually
//! arrive, and never more than the configured maximum frame size.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::connections::{self, InFlight, Pipeline};
use super::wire::{self, BrokerVersions};
use crate::error::{TransportError, codes};
use crate::request::{Api, Request, RequestBody, Response, ResponseBody};

/// Reads of a frame body grow the buffer at most this much at a time.
const READ_CHUNK: usize = 64 * 1024;

/// Where a request's answer goes: decoded at `version`, into `reply`.
struct Reply {
    version: i16,
    reply: oneshot::Sender<Result<Response, TransportError>>,
}

/// The requests in flight on the connection and its failure (the rules of
/// [`super::connections`]).
type Shared = Pipeline<Reply>;

/// A live connection; dropping it closes the socket.
pub(crate) struct Connection {
    addr: String,
    client_id: String,
    versions: BrokerVersions,
    shared: Arc<Mutex<Shared>>,
    frames: mpsc::UnboundedSender<BytesMut>,
    next_correlation: AtomicI32,
    tasks: [JoinHandle<()>; 2],
    /// End of the SASL session (KIP-368): new requests then go to a fresh, re-authenticated
    /// connection.
    expires: Mutex<Option<tokio::time::Instant>>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Starts the reader and writer over `stream`, then exchanges ApiVersions.
    pub(crate) async fn establish<S>(
        stream: S,
        addr: String,
        client_id: String,
        max_frame: usize,
        timeout: Duration,
    ) -> Result<Self, TransportError>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (rd, wr) = tokio::io::split(stream);
        let shared = Arc::new(Mutex::new(Shared::default()));
        let (frames, frames_rx) = mpsc::unbounded_channel();
        let reader = tokio::spawn(read_loop(rd, shared.clone(), addr.clone(), max_frame));
        let writer = tokio::spawn(write_loop(wr, frames_rx, shared.clone(), addr.clone()));
        let mut conn = Self {
            addr,
            client_id,
            versions: BrokerVersions::default(),
            shared,
            frames,
            next_correlation: AtomicI32::new(0),
            tasks: [reader, writer],
            expires: Mutex::new(None),
        };
        conn.versions = conn.api_versions(timeout).await?;
        Ok(conn)
    }

    /// ApiVersions at the highest version this client knows; on UNSUPPORTED_VERSION, again at the
    /// highest the broker named (apache/kafka `NetworkClient.handleApiVersionsResponse`).
    async fn api_versions(&self, timeout: Duration) -> Result<BrokerVersions, TransportError> {
        let mut version = ApiKey::ApiVersions.valid_versions().max;
        for _ in 0..2 {
            let body = RequestBody::Kafka(RequestKind::ApiVersions(
                ApiVersionsRequest::default()
                    .with_client_software_name(StrBytes::from_static_str("consumer-membership"))
                    .with_client_software_version(StrBytes::from_static_str(env!(
                        "CARGO_PKG_VERSION"
                    ))),
            ));
            let r = self
                .send_at(body, ApiKey::ApiVersions.into(), version, timeout)
                .await?;
            let ResponseBody::Kafka(ResponseKind::ApiVersions(r)) = r.body else {
                return Err(TransportError::Decode {
                    api: ApiKey::ApiVersions.into(),
                    version,
                    reason: "the answer is not an ApiVersions response".into(),
                });
            };
            match r.error_code {
                0 => return Ok(BrokerVersions::from_response(&r)),
                35 => {
                    let theirs = BrokerVersions::from_response(&r);
                    version = theirs.negotiate(ApiKey::ApiVersions, 0..=version)?;
                }
                code => return Err(TransportError::ApiVersions { code }),
            }
        }
        Err(TransportError::ApiVersions {
            code: codes::UNSUPPORTED_VERSION,
        })
    }

    /// The peer's address.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// Requests sent on this connection and not answered yet.
    pub(crate) fn in_flight(&self) -> usize {
        self.shared.lock().expect("lock").len()
    }

    /// What the broker advertised at connect.
    pub(crate) fn versions(&self) -> &BrokerVersions {
        &self.versions
    }

    /// Whether a new connection is needed: this one failed, or its SASL session is about to end.
    pub(crate) fn is_failed(&self) -> bool {
        let expired = self
            .expires
            .lock()
            .expect("lock")
            .is_some_and(|at| tokio::time::Instant::now() >= at);
        expired || self.shared.lock().expect("lock").failure().is_some()
    }

    /// The broker granted a SASL session of `lifetime` (KIP-368). The connection is retired at
    /// 85% of it, so requests move to a fresh, re-authenticated connection before the broker
    /// would close this one.
    pub(crate) fn set_session_lifetime(&self, lifetime: Duration) {
        let at = crate::transport::later(
            tokio::time::Instant::now(),
            lifetime.checked_mul(17).map_or(lifetime, |d| d / 20),
        );
        *self.expires.lock().expect("lock") = Some(at);
    }

    /// Sends `request` at the negotiated version and waits for its answer.
    pub(crate) async fn send(
        &self,
        request: &Request,
        timeout: Duration,
    ) -> Result<Response, TransportError> {
        let (api, version, body) = wire::build(request, &self.versions)?;
        self.send_at(body, api, version, timeout)
            .await
            .map_err(|e| e.at_broker(&self.addr))
    }

    async fn send_at(
        &self,
        body: RequestBody,
        api: Api,
        version: i16,
        timeout: Duration,
    ) -> Result<Response, TransportError> {
        let correlation_id = self.next_correlation.fetch_add(1, Ordering::Relaxed);
        let frame = wire::encode_request(&body, api, version, correlation_id, &self.client_id)?;
        let (reply, answer) = oneshot::channel();
        let request = InFlight::new(
            Reply { version, reply },
            api,
            timeout,
            tokio::time::Instant::now().into_std(),
        );
        let deadline = tokio::time::Instant::from_std(request.deadline);
        self.shared
            .lock()
            .expect("lock")
            .send(correlation_id, request)?;
        tracing::trace!(addr = %self.addr, ?api, version, correlation_id, "send");
        if self.frames.send(frame).is_err() {
            let failure = self.disconnected("writer stopped");
            fail(&self.shared, failure.clone());
            return Err(failure);
        }
        match tokio::time::timeout_at(deadline, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(self.failure()),
            Err(_) => {
                let closing =
                    self.disconnected(&format!("closed after a {api:?} request timed out"));
                let (_, error, failed) = self
                    .shared
                    .lock()
                    .expect("lock")
                    .time_out(correlation_id, closing);
                answer_all(failed, &error);
                Err(TransportError::Timeout { api, timeout })
            }
        }
    }

    fn failure(&self) -> TransportError {
        let failed = self.shared.lock().expect("lock").failure().cloned();
        failed.unwrap_or_else(|| self.disconnected("closed"))
    }

    fn disconnected(&self, reason: &str) -> TransportError {
        connections::disconnected(&self.addr, reason)
    }
}

/// Marks the connection failed with `error` (its first failure is kept) and fails every request
/// in flight with the connection's error.
fn fail(shared: &Mutex<Shared>, error: TransportError) {
    let (error, failed) = shared.lock().expect("lock").fail(error);
    answer_all(failed, &error);
}

/// Fails each of `failed` with `error`.
fn answer_all(failed: connections::Failed<Reply>, error: &TransportError) {
    for (_, r) in failed {
        let _ = r.tag.reply.send(Err(error.clone()));
    }
}

async fn write_loop<W: AsyncWrite>(
    wr: W,
    mut frames: mpsc::UnboundedReceiver<BytesMut>,
    shared: Arc<Mutex<Shared>>,
    addr: String,
) {
    tokio::pin!(wr);
    while let Some(frame) = frames.recv().await {
        if let Err(e) = wr.write_all(&frame).await {
            fail(
                &shared,
                TransportError::Disconnected {
                    addr,
                    reason: e.to_string(),
                },
            );
            return;
        }
    }
}

async fn read_loop<R: AsyncRead>(
    rd: R,
    shared: Arc<Mutex<Shared>>,
    addr: String,
    max_frame: usize,
) {
    tokio::pin!(rd);
    let error = loop {
        let frame = match read_frame(&mut rd, max_frame, &addr).await {
            Ok(f) => f,
            Err(e) => break e,
        };
        let Some(correlation_id) = wire::peek_correlation_id(&frame) else {
            break TransportError::InvalidFrameSize {
                size: frame.len() as i32,
            };
        };
        let Some(p) = shared.lock().expect("lock").answered(correlation_id) else {
            break TransportError::UnknownCorrelationId { correlation_id };
        };
        match wire::decode_response(frame, p.api, p.tag.version) {
            Ok(r) => {
                // The sender may have given up (timeout, dropped future); that is not an error.
                let _ = p.tag.reply.send(Ok(r));
            }
            Err(e) => {
                let _ = p.tag.reply.send(Err(e.clone()));
                break e;
            }
        }
    };
    tracing::debug!(%addr, %error, "connection failed");
    fail(&shared, error);
}

/// What a peer whose answer starts with `prefix` (an impossible size prefix) looks like, when
/// it looks like something other than Kafka.
fn foreign(prefix: [u8; 4]) -> Option<&'static str> {
    // A TLS record header: content type (alert 21, handshake 22, ...), then major version 3.
    if (20..=23).contains(&prefix[0]) && prefix[1] == 3 {
        return Some("a TLS record: the listener expects TLS; check security.protocol");
    }
    if prefix
        .iter()
        .all(|b| b.is_ascii_graphic() || b.is_ascii_whitespace())
    {
        return Some(if prefix.starts_with(b"HTTP") {
            "an HTTP server, not a Kafka listener"
        } else {
            "text, not a Kafka listener"
        });
    }
    None
}

/// The first line (at most 40 bytes) of an answer that starts with `prefix`, escaped: what
/// arrived with it, without waiting for more than a moment.
async fn start_of<R: AsyncRead + Unpin>(rd: &mut R, prefix: [u8; 4]) -> String {
    let mut start = prefix.to_vec();
    let mut more = [0u8; 36];
    if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(50), rd.read(&mut more)).await {
        start.extend_from_slice(&more[..n]);
    }
    if let Some(end) = start.iter().position(|b| *b == b'\r' || *b == b'\n') {
        start.truncate(end.max(4));
    }
    format!("\"{}\"", start.escape_ascii())
}

/// Reads one frame body (without the size prefix).
async fn read_frame<R: AsyncRead + Unpin>(
    rd: &mut R,
    max: usize,
    addr: &str,
) -> Result<Bytes, TransportError> {
    let mut size = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match rd.read(&mut size[got..]).await {
            Ok(0) if got == 0 => {
                return Err(TransportError::Disconnected {
                    addr: addr.to_owned(),
                    reason: "closed by the peer".into(),
                });
            }
            Ok(0) => {
                return Err(TransportError::TruncatedFrame {
                    expected: 4,
                    received: got,
                });
            }
            Ok(n) => got += n,
            Err(e) => {
                return Err(TransportError::Disconnected {
                    addr: addr.to_owned(),
                    reason: e.to_string(),
                });
            }
        }
    }
    let prefix = size;
    let size = i32::from_be_bytes(size);
    if (size < 4 || size as usize > max)
        && let Some(guess) = foreign(prefix)
    {
        return Err(TransportError::NotKafka {
            start: start_of(rd, prefix).await,
            guess,
        });
    }
    // At least a correlation id.
    if size < 4 {
        return Err(TransportError::InvalidFrameSize { size });
    }
    let size = size as usize;
    if size > max {
        return Err(TransportError::FrameTooLarge {
            size: size as i64,
            max,
        });
    }
    let mut body = BytesMut::with_capacity(size.min(READ_CHUNK));
    while body.len() < size {
        body.reserve((size - body.len()).min(READ_CHUNK));
        let mut limited = (&mut *rd).take((size - body.len()) as u64);
        match limited.read_buf(&mut body).await {
            Ok(0) => {
                return Err(TransportError::TruncatedFrame {
                    expected: size + 4,
                    received: body.len() + 4,
                });
            }
            Ok(_) => {}
            Err(e) => {
                return Err(TransportError::Disconnected {
                    addr: addr.to_owned(),
                    reason: e.to_string(),
                });
            }
        }
    }
    Ok(body.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::codes;
    use crate::request::CoordinatorKeyType;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::{ApiVersionsResponse, FindCoordinatorResponse, RequestHeader};
    use tokio::io::DuplexStream;

    /// What the fake broker does with one request.
    #[allow(clippy::large_enum_variant)]
    enum Act {
        Reply(ResponseBody),
        /// Write these bytes instead of an answer.
        Raw(Vec<u8>),
        /// Keep the request, answer nothing.
        Hold,
        /// Answer the held FindCoordinator requests, newest first, then this one, each with a
        /// coordinator entry echoing the request's key.
        EchoKeysReversed,
        /// Answer a StreamsGroupHeartbeat (decoded by the generated decoder) with a generated
        /// response: its member id, the epoch after its own, a 5 s interval.
        #[cfg(feature = "sim")]
        EchoStreamsHeartbeat,
        /// Close the connection.
        Close,
    }

    fn versions_response(ranges: &[(Api, i16, i16)]) -> ResponseBody {
        ResponseBody::Kafka(ResponseKind::ApiVersions(
            ApiVersionsResponse::default().with_api_keys(
                ranges
                    .iter()
                    .map(|&(k, lo, hi)| {
                        ApiVersion::default()
                            .with_api_key(k.key())
                            .with_min_version(lo)
                            .with_max_version(hi)
                    })
                    .collect(),
            ),
        ))
    }

    fn default_versions() -> ResponseBody {
        versions_response(&[
            (ApiKey::ApiVersions.into(), 0, 4),
            (ApiKey::FindCoordinator.into(), 0, 6),
            (ApiKey::JoinGroup.into(), 0, 4),
        ])
    }

    /// A broker on the other end of a duplex pipe, answering with `script(request number, header)`.
    fn fake_broker(
        mut io: DuplexStream,
        mut script: impl FnMut(usize, &RequestHeader) -> Act + Send + 'static,
    ) {
        tokio::spawn(async move {
            let mut held: Vec<(RequestHeader, RequestBody)> = Vec::new();
            for n in 0.. {
                let mut size = [0u8; 4];
                if io.read_exact(&mut size).await.is_err() {
                    return;
                }
                let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
                if io.read_exact(&mut frame).await.is_err() {
                    return;
                }
                let (header, body) =
                    wire::decode_request(Bytes::from(frame)).expect("client sends valid requests");
                let answer = |h: &RequestHeader, body: &ResponseBody| {
                    let api = Api::from_key(h.request_api_key).unwrap();
                    wire::encode_response(body, api, h.request_api_version, h.correlation_id)
                        .unwrap()
                };
                match script(n, &header) {
                    Act::Reply(body) => io.write_all(&answer(&header, &body)).await.unwrap(),
                    Act::Raw(bytes) => {
                        let _ = io.write_all(&bytes).await;
                    }
                    Act::Hold => held.push((header, body)),
                    Act::Close => return,
                    #[cfg(feature = "sim")]
                    Act::EchoStreamsHeartbeat => {
                        let RequestBody::StreamsGroupHeartbeat(req) = body else {
                            panic!("{body:?}")
                        };
                        let echo = crate::messages::StreamsGroupHeartbeatResponse::default()
                            .with_member_id(req.member_id.clone())
                            .with_member_epoch(req.member_epoch + 1)
                            .with_heartbeat_interval_ms(5000);
                        let echo = ResponseBody::StreamsGroupHeartbeat(echo);
                        io.write_all(&answer(&header, &echo)).await.unwrap();
                    }
                    Act::EchoKeysReversed => {
                        held.push((header, body));
                        for (h, body) in held.drain(..).rev() {
                            let RequestBody::Kafka(RequestKind::FindCoordinator(req)) = body else {
                                panic!("{body:?}")
                            };
                            let entry = kafka_protocol::messages::find_coordinator_response::Coordinator::default()
                                .with_key(req.coordinator_keys[0].clone());
                            let echo = ResponseBody::Kafka(ResponseKind::FindCoordinator(
                                FindCoordinatorResponse::default().with_coordinators(vec![entry]),
                            ));
                            io.write_all(&answer(&h, &echo)).await.unwrap();
                        }
                    }
                }
            }
        });
    }

    async fn connect(
        script: impl FnMut(usize, &RequestHeader) -> Act + Send + 'static,
    ) -> Result<Connection, TransportError> {
        let (client, server) = tokio::io::duplex(1 << 16);
        fake_broker(server, script);
        Connection::establish(
            client,
            "fake:9092".into(),
            "test".into(),
            1 << 20,
            Duration::from_secs(5),
        )
        .await
    }

    fn find(group: &str) -> Request {
        Request::FindCoordinator {
            key_type: CoordinatorKeyType::Group,
            keys: vec![group.into()],
        }
    }

    /// A frame: size prefix, then `body`.
    fn frame(size: i32, body: &[u8]) -> Vec<u8> {
        let mut v = size.to_be_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }

    const T: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn pipelined_requests_are_matched_by_correlation_id() {
        // Requests 1..=2 are held, request 3 releases all three answers in reverse order.
        let conn = connect(|n, _| match n {
            0 => Act::Reply(default_versions()),
            1 | 2 => Act::Hold,
            _ => Act::EchoKeysReversed,
        })
        .await
        .unwrap();
        assert_eq!(conn.versions().get(ApiKey::FindCoordinator), Some(0..=6));
        let (ra, rb, rc) = (find("a"), find("b"), find("c"));
        let (a, b, c) = tokio::join!(conn.send(&ra, T), conn.send(&rb, T), conn.send(&rc, T));
        for (r, key) in [(a, "a"), (b, "b"), (c, "c")] {
            let r = r.unwrap();
            assert_eq!(r.version, 6);
            let Some(ResponseKind::FindCoordinator(r)) = r.kafka() else {
                panic!()
            };
            assert_eq!(
                r.coordinators[0].key.as_str(),
                key,
                "answer went to the wrong request"
            );
        }
        assert!(!conn.is_failed());
    }

    #[tokio::test]
    async fn version_negotiation_without_overlap_is_typed() {
        let conn = connect(|_, _| Act::Reply(default_versions()))
            .await
            .unwrap();
        let join = Request::Raw {
            body: Box::new(RequestKind::JoinGroup(Default::default())),
            versions: 5..=9,
            fit: None,
        };
        let e = conn.send(&join, T).await.unwrap_err();
        assert_eq!(
            e,
            TransportError::UnsupportedApi {
                api: ApiKey::JoinGroup.into(),
                ours: 5..=9,
                broker: Some(0..=4)
            }
        );
        // Nothing was sent, the connection is fine.
        assert!(!conn.is_failed());
    }

    fn streams_heartbeat(epoch: i32) -> Request {
        Request::StreamsGroupHeartbeat {
            body: Box::new(
                crate::messages::StreamsGroupHeartbeatRequest::default()
                    .with_group_id(StrBytes::from_static_str("app").into())
                    .with_member_id(StrBytes::from_static_str("m-1"))
                    .with_member_epoch(epoch),
            ),
            versions: 0..=1,
        }
    }

    #[tokio::test]
    async fn a_broker_without_streams_groups_refuses_the_heartbeat_typed() {
        // A broker that does not advertise API key 88 (streams protocol off, or before 4.1).
        let conn = connect(|_, _| Act::Reply(default_versions()))
            .await
            .unwrap();
        let e = conn.send(&streams_heartbeat(0), T).await.unwrap_err();
        assert_eq!(
            e,
            TransportError::UnsupportedApi {
                api: Api::STREAMS_GROUP_HEARTBEAT,
                ours: 0..=1,
                broker: None
            }
        );
        assert!(
            e.to_string()
                .starts_with("StreamsGroupHeartbeat: no common version"),
            "{e}"
        );
        // Nothing was sent, the connection is fine.
        assert!(!conn.is_failed());
    }

    #[cfg(feature = "sim")]
    #[tokio::test]
    async fn a_streams_group_heartbeat_goes_through_at_the_negotiated_version() {
        for (broker_max, want) in [(1, 1), (0, 0)] {
            let seen = Arc::new(Mutex::new(Vec::new()));
            let log = seen.clone();
            let conn = connect(move |n, h| {
                log.lock()
                    .unwrap()
                    .push((h.request_api_key, h.request_api_version));
                match n {
                    0 => Act::Reply(versions_response(&[
                        (ApiKey::ApiVersions.into(), 0, 4),
                        (Api::STREAMS_GROUP_HEARTBEAT, 0, broker_max),
                    ])),
                    _ => Act::EchoStreamsHeartbeat,
                }
            })
            .await
            .unwrap();
            assert_eq!(
                conn.versions().get(Api::STREAMS_GROUP_HEARTBEAT),
                Some(0..=broker_max)
            );
            let r = conn.send(&streams_heartbeat(4), T).await.unwrap();
            assert_eq!(r.version, want);
            let ResponseBody::StreamsGroupHeartbeat(body) = &r.body else {
                panic!("{r:?}")
            };
            assert_eq!(body.member_id.as_str(), "m-1");
            assert_eq!(body.member_epoch, 5);
            assert_eq!(body.heartbeat_interval_ms, 5000);
            assert_eq!(r.body.api(), Api::STREAMS_GROUP_HEARTBEAT);
            assert_eq!(seen.lock().unwrap()[1], (88, want));
            assert!(!conn.is_failed());
        }
    }

    #[tokio::test]
    async fn apiversions_retries_at_the_version_the_broker_names() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let conn = connect(move |_, h| {
            log.lock().unwrap().push(h.request_api_version);
            if h.request_api_version > 2 {
                let mut r =
                    ApiVersionsResponse::default().with_error_code(codes::UNSUPPORTED_VERSION);
                r.api_keys.push(
                    ApiVersion::default()
                        .with_api_key(18)
                        .with_min_version(0)
                        .with_max_version(2),
                );
                Act::Raw(
                    wire::encode_response(
                        &ResponseBody::Kafka(ResponseKind::ApiVersions(r)),
                        ApiKey::ApiVersions,
                        0,
                        h.correlation_id,
                    )
                    .unwrap()
                    .to_vec(),
                )
            } else {
                Act::Reply(default_versions())
            }
        })
        .await
        .unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            vec![ApiKey::ApiVersions.valid_versions().max, 2]
        );
        assert_eq!(conn.versions().get(ApiKey::JoinGroup), Some(0..=4));
    }

    /// Connects, then answers the first real request with `bytes`; returns what the request and a
    /// second one sent right after got.
    async fn after_bad_answer(bytes: Vec<u8>) -> (TransportError, TransportError) {
        let mut bytes = Some(bytes);
        let conn = connect(move |n, _| match n {
            0 => Act::Reply(default_versions()),
            1 => Act::Raw(bytes.take().unwrap()),
            _ => Act::Hold,
        })
        .await
        .unwrap();
        let first = conn.send(&find("g"), T).await.unwrap_err();
        assert!(conn.is_failed());
        let second = conn.send(&find("g"), T).await.unwrap_err();
        // Each names the broker.
        for e in [&first, &second] {
            assert_eq!(e.broker(), Some(conn.addr()), "{e:?}");
        }
        (first.root().clone(), second.root().clone())
    }

    #[tokio::test]
    async fn oversized_frame_fails_the_connection_before_allocating() {
        let (e, again) = after_bad_answer(frame(1 << 30, &[])).await;
        assert_eq!(
            e,
            TransportError::FrameTooLarge {
                size: 1 << 30,
                max: 1 << 20
            }
        );
        assert_eq!(again, e, "later sends get the same typed error");
    }

    #[tokio::test]
    async fn negative_and_tiny_frame_sizes_are_typed() {
        assert_eq!(
            after_bad_answer(frame(-5, &[])).await.0,
            TransportError::InvalidFrameSize { size: -5 }
        );
        assert_eq!(
            after_bad_answer(frame(2, &[0, 0])).await.0,
            TransportError::InvalidFrameSize { size: 2 }
        );
    }

    #[tokio::test]
    async fn truncated_frame_is_typed() {
        // Announces 100 bytes, sends the correlation id and 6 more, then the peer goes away.
        let (client, server) = tokio::io::duplex(1 << 16);
        let (mut server_rd, mut server_wr) = tokio::io::split(server);
        let broker = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let mut correlation = 0;
            for n in 0..2 {
                let mut size = [0u8; 4];
                server_rd.read_exact(&mut size).await.unwrap();
                let len = i32::from_be_bytes(size) as usize;
                server_rd.read_exact(&mut buf[..len]).await.unwrap();
                let (h, _) = wire::decode_request(Bytes::copy_from_slice(&buf[..len])).unwrap();
                correlation = h.correlation_id;
                if n == 0 {
                    let a = wire::encode_response(
                        &default_versions(),
                        ApiKey::ApiVersions,
                        h.request_api_version,
                        h.correlation_id,
                    )
                    .unwrap();
                    server_wr.write_all(&a).await.unwrap();
                }
            }
            let mut partial = frame(100, &correlation.to_be_bytes());
            partial.extend_from_slice(&[0; 6]);
            server_wr.write_all(&partial).await.unwrap();
            server_wr.shutdown().await.unwrap();
            drop(server_wr);
            drop(server_rd);
        });
        let conn = Connection::establish(client, "fake:9092".into(), "t".into(), 1 << 20, T)
            .await
            .unwrap();
        let e = conn.send(&find("g"), T).await.unwrap_err();
        broker.await.unwrap();
        assert_eq!(
            *e.root(),
            TransportError::TruncatedFrame {
                expected: 104,
                received: 14
            }
        );
    }

    #[tokio::test]
    async fn garbage_body_is_a_decode_error() {
        // Correlation id 1 (the first request after ApiVersions), then bytes that are no
        // FindCoordinator v6 body: a compact string length running past the end.
        let (e, _) = after_bad_answer(frame(9, &[0, 0, 0, 1, 0, 0xff, 0xff, 0xff, 0x7f])).await;
        assert!(
            matches!(
                e,
                TransportError::Decode {
                    api,
                    version: 6,
                    ..
                } if api == ApiKey::FindCoordinator
            ),
            "{e:?}"
        );
    }

    #[tokio::test]
    async fn unknown_correlation_id_fails_every_request_in_flight() {
        let conn = connect(|n, _| match n {
            0 => Act::Reply(default_versions()),
            1 => Act::Hold,
            _ => Act::Raw(frame(8, &[0x7f, 0, 0, 0, 0, 0, 0, 0])),
        })
        .await
        .unwrap();
        let (ra, rb) = (find("a"), find("b"));
        let (a, b) = tokio::join!(conn.send(&ra, T), conn.send(&rb, T));
        let want = TransportError::UnknownCorrelationId {
            correlation_id: 0x7f00_0000,
        };
        assert_eq!(a.unwrap_err().root(), &want);
        assert_eq!(b.unwrap_err().root(), &want);
    }

    #[tokio::test]
    async fn request_timeout_is_typed_and_closes_the_connection() {
        let conn = connect(|n, _| {
            if n == 0 {
                Act::Reply(default_versions())
            } else {
                Act::Hold
            }
        })
        .await
        .unwrap();
        let e = conn
            .send(&find("g"), Duration::from_millis(50))
            .await
            .unwrap_err();
        assert_eq!(
            e,
            TransportError::Timeout {
                api: ApiKey::FindCoordinator.into(),
                timeout: Duration::from_millis(50)
            }
        );
        assert!(conn.is_failed());
        assert!(matches!(
            conn.send(&find("g"), T).await,
            Err(TransportError::Disconnected { .. })
        ));
    }

    #[tokio::test]
    async fn a_sasl_session_lifetime_retires_the_connection_before_it_ends() {
        let conn = connect(|_, _| Act::Reply(default_versions()))
            .await
            .unwrap();
        conn.set_session_lifetime(Duration::from_millis(200));
        assert!(!conn.is_failed(), "usable at first");
        tokio::time::sleep(Duration::from_millis(175)).await;
        assert!(
            conn.is_failed(),
            "retired at 85% of the lifetime, before the broker would close it"
        );
    }

    #[tokio::test]
    async fn peer_close_is_a_disconnect() {
        let conn = connect(|n, _| {
            if n == 0 {
                Act::Reply(default_versions())
            } else {
                Act::Close
            }
        })
        .await
        .unwrap();
        let e = conn.send(&find("g"), T).await.unwrap_err();
        assert!(
            matches!(&e, TransportError::Disconnected { addr, .. } if addr == "fake:9092"),
            "{e:?}"
        );
        assert!(conn.is_failed());
    }
}
