//! Configuration, with Kafka's config names in errors.

use std::time::Duration;

use crate::error::ConfigError;

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
    /// `retry.backoff.ms` (default 100 ms).
    pub retry_backoff: Duration,
    /// `retry.backoff.max.ms` (default 1 s).
    pub retry_backoff_max: Duration,
    /// Largest response frame accepted, in bytes (default 100 MiB, the broker's
    /// `socket.request.max.bytes`); a larger size prefix fails the connection before any
    /// allocation.
    pub max_response_size: usize,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            bootstrap_servers: Vec::new(),
            client_id: "consumer-membership".into(),
            request_timeout: Duration::from_secs(30),
            reconnect_backoff: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_secs(1),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
            max_response_size: 100 * 1024 * 1024,
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
}
