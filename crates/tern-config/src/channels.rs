//! `[channels]`: the chat channels the gateway connects to — `[[channels.telegram]]` bots
//! and `[[channels.matrix]]` accounts (see `docs/channels.md`), checked when the file is
//! loaded.
//!
//! A channel's secret (the bot token, the access token) is given inline, as the name of an
//! environment variable, or as a file; [`TelegramChannelConfig::resolve_secret`] and
//! [`MatrixChannelConfig::resolve_secret`] read it when the gateway starts the channel, so
//! a missing variable or unreadable file is reported then, naming the channel. An inline
//! secret is never shown whole: not in `Debug`, not by `tern config show` ([`ChannelSecret`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::address::is_http_url;
use crate::duration::parse_duration;
use crate::env::env_value;
use crate::error::ConfigError;
use crate::mask::{mask_secret, mask_url};

/// The default of a Telegram channel's `api_url`.
pub const TELEGRAM_API_URL: &str = "https://api.telegram.org";
/// The longest `poll_timeout` (a long poll held open longer is more likely cut by a proxy or
/// NAT on the way).
pub const MAX_POLL_TIMEOUT: Duration = Duration::from_secs(600);

/// `[channels]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChannelsConfig {
    /// `[[channels.telegram]]`: Telegram bots, through the Bot API's long polling.
    pub telegram: Vec<TelegramChannelConfig>,
    /// `[[channels.matrix]]`: Matrix accounts, through the client-server API's `/sync`.
    pub matrix: Vec<MatrixChannelConfig>,
}

impl ChannelsConfig {
    /// The files channel secrets are read from (`token_file`, `access_token_file`), as
    /// resolved: the sandbox keeps them out of the agent's reach, like `$TERN_HOME`.
    pub fn secret_files(
        &self,
        home_dir: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Vec<PathBuf> {
        self.telegram
            .iter()
            .filter_map(|t| t.token_file.as_deref())
            .chain(
                self.matrix
                    .iter()
                    .filter_map(|m| m.access_token_file.as_deref()),
            )
            .map(|f| expand_path(f.trim(), home_dir, env))
            .collect()
    }

    /// The environment variables channel secrets are read from (`token_env`,
    /// `access_token_env`): the sandbox removes them from the agent's commands whatever
    /// their names.
    pub fn secret_env_names(&self) -> Vec<String> {
        self.telegram
            .iter()
            .filter_map(|t| t.token_env.as_deref())
            .chain(
                self.matrix
                    .iter()
                    .filter_map(|m| m.access_token_env.as_deref()),
            )
            .map(|v| v.trim().to_owned())
            .collect()
    }

    /// Whether any channel has its secret inline in `config.toml` (which then should not
    /// be readable by others).
    pub fn has_inline_secret(&self) -> bool {
        self.telegram.iter().any(|t| t.token.is_some())
            || self.matrix.iter().any(|m| m.access_token.is_some())
    }
}

/// A token or access token written in `config.toml`, never shown whole.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct ChannelSecret(pub String);

impl ChannelSecret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ChannelSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&mask_secret(&self.0))
    }
}

/// `progress`: which tool progress messages a chat gets during a turn (Hermes's
/// `HERMES_TOOL_PROGRESS_MODE`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProgressMode {
    /// None.
    Off,
    /// One when the tool changes.
    #[default]
    New,
    /// One for every tool call.
    All,
}

/// One `[[channels.telegram]]`: a Telegram bot.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TelegramChannelConfig {
    /// The channel's name, unique among channels (`[a-z0-9_-]`): what the store, logs and
    /// `tern channels status` call it.
    #[serde(default = "default_telegram_name")]
    pub name: String,
    /// The bot token from @BotFather (or `token_env`, or `token_file`: exactly one).
    #[serde(default)]
    pub token: Option<ChannelSecret>,
    /// The environment variable holding the token.
    #[serde(default)]
    pub token_env: Option<String>,
    /// A file holding the token (a trailing newline is ignored); relative to tern's home.
    #[serde(default)]
    pub token_file: Option<String>,
    /// The Bot API server: Telegram's, or a self-hosted one (or a test's).
    #[serde(default = "default_telegram_api_url")]
    pub api_url: String,
    /// Telegram user ids (numbers) who may talk to the agent without pairing.
    #[serde(default, deserialize_with = "user_ids")]
    pub allowed_users: Vec<String>,
    /// Telegram user id → inbox reviewer name: who may decide approvals from the chat.
    #[serde(default)]
    pub reviewers: BTreeMap<String, String>,
    #[serde(default)]
    pub progress: ProgressMode,
    /// How long one `getUpdates` long poll waits for news, e.g. `"50s"`.
    #[serde(default = "default_telegram_poll_timeout")]
    pub poll_timeout: String,
    #[serde(default = "default_true")]
    pub enabled: bool,
}

