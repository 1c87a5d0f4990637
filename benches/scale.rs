//! Scale of KIP-848 (`group.protocol=consumer`) members: how many fit in one process, how fast
//! they converge, what each costs in memory and CPU.
//!
//! ```text
//! cargo bench --bench scale --features sim -- sim [N]      # default N = 10000
//! cargo bench --bench scale --features sim -- broker [N]   # default N = 1000, needs KAFKA_BOOTSTRAP
//! ```
//!
//! Options (after the mode and N): `--partitions P`, `--seed S` (sim), `--service-us U` (sim:
//! the simulated coordinator's time per group request, default 100), `--broker-service-us U`
//! (sim: the simulated broker's time per FindCoordinator / Metadata request, default 100), `--no-wire`
//! (sim: skip the wire-codec round trip of every request and answer), `--window S` (seconds of
//! steady state measured: 30 virtual for sim, 20 for broker),
//! `--threads T` (broker: 1 = current-thread runtime, else T workers; default 2),
//! `--limit S` (give up after S seconds, virtual for sim, wall for broker), `--leak` (never free
//! the members: sim keeps the world, broker exits after the window without closing, so that a
//! heap profiler's "leaked" report, e.g. `heaptrack_print --print-leaks`, shows what they hold
//! once stable).
//!
//! Every run prints human-readable lines and one JSON line starting with `{"bench":"scale"` that a
//! script can collect.
//!
//! What is measured, per mode:
//! - `sim`: N members (the crate's `Member::Consumer`) in the deterministic simulation
//!   (`sim::world::World`, virtual time, trace off) subscribing to one topic of 2N partitions (two
//!   per member: every member must get a non-empty share, and more than one partition per member
//!   exercises multi-partition assignments and revocations while the coordinator's per-partition
//!   state stays O(N)). All members subscribe at virtual time 0. The simulated coordinator
//!   serves one group request per 100 us (10,000/s: N = 10,000 members heartbeating every 5 s
//!   need 2,000/s) and the simulated broker one FindCoordinator / Metadata per 100 us, so the
//!   herd of first requests is paced as a broker's handler threads would pace it (every member
//!   fetches the topic's metadata, 2N partitions each). Run until every member is `Stable` and
//!   the assignments are non-empty, disjoint and cover the topic (checked every 100 ms of
//!   virtual time); then a steady window of heartbeats. RSS is read from
//!   `/proc/self/status` before the members are created and once all are stable; it includes the
//!   simulated coordinator's and network's state, not only the members'. CPU is the process's
//!   (`/proc/self/task/*/schedstat`, ns) over the window, divided by the heartbeat
//!   request/answer cycles completed in it (`World::delivered`).
//! - `broker`: N `driver::GroupMember`s, each with its own `TcpTransport` (as documented on
//!   `GroupMember::start`), against the broker at `$KAFKA_BOOTSTRAP`, one topic of N partitions
//!   (one each: the smallest topic that gives every member a non-empty share; a single test
//!   broker pays for every partition in files and index memory). A task per member hands
//!   revocation tickets back at once. Heartbeats are counted by a `metrics` recorder
//!   installed by this bench (`consumer_coordinator.heartbeat_response_time_ms`, one sample per
//!   answered ConsumerGroupHeartbeat); the heartbeat interval is the broker's
//!   (`group.consumer.heartbeat.interval.ms`: 5000 by default, 500 on the test broker of
//!   tests/kafka). Then every member is closed and the close timed. A broker that refuses members
//!   (GROUP_MAX_SIZE_REACHED: `group.consumer.max.size`, 2147483647 by default in Kafka 4.x)
//!   stops them with a fatal error, which is reported.
//!
//! A counting global allocator reports live heap bytes alongside RSS (its atomic add per
//! allocation is included in the CPU figures).

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

// ---------------------------------------------------------------------------- measurement

