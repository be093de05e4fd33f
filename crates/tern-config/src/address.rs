//! Light checks of the addresses in the configuration: URLs and `HOST:PORT`.

/// Whether `url` starts with `http://` or `https://` (any case) and has something after it.
pub(crate) fn is_http_url(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))
        .is_some_and(|rest| !rest.is_empty())
}

/// Whether `addr` looks like `HOST:PORT` (`[::1]:PORT` for IPv6). Host names are allowed,
/// so this is not a full parse; binding reports anything subtler.
pub(crate) fn is_host_port(addr: &str) -> bool {
    match addr.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok(),
        None => false,
    }
}