/// One `[[channels.matrix]]`: a Matrix account the agent speaks through.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MatrixChannelConfig {
    /// The channel's name, unique among channels (`[a-z0-9_-]`).
    #[serde(default = "default_matrix_name")]
    pub name: String,
    /// The homeserver's client-server API base, e.g. `https://matrix.example.org`.
    pub homeserver: String,
    /// The account's full id, `@bot:example.org`.
    pub user_id: String,
    /// The account's access token (or `access_token_env`, or `access_token_file`: exactly
    /// one).
    #[serde(default)]
    pub access_token: Option<ChannelSecret>,
    #[serde(default)]
    pub access_token_env: Option<String>,
    /// Relative to tern's home; a trailing newline is ignored.
    #[serde(default)]
    pub access_token_file: Option<String>,
    /// Matrix ids (`@alice:example.org`) who may talk to the agent without pairing.
    #[serde(default)]
    pub allowed_users: Vec<String>,
    /// Matrix id → inbox reviewer name.
    #[serde(default)]
    pub reviewers: BTreeMap<String, String>,
    #[serde(default)]
    pub progress: ProgressMode,
    /// How long one `/sync` long poll waits for news, e.g. `"30s"`.
    #[serde(default = "default_matrix_poll_timeout")]
    pub poll_timeout: String,
    #[serde(default = "default_true")]
    pub enabled: bool,
}

fn default_telegram_name() -> String {
    "telegram".to_owned()
}

fn default_matrix_name() -> String {
    "matrix".to_owned()
}

fn default_telegram_api_url() -> String {
    TELEGRAM_API_URL.to_owned()
}

fn default_telegram_poll_timeout() -> String {
    "50s".to_owned()
}

fn default_matrix_poll_timeout() -> String {
    "30s".to_owned()
}

fn default_true() -> bool {
    true
}

/// `allowed_users`: Telegram's numeric ids may be written as numbers or as text.
fn user_ids<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct UserId(String);
    impl<'de> Deserialize<'de> for UserId {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Visitor;
            impl serde::de::Visitor<'_> for Visitor {
                type Value = UserId;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a user id (a number, or a string)")
                }
                fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<UserId, E> {
                    Ok(UserId(v.to_string()))
                }
                fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<UserId, E> {
                    Ok(UserId(v.to_string()))
                }
                fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<UserId, E> {
                    Ok(UserId(v.trim().to_owned()))
                }
            }
            d.deserialize_any(Visitor)
        }
    }
    let ids: Vec<UserId> = Vec::deserialize(d)?;
    Ok(ids.into_iter().map(|UserId(id)| id).collect())
}

impl TelegramChannelConfig {
    /// `poll_timeout` as a duration (checked when the file is loaded).
    pub fn poll_timeout(&self) -> Duration {
        parse_duration(&self.poll_timeout).unwrap_or(Duration::from_secs(50))
    }

    /// `api_url` without a trailing slash.
    pub fn api_url(&self) -> &str {
        self.api_url.trim().trim_end_matches('/')
    }

    /// The bot token, from `token`, the variable `token_env` names (read through `env`), or
    /// `token_file` (relative to `home_dir`, `~/` the user's home). An unset or empty
    /// variable, an unreadable or empty file: an error naming the channel and the key.
    pub fn resolve_secret(
        &self,
        home_dir: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<String, ConfigError> {
        resolve(
            &Secrets {
                array: "channels.telegram",
                name: &self.name,
                key: "token",
                inline: self.token.as_ref(),
                env_var: self.token_env.as_deref(),
                file: self.token_file.as_deref(),
            },
            home_dir,
            env,
        )
    }
}

impl MatrixChannelConfig {
    /// `poll_timeout` as a duration (checked when the file is loaded).
    pub fn poll_timeout(&self) -> Duration {
        parse_duration(&self.poll_timeout).unwrap_or(Duration::from_secs(30))
    }

    /// `homeserver` without a trailing slash.
    pub fn homeserver(&self) -> &str {
        self.homeserver.trim().trim_end_matches('/')
    }

