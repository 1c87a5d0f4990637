#![cfg(feature = "sim")]
//! Random schedules: 2-3 members (static and dynamic; classic in about half of the schedules,
//! KIP-848 consumer protocol in the other half) against the simulated coordinator,
//! with random faults (slow answers, connection resets before or after an answer and at any time,
//! KIP-219 throttling, requests of different connections handled out of read order, the broker
//! closing idle connections, connections dropped by the client, coordinator stalls, operations
//! failed by the coordinator runtime, unsubscribe/resubscribe, application poll pauses, close +
//! restart with the same instance id; a restarted KIP-848 process has a new member id,
//! KIP-1082; coordinator moves to another node: unload, a leaderless gap, a load window, the new
//! node replaying only committed records; appends that fail or commit after the write timeout,
//! scripted and seeded per append), against a broker of a release profile picked per schedule
//! (4.0/4.1, 4.2, 4.3+: `BrokerProfile`) with the `uniform` or `range` assignor (the round robin
//! churn mode in a few; `broker_rules`). The network is TCP-true (`sim::network`): an answer is
//! never lost nor duplicated on a live connection, and the broker processes a closed connection's
//! requests as it does. The world checks its invariants after every step, per protocol (see
//! `World::violations`): classic, FENCED_INSTANCE_ID only when another process holds the instance
//! id, no partition owned by two live members of the same generation, a generation never goes
//! backwards under one member id; KIP-848, FENCED_INSTANCE_ID only when another process's member
//! id holds the instance id, the member epoch never decreases except to 0, no partition owned by
//! two live members at any instant (zombies the coordinator removed aside) and a member owns only
//! what the coordinator assigned to it or awaits it to revoke, the coordinator's own invariants;
//! every answer encodes at its version. Once the faults stop every member must reach Stable
//! within a bound, or have stopped on a legitimate fatal error: FENCED_INSTANCE_ID, or KIP-848
//! UNRELEASED_INSTANCE_ID while another process's member id holds the instance id (a restarted
//! static member whose predecessor did not leave with -2). A panic is a violation too. Protocol
//! hazards the broker's rules allow (`World::hazards`) are counted and printed, not failures.
//!
//! `SIM_SEEDS` (default 10,000) and `SIM_SEED_OFFSET` (default 0) pick the seeds. A failing seed is
//! replayed with the trace on and printed.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use consumer_membership::MemberId;
use consumer_membership::config::{GroupConfig, GroupProtocol};
use consumer_membership::machine::consumer::ConsumerMember;
use consumer_membership::machine::events::CloseOptions;
use consumer_membership::machine::events::MemberState;
use consumer_membership::machine::member::Member;
use consumer_membership::sim::codes;
use consumer_membership::sim::coordinator::{AppendFault, AppendFaults};
use consumer_membership::sim::coordinator::{BrokerProfile, BrokerRules, ServerAssignor};
use consumer_membership::sim::network::NetConfig;
use consumer_membership::sim::world::{MemberSlot, SimConfig, World};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Faults happen during the first `FAULTS` of virtual time.
const FAULTS: Duration = Duration::from_secs(40);
/// After the faults, every member must be Stable within this bound.
const SETTLE: Duration = Duration::from_secs(90);

#[derive(Clone)]
struct Spec {
    name: String,
    config: GroupConfig,
}

/// A fresh process for `spec`: a classic member (with the Java reset policy when asked), or a
/// consumer-protocol member.
fn add_or_restart(w: &mut World, h: Option<MemberSlot>, spec: &Spec) -> MemberSlot {
    if spec.config.protocol == GroupProtocol::Consumer {
        // A KIP-1082 member id drawn from the process's seed, so a schedule replays.
        let mut bytes = [0u8; 16];
        ChaCha8Rng::seed_from_u64(spec.config.seed.unwrap_or_default() ^ 0x1d1d).fill(&mut bytes);
        let id = MemberId::from_bytes(bytes).expect("not a reserved id");
        let m =
            ConsumerMember::with_member_id(spec.config.clone(), id, w.now()).expect("valid config");
        let m = Member::Consumer(m);
        match h {
            Some(h) => {
                w.restart(h, Box::new(m));
                h
            }
            None => w.add_member(&spec.name, Box::new(m)),
        }
    } else {
        match h {
            Some(h) => {
                w.restart_classic(h, spec.config.clone(), |m| {
                    m.set_java_reset_policy(java_policy())
                })
                .expect("valid config");
                h
            }
            None => w
                .add_classic(&spec.name, spec.config.clone(), |m| {
                    m.set_java_reset_policy(java_policy())
                })
                .expect("valid config"),
        }
    }
}

