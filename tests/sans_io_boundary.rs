//! The core under src/machine/ must stay sans-IO: no async runtime, no sockets, no clock reads and no
//! random source of its own (randomness comes in through its inputs: `GroupConfig::seed` and
//! `GroupConfig::member_id`). This test fails the build when a line of code the core can reach
//! names one: every file under src/machine/, and every module of the crate that those files name in
//! a `crate::` path, and so on (today src/request.rs, src/backoff.rs, src/error.rs,
//! src/config.rs, src/member_id.rs and the test helpers in src/lib.rs). That includes calls that
//! reach the operating system's RNG through another module (`MemberId::generate`,
//! `Uuid::new_v4`). A function there that must name a forbidden word is allowed it by name in
//! [`ALLOWED`], and only that word.

use std::collections::BTreeSet;
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
    // The same, called from inside src/member_id.rs.
    "Self::generate",
    "std::thread",
    "std::fs",
    "backon",
];

/// A function of a reached file that may name one forbidden word: (file under src/, function,
/// word). Only that function's lines are exempt, and only from that word; an allowance whose
/// function does not name its word (or does not exist) is itself reported.
type Allowance = (&'static str, &'static str, &'static str);

const ALLOWED: &[Allowance] = &[
    // The OS CSPRNG draw of a member id, made by the driver (the core derives ids from seeds).
    ("member_id.rs", "generate", "new_v4"),
    // Its unit test.
    (
        "member_id.rs",
        "one_million_generated_ids_are_well_formed_and_unique",
        "MemberId::generate",
    ),
    // `#[cfg(test)]`: the base instant of the core's unit tests, which may not read the clock.
    ("lib.rs", "epoch", "Instant::now"),
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

/// The lines of code of `text` (comments and `#[cfg(...)]` gates, which name cargo features such
/// as `tokio` but no code, are skipped), numbered from 0.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().filter(|(_, line)| {
        let line = line.trim();
        let cfg_gate = line.starts_with("#[cfg(") && line.ends_with(")]");
        !line.starts_with("//") && !cfg_gate
    })
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The crate's top-level names that the `crate::` paths in `code` start with (every name of a
/// `crate::{a::X, b}` group).
fn crate_paths(code: &str) -> Vec<&str> {
    let mut names = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if code[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[at + "crate::".len()..];
        let Some(mut group) = rest.strip_prefix('{') else {
            names.extend(Some(ident(rest)).filter(|n| !n.is_empty()));
            continue;
        };
        let (mut depth, mut item_start) = (0, true);
        while let Some(c) = group.chars().next() {
            if item_start && (c.is_ascii_alphanumeric() || c == '_') {
                let name = ident(group);
                names.push(name);
                group = &group[name.len()..];
                item_start = false;
                continue;
            }
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => item_start = true,
                _ => {}
            }
            group = &group[c.len_utf8()..];
        }
    }
    names
}

/// The files of the boundary: every `.rs` file under `src/machine`, then each module that one of
/// them names in a `crate::` path (`crate::backoff` is `src/backoff.rs` or `src/backoff/`; a
/// name with neither, such as the test helpers `crate::testutil`, is defined in `src/lib.rs`),
/// and so on.
fn reached(src: &Path) -> Vec<PathBuf> {
    let mut files = BTreeSet::new();
    let mut visited = BTreeSet::new();
    let mut todo = vec![src.join("machine")];
    while let Some(module) = todo.pop() {
        if !visited.insert(module.clone()) {
            continue;
        }
        let mut found = Vec::new();
        if module.is_dir() {
            rust_files(&module, &mut found);
        } else {
            found.push(module);
        }
        for file in found {
            let text = std::fs::read_to_string(&file).unwrap();
            let code: String = code_lines(&text).map(|(_, l)| format!("{l}\n")).collect();
            for name in crate_paths(&code) {
                let (as_file, as_dir) = (src.join(format!("{name}.rs")), src.join(name));
                todo.push(if as_file.is_file() {
                    as_file
                } else if as_dir.is_dir() {
                    as_dir
                } else {
                    src.join("lib.rs")
                });
            }
            files.insert(file);
        }
    }
    files.into_iter().collect()
}

/// The lines (numbered from 0, inclusive) of the function `name` in `text`: from its `fn` line to
/// the closing brace at that line's indentation (rustfmt's layout).
fn function_lines(text: &str, name: &str) -> Option<(usize, usize)> {
    let heads = [format!("fn {name}("), format!("fn {name}<")];
    let (start, head) = code_lines(text).find(|(_, l)| heads.iter().any(|h| l.contains(h)))?;
    if head.trim_end().ends_with('}') {
        return Some((start, start));
    }
    let close = format!("{}}}", &head[..head.len() - head.trim_start().len()]);
    let end = text
        .lines()
        .enumerate()
        .skip(start)
        .find(|(_, l)| l.trim_end() == close)?
        .0;
    Some((start, end))
}

