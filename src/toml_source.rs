//! Errors in the TOML files reckon reads (contracts, the config file) name the file, the line
//! and the field. This is the one place that turns a byte span or a `toml` error into those.

use std::path::{Path, PathBuf};

/// A TOML file reckon reads (a contract, the config file) that cannot be read, or whose text
/// is wrong: the file, the line and the field, and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum TomlFileError {
    #[error("{file}:{line}: field `{field}`: {message}")]
    Invalid {
        file: PathBuf,
        line: usize,
        field: String,
        message: String,
    },
    #[error("{file}: {source}")]
    Io {
        file: PathBuf,
        source: std::io::Error,
    },
}

/// A TOML file being parsed.
pub(crate) struct TomlSource<'a> {
    pub file: &'a Path,
    pub text: &'a str,
}

/// Where a problem is, and what it is.
pub(crate) struct TomlProblem {
    pub line: usize,
    pub field: String,
    pub message: String,
}

impl TomlSource<'_> {
    /// The 1-based line holding byte `offset`.
    pub fn line(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    /// Locate a `toml` error (syntax, wrong type, unknown or missing field). The line comes from
    /// its span; the field path only from its `Display` without input, so it is recovered from
    /// that rendering, plus the field an unknown/missing-field message quotes. A leading table
    /// name in `drop_table` is left out (`params.amount`, not `contract.params.amount`). A syntax
    /// error names the key written on its line, if any.
    pub fn locate(&self, e: &toml::de::Error, drop_table: Option<&str>) -> TomlProblem {
        let line = e.span().map(|s| self.line(s.start)).unwrap_or(1);
        let message = e
            .message()
            .lines()
            .next()
            .unwrap_or("invalid TOML")
            .trim()
            .to_string();
        let mut bare = e.clone();
        bare.set_input(None);
        let rendered = bare.to_string();
        let mut path: Vec<&str> = rendered
            .lines()
            .find_map(|l| l.strip_prefix("in `").and_then(|r| r.strip_suffix('`')))
            .map(|p| p.split('.').collect())
            .unwrap_or_default();
        if let Some(named) = quoted_after(&message, "unknown field `")
            .or_else(|| quoted_after(&message, "missing field `"))
        {
            path.push(named);
        }
        if path.len() > 1 && drop_table.is_some_and(|t| path[0] == t) {
            path.remove(0);
        }
        let field = if path.is_empty() {
            self.key_on_line(line)
                .unwrap_or_else(|| "(syntax)".to_string())
        } else {
            path.join(".")
        };
        TomlProblem {
            line,
            field,
            message,
        }
    }

    fn key_on_line(&self, line: usize) -> Option<String> {
        let text = self.text.lines().nth(line.checked_sub(1)?)?;
        let (key, _) = text.split_once('=')?;
        let key = key.trim().trim_matches('"');
        (!key.is_empty() && !key.starts_with('#') && !key.starts_with('[')).then(|| key.to_string())
    }
}

fn quoted_after<'m>(message: &'m str, prefix: &str) -> Option<&'m str> {
    let rest = &message[message.find(prefix)? + prefix.len()..];
    Some(&rest[..rest.find('`')?])
}
