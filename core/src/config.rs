//! Configuration: [`ClientConfig`] (the transport), [`GroupConfig`] (the member), built with
//! `with_*` methods named after Kafka's properties (each documents its key and default) or from
//! Java-style properties ([`crate::properties`]); errors name the Kafka keys.

use std::sync::Arc;
use std::time::Duration;

use crate::assignor::{Assignor, CooperativeSticky, Range};
use crate::error::ConfigError;
use crate::member_id::MemberId;

/// A chainable `with_*` method setting one field: `Some(..)` an optional field, `impl Into<T>`
/// from anything that converts to its type `T`.
macro_rules! setter {
    ($(#[$doc:meta])* $name:ident => $field:ident: Some(impl Into<$ty:ty>)) => {
        $(#[$doc])*
        pub fn $name(mut self, value: impl Into<$ty>) -> Self {
            self.$field = Some(value.into());
            self
        }
    };
    ($(#[$doc:meta])* $name:ident => $field:ident: Some($ty:ty)) => {
        $(#[$doc])*
        pub fn $name(mut self, value: $ty) -> Self {
            self.$field = Some(value);
            self
        }
    };
    ($(#[$doc:meta])* $name:ident => $field:ident: impl Into<$ty:ty>) => {
        $(#[$doc])*
        pub fn $name(mut self, value: impl Into<$ty>) -> Self {
            self.$field = value.into();
            self
        }
    };
    ($(#[$doc:meta])* $name:ident => $field:ident: $ty:ty) => {
        $(#[$doc])*
        pub fn $name(mut self, value: $ty) -> Self {
            self.$field = value;
            self
        }
    };
}

/// `security.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SecurityProtocol {
    /// No TLS, no SASL.
    #[default]
    Plaintext,
    /// TLS.
    Ssl,
    /// SASL without TLS.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// The name Kafka's `security.protocol` uses (`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`,
    /// `SASL_SSL`).
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// Whether the protocol authenticates with SASL.
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    /// Whether the protocol encrypts with TLS.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }
}

/// `sasl.mechanism`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SaslMechanism {
    /// PLAIN (RFC 4616).
    Plain,
    /// SCRAM-SHA-256 (RFC 5802, RFC 7677).
    ScramSha256,
    /// SCRAM-SHA-512.
    ScramSha512,
}

impl SaslMechanism {
    /// The mechanism's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// A secret that never shows in `Debug` output or logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// TLS and SASL settings (part of [`ClientConfig`]).
///
/// Built from [`SecurityConfig::default`] (`security.protocol=PLAINTEXT`, host names verified)
/// with the `with_*` methods:
///
/// ```
/// use consumer_membership_core::config::{SaslMechanism, Secret, SecurityConfig, SecurityProtocol};
///
/// let security = SecurityConfig::default()
///     .with_protocol(SecurityProtocol::SaslSsl)
///     .with_sasl(SaslMechanism::ScramSha512, "alice", Secret::new("s3cr3t"))
///     .with_ssl_ca_location("/etc/kafka/ca.pem");
/// assert!(security.ssl_verify_hostname);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SecurityConfig {
    /// `security.protocol` (default `PLAINTEXT`).
    pub protocol: SecurityProtocol,
    /// `sasl.mechanism` (no default; required for the SASL protocols).
    pub sasl_mechanism: Option<SaslMechanism>,
    /// `sasl.username` (required for the SASL protocols).
    pub sasl_username: Option<String>,
    /// `sasl.password` (required for the SASL protocols).
    pub sasl_password: Option<Secret>,
    /// `ssl.ca.location`: PEM file of trusted CAs; `None` (default) uses the system roots.
    pub ssl_ca_location: Option<std::path::PathBuf>,
    /// `ssl.certificate.location`: PEM client certificate chain (mTLS; default none).
    pub ssl_certificate_location: Option<std::path::PathBuf>,
    /// `ssl.key.location`: PEM private key of the client certificate (default none).
    pub ssl_key_location: Option<std::path::PathBuf>,
    /// `ssl.endpoint.identification.algorithm`: `true` (default, "https") verifies the broker's
    /// host name; `false` ("") turns that off.
    pub ssl_verify_hostname: bool,
}

impl Default for SecurityConfig {
    /// `PLAINTEXT`, no SASL, system CA roots, host names verified (Kafka's defaults).
    fn default() -> Self {
        Self {
            protocol: SecurityProtocol::Plaintext,
            sasl_mechanism: None,
            sasl_username: None,
            sasl_password: None,
            ssl_ca_location: None,
            ssl_certificate_location: None,
            ssl_key_location: None,
            ssl_verify_hostname: true,
        }
    }
}

impl SecurityConfig {
    setter!(
        /// Sets `security.protocol` (default `PLAINTEXT`).
        with_protocol => protocol: SecurityProtocol
    );

    /// Sets `sasl.mechanism`, `sasl.username` and `sasl.password` (no defaults; all three are
    /// required by `SASL_PLAINTEXT` and `SASL_SSL`).
    pub fn with_sasl(
        mut self,
        mechanism: SaslMechanism,
        username: impl Into<String>,
        password: Secret,
    ) -> Self {
        self.sasl_mechanism = Some(mechanism);
        self.sasl_username = Some(username.into());
        self.sasl_password = Some(password);
        self
    }

    setter!(
        /// Sets `ssl.ca.location`, a PEM file of trusted CAs (default: the system roots).
        with_ssl_ca_location => ssl_ca_location: Some(impl Into<std::path::PathBuf>)
    );

    /// Sets `ssl.certificate.location` and `ssl.key.location`, the PEM client certificate chain
    /// and its private key for mutual TLS (default none).
    pub fn with_ssl_client_certificate(
        mut self,
        certificate: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
    ) -> Self {
        self.ssl_certificate_location = Some(certificate.into());
        self.ssl_key_location = Some(key.into());
        self
    }

    setter!(
        /// Sets `ssl.endpoint.identification.algorithm`: `true` ("https", the default) verifies the
        /// broker's host name, `false` ("") does not.
        with_ssl_verify_hostname => ssl_verify_hostname: bool
    );

    /// Checks that the settings fit `security.protocol`, as [`ClientConfig::validate`] does:
    /// the SASL protocols need `sasl.mechanism`, `sasl.username` and `sasl.password` (none of
    /// them empty); `sasl.*` settings with a protocol that does not use SASL, and `ssl.*.location`
    /// settings with one that does not use TLS, are errors (a forgotten `security.protocol` would
    /// otherwise connect without the authentication or encryption they ask for);
    /// `ssl.certificate.location` and `ssl.key.location` come together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let protocol = self.protocol.name();
        let sasl = [
            ("sasl.mechanism", self.sasl_mechanism.is_some()),
            ("sasl.username", self.sasl_username.is_some()),
            ("sasl.password", self.sasl_password.is_some()),
        ];
        for (key, set) in sasl {
            if self.protocol.uses_sasl() && !set {
                return Err(ConfigError {
                    key,
                    rule: format!("is required with security.protocol={protocol}"),
                });
            }
            if !self.protocol.uses_sasl() && set {
                return Err(ConfigError {
                    key,
                    rule: format!(
                        "is set, but security.protocol={protocol} does not use SASL \
                         (use SASL_PLAINTEXT or SASL_SSL)"
                    ),
                });
            }
        }
        if self.sasl_username.as_deref().is_some_and(str::is_empty) {
            return Err(ConfigError {
                key: "sasl.username",
                rule: "must not be empty".into(),
            });
        }
        if self.sasl_password.as_ref().is_some_and(|p| p.0.is_empty()) {
            return Err(ConfigError {
                key: "sasl.password",
                rule: "must not be empty".into(),
            });
        }
        let files = [
            ("ssl.ca.location", &self.ssl_ca_location),
            ("ssl.certificate.location", &self.ssl_certificate_location),
            ("ssl.key.location", &self.ssl_key_location),
        ];
        for (key, path) in files {
            if path.is_some() && !self.protocol.uses_tls() {
                return Err(ConfigError {
                    key,
                    rule: format!(
                        "is set, but security.protocol={protocol} does not use TLS (use SSL or \
                         SASL_SSL)"
                    ),
                });
            }
        }
        match (&self.ssl_certificate_location, &self.ssl_key_location) {
            (Some(_), None) => Err(ConfigError {
                key: "ssl.key.location",
                rule: "is required when ssl.certificate.location is set".into(),
            }),
            (None, Some(_)) => Err(ConfigError {
                key: "ssl.certificate.location",
                rule: "is required when ssl.key.location is set".into(),
            }),
            _ => Ok(()),
        }
    }

    /// What these settings allow that weakens the connection, for a warning: host names not
    /// verified over TLS, a SASL PLAIN password sent in cleartext.
    pub fn weaknesses(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.protocol.uses_tls() && !self.ssl_verify_hostname {
            out.push(
                "ssl.endpoint.identification.algorithm is empty: the broker's certificate is \
                 not checked against its host name",
            );
        }
        if self.protocol == SecurityProtocol::SaslPlaintext
            && self.sasl_mechanism == Some(SaslMechanism::Plain)
        {
            out.push(
                "sasl.mechanism=PLAIN over security.protocol=SASL_PLAINTEXT: the password \
                 crosses the network in cleartext",
            );
        }
        out
    }
}

/// How to reach the cluster (the transport's settings).
///
/// Built with [`ClientConfig::new`] and the `with_*` methods (each names its Kafka property and
/// default), or from Java-style properties with [`crate::properties::from_properties`]:
///
/// ```
/// use std::time::Duration;
/// use consumer_membership_core::ClientConfig;
///
/// let client = ClientConfig::new("kafka-1:9092,kafka-2:9092")?
///     .with_client_id("orders-service")
///     .with_request_timeout(Duration::from_secs(10));
/// client.validate()?;
/// # Ok::<(), consumer_membership_core::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientConfig {
    /// `bootstrap.servers`: `host:port` entries (no default; at least one).
    pub bootstrap_servers: Vec<String>,
    /// `client.id`, sent in every request header (default `"consumer-membership"`).
    pub client_id: String,
    /// `request.timeout.ms` (default 30 s) of the requests the transport sends of its own
    /// accord (the refresh of its broker list, `TcpTransport::broker_versions`) and of
    /// `find_coordinator`. Not a member's requests: each
    /// carries its own timeout, [`GroupConfig::request_timeout`], which
    /// `Transport::send` honours (connecting included).
    pub request_timeout: Duration,
    /// `default.api.timeout.ms` (default 60 s): the bound of a blocking lookup such as
    /// `find_coordinator`, retries included.
    pub default_api_timeout: Duration,
    /// `reconnect.backoff.ms` (default 50 ms).
    pub reconnect_backoff: Duration,
    /// `reconnect.backoff.max.ms` (default 1 s).
    pub reconnect_backoff_max: Duration,
    /// `socket.connection.setup.timeout.ms` (default 10 s): how long one connection attempt
    /// (TCP connect, TLS, ApiVersions, SASL) may take before the next address is tried or the
    /// request fails. A request's own timeout never stretches it: a JoinGroup that may be
    /// parked for minutes still gives up on a broker that does not accept it within this.
    pub socket_connection_setup_timeout: Duration,
    /// `retry.backoff.ms` (default 100 ms): the first retry delay of
    /// `find_coordinator`. A member's retries follow
    /// [`GroupConfig::retry_backoff`]; reconnecting to a broker follows
    /// [`reconnect_backoff`](Self::reconnect_backoff).
    pub retry_backoff: Duration,
    /// `retry.backoff.max.ms` (default 1 s): the longest retry delay of
    /// `find_coordinator` (a member's:
    /// [`GroupConfig::retry_backoff_max`]).
    pub retry_backoff_max: Duration,
    /// Largest response frame accepted, in bytes (default 100 MiB, the broker's
    /// `socket.request.max.bytes`); a larger size prefix fails the connection before any
    /// allocation. This crate's own setting (the Java client has none; errors call it
    /// `max.response.size`).
    pub max_response_size: usize,
    /// `client.rack` (default none).
    pub client_rack: Option<String>,
    /// `connections.max.idle.ms` (default 9 min): a connection to a broker node (coordinator or
    /// data path) that carried no request for this long is closed; the next request to that
    /// node connects again.
    pub connections_max_idle: Duration,
    /// TLS and SASL: `security.protocol`, `sasl.*`, `ssl.*` (default `PLAINTEXT`).
    pub security: SecurityConfig,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            bootstrap_servers: Vec::new(),
            client_id: "consumer-membership".into(),
            request_timeout: Duration::from_secs(30),
            default_api_timeout: Duration::from_secs(60),
            reconnect_backoff: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_secs(1),
            socket_connection_setup_timeout: Duration::from_secs(10),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
            max_response_size: 100 * 1024 * 1024,
            client_rack: None,
            connections_max_idle: Duration::from_millis(540_000),
            security: SecurityConfig::default(),
        }
    }
}

impl ClientConfig {
    /// Defaults, with `bootstrap.servers` parsed from a comma-separated list.
    pub fn new(bootstrap_servers: &str) -> Result<Self, ConfigError> {
        let config = Self {
            bootstrap_servers: bootstrap_servers
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            ..Self::default()
        };
        config.validate()?;
        Ok(config)
    }

    /// Sets `bootstrap.servers`, `host:port` entries (no default; at least one).
    pub fn with_bootstrap_servers<I, S>(mut self, servers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.bootstrap_servers = servers.into_iter().map(Into::into).collect();
        self
    }

    setter!(
        /// Sets `client.id`, sent in every request header (default `"consumer-membership"`).
        with_client_id => client_id: impl Into<String>
    );

    setter!(
        /// Sets `request.timeout.ms` (default 30 s) of the transport's own requests (see
        /// [`request_timeout`](Self::request_timeout)).
        with_request_timeout => request_timeout: Duration
    );

    setter!(
        /// Sets `default.api.timeout.ms` (default 60 s; see
        /// [`default_api_timeout`](Self::default_api_timeout)).
        with_default_api_timeout => default_api_timeout: Duration
    );

    setter!(
        /// Sets `reconnect.backoff.ms` (default 50 ms).
        with_reconnect_backoff => reconnect_backoff: Duration
    );

    setter!(
        /// Sets `reconnect.backoff.max.ms` (default 1 s).
        with_reconnect_backoff_max => reconnect_backoff_max: Duration
    );

    setter!(
        /// Sets `socket.connection.setup.timeout.ms` (default 10 s; see
        /// [`socket_connection_setup_timeout`](Self::socket_connection_setup_timeout)).
        with_socket_connection_setup_timeout => socket_connection_setup_timeout: Duration
    );

    setter!(
        /// Sets `retry.backoff.ms` (default 100 ms) of `find_coordinator` (see
        /// [`retry_backoff`](Self::retry_backoff)).
        with_retry_backoff => retry_backoff: Duration
    );

    setter!(
        /// Sets `retry.backoff.max.ms` (default 1 s) of `find_coordinator` (see
        /// [`retry_backoff_max`](Self::retry_backoff_max)).
        with_retry_backoff_max => retry_backoff_max: Duration
    );

    setter!(
        /// Sets the largest response frame accepted, in bytes (default 100 MiB; see
        /// [`max_response_size`](Self::max_response_size)).
        with_max_response_size => max_response_size: usize
    );

    setter!(
        /// Sets `client.rack` (default none).
        with_client_rack => client_rack: Some(impl Into<String>)
    );

    setter!(
        /// Sets `connections.max.idle.ms` (default 9 min; see
        /// [`connections_max_idle`](Self::connections_max_idle)).
        with_connections_max_idle => connections_max_idle: Duration
    );

    setter!(
        /// Sets the TLS and SASL settings (`security.protocol`, `sasl.*`, `ssl.*`; default
        /// `PLAINTEXT`).
        with_security => security: SecurityConfig
    );

    /// Checks every value; the error names the Kafka config key and the rule.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |key, rule: &str| {
            Err(ConfigError {
                key,
                rule: rule.into(),
            })
        };
        if self.bootstrap_servers.is_empty() {
            return err("bootstrap.servers", "at least one host:port is required");
        }
        for s in &self.bootstrap_servers {
            let ok = s.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
            });
            if !ok {
                return Err(ConfigError {
                    key: "bootstrap.servers",
                    rule: format!("{s:?} is not host:port with a port in 1..=65535"),
                });
            }
        }
        if self.request_timeout.is_zero() {
            return err("request.timeout.ms", "must be positive");
        }
        if self.socket_connection_setup_timeout.is_zero() {
            return err("socket.connection.setup.timeout.ms", "must be positive");
        }
        if self.reconnect_backoff > self.reconnect_backoff_max {
            return err(
                "reconnect.backoff.ms",
                "must not exceed reconnect.backoff.max.ms",
            );
        }
        if self.max_response_size < 8 {
            return err("max.response.size", "must be at least 8 bytes");
        }
        if self.connections_max_idle.is_zero() {
            return err("connections.max.idle.ms", "must be positive");
        }
        self.security.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_servers_are_validated() {
        assert_eq!(
            ClientConfig::new("127.0.0.1:9092, h:1")
                .unwrap()
                .bootstrap_servers,
            vec!["127.0.0.1:9092", "h:1"]
        );
        for bad in ["", " , ", "host", "host:0", "host:70000", ":9092", "h:x"] {
            let e = ClientConfig::new(bad).unwrap_err();
            assert_eq!(e.key, "bootstrap.servers", "{bad:?}");
        }
        let mut c = ClientConfig::new("h:1").unwrap();
        c.reconnect_backoff = Duration::from_secs(2);
        assert_eq!(c.validate().unwrap_err().key, "reconnect.backoff.ms");
    }

    #[test]
    fn security_defaults_verify_host_names() {
        // Kafka's ssl.endpoint.identification.algorithm defaults to "https".
        assert!(SecurityConfig::default().ssl_verify_hostname);
        assert_eq!(ClientConfig::default().security, SecurityConfig::default());
        let s = SecurityConfig::default()
            .with_protocol(SecurityProtocol::Ssl)
            .with_ssl_client_certificate("c.pem", "k.pem")
            .with_ssl_verify_hostname(false);
        assert_eq!(s.protocol, SecurityProtocol::Ssl);
        assert_eq!(s.ssl_key_location.as_deref(), Some("k.pem".as_ref()));
        assert!(!s.ssl_verify_hostname);
    }

    #[test]
    fn builder_security_settings_need_a_protocol_that_uses_them() {
        let with = |s: SecurityConfig| ClientConfig::new("h:1").unwrap().with_security(s);
        let sasl = || {
            SecurityConfig::default().with_sasl(SaslMechanism::Plain, "alice", Secret::new("pw"))
        };
        let e = with(sasl()).validate().unwrap_err();
        assert_eq!(e.key, "sasl.mechanism");
        assert_eq!(
            e.to_string(),
            "invalid value for sasl.mechanism: is set, but security.protocol=PLAINTEXT does not \
             use SASL (use SASL_PLAINTEXT or SASL_SSL)"
        );
        let e = with(sasl().with_protocol(SecurityProtocol::Ssl))
            .validate()
            .unwrap_err();
        assert!(e.rule.contains("security.protocol=SSL"), "{e}");
        let e = with(SecurityConfig::default().with_protocol(SecurityProtocol::SaslSsl))
            .validate()
            .unwrap_err();
        assert_eq!(
            (e.key, e.rule.as_str()),
            (
                "sasl.mechanism",
                "is required with security.protocol=SASL_SSL"
            )
        );
        let e = with(SecurityConfig::default().with_ssl_ca_location("ca.pem"))
            .validate()
            .unwrap_err();
        assert_eq!(e.key, "ssl.ca.location");
        let e = with(
            sasl()
                .with_protocol(SecurityProtocol::SaslPlaintext)
                .with_ssl_client_certificate("c.pem", "k.pem"),
        )
        .validate()
        .unwrap_err();
        assert_eq!(e.key, "ssl.certificate.location");
        assert!(e.rule.contains("does not use TLS"), "{e}");
        let mut only_key = SecurityConfig::default().with_protocol(SecurityProtocol::Ssl);
        only_key.ssl_key_location = Some("k.pem".into());
        assert_eq!(
            with(only_key).validate().unwrap_err().key,
            "ssl.certificate.location"
        );
        let mut empty = sasl().with_protocol(SecurityProtocol::SaslSsl);
        empty.sasl_username = Some(String::new());
        assert_eq!(with(empty).validate().unwrap_err().key, "sasl.username");
        with(
            sasl()
                .with_protocol(SecurityProtocol::SaslSsl)
                .with_ssl_ca_location("ca.pem")
                .with_ssl_client_certificate("c.pem", "k.pem"),
        )
        .validate()
        .unwrap();
        // Host name verification off with a protocol without TLS changes nothing: allowed.
        with(SecurityConfig::default().with_ssl_verify_hostname(false))
            .validate()
            .unwrap();
        let e = ClientConfig::new("h:1")
            .unwrap()
            .with_connections_max_idle(Duration::ZERO)
            .validate()
            .unwrap_err();
        assert_eq!(e.key, "connections.max.idle.ms");
    }

    #[derive(Debug)]
    struct Named(&'static str);

    impl Assignor for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn protocol(&self) -> crate::assignor::RebalanceProtocol {
            crate::assignor::RebalanceProtocol::Eager
        }
        fn assign(
            &self,
            _: &std::collections::BTreeMap<String, i32>,
            _: &[crate::assignor::MemberMetadata],
        ) -> std::collections::BTreeMap<String, Vec<crate::machine::TopicPartition>> {
            Default::default()
        }
    }

    #[test]
    fn assignors_need_distinct_non_empty_names() {
        let g = GroupConfig::new("g");
        assert_eq!(g.assignor_names(), ["range", "cooperative-sticky"]);
        let with = |list: Vec<Arc<dyn Assignor>>| GroupConfig::new("g").with_assignors(list);
        assert!(
            with(vec![Arc::new(Named("mine")), Arc::new(Range)])
                .validate()
                .is_ok()
        );
        for bad in [
            vec![],
            vec![Arc::new(Named("")) as Arc<dyn Assignor>],
            vec![
                Arc::new(Range),
                Arc::new(Named("mine")),
                Arc::new(Named("range")),
            ],
        ] {
            let e = with(bad).validate().unwrap_err();
            assert_eq!(e.key, "partition.assignment.strategy", "{e}");
        }
    }

    #[test]
    fn group_builders_set_their_fields() {
        let s = Duration::from_secs;
        let g = GroupConfig::new("g")
            .with_protocol(GroupProtocol::Consumer)
            .with_remote_assignor("uniform")
            .with_session_timeout(s(20))
            .with_heartbeat_interval(s(2))
            .with_max_poll_interval(s(60))
            .with_rack_id("r1")
            .with_request_timeout(s(7))
            .with_default_api_timeout(s(8))
            .with_retry_backoff(s(1))
            .with_retry_backoff_max(s(9))
            .with_metadata_max_age(s(10))
            .with_seed(5)
            .with_assignor(Named("mine"));
        g.validate().unwrap();
        assert_eq!(g.protocol, GroupProtocol::Consumer);
        assert_eq!(g.remote_assignor.as_deref(), Some("uniform"));
        assert_eq!(
            [
                g.session_timeout,
                g.heartbeat_interval,
                g.max_poll_interval,
                g.request_timeout,
                g.default_api_timeout,
                g.retry_backoff,
                g.retry_backoff_max,
                g.metadata_max_age
            ],
            [s(20), s(2), s(60), s(7), s(8), s(1), s(9), s(10)]
        );
        assert_eq!(g.rack_id.as_deref(), Some("r1"));
        assert_eq!(g.seed, Some(5));
        assert_eq!(g.assignor_names(), ["mine"]);

        let ms = Duration::from_millis;
        let c = ClientConfig::new("h:1")
            .unwrap()
            .with_bootstrap_servers(["a:1", "b:2"])
            .with_client_id("me")
            .with_request_timeout(ms(1))
            .with_reconnect_backoff(ms(2))
            .with_reconnect_backoff_max(ms(3))
            .with_socket_connection_setup_timeout(ms(4))
            .with_retry_backoff(ms(5))
            .with_retry_backoff_max(ms(6))
            .with_max_response_size(1024)
            .with_client_rack("r1")
            .with_security(SecurityConfig::default().with_protocol(SecurityProtocol::Ssl));
        c.validate().unwrap();
        assert_eq!(c.bootstrap_servers, ["a:1", "b:2"]);
        assert_eq!(c.client_id, "me");
        assert_eq!(
            [
                c.request_timeout,
                c.reconnect_backoff,
                c.reconnect_backoff_max,
                c.socket_connection_setup_timeout,
                c.retry_backoff,
                c.retry_backoff_max
            ],
            [ms(1), ms(2), ms(3), ms(4), ms(5), ms(6)]
        );
        assert_eq!(c.max_response_size, 1024);
        assert_eq!(c.client_rack.as_deref(), Some("r1"));
        assert_eq!(c.security.protocol, SecurityProtocol::Ssl);
    }

    #[test]
    fn debug_output_of_a_config_shows_no_password() {
        let password = Secret::new("s3cr3t-value");
        assert_eq!(format!("{password:?}"), "Secret(***)");
        assert_eq!(password.expose(), "s3cr3t-value");
        let mut c = ClientConfig::new("h:1").unwrap();
        c = c.with_security(
            SecurityConfig::default()
                .with_protocol(SecurityProtocol::SaslSsl)
                .with_sasl(SaslMechanism::Plain, "alice", password),
        );
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cr3t-value"), "{shown}");
        assert!(shown.contains("alice"), "{shown}");
    }
}

