//! Kernel parameter layouts of PTX-only code images, from the entry declarations: each
//! `.param` is placed at the next offset aligned to its alignment (`.align N`, else its
//! element size), as the driver lays out a kernel's parameter buffer.

/// One `.entry` of a PTX module: its name and (offset, size) of each parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub name: String,
    pub params: Vec<(u32, u32)>,
}

/// Every `.entry` declared in `text`. Declarations that do not parse are left out (their
/// layout is then unknown, and a launch of them is not supported in client mode).
pub(crate) fn entries(text: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(".entry") {
        let after = &rest[at + ".entry".len()..];
        rest = after;
        // `.entry` must stand alone (not `.entry_foo`).
        if !after.starts_with(|c: char| c.is_whitespace()) {
            continue;
        }
        let body_start = after.find('{').unwrap_or(after.len());
        let Some(open) = after[..body_start].find('(') else {
            // An entry without parameters: `.entry name {`.
            let n = after[..body_start].trim();
            if !n.is_empty() && !n.contains(char::is_whitespace) {
                out.push(Entry { name: n.to_string(), params: Vec::new() });
            }
            continue;
        };
        let name = after[..open].trim();
        if name.is_empty() {
            continue;
        }
        let Some(close) = after[open..].find(')') else { break };
        let decls = &after[open + 1..open + close];
        if let Some(params) = layout(decls) {
            out.push(Entry { name: name.to_string(), params });
        }
        rest = &after[open + close..];
    }
    out
}

/// Module-scope variables declared in `text` (`.global` and `.const` state spaces, declared
/// outside any function): name and size in bytes (`.global .align 4 .u32 g;`, `.const .f32
/// c[16];`). Declarations that do not parse are left out.
pub(crate) fn globals(text: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("").trim();
        if depth == 0 {
            let mut toks = code.trim_end_matches(';').split_whitespace().peekable();
            // Linkage first: `.visible`, `.extern` (no storage here), `.weak`.
            let mut extern_ = false;
            while let Some(&t) = toks.peek() {
                match t {
                    ".visible" | ".weak" => {
                        toks.next();
                    }
                    ".extern" => {
                        extern_ = true;
                        toks.next();
                    }
                    _ => break,
                }
            }
            if !extern_ && matches!(toks.peek(), Some(&".global") | Some(&".const")) {
                toks.next();
                let (mut elem, mut name) = (None, None);
                for t in toks {
                    if t.starts_with(".align") || t.chars().all(|c| c.is_ascii_digit()) {
                        continue;
                    }
                    match t.strip_prefix('.') {
                        Some(ty) => elem = elem.or(width(ty)),
                        None => {
                            name = Some(t.split('=').next().unwrap_or(t).trim());
                            break;
                        }
                    }
                }
                if let (Some(w), Some(n)) = (elem, name) {
                    let (base, count) = match (n.find('['), n.find(']')) {
                        (Some(l), Some(r)) => (&n[..l], n.get(l + 1..r).and_then(|c| c.parse::<u64>().ok())),
                        _ => (n, Some(1)),
                    };
                    if let Some(count) = count.filter(|_| !base.is_empty()) {
                        out.push((base.to_string(), u64::from(w) * count));
                    }
                }
            }
        }
        depth += code.matches('{').count() as i32 - code.matches('}').count() as i32;
    }
    out
}

/// Offsets and sizes of a comma-separated parameter list.
fn layout(decls: &str) -> Option<Vec<(u32, u32)>> {
    let mut out = Vec::new();
    let mut off = 0u32;
    for d in decls.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let (size, align) = param(d)?;
        off = off.div_ceil(align) * align;
        out.push((off, size));
        off = off.checked_add(size)?;
    }
    Some(out)
}

