//! The environment variables tern reads, and how it reads them: through a lookup function
//! rather than `std::env::var`, so tests never depend on, or mutate, the process environment.

/// Environment variable naming the tern home directory.
pub const ENV_TERN_HOME: &str = "TERN_HOME";
/// Environment variable with the OpenAI-compatible endpoint.
pub const ENV_BASE_URL: &str = "OPENAI_BASE_URL";
/// Environment variable with the API key.
pub const ENV_API_KEY: &str = "OPENAI_API_KEY";
/// Environment variable with the model name.
pub const ENV_MODEL: &str = "TERN_MODEL";
/// The agent key of a remote inbox (`[inbox] key`).
pub const ENV_INBOX_KEY: &str = "TERN_INBOX_KEY";
/// Endpoint used when only an API key is given, matching the OpenAI SDK.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Reads `key` through `env`, treating empty or blank values as unset:
/// `FOO= tern` is a common way to "unset" a variable for one command.
pub(crate) fn env_value(env: &dyn Fn(&str) -> Option<String>, key: &str) -> Option<String> {
    env(key)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}
