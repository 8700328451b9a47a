//! Who a client is: the tenant whose token it presents. With one shared `token` every client
//! is the same tenant (named `""`); with `tenants` (name → token, in the configuration or a
//! `tenants_file` of `NAME TOKEN` lines) the server tells them apart, and what one tenant's
//! sessions leave on the GPU for the next session of their program (warm constants) is handed
//! only to the same tenant's sessions.

use std::collections::BTreeMap;

/// The tenants a server knows: (name, token), and the shared token (tenant `""`), if any.
#[derive(Debug, Clone, Default)]
pub struct Tenants {
    named: Vec<(String, String)>,
    shared: String,
}

impl Tenants {
    /// `named` (name → token) and the shared `token` ("": none). Checks that every name and
    /// token is given, and that no token is two tenants' (it would not say who a client is).
    pub fn new(named: &BTreeMap<String, String>, shared: &str) -> Result<Tenants, String> {
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        if !shared.is_empty() {
            seen.insert(shared, "the shared `token`");
        }
        for (name, token) in named {
            // A tenant's functions live in a directory of its name (`functions::Registry`).
            if super::functions::check_name(name).is_err() {
                return Err(format!(
                    "tenant name {name:?}: a name is 1 to {} of the characters A-Z a-z 0-9 . _ - (and not `.` or `..`)",
                    super::functions::MAX_NAME
                ));
            }
            if token.is_empty() {
                return Err(format!("tenant `{name}` has no token"));
            }
            if let Some(other) = seen.insert(token, name) {
                return Err(format!("tenant `{name}` has the same token as {other}: give each its own"));
            }
        }
        let named = named.iter().map(|(n, t)| (n.clone(), t.clone())).collect();
        Ok(Tenants { named, shared: shared.to_string() })
    }

    /// Whether a client must present a token.
    pub fn any(&self) -> bool {
        !self.shared.is_empty() || !self.named.is_empty()
    }

    /// The tenant whose token `presented` is: its name (`""` for the shared token, or for a
    /// client presenting none when no token is set), or `None` when it is no tenant's. Every
    /// token is compared whole, in constant time, whatever matches.
    pub fn identify(&self, presented: &str) -> Option<String> {
        if !self.any() {
            return presented.is_empty().then(String::new);
        }
        let mut found = None;
        if !self.shared.is_empty() && super::token_matches(presented, &self.shared) {
            found = Some(String::new());
        }
        for (name, token) in &self.named {
            if super::token_matches(presented, token) {
                found = Some(name.clone());
            }
        }
        found
    }
}

/// Reads a tenants file: one `NAME TOKEN` per line; blank lines and lines starting with `#`
/// are skipped. Errors name the line.
pub fn parse_file(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(name), Some(token), None) = (words.next(), words.next(), words.next()) else {
            return Err(format!("line {}: expected `NAME TOKEN`", i + 1));
        };
        if out.insert(name.to_string(), token.to_string()).is_some() {
            return Err(format!("line {}: tenant `{name}` is named twice", i + 1));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(n, t)| (n.to_string(), t.to_string())).collect()
    }

    #[test]
    fn a_token_says_which_tenant_a_client_is() {
        let t = Tenants::new(&named(&[("alice", "ta"), ("bob", "tb")]), "shared").unwrap();
        assert_eq!(t.identify("ta").as_deref(), Some("alice"));
        assert_eq!(t.identify("tb").as_deref(), Some("bob"));
        assert_eq!(t.identify("shared").as_deref(), Some(""));
        assert_eq!(t.identify("t"), None, "a prefix is no token");
        assert_eq!(t.identify(""), None);
        // Without any token, every client presenting none is the one tenant "".
        assert_eq!(Tenants::default().identify("").as_deref(), Some(""));
        assert_eq!(Tenants::default().identify("anything"), None);
        // Tenants only: the shared token is not a way in.
        let only = Tenants::new(&named(&[("alice", "ta")]), "").unwrap();
        assert_eq!(only.identify(""), None);
    }

    #[test]
    fn names_and_tokens_must_tell_tenants_apart() {
        let e = Tenants::new(&named(&[("alice", "same"), ("bob", "same")]), "").unwrap_err();
        assert!(e.contains("same token"), "{e}");
        let e = Tenants::new(&named(&[("alice", "s")]), "s").unwrap_err();
        assert!(e.contains("shared"), "{e}");
        assert!(Tenants::new(&named(&[("alice", "")]), "").unwrap_err().contains("no token"));
        assert!(Tenants::new(&named(&[("a b", "t")]), "").is_err());
    }

    #[test]
    fn the_file_has_a_tenant_a_line() {
        let m = parse_file("# who may use this server\nalice ta\n\n  bob   tb  \n").unwrap();
        assert_eq!(m, named(&[("alice", "ta"), ("bob", "tb")]));
        assert!(parse_file("alice\n").unwrap_err().contains("line 1"));
        assert!(parse_file("alice ta extra\n").unwrap_err().contains("line 1"));
        assert!(parse_file("alice ta\nalice tb\n").unwrap_err().contains("line 2: tenant `alice` is named twice"));
    }
}
