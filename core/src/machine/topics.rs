//! Whether the subscribed topics exist. A member never creates topics, and a coordinator treats a
//! subscribed topic that does not exist as one with no partitions: without this watch the member
//! sits in the group with nothing assigned from it, silently. [`TopicWatch`] asks the cluster
//! (Metadata for the subscribed names, auto-creation off) and tells the application when a topic
//! is missing and again when it appears, as the Java consumer logs `UNKNOWN_TOPIC_OR_PARTITION`
//! for subscribed topics its metadata cannot find.
//!
//! Re-checks: every `retry.backoff.max.ms` while a topic is missing or the check failed (the
//! Java client's metadata refresh backoff), every `metadata.max.age.ms` otherwise.

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use super::events::Event;
use super::metadata::ClusterMetadata;
use super::timer::Timer;
use crate::config::GroupConfig;
use crate::error::{TransportError, codes};
use crate::request::{Outbound, Request, RequestId, RequestIds, Response, Target};

/// Where a watch numbers its requests: apart from a member's own ids (from 1), those of a
/// classic member built by the `auto` fallback (from 2^40) and of its coordinator lookup (2^48).
const TOPIC_WATCH_IDS: u64 = 1 << 44;

/// Watches that the subscribed topics exist (sans-IO; a [`Machine`](super::Machine) with
/// [`Event::TopicsMissing`] and [`Event::TopicsAppeared`] as its events). The tokio driver runs
/// one beside each member; a user of the sans-IO member alone can run it the same way, feeding
/// it the member's subscription with [`watch`](TopicWatch::watch).
#[derive(Debug)]
pub struct TopicWatch {
    group: String,
    topics: BTreeSet<String>,
    missing: BTreeSet<String>,
    /// The check out, and the topics it asked about.
    in_flight: Option<(RequestId, BTreeSet<String>)>,
    due: Option<Instant>,
    ids: RequestIds,
    retry: Duration,
    max_age: Duration,
    request_timeout: Duration,
    events: VecDeque<Event>,
    outbound: VecDeque<Outbound>,
}

impl TopicWatch {
    /// A watch with `config`'s timings that watches nothing yet.
    pub fn new(config: &GroupConfig) -> Self {
        Self {
            group: config.group_id.clone(),
            topics: BTreeSet::new(),
            missing: BTreeSet::new(),
            in_flight: None,
            due: None,
            ids: RequestIds::starting_at(TOPIC_WATCH_IDS),
            retry: config.retry_backoff_max,
            max_age: config.metadata_max_age,
            request_timeout: config.request_timeout,
            events: VecDeque::new(),
            outbound: VecDeque::new(),
        }
    }

    /// Watches `topics` from now on (checked at once); an empty set stops the watch. Topics no
    /// longer watched are forgotten without an event.
    pub fn watch(&mut self, topics: impl IntoIterator<Item = String>, now: Instant) {
        self.topics = topics.into_iter().collect();
        self.missing.retain(|t| self.topics.contains(t));
        // An answer in flight speaks for the topics it asked about; the others are checked next.
        self.due = (!self.topics.is_empty()).then_some(now);
        self.handle_timeout(now);
    }

    /// Whether `id` is the check this watch waits for (its answer goes to
    /// [`handle_response`](Self::handle_response)).
    pub fn is_waiting_for(&self, id: RequestId) -> bool {
        self.in_flight.as_ref().is_some_and(|(sent, _)| *sent == id)
    }

    /// The watched topics the cluster did not know at the last check.
    pub fn missing(&self) -> &BTreeSet<String> {
        &self.missing
    }

