//! Every link in README.md and docs/*.md resolves inside the repository.
//!
//! Checked, outside fenced code blocks: each relative Markdown link
//! `[text](target)` names a file or directory in the repository, and its
//! `#anchor`, if any, a heading of the target page (GitHub's slugs); each
//! mention of a `.md` file, linked or not, names a page that exists
//! (relative to the page or to the repository root); and each path in
//! backticks that ends in `.rs` (and has a `/`) exists. Links to other sites are not
//! fetched.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// README.md and every docs/*.md, as paths relative to the root.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(root).unwrap().to_path_buf())
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The page's text with fenced code blocks blanked out (line count kept).
fn prose(text: &str) -> Vec<String> {
    let mut in_fence = false;
    text.lines()
        .map(|line| {
            if line.trim_start().starts_with("```") {
                in_fence = !in_fence;
                return String::new();
            }
            if in_fence {
                String::new()
            } else {
                line.to_owned()
            }
        })
        .collect()
}

/// `line` without its inline code spans.
fn without_code_spans(line: &str) -> String {
    line.split('`').step_by(2).collect::<Vec<_>>().join(" ")
}

/// `base/relative` with `.` and `..` folded, as a path relative to the
/// root; `None` if it climbs out of the repository.
fn resolve(base: &Path, relative: &str) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in base.join(relative).components() {
        match part {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// GitHub's anchors for the headings of a page.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for line in prose(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let slug: String = line[hashes..]
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let mut unique = slug.clone();
        let mut n = 1;
        while !seen.insert(unique.clone()) {
            unique = format!("{slug}-{n}");
            n += 1;
        }
    }
    seen
}

/// The targets of the Markdown links `[text](target)` in `text`, with the
/// 1-based line each starts on.
fn link_targets(lines: &[String]) -> Vec<(usize, String)> {
    let mut targets = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            targets.push((i + 1, rest[..end].trim().to_owned()));
            rest = &rest[end..];
        }
    }
    targets
}

/// Words made of path characters that end in one of `endings`.
fn path_mentions<'a>(line: &'a str, endings: &[&str]) -> Vec<&'a str> {
    line.split(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c)))
        .map(|w| w.trim_end_matches('.'))
        .filter(|w| endings.iter().any(|e| w.ends_with(e) && w.len() > e.len()))
        .collect()
}

#[test]
fn every_link_in_the_docs_resolves() {
    let root = repo_root();
    let mut broken = Vec::new();
    for page in pages(&root) {
        let text = std::fs::read_to_string(root.join(&page)).unwrap();
        let dir = page.parent().unwrap_or(Path::new(""));
        let lines = prose(&text);
        for (line, target) in link_targets(&lines) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                Some(page.clone())
            } else {
                resolve(dir, path)
            };
            let Some(file) = file.filter(|f| root.join(f).exists()) else {
                broken.push(format!(
                    "{}:{line}: link to {target}: no such file in the repository",
                    page.display()
                ));
                continue;
            };
            if let Some(anchor) = anchor {
                let is_page = file.extension().is_some_and(|e| e == "md");
                let target_text = std::fs::read_to_string(root.join(&file)).unwrap_or_default();
                if is_page && !anchors(&target_text).contains(anchor) {
                    broken.push(format!(
                        "{}:{line}: link to {target}: {} has no heading #{anchor}",
                        page.display(),
                        file.display()
                    ));
                }
            }
        }
        for (i, line) in lines.iter().enumerate() {
            let code: Vec<&str> = line.split('`').skip(1).step_by(2).collect();
            let mentions = path_mentions(line, &[".md"]).into_iter().chain(
                code.iter()
                    .flat_map(|c| path_mentions(c, &[".rs"]))
                    .filter(|m| m.contains('/')),
            );
            for mention in mentions {
                let exists = [dir, Path::new("")]
                    .iter()
                    .filter_map(|base| resolve(base, mention))
                    .any(|f| root.join(f).exists());
                if !exists {
                    broken.push(format!(
                        "{}:{}: names {mention}, which is not in the repository",
                        page.display(),
                        i + 1
                    ));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "broken links in the docs:\n{}",
        broken.join("\n")
    );
}

#[test]
fn anchors_follow_github() {
    let page = "# kelp wire format, version 1\n## Frames\n### DeleteTopic (0x03) and DescribeTopic (0x05)\n\
                ```\n# not a heading\n```\n### Goodbye: how a stopping broker ends a connection\n## Frames\n";
    let got = anchors(page);
    for want in [
        "kelp-wire-format-version-1",
        "frames",
        "frames-1",
        "deletetopic-0x03-and-describetopic-0x05",
        "goodbye-how-a-stopping-broker-ends-a-connection",
    ] {
        assert!(got.contains(want), "{want} missing from {got:?}");
    }
    assert!(!got.contains("not-a-heading"));
}
