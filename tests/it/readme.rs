//! Every `$ command` example in README.md runs as written: the commands of each fenced block are
//! run (with `ilcheck` being this build, in a directory where the sample weaver, the probe
//! assembly and the project's corpus are at hand), none exits 2 or dies, and every output line
//! the README shows is printed — compared word by word, leaving out words with digits (counts
//! and timings vary) and elisions (`…`).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

/// One example: the command line and the output lines shown after it.
struct Example {
    command: String,
    shown: Vec<String>,
}

fn examples(readme: &str) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    let mut in_block = false;
    let mut continuing = false;
    // Whether the last example belongs to the block being read.
    let mut current = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            continuing = false;
            current = false;
            continue;
        }
        if !in_block {
            continue;
        }
        if continuing && let Some(last) = out.last_mut() {
            last.command.push(' ');
            last.command.push_str(line.trim().trim_end_matches('\\'));
            continuing = line.trim_end().ends_with('\\');
            continue;
        }
        if let Some(cmd) = line.strip_prefix("$ ") {
            current = true;
            continuing = cmd.trim_end().ends_with('\\');
            out.push(Example {
                command: cmd.trim_end().trim_end_matches('\\').to_string(),
                shown: Vec::new(),
            });
        } else if current && let Some(last) = out.last_mut() {
            last.shown.push(line.to_string());
        }
    }
    out
}

/// The words of a line that do not vary between runs.
fn stable_words(line: &str) -> Vec<&str> {
    line.split_whitespace()
        .filter(|w| !w.chars().any(|c| c.is_ascii_digit()) && *w != "…")
        .collect()
}

fn shown_in(output: &str, line: &str) -> bool {
    let want = stable_words(line);
    if want.is_empty() {
        return true;
    }
    output.lines().any(|o| {
        let mut have = stable_words(o).into_iter();
        want.iter().all(|w| have.any(|h| h == *w))
    })
}

fn needs(command: &str) -> Vec<&'static str> {
    let mut n = Vec::new();
    if command.contains("/usr/lib/mono/4.5") {
        n.push("corpus");
    }
    if command.starts_with("mono ") || command.contains("'mono ") {
        n.push("mono");
    }
    if command.contains("weaver.exe") {
        n.push("weaver");
    }
    n
}

#[test]
fn every_readme_example_runs_as_written() {
    let test = "every_readme_example_runs_as_written";
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let examples = examples(&readme);
    assert!(examples.len() >= 8, "found {} examples", examples.len());

    let dir = std::env::temp_dir().join(format!("ilcheck-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(root.join("corpus"), dir.join("corpus")).unwrap();
    let have_corpus = support::mono_corpus(test).is_some();
    let have_mono = support::mono_tool(test, "mono") && support::mono_tool(test, "mcs");
    let have_weaver = have_mono
        && support::present(
            test,
            "Mono.Cecil 0.11 in mono's GAC",
            support::cecil_installed(),
        );
    if have_weaver {
        let (weaver, probe) = support::build_weaver(&dir.join("bin"));
        std::fs::copy(weaver, dir.join("weaver.exe")).unwrap();
        std::fs::copy(probe, dir.join("Acme.Probe.dll")).unwrap();
    } else if have_mono {
        let probe = support::build_probe(&dir.join("bin"));
        std::fs::copy(probe, dir.join("Acme.Probe.dll")).unwrap();
    }
    let bin_dir: PathBuf = Path::new(env!("CARGO_BIN_EXE_ilcheck"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    for e in &examples {
        let missing: Vec<&str> = needs(&e.command)
            .into_iter()
            .filter(|n| match *n {
                "corpus" => !have_corpus,
                "mono" => !have_mono,
                _ => !have_weaver,
            })
            .collect();
        if !missing.is_empty() {
            eprintln!(
                "\n!!! SKIPPED README example (needs {missing:?}): {}\n",
                e.command
            );
            continue;
        }
        let o = support::run(
            Command::new("sh")
                .arg("-c")
                .arg(&e.command)
                .current_dir(&dir)
                .env("PATH", &path),
        );
        let stdout = String::from_utf8_lossy(&o.stdout);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            matches!(o.code, Some(0 | 1)),
            "`{}`: {}\n{stdout}\n{stderr}",
            e.command,
            o.describe()
        );
        let all = format!("{stdout}\n{stderr}");
        for line in &e.shown {
            assert!(
                shown_in(&all, line),
                "`{}`: the README shows\n  {line}\nbut the output is\n{all}",
                e.command
            );
        }
        ran += 1;
    }
    assert!(ran >= 4, "only {ran} examples ran");
    let _ = std::fs::remove_dir_all(&dir);
}
