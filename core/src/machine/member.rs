//! One member type for both protocols, chosen by `group.protocol`; with `auto`, a consumer
//! protocol member that the broker refuses on its first heartbeat becomes a classic member (one
//! way).

use std::time::Instant;

use super::TopicPartition;
use super::classic::ClassicMember;
use super::consumer::ConsumerMember;
use super::events::{
    CloseOptions, CommitId, CommitOffset, Event, FetchId, MemberState, Reason, RevokeTicket,
};
use super::timer::Timer;
use crate::config::{GroupConfig, GroupProtocol};
use crate::error::ApiMisuse;
use crate::error::{ConfigError, GroupError, TransportError};
use crate::request::{Broker, Outbound, RequestId, Response};

/// Where the request ids of a classic member built by the `auto` fallback start: far above any
/// id the consumer member it replaces handed out (its own ids count from 1, its lookup's from
/// 2^48; 2^40 requests are never reached).
const FALLBACK_REQUEST_IDS: u64 = 1 << 40;

/// A group member of either protocol (sans-IO); see [`ClassicMember`] and [`ConsumerMember`].
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
#[non_exhaustive]
pub enum Member {
    /// JoinGroup / SyncGroup / Heartbeat.
    Classic(ClassicMember),
    /// KIP-848 ConsumerGroupHeartbeat.
    Consumer(ConsumerMember),
}

macro_rules! delegate {
    ($self:ident, $m:ident => $e:expr) => {
        match $self {
            Member::Classic($m) => $e,
            Member::Consumer($m) => $e,
        }
    };
}

impl Member {
    /// A member speaking `config.protocol` (auto starts with the consumer protocol).
    pub fn new(config: GroupConfig, now: Instant) -> Result<Self, ConfigError> {
        Ok(match config.protocol {
            GroupProtocol::Classic => Member::Classic(ClassicMember::new(config, now)?),
            GroupProtocol::Consumer | GroupProtocol::Auto => {
                Member::Consumer(ConsumerMember::new(config, now)?)
            }
        })
    }

    /// **Test only** (feature `sim`): a classic member runs the Java client's member-id reset
    /// (see [`ClassicMember::set_java_reset_policy`]); a consumer-protocol member has no such
    /// policy, but an `auto` member hands it to the classic member it falls back to.
    #[cfg(feature = "sim")]
    pub fn set_java_reset_policy(&mut self, on: bool) {
        match self {
            Member::Classic(m) => m.set_java_reset_policy(on),
            Member::Consumer(m) => m.proto.java_reset_policy = on,
        }
    }

    /// **Test only** (feature `sim`): whether the Java reset policy is on.
    #[cfg(feature = "sim")]
    pub fn java_reset_policy(&self) -> bool {
        match self {
            Member::Classic(m) => m.java_reset_policy(),
            Member::Consumer(m) => m.proto.java_reset_policy,
        }
    }

