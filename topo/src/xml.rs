//! A small owned XML tree for NCCL topology and graph files, read with quick-xml and written in
//! NCCL's dump format (NCCL 2.30 `ncclTopoDumpXmlRec`: two spaces per level, attributes in insertion
//! order, `/>` for elements without children).
//!
//! NCCL's own parser is stricter than XML (no tabs, no `<?xml?>` prolog, attributes on one line). We
//! accept all well-formed XML, so every file NCCL reads we read too, plus the common superset.

use crate::error::{Location, Result, TopoError};
use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

/// An immutable, shared string: copying an element (each rank's trimmed copy of the topology,
/// the fused XML) shares its names and values instead of allocating them again.
#[derive(Clone, Eq, PartialOrd, Ord, Default)]
pub struct XStr(std::sync::Arc<str>);

impl PartialEq for XStr {
    fn eq(&self, other: &XStr) -> bool {
        // Copies of one element share their strings: equal without comparing bytes.
        std::sync::Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

/// Hashes the text, as equality compares it (a shared pointer only short-cuts equal texts).
impl std::hash::Hash for XStr {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl XStr {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for XStr {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for XStr {
    fn from(s: &str) -> Self {
        XStr(s.into())
    }
}

impl From<String> for XStr {
    fn from(s: String) -> Self {
        XStr(s.into())
    }
}

impl PartialEq<str> for XStr {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for XStr {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for XStr {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl std::fmt::Display for XStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Debug for XStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

/// One element: name, attributes in file order, children, and where it starts in the source.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct XmlElement {
    /// Tag name.
    pub name: XStr,
    /// Attributes in the order they were read or inserted (the order NCCL dumps them in). Shared
    /// between copies of the element until one of them changes (copy on write).
    pub attrs: std::sync::Arc<Vec<(XStr, XStr)>>,
    /// Child elements in document order.
    pub children: Vec<XmlElement>,
    /// Start position in the source (line 0 for elements made in memory).
    pub line: usize,
    /// Start column in the source.
    pub col: usize,
}

impl XmlElement {
    /// A new element without attributes or children.
    pub fn new(name: &str) -> Self {
        XmlElement {
            name: name.into(),
            ..Default::default()
        }
    }

    /// Builder: add an attribute (replacing an existing one of the same key in place).
    pub fn with(mut self, key: &str, value: impl ToString) -> Self {
        self.set(key, value);
        self
    }

    /// Builder: add a child.
    pub fn child(mut self, c: XmlElement) -> Self {
        self.children.push(c);
        self
    }

    /// The value of an attribute.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Set an attribute, keeping its position if it exists, appending otherwise.
    pub fn set(&mut self, key: &str, value: impl ToString) {
        let value: XStr = value.to_string().into();
        let attrs = std::sync::Arc::make_mut(&mut self.attrs);
        match attrs.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => attrs.push((key.into(), value)),
        }
    }

    /// Set an attribute only if it is absent (NCCL's `xmlInitAttr*`).
    pub fn init(&mut self, key: &str, value: impl ToString) {
        if self.get(key).is_none() {
            std::sync::Arc::make_mut(&mut self.attrs).push((key.into(), value.to_string().into()));
        }
    }

    /// Remove an attribute.
    pub fn remove(&mut self, key: &str) {
        if self.get(key).is_some() {
            std::sync::Arc::make_mut(&mut self.attrs).retain(|(k, _)| k != key);
        }
    }

    /// Children with a given tag name.
    pub fn subs<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a XmlElement> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// Visit this element and all descendants, depth first, parents before children.
    pub fn walk<'a>(&'a self, f: &mut dyn FnMut(&'a XmlElement, usize)) {
        fn rec<'a>(e: &'a XmlElement, depth: usize, f: &mut dyn FnMut(&'a XmlElement, usize)) {
            f(e, depth);
            for c in &e.children {
                rec(c, depth + 1, f);
            }
        }
        rec(self, 0, f)
    }

    /// Number of elements in this subtree (including itself).
    pub fn count(&self) -> usize {
        1 + self.children.iter().map(XmlElement::count).sum::<usize>()
    }

    /// Where this element starts, for error messages.
    pub fn location(&self, file: &str) -> Location {
        Location {
            file: file.to_string(),
            line: self.line,
            col: self.col,
        }
    }
}

/// How deep elements may nest. Real topologies nest a system, CPUs, a few levels of PCI switches
/// and the devices under them; NCCL's own reader keeps every element in a fixed table of a few
/// thousand. Refusing deeper documents keeps every walk of the tree shallow.
pub const MAX_DEPTH: usize = 64;

/// Parse a document and return its root element. `file` only names the input in errors.
pub fn parse(text: &str, file: &str) -> Result<XmlElement> {
    // A UTF-8 byte-order mark is not part of the document (quick-xml skips it, so its positions
    // would not count it) and takes no column.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // quick-xml would skip a second mark as well, and its positions would no longer be ours.
    if text.starts_with('\u{feff}') {
        return Err(TopoError::Syntax {
            at: Location {
                file: file.to_string(),
                line: 1,
                col: 1,
            },
            msg: "a second byte-order mark (U+FEFF): expected '<'".into(),
        });
    }
    let lines = LineIndex::new(text);
    let mut reader = Reader::from_str(text);
    reader.config_mut().trim_text(true);
    let mut stack: Vec<XmlElement> = Vec::new();
    let mut root: Option<XmlElement> = None;
    loop {
        let before = reader.buffer_position() as usize;
        let ev = reader.read_event().map_err(|e| TopoError::Syntax {
            at: lines.locate(file, reader.error_position() as usize),
            msg: e.to_string(),
        })?;
        // The event starts at the first non-blank byte after the previous event.
        let rest = text.get(before..).unwrap_or("");
        let start = before + rest.len() - rest.trim_start().len();
        match ev {
            Event::Start(e) | Event::Empty(e) if root.is_some() && stack.is_empty() => {
                let _ = e;
                return Err(TopoError::Syntax {
                    at: lines.locate(file, start),
                    msg: "a second top-level element; a topology file has exactly one".into(),
                });
            }
            Event::Start(e) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(TopoError::Syntax {
                        at: lines.locate(file, start),
                        msg: format!(
                            "elements nested more than {MAX_DEPTH} deep; topology and graph files \
                             nest a few levels"
                        ),
                    });
                }
                stack.push(element(&e, &lines, file, start)?);
            }
            Event::Empty(e) => {
                let el = element(&e, &lines, file, start)?;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(el),
                    None => root = Some(el),
                }
            }
            Event::End(_) => {
                // quick-xml has already checked that the end tag matches.
                let el = stack
                    .pop()
                    .expect("quick-xml reports an End only after a matching Start");
                match stack.last_mut() {
                    Some(parent) => parent.children.push(el),
                    None => root = Some(el),
                }
            }
            Event::Text(t) => {
                let raw = String::from_utf8_lossy(t.as_ref()).to_string();
                if !raw.trim().is_empty() {
                    return Err(TopoError::Syntax {
                        at: lines.locate(file, start),
                        msg: format!(
                            "unexpected text '{}': expected '<'",
                            printable(&shorten(raw.trim()))
                        ),
                    });
                }
            }
            Event::CData(_) => {
                return Err(TopoError::Syntax {
                    at: lines.locate(file, start),
                    msg: "unexpected CDATA section".into(),
                })
            }
            Event::Eof => break,
            // Comments, the <?xml?> prolog, processing instructions and DOCTYPE are skipped.
            _ => {}
        }
    }
    if let Some(open) = stack.last() {
        return Err(TopoError::Syntax {
            at: open.location(file),
            msg: format!("<{}> is never closed", open.name),
        });
    }
    root.ok_or_else(|| TopoError::Syntax {
        at: Location {
            file: file.to_string(),
            line: 1,
            col: 1,
        },
        msg: "no element found: the file is empty".into(),
    })
}

/// `s` with control characters shown as `U+XXXX` (a message must not carry them to the terminal).
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                format!("U+{:04X}", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Where (bytes after the tag's `<`) and what a malformed attribute is.
fn attr_error(err: &quick_xml::events::attributes::AttrError) -> (usize, String) {
    use quick_xml::events::attributes::AttrError as E;
    match *err {
        E::ExpectedEq(p) => (p, "expected '=' after the attribute name".into()),
        E::ExpectedValue(p) => (p, "expected a quoted value after '='".into()),
        E::UnquotedValue(p) => (
            p,
            "attribute value must be in double or single quotes".into(),
        ),
        E::ExpectedQuote(p, q) => (p, format!("attribute value is not closed by {}", q as char)),
        E::Duplicated(p, _) => (p, "attribute given twice".into()),
    }
}

fn shorten(s: &str) -> String {
    if s.chars().count() > 40 {
        format!("{}...", s.chars().take(40).collect::<String>())
    } else {
        s.to_string()
    }
}

/// Longest element name, attribute name or value NCCL's XML reader takes (`MAX_STR_LEN` in
/// NCCL 2.30.7 `src/graph/xml.h`; a longer one fails its parse).
const MAX_STR_LEN: usize = 255;

fn element(e: &BytesStart<'_>, lines: &LineIndex, file: &str, start: usize) -> Result<XmlElement> {
    let at = lines.locate(file, start);
    let name = String::from_utf8_lossy(e.name().as_ref()).to_string();
    if name.len() > MAX_STR_LEN {
        return Err(TopoError::Syntax {
            at,
            msg: format!(
                "<{}>: the element name is {} bytes; NCCL reads at most {MAX_STR_LEN} (MAX_STR_LEN)",
                printable(&shorten(&name)),
                name.len()
            ),
        });
    }
    let mut attrs: Vec<(XStr, XStr)> = Vec::new();
    for a in e.attributes() {
        let a = a.map_err(|err| {
            let (pos, msg) = attr_error(&err);
            TopoError::Syntax {
                at: lines.locate(file, start + 1 + pos),
                msg: format!("<{}>: {msg}", printable(&name)),
            }
        })?;
        let key = String::from_utf8_lossy(a.key.as_ref()).to_string();
        let value = a
            .unescape_value()
            .map_err(|err| {
                use quick_xml::escape::EscapeError as E;
                let what = match &err {
                    quick_xml::Error::Escape(E::UnrecognizedEntity(_, ent)) => {
                        format!("unknown entity '&{};'", printable(&shorten(ent)))
                    }
                    quick_xml::Error::Escape(E::UnterminatedEntity(_)) => {
                        "'&' without a closing ';'".to_string()
                    }
                    _ => "invalid character reference".to_string(),
                };
                TopoError::Syntax {
                    at: at.clone(),
                    msg: format!(
                        "<{} {}>: {what} in the value",
                        printable(&name),
                        printable(&key)
                    ),
                }
            })?
            .to_string();
        if attrs.iter().any(|(k, _)| *k == key) {
            return Err(TopoError::Syntax {
                at,
                msg: format!("<{name}>: attribute {key} given twice"),
            });
        }
        if key.len() > MAX_STR_LEN || value.len() > MAX_STR_LEN {
            let (what, n) = if key.len() > MAX_STR_LEN {
                ("name", key.len())
            } else {
                ("value", value.len())
            };
            return Err(TopoError::Syntax {
                at,
                msg: format!(
                    "<{} {}>: the attribute {what} is {n} bytes; NCCL reads at most {MAX_STR_LEN} (MAX_STR_LEN)",
                    printable(&name),
                    printable(&shorten(&key))
                ),
            });
        }
        attrs.push((key.into(), value.into()));
    }
    Ok(XmlElement {
        name: name.into(),
        attrs: attrs.into(),
        children: Vec::new(),
        line: at.line,
        col: at.col,
    })
}

/// Byte offset -> line/column.
struct LineIndex<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    fn new(text: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { text, starts }
    }
    fn locate(&self, file: &str, offset: usize) -> Location {
        let offset = offset.min(self.text.len());
        let line = self.starts.partition_point(|&s| s <= offset);
        let start = self.starts[line - 1];
        let col = self
            .text
            .get(start..offset)
            .map(|s| s.chars().count())
            .unwrap_or(offset - start)
            + 1;
        Location {
            file: file.to_string(),
            line,
            col,
        }
    }
}

/// Write an element tree the way NCCL's `ncclTopoDumpXmlToFile` does.
pub fn write(root: &XmlElement) -> String {
    let mut out = String::new();
    write_rec(root, 0, &mut out);
    out
}

fn write_rec(e: &XmlElement, depth: usize, out: &mut String) {
    for _ in 0..depth {
        out.push_str("  ");
    }
    out.push('<');
    out.push_str(&e.name);
    for (k, v) in e.attrs.iter() {
        out.push(' ');
        out.push_str(k);
        out.push_str("=\"");
        escape_into(v, out);
        out.push('"');
    }
    if e.children.is_empty() {
        out.push_str("/>\n");
        return;
    }
    out.push_str(">\n");
    for c in &e.children {
        write_rec(c, depth + 1, out);
    }
    for _ in 0..depth {
        out.push_str("  ");
    }
    out.push_str("</");
    out.push_str(&e.name);
    out.push_str(">\n");
}

fn escape_into(v: &str, out: &mut String) {
    for ch in v.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superset_syntax_is_accepted() {
        let text = "<?xml version=\"1.0\"?>\n<!-- c -->\n<system version=\"1\">\n\t<cpu numaid=\"0\"\n      arch=\"x86_64\">\n\t\t<pci busid='0000:01:00.0'/>\n\t</cpu>\n</system>\n";
        let root = parse(text, "t.xml").unwrap();
        assert_eq!(root.name, "system");
        let cpu = &root.children[0];
        assert_eq!(cpu.get("arch"), Some("x86_64"));
        assert_eq!((cpu.line, cpu.col), (4, 2));
        assert_eq!(cpu.children[0].get("busid"), Some("0000:01:00.0"));
    }

    #[test]
    fn errors_name_line_and_column() {
        let err = parse("<system version=\"1\">\n  <cpu>\n</system>\n", "bad.xml")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("bad.xml:3:"), "{err}");
        let err = parse("<system>\n  text\n</system>", "t.xml")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.xml:2:3: unexpected text"), "{err}");
        let err = parse("<system>\n  <cpu>\n", "t.xml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("t.xml:"), "{err}");
        assert!(parse("", "e.xml")
            .unwrap_err()
            .to_string()
            .contains("empty"));
    }

    #[test]
    fn errors_show_no_escapes_or_byte_offsets() {
        // Control characters are shown as U+XXXX, not as Rust's debug escapes.
        let err = parse(
            "<system version=\"1\">\u{1c}pci busid=\"0\"/></system>",
            "c.xml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("c.xml:1:21: unexpected text 'U+001Cpci"),
            "{err}"
        );
        assert!(!err.contains("\\u{") && !err.contains('\u{1c}'), "{err}");
        // A malformed attribute is located at its value, by line and column.
        let text = "<system version=\"1\">\n  <pci busid=\"0000:01:00.0\" class=0x1/>\n</system>";
        let err = parse(text, "a.xml").unwrap_err().to_string();
        assert_eq!(
            err,
            "a.xml:2:35: <pci>: attribute value must be in double or single quotes"
        );
        let err = parse("<system a=\"&foo;\"/>", "e.xml")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "e.xml:1:1: <system a>: unknown entity '&foo;' in the value"
        );
    }

    #[test]
    fn names_and_values_longer_than_nccls_reader_takes_are_errors() {
        let long = "f".repeat(256);
        let cases = [
            (
                format!("<system version=\"1\">\n <cpu affinity=\"{long}\"/>\n</system>"),
                "v.xml:2:2: <cpu affinity>: the attribute value is 256 bytes; NCCL reads at most 255",
            ),
            (
                format!("<system version=\"1\">\n <cpu {long}=\"1\"/>\n</system>"),
                "v.xml:2:2: <cpu ffffffffffffffffffffffffffffffffffffffff...>: the attribute name is 256 bytes",
            ),
            (
                format!("<system version=\"1\">\n <{long}/>\n</system>"),
                "v.xml:2:2: <ffffffffffffffffffffffffffffffffffffffff...>: the element name is 256 bytes",
            ),
        ];
        for (text, want) in cases {
            let err = parse(&text, "v.xml").unwrap_err().to_string();
            assert!(err.starts_with(want), "{err}");
        }
        // 255 bytes are read.
        let ok = format!(
            "<system version=\"1\"><cpu affinity=\"{}\"/></system>",
            &long[1..]
        );
        assert!(parse(&ok, "v.xml").is_ok());
    }

    #[test]
    fn a_second_byte_order_mark_is_an_error() {
        // quick-xml skips a mark after ours too; positions then fell inside characters.
        let text = "\u{feff}\u{feff}<system version=\"1\">\n<cpu a=\"語\">\n<x/>\n</system>";
        let err = parse(text, "b.xml").unwrap_err().to_string();
        assert_eq!(
            err,
            "b.xml:1:1: a second byte-order mark (U+FEFF): expected '<'"
        );
    }

    #[test]
    fn byte_order_mark_is_skipped() {
        // A BOM before non-ASCII text used to slice inside a character.
        let root = parse("\u{feff}<system version=\"日\"></system>", "b.xml").unwrap();
        assert_eq!(root.get("version"), Some("日"));
        assert_eq!((root.line, root.col), (1, 1));
        let err = parse("\u{feff}<system>\n  <cpu>\n    <x\n</system>", "b.xml")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("b.xml:3:5:") || err.starts_with("b.xml:4:"),
            "{err}"
        );
        let err = parse("\u{feff}<system>\n 日 </system>", "b.xml")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("b.xml:2:2: unexpected text"), "{err}");
    }

    #[test]
    fn absurd_nesting_is_refused() {
        let depth = 20_000;
        let text = format!("{}{}", "<pci>".repeat(depth), "</pci>".repeat(depth));
        let err = parse(&text, "d.xml").unwrap_err().to_string();
        assert!(err.starts_with("d.xml:1:"), "{err}");
        assert!(err.contains("nested more than"), "{err}");
        let ok = MAX_DEPTH;
        let text = format!("{}{}", "<pci>".repeat(ok), "</pci>".repeat(ok));
        assert!(parse(&text, "d.xml").is_ok());
    }

    #[test]
    fn writer_uses_nccl_layout() {
        let root = XmlElement::new("system").with("version", 1).child(
            XmlElement::new("cpu")
                .with("numaid", 0)
                .child(XmlElement::new("nic")),
        );
        assert_eq!(
            write(&root),
            "<system version=\"1\">\n  <cpu numaid=\"0\">\n    <nic/>\n  </cpu>\n</system>\n"
        );
        let back = parse(&write(&root), "x").unwrap();
        assert_eq!(write(&back), write(&root));
    }
}
