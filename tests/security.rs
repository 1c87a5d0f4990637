//! TLS and SASL against the real broker's SASL_SSL and SASL_PLAINTEXT listeners
//! (tests/kafka/broker.sh generates the certificates at start and creates the SCRAM users at
//! format time).

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{TestMember, unique};
use consumer_membership::ClientConfig;
use consumer_membership::config::{SaslMechanism, Secret, SecurityProtocol};
use consumer_membership::error::TransportError;
use consumer_membership::machine::TopicPartition;
use consumer_membership::machine::events::CommitOffset;
use consumer_membership::request::Target;
use consumer_membership::transport::TcpTransport;

struct Env {
    sasl_ssl: String,
    sasl_plaintext: String,
    ca: PathBuf,
    untrusted_ca: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
    user: String,
    password: String,
}

fn env() -> Option<Env> {
    common::bootstrap()?;
    let var = |k: &str| {
        std::env::var(k)
            .unwrap_or_else(|_| panic!("{k} not set: run through tests/kafka/with-broker.sh"))
    };
    Some(Env {
        sasl_ssl: var("KAFKA_SASL_SSL_BOOTSTRAP"),
        sasl_plaintext: var("KAFKA_SASL_PLAINTEXT_BOOTSTRAP"),
        ca: var("KAFKA_TLS_CA").into(),
        untrusted_ca: var("KAFKA_TLS_UNTRUSTED_CA").into(),
        client_cert: var("KAFKA_TLS_CLIENT_CERT").into(),
        client_key: var("KAFKA_TLS_CLIENT_KEY").into(),
        user: var("KAFKA_SASL_USER"),
        password: var("KAFKA_SASL_PASSWORD"),
    })
}

fn secured(
    bootstrap: &str,
    protocol: SecurityProtocol,
    mechanism: SaslMechanism,
    user: &str,
    password: &str,
    ca: Option<&PathBuf>,
) -> ClientConfig {
    let mut c = ClientConfig::new(bootstrap).unwrap();
    c.request_timeout = Duration::from_secs(15);
    c.security.protocol = protocol;
    c.security.sasl_mechanism = Some(mechanism);
    c.security.sasl_username = Some(user.into());
    c.security.sasl_password = Some(Secret::new(password));
    c.security.ssl_ca_location = ca.cloned();
    c
}

