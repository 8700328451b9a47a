//! Parser for the `.api` table files (`driver.api`).
//!
//! This module uses only `std` so that the analyzer's build script can include it
//! (`#[path]`) and turn the data file into a static Rust table at compile time; the library
//! exposes it too, so that other build scripts (the recorder's hook generator) can read the
//! same file. See the header of `driver.api` for the syntax.

use std::fmt;

/// One parsed signature line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedFunction {
    /// Line number in the source file (1-based).
    pub line: usize,
    /// Base name, for example `cuMemcpyHtoD`.
    pub name: String,
    /// Exported symbol suffixes sharing this signature (`""`, `"_v2"`, `"_v2_ptds"`, ...).
    pub suffixes: Vec<String>,
    /// API level (`driver`, `runtime`, ...), from the last `@level`.
    pub level: String,
    /// Group (`memory`, `copy`, ...), from the last `@group`.
    pub group: String,
    /// Synchronization class name (`Async`, `DeviceToHost`, ...).
    pub sync: String,
    /// `stable` after the class: the answer stays the same for the same arguments until a call
    /// that may change answers ([`ApiFunction::may_change_answers`] in the library).
    pub stable: bool,
    /// `gpu` after the class: a device query only the GPU can answer; a client waits for the
    /// server's answer ([`ApiFunction::gpu_answers`] in the library).
    pub gpu: bool,
    /// `graph` after the class: a call stream capture turns into a graph node, run again at
    /// every launch of the graph (launches, stream-ordered copies and sets); the server's
    /// cached-trace execution puts repeated runs of them into graphs
    /// ([`ApiFunction::capturable`] in the library).
    pub graph: bool,
    /// `checked` after the class: the driver checks the call's arguments (or synchronizes)
    /// when it is made, so a client waits for the server's status
    /// ([`ApiFunction::checked`] in the library).
    pub checked: bool,
    /// Arguments in C order.
    pub args: Vec<ParsedArg>,
    /// What the function returns: `None` for a status code (`CUresult`, `cudaError_t`), else
    /// the `-> ...` clause after the arguments.
    pub ret: Option<ParsedReturn>,
    /// `=local(RULE)`, `=server` or `=refused(REASON)` after the class: (`local`, `RULE`),
    /// (`server`, ``), (`refused`, `REASON`).
    pub disposition: (String, String),
}

/// An `@refuse REASON PATTERN...` line: cuda.h symbols the table does not model that client
/// mode refuses for `REASON`; a pattern is a symbol name, or a prefix ending in `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusals {
    /// Line number in the source file (1-based).
    pub line: usize,
    /// The reason's keyword (`legacy32`, `graphics`, ...).
    pub reason: String,
    /// Symbol names and `prefix*` patterns.
    pub patterns: Vec<String>,
}

impl Refusals {
    /// Whether `symbol` is one of this line's.
    pub fn matches(&self, symbol: &str) -> bool {
        self.patterns.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => symbol.starts_with(prefix),
            None => p == symbol,
        })
    }
}

/// One symbol of the cuda.h listing (`cuda-13.0-driver.txt`, `scripts/api-signatures.py`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderSymbol {
    /// The exported symbol, for example `cuCtxCreate_v4`.
    pub name: String,
    /// The CUDA version from which `cuGetProcAddress` hands it out for its base name.
    pub since: u32,
    /// Its parameters: (C type, name), in order.
    pub params: Vec<(String, String)>,
}

/// Parses the cuda.h listing: `SYMBOL<TAB>SINCE<TAB>TYPE|NAME, TYPE|NAME, ...` per line.
pub fn parse_listing(src: &str) -> Result<Vec<HeaderSymbol>, ParseError> {
    let mut out = Vec::new();
    for (i, raw) in src.lines().enumerate() {
        let line = i + 1;
        if raw.starts_with('#') || raw.trim().is_empty() {
            continue;
        }
        let mut cols = raw.split('\t');
        let (Some(name), Some(since), params) = (cols.next(), cols.next(), cols.next().unwrap_or("")) else {
            return Err(err(line, "expected SYMBOL<TAB>SINCE<TAB>PARAMS"));
        };
        let since = since.parse().map_err(|_| err(line, format!("bad version {since:?}")))?;
        let mut ps = Vec::new();
        for p in params.split(", ").filter(|p| !p.is_empty()) {
            let (t, n) = p.rsplit_once('|').ok_or_else(|| err(line, format!("parameter {p:?} lacks '|NAME'")))?;
            ps.push((t.to_string(), n.to_string()));
        }
        out.push(HeaderSymbol { name: name.to_string(), since, params: ps });
    }
    Ok(out)
}

