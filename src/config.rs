//! Configuration, with Kafka's config names in errors.

use std::time::Duration;

use crate::error::ConfigError;
use crate::member_id::MemberId;

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

/// TLS and SASL settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SecurityConfig {
    /// `security.protocol`.
    pub protocol: SecurityProtocol,
    /// `sasl.mechanism` (required for the SASL protocols).
    pub sasl_mechanism: Option<SaslMechanism>,
    /// `sasl.username`.
    pub sasl_username: Option<String>,
    /// `sasl.password`.
    pub sasl_password: Option<Secret>,
    /// `ssl.ca.location`: PEM file of trusted CAs; `None` uses the system roots.
    pub ssl_ca_location: Option<std::path::PathBuf>,
    /// `ssl.certificate.location`: PEM client certificate chain (mTLS).
    pub ssl_certificate_location: Option<std::path::PathBuf>,
    /// `ssl.key.location`: PEM private key of the client certificate.
    pub ssl_key_location: Option<std::path::PathBuf>,
    /// `ssl.endpoint.identification.algorithm`: `true` (default, "https") verifies the broker's
    /// host name; `false` ("") turns that off.
    pub ssl_verify_hostname: bool,
}

/// How to reach the cluster (the transport's settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// `bootstrap.servers`: `host:port` entries.
    pub bootstrap_servers: Vec<String>,
    /// `client.id`, sent in every request header.
    pub client_id: String,
    /// `request.timeout.ms` (default 30 s).
    pub request_timeout: Duration,
    /// `reconnect.backoff.ms` (default 50 ms).
    pub reconnect_backoff: Duration,
    /// `reconnect.backoff.max.ms` (default 1 s).
    pub reconnect_backoff_max: Duration,
    /// `socket.connection.setup.timeout.ms` (default 10 s): how long one connection attempt
    /// (TCP connect, TLS, ApiVersions, SASL) may take before the next address is tried or the
    /// request fails. A request's own timeout never stretches it: a JoinGroup that may be
    /// parked for minutes still gives up on a broker that does not accept it within this.
    pub socket_connection_setup_timeout: Duration,
    /// `retry.backoff.ms` (default 100 ms).
    pub retry_backoff: Duration,
    /// `retry.backoff.max.ms` (default 1 s).
    pub retry_backoff_max: Duration,
    /// Largest response frame accepted, in bytes (default 100 MiB, the broker's
    /// `socket.request.max.bytes`); a larger size prefix fails the connection before any
    /// allocation.
    pub max_response_size: usize,
    /// `client.rack`.
    pub client_rack: Option<String>,
    /// TLS and SASL.
    pub security: SecurityConfig,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            bootstrap_servers: Vec::new(),
            client_id: "consumer-membership".into(),
            request_timeout: Duration::from_secs(30),
            reconnect_backoff: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_secs(1),
            socket_connection_setup_timeout: Duration::from_secs(10),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
            max_response_size: 100 * 1024 * 1024,
            client_rack: None,
            security: SecurityConfig {
                ssl_verify_hostname: true,
                ..SecurityConfig::default()
            },
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
        Ok(())
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
    fn debug_output_of_a_config_shows_no_password() {
        let password = Secret::new("s3cr3t-value");
        assert_eq!(format!("{password:?}"), "Secret(***)");
        assert_eq!(password.expose(), "s3cr3t-value");
        let mut c = ClientConfig::new("h:1").unwrap();
        c.security.protocol = SecurityProtocol::SaslSsl;
        c.security.sasl_mechanism = Some(SaslMechanism::Plain);
        c.security.sasl_username = Some("alice".into());
        c.security.sasl_password = Some(password);
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

/// Group membership settings (Kafka's consumer config names in errors).
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// `group.id`.
    pub group_id: String,
    /// `group.instance.id`: set for a static member.
    pub instance_id: Option<String>,
    /// `group.protocol` (default classic, as the Java client).
    pub protocol: GroupProtocol,
    /// `group.remote.assignor`: the server-side assignor of the consumer protocol (`None`: the
    /// broker's default).
    pub remote_assignor: Option<String>,
    /// `session.timeout.ms` (default 45 s).
    pub session_timeout: Duration,
    /// `heartbeat.interval.ms` (default 3 s); must be below the session timeout.
    pub heartbeat_interval: Duration,
    /// `max.poll.interval.ms` (default 300 s): the rebalance timeout sent in JoinGroup, and the
    /// longest the application may go without [`poll`](crate::machine::classic::ClassicMember::poll).
    pub max_poll_interval: Duration,
    /// `partition.assignment.strategy`, by protocol name, preferred first (default
    /// `["range", "cooperative-sticky"]`, as the Java client).
    pub assignors: Vec<String>,
    /// `client.rack`, sent in the subscription (v3).
    pub rack_id: Option<String>,
    /// `request.timeout.ms` (default 30 s).
    pub request_timeout: Duration,
    /// `default.api.timeout.ms` (default 60 s): how long an async commit or committed-offsets
    /// call may take in all, waiting for a coordinator and retries included, before it fails
    /// with [`CommitError::TimedOut`](crate::machine::events::CommitError::TimedOut).
    pub default_api_timeout: Duration,
    /// `retry.backoff.ms` (default 100 ms).
    pub retry_backoff: Duration,
    /// `retry.backoff.max.ms` (default 1 s).
    pub retry_backoff_max: Duration,
    /// `metadata.max.age.ms` (default 5 min): how often the leader checks whether the
    /// subscribed topics' partitions changed (sooner, after `retry.backoff.max.ms`, while a
    /// subscribed topic has none).
    pub metadata_max_age: Duration,
    /// Seed of the member's KIP-580 backoff jitter, and, for the consumer protocol without a
    /// [`member_id`](Self::member_id), of its member id ([`MemberId::from_seed`]).
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
    /// [`GroupMember::start`](crate::driver::GroupMember::start) fills a missing seed from the
    /// OS RNG (and a missing member id from the OS CSPRNG), so driver users set neither.
    pub seed: Option<u64>,
    /// The KIP-1082 member id of the consumer protocol (also under `auto`): the same id on every
    /// heartbeat of this member instance. Give each member instance its own.
    ///
    /// `None`: [`GroupMember::start`](crate::driver::GroupMember::start) draws one from the OS
    /// CSPRNG ([`MemberId::generate`]); the sans-IO core, which reads no random source, derives
    /// one from [`seed`](Self::seed) ([`MemberId::from_seed`]). The classic protocol's member id
    /// is the broker's; there this id only seeds the jitter when `seed` is `None`.
    pub member_id: Option<MemberId>,
    /// **Test only** (feature `sim`): reproduce the Java client's behaviour (KAFKA-20985) of
    /// wiping a classic member's id whenever a LeaveGroup is suppressed (a static member's
    /// unsubscribe, close or poll timeout, `resetGenerationOnLeaveGroup`), with no quarantine of
    /// an empty-id JoinGroup in doubt and no forgiveness of the self-fence that follows. A static
    /// member with this policy rejoins with `""` and can be fenced by its own abandoned
    /// JoinGroup; it exists so simulations and tests can show the difference. Default `false`
    /// (this crate's policy: the member id is kept). Applies to the classic protocol only
    /// (also after a `group.protocol=auto` fallback); see
    /// [`ClassicMember::set_java_reset_policy`](crate::machine::classic::ClassicMember::set_java_reset_policy).
    #[cfg(feature = "sim")]
    pub java_reset_policy: bool,
}