/// Counts live heap bytes.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged; only a counter is updated besides.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which `System` shares.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation goes through
        // this allocator).
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`; `new_size` is the caller's, as `GlobalAlloc::realloc` requires.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(new_size, Ordering::Relaxed);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn heap() -> u64 {
    LIVE.load(Ordering::Relaxed) as u64
}

/// `VmRSS` and `VmHWM` from `/proc/self/status`, in KiB.
fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU time of the process (user + system) so far, in nanoseconds: the sum over its live
/// threads of `/proc/self/task/*/schedstat` (nanosecond resolution), or, where that is missing,
/// `/proc/self/stat`'s utime + stime (clock ticks, 100 Hz assumed).
fn cpu_ns() -> u64 {
    let mut total = 0u64;
    let mut found = false;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for t in tasks.flatten() {
            let path = t.path().join("schedstat");
            if let Ok(s) = std::fs::read_to_string(path)
                && let Some(ns) = s
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
            {
                total += ns;
                found = true;
            }
        }
    }
    if found {
        return total;
    }
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at field 3.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // utime is field 14, stime 15 (1-based); `rest` starts at field 3.
    (ticks(11) + ticks(12)) * 10_000_000
}

/// Returns the allocator's free memory to the operating system (glibc `malloc_trim`), so that a
/// second RSS reading shows what is live rather than what the allocator kept after a peak.
/// False where there is no such call.
fn trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        unsafe extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: glibc's malloc_trim takes a padding size and only releases free memory.
        unsafe { malloc_trim(0) };
        true
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

fn kib(bytes: u64) -> f64 {
    bytes as f64 / 1024.0
}

/// One JSON line: `{"bench":"scale","mode":...,...}` with numbers and strings.
struct Json(String);

impl Json {
    fn new(mode: &str) -> Self {
        Json(format!("{{\"bench\":\"scale\",\"mode\":\"{mode}\""))
    }
    fn num(&mut self, k: &str, v: f64) -> &mut Self {
        if v.is_finite() {
            let _ = write!(self.0, ",\"{k}\":{}", (v * 1000.0).round() / 1000.0);
        } else {
            let _ = write!(self.0, ",\"{k}\":null");
        }
        self
    }
    fn int(&mut self, k: &str, v: u64) -> &mut Self {
        let _ = write!(self.0, ",\"{k}\":{v}");
        self
    }
    fn str(&mut self, k: &str, v: &str) -> &mut Self {
        let esc: String = v
            .chars()
            .flat_map(|c| match c {
                '"' => vec!['\\', '"'],
                '\\' => vec!['\\', '\\'],
                c if (c as u32) < 0x20 => vec![' '],
                c => vec![c],
            })
            .collect();
        let _ = write!(self.0, ",\"{k}\":\"{esc}\"");
        self
    }
    fn print(&mut self) {
        self.0.push('}');
        println!("{}", self.0);
    }
}

// ---------------------------------------------------------------------------- arguments

#[derive(Debug, Clone)]
struct Opts {
    mode: String,
    members: usize,
    partitions: Option<usize>,
    seed: u64,
    service_us: u64,
    broker_service_us: u64,
    wire: bool,
    window: Duration,
    threads: usize,
    limit: Option<Duration>,
    leak: bool,
}

const USAGE: &str = "usage: cargo bench --bench scale --features sim -- (sim|broker) [N] \
[--partitions P] [--seed S] [--service-us U] [--broker-service-us U] [--no-wire] [--window SECONDS] [--threads T] \
[--limit SECONDS] [--leak]";

fn parse_args() -> Result<Option<Opts>, String> {
    // cargo bench appends `--bench`; cargo test --benches passes nothing.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let Some(mode) = args.first().cloned() else {
        return Ok(None);
    };
    if mode != "sim" && mode != "broker" {
        return Err(format!("unknown mode {mode:?}"));
    }
    let mut o = Opts {
        members: if mode == "sim" { 10_000 } else { 1_000 },
        mode,
        partitions: None,
        seed: 42,
        service_us: 100,
        broker_service_us: 100,
        wire: true,
        window: Duration::ZERO,
        threads: 2,
        limit: None,
        leak: false,
    };
    let mut it = args.into_iter().skip(1).peekable();
    if let Some(n) = it.peek()
        && !n.starts_with("--")
    {
        o.members = n.replace('_', "").parse().map_err(|e| format!("N: {e}"))?;
        it.next();
    }
    while let Some(a) = it.next() {
        let mut val = |name: &str| -> Result<String, String> {
            it.next().ok_or_else(|| format!("{name} needs a value"))
        };
        match a.as_str() {
            "--partitions" => {
                o.partitions = Some(val(&a)?.parse().map_err(|e| format!("{a}: {e}"))?)
            }
            "--seed" => o.seed = val(&a)?.parse().map_err(|e| format!("{a}: {e}"))?,
            "--service-us" => o.service_us = val(&a)?.parse().map_err(|e| format!("{a}: {e}"))?,
            "--broker-service-us" => {
                o.broker_service_us = val(&a)?.parse().map_err(|e| format!("{a}: {e}"))?
            }
            "--no-wire" => o.wire = false,
            "--leak" => o.leak = true,
            "--window" => {
                o.window =
                    Duration::from_secs_f64(val(&a)?.parse().map_err(|e| format!("{a}: {e}"))?)
            }
            "--threads" => o.threads = val(&a)?.parse().map_err(|e| format!("{a}: {e}"))?,
            "--limit" => {
                o.limit = Some(Duration::from_secs_f64(
                    val(&a)?.parse().map_err(|e| format!("{a}: {e}"))?,
                ))
            }
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    if o.members == 0 {
        return Err("N must be at least 1".into());
    }
    Ok(Some(o))
}

fn main() {
    match parse_args() {
        Ok(None) => {
            println!("{USAGE}");
            println!("(nothing run: give a mode)");
        }
        Ok(Some(o)) => {
            let ok = match o.mode.as_str() {
                "sim" => sim::run(&o),
                _ => broker::run(&o),
            };
            if !ok {
                std::process::exit(1);
            }
        }
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            std::process::exit(2);
        }
    }
}

// ---------------------------------------------------------------------------- assignment check

/// Checks that every member owns at least one partition, no partition has two owners, and
/// together they own exactly `0..partitions` of `topic`. `None` when it holds, else what is wrong.
fn check_assignment<'a>(
    owned: impl Iterator<Item = &'a [consumer_membership::machine::TopicPartition]>,
    topic: &str,
    partitions: usize,
) -> Option<String> {
    let mut seen = vec![false; partitions];
    let mut members = 0usize;
    let (mut empty, mut dup, mut foreign) = (0usize, 0usize, 0usize);
    for tps in owned {
        members += 1;
        if tps.is_empty() {
            empty += 1;
        }
        for tp in tps {
            match usize::try_from(tp.partition) {
                Ok(i) if tp.topic() == topic && i < partitions => {
                    if std::mem::replace(&mut seen[i], true) {
                        dup += 1;
                    }
                }
                _ => foreign += 1,
            }
        }
    }
    let missing = seen.iter().filter(|s| !**s).count();
    (empty + dup + foreign + missing > 0).then(|| {
        format!(
            "{members} members: {empty} with no partition, {dup} partitions owned twice, \
             {foreign} unknown partitions, {missing} of {partitions} partitions unowned"
        )
    })
}

// ---------------------------------------------------------------------------- sim

#[cfg(feature = "sim")]
mod sim {
    use std::time::{Duration, Instant};

    use consumer_membership::MemberId;
    use consumer_membership::config::{GroupConfig, GroupProtocol};
    use consumer_membership::machine::consumer::ConsumerMember;
    use consumer_membership::machine::events::MemberState;
    use consumer_membership::machine::member::Member;
    use consumer_membership::sim::world::{MemberSlot, SimConfig, World};
    use kafka_protocol::messages::ApiKey;
    use rand::{RngCore, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::{Json, Opts, check_assignment, cpu_ns, heap, kib, rss_kib};

    const TOPIC: &str = "scale";

    /// A KIP-1082 member id drawn from the seeded RNG (the same ids on every run with a seed).
    fn member_id(rng: &mut ChaCha8Rng) -> MemberId {
        loop {
            let mut b = [0u8; 16];
            rng.fill_bytes(&mut b);
            if let Ok(id) = MemberId::from_bytes(b)
                && !id.as_str().contains('-')
            {
                return id;
            }
        }
    }

    /// `None` once every member is Stable, the coordinator holds exactly them and the
    /// assignment checks out; else why not.
    fn converged(w: &World, handles: &[MemberSlot], partitions: usize) -> Option<String> {
        let unstable = handles
            .iter()
            .filter(|h| w.member(**h).state() != MemberState::Stable)
            .count();
        if unstable > 0 {
            return Some(format!("{unstable} members not Stable"));
        }
        if !w.all_stable() {
            return Some("the coordinator's members differ from the live ones".into());
        }
        let owned: Vec<Vec<_>> = handles.iter().map(|h| w.member(*h).assignment()).collect();
        check_assignment(owned.iter().map(Vec::as_slice), TOPIC, partitions)
    }

    pub fn run(o: &Opts) -> bool {
        let n = o.members;
        let partitions = o.partitions.unwrap_or(2 * n);
        let window = if o.window.is_zero() {
            Duration::from_secs(30)
        } else {
            o.window
        };
        let limit = o.limit.unwrap_or(Duration::from_secs(600));
        let mut config = SimConfig::new(o.seed).with_topic(TOPIC, partitions as i32);
        config.trace = false;
        config.wire_codec = o.wire;
        config.net.service_time = Duration::from_micros(o.service_us);
        // No coordinator moves here: no committed-state copy of the group per operation.
        config.coordinator.keep_log = false;
        let hb_interval = config.coordinator.consumer_heartbeat_interval;
        let session = config.coordinator.consumer_session_timeout;
        println!(
            "scale sim: {n} consumer-protocol members, topic {TOPIC:?} with {partitions} partitions, \
             seed {}, coordinator service time {} us/request, FindCoordinator/Metadata handler time \
             {} us/request, heartbeat interval {hb_interval:?}, session timeout {session:?}, wire \
             codec {}",
            o.seed,
            o.service_us,
            o.broker_service_us,
            if o.wire { "on" } else { "off" }
        );

        let (rss0, _) = rss_kib();
        let heap0 = heap();
        let wall0 = Instant::now();
        let cpu0 = cpu_ns();
        let mut w = World::new(config, std::time::Instant::now());
        w.network_mut()
            .set_broker_service_time(Duration::from_micros(o.broker_service_us));
        let mut rng = ChaCha8Rng::seed_from_u64(o.seed ^ 0x5ca1e);
        let mut handles = Vec::with_capacity(n);
        for i in 0..n {
            let mut c = GroupConfig::new("g");
            c.protocol = GroupProtocol::Consumer;
            c.seed = Some(o.seed.wrapping_mul(1_000_003).wrapping_add(i as u64));
            let m = ConsumerMember::with_member_id(c, member_id(&mut rng), w.now())
                .expect("valid config");
            handles.push(w.add_member(&format!("m{i}"), Box::new(Member::Consumer(m))));
        }
        let (rss_created, _) = rss_kib();
        let heap_created = heap();
        for h in &handles {
            w.subscribe(*h, &[TOPIC]);
        }

        // Converge, checking every 100 ms of virtual time.
        let step = Duration::from_millis(100);
        let mut last_report = Instant::now();
        let mut why = converged(&w, &handles, partitions);
        while why.is_some() && w.elapsed() < limit {
            w.run_for(step);
            why = converged(&w, &handles, partitions);
            if last_report.elapsed() > Duration::from_secs(10) {
                last_report = Instant::now();
                eprintln!(
                    "  ... {:.1}s virtual, {:.1}s wall, {} steps: {}",
                    w.elapsed().as_secs_f64(),
                    wall0.elapsed().as_secs_f64(),
                    w.steps(),
                    why.as_deref().unwrap_or("converged")
                );
            }
        }
        let stable_wall = wall0.elapsed();
        let stable_virtual = w.elapsed();
        let stable_cpu = cpu_ns() - cpu0;
        let stable_steps = w.steps();
        let (rss_stable, hwm_stable) = rss_kib();
        let heap_stable = heap();
        if let Some(why) = &why {
            println!(
                "NOT CONVERGED after {:.1}s virtual ({:.1}s wall): {why}",
                stable_virtual.as_secs_f64(),
                stable_wall.as_secs_f64()
            );
        }
        println!(
            "all stable: {:.2}s virtual, {:.2}s wall, {:.2}s CPU, {stable_steps} steps, \
             {} group epoch",
            stable_virtual.as_secs_f64(),
            stable_wall.as_secs_f64(),
            stable_cpu as f64 / 1e9,
            w.coordinator().generation()
        );

        // Steady state: skip one heartbeat interval, then measure a window.
        w.run_for(hb_interval);
        let hb0 = w.delivered(ApiKey::ConsumerGroupHeartbeat);
        let steps0 = w.steps();
        let cpu_w0 = cpu_ns();
        let wall_w0 = Instant::now();
        w.run_for(window);
        let cpu_window = cpu_ns() - cpu_w0;
        let wall_window = wall_w0.elapsed();
        let cycles = w.delivered(ApiKey::ConsumerGroupHeartbeat) - hb0;
        let window_steps = w.steps() - steps0;
        let (rss_end, hwm_end) = rss_kib();
        let heap_end = heap();
        let rss_trimmed = if super::trim() { rss_kib().0 } else { rss_end };
        let still = converged(&w, &handles, partitions);
        let violations = w.violations().len();
        let anomalies = w.anomalies().len();

        let per = |kib_total: u64, base: u64| kib_total.saturating_sub(base) as f64 / n as f64;
        let rss_per_member = per(rss_stable, rss0);
        let cpu_per_cycle_us = cpu_window as f64 / 1e3 / cycles.max(1) as f64;
        println!(
            "RSS: {rss0} KiB before the members, {rss_created} KiB with them created, \
             {rss_stable} KiB all stable ({rss_per_member:.2} KiB/member), {rss_end} KiB after \
             the window; VmHWM {hwm_end} KiB ({:.2} KiB/member)",
            per(hwm_end, rss0)
        );
        println!(
            "heap (live bytes): {:.0} KiB before, {:.0} KiB created ({:.0} B/member), {:.0} KiB \
             all stable ({:.0} B/member), {:.0} KiB after the window; RSS after malloc_trim \
             {rss_trimmed} KiB ({:.2} KiB/member); size_of::<Member>() = {} B",
            kib(heap0),
            kib(heap_created),
            heap_created.saturating_sub(heap0) as f64 / n as f64,
            kib(heap_stable),
            heap_stable.saturating_sub(heap0) as f64 / n as f64,
            kib(heap_end),
            per(rss_trimmed, rss0),
            std::mem::size_of::<Member>()
        );
        println!(
            "steady window: {:.1}s virtual in {:.2}s wall, {cycles} heartbeat cycles \
             ({:.0}/s virtual), {window_steps} steps, {:.3}s CPU: {cpu_per_cycle_us:.2} us CPU per \
             heartbeat cycle (member + simulated coordinator + network{})",
            window.as_secs_f64(),
            wall_window.as_secs_f64(),
            cycles as f64 / window.as_secs_f64(),
            cpu_window as f64 / 1e9,
            if o.wire { " + wire codec" } else { "" }
        );
        println!(
            "after the window: {}; {violations} invariant violations, {anomalies} anomalies",
            still
                .as_deref()
                .unwrap_or("still stable, assignment disjoint and complete")
        );
        let ok = why.is_none() && still.is_none() && violations == 0;
        let mut j = Json::new("sim");
        j.int("members", n as u64)
            .int("partitions", partitions as u64)
            .int("seed", o.seed)
            .int("service_us", o.service_us)
            .int("broker_service_us", o.broker_service_us)
            .str("wire_codec", if o.wire { "on" } else { "off" })
            .str("result", if ok { "ok" } else { "failed" })
            .num("stable_wall_s", stable_wall.as_secs_f64())
            .num("stable_virtual_s", stable_virtual.as_secs_f64())
            .num("stable_cpu_s", stable_cpu as f64 / 1e9)
            .int("stable_steps", stable_steps)
            .int("rss_before_kib", rss0)
            .int("rss_created_kib", rss_created)
            .int("rss_stable_kib", rss_stable)
            .int("rss_end_kib", rss_end)
            .num("rss_per_member_kib", rss_per_member)
            .int("vmhwm_stable_kib", hwm_stable)
            .int("vmhwm_kib", hwm_end)
            .num("heap_per_member_created_b", {
                heap_created.saturating_sub(heap0) as f64 / n as f64
            })
            .num(
                "heap_per_member_stable_b",
                heap_stable.saturating_sub(heap0) as f64 / n as f64,
            )
            .num(
                "heap_per_member_end_b",
                heap_end.saturating_sub(heap0) as f64 / n as f64,
            )
            .int("rss_trimmed_kib", rss_trimmed)
            .num("rss_per_member_trimmed_kib", per(rss_trimmed, rss0))
            .num("window_virtual_s", window.as_secs_f64())
            .num("window_wall_s", wall_window.as_secs_f64())
            .int("heartbeat_cycles", cycles)
            .num("cpu_window_s", cpu_window as f64 / 1e9)
            .num("cpu_per_heartbeat_us", cpu_per_cycle_us)
            .int("violations", violations as u64)
            .print();
        if o.leak {
            std::mem::forget(w);
            std::mem::forget(handles);
        }
        ok
    }
}

#[cfg(not(feature = "sim"))]
mod sim {
    pub fn run(_: &super::Opts) -> bool {
        eprintln!("the sim mode needs `--features sim`");
        false
    }
}

// ---------------------------------------------------------------------------- broker

mod broker {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use consumer_membership::ClientConfig;
    use consumer_membership::config::{GroupConfig, GroupProtocol};
    use consumer_membership::driver::{GroupMember, MemberHandle};
    use consumer_membership::machine::events::{CloseOptions, Event, MemberState};
    use consumer_membership::metrics::HEARTBEAT_RESPONSE_TIME_MS;
    use consumer_membership::request::{Request, Response, ResponseBody, Target};
    use consumer_membership::transport::{TcpTransport, Transport};
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::{CreateTopicsRequest, RequestKind, ResponseKind, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit};

    use super::{Json, Opts, check_assignment, cpu_ns, heap, kib, rss_kib};

    static HEARTBEATS: AtomicU64 = AtomicU64::new(0);

    /// One sample per answered heartbeat (errors included, as the crate's metric is).
    struct HeartbeatCount;
    impl metrics::HistogramFn for HeartbeatCount {
        fn record(&self, _: f64) {
            HEARTBEATS.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A `metrics` recorder that only counts heartbeat answers.
    struct Recorder(Arc<HeartbeatCount>);
    impl metrics::Recorder for Recorder {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
            Counter::noop()
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            if key.name() == HEARTBEAT_RESPONSE_TIME_MS {
                Histogram::from_arc(self.0.clone())
            } else {
                Histogram::noop()
            }
        }
    }

    /// Creates `topic` (replication factor -1: the broker default), as tests/common does.
    async fn create_topic<T: Transport>(t: &T, topic: &str, partitions: i32) -> Result<(), String> {
        let body = CreateTopicsRequest::default()
            .with_topics(vec![
                CreatableTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.into())))
                    .with_num_partitions(partitions)
                    .with_replication_factor(-1),
            ])
            .with_timeout_ms(60_000);
        let r: Response = t
            .send(
                Target::Bootstrap,
                Request::Raw {
                    body: Box::new(RequestKind::CreateTopics(body)),
                    versions: 5..=7,
                    fit: None,
                },
                Duration::from_secs(90),
            )
            .await
            .map_err(|e| format!("CreateTopics: {e}"))?;
        let ResponseBody::Kafka(ResponseKind::CreateTopics(r)) = r.body else {
            return Err("not a CreateTopics answer".into());
        };
        match r.topics.first() {
            Some(t) if t.error_code == 0 => Ok(()),
            Some(t) => Err(format!(
                "CreateTopics {topic}: error {} {:?}",
                t.error_code, t.error_message
            )),
            None => Err("CreateTopics: no topic in the answer".into()),
        }
    }

    /// What the event task of one member saw.
    #[derive(Debug, Default)]
    struct Seen {
        fatal: Option<String>,
        revocations: u64,
        lost: u64,
    }

    pub fn run(o: &Opts) -> bool {
        let Some(bootstrap) = std::env::var("KAFKA_BOOTSTRAP")
            .ok()
            .filter(|b| !b.trim().is_empty())
        else {
            eprintln!(
                "the broker mode needs KAFKA_BOOTSTRAP (tests/kafka/broker.sh start --dir target/kafka-scale prints it)"
            );
            return false;
        };
        let mut rt = if o.threads <= 1 {
            tokio::runtime::Builder::new_current_thread()
        } else {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(o.threads);
            b
        };
        let rt = rt.enable_all().build().expect("tokio runtime");
        let recorder = Recorder(Arc::new(HeartbeatCount));
        if metrics::set_global_recorder(recorder).is_err() {
            eprintln!("a metrics recorder is already installed");
            return false;
        }
        rt.block_on(run_async(o, bootstrap))
    }

    async fn run_async(o: &Opts, bootstrap: String) -> bool {
        let n = o.members;
        let partitions = o.partitions.unwrap_or(n);
        let limit = o.limit.unwrap_or(Duration::from_secs(600));
        let suffix = consumer_membership::MemberId::generate().to_string();
        let topic = format!("scale-{suffix}");
        let group = format!("scale-{suffix}");
        let mut client = match ClientConfig::new(&bootstrap) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("bootstrap {bootstrap:?}: {e}");
                return false;
            }
        };
        client.client_id = "scale-bench".into();
        println!(
            "scale broker: {n} consumer-protocol members at {bootstrap}, topic {topic} with \
             {partitions} partitions, group {group}, runtime {}",
            if o.threads <= 1 {
                "current-thread".to_string()
            } else {
                format!("multi-thread ({} workers)", o.threads)
            }
        );
        let admin = TcpTransport::new(client.clone());
        let t = Instant::now();
        if let Err(e) = create_topic(&admin, &topic, partitions as i32).await {
            eprintln!("{e}");
            return false;
        }
        admin.close_all();
        drop(admin);
        println!("topic created in {:.2}s", t.elapsed().as_secs_f64());

        let (rss0, _) = rss_kib();
        let heap0 = heap();
        let wall0 = Instant::now();
        let cpu0 = cpu_ns();
        let mut handles: Vec<MemberHandle> = Vec::with_capacity(n);
        let mut seen: Vec<Arc<Mutex<Seen>>> = Vec::with_capacity(n);
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..n {
            let transport = Arc::new(TcpTransport::new(client.clone()));
            let mut c = GroupConfig::new(group.clone());
            c.protocol = GroupProtocol::Consumer;
            let mut member = match GroupMember::start(transport, c) {
                Ok(m) => m,
                Err(e) => {
                    eprintln!("GroupMember::start: {e}");
                    return false;
                }
            };
            let s = Arc::new(Mutex::new(Seen::default()));
            handles.push(member.handle());
            seen.push(s.clone());
            // The application: hands revocation tickets back at once, records what went wrong.
            tasks.spawn(async move {
                while let Some(e) = member.next_event().await {
                    match e {
                        Event::Revoking { ticket, .. } => {
                            s.lock().expect("lock").revocations += 1;
                            let _ = member.complete_revocation(ticket).await;
                        }
                        Event::Lost { .. } => s.lock().expect("lock").lost += 1,
                        Event::Fatal(e) => s.lock().expect("lock").fatal = Some(e.to_string()),
                        Event::Closed => break,
                        _ => {}
                    }
                }
            });
        }
        for h in &handles {
            if let Err(e) = h.subscribe([topic.clone()]).await {
                eprintln!("subscribe: {e}");
                return false;
            }
        }
        let (rss_created, _) = rss_kib();
        let heap_created = heap();

        // Converge: snapshots of every member five times a second.
        let mut last_report = Instant::now();
        let mut why: Option<String>;
        let mut fatal: Option<String>;
        loop {
            let (w, f) = converged(&handles, &seen, &topic, partitions).await;
            why = w;
            fatal = f;
            if why.is_none() || fatal.is_some() || wall0.elapsed() > limit {
                break;
            }
            if last_report.elapsed() > Duration::from_secs(10) {
                last_report = Instant::now();
                eprintln!(
                    "  ... {:.1}s: {}",
                    wall0.elapsed().as_secs_f64(),
                    why.as_deref().unwrap_or("converged")
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let stable_wall = wall0.elapsed();
        let stable_cpu = cpu_ns() - cpu0;
        let (rss_stable, hwm_stable) = rss_kib();
        let heap_stable = heap();
        if let Some(f) = &fatal {
            println!("a member stopped: {f}");
            if f.contains("MAX_SIZE") {
                println!(
                    "the broker refuses more members: group.consumer.max.size (default \
                     2147483647) is below {n}"
                );
            }
        }
        if let Some(w) = &why {
            println!("NOT CONVERGED after {:.1}s: {w}", stable_wall.as_secs_f64());
        } else {
            println!(
                "all stable: {:.2}s wall, {:.2}s CPU",
                stable_wall.as_secs_f64(),
                stable_cpu as f64 / 1e9
            );
        }
        let revocations: u64 = seen
            .iter()
            .map(|s| s.lock().expect("lock").revocations)
            .sum();
        let lost: u64 = seen.iter().map(|s| s.lock().expect("lock").lost).sum();

        // Steady state (only when converged): one second to settle, then the window.
        let window = if o.window.is_zero() {
            Duration::from_secs(20)
        } else {
            o.window
        };
        let (mut cycles, mut cpu_window, mut still) = (0, 0, None);
        if why.is_none() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let hb0 = HEARTBEATS.load(Ordering::Relaxed);
            let c0 = cpu_ns();
            tokio::time::sleep(window).await;
            cpu_window = cpu_ns() - c0;
            cycles = HEARTBEATS.load(Ordering::Relaxed) - hb0;
            still = converged(&handles, &seen, &topic, partitions).await.0;
        }
        let (rss_end, hwm_end) = rss_kib();
        let heap_end = heap();
        if o.leak {
            // For a heap profiler: everything the members hold is still allocated at exit.
            println!(
                "--leak: exiting without closing ({} KiB RSS, {:.0} KiB heap)",
                rss_end,
                kib(heap_end)
            );
            std::process::exit(0);
        }

        // Close every member at once (a dynamic member leaves with epoch -1).
        let close0 = Instant::now();
        let mut closes = tokio::task::JoinSet::new();
        for h in handles.drain(..) {
            closes.spawn(async move { h.close(CloseOptions::Default).await });
        }
        while closes.join_next().await.is_some() {}
        let close_time = close0.elapsed();
        while tasks.join_next().await.is_some() {}
        let rss_closed = rss_kib().0;
        let heap_closed = heap();

        let per = |k: u64| k.saturating_sub(rss0) as f64 / n as f64;
        let cpu_per_cycle_us = cpu_window as f64 / 1e3 / cycles.max(1) as f64;
        println!(
            "RSS: {rss0} KiB before the members, {rss_created} KiB with them subscribed, \
             {rss_stable} KiB all stable ({:.2} KiB/member), {rss_end} KiB after the window; \
             VmHWM {hwm_end} KiB ({:.2} KiB/member)",
            per(rss_stable),
            per(hwm_end)
        );
        println!(
            "heap (live bytes): {:.0} KiB before, {:.0} KiB subscribed, {:.0} KiB all stable \
             ({:.0} B/member), {:.0} KiB after the window ({:.0} B/member), {:.0} KiB after the \
             close; RSS after the close {rss_closed} KiB",
            kib(heap0),
            kib(heap_created),
            kib(heap_stable),
            heap_stable.saturating_sub(heap0) as f64 / n as f64,
            kib(heap_end),
            heap_end.saturating_sub(heap0) as f64 / n as f64,
            kib(heap_closed)
        );
        println!(
            "steady window: {:.1}s, {cycles} heartbeats answered ({:.0}/s), {:.3}s CPU: \
             {cpu_per_cycle_us:.2} us CPU per heartbeat cycle; {}",
            window.as_secs_f64(),
            cycles as f64 / window.as_secs_f64(),
            cpu_window as f64 / 1e9,
            still
                .as_deref()
                .unwrap_or("still stable, assignment disjoint and complete")
        );
        println!(
            "revocations handed back while joining: {revocations}, partitions lost: {lost}; \
             close of all {n} members: {:.2}s",
            close_time.as_secs_f64()
        );
        let ok = why.is_none() && fatal.is_none() && still.is_none();
        let mut j = Json::new("broker");
        j.int("members", n as u64)
            .int("partitions", partitions as u64)
            .int("threads", o.threads as u64)
            .str("result", if ok { "ok" } else { "failed" })
            .str("error", fatal.as_deref().or(why.as_deref()).unwrap_or(""))
            .num("stable_wall_s", stable_wall.as_secs_f64())
            .num("stable_cpu_s", stable_cpu as f64 / 1e9)
            .int("rss_before_kib", rss0)
            .int("rss_created_kib", rss_created)
            .int("rss_stable_kib", rss_stable)
            .int("rss_end_kib", rss_end)
            .num("rss_per_member_kib", per(rss_stable))
            .int("vmhwm_stable_kib", hwm_stable)
            .int("vmhwm_kib", hwm_end)
            .num(
                "heap_per_member_stable_b",
                heap_stable.saturating_sub(heap0) as f64 / n as f64,
            )
            .num(
                "heap_per_member_end_b",
                heap_end.saturating_sub(heap0) as f64 / n as f64,
            )
            .int("rss_closed_kib", rss_closed)
            .num("window_s", window.as_secs_f64())
            .int("heartbeat_cycles", cycles)
            .num("cpu_window_s", cpu_window as f64 / 1e9)
            .num("cpu_per_heartbeat_us", cpu_per_cycle_us)
            .int("revocations", revocations)
            .int("lost", lost)
            .num("close_s", close_time.as_secs_f64())
            .print();
        ok
    }

    /// `(None, None)` once every member is Stable with a non-empty share and the shares are
    /// disjoint and complete; else why not, and the first fatal error.
    async fn converged(
        handles: &[MemberHandle],
        seen: &[Arc<Mutex<Seen>>],
        topic: &str,
        partitions: usize,
    ) -> (Option<String>, Option<String>) {
        let fatal = seen
            .iter()
            .find_map(|s| s.lock().expect("lock").fatal.clone());
        let mut owned = Vec::with_capacity(handles.len());
        let mut unstable = 0usize;
        let mut states = std::collections::BTreeMap::<&'static str, usize>::new();
        for h in handles {
            match h.snapshot().await {
                Some(s) => {
                    if s.state != MemberState::Stable {
                        unstable += 1;
                    }
                    *states.entry(s.state.as_str()).or_default() += 1;
                    owned.push(s.assignment);
                }
                None => {
                    unstable += 1;
                    *states.entry("gone").or_default() += 1;
                    owned.push(Vec::new());
                }
            }
        }
        if unstable > 0 {
            return (
                Some(format!("{unstable} members not Stable: {states:?}")),
                fatal,
            );
        }
        (
            check_assignment(owned.iter().map(Vec::as_slice), topic, partitions),
            fatal,
        )
    }
}