/// The `@refuse` lines of a table file.
pub fn parse_refusals(src: &str) -> Result<Vec<Refusals>, ParseError> {
    let mut out = Vec::new();
    for (i, raw) in src.lines().enumerate() {
        let Some(rest) = raw.trim().strip_prefix("@refuse") else { continue };
        let mut words = rest.split_whitespace();
        let reason = words.next().ok_or_else(|| err(i + 1, "@refuse needs a reason and patterns"))?;
        let patterns: Vec<String> = words.map(str::to_string).collect();
        if patterns.is_empty() {
            return Err(err(i + 1, "@refuse needs at least one symbol pattern"));
        }
        out.push(Refusals { line: i + 1, reason: reason.to_string(), patterns });
    }
    Ok(out)
}

/// A `-> void` or `-> KIND: C_TYPE` clause: a function that returns no status code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParsedReturn {
    /// `-> void`.
    Void,
    /// `-> KIND: C_TYPE`: a returned value, described like an argument.
    Value {
        /// Kind keyword (one of [`KINDS`] that takes no parameters, or `handle(KIND)`).
        kind: String,
        /// Parenthesised kind parameters.
        kind_params: Vec<String>,
        /// C type.
        c_type: String,
    },
}

/// One parsed argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedArg {
    /// `in`, `out` or `inout`.
    pub dir: String,
    /// Kind keyword, for example `hostbuf`.
    pub kind: String,
    /// Parenthesised kind parameters, for example `["ByteCount"]` for `hostbuf(ByteCount)`.
    pub kind_params: Vec<String>,
    /// Argument name as in `cuda.h`.
    pub name: String,
    /// C type as in `cuda.h`.
    pub c_type: String,
}

/// A syntax error with its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

/// Directions accepted in the file.
pub const DIRECTIONS: &[&str] = &["in", "out", "inout"];

/// Argument kinds accepted in the file, with their number of parameters.
pub const KINDS: &[(&str, usize)] = &[
    ("scalar", 0),
    ("flags", 0),
    ("enum", 0),
    ("count", 0),
    ("size", 0),
    ("devptr", 0),
    ("hostptr", 0),
    ("hostbuf", 1),
    ("anybuf", 1),
    ("handle", 1),
    ("cstr", 0),
    ("image", 0),
    ("imagefile", 0),
    ("struct", 1),
    ("structs", 2),
    ("kparams", 0),
    ("extra", 0),
    ("fnptr", 0),
    ("userdata", 0),
    ("grid", 0),
    ("block", 0),
];

/// Parse a whole `.api` file.
pub fn parse_api(src: &str) -> Result<Vec<ParsedFunction>, ParseError> {
    let mut level = String::from("driver");
    let mut group = String::from("misc");
    let mut out = Vec::new();
    for (i, raw) in src.lines().enumerate() {
        let line = i + 1;
        let text = raw.trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        if let Some(rest) = text.strip_prefix("@level") {
            level = rest.trim().to_string();
            continue;
        }
        if let Some(rest) = text.strip_prefix("@group") {
            group = rest.trim().to_string();
            continue;
        }
        if text.starts_with("@refuse") {
            continue;
        }
        out.push(parse_function(line, text, &level, &group)?);
    }
    Ok(out)
}

fn err(line: usize, message: impl Into<String>) -> ParseError {
    ParseError { line, message: message.into() }
}

