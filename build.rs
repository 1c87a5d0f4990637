//! Sets `--cfg kafka_broker` when a Kafka broker is there for the real-broker tests: under
//! `tests/kafka/with-broker.sh`, which exports `KAFKA_BROKER_TESTS=1`, and under `CI=true`, where
//! a missing broker must fail the run. Without it those tests are `#[ignore]`d with the reason, so
//! a run without a broker reports them ignored instead of passed. Only the tests read the cfg;
//! this file is not packaged.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(kafka_broker)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=KAFKA_BROKER_TESTS");
    println!("cargo::rerun-if-env-changed=CI");
    let set = |var: &str| std::env::var(var).is_ok_and(|v| !v.trim().is_empty());
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    if set("KAFKA_BROKER_TESTS") || ci {
        println!("cargo::rustc-cfg=kafka_broker");
    }
}
