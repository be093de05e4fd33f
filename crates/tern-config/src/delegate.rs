//! `[delegate]`: the child sessions of `delegate_task` (the `delegate` toolset).

use serde::{Deserialize, Serialize};

/// `[delegate]`: limits of the sessions an agent hands tasks to. Each is at least 1
/// (checked with the other sections' numbers, [`crate::validate`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DelegateConfig {
    /// Model calls a child may make in its turn before it stops with a message.
    pub max_iterations: u32,
    /// Children of one model answer that run at once; the others wait for a place.
    pub max_concurrent: usize,
    /// How deep sessions nest: 1 (the default) lets the agent delegate but not its
    /// children; 2 lets children delegate once more.
    pub max_depth: u32,
}

impl Default for DelegateConfig {
    fn default() -> Self {
        DelegateConfig {
            max_iterations: 30,
            max_concurrent: 3,
            max_depth: 1,
        }
    }
}

impl DelegateConfig {
    /// The limits that must be at least 1, by key.
    pub(crate) fn at_least_one(&self) -> [(&'static str, u64); 3] {
        [
            ("delegate.max_iterations", u64::from(self.max_iterations)),
            (
                "delegate.max_concurrent",
                // usize always fits in u64 on supported targets; saturate rather than panic.
                u64::try_from(self.max_concurrent).unwrap_or(u64::MAX),
            ),
            ("delegate.max_depth", u64::from(self.max_depth)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;

    #[test]
    fn defaults_and_overrides() {
        let c: Config = toml::from_str("").unwrap();
        assert_eq!(c.delegate.max_iterations, 30);
        assert_eq!(c.delegate.max_concurrent, 3);
        assert_eq!(c.delegate.max_depth, 1);
        let c: Config = toml::from_str("[delegate]\nmax_concurrent = 5\nmax_depth = 2\n").unwrap();
        assert_eq!((c.delegate.max_concurrent, c.delegate.max_depth), (5, 2));
    }
}
