//! `[delegate]`: the child sessions of `delegate_task` (the `delegate` toolset).

use std::num::{NonZeroU32, NonZeroUsize};

use serde::{Deserialize, Serialize};

/// `[delegate]`: limits of the sessions an agent hands tasks to. Zero is refused when the
/// file is read (each limit is a non-zero number).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DelegateConfig {
    /// Model calls a child may make in its turn before it stops with a message.
    pub max_iterations: NonZeroU32,
    /// Children of one model answer that run at once; the others wait for a place.
    pub max_concurrent: NonZeroUsize,
    /// How deep sessions nest: 1 (the default) lets the agent delegate but not its
    /// children; 2 lets children delegate once more.
    pub max_depth: NonZeroU32,
}

impl Default for DelegateConfig {
    fn default() -> Self {
        DelegateConfig {
            max_iterations: NonZeroU32::new(30).unwrap_or(NonZeroU32::MIN),
            max_concurrent: NonZeroUsize::new(3).unwrap_or(NonZeroUsize::MIN),
            max_depth: NonZeroU32::MIN,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    #[test]
    fn defaults_and_a_zero_refused() {
        let c: Config = toml::from_str("").unwrap();
        assert_eq!(c.delegate.max_iterations.get(), 30);
        assert_eq!(c.delegate.max_concurrent.get(), 3);
        assert_eq!(c.delegate.max_depth.get(), 1);
        let c: Config = toml::from_str("[delegate]\nmax_concurrent = 5\nmax_depth = 2\n").unwrap();
        assert_eq!(
            (c.delegate.max_concurrent.get(), c.delegate.max_depth.get()),
            (5, 2)
        );
        let e = toml::from_str::<Config>("[delegate]\nmax_concurrent = 0\n").unwrap_err();
        assert!(e.to_string().contains("max_concurrent"), "{e}");
    }
}
