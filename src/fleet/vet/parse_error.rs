//! Parse errors of files that hold credentials (member kubeconfigs) or sit next to them (the
//! member config), told by file, line, column and field path, never with text from the file.
//!
//! The parsers' own messages quote the file: serde-saphyr renders the offending line as a
//! snippet, serde quotes the unexpected value, kube quotes base64 symbols and names. So every
//! message here is built from the error's structure (its variant and location) and from a
//! walk over the file's indentation that names only keys the caller knows; anything else is
//! shown as `?`.

use serde_saphyr::granit_parser::ErrorKind;

/// Where in a YAML file an error is: 1-based line and column (0: unknown) and the path of
/// the field at that line (`users[#0].user.token`), as far as it is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// 1-based; 0 when the parser could not place the error.
    pub line: u64,
    /// 1-based.
    pub column: u64,
    /// Keys and list items down to the line (`users[#0].user.token`); empty when unknown.
    pub path: String,
}

/// `line L, column C at PATH`, or as much of it as is known.
impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line > 0 {
            write!(f, "line {}, column {}", self.line, self.column)?;
            if !self.path.is_empty() {
                f.write_str(" ")?;
            }
        }
        match self.path.as_str() {
            "" => Ok(()),
            path => write!(f, "at {path}"),
        }
    }
}

/// `line L, column C at PATH: what`: the message of a YAML error `e` of `text`, whose keys
/// `known` accepts as safe to name.
pub fn yaml_error(text: &str, e: &serde_saphyr::Error, known: &dyn Fn(&str) -> bool) -> String {
    let place = yaml_place(text, e, known).to_string();
    let what = describe(e);
    match place.as_str() {
        "" => what,
        place => format!("{place}: {what}"),
    }
}

/// The place of `e` in `text`.
pub fn yaml_place(text: &str, e: &serde_saphyr::Error, known: &dyn Fn(&str) -> bool) -> Place {
    match e.location() {
        Some(at) if at.line() > 0 => Place {
            line: at.line(),
            column: at.column(),
            path: path_at(text, at.line(), known),
        },
        _ => Place {
            line: 0,
            column: 0,
            path: String::new(),
        },
    }
}

/// What kind of mistake `e` is, from its variant: never its message, which may quote the file.
pub fn describe(e: &serde_saphyr::Error) -> String {
    use serde_saphyr::Error as E;
    match e {
        E::WithSnippet { error, .. } | E::AliasError { error, .. } => describe(error),
        E::ExternalMessage { source, .. } => match source.as_ref() {
            serde_saphyr::ExternalMessageSource::Parser(scan) => syntax(scan.kind()),
            _ => "not valid YAML".into(),
        },
        E::Eof { .. } => "the file ends in the middle of a value".into(),
        E::Unexpected { expected, .. } => format!("unexpected YAML structure, expected {expected}"),
        E::DuplicateMappingKey { .. } => "a key appears twice in one mapping".into(),
        E::SerdeInvalidType { .. } | E::InvalidScalar { .. } | E::NullIntoString { .. } => {
            "a value of the wrong type".into()
        }
        E::SerdeInvalidValue { .. } | E::NonFiniteFloat { .. } | E::InvalidBooleanStrict { .. } => {
            "an invalid value".into()
        }
        E::SerdeInvalidLength { .. } => "a list of the wrong length".into(),
        E::SerdeUnknownVariant { .. } => "a value not among those accepted".into(),
        E::SerdeUnknownField { .. } => "a field that is not known here".into(),
        E::SerdeMissingField { field, .. } => format!("missing field {field}"),
        E::InvalidUtf8Input => "not UTF-8 text".into(),
        E::UnknownAnchor { .. } => "an alias names an anchor that does not exist".into(),
        E::AliasReplayCounterOverflow { .. }
        | E::AliasReplayLimitExceeded { .. }
        | E::AliasExpansionLimitExceeded { .. }
        | E::AliasReplayStackDepthExceeded { .. }
        | E::Budget { .. } => "over the YAML parser's limits (aliases, depth or size)".into(),
        E::IndentationError { .. } => "bad indentation".into(),
        E::MergeKeyNotAllowed { .. } | E::MergeValueNotMapOrSeqOfMaps { .. } => {
            "a YAML merge key (<<) that cannot be used here".into()
        }
        E::QuotingRequired { .. } => "a value that must be quoted".into(),
        E::InvalidBinaryBase64 { .. } | E::BinaryNotUtf8 { .. } => {
            "a !!binary value that is not valid base64 text".into()
        }
        _ => "not valid YAML".into(),
    }
}

/// A flow collection (`[…]`, `{…}`) left open at the end of the file.
const UNCLOSED_FLOW: &str = "a [ or { that is never closed";
/// A flow collection closed by the other kind of bracket.
const MISMATCHED_FLOW_END: &str = "a [ or { closed by the wrong bracket";

