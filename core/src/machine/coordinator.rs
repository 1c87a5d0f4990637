//! Coordinator discovery: the FindCoordinator sub-machine.
//!
//! Per key (a group id): `Unknown -> Looking -> Known(broker)`, with `Backoff` between failed
//! attempts and `Failed` for terminal errors. Unknown keys are looked up together in one
//! FindCoordinator v4+ request (KIP-699); when the broker only speaks v0-3, which carry a single key,
//! the machine falls back to one request per key for good (what apache/kafka's admin
//! `CoordinatorStrategy` does on `UnsupportedBatchLookupException`).
//!
//! Error handling follows `AbstractCoordinator.ensureCoordinatorReady` and
//! `CoordinatorRequestManager`: retriable errors (COORDINATOR_NOT_AVAILABLE while the offsets topic
//! is being created, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, transport failures) are retried
//! after the KIP-580 backoff; GROUP_AUTHORIZATION_FAILED and other non-retriable codes are terminal.
//! A requester that gets NOT_COORDINATOR from the coordinator calls [`CoordinatorLookup::rediscover`].
//!
//! A lookup with a deadline ([`CoordinatorLookup::set_deadline`], `default.api.timeout.ms` for
//! the driver's `find_coordinator`) fails every key still unknown when it passes with
//! [`GroupError::TimedOut`], naming the broker asked last and its last failure. Failures that
//! retrying the same broker will not fix ([`TransportError::is_persistent`]: answers that are not
//! Kafka's or do not decode, TLS, SASL) are reported as [`LookupEvent::Trouble`] at once, once per
//! streak of failures, while the lookup keeps retrying with backoff.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, FindCoordinatorResponse, ResponseKind};

use super::timer::{Timer, TimerTable};
use crate::backoff::{ExponentialBackoff, JitterRng};
use crate::error::{ErrorAction, GroupError, TransportError, classify};
use crate::request::{
    Broker, CoordinatorKeyType, Outbound, Request, RequestId, RequestIds, Response, ResponseBody,
    Target,
};

/// Settings of a [`CoordinatorLookup`].
#[derive(Debug, Clone)]
pub struct LookupConfig {
    /// KIP-580 backoff between failed attempts (`retry.backoff.ms`, `retry.backoff.max.ms`).
    pub backoff: ExponentialBackoff,
    /// `request.timeout.ms` for each FindCoordinator.
    pub request_timeout: Duration,
    /// Seed of the backoff jitter.
    pub seed: u64,
}

/// Where the lookup of one key stands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyState {
    /// Not known; a request will be sent at the next poll.
    Unknown {
        /// Failed attempts so far.
        failures: u32,
    },
    /// A request is in flight.
    Looking {
        /// The request.
        request: RequestId,
        /// Failed attempts before this one.
        failures: u32,
    },
    /// Waiting out the backoff after a failure.
    Backoff {
        /// When to try again.
        until: Instant,
        /// Failed attempts so far.
        failures: u32,
    },
    /// The coordinator is known.
    Known(Broker),
    /// The lookup failed for good.
    Failed(GroupError),
}

/// Something the lookup reports to its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LookupEvent {
    /// The coordinator of `key` was found (or changed).
    Found {
        /// The key.
        key: String,
        /// The coordinator.
        coordinator: Broker,
    },
    /// The lookup of `key` failed for good.
    Failed {
        /// The key.
        key: String,
        /// Why.
        error: GroupError,
    },
    /// The lookup of `key` failed in a way retrying the same broker will most likely not fix
    /// ([`TransportError::is_persistent`]); it is retried with backoff all the same. Reported at
    /// the first such failure, and again only when the broker or the kind of failure changes,
    /// or after the key was found.
    Trouble {
        /// The key.
        key: String,
        /// The broker (`host:port`, or `(bootstrap)` when the error does not name it).
        broker: String,
        /// The failure.
        error: TransportError,
    },
}

