//! A user's rewriter as a command template: `'mono weaver.exe --probe P.dll {in} {out}'`.
//!
//! The template is split into words the way a POSIX shell splits them (single and double
//! quotes, backslash escapes; no variables, globs or pipes), then `{in}` and `{out}` are
//! replaced inside each word. The rewriter runs without a shell, in its own process group,
//! under a deadline; what it does — crash, hang, write nothing, write garbage — is reported as
//! data.

use super::process::{Outcome, ProcessError, run_bounded};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Most output kept of a rewriter's run, per stream.
const OUTPUT_LIMIT: usize = 1 << 20;

/// A rewriter command with `{in}` and `{out}` placeholders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RewriterCommand {
    words: Vec<String>,
    template: String,
}

/// Why a template is unusable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum TemplateError {
    /// A quote is not closed.
    #[error("the rewriter command has an unclosed {0} quote")]
    UnclosedQuote(char),
    /// Nothing to run.
    #[error("the rewriter command is empty")]
    Empty,
    /// `{in}` or `{out}` is missing.
    #[error("the rewriter command must contain {0} (it is replaced by the assembly's path)")]
    Missing(&'static str),
    /// The program is not found on PATH or is not a file.
    #[error("the rewriter program `{0}` is not found (not a file, not on PATH)")]
    NotFound(String),
}

/// Splits `text` into words like a POSIX shell (quotes and backslashes only).
pub fn split_words(text: &str) -> Result<Vec<String>, TemplateError> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(TemplateError::UnclosedQuote('\'')),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err(TemplateError::UnclosedQuote('"')),
                        },
                        Some(c) => word.push(c),
                        None => return Err(TemplateError::UnclosedQuote('"')),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(c) = chars.next() {
                    word.push(c);
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

fn on_path(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        let p = PathBuf::from(program);
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

impl RewriterCommand {
    /// Parses a template; the program must exist (a missing rewriter is a setup error, found
    /// before any case runs).
    pub fn parse(template: &str) -> Result<RewriterCommand, TemplateError> {
        let words = split_words(template)?;
        let Some(program) = words.first() else {
            return Err(TemplateError::Empty);
        };
        for p in ["{in}", "{out}"] {
            if !words.iter().any(|w| w.contains(p)) {
                return Err(TemplateError::Missing(p));
            }
        }
        if on_path(program).is_none() {
            return Err(TemplateError::NotFound(program.clone()));
        }
        Ok(RewriterCommand {
            words,
            template: template.to_string(),
        })
    }

    /// The template as given.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// The words with the placeholders replaced.
    pub fn words_for(&self, input: &Path, output: &Path) -> Vec<String> {
        let (i, o) = (input.to_string_lossy(), output.to_string_lossy());
        self.words
            .iter()
            .map(|w| w.replace("{in}", &i).replace("{out}", &o))
            .collect()
    }

    /// The command line for `input` and `output`, quoted for a POSIX shell (for repro notes).
    pub fn shell_line(&self, input: &Path, output: &Path) -> String {
        self.words_for(input, output)
            .iter()
            .map(|w| shell_quote(w))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Runs the rewriter on `input`, writing `output`, under `timeout`.
    pub fn run(
        &self,
        input: &Path,
        output: &Path,
        timeout: Duration,
    ) -> Result<Outcome, ProcessError> {
        let words = self.words_for(input, output);
        let mut c = Command::new(&words[0]);
        c.args(&words[1..]);
        run_bounded(&mut c, timeout, OUTPUT_LIMIT)
    }
}

/// `word` quoted for a POSIX shell when it needs quoting.
pub fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_split_like_a_shell() {
        assert_eq!(
            split_words(r#"mono 'a b.exe' "c \"d\"" e\ f {in} {out}"#).unwrap(),
            ["mono", "a b.exe", r#"c "d""#, "e f", "{in}", "{out}"]
        );
        assert_eq!(split_words("''").unwrap(), [""]);
        assert_eq!(
            split_words("a 'b").unwrap_err(),
            TemplateError::UnclosedQuote('\'')
        );
    }

    #[test]
    fn a_template_needs_both_placeholders_and_a_program() {
        assert_eq!(
            RewriterCommand::parse("cp {in}").unwrap_err(),
            TemplateError::Missing("{out}")
        );
        assert!(matches!(
            RewriterCommand::parse("no-such-rewriter-xyz {in} {out}").unwrap_err(),
            TemplateError::NotFound(_)
        ));
        let c = RewriterCommand::parse("cp --preserve=mode {in} {out}").unwrap();
        assert_eq!(
            c.words_for(Path::new("/a b/x.exe"), Path::new("/o/x.exe")),
            ["cp", "--preserve=mode", "/a b/x.exe", "/o/x.exe"]
        );
        assert_eq!(
            c.shell_line(Path::new("/a b/x.exe"), Path::new("/o/x.exe")),
            "cp --preserve=mode '/a b/x.exe' /o/x.exe"
        );
    }
}