    /// The protocol in use: [`GroupProtocol::Classic`] or [`GroupProtocol::Consumer`] (never
    /// `Auto`: an `auto` member speaks one of the two).
    pub fn protocol(&self) -> GroupProtocol {
        match self {
            Member::Classic(_) => GroupProtocol::Classic,
            Member::Consumer(_) => GroupProtocol::Consumer,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &GroupConfig {
        delegate!(self, m => m.config())
    }

    /// The terminal error, once the member stopped on one.
    pub fn fatal_error(&self) -> Option<&GroupError> {
        delegate!(self, m => m.fatal_error())
    }

    /// How the close ended, once the member is closed or stopped (`None` while it runs).
    pub fn close_outcome(&self) -> Option<super::events::CloseOutcome> {
        delegate!(self, m => m.close_outcome())
    }

    /// The member id.
    pub fn member_id(&self) -> &str {
        delegate!(self, m => m.member_id())
    }

    /// Classic: the generation; consumer: the member epoch.
    pub fn generation(&self) -> i32 {
        match self {
            Member::Classic(m) => m.generation(),
            Member::Consumer(m) => m.epoch(),
        }
    }

    /// Where the member stands.
    pub fn state(&self) -> MemberState {
        delegate!(self, m => m.state())
    }

    /// Owned partitions.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        delegate!(self, m => m.assignment())
    }

    /// The coordinator, when known.
    pub fn coordinator(&self) -> Option<&Broker> {
        delegate!(self, m => m.coordinator())
    }

    /// Classic: whether the member led its last rebalance (the consumer protocol has no leader).
    pub fn is_leader(&self) -> bool {
        match self {
            Member::Classic(m) => m.is_leader(),
            Member::Consumer(_) => false,
        }
    }

    /// Subscribes by topic names.
    pub fn subscribe(
        &mut self,
        topics: impl IntoIterator<Item = String>,
        now: Instant,
    ) -> Result<(), ApiMisuse> {
        delegate!(self, m => m.subscribe(topics, now))
    }

    /// Subscribes by a regular expression the broker evaluates (consumer protocol only; a
    /// classic member answers [`ApiMisuse::RegexNeedsConsumerProtocol`]).
    ///
    /// With `group.protocol=auto`, a regex subscription cannot be carried to the classic
    /// protocol (it has no broker-side regex): when the broker refuses the consumer protocol, the
    /// member does not fall back but stops with [`Event::Fatal`]`(`[`GroupError::RegexNeedsConsumerProtocol`]`)`
    /// (see [`poll_event`](Self::poll_event)). Subscriptions by topic names fall back.
    pub fn subscribe_regex(
        &mut self,
        pattern: impl Into<String>,
        now: Instant,
    ) -> Result<(), ApiMisuse> {
        match self {
            Member::Classic(_) => Err(ApiMisuse::RegexNeedsConsumerProtocol),
            Member::Consumer(m) => m.subscribe_regex(pattern, now),
        }
    }

    /// Whether `close()` was called or the member stopped for good: from then on it only moves
    /// towards [`Event::Closed`], and subscription calls change nothing.
    pub fn is_closing(&self) -> bool {
        delegate!(self, m => super::shell::Skeleton::closing(m))
    }

    /// Unsubscribes.
    pub fn unsubscribe(&mut self, now: Instant) {
        delegate!(self, m => m.unsubscribe(now))
    }

    /// Records application liveness.
    pub fn poll(&mut self, now: Instant) {
        delegate!(self, m => m.poll(now))
    }

    /// Hands back a revocation ticket.
    pub fn complete_revocation(
        &mut self,
        ticket: RevokeTicket,
        now: Instant,
    ) -> Result<(), ApiMisuse> {
        delegate!(self, m => m.complete_revocation(ticket, now))
    }

    /// Commits offsets.
    pub fn commit(&mut self, offsets: Vec<CommitOffset>, now: Instant) -> CommitId {
        delegate!(self, m => m.commit(offsets, now))
    }

    /// Fetches committed offsets.
    pub fn fetch_offsets(&mut self, partitions: Vec<TopicPartition>, now: Instant) -> FetchId {
        delegate!(self, m => m.fetch_offsets(partitions, now))
    }

    /// Closes the member.
    pub fn close(&mut self, options: CloseOptions, now: Instant) {
        delegate!(self, m => m.close(options, now))
    }

    /// The next request to send.
    pub fn poll_request(&mut self) -> Option<Outbound> {
        delegate!(self, m => m.poll_request())
    }

    /// The earliest deadline.
    pub fn poll_timeout(&self) -> Option<(Instant, Timer)> {
        delegate!(self, m => m.poll_timeout())
    }

    /// Feeds a response.
    pub fn handle_response(
        &mut self,
        id: RequestId,
        result: Result<Response, TransportError>,
        now: Instant,
    ) {
        delegate!(self, m => m.handle_response(id, result, now))
    }

    /// Advances the clock.
    pub fn handle_timeout(&mut self, now: Instant) {
        delegate!(self, m => m.handle_timeout(now))
    }

    /// The next event. With `group.protocol=auto`, a consumer-protocol member the broker refuses
    /// before its first successful heartbeat turns into a classic member here, subscribed to the
    /// same topics; the refusal is not reported as fatal. A member subscribed by regex does not
    /// fall back (classic has no broker-side regex): it stays stopped, and the refusal is
    /// reported as [`GroupError::RegexNeedsConsumerProtocol`].
    pub fn poll_event(&mut self) -> Option<Event> {
        let event = delegate!(self, m => m.poll_event())?;
        // The consumer member's own "-> Fatal" state change is not news when it falls back.
        if let (
            Event::StateChanged {
                to: MemberState::Fatal,
                ..
            },
            Member::Consumer(c),
        ) = (&event, &*self)
            && c.config().protocol == GroupProtocol::Auto
            && !c.answered_once()
            && c.fatal_error() == Some(&GroupError::ConsumerProtocolUnsupported)
            && c.regex().is_none()
        {
            return self.poll_event();
        }
        if let (Event::Fatal(GroupError::ConsumerProtocolUnsupported), Member::Consumer(c)) =
            (&event, &*self)
            && c.config().protocol == GroupProtocol::Auto
            && !c.answered_once()
        {
            // A classic member built from this one would have no subscription (the regex left
            // `topics` empty) and would sit Unsubscribed with no error: stop, typed, instead.
            if let Some(pattern) = c.regex() {
                return Some(Event::Fatal(GroupError::RegexNeedsConsumerProtocol {
                    group: c.config().group_id.clone(),
                    pattern: pattern.to_owned(),
                }));
            }
            let (config, topics, now) = (c.config().clone(), c.topics(), c.now());
            tracing::info!(group = %config.group_id, "the broker refuses the consumer protocol; falling back to classic");
            if let Ok(mut classic) = ClassicMember::new(config, now) {
                // Answers to the consumer member's requests still in flight (Metadata, its
                // refused heartbeats) arrive after this; their ids must not be the new member's.
                classic.offset_request_ids(FALLBACK_REQUEST_IDS);
                #[cfg(feature = "sim")]
                classic.set_java_reset_policy(c.proto.java_reset_policy);
                if !topics.is_empty() {
                    let _ = classic.subscribe(topics, now);
                }
                *self = Member::Classic(classic);
                return Some(Event::StateChanged {
                    from: MemberState::Consumer,
                    to: MemberState::Classic,
                    reason: Reason::ConsumerProtocolRefused,
                    member_id: String::new(),
                    generation: -1,
                });
            }
        }
        Some(event)
    }
}

#[cfg(test)]
mod tests {
    use crate::error::codes;
    use std::collections::BTreeSet;