/// The FindCoordinator sub-machine for a set of keys of one type.
#[derive(Debug, Clone)]
pub struct CoordinatorLookup {
    key_type: CoordinatorKeyType,
    keys: BTreeMap<String, KeyState>,
    /// False once the broker showed it has no FindCoordinator v4+.
    batching: bool,
    config: LookupConfig,
    rng: JitterRng,
    ids: RequestIds,
    timers: TimerTable,
    events: std::collections::VecDeque<LookupEvent>,
    /// The keys each in-flight request asked for.
    in_flight: BTreeMap<RequestId, Vec<String>>,
    /// Each key's failures since it was last found.
    streaks: BTreeMap<String, Streak>,
    /// When keys still unknown fail, and the timeout that set it.
    deadline: Option<(Instant, Duration)>,
}

/// A key's latest failure, and the persistent one reported last.
#[derive(Debug, Clone, Default)]
struct Streak {
    reason: String,
    transport: Option<TransportError>,
    reported: Option<(String, std::mem::Discriminant<TransportError>)>,
}

impl CoordinatorLookup {
    /// A lookup of the group coordinators of `groups`; nothing is sent before the first poll.
    pub fn new(groups: impl IntoIterator<Item = String>, config: LookupConfig) -> Self {
        let rng = JitterRng::from_seed(config.seed);
        Self {
            key_type: CoordinatorKeyType::Group,
            keys: groups
                .into_iter()
                .map(|g| (g, KeyState::Unknown { failures: 0 }))
                .collect(),
            batching: true,
            config,
            rng,
            ids: RequestIds::default(),
            timers: TimerTable::default(),
            events: Default::default(),
            in_flight: BTreeMap::new(),
            streaks: BTreeMap::new(),
            deadline: None,
        }
    }

    /// Fails every key not found by `now + timeout` with [`GroupError::TimedOut`] (the
    /// `default.api.timeout.ms` of a blocking lookup). A request still in flight then is left
    /// to finish; its answer is ignored.
    pub fn set_deadline(&mut self, now: Instant, timeout: Duration) {
        self.deadline = Some((super::timer::after(now, timeout), timeout));
        self.arm_retry_timer();
    }

    /// Whether `id` is a request of this lookup still waiting for its answer.
    pub fn is_waiting_for(&self, id: RequestId) -> bool {
        self.in_flight.contains_key(&id)
    }

    /// Hands out request ids from `ids` (to keep them apart from the owner's own ids).
    pub(crate) fn set_request_ids(&mut self, ids: RequestIds) {
        self.ids = ids;
    }

    /// The state of `key`'s lookup, `None` for a key this lookup does not track.
    pub fn state(&self, key: &str) -> Option<&KeyState> {
        self.keys.get(key)
    }

    /// The coordinator of `key`, when known.
    pub fn coordinator(&self, key: &str) -> Option<&Broker> {
        match self.keys.get(key) {
            Some(KeyState::Known(b)) => Some(b),
            _ => None,
        }
    }

    /// `key`'s latest failure since it was last found, as [`GroupError::TimedOut`] after
    /// `after` would name it.
    pub(crate) fn timed_out(&self, key: &str, after: Duration) -> GroupError {
        timed_out(self.streaks.get(key).cloned(), after)
    }

    /// Forgets `key`'s coordinator (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or a lost
    /// connection from the coordinator) and looks it up again. A lookup already under way or
    /// backing off is left alone; a terminal failure stays terminal.
    pub fn rediscover(&mut self, key: &str) {
        if let Some(state) = self.keys.get_mut(key)
            && matches!(state, KeyState::Known(_))
        {
            tracing::debug!(key, "coordinator unknown, looking it up again");
            *state = KeyState::Unknown { failures: 0 };
        }
    }