/// `group.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum GroupProtocol {
    /// JoinGroup / SyncGroup / Heartbeat (the Java client's default).
    #[default]
    Classic,
    /// KIP-848 ConsumerGroupHeartbeat.
    Consumer,
    /// The consumer protocol, falling back to classic (one way) when the broker answers the first
    /// ConsumerGroupHeartbeat with UNSUPPORTED_VERSION. A regex subscription does not fall back
    /// (classic has no broker-side regex): the member stops with
    /// [`GroupError::RegexNeedsConsumerProtocol`](crate::error::GroupError::RegexNeedsConsumerProtocol).
    Auto,
}

impl GroupProtocol {
    /// The `group.protocol` value: `classic`, `consumer` or `auto`.
    pub const fn as_str(self) -> &'static str {
        match self {
            GroupProtocol::Classic => "classic",
            GroupProtocol::Consumer => "consumer",
            GroupProtocol::Auto => "auto",
        }
    }
}

impl std::fmt::Display for GroupProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// `auto.offset.reset`: where a partition with no committed offset starts reading, by Kafka's
/// names. The one rule for a newly assigned partition: its committed offset when
/// `committed` returns one
/// ([`CommittedOffset::offset`](crate::CommittedOffset::offset) is `Some`), else the offset this
/// names in the partition's log, which the record client looks up (ListOffsets; rskafka's
/// `OffsetAt::Earliest` / `OffsetAt::Latest`). Never a fixed offset such as 0: once retention
/// moved the log start past it, a fetch from there fails with OFFSET_OUT_OF_RANGE.
///
/// This crate fetches no records; it only names the policy (parsed from a properties file by
/// [`properties::offset_reset`](crate::properties::offset_reset)).
///
/// ```
/// use consumer_membership_core::config::OffsetReset;
///
/// assert_eq!("earliest".parse::<OffsetReset>()?, OffsetReset::Earliest);
/// assert_eq!(OffsetReset::default(), OffsetReset::Latest); // Kafka's default
/// assert_eq!(OffsetReset::Earliest.list_offsets_timestamp(), -2);
/// # Ok::<(), consumer_membership_core::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OffsetReset {
    /// `earliest`: the log start offset, the oldest record retention kept. A new group reads
    /// what the topic still holds.
    Earliest,
    /// `latest` (Kafka's default): the log end offset. A new group reads only the records
    /// produced after its members started the partition.
    #[default]
    Latest,
}