fn member_config(
    rng: &mut ChaCha8Rng,
    name: &str,
    static_member: bool,
    cooperative: bool,
) -> GroupConfig {
    let mut c = GroupConfig::new("g");
    if static_member {
        c.instance_id = Some(format!("inst-{name}"));
    }
    c.session_timeout = Duration::from_millis(rng.random_range(6_000..=10_000));
    c.heartbeat_interval = Duration::from_millis(1_000);
    c.max_poll_interval = Duration::from_millis(rng.random_range(5_000..=15_000));
    c.request_timeout = Duration::from_millis(rng.random_range(3_000..=8_000));
    if cooperative {
        c = c.with_assignor(consumer_membership::machine::classic::assignor::CooperativeSticky);
    }
    c.seed = Some(rng.random());
    c
}

fn faulty_net(rng: &mut ChaCha8Rng) -> NetConfig {
    NetConfig {
        latency_min: Duration::from_millis(1),
        latency_max: Duration::from_millis(rng.random_range(2..=20)),
        service_time: Duration::from_millis(1),
        reset_before_answer: if rng.random_bool(0.5) { 0.02 } else { 0.0 },
        reset_after_answer: if rng.random_bool(0.5) { 0.02 } else { 0.0 },
        slow_answer: if rng.random_bool(0.5) { 0.05 } else { 0.0 },
        slow_extra: Duration::from_millis(rng.random_range(500..=4_000)),
        throttle: if rng.random_bool(0.4) { 0.05 } else { 0.0 },
        throttle_max: Duration::from_millis(rng.random_range(100..=2_000)),
        reorder_window: Duration::from_millis(if rng.random_bool(0.5) {
            rng.random_range(1..=30)
        } else {
            0
        }),
        // connections.max.idle.ms: the broker's default, or short enough that the broker closes
        // bootstrap connections (and coordinator connections of paused members) under the
        // clients.
        max_idle: Some(if rng.random_bool(0.3) {
            Duration::from_millis(rng.random_range(3_000..=20_000))
        } else {
            consumer_membership::sim::network::DEFAULT_MAX_IDLE
        }),
    }
}