    /// [`rediscover`](Self::rediscover) after a request to `node` failed (in the transport, or
    /// answered NOT_COORDINATOR and the like), but only while `node` is still the known
    /// coordinator of `key`: a late failure of a request sent to a coordinator the member has
    /// since moved away from (one that died, say) says nothing about the new one. `None` (the
    /// node is not known) rediscovers.
    pub fn coordinator_failed(&mut self, key: &str, node: Option<i32>) {
        if let (Some(node), Some(KeyState::Known(current))) = (node, self.keys.get(key))
            && current.node_id != node
        {
            tracing::debug!(
                key,
                node,
                current = current.node_id,
                "a request to an earlier coordinator failed; keeping the current one"
            );
            return;
        }
        self.rediscover(key);
    }

    /// The next request to send.
    pub fn poll_request(&mut self) -> Option<Outbound> {
        let unknown: Vec<String> = self
            .keys
            .iter()
            .filter(|(_, s)| matches!(s, KeyState::Unknown { .. }))
            .map(|(k, _)| k.clone())
            .collect();
        let batch = match (unknown.len(), self.batching) {
            (0, _) => return None,
            (_, true) => unknown,
            (_, false) => vec![unknown[0].clone()],
        };
        let id = self.ids.next();
        for key in &batch {
            let state = self.keys.get_mut(key).expect("key is tracked");
            if let KeyState::Unknown { failures } = *state {
                *state = KeyState::Looking {
                    request: id,
                    failures,
                };
            }
        }
        self.in_flight.insert(id, batch.clone());
        Some(Outbound {
            id,
            target: Target::Bootstrap,
            request: Request::FindCoordinator {
                key_type: self.key_type,
                keys: batch,
            },
            timeout: self.config.request_timeout,
        })
    }

    /// The next event for the owner.
    pub fn poll_event(&mut self) -> Option<LookupEvent> {
        self.events.pop_front()
    }

    /// The earliest deadline, and which timer it is.
    pub fn poll_timeout(&self) -> Option<(Instant, Timer)> {
        self.timers.next()
    }

