//! Kafka over TCP: one connection per target, ApiVersions at connect, reconnects with backoff.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use tokio::net::TcpStream;

use super::Transport;
use super::conn::Connection;
use crate::config::ClientConfig;
use crate::core::io::{Request, Response, Target};
use crate::error::TransportError;

/// Connections are keyed by target kind and node id: the coordinator connection is separate from
/// the data connection to the same broker.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Bootstrap,
    Node(i32),
    Coordinator(i32),
}

type Slot = Arc<tokio::sync::Mutex<Option<Arc<Connection>>>>;

/// The Kafka wire protocol over tokio TCP.
///
/// Cheap to clone; clones share connections. Requests to the same target share one connection and
/// may be in flight together; each connection negotiates API versions once, at connect.
#[derive(Clone)]
pub struct TcpTransport {
    inner: Arc<Inner>,
}

struct Inner {
    config: ClientConfig,
    slots: Mutex<HashMap<Key, Slot>>,
    /// Where the next connect starts in an address list (bootstrap rotation).
    next_address: std::sync::atomic::AtomicUsize,
    #[cfg(feature = "tls")]
    tls: std::sync::OnceLock<Result<tokio_rustls::TlsConnector, TransportError>>,
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
    pub fn new(config: ClientConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                slots: Mutex::new(HashMap::new()),
                next_address: std::sync::atomic::AtomicUsize::new(0),
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
        let timeout = self.inner.config.request_timeout;
        Ok(self.connection(target, timeout).await?.versions().clone())
    }

    /// Drops every connection (requests in flight fail with a disconnect).
    pub fn close_all(&self) {
        self.inner.slots.lock().expect("lock").clear();
    }

    async fn connection(
        &self,
        target: &Target,
        timeout: Duration,
    ) -> Result<Arc<Connection>, TransportError> {
        let (key, addrs) = match target {
            Target::Bootstrap => (Key::Bootstrap, self.inner.config.bootstrap_servers.clone()),
            Target::Node(b) => (Key::Node(b.node_id), vec![format!("{}:{}", b.host, b.port)]),
            Target::Coordinator(b) => (
                Key::Coordinator(b.node_id),
                vec![format!("{}:{}", b.host, b.port)],
            ),
        };
        let slot = self
            .inner
            .slots
            .lock()
            .expect("lock")
            .entry(key)
            .or_default()
            .clone();
        // Holding the slot while connecting makes concurrent senders share one connect.
        let mut slot = slot.lock().await;
        if let Some(c) = slot.as_ref()
            && !c.is_failed()
            && (target == &Target::Bootstrap || addrs.iter().any(|a| a == c.addr()))
        {
            return Ok(c.clone());
        }
        *slot = None;
        if matches!(target, Target::Coordinator(_))
            && let Some(conn) = self.take_bootstrap(&addrs)
        {
            *slot = Some(conn.clone());
            return Ok(conn);
        }
        let conn = Arc::new(self.connect(&addrs, timeout).await?);
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// The live bootstrap connection, when it goes to one of `addrs`, moved out of the bootstrap
    /// slot: a new coordinator then starts on the connection FindCoordinator just used instead of
    /// a new connect and ApiVersions round trip on the rejoin path. The coordinator still gets a
    /// connection of its own (the next bootstrap request opens a new one), so a JoinGroup the
    /// broker parks never holds up Metadata or FindCoordinator (the broker reads one request
    /// per connection at a time). Skipped while the bootstrap slot is busy connecting.
    fn take_bootstrap(&self, addrs: &[String]) -> Option<Arc<Connection>> {
        let slot = self
            .inner
            .slots
            .lock()
            .expect("lock")
            .get(&Key::Bootstrap)?
            .clone();
        let mut slot = slot.try_lock().ok()?;
        let usable = slot
            .as_ref()
            .is_some_and(|c| !c.is_failed() && addrs.iter().any(|a| a == c.addr()));
        if usable { slot.take() } else { None }
    }

    /// Connects to one of `addrs` (round robin), retrying with `reconnect.backoff.ms` doubling up
    /// to `reconnect.backoff.max.ms` until `timeout` runs out.
    async fn connect(
        &self,
        addrs: &[String],
        timeout: Duration,
    ) -> Result<Connection, TransportError> {
        let cfg = &self.inner.config;
        let last = Mutex::new(String::from("no address to connect to"));
        // With several addresses, one attempt gets a third of the time, so a broker that accepts
        // the connection but never answers (frozen) does not keep the others from being tried.
        let attempt_timeout = if addrs.len() > 1 {
            timeout / 3
        } else {
            timeout
        };
        let once = || async {
            // The rotation carries over between connects: the next one starts at the next address.
            let i = self
                .inner
                .next_address
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let addr = addrs.get(i % addrs.len().max(1)).cloned().ok_or_else(|| {
                TransportError::Connect {
                    addr: String::new(),
                    reason: "no address to connect to".into(),
                }
            })?;
            // A literal address connects at once; a name goes through the resolver (a blocking
            // getaddrinfo on tokio's blocking pool, a thread start on first use).
            let stream = match addr.parse::<std::net::SocketAddr>() {
                Ok(literal) => TcpStream::connect(literal).await,
                Err(_) => TcpStream::connect(&addr).await,
            }
            .map_err(|e| TransportError::Connect {
                addr: addr.clone(),
                reason: e.to_string(),
            })?;
            let _ = stream.set_nodelay(true);
            tracing::debug!(%addr, "connected");
            let host = addr
                .rsplit_once(':')
                .map_or(addr.as_str(), |(h, _)| h)
                .to_owned();
            let setup = async {
                let io = self.secure(&host, stream).await?;
                let conn = Connection::establish(
                    io,
                    addr.clone(),
                    cfg.client_id.clone(),
                    cfg.max_response_size,
                    attempt_timeout,
                )
                .await?;
                self.authenticate(&conn, attempt_timeout).await?;
                Ok(conn)
            };
            match tokio::time::timeout(attempt_timeout, setup).await {
                Ok(result) => result,
                Err(_) => Err(TransportError::Connect {
                    addr,
                    reason: format!("no answer to the connection setup within {attempt_timeout:?}"),
                }),
            }
        };
        let backoff = ExponentialBuilder::default()
            .with_min_delay(cfg.reconnect_backoff)
            .with_max_delay(cfg.reconnect_backoff_max)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        let retried = once
            .retry(backoff)
            .sleep(tokio::time::sleep)
            // Only a failed dial or a dropped connection is worth another try; a broker that
            // answers with something broken (oversized, undecodable, no common version) will
            // answer the same way again, so that error is returned as it is.
            .when(|e| {
                matches!(
                    e,
                    TransportError::Connect { .. }
                        | TransportError::Disconnected { .. }
                        | TransportError::Timeout { .. }
                )
            })
            .notify(|e, delay| {
                tracing::debug!(error = %e, ?delay, "connect failed, retrying");
                *last.lock().expect("lock") = e.to_string();
            });
        match tokio::time::timeout(timeout, retried).await {
            Ok(result) => result,
            Err(_) => Err(TransportError::Connect {
                addr: addrs.join(","),
                reason: format!("gave up after {timeout:?}: {}", last.lock().expect("lock")),
            }),
        }
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
        let started = tokio::time::Instant::now();
        let conn = self.connection(&target, timeout).await?;
        let left = timeout.saturating_sub(started.elapsed());
        conn.send(&request, left.max(Duration::from_millis(1)))
            .await
    }
}