impl OffsetReset {
    /// The `auto.offset.reset` value: `earliest` or `latest`.
    pub const fn as_str(self) -> &'static str {
        match self {
            OffsetReset::Earliest => "earliest",
            OffsetReset::Latest => "latest",
        }
    }

    /// The timestamp a ListOffsets request asks for to find this offset (-2 earliest, -1
    /// latest).
    pub const fn list_offsets_timestamp(self) -> i64 {
        match self {
            OffsetReset::Earliest => -2,
            OffsetReset::Latest => -1,
        }
    }
}

impl std::str::FromStr for OffsetReset {
    type Err = ConfigError;

    /// `earliest` or `latest` (surrounding blanks ignored). Kafka's `none` and `by_duration:`
    /// are refused: with them, decide yourself what a partition without a commit does.
    fn from_str(value: &str) -> Result<Self, ConfigError> {
        match value.trim() {
            "earliest" => Ok(OffsetReset::Earliest),
            "latest" => Ok(OffsetReset::Latest),
            other => Err(ConfigError {
                key: "auto.offset.reset",
                rule: format!("{other:?} is not earliest or latest"),
            }),
        }
    }
}

impl std::fmt::Display for OffsetReset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// Group membership settings (Kafka's consumer config names in the docs and errors).
///
/// Built with [`GroupConfig::new`] and the `with_*` methods (each names its Kafka property and
/// default), or from Java-style properties with [`crate::properties::from_properties`]. Nothing is
/// checked until [`validate`](Self::validate) (which every member constructor and
/// `GroupMember::start` run):
///
/// ```
/// use std::time::Duration;
/// use consumer_membership_core::config::GroupConfig;
/// use consumer_membership_core::machine::classic::assignor::CooperativeSticky;
///
/// let group = GroupConfig::new("orders")
///     .with_instance_id("orders-worker-1")
///     .with_session_timeout(Duration::from_secs(30))
///     .with_assignor(CooperativeSticky);
/// group.validate()?;
/// # Ok::<(), consumer_membership_core::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GroupConfig {
    /// `group.id` (no default; required).
    pub group_id: String,
    /// `group.instance.id`: set for a static member (default none: a dynamic member).
    pub instance_id: Option<String>,
    /// `group.protocol` (default classic, as the Java client).
    pub protocol: GroupProtocol,
    /// `group.remote.assignor`: the server-side assignor of the consumer protocol (default
    /// `None`: the broker's default).
    pub remote_assignor: Option<String>,
    /// `session.timeout.ms` (default 45 s; classic protocol).
    pub session_timeout: Duration,
    /// `heartbeat.interval.ms` (default 3 s; classic protocol); must be below the session timeout.
    pub heartbeat_interval: Duration,
    /// The session timeout the coordinator applies to members of the consumer (KIP-848) and
    /// streams (KIP-1071) protocols (default 45 s, Kafka's): the group config
    /// `consumer.session.timeout.ms` / `streams.session.timeout.ms`, else the broker's
    /// `group.consumer.session.timeout.ms` / `group.streams.session.timeout.ms`. No client
    /// property: the broker decides it and the heartbeat does not carry it, so set it to the
    /// group's value. The membership lease of those members runs on it (see
    /// [`crate::machine`], "The membership lease"): a value above the group's lets a member
    /// believe it owns partitions the coordinator already gave away.
    pub group_session_timeout: Duration,
    /// Read [`group_session_timeout`](Self::group_session_timeout) from the cluster (default
    /// off): a consumer or streams member then sends, once, a DescribeConfigs for the group's
    /// `consumer.session.timeout.ms` / `streams.session.timeout.ms` (resource type GROUP), else
    /// for the coordinator's `group.consumer.session.timeout.ms` /
    /// `group.streams.session.timeout.ms`, and uses the value found instead of the configured
    /// one. Off by default: it needs the DESCRIBE_CONFIGS permission on the group (and on the
    /// cluster for the broker's value), which a consumer's principal often lacks; a refusal
    /// leaves the configured value.
    pub read_group_session_timeout: bool,
    /// `max.poll.interval.ms` (default 300 s): the rebalance timeout sent in JoinGroup, and the
    /// longest the application may go without [`poll`](crate::machine::classic::ClassicMember::poll).
    pub max_poll_interval: Duration,
    /// `partition.assignment.strategy`: the classic protocol's assignors, preferred first
    /// (default [`Range`], [`CooperativeSticky`], as the Java client). The built-ins and an
    /// application's own [`Assignor`]s alike; names must be distinct.
    pub assignors: Vec<Arc<dyn Assignor>>,
    /// `client.rack`, sent in the subscription (v3; default none).
    pub rack_id: Option<String>,
    /// `request.timeout.ms` (default 30 s): the timeout of every request the member sends
    /// (coordinator lookup, heartbeats, joins, commits, offset fetches, metadata; a classic
    /// JoinGroup waits at least `max.poll.interval.ms` + 5 s, as Java's), handed to
    /// `Transport::send` with each request; and how long
    /// the driver's `close()` waits for the member to close. It governs the member's requests
    /// whatever the transport's [`ClientConfig::request_timeout`] says.
    pub request_timeout: Duration,
    /// `default.api.timeout.ms` (default 60 s): how long a commit or committed-offsets call may
    /// take in all, waiting for a coordinator and the member's retries included, before it fails
    /// with [`CommitError::TimedOut`](crate::machine::events::CommitError::TimedOut).
    pub default_api_timeout: Duration,
    /// `retry.backoff.ms` (default 100 ms): the first delay of the member's KIP-580 retry
    /// backoff (coordinator lookup, heartbeats and joins after a retriable error, commits and
    /// offset fetches). It governs the member whatever [`ClientConfig::retry_backoff`] says.
    pub retry_backoff: Duration,
    /// `retry.backoff.max.ms` (default 1 s): the ceiling of that backoff; also how soon the
    /// member checks again for a subscribed topic that is missing or has no partitions.
    pub retry_backoff_max: Duration,
    /// `metadata.max.age.ms` (default 5 min): how often the leader checks whether the
    /// subscribed topics' partitions changed (sooner, after `retry.backoff.max.ms`, while a
    /// subscribed topic has none).
    pub metadata_max_age: Duration,
    /// Seed of the member's KIP-580 backoff jitter, and, for the consumer protocol without a
    /// [`member_id`](Self::member_id), of its member id ([`MemberId::from_seed`]). No Kafka
    /// property: the Java client draws it from its own random source (default `None`).
    ///
    /// The sans-IO core (`machine::…::new`) reads no random source of its own, so the seed is one
    /// of its inputs:
    /// - `Some(seed)`: used as given; a run with the same seeds replays exactly (simulations,
    ///   tests). Give every member its own seed: members with one seed retry in lockstep.
    /// - `None` with a [`member_id`](Self::member_id): the seed is folded from the member id's
    ///   bytes. Member ids differ per member instance, so unseeded members that fail together
    ///   still spread their retries (the thundering herd KIP-580's jitter exists to prevent),
    ///   and a member with a given id still replays. (A constant default would make every
    ///   unseeded member retry at the same instants.)
    /// - `None` without a member id: the core has no per-member input to draw from and refuses
    ///   the configuration ([`ConfigError`] with key `seed`) rather than fall back to a value
    ///   shared by every member.
    ///
    /// `GroupMember::start` fills a missing seed from the
    /// OS RNG (and a missing member id from the OS CSPRNG), so driver users set neither.
    pub seed: Option<u64>,
    /// The KIP-1082 member id of the consumer protocol (also under `auto`): the same id on every
    /// heartbeat of this member instance. Give each member instance its own. No Kafka property:
    /// the Java client generates it (default `None`).
    ///
    /// `None`: `GroupMember::start` draws one from the OS
    /// CSPRNG ([`MemberId::generate`]); the sans-IO core, which reads no random source, derives
    /// one from [`seed`](Self::seed) ([`MemberId::from_seed`]). The classic protocol's member id
    /// is the broker's; there this id only seeds the jitter when `seed` is `None`.
    pub member_id: Option<MemberId>,
    /// [`member_id`](Self::member_id) is the one this member instance had in an earlier run of
    /// its process, kept in a store beside the application's state (the driver's
    /// `MemberIdFile`), so the coordinator may still hold it registered under
    /// [`instance_id`](Self::instance_id) (consumer and streams protocols; default false).
    ///
    /// A static member restarted after a crash meets its own earlier registration: the
    /// coordinator answers its epoch-0 join UNRELEASED_INSTANCE_ID until that session expires
    /// (`throwIfInstanceIdIsUnreleased`: only a member that left with epoch -2 releases its
    /// instance id). With a kept id the member releases it itself, as the registered member:
    /// a -2 leave under the kept id, then the epoch-0 join, which takes over the earlier
    /// registration's assignment (a static member keeps its partitions across a -2 leave). The
    /// restart then costs two heartbeat round trips instead of the session timeout.
    ///
    /// Never give two live processes one kept id: the broker cannot tell them apart, and each
    /// would release the other's registration. `MemberIdFile` holds a lock on its file for
    /// that reason. A kept id whose -2 leave is answered FENCED_INSTANCE_ID (another member id
    /// holds the instance id: a second process with this instance id, or an incarnation that
    /// did not keep its id) waits as
    /// [`unreleased_instance_margin`](Self::unreleased_instance_margin) says.
    pub kept_member_id: bool,
    /// How long beyond the group's session timeout
    /// ([`group_session_timeout`](Self::group_session_timeout)) a static member of the consumer or
    /// streams protocol keeps trying to join while UNRELEASED_INSTANCE_ID says another member id
    /// holds its instance id (default 10 s). No Kafka property.
    ///
    /// A crashed earlier incarnation of the member holds it until its session expires; a genuine
    /// second process with the same instance id keeps heartbeating and holds it for good. So the
    /// member reports [`Event::InstanceHeld`](crate::machine::events::Event::InstanceHeld) at
    /// the first such answer, retries its join with backoff (at most
    /// [`retry_backoff_max`](Self::retry_backoff_max) apart), and stops with
    /// [`GroupError::UnreleasedInstanceId`](crate::error::GroupError::UnreleasedInstanceId) only
    /// once the instance id stayed held for the session timeout plus this margin. `None`: stop
    /// at the first such answer (the Java client's behaviour). The classic protocol replaces
    /// the earlier incarnation at once and never waits.
    pub unreleased_instance_margin: Option<Duration>,
}