    /// Moves keys whose backoff has passed back to `Unknown`, and fails those still unknown
    /// once the deadline passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        if !self.timers.expire(Timer::CoordinatorRetry, now) {
            return;
        }
        if let Some((at, after)) = self.deadline
            && at <= now
        {
            self.time_out(after);
        }
        for state in self.keys.values_mut() {
            if let KeyState::Backoff { until, failures } = *state
                && until <= now
            {
                *state = KeyState::Unknown { failures };
            }
        }
        self.arm_retry_timer();
    }

    /// Feeds the outcome of a request this lookup emitted. Answers to requests it did not emit,
    /// or already answered, are ignored.
    pub fn handle_response(
        &mut self,
        id: RequestId,
        result: Result<Response, TransportError>,
        now: Instant,
    ) {
        let Some(keys) = self.in_flight.remove(&id) else {
            tracing::debug!(%id, "ignoring answer to an unknown FindCoordinator request");
            return;
        };
        match result {
            Ok(Response {
                version,
                body: ResponseBody::Kafka(ResponseKind::FindCoordinator(r)),
            }) => {
                for (key, outcome) in Self::outcomes(&keys, version, &r) {
                    self.apply(&key, id, outcome, now);
                }
            }
            Ok(_) => {
                let err = GroupError::InvalidResponse {
                    api: ApiKey::FindCoordinator.into(),
                    reason: "the answer is not a FindCoordinator response".into(),
                };
                for key in &keys {
                    self.apply(key, id, Outcome::retry(err.to_string()), now);
                }
            }
            // The broker has no FindCoordinator v4+: stop batching and ask again key by key.
            Err(TransportError::UnsupportedApi {
                broker: Some(_), ..
            }) if keys.len() > 1 => {
                tracing::info!(
                    "broker has no batched FindCoordinator (v4+); looking up keys one by one"
                );
                self.batching = false;
                for key in &keys {
                    self.apply(key, id, Outcome::Immediate, now);
                }
            }
            Err(e @ TransportError::UnsupportedApi { .. }) => {
                for key in &keys {
                    self.apply(
                        key,
                        id,
                        Outcome::Fatal(GroupError::Transport(e.clone())),
                        now,
                    );
                }
            }
            Err(e) => {
                for key in &keys {
                    // The broker goes into the failure's own field; the reason is the rest.
                    let outcome = Outcome::Retry(e.root().to_string(), Some(e.clone()));
                    self.apply(key, id, outcome, now);
                }
            }
        }
    }

    /// Fails every key not known (nor failed) with [`GroupError::TimedOut`].
    fn time_out(&mut self, after: Duration) {
        for (key, state) in &mut self.keys {
            if matches!(state, KeyState::Known(_) | KeyState::Failed(_)) {
                continue;
            }
            let error = timed_out(self.streaks.remove(key), after);
            tracing::warn!(key, %error, "coordinator lookup timed out");
            *state = KeyState::Failed(error.clone());
            self.events.push_back(LookupEvent::Failed {
                key: key.clone(),
                error,
            });
        }
    }

    /// Records `key`'s failure, and reports it as [`LookupEvent::Trouble`] when it is
    /// persistent and starts a new streak (another broker, another kind of failure).
    fn failed(&mut self, key: &str, reason: String, transport: Option<TransportError>) {
        let streak = self.streaks.entry(key.to_owned()).or_default();
        if let Some(e) = transport.as_ref().filter(|e| e.is_persistent()) {
            let seen = (broker_of(Some(e)), std::mem::discriminant(e.root()));
            if streak.reported.as_ref() != Some(&seen) {
                self.events.push_back(LookupEvent::Trouble {
                    key: key.to_owned(),
                    broker: seen.0.clone(),
                    error: e.clone(),
                });
                streak.reported = Some(seen);
            }
        }
        streak.reason = reason;
        streak.transport = transport;
    }

    /// What the response says about each key asked for.
    fn outcomes(
        keys: &[String],
        version: i16,
        r: &FindCoordinatorResponse,
    ) -> Vec<(String, Outcome)> {
        if version < 4 {
            let outcome = Self::outcome(&keys[0], r.error_code, r.node_id.0, &r.host, r.port);
            return vec![(keys[0].clone(), outcome)];
        }
        keys.iter()
            .map(|key| {
                let outcome = match r.coordinators.iter().find(|c| c.key.as_str() == key) {
                    Some(c) => Self::outcome(key, c.error_code, c.node_id.0, &c.host, c.port),
                    // A key missing from the answer is asked again (it is not an error code).
                    None => {
                        Outcome::retry(format!("FindCoordinator answer has no entry for {key:?}"))
                    }
                };
                (key.clone(), outcome)
            })
            .collect()
    }

    fn outcome(key: &str, code: i16, node_id: i32, host: &str, port: i32) -> Outcome {
        match classify(ApiKey::FindCoordinator, code, key) {
            ErrorAction::Proceed => match (u16::try_from(port), node_id >= 0, host.is_empty()) {
                (Ok(port), true, false) if port > 0 => Outcome::Found(Broker {
                    node_id,
                    host: host.to_owned(),
                    port,
                }),
                _ => Outcome::retry(
                    GroupError::InvalidResponse {
                        api: ApiKey::FindCoordinator.into(),
                        reason: format!(
                            "coordinator node {node_id} at {host:?}:{port} is not a usable address"
                        ),
                    }
                    .to_string(),
                ),
            },
            ErrorAction::Fatal(e) => Outcome::Fatal(e),
            // Only retriable codes and terminal ones occur for FindCoordinator (see `classify`).
            _ => Outcome::retry(format!("error {code} ({})", crate::error::error_name(code))),
        }
    }

    fn apply(&mut self, key: &str, id: RequestId, outcome: Outcome, now: Instant) {
        let Some(state) = self.keys.get_mut(key) else {
            return;
        };
        // Only the request a key is waiting on may change it.
        let KeyState::Looking { request, failures } = *state else {
            return;
        };
        if request != id {
            return;
        }
        match outcome {
            Outcome::Found(broker) => {
                tracing::debug!(key, %broker, "coordinator found");
                self.streaks.remove(key);
                *state = KeyState::Known(broker.clone());
                self.events.push_back(LookupEvent::Found {
                    key: key.to_owned(),
                    coordinator: broker,
                });
            }
            Outcome::Immediate => *state = KeyState::Unknown { failures },
            Outcome::Retry(reason, transport) => {
                let delay = self.config.backoff.delay(failures, &mut self.rng);
                tracing::debug!(key, failures, ?delay, %reason, "coordinator lookup failed, retrying");
                *state = KeyState::Backoff {
                    until: crate::machine::timer::after(now, delay),
                    failures: failures.saturating_add(1),
                };
                self.failed(key, reason, transport);
                self.arm_retry_timer();
            }
            Outcome::Fatal(error) => {
                tracing::warn!(key, %error, "coordinator lookup failed for good");
                *state = KeyState::Failed(error.clone());
                self.events.push_back(LookupEvent::Failed {
                    key: key.to_owned(),
                    error,
                });
            }
        }
    }

    fn arm_retry_timer(&mut self) {
        let pending = self
            .keys
            .values()
            .any(|s| !matches!(s, KeyState::Known(_) | KeyState::Failed(_)));
        let deadline = self.deadline.filter(|_| pending).map(|(at, _)| at);
        let next = self
            .keys
            .values()
            .filter_map(|s| match s {
                KeyState::Backoff { until, .. } => Some(*until),
                _ => None,
            })
            .chain(deadline)
            .min();
        match next {
            Some(at) => self.timers.set(Timer::CoordinatorRetry, at),
            None => self.timers.stop(Timer::CoordinatorRetry),
        }
    }
}