    /// The next request to send.
    pub fn poll_request(&mut self) -> Option<Outbound> {
        self.outbound.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When the next check is due.
    pub fn poll_timeout(&self) -> Option<(Instant, Timer)> {
        match self.in_flight {
            Some(_) => None,
            None => self.due.map(|at| (at, Timer::TopicCheck)),
        }
    }

    /// Sends the check when it is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.in_flight.is_some() || self.due.is_none_or(|at| at > now) {
            return;
        }
        let id = self.ids.next();
        self.in_flight = Some((id, self.topics.clone()));
        self.due = None;
        self.outbound.push_back(Outbound {
            id,
            target: Target::Bootstrap,
            request: Request::Metadata {
                topics: Some(self.topics.iter().cloned().collect()),
                allow_auto_topic_creation: false,
            },
            timeout: self.request_timeout,
        });
    }

    /// Reads the answer to a check; answers to anything else are ignored.
    pub fn handle_response(
        &mut self,
        id: RequestId,
        result: Result<Response, TransportError>,
        now: Instant,
    ) {
        let asked = match self.in_flight.take() {
            Some((sent, asked)) if sent == id => asked,
            other => {
                self.in_flight = other;
                return;
            }
        };
        if self.topics.is_empty() {
            return;
        }
        let metadata = result
            .map_err(|e| e.to_string())
            .and_then(|r| ClusterMetadata::from_response(&r).map_err(|e| e.to_string()));
        let metadata = match metadata {
            Ok(m) => m,
            Err(error) => {
                tracing::debug!(group = %self.group, %error, "topic check failed; retrying");
                self.due = Some(crate::machine::timer::after(now, self.retry));
                return;
            }
        };
        // UNKNOWN_TOPIC_OR_PARTITION: the topic does not exist (or is not visible to this
        // principal). Other topic errors (LEADER_NOT_AVAILABLE while it is created, ...) mean the
        // topic exists.
        // A topic the answer does not name is missing too; a topic watched since the check went out
        // keeps its status until the next check, due at once.
        let unasked = self.topics.difference(&asked).count();
        let missing: BTreeSet<String> = (self.topics.iter())
            .filter(|t| match asked.contains(*t) {
                true => (metadata.topics.get(*t))
                    .is_none_or(|m| m.error_code == codes::UNKNOWN_TOPIC_OR_PARTITION),
                false => self.missing.contains(*t),
            })
            .cloned()
            .collect();
        let gone: Vec<String> = missing.difference(&self.missing).cloned().collect();
        let back: Vec<String> = self.missing.difference(&missing).cloned().collect();
        if !gone.is_empty() {
            tracing::warn!(group = %self.group, topics = ?gone,
                "subscribed topics do not exist: nothing is assigned from them until they are created");
            self.events.push_back(Event::TopicsMissing { topics: gone });
        }
        if !back.is_empty() {
            tracing::info!(group = %self.group, topics = ?back, "subscribed topics exist now");
            self.events
                .push_back(Event::TopicsAppeared { topics: back });
        }
        self.due = Some(match (unasked, missing.is_empty()) {
            (0, true) => crate::machine::timer::after(now, self.max_age),
            (0, false) => crate::machine::timer::after(now, self.retry),
            _ => now,
        });
        self.missing = missing;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::ResponseBody;
    use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
    use kafka_protocol::messages::{MetadataResponse, ResponseKind, TopicName};
    use kafka_protocol::protocol::StrBytes;

    fn answer(known: &[&str], unknown: &[&str]) -> Result<Response, TransportError> {
        let topic = |name: &&str, code: i16| {
            MetadataResponseTopic::default()
                .with_name(Some(TopicName(StrBytes::from_string(name.to_string()))))
                .with_topic_id(uuid::Uuid::from_u128(u128::from(code == 0)))
                .with_error_code(code)
        };
        let topics = (known.iter().map(|t| topic(t, 0)))
            .chain(unknown.iter().map(|t| topic(t, 3)))
            .collect();
        Ok(Response {
            version: 12,
            body: ResponseBody::Kafka(ResponseKind::Metadata(
                MetadataResponse::default().with_topics(topics),
            )),
        })
    }

    fn config() -> GroupConfig {
        GroupConfig::new("g")
    }

    /// The one check the watch sends now: its id and the topics it asks about.
    fn check(w: &mut TopicWatch) -> (RequestId, Vec<String>) {
        let out = w.poll_request().expect("a check");
        assert!(w.poll_request().is_none());
        match out.request {
            Request::Metadata {
                topics: Some(t),
                allow_auto_topic_creation: false,
            } => (out.id, t),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_missing_topic_is_reported_once_and_again_when_it_appears() {
        let t0 = crate::testutil::epoch();
        let c = config();
        let mut w = TopicWatch::new(&c);
        w.watch(["a".to_string(), "b".to_string()], t0);
        let (id, topics) = check(&mut w);
        assert_eq!(topics, ["a", "b"]);
        assert_eq!(
            w.poll_timeout(),
            None,
            "nothing is due while the check is out"
        );
        w.handle_response(id, answer(&["a"], &["b"]), t0);
        assert_eq!(
            w.poll_event(),
            Some(Event::TopicsMissing {
                topics: vec!["b".into()]
            })
        );
        assert_eq!(w.poll_event(), None);
        let (at, timer) = w.poll_timeout().expect("re-checks");
        assert_eq!((at, timer), (t0 + c.retry_backoff_max, Timer::TopicCheck));
        // Still missing: no second report.
        w.handle_timeout(at);
        let (id, _) = check(&mut w);
        w.handle_response(id, answer(&["a"], &["b"]), at);
        assert_eq!(w.poll_event(), None);
        // It appears: reported, and the watch slows down to metadata.max.age.ms.
        let at = w.poll_timeout().unwrap().0;
        w.handle_timeout(at);
        let (id, _) = check(&mut w);
        w.handle_response(id, answer(&["a", "b"], &[]), at);
        assert_eq!(
            w.poll_event(),
            Some(Event::TopicsAppeared {
                topics: vec!["b".into()]
            })
        );
        assert_eq!(w.poll_timeout().unwrap().0, at + c.metadata_max_age);
        assert!(w.missing().is_empty());
    }

    #[test]
    fn failures_retry_and_an_empty_watch_stops() {
        let t0 = crate::testutil::epoch();
        let c = config();
        let mut w = TopicWatch::new(&c);
        w.watch(["a".to_string()], t0);
        let (id, _) = check(&mut w);
        let lost = TransportError::Timeout {
            api: kafka_protocol::messages::ApiKey::Metadata.into(),
            timeout: c.request_timeout,
        };
        w.handle_response(id, Err(lost), t0);
        assert_eq!(w.poll_event(), None, "a failed check reports nothing");
        assert_eq!(w.poll_timeout().unwrap().0, t0 + c.retry_backoff_max);
        // A stale id changes nothing.
        w.handle_response(id, answer(&[], &["a"]), t0);
        assert_eq!(w.poll_event(), None);
        w.watch(Vec::new(), t0);
        assert_eq!(w.poll_timeout(), None);
        assert!(w.poll_request().is_none());
    }

    #[test]
    fn an_answer_in_flight_is_read_against_the_new_subscription() {
        let t0 = crate::testutil::epoch();
        let mut w = TopicWatch::new(&config());
        w.watch(["a".to_string()], t0);
        let (id, _) = check(&mut w);
        w.watch(["a".to_string(), "c".to_string()], t0);
        assert!(w.poll_request().is_none(), "one check at a time");
        w.handle_response(id, answer(&["a"], &[]), t0);
        assert_eq!(w.poll_event(), None, "c was not asked about");
        assert_eq!(w.poll_timeout().unwrap().0, t0, "c is checked at once");
        w.handle_timeout(t0);
        let (id, topics) = check(&mut w);
        assert_eq!(topics, ["a", "c"]);
        w.handle_response(id, answer(&["a"], &[]), t0);
        assert_eq!(
            w.poll_event(),
            Some(Event::TopicsMissing {
                topics: vec!["c".into()]
            }),
            "a topic the answer does not name counts as missing"
        );
    }
}
