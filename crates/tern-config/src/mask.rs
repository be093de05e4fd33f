//! How secrets and URLs with passwords are shown: in `Debug` output, error messages and
//! `tern config show`, never whole.

/// Masks a secret for display: the first 3 and last 4 characters of secrets
/// of 12 or more characters, e.g. `sk-…wxyz`; otherwise `****`, since showing
/// 7 characters of a short secret would reveal most of it.
pub fn mask_secret(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    if chars.len() >= 12 {
        let head: String = chars[..3].iter().collect();
        let tail: String = chars[chars.len() - 4..].iter().collect();
        format!("{head}…{tail}")
    } else {
        "****".to_owned()
    }
}

/// Masks the password of a URL's `user:password@` part, if any, for display.
pub fn mask_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rfind('@') {
        Some(at) => match authority[..at].find(':') {
            Some(colon) => format!(
                "{}{}:****{}",
                &url[..scheme_end],
                &authority[..colon],
                &rest[at..]
            ),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_secret_rules() {
        assert_eq!(mask_secret("sk-abcdefghijklmnop1234"), "sk-…1234");
        assert_eq!(mask_secret("abcdefghijkl"), "abc…ijkl");
        assert_eq!(mask_secret("abcdefghijk"), "****");
        assert_eq!(mask_secret(""), "****");
        // Counts characters, not bytes, so multi-byte input cannot split a char.
        assert_eq!(mask_secret("ééééééééééé1234"), "ééé…1234");
    }

    #[test]
    fn mask_url_rules() {
        assert_eq!(
            mask_url("https://x.example/a?b=c"),
            "https://x.example/a?b=c"
        );
        assert_eq!(mask_url("http://u:p@h/x"), "http://u:****@h/x");
        assert_eq!(mask_url("http://u@h/x"), "http://u@h/x");
        // An @ in the path is not userinfo.
        assert_eq!(mask_url("http://h/a:b@c"), "http://h/a:b@c");
        assert_eq!(mask_url("not a url"), "not a url");
    }
}
