//! One field at a time: a raw value turned into what the contract holds, or the error that
//! names the file, the line and the field.

use std::ops::Range;

use toml::Spanned;

use super::raw::SList;
use super::ContractError;
use crate::contract::parse_duration;
use crate::model::Dur;
use crate::toml_source::TomlSource;

/// The file being parsed, for errors that name file, line and field.
pub(super) struct Src<'a>(pub(super) TomlSource<'a>);

impl Src<'_> {
    pub(super) fn line(&self, offset: usize) -> usize {
        self.0.line(offset)
    }

    pub(super) fn err(
        &self,
        span: Range<usize>,
        field: &str,
        message: impl Into<String>,
    ) -> ContractError {
        ContractError::Invalid {
            file: self.0.file.to_path_buf(),
            line: self.line(span.start),
            field: field.to_string(),
            message: message.into(),
        }
    }

    pub(super) fn toml_err(&self, e: &toml::de::Error) -> ContractError {
        let p = self.0.locate(e, Some("contract"));
        ContractError::Invalid {
            file: self.0.file.to_path_buf(),
            line: p.line,
            field: p.field,
            message: p.message,
        }
    }
}

fn duration(src: &Src, field: &str, v: &Spanned<String>) -> Result<Dur, ContractError> {
    match parse_duration(v.get_ref()) {
        Some(d) => Ok(d),
        None => Err(src.err(
            v.span(),
            field,
            format!("invalid duration {:?}: expected e.g. \"90s\", \"15m\", \"24h\", \"500ms\", \"2d\" or \"1h30m\"", v.get_ref()),
        )),
    }
}

pub(super) fn positive_duration(
    src: &Src,
    field: &str,
    v: &Spanned<String>,
) -> Result<Dur, ContractError> {
    let d = duration(src, field, v)?;
    if d.0 <= 0 {
        return Err(src.err(v.span(), field, "must be longer than zero"));
    }
    Ok(d)
}

pub(super) fn opt_duration(
    src: &Src,
    field: &str,
    v: &Option<Spanned<String>>,
    default: Dur,
) -> Result<Dur, ContractError> {
    v.as_ref().map_or(Ok(default), |v| duration(src, field, v))
}

pub(super) fn opt_positive(
    src: &Src,
    field: &str,
    v: &Option<Spanned<String>>,
    default: Dur,
) -> Result<Dur, ContractError> {
    v.as_ref()
        .map_or(Ok(default), |v| positive_duration(src, field, v))
}

pub(super) fn non_empty(
    src: &Src,
    field: &str,
    v: &Spanned<String>,
) -> Result<String, ContractError> {
    let s = v.get_ref().trim();
    if s.is_empty() {
        return Err(src.err(v.span(), field, "must not be empty"));
    }
    Ok(s.to_string())
}

/// A string list, each entry non-empty and listed once.
pub(super) fn string_list(
    src: &Src,
    field: &str,
    list: &SList,
) -> Result<Vec<String>, ContractError> {
    let mut out: Vec<String> = Vec::with_capacity(list.get_ref().len());
    for item in list.get_ref() {
        let s = non_empty(src, field, item)?;
        if out.contains(&s) {
            return Err(src.err(item.span(), field, format!("{s:?} is listed twice")));
        }
        out.push(s);
    }
    Ok(out)
}

pub(super) fn status_list(
    src: &Src,
    field: &str,
    list: &Option<Spanned<Vec<Spanned<i64>>>>,
    default: &[u16],
) -> Result<(Vec<u16>, Vec<Range<usize>>), ContractError> {
    let Some(list) = list else {
        return Ok((default.to_vec(), Vec::new()));
    };
    let mut out = Vec::new();
    let mut spans = Vec::new();
    for item in list.get_ref() {
        let code = *item.get_ref();
        if !(100..=599).contains(&code) {
            return Err(src.err(
                item.span(),
                field,
                format!("HTTP status {code} is outside 100..=599"),
            ));
        }
        if !out.contains(&(code as u16)) {
            out.push(code as u16);
            spans.push(item.span());
        }
    }
    Ok((out, spans))
}

/// RFC 6901: empty (the whole document) or `/`-separated tokens where `~` only escapes `0`/`1`.
pub(super) fn pointer(
    src: &Src,
    field: &str,
    v: &Option<Spanned<String>>,
) -> Result<Option<String>, ContractError> {
    let Some(v) = v else { return Ok(None) };
    let p = v.get_ref();
    if !p.is_empty() && !p.starts_with('/') {
        return Err(src.err(
            v.span(),
            field,
            format!("JSON pointer {p:?} must start with '/' (e.g. \"/{p}\") or be empty"),
        ));
    }
    let mut chars = p.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(src.err(
                v.span(),
                field,
                format!("JSON pointer {p:?}: '~' must be followed by 0 or 1"),
            ));
        }
    }
    Ok(Some(p.clone()))
}