impl GroupConfig {
    /// Kafka's defaults for `group.id` = `group_id` (see each field).
    pub fn new(group_id: impl Into<String>) -> Self {
        Self {
            group_id: group_id.into(),
            instance_id: None,
            protocol: GroupProtocol::Classic,
            remote_assignor: None,
            session_timeout: Duration::from_secs(45),
            heartbeat_interval: Duration::from_secs(3),
            group_session_timeout: Duration::from_secs(45),
            read_group_session_timeout: false,
            max_poll_interval: Duration::from_secs(300),
            assignors: vec![Arc::new(Range), Arc::new(CooperativeSticky)],
            rack_id: None,
            request_timeout: Duration::from_secs(30),
            default_api_timeout: Duration::from_secs(60),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
            metadata_max_age: Duration::from_secs(300),
            seed: None,
            member_id: None,
            kept_member_id: false,
            unreleased_instance_margin: Some(Duration::from_secs(10)),
        }
    }

    setter!(
        /// Sets `group.instance.id` (default none): a static member (KIP-345).
        with_instance_id => instance_id: Some(impl Into<String>)
    );

    setter!(
        /// Sets the KIP-1082 [`member_id`](Self::member_id) of the consumer protocol (default:
        /// generated).
        with_member_id => member_id: Some(MemberId)
    );