    /// The access token, as [`TelegramChannelConfig::resolve_secret`] reads the bot token.
    pub fn resolve_secret(
        &self,
        home_dir: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<String, ConfigError> {
        resolve(
            &Secrets {
                array: "channels.matrix",
                name: &self.name,
                key: "access_token",
                inline: self.access_token.as_ref(),
                env_var: self.access_token_env.as_deref(),
                file: self.access_token_file.as_deref(),
            },
            home_dir,
            env,
        )
    }
}

/// The three ways one channel's secret can be given.
struct Secrets<'a> {
    array: &'static str,
    name: &'a str,
    key: &'static str,
    inline: Option<&'a ChannelSecret>,
    env_var: Option<&'a str>,
    file: Option<&'a str>,
}

impl Secrets<'_> {
    fn given(&self) -> usize {
        usize::from(self.inline.is_some())
            + usize::from(self.env_var.is_some())
            + usize::from(self.file.is_some())
    }
}

fn resolve(
    s: &Secrets<'_>,
    home_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    let (array, name, key) = (s.array, s.name, s.key);
    let invalid = |what: String| ConfigError::Invalid(format!("[[{array}]] {name:?}: {what}"));
    if s.given() != 1 {
        return Err(invalid(format!(
            "set exactly one of {key}, {key}_env and {key}_file"
        )));
    }
    if let Some(secret) = s.inline {
        let secret = secret.expose().trim();
        if secret.is_empty() {
            return Err(invalid(format!("{key} is empty")));
        }
        return Ok(secret.to_owned());
    }
    if let Some(var) = s.env_var {
        return env_value(env, var.trim()).ok_or_else(|| {
            invalid(format!(
                "{key}_env names {var}, which is not set (or is empty) in the environment"
            ))
        });
    }
    let file = s.file.unwrap_or_default();
    let path = expand_path(file.trim(), home_dir, env);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| invalid(format!("cannot read {key}_file {}: {e}", path.display())))?;
    let secret = text.trim();
    if secret.is_empty() {
        return Err(invalid(format!("{key}_file {} is empty", path.display())));
    }
    Ok(secret.to_owned())
}

/// `~/x` in the user's home (`$HOME`), a relative path in tern's home.
fn expand_path(file: &str, home_dir: &Path, env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    if let Some(rest) = file.strip_prefix("~/")
        && let Some(home) = env_value(env, "HOME")
    {
        return Path::new(&home).join(rest);
    }
    home_dir.join(file)
}

/// How a validation error names an entry: `[[channels.telegram]] #2 api_url in PATH`.
fn origin(config_path: &Path, array: &str, index: usize, field: &str) -> String {
    format!(
        "[[{array}]] #{} {field} in {}",
        index + 1,
        config_path.display()
    )
}

fn is_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

fn is_telegram_user(id: &str) -> bool {
    !id.is_empty() && id.len() <= 20 && id.bytes().all(|b| b.is_ascii_digit())
}

/// `@localpart:server`, as Matrix spells a user id.
fn is_matrix_user(id: &str) -> bool {
    id.strip_prefix('@')
        .and_then(|rest| rest.split_once(':'))
        .is_some_and(|(local, server)| {
            !local.is_empty()
                && !server.is_empty()
                && !id.chars().any(|c| c.is_whitespace() || c.is_control())
        })
}

/// The checks shared by both kinds of entry.
struct Entry<'a> {
    array: &'static str,
    index: usize,
    name: &'a str,
    secrets: Secrets<'a>,
    allowed_users: &'a [String],
    reviewers: &'a BTreeMap<String, String>,
    poll_timeout: &'a str,
    user_ok: fn(&str) -> bool,
    user_form: &'static str,
}