/// A YAML syntax error by its kind. A kind without data (most) is described by the parser's
/// own fixed text; one with data (an unexpected character, a custom message) only by what it
/// is, since its data comes from the file.
fn syntax(kind: &ErrorKind) -> String {
    let unit = format!("{kind:?}")
        .chars()
        .all(|c| c.is_ascii_alphanumeric());
    let text = kind.to_string();
    let what = match kind {
        ErrorKind::UnexpectedCharacter { .. } => "a character that cannot start a value here",
        ErrorKind::UnclosedFlowCollection { .. } => UNCLOSED_FLOW,
        ErrorKind::MismatchedFlowCollectionEnd { .. } => MISMATCHED_FLOW_END,
        _ if unit && !text.is_empty() => return format!("YAML syntax error: {text}"),
        _ => "YAML syntax error",
    };
    what.to_string()
}

/// The path of the field at `line` (1-based) of `text`: keys from the indentation of the lines
/// above it and its own (`users[#0].user.token`), each key named only if `known` accepts it
/// (else `?`); a line that is not `key: value` (a typo like `token abc`) is placed in its
/// parent. Block-style YAML only, which is what kubeconfigs are; a second document is named
/// (`document 2: ...`).
pub fn path_at(text: &str, line: u64, known: &dyn Fn(&str) -> bool) -> String {
    let mut walk = Walk::default();
    for (i, raw) in text.split('\n').enumerate() {
        walk.line(raw, known);
        if i as u64 + 1 == line {
            break;
        }
    }
    walk.path()
}

/// One step of a path.
#[derive(Debug, Clone)]
enum Step {
    Key(String),
    Index(usize),
}

/// The walk over the lines: the open keys and list items with their indentation.
#[derive(Debug, Default)]
struct Walk {
    stack: Vec<(usize, Step)>,
    /// Documents before the current one.
    document: usize,
    /// The current document has content.
    content: bool,
    /// Inside a block scalar (`key: |`) opened at this indentation: its lines are text.
    block_scalar: Option<usize>,
}

impl Walk {
    fn line(&mut self, raw: &str, known: &dyn Fn(&str) -> bool) {
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        let body = raw.trim_start_matches([' ', '\t']);
        let indent = raw.len() - body.len();
        if let Some(open) = self.block_scalar {
            if body.is_empty() || indent > open {
                return;
            }
            self.block_scalar = None;
        }
        if body.is_empty() || body.starts_with('#') {
            return;
        }
        if body.starts_with("---") || body.starts_with("...") {
            // A `---` before any content starts the first document; later ones the next.
            if body.starts_with("---") && self.content {
                self.document += 1;
                self.content = false;
            }
            self.stack.clear();
            return;
        }
        self.content = true;
        let mut at = indent;
        let mut rest = body;
        if !is_item(rest) {
            self.pop_to(indent);
        }
        // `- ` list items, possibly nested on one line (`- - a`).
        while is_item(rest) {
            self.item(at);
            let trimmed = rest[1..].trim_start_matches(' ');
            at += rest.len() - trimmed.len();
            rest = trimmed;
            if rest.is_empty() || rest.starts_with('#') {
                return;
            }
        }
        // Not a key (a typo like `token abc`, or a scalar): the line stays in its parent.
        if let Some((key, value)) = key_of(rest) {
            let key = if known(key) {
                key.to_string()
            } else {
                "?".into()
            };
            self.stack.push((at, Step::Key(key)));
            let value = value.trim_start();
            if value.starts_with('|') || value.starts_with('>') {
                self.block_scalar = Some(at);
            }
        }
    }

    /// Drops what a key at `indent` closes: everything deeper, and what is at the same
    /// indentation (a sibling key ends the previous one, and a list at its level).
    fn pop_to(&mut self, indent: usize) {
        while self.stack.last().is_some_and(|(at, _)| *at >= indent) {
            self.stack.pop();
        }
    }

    /// A `-` at `indent`: the next item of the list there, or the first of a new one.
    fn item(&mut self, indent: usize) {
        while let Some((at, _)) = self.stack.last() {
            if *at > indent {
                self.stack.pop();
            } else {
                break;
            }
        }
        match self.stack.last_mut() {
            Some((at, Step::Index(i))) if *at == indent => *i += 1,
            _ => self.stack.push((indent, Step::Index(0))),
        }
    }

    fn path(&self) -> String {
        let mut path = String::new();
        for (_, step) in &self.stack {
            match step {
                Step::Key(key) => {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                }
                Step::Index(i) => path.push_str(&format!("[#{i}]")),
            }
        }
        match (self.document + 1, path.is_empty()) {
            (1, _) => path,
            (n, true) => format!("document {n}"),
            (n, false) => format!("document {n}: {path}"),
        }
    }
}

/// A `- ` list item (or a bare `-`).
fn is_item(s: &str) -> bool {
    s == "-" || s.starts_with("- ")
}

/// What a line starting with one of these holds is not a plain key: a quoted key, a flow
/// collection, an anchor, alias or tag, a block scalar, a complex key.
const NOT_A_PLAIN_KEY: [char; 10] = ['"', '\'', '{', '[', '&', '*', '!', '|', '>', '?'];

