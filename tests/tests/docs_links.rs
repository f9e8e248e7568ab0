//! The docs a newcomer reads (README.md, ARCHITECTURE.md, bench/README.md,
//! docs/*.md) point only at things that exist: every relative link,
//! every file path written in backticks, and every section named in
//! quotes after a doc's name (`bench/README.md, "Current figures"`) is a
//! heading or a bold lead-in of that doc.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

const DOCS: &[&str] = &[
    "README.md",
    "ARCHITECTURE.md",
    "bench/README.md",
    "docs/guide.md",
    "docs/api.md",
    "docs/backends.md",
    "docs/budgets.md",
    "docs/connections.md",
    "docs/datapath.md",
    "docs/decisions.md",
    "docs/memory.md",
    "docs/rfc7306.md",
    "docs/sctp.md",
    "docs/several-loops.md",
    "docs/tcp-lite.md",
    "docs/testing.md",
    "docs/verbs-abi.md",
];

/// Docs whose sections the others name: every doc above, and these.
const MORE_TARGETS: &[&str] = &["deploy/README.md"];

fn targets() -> impl Iterator<Item = &'static str> {
    DOCS.iter().chain(MORE_TARGETS).copied()
}

/// Files of other projects the docs cite as sources.
const EXTERNAL: &[&str] = &[
    "epan/dissectors/packet-iwarp-ddp-rdmap.c",
    "include/proto.h",
];

const EXTENSIONS: &[&str] = &[
    ".rs", ".md", ".c", ".h", ".sh", ".toml", ".map", ".py", ".yaml", ".yml", ".json",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Every file under the root (relative, `/`-separated), build output and git left out.
fn files(root: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name == "target" || name == ".git" {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(rel) = p.strip_prefix(root) {
                out.insert(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out
}

/// `a/b/../c` → `a/c`.
fn normalize(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    parts.join("/")
}

fn exists(root: &Path, all: &BTreeSet<String>, p: &str) -> bool {
    let p = p.trim_end_matches('/');
    // A path named relative to the crate or module being described.
    root.join(p).exists()
        || all
            .iter()
            .any(|f| f.ends_with(&format!("/{p}")) || f.contains(&format!("/{p}/")))
}

fn words(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Headings and bold lead-ins: the names a doc's sections go by.
fn section_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| words(l.trim_start_matches('#')))
        .collect();
    let mut rest = text;
    while let Some(i) = rest.find("**") {
        let after = &rest[i + 2..];
        let Some(j) = after.find("**") else { break };
        names.push(words(&after[..j]).trim_end_matches(['.', ':']).to_string());
        rest = &after[j + 2..];
    }
    names
}

/// The quoted names right after each mention of `target` in `text`:
/// `FILE, "A"`, `FILE "A"`, `FILE, "A", "B"`, `FILE, "A" under "B"`.
fn quoted_after(text: &str, target: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices(target) {
        // `bench/README.md` must not count as a mention of `README.md`.
        if i > 0 && !text[..i].ends_with([' ', '\n', '(', '[', '`']) {
            continue;
        }
        let mut rest = &text[i + target.len()..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
        loop {
            let t = rest.trim_start();
            let t = ["under ", "and ", "there "]
                .iter()
                .fold(t, |t, w| t.strip_prefix(w).unwrap_or(t));
            let Some(q) = t.strip_prefix('"') else { break };
            let Some(end) = q.find('"') else { break };
            out.push(words(&q[..end]));
            rest = &q[end + 1..];
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
    }
    out
}

fn check() -> Vec<String> {
    let root = root();
    let all = files(&root);
    let mut bad = Vec::new();
    let targets: Vec<(&str, Vec<String>)> = targets()
        .map(|t| {
            (
                t,
                section_names(&fs::read_to_string(root.join(t)).expect("target doc")),
            )
        })
        .collect();
    for doc in DOCS {
        let text = fs::read_to_string(root.join(doc)).expect("doc");
        let base = Path::new(doc)
            .parent()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        // Relative links.
        for (i, _) in text.match_indices("](") {
            let link = &text[i + 2..];
            let Some(end) = link.find(')') else { continue };
            let link = link[..end].split('#').next().unwrap_or("");
            if link.is_empty() || link.contains("://") {
                continue;
            }
            let p = normalize(&format!("{base}/{link}"));
            if !root.join(&p).exists() {
                bad.push(format!("{doc}: link {link} ({p}) does not exist"));
            }
        }
        // Paths in backticks.
        for span in text.split('`').skip(1).step_by(2) {
            let p = span;
            let pathlike = p.contains('/')
                && !p.starts_with('/')
                && !p.starts_with("target/")
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-/".contains(c))
                && (p.ends_with('/') || EXTENSIONS.iter().any(|e| p.ends_with(e)));
            if !pathlike || EXTERNAL.contains(&p) {
                continue;
            }
            if !exists(&root, &all, p) && !exists(&root, &all, &normalize(&format!("{base}/{p}"))) {
                bad.push(format!("{doc}: path `{p}` does not exist"));
            }
        }
        // Sections named after a doc's name.
        for (target, names) in &targets {
            for q in quoted_after(&text, target) {
                if !names
                    .iter()
                    .any(|n| n == &q || n.starts_with(&q) || n.contains(&q))
                {
                    bad.push(format!("{doc}: {target} has no section \"{q}\""));
                }
            }
        }
    }
    bad
}

#[test]
fn docs_point_only_at_what_exists() {
    let bad = check();
    assert!(
        bad.is_empty(),
        "{} broken references:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn every_page_under_docs_is_checked_and_named() {
    let mut pages: Vec<String> = fs::read_dir(root().join("docs"))
        .expect("docs/")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    pages.sort();
    for p in &pages {
        assert!(DOCS.contains(&p.as_str()), "{p} is missing from DOCS");
        assert!(targets().any(|t| t == p), "{p} is not a target");
    }
}

#[test]
fn the_checks_see_a_broken_reference() {
    let text = "See bench/README.md, \"A\", \"B\" and ARCHITECTURE.md \"C\".";
    assert_eq!(quoted_after(text, "bench/README.md"), ["A", "B"]);
    assert_eq!(quoted_after(text, "ARCHITECTURE.md"), ["C"]);
    assert!(quoted_after("see bench/README.md for", "README.md").is_empty());
    let names = section_names("# Top\n## Current figures\n**Run to completion.** text");
    assert!(names.contains(&"Current figures".to_string()));
    assert!(names.contains(&"Run to completion".to_string()));
    assert_eq!(normalize("docs/../verbs/src/lib.rs"), "verbs/src/lib.rs");
    let all = files(&root());
    assert!(
        exists(&root(), &all, "qp/rx.rs"),
        "a path relative to its crate"
    );
    assert!(exists(&root(), &all, "qp/"), "a module's folder");
    assert!(!exists(&root(), &all, "qp/no_such_file.rs"));
}