/// A member joins over `config` and commits; returns the time to its assignment.
async fn join_and_commit(e: &Env, config: ClientConfig) -> Duration {
    let b = common::bootstrap().unwrap();
    let (plain, _) = common::transport(&b);
    let topic = unique("sec");
    common::create_topic(&*plain, &topic, 2).await;
    let group = unique("sec");
    let _ = e;
    let started = Instant::now();
    let m = TestMember::start(
        Arc::new(TcpTransport::new(config)),
        common::group_config(&group, None),
        &[&topic],
    )
    .await;
    m.wait_stable(Some(2), Duration::from_secs(30)).await;
    let took = started.elapsed();
    let tp = TopicPartition::new(&topic, 0);
    m.handle
        .commit(vec![CommitOffset {
            partition: tp.clone(),
            offset: 5,
            metadata: None,
        }])
        .await
        .expect("commit");
    assert_eq!(
        m.handle.committed(vec![tp.clone()]).await.unwrap()[&tp].offset,
        Some(5)
    );
    took
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_joins_and_commits_over_tls_with_scram_sha_512() {
    let Some(e) = env() else { return };
    let c = secured(
        &e.sasl_ssl,
        SecurityProtocol::SaslSsl,
        SaslMechanism::ScramSha512,
        &e.user,
        &e.password,
        Some(&e.ca),
    );
    let took = join_and_commit(&e, c).await;
    println!("SASL_SSL + SCRAM-SHA-512: stable in {took:?}");
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_joins_and_commits_over_sasl_plaintext_with_plain() {
    let Some(e) = env() else { return };
    let c = secured(
        &e.sasl_plaintext,
        SecurityProtocol::SaslPlaintext,
        SaslMechanism::Plain,
        &e.user,
        &e.password,
        None,
    );
    join_and_commit(&e, c).await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_sha_256_and_mutual_tls_connect() {
    let Some(e) = env() else { return };
    let mut c = secured(
        &e.sasl_ssl,
        SecurityProtocol::SaslSsl,
        SaslMechanism::ScramSha256,
        &e.user,
        &e.password,
        Some(&e.ca),
    );
    c.security.ssl_certificate_location = Some(e.client_cert.clone());
    c.security.ssl_key_location = Some(e.client_key.clone());
    let v = TcpTransport::new(c)
        .broker_versions(&Target::Bootstrap)
        .await
        .expect("connect");
    assert!(v.get(kafka_protocol::messages::ApiKey::JoinGroup).is_some());
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_a_typed_error_at_once() {
    let Some(e) = env() else { return };
    for (bootstrap, protocol, mechanism, ca) in [
        (
            &e.sasl_ssl,
            SecurityProtocol::SaslSsl,
            SaslMechanism::ScramSha512,
            Some(&e.ca),
        ),
        (
            &e.sasl_plaintext,
            SecurityProtocol::SaslPlaintext,
            SaslMechanism::Plain,
            None,
        ),
    ] {
        let c = secured(
            bootstrap,
            protocol,
            mechanism,
            &e.user,
            "not-the-password",
            ca,
        );
        let started = Instant::now();
        let err = TcpTransport::new(c)
            .broker_versions(&Target::Bootstrap)
            .await
            .unwrap_err();
        let took = started.elapsed();
        println!("{mechanism:?}: {err} after {took:?}");
        assert!(
            matches!(err, TransportError::Authentication { .. }),
            "{err:?}"
        );
        assert!(
            !err.to_string().contains("not-the-password"),
            "the password leaked into {err}"
        );
        // No retry loop: one connection attempt, well under the 15 s request timeout.
        assert!(took < Duration::from_secs(3), "{took:?}");
    }
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_broker_certificate_is_a_typed_tls_error() {
    let Some(e) = env() else { return };
    let c = secured(
        &e.sasl_ssl,
        SecurityProtocol::SaslSsl,
        SaslMechanism::ScramSha512,
        &e.user,
        &e.password,
        Some(&e.untrusted_ca),
    );
    let started = Instant::now();
    let err = TcpTransport::new(c)
        .broker_versions(&Target::Bootstrap)
        .await
        .unwrap_err();
    println!("{err}");
    assert!(
        matches!(&err, TransportError::Tls { reason } if reason.contains("handshake")),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    // A host name the certificate does not cover fails too, unless verification is turned off.
    let mut c = secured(
        &e.sasl_ssl.replace("127.0.0.1", "127.0.0.2"),
        SecurityProtocol::SaslSsl,
        SaslMechanism::ScramSha512,
        &e.user,
        &e.password,
        Some(&e.ca),
    );
    if std::net::TcpStream::connect(c.bootstrap_servers[0].as_str()).is_ok() {
        let err = TcpTransport::new(c.clone())
            .broker_versions(&Target::Bootstrap)
            .await
            .unwrap_err();
        assert!(matches!(err, TransportError::Tls { .. }), "{err:?}");
        c.security.ssl_verify_hostname = false;
        TcpTransport::new(c)
            .broker_versions(&Target::Bootstrap)
            .await
            .expect("no host name check");
    }
}

/// rskafka over the same TLS settings as the member: `transport::tls_client_config` is the
/// rustls config the transport uses; with the broker's CA rskafka reads the cluster's topics
/// over SASL_SSL, with an untrusted CA it never gets them.
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_plane_client_connects_with_the_members_tls_config() {
    let Some(e) = env() else { return };
    // SASL_SSL with SCRAM-SHA-512, trusting `ca`.
    let scram = |ca: &PathBuf| {
        let (user, password) = (&e.user, &e.password);
        secured(
            &e.sasl_ssl,
            SecurityProtocol::SaslSsl,
            SaslMechanism::ScramSha512,
            user,
            password,
            Some(ca),
        )
    };
    let rskafka = |ca: &PathBuf| {
        let c = scram(ca);
        let tls = consumer_membership::transport::tls_client_config(&c.security)
            .expect("the CA file reads");
        let credentials = rskafka::client::Credentials::new(e.user.clone(), e.password.clone());
        rskafka::client::ClientBuilder::new(c.bootstrap_servers.clone())
            .tls_config(tls)
            .sasl_config(rskafka::client::SaslConfig::ScramSha512(credentials))
            .build()
    };
    let topics = |ca: PathBuf| async move {
        let client = rskafka(&ca).await?;
        client.list_topics().await
    };
    let listed = topics(e.ca.clone()).await;
    assert!(listed.is_ok(), "rskafka over SASL_SSL: {listed:?}");
    // rskafka retries a failed connection without a deadline: refused means never listed.
    let refused = tokio::time::timeout(Duration::from_secs(10), topics(e.untrusted_ca.clone()));
    let refused = refused.await;
    assert!(
        !matches!(refused, Ok(Ok(_))),
        "an untrusted CA must be refused: {refused:?}"
    );
    let missing = scram(&PathBuf::from("/nonexistent/ca.pem"));
    match consumer_membership::transport::tls_client_config(&missing.security) {
        Err(TransportError::Tls { reason }) => assert!(reason.contains("/nonexistent/ca.pem")),
        other => panic!("expected a TLS error naming the file, got {other:?}"),
    }
}