/// `key: value` or `key:` at the start of `s` (a plain key: not quoted, not a flow
/// collection); the key and what follows its colon.
fn key_of(s: &str) -> Option<(&str, &str)> {
    if s.starts_with(NOT_A_PLAIN_KEY) {
        return None;
    }
    let colon = s
        .find(": ")
        .or_else(|| s.ends_with(':').then(|| s.len() - 1))?;
    let key = s[..colon].trim_end();
    (!key.is_empty() && !key.contains(" #")).then(|| (key, &s[colon + 1..]))
}

/// The message of a serde error `e` from turning parsed values into a typed value, by what it
/// is and never by the value: serde's messages quote the unexpected value (`invalid type:
/// string "…", expected a boolean`). What follows `expected` comes from the target type.
pub fn describe_serde(e: &dyn std::fmt::Display) -> String {
    let message = e.to_string();
    let expected = message
        .rfind(", expected ")
        .map(|i| &message[i + ", expected ".len()..])
        .filter(|tail| from_the_type(tail));
    let what = if message.starts_with("invalid type") {
        "a value of the wrong type"
    } else if message.starts_with("invalid value") {
        "an invalid value"
    } else if message.starts_with("invalid length") {
        "a list of the wrong length"
    } else if message.starts_with("unknown variant") {
        "a value not among those accepted"
    } else if message.starts_with("unknown field") {
        "a field that is not known here"
    } else if message.starts_with("duplicate field") {
        "a field that appears twice"
    } else if let Some(field) = message
        .strip_prefix("missing field `")
        .and_then(|f| f.strip_suffix('`'))
        .filter(|f| from_the_type(f))
    {
        return format!("missing field {field}");
    } else {
        "an invalid value"
    };
    match expected {
        Some(expected) => format!("{what}, expected {expected}"),
        None => what.to_string(),
    }
}

/// Text a type's `Deserialize` writes (`a boolean`, `one of `Never`, `IfAvailable``, a field
/// name): short words, nothing that looks like data.
fn from_the_type(text: &str) -> bool {
    text.len() <= 120
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || " ,-_`.".contains(c))
}

/// The fixed heads of kube's kubeconfig and TLS errors (`failed to load client key: …`): what
/// follows a head is its source's message, which may quote the file (a base64 symbol, a
/// context name, a PEM line).
const KUBE_HEADS: &[&str] = &[
    "failed to determine current context",
    "kubeconfigs with mismatching kind cannot be merged",
    "kubeconfigs with mismatching api version cannot be merged",
    "failed to load current context",
    "failed to load the cluster of context",
    "failed to find the path of kubeconfig",
    "failed to parse kubeconfig YAML",
    "cluster url is missing on selected cluster",
    "failed to parse cluster url",
    "failed to parse proxy url",
    "failed to load certificate authority",
    "failed to load client certificate",
    "failed to load client key",
    "failed to parse PEM-encoded certificates",
    "failed to parse NO_PROXY/no_proxy env var",
    "failed to decode base64 data",
    "no base64 data or file",
    "Failed to infer configuration",
    "Failed to infer provided configuration",
    "rustls tls error",
    "identity PEM is invalid",
    "identity PEM is missing a private key",
    "the key must be PKCS8 or RSA/PKCS1",
    "identity PEM is missing certificate",
    "invalid private key",
    "unknown private key format",
    "failed to add a root certificate",
    "no valid native root CA certificates found",
    "invalid server name",
    "TLS required but no TLS stack selected",
    "auth error",
    "ServiceError",
    "invalid tls-server-name",
];

/// A kube configuration error's message cut after its known heads: `failed to load client
/// key: failed to decode base64 data: Invalid symbol 36, offset 12.` keeps the first two and
/// says the rest was withheld.
pub fn kube_message(message: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    let mut rest = message.trim();
    while !rest.is_empty() {
        let (segment, tail) = rest.split_once(": ").unwrap_or((rest, ""));
        // A head followed by a quoted value in the same segment (`invalid tls-server-name "x"`).
        match KUBE_HEADS
            .iter()
            .find(|h| segment == **h || segment.starts_with(&format!("{h} ")))
        {
            Some(head) => kept.push(head),
            None => break,
        }
        if segment.len() > kept.last().map_or(0, |h| h.len()) {
            rest = segment;
            break;
        }
        rest = tail.trim();
    }
    let mut out = match kept.is_empty() {
        true => "invalid kubeconfig".to_string(),
        false => kept.join(": "),
    };
    if !rest.is_empty() {
        out.push_str(" (details withheld: they may quote the kubeconfig)");
    }
    out
}

/// The message of kube's error reading a kubeconfig: a YAML error by its place in `text` (the
/// file's content, when it could be read again), anything else by [`kube_message`].
pub fn kubeconfig_error(e: &kube::config::KubeconfigError, text: Option<&str>) -> String {
    match e {
        kube::config::KubeconfigError::Parse(e) => format!(
            "failed to parse kubeconfig YAML: {}",
            yaml_error(text.unwrap_or_default(), e, &super::known_key)
        ),
        // The path and the OS error: nothing of the content.
        kube::config::KubeconfigError::ReadConfig(..) => e.to_string(),
        e => kube_message(&e.to_string()),
    }
}

#[cfg(test)]
mod tests;