    use crate::request::ResponseBody;
    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    use kafka_protocol::messages::{FindCoordinatorResponse, ResponseKind};
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::member_id::MemberId;
    use crate::request::{Request, Response};

    fn config(protocol: GroupProtocol) -> GroupConfig {
        let mut c = GroupConfig::new("g");
        c.protocol = protocol;
        c
    }

    /// Eight distinct member ids.
    fn ids() -> impl Iterator<Item = MemberId> {
        (1..=8u128).map(|n| {
            MemberId::from_bytes(
                n.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)
                    .to_be_bytes(),
            )
            .expect("not reserved")
        })
    }

    /// When `m`, subscribed at `now`, retries its coordinator lookup after the first answer
    /// COORDINATOR_NOT_AVAILABLE (a KIP-580 backoff: 100 ms ±20 %).
    fn first_lookup_retry(mut m: Member, now: Instant) -> Instant {
        m.subscribe(["t".to_string()], now).unwrap();
        let mut finds = Vec::new();
        while let Some(o) = m.poll_request() {
            if matches!(o.request, Request::FindCoordinator { .. }) {
                finds.push(o.id);
            }
        }
        assert_eq!(finds.len(), 1, "{finds:?}");
        let answer = FindCoordinatorResponse::default().with_coordinators(vec![
            Coordinator::default()
                .with_key(StrBytes::from_static_str("g"))
                .with_error_code(codes::COORDINATOR_NOT_AVAILABLE),
        ]);
        m.handle_response(
            finds[0],
            Ok(Response {
                version: 4,
                body: ResponseBody::Kafka(ResponseKind::FindCoordinator(answer)),
            }),
            now,
        );
        while m.poll_request().is_some() {}
        let (at, timer) = m.poll_timeout().expect("a retry is scheduled");
        assert_eq!(timer, Timer::CoordinatorRetry);
        at
    }

