//! Metadata (v12+) answers as plain values: brokers, and topics with their ids and partitions.

use std::collections::BTreeMap;

use kafka_protocol::messages::{ApiKey, ResponseKind};

use crate::error::GroupError;
use crate::request::{Broker, Response, ResponseBody};

/// One topic as Metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    /// The topic id (KIP-516); never the zero id for a topic that exists.
    pub id: uuid::Uuid,
    /// Partition indexes, sorted.
    pub partitions: Vec<i32>,
    /// The topic's error code (0, or e.g. 3 UNKNOWN_TOPIC_OR_PARTITION, 5 LEADER_NOT_AVAILABLE).
    pub error_code: i16,
    /// Each partition's leader (node id), for the partitions that have one.
    pub leaders: BTreeMap<i32, i32>,
}

/// The parts of a Metadata answer membership needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterMetadata {
    /// Brokers by node id.
    pub brokers: BTreeMap<i32, Broker>,
    /// Topics by name.
    pub topics: BTreeMap<String, TopicMetadata>,
    /// The cluster id, if the broker sent one.
    pub cluster_id: Option<String>,
}

impl ClusterMetadata {
    /// Reads a Metadata response. A topic without a name, a duplicate partition or a broker with an
    /// unusable port is a typed [`GroupError::InvalidResponse`].
    pub fn from_response(response: &Response) -> Result<Self, GroupError> {
        let invalid = |reason: String| GroupError::InvalidResponse {
            api: ApiKey::Metadata.into(),
            reason,
        };
        let ResponseBody::Kafka(ResponseKind::Metadata(r)) = &response.body else {
            return Err(invalid("the answer is not a Metadata response".into()));
        };
        let mut out = ClusterMetadata {
            cluster_id: r.cluster_id.as_ref().map(|s| s.to_string()),
            ..Default::default()
        };
        for b in &r.brokers {
            let port = u16::try_from(b.port)
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| invalid(format!("broker {} has port {}", b.node_id.0, b.port)))?;
            out.brokers.insert(
                b.node_id.0,
                Broker {
                    node_id: b.node_id.0,
                    host: b.host.to_string(),
                    port,
                },
            );
        }
        for t in &r.topics {
            let name = t
                .name
                .as_ref()
                .ok_or_else(|| invalid(format!("topic {} has no name", t.topic_id)))?
                .to_string();
            let mut partitions: Vec<i32> = t.partitions.iter().map(|p| p.partition_index).collect();
            partitions.sort_unstable();
            if partitions.windows(2).any(|w| w[0] == w[1])
                || partitions.first().is_some_and(|p| *p < 0)
            {
                return Err(invalid(format!(
                    "topic {name} has invalid partitions {partitions:?}"
                )));
            }
            let leaders = (t.partitions.iter())
                .filter(|p| p.error_code == 0 && p.leader_id.0 >= 0)
                .map(|p| (p.partition_index, p.leader_id.0))
                .collect();
            let topic = TopicMetadata {
                id: t.topic_id,
                partitions,
                error_code: t.error_code,
                leaders,
            };
            if out.topics.insert(name.clone(), topic).is_some() {
                return Err(invalid(format!("topic {name} appears twice")));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::{BrokerId, MetadataResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;

    fn topic(name: Option<&str>, parts: &[i32]) -> MetadataResponseTopic {
        MetadataResponseTopic::default()
            .with_name(name.map(|n| TopicName(StrBytes::from_string(n.into()))))
            .with_topic_id(uuid::Uuid::from_u128(7))
            .with_partitions(
                parts
                    .iter()
                    .map(|&p| MetadataResponsePartition::default().with_partition_index(p))
                    .collect(),
            )
    }

    fn response(r: MetadataResponse) -> Response {
        Response {
            version: 12,
            body: ResponseBody::Kafka(ResponseKind::Metadata(r)),
        }
    }

    #[test]
    fn reads_brokers_and_topics() {
        let r = MetadataResponse::default()
            .with_brokers(vec![
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(1))
                    .with_host(StrBytes::from_static_str("h"))
                    .with_port(9092),
            ])
            .with_topics(vec![topic(Some("t"), &[2, 0, 1])]);
        let m = ClusterMetadata::from_response(&response(r)).unwrap();
        assert_eq!(m.brokers[&1].port, 9092);
        assert_eq!(m.topics["t"].partitions, vec![0, 1, 2]);
        assert_eq!(m.topics["t"].id, uuid::Uuid::from_u128(7));
    }

    #[test]
    fn rejects_malformed_answers() {
        for r in [
            MetadataResponse::default().with_topics(vec![topic(None, &[0])]),
            MetadataResponse::default().with_topics(vec![topic(Some("t"), &[0, 0])]),
            MetadataResponse::default().with_topics(vec![topic(Some("t"), &[-1])]),
            MetadataResponse::default()
                .with_topics(vec![topic(Some("t"), &[0]), topic(Some("t"), &[1])]),
            MetadataResponse::default()
                .with_brokers(vec![MetadataResponseBroker::default().with_port(70000)]),
        ] {
            assert!(matches!(
                ClusterMetadata::from_response(&response(r)),
                Err(GroupError::InvalidResponse { .. })
            ),);
        }
        let wrong = Response {
            version: 0,
            body: ResponseBody::Kafka(ResponseKind::Heartbeat(Default::default())),
        };
        assert!(ClusterMetadata::from_response(&wrong).is_err());
    }
}
