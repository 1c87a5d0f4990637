//! The core under src/core/ must stay sans-IO: no async runtime, no sockets, no clock reads and no
//! global random source. This test fails the build when a line of code there names one.

use std::path::Path;

const FORBIDDEN: &[&str] = &[
    "tokio",
    "std::net",
    "Instant::now",
    "SystemTime::now",
    "thread_rng",
    "rand::random",
    "rand::rng(",
    "OsRng",
    "getrandom",
    "std::thread",
    "std::fs",
    "backon",
];

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/core exists") {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn core_has_no_runtime_socket_clock_or_global_rng() {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core"),
        &mut files,
    );
    assert!(
        files.len() >= 5,
        "expected the core's files, found {files:?}"
    );
    let mut hits = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for word in FORBIDDEN {
                if code.contains(word) {
                    hits.push(format!("{}:{}: {word}: {line}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(
        hits.is_empty(),
        "src/core must stay sans-IO:\n{}",
        hits.join("\n")
    );
}

#[test]
fn the_check_catches_a_violation() {
    // The scanner itself: a line that reads the clock is found, a comment is not.
    let bad = "    let now = std::time::Instant::now();";
    let comment = "    // Instant::now is for the driver";
    let flagged =
        |l: &str| !l.trim_start().starts_with("//") && FORBIDDEN.iter().any(|w| l.contains(w));
    assert!(flagged(bad));
    assert!(!flagged(comment));
}
