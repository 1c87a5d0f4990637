//! The JVM plumbing the Java peers share ([`super::java_peer`], [`super::streams_peer`],
//! [`super::share_peer`]): which `java` and `javac` run, the jars `tests/kafka/peer.sh`
//! fetches, a peer's own `tests/kafka/<Class>.java` compiled once per test process, the JVM
//! flags, and a child JVM ([`Jvm`]) whose stdout lines a thread of its own reads and whose
//! stderr goes to a log file.
//!
//! `java` is `JAVA`, else `JAVA_HOME/bin/java`, else `java` from the PATH; `javac` is the one
//! beside it (a JDK 17 or later). With util-linux `setpriv` installed, a child JVM gets SIGKILL
//! when the thread that spawned it exits, so a test binary that dies (or is killed) leaves no
//! JVM behind; setpriv execs java, so the child's pid is the JVM's.

use std::collections::hash_map::DefaultHasher;
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the waits below look at the child.
pub const POLL: Duration = Duration::from_millis(50);

/// This crate's directory (tests/kafka holds the peers' sources and scripts).
fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `java` the peers run: `JAVA`, else `JAVA_HOME/bin/java`, else `java` from the PATH.
pub fn java() -> PathBuf {
    let set = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    match (set("JAVA"), set("JAVA_HOME")) {
        (Some(java), _) => PathBuf::from(java),
        (None, Some(home)) => PathBuf::from(home).join("bin").join("java"),
        (None, None) => PathBuf::from("java"),
    }
}

/// The `javac` beside [`java`]: `javac` from the PATH when `java` is taken from it.
pub fn javac() -> PathBuf {
    let java = java();
    if java.parent().is_some_and(|dir| !dir.as_os_str().is_empty()) {
        java.with_file_name("javac")
    } else {
        PathBuf::from("javac")
    }
}

/// util-linux `setpriv`, if installed.
fn setpriv() -> Option<&'static Path> {
    static SETPRIV: OnceLock<Option<PathBuf>> = OnceLock::new();
    SETPRIV
        .get_or_init(|| {
            ["/usr/bin/setpriv", "/bin/setpriv"]
                .into_iter()
                .map(PathBuf::from)
                .find(|p| p.is_file())
        })
        .as_deref()
}

