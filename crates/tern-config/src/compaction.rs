//! `[compaction]`: when and how a session's transcript is compacted to stay within the
//! model's window (`[model] context_length`); see `docs/compaction.md`.

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// `[compaction]`: shares of the window as whole percents.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompactionConfig {
    /// Compact before a model call whose prompt would pass this share of the window.
    pub threshold_percent: u8,
    /// The share of the window the newest messages kept verbatim may take (at least the
    /// last exchange is kept, whatever its size).
    pub keep_recent_percent: u8,
    /// Older tool outputs longer than this (characters) are replaced by a short placeholder
    /// first; the full output stays in the store.
    pub elide_tool_output_chars: usize,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            threshold_percent: 80,
            keep_recent_percent: 25,
            elide_tool_output_chars: 2000,
        }
    }
}

impl CompactionConfig {
    /// Checks the shares; `origin` names where a key was set.
    pub(crate) fn validate(&self, origin: impl Fn(&str) -> String) -> Result<(), ConfigError> {
        if !(50..=95).contains(&self.threshold_percent) {
            return Err(ConfigError::Invalid(format!(
                "{} must be between 50 and 95 (got {}): below, the agent compacts all the time; \
                 above, a long answer no longer fits",
                origin("compaction.threshold_percent"),
                self.threshold_percent
            )));
        }
        if !(5..=50).contains(&self.keep_recent_percent) {
            return Err(ConfigError::Invalid(format!(
                "{} must be between 5 and 50 (got {})",
                origin("compaction.keep_recent_percent"),
                self.keep_recent_percent
            )));
        }
        if self.elide_tool_output_chars < 200 {
            return Err(ConfigError::Invalid(format!(
                "{} must be at least 200 (got {})",
                origin("compaction.elide_tool_output_chars"),
                self.elide_tool_output_chars
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::*;
    use crate::{Config, ConfigError, load};

    #[test]
    fn defaults_overrides_and_bounds() {
        let c: Config = toml::from_str("").unwrap();
        assert_eq!(c.compaction.threshold_percent, 80);
        assert_eq!(c.compaction.keep_recent_percent, 25);
        assert_eq!(c.compaction.elide_tool_output_chars, 2000);
        let (_d, home) = temp_home();
        write_config(&home, "[compaction]\nthreshold_percent = 70\n");
        assert_eq!(
            load(&home, &no_env)
                .unwrap()
                .config
                .compaction
                .threshold_percent,
            70
        );
        for (text, key) in [
            (
                "[compaction]\nthreshold_percent = 99\n",
                "compaction.threshold_percent",
            ),
            (
                "[compaction]\nkeep_recent_percent = 0\n",
                "compaction.keep_recent_percent",
            ),
            (
                "[compaction]\nelide_tool_output_chars = 10\n",
                "compaction.elide_tool_output_chars",
            ),
        ] {
            write_config(&home, text);
            let err = load(&home, &no_env).unwrap_err();
            assert!(matches!(err, ConfigError::Invalid(_)), "{err:?}");
            assert!(err.to_string().contains(key), "{text}: {err}");
        }
    }
}