#[derive(Debug, Clone)]
enum Outcome {
    Found(Broker),
    /// Ask again at once (no failure counted).
    Immediate,
    /// Ask again after the backoff: why, and the transport's error when it failed.
    Retry(String, Option<TransportError>),
    Fatal(GroupError),
}

impl Outcome {
    fn retry(reason: String) -> Self {
        Outcome::Retry(reason, None)
    }
}

/// The broker a lookup's failure names, `(bootstrap)` when it names none.
/// [`GroupError::TimedOut`] after `after` for a FindCoordinator streak: the broker asked, the
/// failure as text (`"no answer yet"` when none failed) and the transport's error, if it was one.
fn timed_out(streak: Option<Streak>, after: Duration) -> GroupError {
    let streak = streak.unwrap_or_default();
    GroupError::TimedOut {
        api: ApiKey::FindCoordinator.into(),
        broker: broker_of(streak.transport.as_ref()),
        after,
        reason: if streak.reason.is_empty() {
            "no answer yet".into()
        } else {
            streak.reason
        },
        transport: streak.transport.map(Box::new),
    }
}

fn broker_of(error: Option<&TransportError>) -> String {
    match error.and_then(TransportError::broker) {
        Some(addr) => format!("{addr} (bootstrap)"),
        None => "(bootstrap)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::BrokerId;
    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    use kafka_protocol::protocol::StrBytes;

    fn lookup(groups: &[&str]) -> CoordinatorLookup {
        CoordinatorLookup::new(
            groups.iter().map(|g| g.to_string()),
            LookupConfig {
                backoff: ExponentialBackoff::retry(
                    Duration::from_millis(100),
                    Duration::from_millis(1000),
                ),
                request_timeout: Duration::from_secs(30),
                seed: 1,
            },
        )
    }

    fn entry(key: &str, code: i16, node: i32, port: i32) -> Coordinator {
        Coordinator::default()
            .with_key(StrBytes::from_string(key.into()))
            .with_error_code(code)
            .with_node_id(BrokerId(node))
            .with_host(StrBytes::from_static_str("127.0.0.1"))
            .with_port(port)
    }

    fn v4(entries: Vec<Coordinator>) -> Result<Response, TransportError> {
        Ok(Response {
            version: 4,
            body: ResponseBody::Kafka(ResponseKind::FindCoordinator(
                FindCoordinatorResponse::default().with_coordinators(entries),
            )),
        })
    }

    fn keys_of(out: &Outbound) -> Vec<String> {
        match &out.request {
            Request::FindCoordinator { keys, .. } => keys.clone(),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn finds_the_coordinator_after_retriable_errors_with_backoff() {
        let t0 = crate::testutil::epoch();
        let mut l = lookup(&["g"]);
        let mut now = t0;
        // The offsets topic is being created, then loading: both retried after the backoff.
        for (attempt, code) in [(0u32, 15), (1, 14), (2, 16)] {
            let out = l.poll_request().expect("a request");
            assert_eq!(out.target, Target::Bootstrap);
            assert!(l.poll_request().is_none(), "one lookup in flight");
            l.handle_response(out.id, v4(vec![entry("g", code, -1, -1)]), now);
            let (at, timer) = l.poll_timeout().expect("retry armed");
            assert_eq!(timer, Timer::CoordinatorRetry);
            let (lo, hi) =
                ExponentialBackoff::retry(Duration::from_millis(100), Duration::from_millis(1000))
                    .bounds(attempt);
            assert!(
                at - now >= lo && at - now <= hi,
                "attempt {attempt}: {:?}",
                at - now
            );
            // Too early: nothing happens.
            l.handle_timeout(at - Duration::from_millis(1));
            assert!(l.poll_request().is_none());
            now = at;
            l.handle_timeout(now);
        }
        let out = l.poll_request().expect("a request after the backoff");
        l.handle_response(out.id, v4(vec![entry("g", 0, 3, 9092)]), now);
        let b = l.coordinator("g").expect("known");
        assert_eq!((b.node_id, b.port), (3, 9092));
        assert!(
            matches!(l.poll_event(), Some(LookupEvent::Found { coordinator, .. }) if coordinator.node_id == 3)
        );
        assert_eq!(l.poll_timeout(), None);
        assert!(l.poll_request().is_none());
    }

    #[test]
    fn group_authorization_failed_is_terminal_and_typed() {
        let now = crate::testutil::epoch();
        let mut l = lookup(&["secret"]);
        let out = l.poll_request().unwrap();
        l.handle_response(out.id, v4(vec![entry("secret", 30, -1, -1)]), now);
        let want = GroupError::GroupAuthorizationFailed {
            group: "secret".into(),
        };
        assert_eq!(l.state("secret"), Some(&KeyState::Failed(want.clone())));
        assert_eq!(
            l.poll_event(),
            Some(LookupEvent::Failed {
                key: "secret".into(),
                error: want
            })
        );
        assert!(l.poll_request().is_none());
        assert_eq!(l.poll_timeout(), None);
        l.rediscover("secret");
        assert!(l.poll_request().is_none(), "terminal stays terminal");
    }

    #[test]
    fn not_coordinator_from_the_coordinator_triggers_a_new_lookup() {
        let now = crate::testutil::epoch();
        let mut l = lookup(&["g"]);
        let out = l.poll_request().unwrap();
        l.handle_response(out.id, v4(vec![entry("g", 0, 1, 9092)]), now);
        assert!(l.coordinator("g").is_some());
        l.rediscover("g");
        assert!(l.coordinator("g").is_none());
        let out = l.poll_request().expect("looks up again at once");
        l.handle_response(out.id, v4(vec![entry("g", 0, 2, 9093)]), now);
        assert_eq!(l.coordinator("g").unwrap().node_id, 2);
    }

    #[test]
    fn keys_are_batched_and_split_when_the_broker_lacks_v4() {
        let now = crate::testutil::epoch();
        let mut l = lookup(&["a", "b"]);
        let out = l.poll_request().unwrap();
        assert_eq!(keys_of(&out), vec!["a", "b"]);
        assert_eq!(out.request.versions(), 4..=6);
        l.handle_response(
            out.id,
            Err(TransportError::UnsupportedApi {
                api: ApiKey::FindCoordinator.into(),
                ours: 4..=6,
                broker: Some(0..=3),
            }),
            now,
        );
        assert_eq!(l.poll_timeout(), None, "no backoff for the split");
        let first = l.poll_request().unwrap();
        assert_eq!(keys_of(&first), vec!["a"]);
        let second = l.poll_request().unwrap();
        assert_eq!(keys_of(&second), vec!["b"]);
        let v3 = |node| {
            Ok(Response {
                version: 3,
                body: ResponseBody::Kafka(ResponseKind::FindCoordinator(
                    FindCoordinatorResponse::default()
                        .with_node_id(BrokerId(node))
                        .with_host(StrBytes::from_static_str("h"))
                        .with_port(1),
                )),
            })
        };
        l.handle_response(second.id, v3(2), now);
        l.handle_response(first.id, v3(1), now);
        assert_eq!(l.coordinator("a").unwrap().node_id, 1);
        assert_eq!(l.coordinator("b").unwrap().node_id, 2);
    }

    #[test]
    fn stale_duplicate_wrong_and_malformed_answers_change_nothing_or_retry() {
        let now = crate::testutil::epoch();
        let mut l = lookup(&["g"]);
        let out = l.poll_request().unwrap();
        // An id it never sent.
        l.handle_response(RequestId(999), v4(vec![entry("g", 0, 1, 1)]), now);
        assert!(matches!(l.state("g"), Some(KeyState::Looking { .. })));
        // Malformed: unusable address -> retried, not trusted.
        l.handle_response(out.id, v4(vec![entry("g", 0, 1, 0)]), now);
        assert!(matches!(
            l.state("g"),
            Some(KeyState::Backoff { failures: 1, .. })
        ));
        // A duplicate of the same answer is ignored.
        l.handle_response(out.id, v4(vec![entry("g", 0, 1, 1)]), now);
        assert!(matches!(l.state("g"), Some(KeyState::Backoff { .. })));
        l.handle_timeout(now + Duration::from_secs(2));
        let out = l.poll_request().unwrap();
        // Missing key and the wrong API are retried.
        l.handle_response(out.id, v4(vec![entry("other", 0, 1, 1)]), now);
        assert!(matches!(
            l.state("g"),
            Some(KeyState::Backoff { failures: 2, .. })
        ));
        l.handle_timeout(now + Duration::from_secs(2));
        let out = l.poll_request().unwrap();
        l.handle_response(
            out.id,
            Ok(Response {
                version: 4,
                body: ResponseBody::Kafka(ResponseKind::Heartbeat(Default::default())),
            }),
            now,
        );
        assert!(matches!(
            l.state("g"),
            Some(KeyState::Backoff { failures: 3, .. })
        ));
        // Unknown codes are terminal and typed.
        l.handle_timeout(now + Duration::from_secs(2));
        let out = l.poll_request().unwrap();
        l.handle_response(out.id, v4(vec![entry("g", 4242, 1, 1)]), now);
        assert_eq!(
            l.state("g"),
            Some(&KeyState::Failed(GroupError::UnknownErrorCode {
                api: ApiKey::FindCoordinator.into(),
                code: 4242
            }))
        );
    }

    #[test]
    fn transport_errors_back_off_and_missing_api_is_fatal() {
        let now = crate::testutil::epoch();
        let mut l = lookup(&["g"]);
        let out = l.poll_request().unwrap();
        l.handle_response(
            out.id,
            Err(TransportError::Timeout {
                api: ApiKey::FindCoordinator.into(),
                timeout: Duration::from_secs(1),
            }),
            now,
        );
        assert!(matches!(l.state("g"), Some(KeyState::Backoff { .. })));
        l.handle_timeout(now + Duration::from_secs(2));
        let out = l.poll_request().unwrap();
        let missing = TransportError::UnsupportedApi {
            api: ApiKey::FindCoordinator.into(),
            ours: 0..=6,
            broker: None,
        };
        l.handle_response(out.id, Err(missing.clone()), now);
        assert_eq!(
            l.state("g"),
            Some(&KeyState::Failed(GroupError::Transport(missing)))
        );
    }

    #[test]
    fn persistent_failures_are_reported_once_per_streak_and_the_deadline_names_the_last() {
        let t0 = crate::testutil::epoch();
        let mut l = lookup(&["g"]);
        l.set_deadline(t0, Duration::from_secs(30));
        let at = |addr: &str, error: TransportError| TransportError::Broker {
            addr: addr.into(),
            error: Box::new(error),
        };
        let http = TransportError::NotKafka {
            start: "\"HTTP/1.1 400\"".into(),
            guess: "an HTTP server, not a Kafka listener",
        };
        let tls = TransportError::Tls {
            reason: "handshake".into(),
        };
        let refused = TransportError::Connect {
            addr: "h:2".into(),
            reason: "refused".into(),
        };
        let mut now = t0;
        let mut reports = Vec::new();
        // The same failure thrice, a refused connect (not persistent), the same again, then
        // another kind of failure: two reports.
        for e in [
            at("h:1", http.clone()),
            at("h:1", http.clone()),
            refused.clone(),
            at("h:1", http.clone()),
            at("h:1", tls.clone()),
            at("h:1", tls.clone()),
        ] {
            let out = l.poll_request().expect("a request after the backoff");
            l.handle_response(out.id, Err(e), now);
            while let Some(event) = l.poll_event() {
                reports.push(event);
            }
            now = l.poll_timeout().expect("retry armed").0;
            assert!(now < t0 + Duration::from_secs(30), "{:?}", now - t0);
            l.handle_timeout(now);
        }
        assert_eq!(
            reports,
            vec![
                LookupEvent::Trouble {
                    key: "g".into(),
                    broker: "h:1 (bootstrap)".into(),
                    error: at("h:1", http),
                },
                LookupEvent::Trouble {
                    key: "g".into(),
                    broker: "h:1 (bootstrap)".into(),
                    error: at("h:1", tls.clone()),
                },
            ]
        );
        // The deadline passes with a request in flight: the key fails, naming the last failure.
        let out = l.poll_request().expect("a request");
        let (deadline, _) = l.poll_timeout().expect("the deadline is armed");
        assert_eq!(deadline, t0 + Duration::from_secs(30));
        l.handle_timeout(deadline);
        let want = GroupError::TimedOut {
            api: ApiKey::FindCoordinator.into(),
            broker: "h:1 (bootstrap)".into(),
            after: Duration::from_secs(30),
            reason: tls.to_string(),
            transport: Some(Box::new(at("h:1", tls))),
        };
        assert_eq!(l.state("g"), Some(&KeyState::Failed(want.clone())));
        assert_eq!(
            l.poll_event(),
            Some(LookupEvent::Failed {
                key: "g".into(),
                error: want
            })
        );
        // The late answer changes nothing.
        l.handle_response(out.id, v4(vec![entry("g", 0, 1, 9092)]), deadline);
        assert!(matches!(l.state("g"), Some(KeyState::Failed(_))));
        assert_eq!(
            l.to_owned().poll_request().map(|o| o.id),
            None,
            "nothing more is sent"
        );
    }

    #[test]
    fn a_late_failure_from_an_earlier_coordinator_keeps_the_current_one() {
        let now = crate::testutil::epoch();
        let mut l = lookup(&["g"]);
        let out = l.poll_request().unwrap();
        l.handle_response(out.id, v4(vec![entry("g", 0, 1, 9092)]), now);
        l.coordinator_failed("g", Some(1));
        let out = l
            .poll_request()
            .expect("the current coordinator failed: look it up again");
        l.handle_response(out.id, v4(vec![entry("g", 0, 2, 9093)]), now);
        // A request that went to node 1 fails late: node 2 stays.
        l.coordinator_failed("g", Some(1));
        assert_eq!(l.coordinator("g").map(|b| b.node_id), Some(2));
        assert!(l.poll_request().is_none());
        l.coordinator_failed("g", None);
        assert!(l.coordinator("g").is_none(), "an unknown node rediscovers");
    }
}
