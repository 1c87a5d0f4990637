//! Typed errors, and the one table that maps a Kafka error code to what the client does about it.

use std::ops::RangeInclusive;
use std::time::Duration;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::ApiKey;

/// Any error this crate returns.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The connection to a broker failed, or its bytes made no sense.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The group coordinator refused the member for good.
    #[error(transparent)]
    Group(#[from] GroupError),
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// A failure of one request on a connection. Every request in flight on a connection that fails
/// gets the same error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// No TCP connection (or no ApiVersions exchange) could be made in time.
    #[error("cannot connect to {addr}: {reason}")]
    Connect {
        /// The address tried last.
        addr: String,
        /// What went wrong on the last attempt.
        reason: String,
    },
    /// The connection broke (reset, closed by the peer, or by this client after an error).
    #[error("connection to {addr} lost: {reason}")]
    Disconnected {
        /// The peer.
        addr: String,
        /// What happened.
        reason: String,
    },
    /// A frame's size prefix exceeds the configured maximum; nothing of it was allocated.
    #[error("response frame of {size} bytes exceeds the maximum of {max} bytes")]
    FrameTooLarge {
        /// The size the peer announced.
        size: i64,
        /// The configured maximum.
        max: usize,
    },
    /// A frame's size prefix is negative or too small to hold a correlation id.
    #[error("invalid response frame size {size}")]
    InvalidFrameSize {
        /// The size the peer announced.
        size: i32,
    },
    /// The peer closed the connection in the middle of a frame.
    #[error("connection closed mid-frame after {received} of {expected} bytes")]
    TruncatedFrame {
        /// Bytes the frame announced (size prefix included).
        expected: usize,
        /// Bytes that arrived.
        received: usize,
    },
    /// A response answered no request in flight on that connection.
    #[error("response with unknown correlation id {correlation_id}")]
    UnknownCorrelationId {
        /// The id the peer sent.
        correlation_id: i32,
    },
    /// A response body could not be decoded at the version it was requested at.
    #[error("cannot decode {api:?} v{version} response: {reason}")]
    Decode {
        /// The API.
        api: ApiKey,
        /// The version.
        version: i16,
        /// The decoder's message.
        reason: String,
    },
    /// A request could not be encoded at the negotiated version.
    #[error("cannot encode {api:?} v{version} request: {reason}")]
    Encode {
        /// The API.
        api: ApiKey,
        /// The version.
        version: i16,
        /// Why.
        reason: String,
    },
    /// The broker and this client share no version of an API.
    #[error("{api:?}: no common version (client speaks {ours:?}, broker {broker})", broker = broker_range(.broker))]
    UnsupportedApi {
        /// The API.
        api: ApiKey,
        /// Versions this client can send.
        ours: RangeInclusive<i16>,
        /// Versions the broker advertised, `None` when it does not serve the API at all.
        broker: Option<RangeInclusive<i16>>,
    },
    /// The ApiVersions exchange at connect failed with this Kafka error code.
    #[error("ApiVersions failed with error {code} ({name})", name = error_name(*.code))]
    ApiVersions {
        /// The Kafka error code.
        code: i16,
    },
    /// No response within the request timeout; the connection is closed, as the Java client does
    /// (a broker answers in order, so a later answer cannot overtake the missing one).
    #[error("{api:?} request timed out after {timeout:?}")]
    Timeout {
        /// The API.
        api: ApiKey,
        /// The timeout that ran out.
        timeout: Duration,
    },
    /// The transport was shut down.
    #[error("transport closed")]
    Closed,
}

fn broker_range(r: &Option<RangeInclusive<i16>>) -> String {
    match r {
        Some(r) => format!("{r:?}"),
        None => "does not serve it".into(),
    }
}

