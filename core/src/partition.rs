//! [`TopicPartition`]: the one domain type every layer shares (the wire's consumer-protocol
//! bytes, the assignors, the machines, the events).

use std::fmt;
use std::sync::Arc;

/// A partition of a topic.
///
/// The name is shared: the partitions of one topic decoded from one message (an assignment, a
/// subscription's owned partitions, a topic id resolved through metadata) point at one copy of
/// it, so a list of partitions costs a few words per partition however long the name is, and
/// cloning a partition never copies its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// The topic name.
    pub topic: Arc<str>,
    /// The partition index.
    pub partition: i32,
}

impl TopicPartition {
    /// `topic`-`partition`. The name may be a `&str`, `String`, `&String` or `Arc<str>`; pass an
    /// `Arc<str>` (or `&Arc<str>`) to share one name among partitions.
    pub fn new(topic: impl IntoTopicName, partition: i32) -> Self {
        Self {
            topic: topic.into_topic_name(),
            partition,
        }
    }

    /// The topic name.
    pub fn topic(&self) -> &str {
        &self.topic
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// What [`TopicPartition::new`] takes as a topic name.
pub trait IntoTopicName {
    /// The name, shared if it already was.
    fn into_topic_name(self) -> Arc<str>;
}

impl IntoTopicName for Arc<str> {
    fn into_topic_name(self) -> Arc<str> {
        self
    }
}

impl IntoTopicName for &Arc<str> {
    fn into_topic_name(self) -> Arc<str> {
        Arc::clone(self)
    }
}

impl IntoTopicName for &str {
    fn into_topic_name(self) -> Arc<str> {
        self.into()
    }
}

impl IntoTopicName for String {
    fn into_topic_name(self) -> Arc<str> {
        self.into()
    }
}

impl IntoTopicName for &String {
    fn into_topic_name(self) -> Arc<str> {
        self.as_str().into()
    }
}

impl IntoTopicName for Box<str> {
    fn into_topic_name(self) -> Arc<str> {
        self.into()
    }
}

impl IntoTopicName for std::borrow::Cow<'_, str> {
    fn into_topic_name(self) -> Arc<str> {
        self.into()
    }
}
