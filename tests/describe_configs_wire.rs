//! DescribeConfigs answers (what a consumer or streams member reads the group's session timeout
//! with, `GroupConfig::read_group_session_timeout`) pass the transport's size walk at every
//! version the members send (v1-4), and a cut-short one is a typed error.

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{ApiKey, DescribeConfigsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use consumer_membership::request::{Response, ResponseBody};
use consumer_membership::transport::wire::{decode_response, encode_response};

/// DescribeConfigs answers pass the transport's size walk at every version the members send,
/// and a cut-short one is a typed error.
#[test]
fn describe_configs_answers_are_walked_and_decoded() {
    let s = |x: &str| StrBytes::from_string(x.to_owned());
    let config = DescribeConfigsResourceResult::default()
        .with_name(s("consumer.session.timeout.ms"))
        .with_value(Some(s("6000")))
        .with_synonyms(vec![
            DescribeConfigsSynonym::default()
                .with_name(s("group.consumer.session.timeout.ms"))
                .with_value(Some(s("6000"))),
        ])
        .with_documentation(None);
    let body = DescribeConfigsResponse::default().with_results(vec![
        DescribeConfigsResult::default()
            .with_resource_type(32)
            .with_resource_name(s("g"))
            .with_error_message(None)
            .with_configs(vec![config]),
    ]);
    for v in 1..=4 {
        let kind = ResponseKind::DescribeConfigs(body.clone());
        let frame = encode_response(&kind.into(), ApiKey::DescribeConfigs, v, 3)
            .unwrap()
            .freeze();
        let r = decode_response(frame.slice(4..), ApiKey::DescribeConfigs, v).unwrap();
        let Response {
            body: ResponseBody::Kafka(ResponseKind::DescribeConfigs(back)),
            ..
        } = r
        else {
            panic!("not a DescribeConfigs answer: {r:?}")
        };
        assert_eq!(
            back.results[0].configs[0].value.as_deref(),
            Some("6000"),
            "v{v}"
        );
        for cut in 4..frame.len() {
            assert!(
                decode_response(frame.slice(4..cut), ApiKey::DescribeConfigs, v).is_err(),
                "v{v} cut at {cut}"
            );
        }
    }
}