fn parse_function(line: usize, text: &str, level: &str, group: &str) -> Result<ParsedFunction, ParseError> {
    // The argument list's '(' follows a space (a disposition's parameter, `=local(RULE)`, does not).
    let open = text
        .char_indices()
        .find(|&(i, c)| c == '(' && text[..i].ends_with(char::is_whitespace))
        .map(|(i, _)| i)
        .ok_or_else(|| err(line, "missing ' (' before the arguments"))?;
    let close = matching_paren(text, open).ok_or_else(|| err(line, "unbalanced '(' in the argument list"))?;
    let tail = text.get(close + 1..).unwrap_or("").trim();
    let ret = if tail.is_empty() {
        None
    } else {
        let clause =
            tail.strip_prefix("->").ok_or_else(|| err(line, "line must end with ')' or a '-> RETURN' clause"))?;
        Some(parse_return(line, clause.trim())?)
    };
    let head = text.get(..open).unwrap_or("").trim();
    let body = text.get(open + 1..close).unwrap_or("");
    let mut head_words = head.split_whitespace();
    let spec = head_words.next().ok_or_else(|| err(line, "missing function name"))?;
    let sync = head_words.next().ok_or_else(|| err(line, "missing sync class"))?.to_string();
    let (mut stable, mut gpu, mut graph, mut checked) = (false, false, false, false);
    let mut disposition = None;
    for w in head_words {
        match w {
            "stable" if !stable && disposition.is_none() => stable = true,
            "gpu" if !gpu && disposition.is_none() => gpu = true,
            "graph" if !graph && disposition.is_none() => graph = true,
            "checked" if !checked && disposition.is_none() => checked = true,
            w if w.starts_with('=') && disposition.is_none() => disposition = Some(parse_disposition(line, w)?),
            w => {
                return Err(err(
                    line,
                    format!(
                    "unexpected word {w:?} before '(' (`stable`, `gpu`, `graph` and `checked` may follow the class, \
                         once each, then one disposition: `=local(RULE)`, `=server` or `=refused(REASON)`)"
                ),
                ))
            }
        }
    }
    let disposition = disposition
        .ok_or_else(|| err(line, "missing disposition before '(' (`=local(RULE)`, `=server` or `=refused(REASON)`)"))?;
    let (name, suffixes) = match spec.find('{') {
        Some(b) => {
            let list =
                spec.get(b + 1..).and_then(|s| s.strip_suffix('}')).ok_or_else(|| err(line, "unterminated '{'"))?;
            let suffixes: Vec<String> = list.split(',').map(|s| s.trim().to_string()).collect();
            (spec.get(..b).unwrap_or("").to_string(), suffixes)
        }
        None => (spec.to_string(), vec![String::new()]),
    };
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(err(line, format!("bad function name {name:?}")));
    }
    for s in &suffixes {
        if !s.is_empty() && !s.starts_with('_') {
            return Err(err(line, format!("suffix {s:?} must be empty or start with '_'")));
        }
    }
    let mut args = Vec::new();
    if !body.trim().is_empty() {
        for part in split_args(body) {
            args.push(parse_arg(line, part.trim())?);
        }
    }
    for a in &args {
        let refs: Vec<&String> = match a.kind.as_str() {
            "hostbuf" | "anybuf" => a.kind_params.iter().take(1).collect(),
            "structs" => a.kind_params.iter().skip(1).take(1).collect(),
            _ => Vec::new(),
        };
        for r in refs {
            let numeric = r.chars().all(|c| c.is_ascii_digit());
            if !numeric && !args.iter().any(|b| &b.name == r) {
                return Err(err(line, format!("argument {} refers to unknown argument {r}", a.name)));
            }
        }
    }
    Ok(ParsedFunction {
        line,
        name,
        suffixes,
        level: level.to_string(),
        group: group.to_string(),
        sync,
        stable,
        gpu,
        graph,
        checked,
        args,
        ret,
        disposition,
    })
}

/// `=local(RULE)`, `=server`, `=refused(REASON)`.
fn parse_disposition(line: usize, w: &str) -> Result<(String, String), ParseError> {
    let w = &w[1..];
    if w == "server" {
        return Ok(("server".into(), String::new()));
    }
    for kind in ["local", "refused"] {
        if let Some(p) = w.strip_prefix(kind).and_then(|r| r.strip_prefix('(')).and_then(|r| r.strip_suffix(')')) {
            if p.is_empty() || !p.chars().all(|c| c.is_ascii_alphanumeric()) {
                return Err(err(line, format!("bad {kind} parameter {p:?}")));
            }
            return Ok((kind.into(), p.to_string()));
        }
    }
    Err(err(line, format!("bad disposition {w:?} (`=local(RULE)`, `=server` or `=refused(REASON)`)")))
}

