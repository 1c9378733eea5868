//! The one error type of the /proc readers.

use std::path::PathBuf;

/// Why a /proc file could not be read or understood.
///
/// `Missing` is not a failure of napilab: stripped kernels (OpenWrt, containers) leave
/// files out, and callers are expected to turn it into a notice and carry on.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// The file does not exist on this system (or in this fixture tree).
    #[error("{} is not present on this system", path.display())]
    Missing { path: PathBuf },
    /// The file exists but reading it failed.
    #[error("could not read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The text does not have the layout the parser knows. `file` is the kernel's name
    /// for it (`/proc/net/softnet_stat`), `line` is 1-based, `what` says what was
    /// expected and what was found.
    #[error("{file} line {line}: {what}")]
    Parse {
        file: String,
        line: usize,
        what: String,
    },
}

impl ProcError {
    pub(crate) fn parse(file: &str, line: usize, what: impl Into<String>) -> Self {
        ProcError::Parse {
            file: file.to_owned(),
            line,
            what: what.into(),
        }
    }

    /// "expected {expected}, found '{token}'", with the token cut short: fuzzed or
    /// corrupted input can put megabytes on one line, and the message goes to a terminal.
    pub(crate) fn unexpected(file: &str, line: usize, expected: &str, found: &str) -> Self {
        Self::parse(
            file,
            line,
            format!("expected {expected}, found '{}'", Excerpt(found)),
        )
    }

    /// "expected {expected}, found the end of the line".
    pub(crate) fn ended(file: &str, line: usize, expected: &str) -> Self {
        Self::parse(
            file,
            line,
            format!("expected {expected}, found the end of the line"),
        )
    }
}

/// Displays at most 64 characters of a token, escaping control characters.
struct Excerpt<'a>(&'a str);

impl std::fmt::Display for Excerpt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const MAX: usize = 64;
        let mut chars = self.0.chars();
        for c in chars.by_ref().take(MAX) {
            write!(f, "{}", c.escape_debug())?;
        }
        if chars.next().is_some() {
            f.write_str("...")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_file_line_and_expectation() {
        let e = ProcError::unexpected("/proc/net/softnet_stat", 3, "a hex counter", "zz");
        assert_eq!(
            e.to_string(),
            "/proc/net/softnet_stat line 3: expected a hex counter, found 'zz'"
        );
        let e = ProcError::Missing {
            path: PathBuf::from("/x/proc/net/softnet_stat"),
        };
        assert_eq!(
            e.to_string(),
            "/x/proc/net/softnet_stat is not present on this system"
        );
    }

    #[test]
    fn long_tokens_are_cut_and_escaped() {
        let long = "a".repeat(100);
        let e = ProcError::unexpected("f", 1, "x", &long);
        assert_eq!(
            e.to_string(),
            format!("f line 1: expected x, found '{}...'", "a".repeat(64))
        );
        let e = ProcError::unexpected("f", 1, "x", "a\u{1b}b");
        assert_eq!(e.to_string(), "f line 1: expected x, found 'a\\u{1b}b'");
    }
}