thread_local! {
    /// Set by [`the_java_reset_policy_is_caught_by_random_schedules`] for its own thread.
    static JAVA_POLICY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `SIM_JAVA_POLICY=1`: static members wipe their member id on a suppressed LeaveGroup, as the
/// Java client does (to check that the schedules find KAFKA-20985).
fn java_policy() -> bool {
    JAVA_POLICY.with(|j| j.get()) || std::env::var("SIM_JAVA_POLICY").is_ok_and(|v| v == "1")
}

/// The broker of a schedule: every release profile equally often; `uniform,range` (the
/// broker's default list) mostly, the round robin churn mode listed first in one schedule in ten;
/// the 4.3+ assignment interval at its default (1 s), at 0 (as tests against a broker set it)
/// or longer. Also the assignor members ask for: none mostly, `range` or `uniform` sometimes.
fn broker_rules(rng: &mut ChaCha8Rng) -> (BrokerRules, Option<ServerAssignor>) {
    let profile = BrokerProfile::ALL[rng.random_range(0..BrokerProfile::ALL.len())];
    let mut rules = BrokerRules::of(profile);
    if rng.random_bool(0.1) {
        rules.assignors.insert(0, ServerAssignor::RoundRobin);
    }
    rules.assignment_interval = Duration::from_millis(match rng.random_range(0..4) {
        0 => 0,
        1 => 3_000,
        _ => 1_000,
    });
    let asked = match rng.random_range(0..10) {
        0 | 1 => Some(ServerAssignor::Range),
        2 => Some(ServerAssignor::Uniform),
        _ => None,
    };
    (rules, asked)
}

/// Builds the world for `seed` and schedules its faults.
fn build(seed: u64, trace: bool) -> (World, Vec<MemberSlot>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_5eed);
    let mut sim = SimConfig::new(seed).with_topic("t", 6).with_topic("u", 3);
    sim.trace = trace;
    sim.wire_codec = rng.random_bool(0.25);
    sim.close_on_coordinator_loss = rng.random_bool(0.7);
    sim.revocation_delay = Duration::from_millis(rng.random_range(0..=200));
    sim.net = faulty_net(&mut rng);
    let n = rng.random_range(2..=3);
    let cooperative = rng.random_bool(0.3);
    let consumer_protocol = rng.random_bool(0.5) && !java_policy();
    if consumer_protocol {
        // Broker-side KIP-848 timers (lowered minimums, as in tests against a real broker), so
        // sessions and rebalance timeouts expire within a schedule.
        sim.coordinator.consumer_session_timeout =
            Duration::from_millis(rng.random_range(6_000..=10_000));
        sim.coordinator.consumer_heartbeat_interval = Duration::from_millis(2_000);
    }
    // The broker's release and assignors, from their own stream so that the rest of the schedule
    // does not depend on them.
    let mut broker_rng = ChaCha8Rng::seed_from_u64(seed ^ 0xb20c_e250);
    let (rules, asked) = broker_rules(&mut broker_rng);
    sim.coordinator.rules = rules;
    if rng.random_bool(0.3) {
        // Seeded append faults until the faults stop.
        sim.coordinator.append_faults = AppendFaults {
            fail: 0.01,
            slow: 0.01,
            slow_extra: Duration::from_millis(rng.random_range(0..=3_000)),
        };
    }
    let mut w = World::new(sim, std::time::Instant::now());
    let mut specs = Vec::new();
    let mut handles = Vec::new();
    for i in 0..n {
        let name = format!("m{i}");
        let static_member = rng.random_bool(0.6);
        let mut config = member_config(&mut rng, &name, static_member, cooperative);
        if consumer_protocol {
            config.protocol = GroupProtocol::Consumer;
            // The group's session timeout, as the coordinator applies it: the lease runs on it.
            config.group_session_timeout = w.coordinator().config().consumer_session_timeout;
            config = config.with_assignor(consumer_membership::machine::classic::assignor::Range);
            // group.remote.assignor: some members ask for one (the most asked for is used).
            if broker_rng.random_bool(0.5) {
                config.remote_assignor = asked.map(|a| a.name().to_owned());
            }
        }
        let spec = Spec { name, config };
        handles.push(add_or_restart(&mut w, None, &spec));
        specs.push(spec);
    }
    for (i, h) in handles.iter().enumerate() {
        let topics: &[&str] = if i % 2 == 0 { &["t", "u"] } else { &["t"] };
        let at = Duration::from_millis(rng.random_range(0..=2_000));
        let (h, topics) = (*h, topics.to_vec());
        w.schedule(at, move |w| w.subscribe(h, &topics));
    }
    // Faults.
    let faults = rng.random_range(4..=12);
    for _ in 0..faults {
        let at = Duration::from_millis(rng.random_range(1_000..FAULTS.as_millis() as u64));
        let i = rng.random_range(0..n);
        let h = handles[i];
        let spec = specs[i].clone();
        let kind = rng.random_range(0..13);
        let d = Duration::from_millis(rng.random_range(500..=15_000));
        let short = Duration::from_millis(rng.random_range(0..=500));
        let restart_seed: u64 = rng.random();
        let gap = Duration::from_millis(rng.random_range(0..=3_000));
        let load = Duration::from_millis(rng.random_range(0..=3_000));
        let survivors = rng.random_range(0..=2);
        let fail_code = if rng.random_bool(0.5) {
            codes::COORDINATOR_NOT_AVAILABLE
        } else {
            codes::NOT_COORDINATOR
        };
        match kind {
            0 => w.schedule(at, move |w| w.stall(d)),
            1 => w.schedule(at, move |w| {
                w.fail_queued_head(codes::COORDINATOR_NOT_AVAILABLE);
            }),
            2 => w.schedule(at, move |w| {
                w.fail_queued_head(codes::NOT_COORDINATOR);
            }),
            3 => w.schedule(at, move |w| {
                if w.alive(h) {
                    w.drop_connections(h)
                }
            }),
            4 => w.schedule(at, move |w| {
                if w.alive(h) {
                    w.unsubscribe(h);
                    w.schedule(w.elapsed() + short, move |w| {
                        if w.alive(h) {
                            w.subscribe(h, &["t"]);
                        }
                    });
                }
            }),
            5 => w.schedule(at, move |w| {
                if w.alive(h) {
                    w.close(h, CloseOptions::Default);
                    let mut spec = spec.clone();
                    spec.config.seed = Some(restart_seed);
                    w.schedule(w.elapsed() + short, move |w| {
                        add_or_restart(w, Some(h), &spec);
                        w.subscribe(h, &["t"]);
                    });
                }
            }),
            6 => w.schedule(at, move |w| {
                if w.alive(h) {
                    w.set_polling(h, false);
                    w.schedule(w.elapsed() + d, move |w| {
                        if w.alive(h) {
                            w.set_polling(h, true);
                            w.with(h, "poll", |m, now| m.poll(now));
                        }
                    });
                }
            }),
            7 => w.schedule(at, move |w| {
                if w.alive(h) {
                    w.commit_owned(h, 7);
                }
            }),
            8 => w.schedule(at, move |w| {
                if w.alive(h) {
                    w.reset_connections(h);
                }
            }),
            9 => w.schedule(at, move |w| {
                // The group's partition moves to another of three brokers.
                let to = w.coordinator().node_id() % 3 + 1;
                let survivors = survivors.min(w.coordinator().pending_writes());
                w.move_coordinator(to, gap, load, survivors);
            }),
            10 => w.schedule(at, move |w| {
                w.coordinator_mut()
                    .fault_next_append(AppendFault::Fail(fail_code));
            }),
            11 => w.schedule(at, move |w| {
                w.coordinator_mut()
                    .fault_next_append(AppendFault::Slow(gap));
            }),
            _ => w.schedule(at, move |w| {
                // Crash without a word, restart with the same instance id.
                w.kill(h);
                let mut spec = spec.clone();
                spec.config.seed = Some(restart_seed);
                w.schedule(w.elapsed() + short, move |w| {
                    add_or_restart(w, Some(h), &spec);
                    w.subscribe(h, &["t"]);
                });
            }),
        }
    }
    // The faults stop: a quiet network from then on (the broker's default idle expiry).
    w.schedule(FAULTS, move |w| {
        w.note("faults stop");
        w.network_mut().set_config(NetConfig::default());
        w.coordinator_mut()
            .set_append_faults(AppendFaults::default());
        if w.coordinator().failed_appends() > 0 {
            // A log that refused appends (NOT_ENOUGH_REPLICAS, NOT_LEADER_OR_FOLLOWER) ends with
            // a leader change; the load also ends what a failed append can leave behind (a
            // KIP-848 member restored without its session timeout, see World::hazards).
            let to = w.coordinator().node_id() % 3 + 1;
            w.move_coordinator(to, Duration::ZERO, Duration::from_millis(500), 0);
        }
    });
    (w, handles)
}

