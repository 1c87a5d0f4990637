//! One Kafka connection over any byte stream: a writer task sends whole frames in order, a reader
//! task matches response frames to requests by correlation id. Several requests may be in flight.
//!
//! Any protocol violation by the peer (a truncated, oversized or undecodable frame, an unknown
//! correlation id) fails the connection: every request in flight gets the typed error and the
//! connection is closed, never a panic. The reader allocates in step with the bytes that actually
//! arrive, and never more than the configured maximum frame size.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::wire::{self, BrokerVersions};
use crate::core::io::{Request, Response};
use crate::error::TransportError;

/// Reads of a frame body grow the buffer at most this much at a time.
const READ_CHUNK: usize = 64 * 1024;

struct Pending {
    api: ApiKey,
    version: i16,
    reply: oneshot::Sender<Result<Response, TransportError>>,
}

#[derive(Default)]
struct Shared {
    pending: HashMap<i32, Pending>,
    /// Set once the connection failed; later sends get this error.
    failed: Option<TransportError>,
}

/// A live connection; dropping it closes the socket.
pub(crate) struct Connection {
    addr: String,
    client_id: String,
    versions: BrokerVersions,
    shared: Arc<Mutex<Shared>>,
    frames: mpsc::UnboundedSender<BytesMut>,
    next_correlation: AtomicI32,
    tasks: [JoinHandle<()>; 2],
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
        f.debug_struct("Connection").field("addr", &self.addr).finish_non_exhaustive()
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
        };
        conn.versions = conn.api_versions(timeout).await?;
        Ok(conn)
    }

    /// ApiVersions at the highest version this client knows; on UNSUPPORTED_VERSION, again at the
    /// highest the broker named (apache/kafka `NetworkClient.handleApiVersionsResponse`).
    async fn api_versions(&self, timeout: Duration) -> Result<BrokerVersions, TransportError> {
        let mut version = ApiKey::ApiVersions.valid_versions().max;
        for _ in 0..2 {
            let body = RequestKind::ApiVersions(
                ApiVersionsRequest::default()
                    .with_client_software_name(StrBytes::from_static_str("consumer-membership"))
                    .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION"))),
            );
            let r = self.send_at(body, ApiKey::ApiVersions, version, timeout).await?;
            let ResponseKind::ApiVersions(r) = r.body else {
                return Err(TransportError::Decode {
                    api: ApiKey::ApiVersions,
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
        Err(TransportError::ApiVersions { code: 35 })
    }

    /// The peer's address.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// What the broker advertised at connect.
    pub(crate) fn versions(&self) -> &BrokerVersions {
        &self.versions
    }

    /// Whether the connection failed (a new one is needed).
    pub(crate) fn is_failed(&self) -> bool {
        self.shared.lock().expect("lock").failed.is_some()
    }

    /// Sends `request` at the negotiated version and waits for its answer.
    pub(crate) async fn send(&self, request: &Request, timeout: Duration) -> Result<Response, TransportError> {
        let (api, version, body) = wire::build(request, &self.versions)?;
        self.send_at(body, api, version, timeout).await
    }

    async fn send_at(
        &self,
        body: RequestKind,
        api: ApiKey,
        version: i16,
        timeout: Duration,
    ) -> Result<Response, TransportError> {
        let correlation_id = self.next_correlation.fetch_add(1, Ordering::Relaxed);
        let frame = wire::encode_request(&body, api, version, correlation_id, &self.client_id)?;
        let (reply, answer) = oneshot::channel();
        {
            let mut shared = self.shared.lock().expect("lock");
            if let Some(e) = &shared.failed {
                return Err(e.clone());
            }
            shared.pending.insert(correlation_id, Pending { api, version, reply });
        }
        tracing::trace!(addr = %self.addr, ?api, version, correlation_id, "send");
        if self.frames.send(frame).is_err() {
            return Err(fail(&self.shared, self.disconnected("writer stopped")));
        }
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(self.failure()),
            Err(_) => {
                // Answers come in request order, so the connection is stuck: close it, as the
                // Java client does on a request timeout (NetworkClient.handleTimedOutRequests).
                let timed_out = TransportError::Timeout { api, timeout };
                self.shared.lock().expect("lock").pending.remove(&correlation_id);
                fail(&self.shared, self.disconnected(&format!("closed after a {api:?} request timed out")));
                Err(timed_out)
            }
        }
    }

    fn failure(&self) -> TransportError {
        self.shared
            .lock()
            .expect("lock")
            .failed
            .clone()
            .unwrap_or_else(|| self.disconnected("closed"))
    }

    fn disconnected(&self, reason: &str) -> TransportError {
        TransportError::Disconnected {
            addr: self.addr.clone(),
            reason: reason.to_owned(),
        }
    }
}

/// Marks the connection failed with `error` and fails every request in flight; returns `error`.
fn fail(shared: &Mutex<Shared>, error: TransportError) -> TransportError {
    let pending = {
        let mut s = shared.lock().expect("lock");
        if s.failed.is_none() {
            s.failed = Some(error.clone());
        }
        std::mem::take(&mut s.pending)
    };
    for (_, p) in pending {
        let _ = p.reply.send(Err(error.clone()));
    }
    error
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
            fail(&shared, TransportError::Disconnected { addr, reason: e.to_string() });
            return;
        }
    }
}

async fn read_loop<R: AsyncRead>(rd: R, shared: Arc<Mutex<Shared>>, addr: String, max_frame: usize) {
    tokio::pin!(rd);
    let error = loop {
        let frame = match read_frame(&mut rd, max_frame, &addr).await {
            Ok(f) => f,
            Err(e) => break e,
        };
        let Some(correlation_id) = wire::peek_correlation_id(&frame) else {
            break TransportError::InvalidFrameSize { size: frame.len() as i32 };
        };
        let Some(p) = shared.lock().expect("lock").pending.remove(&correlation_id) else {
            break TransportError::UnknownCorrelationId { correlation_id };
        };
        match wire::decode_response(frame, p.api, p.version) {
            Ok(r) => {
                // The sender may have given up (timeout, dropped future); that is not an error.
                let _ = p.reply.send(Ok(r));
            }
            Err(e) => {
                let _ = p.reply.send(Err(e.clone()));
                break e;
            }
        }
    };
    tracing::debug!(%addr, %error, "connection failed");
    fail(&shared, error);
}

/// Reads one frame body (without the size prefix).
async fn read_frame<R: AsyncRead + Unpin>(rd: &mut R, max: usize, addr: &str) -> Result<Bytes, TransportError> {
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
            Ok(0) => return Err(TransportError::TruncatedFrame { expected: 4, received: got }),
            Ok(n) => got += n,
            Err(e) => return Err(TransportError::Disconnected { addr: addr.to_owned(), reason: e.to_string() }),
        }
    }
    let size = i32::from_be_bytes(size);
    // At least a correlation id.
    if size < 4 {
        return Err(TransportError::InvalidFrameSize { size });
    }
    let size = size as usize;
    if size > max {
        return Err(TransportError::FrameTooLarge { size: size as i64, max });
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
            Err(e) => return Err(TransportError::Disconnected { addr: addr.to_owned(), reason: e.to_string() }),
        }
    }
    Ok(body.freeze())
}
