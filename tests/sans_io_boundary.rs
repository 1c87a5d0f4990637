//! The core under src/core/ must stay sans-IO: no async runtime, no sockets, no clock reads and no
//! random source of its own (randomness comes in through its inputs: `GroupConfig::seed` and
//! `GroupConfig::member_id`). This test fails the build when a line of code there names one,
//! including calls that reach the operating system's RNG through another module
//! (`MemberId::generate`, `Uuid::new_v4`).

use std::path::{Path, PathBuf};

const FORBIDDEN: &[&str] = &[
    "tokio",
    "std::net",
    "Instant::now",
    "SystemTime::now",
    // Random sources: the global and thread-local RNGs, the OS RNG, and helpers built on them.
    "thread_rng",
    "ThreadRng",
    "rand::random",
    "rand::rng(",
    "OsRng",
    "getrandom",
    "from_os_rng",
    "from_entropy",
    "new_v4",
    "MemberId::generate",
    "std::thread",
    "std::fs",
    "backon",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Scans every `.rs` file under `dir`: the files read, and one line per forbidden word found in
/// a line of code (lines that are comments are skipped).
fn scan(dir: &Path) -> (Vec<PathBuf>, Vec<String>) {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    files.sort();
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
    (files, hits)
}

#[test]
fn core_has_no_runtime_socket_clock_or_rng_of_its_own() {
    let (files, hits) = scan(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core"));
    assert!(
        files.len() >= 5,
        "expected the core's files, found {files:?}"
    );
    assert!(
        hits.is_empty(),
        "src/core must stay sans-IO:\n{}",
        hits.join("\n")
    );
}

#[test]
fn the_check_catches_a_violation() {
    // The scanner itself, on a tree of its own: a nested file whose code names each forbidden
    // word is flagged once per word, comments are not, and files that are not Rust are not read.
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sans_io_boundary_self_test");
    let _ = std::fs::remove_dir_all(&root);
    let nested = root.join("consumer");
    std::fs::create_dir_all(&nested).unwrap();
    let bad: String = FORBIDDEN
        .iter()
        .map(|w| format!("    let _ = {w};\n"))
        .collect();
    std::fs::write(nested.join("member.rs"), &bad).unwrap();
    std::fs::write(
        root.join("comments.rs"),
        "    // Instant::now is for the driver\n\
         //! MemberId::generate and OsRng live outside the core\n\
         \t/// thread_rng: never here\n\
         let id = MemberId::from_seed(seed);\n",
    )
    .unwrap();
    std::fs::write(root.join("notes.txt"), &bad).unwrap();

    let (files, hits) = scan(&root);
    assert_eq!(files.len(), 2, "{files:?}");
    let member = nested.join("member.rs").display().to_string();
    for (n, word) in FORBIDDEN.iter().enumerate() {
        let want = format!("{member}:{}: {word}: ", n + 1);
        assert!(
            hits.iter().any(|h| h.starts_with(&want)),
            "{word:?} is not caught: {hits:#?}"
        );
    }
    // The OS RNG reached through the member id module, as the consumer member once did.
    assert!(
        hits.iter()
            .any(|h| h.contains(": MemberId::generate: ")
                && h.contains("let _ = MemberId::generate;"))
    );
    assert!(
        hits.iter().all(|h| h.starts_with(&member)),
        "comments or non-Rust files were flagged: {hits:#?}"
    );
    let _ = std::fs::remove_dir_all(&root);
}
