//! Provenance a user can follow: no tracked file may cite a document outside
//! the repository, and every citation of docs/studies.md or docs/kernel.md must point
//! at an anchor or a numbered figure that exists there.
//!
//! Walks `git ls-files` from the repository root; without git (or outside a checkout)
//! the tests are skipped with the reason printed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The strings that mean "a file outside this repository": the team's brief (the
/// domain, design and style notes) and its directory, built from parts so that this file
/// does not trip its own check. docs/architecture.md does not contain any of them.
fn outside_needles() -> [String; 5] {
    [
        ["domain", ".md"].concat(),
        ["design", ".md"].concat(),
        ["style", ".md"].concat(),
        ["..", "/shared"].concat(),
        ["shared", "/docs"].concat(),
    ]
}

/// Prefixes of the figure ids docs/studies.md and docs/kernel.md define.
const FIGURE_PREFIXES: [&str; 6] = ["AP-", "QOS-", "IRQS-", "WG-", "XDP-", "LAB-"];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Tracked files as (path, text); None (with the reason) when git cannot list them.
/// Files that are not UTF-8 text are left out: they cannot hold a citation.
fn tracked_text_files() -> Result<Vec<(String, String)>, String> {
    let root = repo_root();
    let out = Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["ls-files", "-z"])
        .output()
        .map_err(|e| format!("git is not available ({e})"))?;
    if !out.status.success() {
        return Err(format!(
            "`git ls-files` failed in {} (not a git checkout?): {}",
            root.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut files = Vec::new();
    for path in listing.split('\0').filter(|p| !p.is_empty()) {
        // A tracked file deleted in the work tree is not there to read.
        let Ok(bytes) = std::fs::read(root.join(path)) else {
            continue;
        };
        if let Ok(text) = String::from_utf8(bytes) {
            files.push((path.to_string(), text));
        }
    }
    Ok(files)
}

/// Every `path:line: text` that mentions one of the needles.
fn outside_references(path: &str, text: &str, needles: &[String]) -> Vec<String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| needles.iter().any(|n| line.contains(n.as_str())))
        .map(|(i, line)| format!("{path}:{}: {}", i + 1, line.trim()))
        .collect()
}

/// The `id="..."` anchors a markdown file defines.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = markdown;
    while let Some(at) = rest.find("id=\"") {
        rest = &rest[at + 4..];
        if let Some(end) = rest.find('"') {
            found.insert(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    found
}

fn is_anchor_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'
}

/// The anchors cited as `<doc>#anchor` in a text (doc is `studies.md` or `kernel.md`,
/// with or without the `docs/` in front).
fn cited_anchors(text: &str, doc: &str) -> Vec<String> {
    let needle = format!("{doc}#");
    let mut cited = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(&needle) {
        rest = &rest[at + needle.len()..];
        let end = rest.find(|c| !is_anchor_char(c)).unwrap_or(rest.len());
        // A trailing '-' is punctuation ("see #x-"), not part of the anchor.
        let anchor = rest[..end].trim_end_matches('-');
        if !anchor.is_empty() {
            cited.push(anchor.to_string());
        }
        rest = &rest[end..];
    }
    cited
}

/// Figure ids (AP-7, QOS-3, LAB-2, ...) in a text, and `M<n>` right after
/// "docs/studies.md ".
fn cited_figures(text: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for prefix in FIGURE_PREFIXES {
        let mut from = 0;
        while let Some(at) = text[from..].find(prefix) {
            let start = from + at;
            let digits: String = text[start + prefix.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            let preceded_by_word = text[..start]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric());
            if !digits.is_empty() && !preceded_by_word {
                ids.push(format!("{prefix}{digits}"));
            }
            from = start + prefix.len();
        }
    }
    let mut rest = text;
    while let Some(at) = rest.find("docs/studies.md M") {
        rest = &rest[at + "docs/studies.md M".len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if !digits.is_empty() {
            ids.push(format!("M{digits}"));
        }
    }
    ids
}

fn read_doc(name: &str) -> String {
    let path = repo_root().join("docs").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{} must exist (the provenance table names it): {e}",
            path.display()
        )
    })
}

