//! `[memory]`: the `memory` tool's two stores of notes kept across sessions
//! (`$TERN_HOME/memory/USER.md` and `MEMORY.md`) and how large each may grow.

use serde::{Deserialize, Serialize};

/// `[memory]`: size limits of the memory stores, in characters (not tokens: a character count
/// does not depend on the model). The defaults are Hermes Agent's.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    /// `MEMORY.md`: the agent's notes about the environment and lessons learned.
    pub memory_char_limit: usize,
    /// `USER.md`: what the agent knows about the user.
    pub user_char_limit: usize,
}

/// Default of [`MemoryConfig::memory_char_limit`].
pub const DEFAULT_MEMORY_CHAR_LIMIT: usize = 2200;
/// Default of [`MemoryConfig::user_char_limit`].
pub const DEFAULT_USER_CHAR_LIMIT: usize = 1375;
/// Largest limit accepted: memory is in every system prompt.
pub const MAX_MEMORY_CHAR_LIMIT: usize = 100_000;

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            memory_char_limit: DEFAULT_MEMORY_CHAR_LIMIT,
            user_char_limit: DEFAULT_USER_CHAR_LIMIT,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::*;
    use crate::{ConfigError, load};

    #[test]
    fn memory_limits_have_defaults_and_are_checked() {
        let (_d, home) = temp_home();
        let eff = load(&home, &no_env).unwrap();
        assert_eq!(eff.config.memory.memory_char_limit, 2200);
        assert_eq!(eff.config.memory.user_char_limit, 1375);

        write_config(&home, "[memory]\nuser_char_limit = 500\n");
        let eff = load(&home, &no_env).unwrap();
        assert_eq!(eff.config.memory.user_char_limit, 500);
        assert_eq!(eff.config.memory.memory_char_limit, 2200);

        for bad in ["user_char_limit = 0", "memory_char_limit = 100001"] {
            write_config(&home, &format!("[memory]\n{bad}\n"));
            match load(&home, &no_env) {
                Err(ConfigError::Invalid(m)) => assert!(m.contains("[memory]"), "{m}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
