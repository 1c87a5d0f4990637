//! Reading the group's session timeout (consumer and streams protocols), which the heartbeat
//! does not carry, for the membership lease (see [`crate::machine`]): DescribeConfigs on the
//! group resource (type 32, KIP-848's group configs: `consumer.session.timeout.ms` /
//! `streams.session.timeout.ms`), else on the coordinator's broker resource (type 4: its
//! `group.consumer.session.timeout.ms` / `group.streams.session.timeout.ms`), else the value
//! configured ([`GroupConfig::group_session_timeout`](crate::config::GroupConfig::group_session_timeout)).
//! Asked once per member; a failure of either step is never fatal.

use std::ops::RangeInclusive;
use std::time::Duration;

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::{
    DescribeConfigsRequest, DescribeConfigsResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use super::shell::{Shell, epoch_lease_bound};
use crate::error::codes;
use crate::request::{Broker, Outbound, Reply, Request, Response, ResponseBody, Target};

/// The DescribeConfigs a member of `shell` sends next, when it reads the group's session
/// timeout and one is due (`sent` records it as the member's own).
pub(crate) fn poll<S>(
    shell: &mut Shell<S>,
    read: &mut SessionRead,
    coordinator: &Broker,
    keys: Keys,
    sent: impl FnOnce(Step) -> S,
) -> Option<Outbound> {
    if !shell.config.read_group_session_timeout {
        return None;
    }
    let (request, step) = read.next(&shell.config.group_id, coordinator, keys)?;
    shell.send(
        Target::Coordinator(coordinator.clone()),
        request,
        sent(step),
    );
    shell.outbound.pop_front()
}

/// Reads the answer to `step`; a session timeout found becomes the group's, and a running
/// lease (margin `interval`, the coordinator's last heartbeat interval) ends by it.
pub(crate) fn apply<S>(
    shell: &mut Shell<S>,
    read: &mut SessionRead,
    step: Step,
    result: &Reply,
    keys: Keys,
    interval: Duration,
) {
    if let Some(d) = read.answered(step, result, keys) {
        shell.set_group_session(d, |c| epoch_lease_bound(c, interval));
    }
}

/// `ConfigResource.Type.GROUP`.
const RESOURCE_GROUP: i8 = 32;
/// `ConfigResource.Type.BROKER`.
const RESOURCE_BROKER: i8 = 4;
const DESCRIBE_VERSIONS: RangeInclusive<i16> = 1..=4;

/// The config names of one protocol: the group config, then the broker's default.
#[derive(Debug, Clone, Copy)]
pub struct Keys {
    group: &'static str,
    broker: &'static str,
}

/// The consumer protocol's names.
pub(crate) const CONSUMER: Keys = Keys {
    group: "consumer.session.timeout.ms",
    broker: "group.consumer.session.timeout.ms",
};

/// The streams protocol's names.
pub(crate) const STREAMS: Keys = Keys {
    group: "streams.session.timeout.ms",
    broker: "group.streams.session.timeout.ms",
};

/// The share protocol's names.
pub(crate) const SHARE: Keys = Keys {
    group: "share.session.timeout.ms",
    broker: "group.share.session.timeout.ms",
};

/// The DescribeConfigs answer in `result`, or why there is none.
fn describe_answer(result: &Reply) -> Result<&DescribeConfigsResponse, String> {
    match result {
        Ok(Response {
            body: ResponseBody::Kafka(ResponseKind::DescribeConfigs(r)),
            ..
        }) => Ok(r),
        Ok(_) => Err("not a DescribeConfigs answer".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Which DescribeConfigs a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Group,
    Broker,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum State {
    #[default]
    NotAsked,
    InFlight(Step),
    /// The broker step is due (the group step found nothing).
    BrokerDue,
    Done,
}

/// Where the read stands.
#[derive(Debug, Clone, Default)]
pub(crate) struct SessionRead {
    state: State,
}

impl SessionRead {
    /// The next DescribeConfigs to send for `group`, whose coordinator is `coordinator`, if one
    /// is due; it is then in flight.
    pub(crate) fn next(
        &mut self,
        group: &str,
        coordinator: &Broker,
        keys: Keys,
    ) -> Option<(Request, Step)> {
        let (step, kind, name, key) = match self.state {
            State::NotAsked => (Step::Group, RESOURCE_GROUP, group.to_owned(), keys.group),
            State::BrokerDue => (
                Step::Broker,
                RESOURCE_BROKER,
                coordinator.node_id.to_string(),
                keys.broker,
            ),
            State::InFlight(_) | State::Done => return None,
        };
        self.state = State::InFlight(step);
        let resource = DescribeConfigsResource::default()
            .with_resource_type(kind)
            .with_resource_name(StrBytes::from_string(name))
            .with_configuration_keys(Some(vec![StrBytes::from_static_str(key)]));
        let body = DescribeConfigsRequest::default().with_resources(vec![resource]);
        let request = Request::Raw {
            body: Box::new(RequestKind::DescribeConfigs(body)),
            versions: DESCRIBE_VERSIONS,
            fit: None,
        };
        Some((request, step))
    }

    /// Reads the answer to `step`: the session timeout when it names one; otherwise the next
    /// step becomes due (after the group step) or the read ends.
    pub(crate) fn answered(&mut self, step: Step, result: &Reply, keys: Keys) -> Option<Duration> {
        let key = match step {
            Step::Group => keys.group,
            Step::Broker => keys.broker,
        };
        let (found, error) = match describe_answer(result) {
            Ok(r) => (
                r.results
                    .iter()
                    .filter(|r| r.error_code == codes::NONE)
                    .flat_map(|r| &r.configs)
                    .find(|c| c.name.as_str() == key)
                    .and_then(|c| c.value.as_deref())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .filter(|ms| *ms > 0)
                    .map(Duration::from_millis),
                r.results
                    .iter()
                    .find(|r| r.error_code != codes::NONE)
                    .map(|r| format!("error {} {:?}", r.error_code, r.error_message)),
            ),
            Err(e) => (None, Some(e)),
        };
        tracing::debug!(?step, key, ?found, ?error, "group session timeout read");
        self.state = match (found, step) {
            (None, Step::Group) => State::BrokerDue,
            _ => State::Done,
        };
        found
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::describe_configs_response::{
        DescribeConfigsResourceResult, DescribeConfigsResult,
    };
    use kafka_protocol::messages::{DescribeConfigsResponse, ResponseKind};
    use kafka_protocol::protocol::StrBytes;

    use super::{CONSUMER, SessionRead, Step};
    use crate::request::{Response, ResponseBody};

    fn answer(name: &str, value: &str, error: i16) -> crate::request::Reply {
        let s = |x: &str| StrBytes::from_string(x.to_owned());
        let config = DescribeConfigsResourceResult::default()
            .with_name(s(name))
            .with_value(Some(s(value)));
        let body = DescribeConfigsResponse::default().with_results(vec![
            DescribeConfigsResult::default()
                .with_error_code(error)
                .with_configs(vec![config]),
        ]);
        Ok(Response {
            version: 4,
            body: ResponseBody::Kafka(ResponseKind::DescribeConfigs(body)),
        })
    }

    #[test]
    fn only_the_asked_key_without_error_and_a_positive_value_counts() {
        let read = |step, r| SessionRead::default().answered(step, &r, CONSUMER);
        let six = Some(std::time::Duration::from_secs(6));
        let cases = [
            (Step::Group, "consumer.session.timeout.ms", "6000", 0, six),
            (Step::Group, "consumer.session.timeout.ms", "6000", 42, None),
            (
                Step::Group,
                "group.consumer.session.timeout.ms",
                "6000",
                0,
                None,
            ),
            (
                Step::Broker,
                "group.consumer.session.timeout.ms",
                "6000",
                0,
                six,
            ),
            (Step::Group, "consumer.session.timeout.ms", "0", 0, None),
            (Step::Group, "consumer.session.timeout.ms", "x", 0, None),
        ];
        for (step, key, value, code, expected) in cases {
            assert_eq!(
                read(step, answer(key, value, code)),
                expected,
                "{key}={value} (error {code})"
            );
        }
    }
}