    /// Sets a member id kept from an earlier run of this member instance's process (see
    /// [`kept_member_id`](Self::kept_member_id)): [`member_id`](Self::member_id) `= id`,
    /// `kept_member_id = true`.
    pub fn with_kept_member_id(mut self, id: MemberId) -> Self {
        self.member_id = Some(id);
        self.kept_member_id = true;
        self
    }

    setter!(
        /// Sets [`unreleased_instance_margin`](Self::unreleased_instance_margin) (default 10 s;
        /// `None`: stop at the first UNRELEASED_INSTANCE_ID).
        with_unreleased_instance_margin => unreleased_instance_margin: Option<Duration>
    );

    setter!(
        /// Sets `group.protocol` (default classic).
        with_protocol => protocol: GroupProtocol
    );

    setter!(
        /// Sets `group.remote.assignor`, the consumer protocol's server-side assignor (default: the
        /// broker's).
        with_remote_assignor => remote_assignor: Some(impl Into<String>)
    );

    setter!(
        /// Sets `session.timeout.ms` (default 45 s; classic protocol).
        with_session_timeout => session_timeout: Duration
    );

    setter!(
        /// Sets `heartbeat.interval.ms` (default 3 s; classic protocol), below the session timeout.
        with_heartbeat_interval => heartbeat_interval: Duration
    );

