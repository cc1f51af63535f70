//! URLs as they may be printed: never the user info, query or fragment of a kubeconfig's
//! server or proxy, where a credential could sit.

const NOT_A_URL: &str = "<not a URL>";

/// The scheme and authority of `url` (query and fragment cut first), if it reads as a URL.
fn parts(url: &str) -> Option<(String, http::uri::Authority, String)> {
    let before = url.split(['?', '#']).next().unwrap_or_default();
    let uri = before.parse::<http::Uri>().ok()?;
    let scheme = uri.scheme_str()?.to_string();
    let authority = uri.authority()?.clone();
    Some((scheme, authority, uri.path().to_string()))
}

/// A proxy URL as it may be printed: `http://host:port` (or `http://host`), without user info
/// (the proxy's credentials), path, query or fragment; `<not a URL>` when it cannot be read as
/// one.
pub fn printable_proxy(proxy: &str) -> String {
    let Some((scheme, authority, _)) = parts(proxy) else {
        return NOT_A_URL.into();
    };
    match authority.port_u16() {
        Some(port) => format!("{scheme}://{}:{port}", authority.host()),
        None => format!("{scheme}://{}", authority.host()),
    }
}

/// A member's server URL as it may be printed: scheme, host, port and path, without user info,
/// query or fragment (where a secret could sit); `<not a URL>` when it cannot be read as one.
pub fn printable_server(server: &str) -> String {
    let Some((scheme, authority, path)) = parts(server) else {
        return NOT_A_URL.into();
    };
    let host = authority.as_str().rsplit('@').next().unwrap_or_default();
    format!("{scheme}://{host}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_printed_server_has_no_user_info_query_or_fragment() {
        for (server, printed) in [
            ("https://10.0.0.1", "https://10.0.0.1/"),
            ("https://10.0.0.1:6443/base", "https://10.0.0.1:6443/base"),
            (
                "https://u:SECRET@h.example.com:443/p?token=SECRET#SECRET",
                "https://h.example.com:443/p",
            ),
            ("https://h/?token=SECRET", "https://h/"),
            ("https://h#SECRET", "https://h/"),
            ("not a url SECRET", "<not a URL>"),
            ("SECRET", "<not a URL>"),
        ] {
            assert_eq!(printable_server(server), printed, "{server}");
        }
    }

    #[test]
    fn a_printed_proxy_is_scheme_host_and_port_only() {
        for (proxy, printed) in [
            (
                "http://proxy.example.com:3128",
                "http://proxy.example.com:3128",
            ),
            (
                "http://user:SECRET@proxy.example.com:3128/",
                "http://proxy.example.com:3128",
            ),
            ("http://user:SECRET@10.0.0.9", "http://10.0.0.9"),
            ("http://[fd00::1]:3128", "http://[fd00::1]:3128"),
            ("http://h:1/p?SECRET#SECRET", "http://h:1"),
            ("SECRET", "<not a URL>"),
        ] {
            assert_eq!(printable_proxy(proxy), printed, "{proxy}");
        }
    }
}