/// `KAFKA_VERSION` (tests/kafka/with-broker.sh exports the broker's release), trimmed, if set
/// and not empty.
pub fn kafka_version() -> Option<String> {
    (std::env::var("KAFKA_VERSION").ok())
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// Runs `tests/kafka/peer.sh <command> [--version <version>]` (`libs`: kafka-tools and
/// kafka-clients; `streams-libs`: kafka-streams; without a version peer.sh takes
/// `KAFKA_VERSION`, else its default) and returns the jar directory it prints last. Its
/// progress goes to our stderr.
pub fn peer_libs(command: &str, version: Option<&str>) -> Result<PathBuf, String> {
    let script = repo().join("tests/kafka/peer.sh");
    let mut cmd = Command::new(&script);
    cmd.arg(command);
    if let Some(version) = version {
        cmd.args(["--version", version]);
    }
    let out = (cmd.stdin(Stdio::null()).output())
        .map_err(|e| format!("run {}: {e}", script.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "{} {command} failed ({}):\n{stderr}",
            script.display(),
            out.status
        ));
    }
    eprint!("{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = (stdout.lines().last())
        .ok_or_else(|| format!("peer.sh {command} printed no directory; stderr:\n{stderr}"))?;
    Ok(PathBuf::from(dir.trim()))
}

/// `target/<name>` of this crate, created: the peers' classes, logs and configs.
pub fn target_dir(name: &str) -> Result<PathBuf, String> {
    let dir = repo().join("target").join(name);
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Writes `text` to `path` unless it holds it already, through a file of this process renamed
/// into place: a JVM of another test binary never reads half of it.
pub fn write_config(path: &Path, text: &str) -> Result<(), String> {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
    std::fs::write(&tmp, text).map_err(|e| format!("write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("rename to {}: {e}", path.display()))
}

/// Compiles `tests/kafka/<class>.java` against `classpath` into
/// `dir/classes-<hash of the source and the classpath>` unless there, and returns that
/// directory. javac writes a staging directory of this process's own, renamed into place, so
/// that test binaries running at once never load half a compilation.
pub fn compile(class: &str, classpath: &str, dir: &Path) -> Result<PathBuf, String> {
    let source = repo().join(format!("tests/kafka/{class}.java"));
    let text = std::fs::read(&source).map_err(|e| format!("read {}: {e}", source.display()))?;
    let mut hasher = DefaultHasher::new();
    (&text, classpath).hash(&mut hasher);
    let classes = dir.join(format!("classes-{:016x}", hasher.finish()));
    let class_file = classes.join(format!("{class}.class"));
    if !class_file.is_file() {
        let javac = javac();
        let staging = dir.join(format!("staging-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&staging);
        let out = Command::new(&javac)
            .arg("-d")
            .arg(&staging)
            .args(["-cp", classpath])
            .arg(&source)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run {} (a JDK 17+): {e}", javac.display()))?;
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(format!(
                "javac {} failed:\n{}",
                source.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        // Losing the race to another test binary is fine: its classes are the same.
        if std::fs::rename(&staging, &classes).is_err() {
            let _ = std::fs::remove_dir_all(&staging);
        }
    }
    if class_file.is_file() {
        Ok(classes)
    } else {
        Err(format!("no {} after javac", class_file.display()))
    }
}

/// The log4j2 configuration of the consumer peers (Java's VerifiableConsumer, SharePeer):
/// everything to stderr (the default configuration would print errors on stdout, among the
/// JSON lines), the consumer's group-membership internals at INFO.
pub const LOG4J2: &str = "\
status = warn
shutdownHook = disable
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
logger.internals.name = org.apache.kafka.clients.consumer.internals
logger.internals.level = INFO
";

/// `-Dlog4j2.configurationFile=<path>`: the logging configuration of a 4.x peer.
pub fn log4j2_flag(path: &Path) -> String {
    format!("-Dlog4j2.configurationFile={}", path.display())
}

/// The JVM's arguments up to the program's own: a small heap, quick start, the logging
/// configuration flag `log_config`, `-cp classpath` and the main class.
pub fn jvm_args(log_config: String, classpath: String, main: &str) -> Vec<String> {
    vec![
        "-Xmx256m".into(),
        "-XX:+UseSerialGC".into(),
        "-XX:TieredStopAtLevel=1".into(),
        "-XX:-UsePerfData".into(),
        "-Djava.awt.headless=true".into(),
        log_config,
        "-cp".into(),
        classpath,
        main.into(),
    ]
}

/// Polls `check` every [`POLL`] (tokio sleeps) until it answers `Some`, for at most `timeout`
/// (None after it). A peer's waits: `Some(true)` when its condition holds, `Some(false)` when
/// it cannot any more (the JVM exited).
pub async fn wait_until<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(answer) = check() {
            return Some(answer);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `s` with every character but ASCII letters, digits, `-`, `_` and `.` replaced by `_`: a
/// file name.
pub fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The last `n` lines of `path` (at most its last 64 KiB), each cut at 400 characters, as
/// `    | line` lines for a report.
pub fn tail(path: &Path, n: usize) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| match l.char_indices().nth(400) {
            Some((cut, _)) => format!("    | {} [...]\n", &l[..cut]),
            None => format!("    | {l}\n"),
        })
        .collect()
}

/// The stdout of a child JVM as its reader thread gets it: every non-empty line, trimmed, with
/// the time since the spawn at which it was read. Ends at EOF (or a read error): the JVM
/// exited, or is about to.
pub struct Lines {
    lines: std::io::Lines<BufReader<ChildStdout>>,
    spawned: Instant,
}

impl Iterator for Lines {
    type Item = (Duration, String);

    fn next(&mut self) -> Option<(Duration, String)> {
        loop {
            let line = self.lines.next()?.ok()?;
            let line = line.trim();
            if !line.is_empty() {
                return Some((self.spawned.elapsed(), line.to_owned()));
            }
        }
    }
}

/// A child JVM: SIGKILLed (and reaped, and its reader thread joined) on drop unless it exited.
pub struct Jvm {
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    pid: u32,
    spawned: Instant,
    reader: Option<JoinHandle<()>>,
    stderr_path: PathBuf,
}

impl Jvm {
    /// Starts `java args` (through `setpriv --pdeathsig KILL` when installed) with its stderr
    /// in `stderr_path` (created), stdin a pipe ([`Jvm::close`]) if `stdin` else null, and its
    /// stdout read by `read(lines, &state)` on a thread named `thread`. Returns the JVM and
    /// that state (`S::default()` to begin with). Panics if it cannot (`what` names the
    /// program in the message).
    pub fn spawn<S: Default + Send + 'static>(
        what: &str,
        args: &[String],
        stdin: bool,
        stderr_path: PathBuf,
        thread: String,
        read: fn(Lines, &Mutex<S>),
    ) -> (Jvm, Arc<Mutex<S>>) {
        let stderr = File::create(&stderr_path)
            .unwrap_or_else(|e| panic!("create {}: {e}", stderr_path.display()));
        let java = java();
        let mut cmd = match setpriv() {
            Some(setpriv) => {
                let mut c = Command::new(setpriv);
                c.args(["--pdeathsig", "KILL", "--"]).arg(&java);
                c
            }
            None => Command::new(&java),
        };
        cmd.args(args)
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(stderr);
        let spawned = Instant::now();
        let mut child =
            (cmd.spawn()).unwrap_or_else(|e| panic!("spawn {} ({what}): {e}", java.display()));
        let pid = child.id();
        let stdin = child.stdin.take();
        let lines = Lines {
            lines: BufReader::new(child.stdout.take().expect("piped stdout")).lines(),
            spawned,
        };
        let state = Arc::new(Mutex::new(S::default()));
        let reader = {
            let state = Arc::clone(&state);
            (std::thread::Builder::new().name(thread))
                .spawn(move || read(lines, &state))
                .expect("spawn the reader thread")
        };
        let jvm = Jvm {
            child: Some(child),
            stdin,
            pid,
            spawned,
            reader: Some(reader),
            stderr_path,
        };
        (jvm, state)
    }

    /// The JVM's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The file that receives the JVM's stderr and log output.
    pub fn stderr_path(&self) -> &Path {
        &self.stderr_path
    }

    /// When the JVM was spawned: [`Lines`] counts from here.
    pub fn spawned_at(&self) -> Instant {
        self.spawned
    }

    /// `  stderr: <file> (last lines below)` and its last 30 lines ([`tail`]): the end of a
    /// peer's report.
    pub fn stderr_report(&self) -> String {
        format!(
            "  stderr: {} (last lines below)\n{}",
            self.stderr_path.display(),
            tail(&self.stderr_path, 30)
        )
    }

    /// Graceful stop of a peer that closes when its stdin does: closes stdin, waits (tokio
    /// sleeps) for the exit at most `grace`, then [`Jvm::finish`].
    pub async fn close(&mut self, grace: Duration) {
        drop(self.stdin.take());
        self.wait_exit(grace).await;
        self.finish();
    }

    /// Graceful stop of a peer that closes on SIGTERM: SIGTERM, waits (tokio sleeps) for the
    /// exit at most `grace`, then [`Jvm::finish`].
    pub async fn stop(&mut self, grace: Duration) {
        self.terminate();
        self.wait_exit(grace).await;
        self.finish();
    }

    /// [`Jvm::stop`] blocking the calling thread.
    pub fn stop_blocking(&mut self, grace: Duration) {
        self.terminate();
        let deadline = Instant::now() + grace;
        while !self.exited() && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
        self.finish();
    }

    /// SIGTERM (through `kill` from procps/util-linux/bash: std has no SIGTERM and libc is no
    /// dependency).
    fn terminate(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// True once the JVM has exited (or was reaped already).
    fn exited(&mut self) -> bool {
        (self.child.as_mut()).is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// Waits (tokio sleeps) until the JVM exits, at most `grace`; whether it did.
    pub async fn wait_exit(&mut self, grace: Duration) -> bool {
        wait_until(grace, || self.exited().then_some(()))
            .await
            .is_some()
    }

    /// SIGKILL unless exited, reap, and join the reader thread (it has seen EOF). The exit
    /// status the first time; None after.
    pub fn finish(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        if !matches!(child.try_wait(), Ok(Some(_))) {
            let _ = child.kill();
        }
        let status = child.wait().ok();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        status
    }
}

impl Drop for Jvm {
    fn drop(&mut self) {
        self.finish();
    }
}
