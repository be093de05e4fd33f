//! `[gateway]`: the HTTP API server.

use serde::{Deserialize, Serialize};

use crate::duration::parse_duration;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// `HOST:PORT` to listen on. Loopback by default: the API runs agents with tools.
    pub listen: String,
    /// Turns running at once across all sessions; further turns wait.
    pub max_concurrent_turns: usize,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// On shutdown, how long running turns get to finish before they are interrupted.
    pub drain_timeout_secs: u64,
    /// A session idle this long (a duration such as `"24h"`) is reset: finalized, with an
    /// empty successor. `"off"` (the default) never. Sessions with running background
    /// processes, open waits or a running turn are exempt.
    pub idle_reset: String,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            listen: "127.0.0.1:8642".to_owned(),
            max_concurrent_turns: 16,
            max_body_bytes: 1_048_576,
            drain_timeout_secs: 30,
            idle_reset: "off".to_owned(),
        }
    }
}

impl GatewayConfig {
    /// `idle_reset` as a duration; `None` when off (checked when the file is loaded).
    pub fn idle_reset(&self) -> Option<std::time::Duration> {
        if self.idle_reset.trim() == "off" {
            return None;
        }
        parse_duration(&self.idle_reset).ok()
    }
}

#[cfg(test)]
mod tests {
    use crate::load;
    use crate::test_support::*;

    #[test]
    fn gateway_listen_accepts_hosts_and_ipv6() {
        let (_d, home) = temp_home();
        for listen in ["localhost:8642", "[::1]:8642", "0.0.0.0:0"] {
            write_config(&home, &format!("[gateway]\nlisten = \"{listen}\"\n"));
            let eff = load(&home, &no_env).unwrap();
            assert_eq!(eff.config.gateway.listen, listen);
        }
    }

    #[test]
    fn idle_reset_is_off_by_default_and_checked() {
        let (_d, home) = temp_home();
        assert_eq!(
            load(&home, &no_env).unwrap().config.gateway.idle_reset(),
            None
        );
        write_config(&home, "[gateway]\nidle_reset = \"2h\"\n");
        assert_eq!(
            load(&home, &no_env).unwrap().config.gateway.idle_reset(),
            Some(std::time::Duration::from_secs(7200))
        );
        write_config(&home, "[gateway]\nidle_reset = \"sometimes\"\n");
        let e = load(&home, &no_env).unwrap_err().to_string();
        assert!(e.contains("gateway.idle_reset"), "{e}");
    }
}