    #[test]
    fn unseeded_consumer_members_with_different_ids_do_not_retry_in_lockstep() {
        let now = crate::testutil::epoch();
        let retries: BTreeSet<Instant> = ids()
            .map(|id| {
                let m = ConsumerMember::with_member_id(config(GroupProtocol::Consumer), id, now)
                    .unwrap();
                first_lookup_retry(Member::Consumer(m), now)
            })
            .collect();
        assert!(
            retries.len() >= 4,
            "8 members without a seed retry at {} distinct instants: {retries:?}",
            retries.len()
        );
    }

    #[test]
    fn unseeded_classic_members_with_different_member_ids_do_not_retry_in_lockstep() {
        let now = crate::testutil::epoch();
        let retries: BTreeSet<Instant> = ids()
            .map(|id| {
                let c = config(GroupProtocol::Classic).with_member_id(id);
                first_lookup_retry(Member::new(c, now).unwrap(), now)
            })
            .collect();
        assert!(
            retries.len() >= 4,
            "8 members without a seed retry at {} distinct instants: {retries:?}",
            retries.len()
        );
    }

    #[test]
    fn a_configured_seed_wins_over_the_member_id() {
        // Seeded runs replay whatever the member id: the seed alone decides the jitter.
        let now = crate::testutil::epoch();
        for protocol in [GroupProtocol::Classic, GroupProtocol::Consumer] {
            let retries: BTreeSet<Instant> = ids()
                .map(|id| {
                    let mut c = config(protocol).with_member_id(id);
                    c.seed = Some(0x5eed);
                    first_lookup_retry(Member::new(c, now).unwrap(), now)
                })
                .collect();
            assert_eq!(retries.len(), 1, "{protocol:?}: {retries:?}");
        }
    }