    setter!(
        /// Sets the consumer and streams protocols' [`group_session_timeout`](Self::group_session_timeout)
        /// (default 45 s).
        with_group_session_timeout => group_session_timeout: Duration
    );

    setter!(
        /// Reads the group's session timeout from the cluster (default off; see
        /// [`read_group_session_timeout`](Self::read_group_session_timeout)).
        with_read_group_session_timeout => read_group_session_timeout: bool
    );

    setter!(
        /// Sets `max.poll.interval.ms` (default 300 s; see
        /// [`max_poll_interval`](Self::max_poll_interval)).
        with_max_poll_interval => max_poll_interval: Duration
    );

    /// Sets `partition.assignment.strategy` to this one assignor (default [`Range`],
    /// [`CooperativeSticky`]): a built-in or an application's own [`Assignor`].
    pub fn with_assignor(self, assignor: impl Assignor + 'static) -> Self {
        self.with_assignors([Arc::new(assignor) as Arc<dyn Assignor>])
    }

    /// Sets `partition.assignment.strategy`, preferred first (default [`Range`],
    /// [`CooperativeSticky`]): built-ins and an application's own [`Assignor`]s, with distinct
    /// names.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use consumer_membership_core::config::GroupConfig;
    /// use consumer_membership_core::machine::classic::assignor::{CooperativeSticky, Range};
    ///
    /// let group = GroupConfig::new("g").with_assignors([Arc::new(CooperativeSticky) as _, Arc::new(Range) as _]);
    /// assert_eq!(group.assignor_names(), ["cooperative-sticky", "range"]);
    /// ```
    pub fn with_assignors(
        mut self,
        assignors: impl IntoIterator<Item = Arc<dyn Assignor>>,
    ) -> Self {
        self.assignors = assignors.into_iter().collect();
        self
    }