/// Index of the ')' that closes the '(' at `open`.
fn matching_paren(text: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text.char_indices().skip_while(|&(i, _)| i < open) {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// `void` or `KIND: C_TYPE` (kinds that read memory behind a pointer make no sense here).
fn parse_return(line: usize, text: &str) -> Result<ParsedReturn, ParseError> {
    if text == "void" {
        return Ok(ParsedReturn::Void);
    }
    let (kind, c_type) =
        text.split_once(':').ok_or_else(|| err(line, format!("return {text:?} must be 'void' or 'KIND: C_TYPE'")))?;
    // Checked like an `out` argument named `return`.
    let a = parse_arg(line, &format!("out {} return: {}", kind.trim(), c_type.trim()))?;
    if !RETURN_KINDS.contains(&a.kind.as_str()) {
        return Err(err(line, format!("kind {} cannot be returned (one of {RETURN_KINDS:?})", a.kind)));
    }
    Ok(ParsedReturn::Value { kind: a.kind, kind_params: a.kind_params, c_type: a.c_type })
}

/// Kinds a `-> KIND: C_TYPE` clause accepts: values that are the returned word itself.
pub const RETURN_KINDS: &[&str] = &["scalar", "flags", "enum", "count", "size", "devptr", "hostptr", "handle", "fnptr"];

/// Split on commas that are not inside parentheses.
fn split_args(body: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in body.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(body.get(start..i).unwrap_or(""));
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(body.get(start..).unwrap_or(""));
    parts
}

fn parse_arg(line: usize, text: &str) -> Result<ParsedArg, ParseError> {
    let colon = text.find(':').ok_or_else(|| err(line, format!("argument {text:?} lacks ': C_TYPE'")))?;
    let left = text.get(..colon).unwrap_or("");
    let c_type = text.get(colon + 1..).unwrap_or("").trim().to_string();
    let words: Vec<&str> = left.split_whitespace().collect();
    let [dir, kind_spec, name] = words.as_slice() else {
        return Err(err(line, format!("argument {text:?} must be 'DIR KIND NAME: C_TYPE'")));
    };
    if !DIRECTIONS.contains(dir) {
        return Err(err(line, format!("unknown direction {dir:?}")));
    }
    let (kind, kind_params) = match kind_spec.find('(') {
        Some(p) => {
            let inner = kind_spec
                .get(p + 1..)
                .and_then(|s| s.strip_suffix(')'))
                .ok_or_else(|| err(line, format!("bad kind {kind_spec:?}")))?;
            (kind_spec.get(..p).unwrap_or("").to_string(), inner.split(',').map(|s| s.trim().to_string()).collect())
        }
        None => (kind_spec.to_string(), Vec::new()),
    };
    let expected = KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, n)| *n)
        .ok_or_else(|| err(line, format!("unknown argument kind {kind:?}")))?;
    if kind_params.len() != expected {
        return Err(err(line, format!("kind {kind} takes {expected} parameter(s), got {kind_params:?}")));
    }
    if c_type.is_empty() {
        return Err(err(line, "empty C type"));
    }
    Ok(ParsedArg { dir: dir.to_string(), kind, kind_params, name: name.to_string(), c_type })
}

/// Split an exported symbol into its base name and [`suffix_variant`]'s (version, per-thread):
/// `cuMemcpyHtoDAsync_v2_ptsz` → (`cuMemcpyHtoDAsync`, 2, true), `cuMemAlloc` → (`cuMemAlloc`,
/// 1, false). Whether the base is modeled is the table's business.
pub fn split_symbol(symbol: &str) -> (&str, u8, bool) {
    let (rest, per_thread) = match symbol.strip_suffix("_ptsz").or_else(|| symbol.strip_suffix("_ptds")) {
        Some(r) => (r, true),
        None => (symbol, false),
    };
    match rest.rfind("_v") {
        Some(i) => match rest[i + 2..].parse::<u8>() {
            Ok(v) if v >= 2 => (&rest[..i], v, per_thread),
            _ => (rest, 1, per_thread),
        },
        None => (rest, 1, per_thread),
    }
}

/// Split a symbol suffix into (version, per-thread default stream).
///
/// `""` → (1, false), `"_v2"` → (2, false), `"_ptsz"` → (1, true), `"_v3_ptds"` → (3, true).
pub fn suffix_variant(suffix: &str) -> Option<(u8, bool)> {
    let (rest, per_thread) = if let Some(r) = suffix.strip_suffix("_ptsz") {
        (r, true)
    } else if let Some(r) = suffix.strip_suffix("_ptds") {
        (r, true)
    } else {
        (suffix, false)
    };
    if rest.is_empty() {
        return Some((1, per_thread));
    }
    let v: u8 = rest.strip_prefix("_v")?.parse().ok()?;
    if v < 2 {
        return None;
    }
    Some((v, per_thread))
}