/// Kafka's name of an error code (`"NOT_COORDINATOR"` for 16), `"NONE"` for 0, or
/// `"UNKNOWN_CODE"`.
pub fn error_name(code: i16) -> String {
    if code == 0 {
        return "NONE".into();
    }
    let Some(e) = known(code) else {
        return "UNKNOWN_CODE".into();
    };
    // The variants are Kafka's names in CamelCase: FencedInstanceId -> FENCED_INSTANCE_ID.
    let mut name = String::new();
    for (i, c) in format!("{e:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

/// The error a non-zero code stands for, `None` for codes Kafka does not define.
fn known(code: i16) -> Option<ResponseError> {
    ResponseError::try_from_code(code).filter(|e| !matches!(e, ResponseError::Unknown(_)))
}

/// A terminal refusal by the group coordinator, or a response that breaks the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GroupError {
    /// GROUP_AUTHORIZATION_FAILED (30): the principal may not use this group.
    #[error("not authorized to use group {group:?} (GROUP_AUTHORIZATION_FAILED)")]
    GroupAuthorizationFailed {
        /// The group id.
        group: String,
    },
    /// A non-retriable error code with no more specific handling for this API.
    #[error("{api:?} failed with non-retriable error {code} ({name})", name = error_name(*.code))]
    Fatal {
        /// The API.
        api: ApiKey,
        /// The Kafka error code.
        code: i16,
    },
    /// An error code Kafka does not define (as of this crate's kafka-protocol).
    #[error("{api:?} failed with unknown error code {code}")]
    UnknownErrorCode {
        /// The API.
        api: ApiKey,
        /// The code.
        code: i16,
    },
    /// A response that decodes but breaks the protocol (missing fields, impossible values).
    #[error("invalid {api:?} response: {reason}")]
    InvalidResponse {
        /// The API.
        api: ApiKey,
        /// What is wrong.
        reason: String,
    },
    /// The request could not be delivered for good (e.g. the broker does not serve the API).
    #[error(transparent)]
    Transport(#[from] TransportError),
}

/// An invalid configuration value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value for {key}: {rule}")]
pub struct ConfigError {
    /// The Kafka config name (e.g. `bootstrap.servers`).
    pub key: &'static str,
    /// The rule the value breaks.
    pub rule: String,
}

/// What the client does about an error code in a response.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorAction {
    /// No error.
    Proceed,
    /// Retry the same request after the KIP-580 backoff.
    RetryBackoff,
    /// The coordinator moved or is gone: look it up again, then retry.
    Rediscover,
    /// Stop: the error is terminal.
    Fatal(GroupError),
}

/// THE table: `(api, error code)` to action. Rows cite the Java client behaviour they follow
/// (protocol.md §3.3, §6.6; apache/kafka `AbstractCoordinator`, `CoordinatorRequestManager`).
/// `group` names the group in typed errors.
pub fn classify(api: ApiKey, code: i16, group: &str) -> ErrorAction {
    use ErrorAction::*;
    const NONE: i16 = 0;
    const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    const NOT_COORDINATOR: i16 = 16;
    const GROUP_AUTHORIZATION_FAILED: i16 = 30;
    match (api, code) {
        (_, NONE) => Proceed,
        (_, GROUP_AUTHORIZATION_FAILED) => Fatal(GroupError::GroupAuthorizationFailed {
            group: group.to_owned(),
        }),
        // FindCoordinator: every retriable error (the coordinator is loading, the offsets topic
        // is being created, the broker answered before it knew) is retried after the backoff
        // (AbstractCoordinator.ensureCoordinatorReady, CoordinatorRequestManager.onFailedResponse).
        (ApiKey::FindCoordinator, _) if is_retriable(code) => RetryBackoff,
        // Requests sent to the coordinator: it moved or is gone, so look it up again
        // (AbstractCoordinator.markCoordinatorUnknown on NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE).
        (_, NOT_COORDINATOR | COORDINATOR_NOT_AVAILABLE) => Rediscover,
        (_, COORDINATOR_LOAD_IN_PROGRESS) => RetryBackoff,
        (_, c) if known(c).is_none() => Fatal(GroupError::UnknownErrorCode { api, code }),
        (_, c) if is_retriable(c) => RetryBackoff,
        (_, _) => Fatal(GroupError::Fatal { api, code }),
    }
}

/// Whether Kafka marks the code as retriable (a `RetriableException` in the Java client).
pub fn is_retriable(code: i16) -> bool {
    known(code).is_some_and(|e| e.is_retriable())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_coordinator_rows() {
        let g = "grp";
        let f = |code| classify(ApiKey::FindCoordinator, code, g);
        assert_eq!(f(0), ErrorAction::Proceed);
        assert_eq!(f(14), ErrorAction::RetryBackoff); // COORDINATOR_LOAD_IN_PROGRESS
        assert_eq!(f(15), ErrorAction::RetryBackoff); // COORDINATOR_NOT_AVAILABLE
        assert_eq!(f(16), ErrorAction::RetryBackoff); // NOT_COORDINATOR
        assert_eq!(f(7), ErrorAction::RetryBackoff); // REQUEST_TIMED_OUT
        assert_eq!(
            f(30),
            ErrorAction::Fatal(GroupError::GroupAuthorizationFailed {
                group: "grp".into()
            })
        );
        assert_eq!(
            f(24),
            ErrorAction::Fatal(GroupError::Fatal {
                api: ApiKey::FindCoordinator,
                code: 24
            })
        );
        assert_eq!(
            f(-1),
            ErrorAction::Fatal(GroupError::Fatal {
                api: ApiKey::FindCoordinator,
                code: -1
            })
        );
        assert_eq!(
            f(9999),
            ErrorAction::Fatal(GroupError::UnknownErrorCode {
                api: ApiKey::FindCoordinator,
                code: 9999
            })
        );
    }

    #[test]
    fn coordinator_bound_requests_rediscover_on_coordinator_loss() {
        for api in [
            ApiKey::Heartbeat,
            ApiKey::JoinGroup,
            ApiKey::ConsumerGroupHeartbeat,
            ApiKey::OffsetCommit,
        ] {
            assert_eq!(classify(api, 16, "g"), ErrorAction::Rediscover, "{api:?}");
            assert_eq!(classify(api, 15, "g"), ErrorAction::Rediscover, "{api:?}");
            assert_eq!(classify(api, 14, "g"), ErrorAction::RetryBackoff, "{api:?}");
        }
    }

    #[test]
    fn error_messages_name_the_code() {
        let e = GroupError::Fatal {
            api: ApiKey::Heartbeat,
            code: 82,
        };
        assert!(e.to_string().contains("FENCED_INSTANCE_ID"), "{e}");
        assert_eq!(error_name(16), "NOT_COORDINATOR");
        assert_eq!(error_name(-1), "UNKNOWN_SERVER_ERROR");
        let e = TransportError::UnsupportedApi {
            api: ApiKey::JoinGroup,
            ours: 5..=9,
            broker: Some(0..=4),
        };
        assert!(
            e.to_string().contains("JoinGroup") && e.to_string().contains("0..=4"),
            "{e}"
        );
        assert_eq!(error_name(0), "NONE");
        assert_eq!(error_name(31000), "UNKNOWN_CODE");
    }
}
