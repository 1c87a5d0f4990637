//! Deterministic simulation: a simulated group coordinator, a network that behaves like a Kafka
//! broker's, and virtual time (feature `sim`).