impl GroupConfig {
    /// Defaults for `group_id`.
    pub fn new(group_id: impl Into<String>) -> Self {
        Self {
            group_id: group_id.into(),
            instance_id: None,
            protocol: GroupProtocol::Classic,
            remote_assignor: None,
            session_timeout: Duration::from_secs(45),
            heartbeat_interval: Duration::from_secs(3),
            max_poll_interval: Duration::from_secs(300),
            assignors: vec!["range".into(), "cooperative-sticky".into()],
            rack_id: None,
            request_timeout: Duration::from_secs(30),
            default_api_timeout: Duration::from_secs(60),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
            metadata_max_age: Duration::from_secs(300),
            seed: None,
            member_id: None,
            #[cfg(feature = "sim")]
            java_reset_policy: false,
        }
    }

    /// Sets `group.instance.id` (static membership).
    pub fn with_instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// Sets the KIP-1082 [`member_id`](Self::member_id) of the consumer protocol.
    pub fn with_member_id(mut self, id: MemberId) -> Self {
        self.member_id = Some(id);
        self
    }

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

    /// **Test only** (feature `sim`): sets [`java_reset_policy`](Self::java_reset_policy), the
    /// Java client's member-id reset on a suppressed LeaveGroup (KAFKA-20985). Never for
    /// production: a static member with it can fence itself.
    #[cfg(feature = "sim")]
    pub fn with_java_reset_policy(mut self, on: bool) -> Self {
        self.java_reset_policy = on;
        self
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
        let ms = |d: Duration| i32::try_from(d.as_millis()).ok().filter(|m| *m > 0);
        for (key, d) in [
            ("session.timeout.ms", self.session_timeout),
            ("heartbeat.interval.ms", self.heartbeat_interval),
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
        for name in &self.assignors {
            if crate::machine::classic::assignor::by_name(name).is_none() {
                return err(
                    "partition.assignment.strategy",
                    format!(
                        "unknown assignor {name:?}; known: range, roundrobin, cooperative-sticky"
                    ),
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