    /// The names of [`assignors`](Self::assignors), preferred first: the protocol names this
    /// member offers in JoinGroup.
    pub fn assignor_names(&self) -> Vec<&str> {
        self.assignors.iter().map(|a| a.name()).collect()
    }

    setter!(
        /// Sets `client.rack`, sent in the classic subscription (default none).
        with_rack_id => rack_id: Some(impl Into<String>)
    );

    setter!(
        /// Sets `request.timeout.ms` (default 30 s) of the member's requests (see
        /// [`request_timeout`](Self::request_timeout)).
        with_request_timeout => request_timeout: Duration
    );

    setter!(
        /// Sets `default.api.timeout.ms` (default 60 s; see
        /// [`default_api_timeout`](Self::default_api_timeout)).
        with_default_api_timeout => default_api_timeout: Duration
    );

    setter!(
        /// Sets `retry.backoff.ms` (default 100 ms) of the member (see
        /// [`retry_backoff`](Self::retry_backoff)).
        with_retry_backoff => retry_backoff: Duration
    );

    setter!(
        /// Sets `retry.backoff.max.ms` (default 1 s) of the member (see
        /// [`retry_backoff_max`](Self::retry_backoff_max)).
        with_retry_backoff_max => retry_backoff_max: Duration
    );

    setter!(
        /// Sets `metadata.max.age.ms` (default 5 min; see
        /// [`metadata_max_age`](Self::metadata_max_age)).
        with_metadata_max_age => metadata_max_age: Duration
    );