fn validate_entry(e: &Entry<'_>, path: &Path) -> Result<(), ConfigError> {
    let at = |field: &str| origin(path, e.array, e.index, field);
    let invalid = |text: String| Err(ConfigError::Invalid(text));
    if !is_name(e.name) {
        return invalid(format!(
            "{} must be 1 to 32 characters from a-z, 0-9, _ and - (got {:?})",
            at("name"),
            e.name
        ));
    }
    let key = e.secrets.key;
    if e.secrets.given() != 1 {
        return invalid(format!(
            "[[{}]] #{} in {}: set exactly one of {key}, {key}_env and {key}_file (got {})",
            e.array,
            e.index + 1,
            path.display(),
            e.secrets.given()
        ));
    }
    if e.secrets
        .inline
        .is_some_and(|s| s.expose().trim().is_empty())
    {
        return invalid(format!("{} is empty", at(key)));
    }
    if let Some(var) = e.secrets.env_var {
        let var = var.trim();
        if var.is_empty() || var.contains(['=', '\0']) || var.contains(char::is_whitespace) {
            return invalid(format!(
                "{} must name an environment variable (got {var:?})",
                at(&format!("{key}_env"))
            ));
        }
    }
    if e.secrets.file.is_some_and(|f| f.trim().is_empty()) {
        return invalid(format!("{} is empty", at(&format!("{key}_file"))));
    }
    for user in e.allowed_users {
        if !(e.user_ok)(user) {
            return invalid(format!(
                "{}: {user:?} is not a user id ({})",
                at("allowed_users"),
                e.user_form
            ));
        }
    }
    for (user, reviewer) in e.reviewers {
        if !(e.user_ok)(user) {
            return invalid(format!(
                "{}: {user:?} is not a user id ({})",
                at("reviewers"),
                e.user_form
            ));
        }
        if reviewer.trim().is_empty() {
            return invalid(format!(
                "{}: the reviewer of {user:?} is empty (an inbox reviewer's name)",
                at("reviewers")
            ));
        }
    }
    match parse_duration(e.poll_timeout) {
        Ok(d) if d > MAX_POLL_TIMEOUT => invalid(format!(
            "{} must be at most 10m (got {:?})",
            at("poll_timeout"),
            e.poll_timeout
        )),
        Ok(_) => Ok(()),
        Err(problem) => invalid(format!("{}: {problem}", at("poll_timeout"))),
    }
}

pub(crate) fn validate_channels(c: &ChannelsConfig, path: &Path) -> Result<(), ConfigError> {
    let mut names = BTreeSet::new();
    for (i, t) in c.telegram.iter().enumerate() {
        let array = "channels.telegram";
        validate_entry(
            &Entry {
                array,
                index: i,
                name: &t.name,
                secrets: Secrets {
                    array,
                    name: &t.name,
                    key: "token",
                    inline: t.token.as_ref(),
                    env_var: t.token_env.as_deref(),
                    file: t.token_file.as_deref(),
                },
                allowed_users: &t.allowed_users,
                reviewers: &t.reviewers,
                poll_timeout: &t.poll_timeout,
                user_ok: is_telegram_user,
                user_form: "Telegram's are numbers, e.g. 123456789",
            },
            path,
        )?;
        if !is_http_url(t.api_url.trim()) {
            return Err(ConfigError::Invalid(format!(
                "{} is not a URL: {:?} (it must start with http:// or https://)",
                origin(path, array, i, "api_url"),
                mask_url(&t.api_url)
            )));
        }
        unique(&mut names, &t.name, origin(path, array, i, "name"))?;
    }
    for (i, m) in c.matrix.iter().enumerate() {
        let array = "channels.matrix";
        validate_entry(
            &Entry {
                array,
                index: i,
                name: &m.name,
                secrets: Secrets {
                    array,
                    name: &m.name,
                    key: "access_token",
                    inline: m.access_token.as_ref(),
                    env_var: m.access_token_env.as_deref(),
                    file: m.access_token_file.as_deref(),
                },
                allowed_users: &m.allowed_users,
                reviewers: &m.reviewers,
                poll_timeout: &m.poll_timeout,
                user_ok: is_matrix_user,
                user_form: "Matrix's are @name:server",
            },
            path,
        )?;
        if !is_http_url(m.homeserver.trim()) {
            return Err(ConfigError::Invalid(format!(
                "{} is not a URL: {:?} (it must start with http:// or https://, e.g. https://matrix.example.org)",
                origin(path, array, i, "homeserver"),
                mask_url(&m.homeserver)
            )));
        }
        if !is_matrix_user(m.user_id.trim()) {
            return Err(ConfigError::Invalid(format!(
                "{} is not a Matrix user id: {:?} (e.g. @bot:example.org)",
                origin(path, array, i, "user_id"),
                m.user_id
            )));
        }
        unique(&mut names, &m.name, origin(path, array, i, "name"))?;
    }
    Ok(())
}

fn unique(names: &mut BTreeSet<String>, name: &str, at: String) -> Result<(), ConfigError> {
    if names.insert(name.to_owned()) {
        return Ok(());
    }
    Err(ConfigError::Invalid(format!(
        "{at}: another channel is already named {name:?}; give each a name of its own \
         (name = \"…\"; the default is the platform's)"
    )))
}

#[cfg(test)]
mod tests;
