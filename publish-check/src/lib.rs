//! Forged responses through consumer-membership's public transport API, built against the
//! published kafka-protocol 0.18.0 (no `[patch]`): `tests/forged.rs`.