/// Size and alignment of one `.param` declaration.
fn param(d: &str) -> Option<(u32, u32)> {
    let mut toks = d.split_whitespace().peekable();
    if toks.next()? != ".param" {
        return None;
    }
    let mut align: Option<u32> = None;
    let mut elem: Option<u32> = None;
    let mut count = 1u32;
    let mut ptr = false;
    while let Some(t) = toks.next() {
        if t == ".ptr" {
            ptr = true;
        } else if t == ".align" {
            align = Some(toks.next()?.parse().ok()?);
        } else if let Some(ty) = t.strip_prefix('.') {
            if let Some(w) = width(ty) {
                elem = Some(w);
            }
            // .global, .const, ... qualify a pointer: no effect on the layout.
        } else {
            // The name, possibly with an array length: `name[640]`.
            if let (Some(l), Some(r)) = (t.find('['), t.find(']')) {
                count = t.get(l + 1..r)?.parse().ok()?;
            }
        }
    }
    let elem = elem?;
    let size = elem.checked_mul(count)?;
    // After `.ptr`, `.align` is the pointee's alignment; the pointer itself is naturally aligned.
    let align = if ptr { elem } else { align.unwrap_or(elem).max(1) };
    Some((size, align))
}

fn width(ty: &str) -> Option<u32> {
    Some(match ty {
        "b8" | "u8" | "s8" => 1,
        "b16" | "u16" | "s16" | "f16" | "bf16" => 2,
        "b32" | "u32" | "s32" | "f32" | "f16x2" | "bf16x2" => 4,
        "b64" | "u64" | "s64" | "f64" => 8,
        "b128" => 16,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_globals_and_constants() {
        let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n\
                   .visible .global .align 4 .u32 g_val;\n\
                   .global .align 8 .b8 g_arr[24];\n\
                   .const .align 4 .f32 c_tab[16] = {0f00000000};\n\
                   .extern .global .align 4 .u32 elsewhere;\n\
                   .visible .entry fill(\n.param .u64 p\n)\n{\n.local .align 4 .u32 l;\n.reg .b32 r;\nret;\n}\n";
        assert_eq!(globals(ptx), vec![("g_val".to_string(), 4), ("g_arr".to_string(), 24), ("c_tab".to_string(), 64)]);
    }

    #[test]
    fn scalars_pointers_and_aligned_arrays() {
        let text = ".version 8.0\n.target sm_90\n.visible .entry scale(\n\t.param .u64 scale_param_0,\n\t.param .f32 \
                    scale_param_1,\n\t.param .u32 scale_param_2\n)\n{\n\tret;\n}\n.visible .entry wide(.param .u64 .ptr \
                    .global .align 4 a, .param .u8 b, .param .align 8 .b8 meta[640])\n{ ret; }\n.entry none\n{ ret; }\n";
        let e = entries(text);
        assert_eq!(e.len(), 3, "{e:?}");
        assert_eq!(e[0], Entry { name: "scale".into(), params: vec![(0, 8), (8, 4), (12, 4)] });
        // `.align 4` after `.ptr` is the pointee's: the pointer stays 8-aligned.
        assert_eq!(e[1].params, vec![(0, 8), (8, 1), (16, 640)]);
        assert_eq!(e[2], Entry { name: "none".into(), params: vec![] });
        let k = entries(".entry k(.param .u32 n, .param .u64 .ptr .align 4 p)\n{ ret; }");
        assert_eq!(k[0].params, vec![(0, 4), (8, 8)]);
    }

    #[test]
    fn arbitrary_text_never_panics() {
        // Fragments of entry declarations shuffled by a fixed generator: every parse ends
        // without a panic, whatever it finds.
        let parts = [
            ".entry", " k", "(", ")", ",", ".param", " .u64", " .b8", " x[", "]", "640", " .align", " 8", "{", "}",
            "\n", " .ptr", "é", "\0",
        ];
        let mut x = 0x9e37_79b9_u64;
        for _ in 0..20_000 {
            let mut t = String::new();
            for _ in 0..(x % 24) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                t.push_str(parts[(x % parts.len() as u64) as usize]);
            }
            x = x.wrapping_add(1);
            let _ = entries(&t);
        }
    }

    #[test]
    fn garbage_is_left_out() {
        assert!(entries(".entry broken( .param .weird x )").is_empty());
        assert!(entries("no entries here").is_empty());
        assert!(entries(".entry").is_empty());
    }
}
