//! Names: of members, of the hub namespace prefix, of each member's hub namespace.

use std::collections::BTreeMap;

/// The hub namespace prefix fleet-networking uses: member `m`'s exports go to `fleet-member-m`.
pub const DEFAULT_NAMESPACE_PREFIX: &str = "fleet-member-";

/// At most `max` lower-case letters, digits and '-', not starting with '-'.
fn label_like(s: &str, max: usize) -> bool {
    s.len() <= max
        && !s.starts_with('-')
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// A DNS-1123 label: 1–63 lower-case alphanumerics or '-', starting and ending alphanumeric.
pub fn validate_member_name(name: &str) -> Result<(), String> {
    (!name.is_empty() && !name.ends_with('-') && label_like(name, 63))
        .then_some(())
        .ok_or_else(|| format!(
            "invalid member name {name:?}: must be a DNS-1123 label (lower-case letters, digits and '-', at most 63, starting and ending with a letter or digit)"
        ))
}

/// `--hub-namespace-prefix`: empty, or the start of a DNS-1123 label (lower-case letters,
/// digits and '-', starting with a letter or digit) that leaves room for a member name.
pub fn validate_namespace_prefix(prefix: &str) -> Result<(), String> {
    label_like(prefix, 62).then_some(()).ok_or_else(|| format!(
        "invalid hub namespace prefix {prefix:?}: lower-case letters, digits and '-', not starting with '-', at most 62 characters"
    ))
}

/// `<prefix><member>`, unvalidated: only for a member that was validated before
/// ([`hub_namespace`]) or may not have been (its cleanup record).
pub fn namespace_of(prefix: &str, member: &str) -> String {
    format!("{prefix}{member}")
}

/// The hub namespace of `member`: `<prefix><member>`, which must be a valid namespace name
/// (a DNS-1123 label of at most 63 characters).
pub fn hub_namespace(prefix: &str, member: &str) -> Result<String, String> {
    let ns = namespace_of(prefix, member);
    if ns.len() > 63 {
        return Err(format!(
            "hub namespace {ns:?} of member {member:?} is longer than 63 characters: shorten the member name or --hub-namespace-prefix"
        ));
    }
    validate_member_name(&ns).map_err(|e| format!("hub namespace of member {member:?}: {e}"))?;
    Ok(ns)
}

/// The hub namespace of each member named in `members` (each with its `hubNamespace` setting,
/// if any): that setting when given (it must be a valid namespace name), else
/// `<prefix><member>` ([`hub_namespace`]). A namespace two members would share is refused for
/// both, each naming the other: one member's writes must never land in another's namespace.
pub fn hub_namespaces<'a>(
    prefix: &str,
    members: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> BTreeMap<String, Result<String, String>> {
    let mut namespaces: BTreeMap<String, Result<String, String>> = members
        .into_iter()
        .map(|(member, setting)| {
            let ns = match setting {
                Some(ns) => validate_member_name(ns)
                    .map(|()| ns.to_string())
                    .map_err(|e| {
                        let e = e.replace("member name", "namespace");
                        format!("hubNamespace of member {member:?} in the member config: {e}")
                    }),
                None => hub_namespace(prefix, member),
            };
            (member.to_string(), ns)
        })
        .collect();
    let mut users: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (member, ns) in &namespaces {
        if let Ok(ns) = ns {
            users.entry(ns.clone()).or_default().push(member.clone());
        }
    }
    for (ns, sharing) in users.into_iter().filter(|(_, m)| m.len() > 1) {
        for member in &sharing {
            let others: Vec<&str> = sharing
                .iter()
                .filter(|m| *m != member)
                .map(String::as_str)
                .collect();
            namespaces.insert(
                member.clone(),
                Err(format!(
                    "hub namespace {ns:?} of member {member:?} is also the one of {}: refused",
                    others.join(", ")
                )),
            );
        }
    }
    namespaces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_namespaces_take_the_setting_and_refuse_a_shared_one() {
        let ns = hub_namespaces(
            "fleet-member-",
            [
                ("a", None),
                ("b", Some("team-b")),
                ("c", Some("fleet-member-a")),
                ("d", Some("Not_A_Label")),
            ],
        );
        assert_eq!(ns["b"].as_deref(), Ok("team-b"));
        let shared = ns["a"].as_ref().expect_err("a shares its namespace with c");
        assert!(
            shared.contains("\"fleet-member-a\"") && shared.contains('c'),
            "{shared}"
        );
        assert!(ns["c"].as_ref().is_err_and(|e| e.contains("of a")));
        let invalid = ns["d"].as_ref().expect_err("not a namespace name");
        assert!(
            invalid.contains("hubNamespace of member \"d\""),
            "{invalid}"
        );
    }

    #[test]
    fn prefix_and_hub_namespace_names() {
        assert!(validate_namespace_prefix(DEFAULT_NAMESPACE_PREFIX).is_ok());
        assert!(validate_namespace_prefix("").is_ok());
        for bad in ["Fleet-", "-x", "a_b-", "a.b-", &"x".repeat(63)] {
            assert!(validate_namespace_prefix(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            hub_namespace(DEFAULT_NAMESPACE_PREFIX, "m1").as_deref(),
            Ok("fleet-member-m1")
        );
        let long = "m".repeat(51);
        assert!(
            hub_namespace(DEFAULT_NAMESPACE_PREFIX, &long)
                .is_err_and(|e| e.contains("longer than 63"))
        );
        assert!(hub_namespace(DEFAULT_NAMESPACE_PREFIX, &"m".repeat(50)).is_ok());
    }
}
