//! Where a field is in the TOML document (its line), for the errors.

use super::*;

/// 1-based line of a byte offset.
pub fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// Finds the spans of fields (`traffic.classes[0].size`) in the document.
pub(super) struct Locator<'a> {
    doc: Option<toml::Spanned<toml::de::DeTable<'a>>>,
}

impl<'a> Locator<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        Locator {
            doc: toml::de::DeTable::parse(text).ok(),
        }
    }

    /// The span of the value at `path` (or of its nearest existing parent).
    pub(super) fn span_of(&self, path: &str) -> Option<Range<usize>> {
        let doc = self.doc.as_ref()?;
        let mut best: Option<Range<usize>> = None;
        let mut table: Option<&toml::de::DeTable<'_>> = Some(doc.get_ref());
        let mut value: Option<&toml::Spanned<toml::de::DeValue<'_>>> = None;
        for part in split_path(path) {
            match part {
                PathPart::Key(k) => {
                    let t = match (table, value) {
                        (Some(t), None) => t,
                        (_, Some(v)) => match v.get_ref() {
                            toml::de::DeValue::Table(t) => t,
                            _ => return best,
                        },
                        _ => return best,
                    };
                    let hit = t.iter().find(|(key, _)| key.get_ref().as_ref() == k);
                    let Some((key, v)) = hit else { return best };
                    best = Some(key.span());
                    table = None;
                    value = Some(v);
                }
                PathPart::Index(i) => {
                    let Some(v) = value else { return best };
                    let toml::de::DeValue::Array(a) = v.get_ref() else {
                        return best;
                    };
                    let Some(item) = a.get(i) else { return best };
                    best = Some(item.span());
                    value = Some(item);
                }
            }
        }
        best
    }

    /// The dotted path of the entry an offset belongs to: the key or array item that
    /// starts last at or before it (table values' spans cover only their headers).
    pub(super) fn path_at(&self, offset: usize) -> Option<String> {
        let doc = self.doc.as_ref()?;
        let mut all = Vec::new();
        collect_table(doc.get_ref(), "", &mut all);
        all.into_iter()
            .filter(|(_, start)| *start <= offset)
            .max_by_key(|(path, start)| (*start, path.len()))
            .map(|(path, _)| path)
    }
}

/// Every key and array item with the offset where it starts.
pub(super) fn collect_table(
    t: &toml::de::DeTable<'_>,
    prefix: &str,
    out: &mut Vec<(String, usize)>,
) {
    for (k, v) in t.iter() {
        let path = if prefix.is_empty() {
            k.get_ref().to_string()
        } else {
            format!("{prefix}.{}", k.get_ref())
        };
        out.push((path.clone(), k.span().start.min(v.span().start)));
        collect_value(v, &path, out);
    }
}

pub(super) fn collect_value(
    v: &toml::Spanned<toml::de::DeValue<'_>>,
    path: &str,
    out: &mut Vec<(String, usize)>,
) {
    match v.get_ref() {
        toml::de::DeValue::Table(t) => collect_table(t, path, out),
        toml::de::DeValue::Array(a) => {
            for (i, item) in a.iter().enumerate() {
                let p = format!("{path}[{i}]");
                out.push((p.clone(), item.span().start));
                collect_value(item, &p, out);
            }
        }
        _ => {}
    }
}

pub(super) enum PathPart<'p> {
    Key(&'p str),
    Index(usize),
}

pub(super) fn split_path(path: &str) -> Vec<PathPart<'_>> {
    let mut out = Vec::new();
    for seg in path.split('.') {
        let mut rest = seg;
        if let Some(b) = rest.find('[') {
            out.push(PathPart::Key(&rest[..b]));
            rest = &rest[b..];
            while let Some(stripped) = rest.strip_prefix('[') {
                let Some(e) = stripped.find(']') else { break };
                if let Ok(i) = stripped[..e].parse() {
                    out.push(PathPart::Index(i));
                }
                rest = &stripped[e + 1..];
            }
        } else {
            out.push(PathPart::Key(rest));
        }
    }
    out
}