/// Every live member that did not stop on a (legitimate) fatal error is Stable, and the
/// coordinator's group holds exactly them.
fn settled(w: &World) -> bool {
    let mut ids = std::collections::BTreeSet::new();
    for h in w.handles() {
        if !w.alive(h) {
            continue;
        }
        let m = w.member(h);
        if m.fatal_error().is_some() {
            continue;
        }
        if m.state() != MemberState::Stable {
            return false;
        }
        ids.insert(m.member_id());
    }
    let members: std::collections::BTreeSet<String> = w
        .coordinator()
        .members()
        .into_iter()
        .map(|m| m.member_id)
        .collect();
    members == ids
}

/// Runs one schedule; returns its violations.
fn run(seed: u64, trace: bool) -> (Vec<String>, World) {
    let (mut w, handles) = build(seed, trace);
    let mut problems = Vec::new();
    w.run_until(|w| !w.violations().is_empty(), FAULTS);
    if w.violations().is_empty() {
        let ok = w.run_until(|w| settled(w) || !w.violations().is_empty(), SETTLE);
        if !ok {
            let states: Vec<String> = handles
                .iter()
                .map(|h| {
                    if w.alive(*h) {
                        let m = w.member(*h);
                        format!("{}:{} gen {}", m.member_id(), m.state(), m.generation())
                    } else {
                        "dead".into()
                    }
                })
                .collect();
            problems.push(format!(
                "liveness: not Stable {SETTLE:?} after the faults stopped: members {states:?}, coordinator {:?} {:?}",
                w.coordinator().state(),
                w.coordinator()
                    .members()
                    .iter()
                    .map(|m| m.member_id.clone())
                    .collect::<Vec<_>>()
            ));
        }
    }
    for h in &handles {
        if w.alive(*h)
            && let Some(e) = w.member(*h).fatal_error()
        {
            // Fatal is fine only after a legitimate fence (a violation is recorded otherwise),
            // or, KIP-848, UNRELEASED_INSTANCE_ID while another process's member id holds the
            // instance id (a restarted static member whose predecessor did not leave with -2:
            // the broker refuses it until that session expires, and the Java client stops).
            let legit = match e {
                consumer_membership::GroupError::FencedInstanceId { .. } => true,
                consumer_membership::GroupError::UnreleasedInstanceId { .. } => {
                    w.unreleased_by_other_process(*h)
                }
                _ => false,
            };
            if !legit {
                problems.push(format!("fatal: member stopped: {e}"));
            }
        }
    }
    problems.extend(w.violations().iter().map(|v| format!("violation: {v}")));
    problems.extend(w.anomalies().iter().map(|a| format!("anomaly: {a}")));
    (problems, w)
}