/// Scans the files the core reaches from `src/machine` ([`reached`]): the files read, and one line
/// per forbidden word found in a line of code, except where `allowed` allows it, plus one per
/// allowance that allowed nothing.
fn scan(src: &Path, allowed: &[Allowance]) -> (Vec<PathBuf>, Vec<String>) {
    let files = reached(src);
    let mut hits = Vec::new();
    let mut used = vec![false; allowed.len()];
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let exempt: Vec<(usize, (usize, usize), &str)> = allowed
            .iter()
            .enumerate()
            .filter(|(_, (f, _, _))| file.strip_prefix(src).is_ok_and(|r| r == Path::new(f)))
            .filter_map(|(i, (_, name, word))| Some((i, function_lines(&text, name)?, *word)))
            .collect();
        for (n, line) in code_lines(&text) {
            for word in FORBIDDEN.iter().filter(|w| line.contains(*w)) {
                match exempt
                    .iter()
                    .find(|(_, (a, b), w)| (*a..=*b).contains(&n) && w == word)
                {
                    Some((i, _, _)) => used[*i] = true,
                    None => hits.push(format!("{}:{}: {word}: {line}", file.display(), n + 1)),
                }
            }
        }
    }
    for ((file, name, word), used) in allowed.iter().zip(used) {
        if !used {
            hits.push(format!(
                "{file}: fn {name} names no {word}: a stale allowance"
            ));
        }
    }
    (files, hits)
}

#[test]
fn core_has_no_runtime_socket_clock_or_rng_of_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (files, hits) = scan(&src, ALLOWED);
    for module in [
        "machine/mod.rs",
        "request.rs",
        "backoff.rs",
        "error.rs",
        "config.rs",
        "member_id.rs",
    ] {
        assert!(
            files.contains(&src.join(module)),
            "src/{module} is not among the files the core reaches: {files:#?}"
        );
    }
    assert!(
        hits.is_empty(),
        "the sans-IO core must stay sans-IO:\n{}",
        hits.join("\n")
    );
}

#[test]
fn the_check_catches_a_violation() {
    // The scanner itself, on a tree of its own: a nested core file whose code names each
    // forbidden word is flagged once per word, comments are not, files that are not Rust are not
    // read; the modules the core names are scanned too (a `use` group spread over lines
    // included), modules it names only in comments are not; an allowance exempts its word in its
    // function only, and one that allows nothing is reported.
    let src = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sans_io_boundary_self_test");
    let _ = std::fs::remove_dir_all(&src);
    let nested = src.join("machine/consumer");
    std::fs::create_dir_all(&nested).unwrap();
    let write = |path: &str, text: &str| std::fs::write(src.join(path), text).unwrap();
    let bad: String = FORBIDDEN
        .iter()
        .map(|w| format!("    let _ = {w};\n"))
        .collect();
    write("machine/consumer/member.rs", &bad);
    write("machine/notes.txt", &bad);
    write(
        "machine/mod.rs",
        "use crate::backoff::JitterRng;\n\
         use crate::{\n    member_id::{self, MemberId},\n    request::Request,\n};\n\
         // The driver (crate::driver) runs this on tokio.\n\
         #[cfg(test)]\n\
         fn now() -> Instant {\n    crate::testutil::epoch()\n}\n",
    );
    write(
        "machine/comments.rs",
        "    // Instant::now is for the driver\n\
         //! MemberId::generate and OsRng live outside the core\n\
         \t/// thread_rng: never here\n\
         let id = MemberId::from_seed(seed);\n",
    );
    write("backoff.rs", "let start = std::time::Instant::now();\n");
    write("request.rs", "pub struct Request;\n");
    write(
        "member_id.rs",
        "impl MemberId {\n    pub fn generate() -> Self {\n        Self::from(Uuid::new_v4())\n    }\n\n\
         \x20   pub fn from_seed(seed: u64) -> Self {\n        Self::generate()\n    }\n\n\
         \x20   pub fn parse(s: &str) -> Self {\n        Self::from(Uuid::new_v4())\n    }\n}\n",
    );
    write(
        "lib.rs",
        "pub(crate) mod testutil {\n    pub(crate) fn epoch() -> Instant {\n        \
         Instant::now()\n    }\n}\n",
    );
    write("driver.rs", &bad);
    let allowed: &[Allowance] = &[
        ("member_id.rs", "generate", "new_v4"),
        ("lib.rs", "epoch", "Instant::now"),
        ("member_id.rs", "from_seed", "OsRng"),
    ];

    let (files, hits) = scan(&src, allowed);
    let shown = |path: &str| src.join(path).display().to_string();
    let want_files: Vec<PathBuf> = [
        "backoff.rs",
        "lib.rs",
        "machine/comments.rs",
        "machine/consumer/member.rs",
        "machine/mod.rs",
        "member_id.rs",
        "request.rs",
    ]
    .iter()
    .map(|p| src.join(p))
    .collect();
    assert_eq!(files, want_files);
    let mut want: Vec<String> = FORBIDDEN
        .iter()
        .enumerate()
        .map(|(n, word)| {
            format!(
                "{}:{}: {word}: ",
                shown("machine/consumer/member.rs"),
                n + 1
            )
        })
        .collect();
    want.extend([
        format!("{}:1: Instant::now: ", shown("backoff.rs")),
        format!("{}:7: Self::generate: ", shown("member_id.rs")),
        format!("{}:11: new_v4: ", shown("member_id.rs")),
        "member_id.rs: fn from_seed names no OsRng: a stale allowance".to_owned(),
    ]);
    for w in &want {
        assert!(
            hits.iter().any(|h| h.starts_with(w)),
            "{w:?} is not caught: {hits:#?}"
        );
    }
    assert_eq!(hits.len(), want.len(), "flagged beyond those: {hits:#?}");
    let _ = std::fs::remove_dir_all(&src);
}