#[test]
fn no_tracked_file_points_outside_the_repository() {
    let files = match tracked_text_files() {
        Ok(files) => files,
        Err(why) => {
            println!("SKIPPED no_tracked_file_points_outside_the_repository: {why}");
            return;
        }
    };
    let needles = outside_needles();
    let offending: Vec<String> = files
        .iter()
        .flat_map(|(path, text)| outside_references(path, text, &needles))
        .collect();
    assert!(
        offending.is_empty(),
        "{} line(s) cite a document outside the repository; cite docs/studies.md or \
         docs/kernel.md (with the study's anchor or figure id) or docs/architecture.md \
         instead:\n{}",
        offending.len(),
        offending.join("\n")
    );
    assert!(files.len() > 50, "git listed only {} files", files.len());
}

#[test]
fn every_cited_anchor_and_figure_exists() {
    let files = match tracked_text_files() {
        Ok(files) => files,
        Err(why) => {
            println!("SKIPPED every_cited_anchor_and_figure_exists: {why}");
            return;
        }
    };
    let studies = anchors(&read_doc("studies.md"));
    let kernel = anchors(&read_doc("kernel.md"));
    for required in [
        "ap-study",
        "ingress-qos-study",
        "irq-suspension-study",
        "wireguard-study",
        "misreadings",
    ] {
        assert!(
            studies.contains(required),
            "docs/studies.md lacks the anchor #{required}"
        );
    }
    let mut missing = Vec::new();
    let mut checked = 0;
    for (path, text) in &files {
        for (i, line) in text.lines().enumerate() {
            for (doc, defined) in [("studies.md", &studies), ("kernel.md", &kernel)] {
                for anchor in cited_anchors(line, doc) {
                    checked += 1;
                    if !defined.contains(&anchor) {
                        missing.push(format!("{path}:{}: {doc}#{anchor}", i + 1));
                    }
                }
            }
            if line.contains("docs/studies.md") || line.contains("docs/kernel.md") {
                for id in cited_figures(line) {
                    checked += 1;
                    let anchor = id.to_ascii_lowercase();
                    if !studies.contains(&anchor) && !kernel.contains(&anchor) {
                        missing.push(format!("{path}:{}: figure {id}", i + 1));
                    }
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "{} citation(s) point at an anchor or figure id that docs/studies.md / \
         docs/kernel.md do not define (add it there, or fix the citation):\n{}",
        missing.len(),
        missing.join("\n")
    );
    assert!(
        checked > 50,
        "only {checked} citations found: the scanner is not finding them"
    );
}

#[test]
fn the_scanners_find_what_they_look_for() {
    let needles = outside_needles();
    let text = format!("ok\nsee {} section 4\nfine", needles[0]);
    assert_eq!(
        outside_references("x.rs", &text, &needles),
        vec![format!("x.rs:2: see {} section 4", needles[0])]
    );
    let design = format!("see {} principle 5", needles[1]);
    assert_eq!(outside_references("y.rs", &design, &needles).len(), 1);
    assert!(
        outside_references("z.rs", "see docs/architecture.md principle 5", &needles).is_empty(),
        "the repository's own architecture page is not outside it"
    );
    assert_eq!(
        anchors("<a id=\"ap-study\"></a>\n| <a id=\"qos-3\"></a>QOS-3 |"),
        BTreeSet::from(["ap-study".to_string(), "qos-3".to_string()])
    );
    assert_eq!(
        cited_anchors(
            "(docs/studies.md#ap-stages), [x](studies.md#m4), docs/kernel.md#rps",
            "studies.md"
        ),
        vec!["ap-stages", "m4"]
    );
    assert_eq!(
        cited_figures("docs/studies.md QOS-2 and QOS-3, AP-7; MAP-1; docs/studies.md M3"),
        vec!["AP-7", "QOS-2", "QOS-3", "M3"]
    );
}