#[test]
fn random_schedules_keep_the_invariants() {
    let seeds: u64 = std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let offset: u64 = std::env::var("SIM_SEED_OFFSET")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let started = Instant::now();
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 8) as u64;
    // Per seed: its problems, its protocol hazards (World::hazards: allowed by the broker's
    // rules, reported, not failures), and whether it ran KIP-848 members.
    let outcomes: Vec<(u64, Vec<String>, usize, bool, BrokerProfile)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut out = Vec::new();
                    let mut seed = offset + t;
                    while seed < offset + seeds {
                        let profile =
                            broker_rules(&mut ChaCha8Rng::seed_from_u64(seed ^ 0xb20c_e250))
                                .0
                                .profile;
                        let r = catch_unwind(AssertUnwindSafe(|| {
                            let (problems, w) = run(seed, false);
                            let consumer = w.coordinator().consumer_epochs().is_some();
                            (problems, w.hazards().len(), consumer)
                        }));
                        let (problems, hazards, consumer) = match r {
                            Ok(x) => x,
                            Err(e) => (
                                vec![format!(
                                    "panic: {:?}",
                                    e.downcast_ref::<String>()
                                        .cloned()
                                        .or_else(|| {
                                            e.downcast_ref::<&str>().map(|s| s.to_string())
                                        })
                                        .unwrap_or_default()
                                )],
                                0,
                                false,
                            ),
                        };
                        out.push((seed, problems, hazards, consumer, profile));
                        seed += threads;
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("worker"))
            .collect()
    });
    let consumer = outcomes.iter().filter(|o| o.3).count();
    let per_profile: Vec<String> = BrokerProfile::ALL
        .iter()
        .map(|p| {
            let n = outcomes.iter().filter(|o| o.4 == *p).count();
            let c = outcomes.iter().filter(|o| o.4 == *p && o.3).count();
            format!("{} {n} ({c} KIP-848)", p.name())
        })
        .collect();
    let hazard_seeds: Vec<u64> = outcomes.iter().filter(|o| o.2 > 0).map(|o| o.0).collect();
    let results: Vec<(u64, Vec<String>)> = outcomes
        .into_iter()
        .filter(|o| !o.1.is_empty())
        .map(|o| (o.0, o.1))
        .collect();
    let violations: usize = results.iter().map(|(_, p)| p.len()).sum();
    println!(
        "{seeds} schedules ({consumer} with KIP-848 members; brokers {}), {violations} violations ({} failing seeds) in {:?}",
        per_profile.join(", "),
        results.len(),
        started.elapsed()
    );
    if !hazard_seeds.is_empty() {
        println!(
            "  {} schedules hit a protocol hazard the broker allows (World::hazards; not a failure; seeds {:?})",
            hazard_seeds.len(),
            &hazard_seeds[..hazard_seeds.len().min(8)]
        );
    }
    // Group the problems by their kind: the words before the first quote or bracket (the
    // message up to the first quote for violations), digits and member ids dropped.
    let mut by_kind: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for (seed, problems) in &results {
        for p in problems {
            let head = if p.starts_with("violation") {
                p.split('"').next().unwrap_or_default()
            } else {
                p.split(['"', '[', '(']).next().unwrap_or_default()
            };
            let words: Vec<&str> = head
                .split_whitespace()
                .map(|w| {
                    // Member ids: long base64 words (error names are upper case only).
                    let id = w.len() >= 16 && w.chars().any(|c| c.is_ascii_lowercase());
                    if id { "<id>" } else { w }
                })
                .collect();
            let kind: String = words
                .join(" ")
                .chars()
                .filter(|c| !c.is_ascii_digit() && *c != '.')
                .collect();
            by_kind
                .entry(kind.trim().to_owned())
                .or_default()
                .push(*seed);
        }
    }
    for (kind, seeds) in &by_kind {
        println!(
            "  {} x {kind} (seeds {:?})",
            seeds.len(),
            &seeds[..seeds.len().min(24)]
        );
    }
    if let Some((seed, problems)) = results.iter().min_by_key(|(s, _)| *s) {
        // Replay the first failing seed with the trace on.
        let (_, w) = match catch_unwind(AssertUnwindSafe(|| run(*seed, true))) {
            Ok(r) => r,
            Err(_) => panic!("seed {seed} panics: {problems:?}"),
        };
        let trace = w.trace_text();
        let tail: Vec<&str> = trace.lines().collect();
        let from = tail.len().saturating_sub(400);
        println!("first failing seed {seed}: {problems:#?}");
        println!("(last 400 lines; SIM_SEEDS=1 SIM_SEED_OFFSET={seed} replays it)");
        for l in &tail[from..] {
            println!("{l}");
        }
        panic!("{violations} violations in {seeds} schedules; first failing seed {seed}");
    }
}