    setter!(
        /// Sets the [`seed`](Self::seed) of the member's jitter (no Kafka property; default drawn by
        /// the driver).
        with_seed => seed: Some(u64)
    );

    /// The seed of the core's backoff jitter: [`seed`](Self::seed), else one folded from
    /// [`member_id`](Self::member_id); an error when neither is set (see [`seed`](Self::seed)).
    pub(crate) fn jitter_seed(&self) -> Result<u64, ConfigError> {
        match (self.seed, &self.member_id) {
            (Some(seed), _) => Ok(seed),
            (None, Some(id)) => Ok(id.jitter_seed()),
            (None, None) => Err(ConfigError {
                key: "seed",
                rule: "the sans-IO core reads no random source of its own: set \
                       GroupConfig::seed or GroupConfig::member_id, different for every member \
                       (GroupMember::start draws both from the OS RNG)"
                    .into(),
            }),
        }
    }

    /// Checks every value; the error names the Kafka config key and the rule.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |key, rule: String| Err(ConfigError { key, rule });
        if self.group_id.is_empty() {
            return err("group.id", "must not be empty".into());
        }
        if let Some(id) = &self.instance_id {
            // Topic-name rules (apache/kafka common/internals/Topic.validate via
            // JoinGroupRequest.validateGroupInstanceId).
            if id.is_empty() || id == "." || id == ".." || id.len() > 249 {
                return err(
                    "group.instance.id",
                    format!("{id:?} must be 1-249 characters and not \".\" or \"..\""),
                );
            }
            if let Some(c) = id
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
            {
                return err(
                    "group.instance.id",
                    format!("{id:?} contains {c:?}; allowed are [a-zA-Z0-9._-]"),
                );
            }
        }
        if self.kept_member_id && self.member_id.is_none() {
            return err(
                "kept_member_id",
                "needs the kept member_id itself (GroupConfig::with_kept_member_id)".into(),
            );
        }
        let ms = |d: Duration| i32::try_from(d.as_millis()).ok().filter(|m| *m > 0);
        for (key, d) in [
            ("session.timeout.ms", self.session_timeout),
            ("heartbeat.interval.ms", self.heartbeat_interval),
            (
                "group.consumer.session.timeout.ms",
                self.group_session_timeout,
            ),
            ("max.poll.interval.ms", self.max_poll_interval),
            ("request.timeout.ms", self.request_timeout),
            ("default.api.timeout.ms", self.default_api_timeout),
        ] {
            if ms(d).is_none() {
                return err(
                    key,
                    format!("{d:?} must be between 1 ms and {} ms", i32::MAX),
                );
            }
        }
        if self.heartbeat_interval >= self.session_timeout {
            return err(
                "heartbeat.interval.ms",
                "must be lower than session.timeout.ms".into(),
            );
        }
        if self.assignors.is_empty() {
            return err(
                "partition.assignment.strategy",
                "at least one assignor is required".into(),
            );
        }
        for (i, assignor) in self.assignors.iter().enumerate() {
            let name = assignor.name();
            if name.is_empty() {
                return err(
                    "partition.assignment.strategy",
                    format!("assignor {assignor:?} has an empty name"),
                );
            }
            if self.assignors[..i].iter().any(|a| a.name() == name) {
                return err(
                    "partition.assignment.strategy",
                    format!("two assignors are named {name:?}; names must be distinct"),
                );
            }
        }
        if self.protocol == GroupProtocol::Classic && self.remote_assignor.is_some() {
            return err(
                "group.remote.assignor",
                "is only used with group.protocol=consumer".into(),
            );
        }
        if self
            .remote_assignor
            .as_deref()
            .is_some_and(|a| a.trim().is_empty())
        {
            return err("group.remote.assignor", "must not be blank".into());
        }
        if let Some(rack) = &self.rack_id
            && rack.trim().is_empty()
        {
            return err("client.rack", "must not be blank".into());
        }
        if self.retry_backoff > self.retry_backoff_max {
            return err(
                "retry.backoff.ms",
                "must not exceed retry.backoff.max.ms".into(),
            );
        }
        Ok(())
    }
}