    #[test]
    fn a_core_member_with_no_seed_and_no_member_id_is_refused() {
        let now = crate::testutil::epoch();
        for protocol in [
            GroupProtocol::Classic,
            GroupProtocol::Consumer,
            GroupProtocol::Auto,
        ] {
            let e = Member::new(config(protocol), now).unwrap_err();
            assert_eq!(e.key, "seed", "{protocol:?}: {e}");
        }
    }
    /// `close()` before the broker refused the consumer protocol: the close completes (the
    /// refusal of the join and of its leave change nothing) and no classic member is born.
    #[test]
    fn an_auto_member_closed_before_the_refusal_closes_instead_of_falling_back() {
        let now = crate::testutil::epoch();
        let mut c = config(GroupProtocol::Auto);
        c.seed = Some(7);
        let mut m = Member::new(c, now).unwrap();
        m.subscribe(["t".to_string()], now).unwrap();
        let find = m.poll_request().expect("FindCoordinator");
        let coordinator = FindCoordinatorResponse::default().with_coordinators(vec![
            Coordinator::default()
                .with_key(StrBytes::from_static_str("g"))
                .with_node_id(kafka_protocol::messages::BrokerId(1))
                .with_host(StrBytes::from_static_str("h"))
                .with_port(9092),
        ]);
        m.handle_response(
            find.id,
            Ok(Response {
                version: 4,
                body: ResponseBody::Kafka(ResponseKind::FindCoordinator(coordinator)),
            }),
            now,
        );
        let mut sent = Vec::new();
        while let Some(o) = m.poll_request() {
            sent.push(o);
        }
        m.close(crate::machine::events::CloseOptions::Default, now);
        while let Some(o) = m.poll_request() {
            sent.push(o);
        }
        let refused = || {
            Err(crate::error::TransportError::UnsupportedApi {
                api: kafka_protocol::messages::ApiKey::ConsumerGroupHeartbeat.into(),
                ours: 0..=1,
                broker: None,
            })
        };
        for o in &sent {
            if o.request.api_key() == kafka_protocol::messages::ApiKey::ConsumerGroupHeartbeat {
                m.handle_response(o.id, refused(), now);
            }
        }
        let mut events = Vec::new();
        while let Some(e) = m.poll_event() {
            events.push(e);
        }
        assert_eq!(m.protocol(), GroupProtocol::Consumer, "{events:?}");
        assert!(events.contains(&Event::Closed), "{events:?}");
        assert!(m.poll_request().is_none());
    }
    /// The classic member of an `auto` fallback does not reuse the request ids of the consumer
    /// member it replaces: a late answer to the consumer member's metadata prefetch must not
    /// pass for the answer to the classic member's JoinGroup.
    #[test]
    fn a_late_answer_to_the_replaced_members_request_is_not_the_fallbacks() {
        let now = crate::testutil::epoch();
        let mut c = config(GroupProtocol::Auto);
        c.seed = Some(7);
        let mut m = Member::new(c, now).unwrap();
        m.subscribe(["t".to_string()], now).unwrap();
        let coordinator = || {
            Ok(Response {
                version: 4,
                body: ResponseBody::Kafka(ResponseKind::FindCoordinator(
                    FindCoordinatorResponse::default().with_coordinators(vec![
                        Coordinator::default()
                            .with_key(StrBytes::from_static_str("g"))
                            .with_node_id(kafka_protocol::messages::BrokerId(1))
                            .with_host(StrBytes::from_static_str("h"))
                            .with_port(9092),
                    ]),
                )),
            })
        };
        let drain = |m: &mut Member| {
            let mut out = Vec::new();
            while let Some(o) = m.poll_request() {
                out.push(o);
            }
            let mut events = Vec::new();
            while let Some(e) = m.poll_event() {
                events.push(e);
            }
            (out, events)
        };
        let (out, _) = drain(&mut m);
        let find = out
            .iter()
            .find(|o| matches!(o.request, Request::FindCoordinator { .. }));
        let prefetch = out
            .iter()
            .find(|o| matches!(o.request, Request::Metadata { .. }))
            .expect("the consumer member prefetches the subscribed topics' metadata")
            .clone();
        m.handle_response(find.expect("FindCoordinator").id, coordinator(), now);
        let (out, _) = drain(&mut m);
        let heartbeat = out.first().expect("the first ConsumerGroupHeartbeat");
        m.handle_response(
            heartbeat.id,
            Err(TransportError::UnsupportedApi {
                api: kafka_protocol::messages::ApiKey::ConsumerGroupHeartbeat.into(),
                ours: 0..=1,
                broker: None,
            }),
            now,
        );
        let (_, events) = drain(&mut m);
        assert_eq!(m.protocol(), GroupProtocol::Classic, "{events:?}");
        let (out, _) = drain(&mut m);
        let find = out
            .first()
            .expect("the classic member looks the coordinator up");
        m.handle_response(find.id, coordinator(), now);
        let (out, _) = drain(&mut m);
        let join = out.first().expect("JoinGroup").clone();
        assert_eq!(
            join.request.api_key(),
            kafka_protocol::messages::ApiKey::JoinGroup
        );
        assert_ne!(
            join.id, prefetch.id,
            "request ids of the replaced member are not reused"
        );
        // The prefetch's answer arrives late: ignored, the JoinGroup is still awaited.
        m.handle_response(
            prefetch.id,
            Ok(Response {
                version: 12,
                body: ResponseBody::Kafka(ResponseKind::Metadata(Default::default())),
            }),
            now,
        );
        let (_, events) = drain(&mut m);
        assert!(
            !events.iter().any(|e| matches!(e, Event::Fatal(_))),
            "{events:?}"
        );
        assert_eq!(m.state(), MemberState::Joining);
    }
}