/// The same schedules with the Java client's reset policy (the member id wiped on a suppressed
/// LeaveGroup): they find a static member fenced by its own abandoned JoinGroup (KAFKA-20985),
/// a FENCED_INSTANCE_ID between incarnations of one process, which the crate's policy never
/// produces over the 10,000 seeds above.
#[test]
fn the_java_reset_policy_is_caught_by_random_schedules() {
    JAVA_POLICY.with(|j| j.set(true));
    let started = Instant::now();
    let mut caught = Vec::new();
    let mut seed = 0;
    while seed < 2_000 && caught.len() < 3 {
        let (problems, _) = run(seed, false);
        if let Some(p) = problems
            .iter()
            .find(|p| p.starts_with("violation") && p.contains("FENCED_INSTANCE_ID"))
        {
            caught.push((seed, p.clone()));
        }
        seed += 1;
    }
    JAVA_POLICY.with(|j| j.set(false));
    println!(
        "Java reset policy: {} self-fences in the first {seed} schedules ({:?}): {caught:#?}",
        caught.len(),
        started.elapsed()
    );
    assert!(
        !caught.is_empty(),
        "no schedule of the first {seed} caught the Java reset policy"
    );
}

#[test]
fn a_schedule_replays_identically_from_its_seed() {
    let (_, a) = run(12345, true);
    let (_, b) = run(12345, true);
    assert!(a.trace() == b.trace(), "seed 12345 does not replay");
}

/// Prints the full trace of seed `SIM_SEED_OFFSET` (run with `--ignored --nocapture`).
#[test]
#[ignore = "prints one schedule's trace; run by hand"]
fn replay_one_seed() {
    let seed: u64 = std::env::var("SIM_SEED_OFFSET")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let (problems, w) = run(seed, true);
    println!("{}", w.trace_text());
    println!("seed {seed}: {problems:#?}");
    println!("hazards: {:#?}", w.hazards());
}
