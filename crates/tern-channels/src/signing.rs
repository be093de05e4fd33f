//! Signed callback data: what an approval button carries, so that a tap can be trusted.
//!
//! A button's data comes back from the platform with the tap, and anyone able to send the
//! bot a callback could send any data. So the data names the approval post and the choice
//! ([`Tap`]) and carries an HMAC-SHA256 over them, the channel and the chat, keyed with a
//! secret only this tern home has ([`CallbackKey`], a 0600 file). Tampered data, data
//! made with another key and data for another chat are all refused by [`CallbackKey::verify`]
//! (the runtime still checks who tapped, and decides once through the inbox: a replayed tap
//! finds the request already decided).
//!
//! The data is `t1.<post id, base 36>.<choice>.<chat tag>.<mac>`, at most 48 bytes, well within
//! Telegram's 64:
//!
//! - `t1`: the format's version;
//! - the choice: a short token (`approve`, `reject`, `once`, …; `[a-z0-9_]`, ≤ 8 characters);
//! - the chat tag: 24 bits of an HMAC over the channel and chat, only so that data from
//!   another chat gets an error saying so ([`SigningError::OtherChat`]); it decides nothing;
//! - the mac: 96 bits of the HMAC over the version, channel, chat, post id and choice, each
//!   length-prefixed, compared in constant time (`hmac`'s `verify_truncated_left`).
//!
//! Every part must be in its one canonical spelling (lowercase base 36 without leading zeros,
//! unpadded base64url), so no two strings carry the same signed tap.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{KeyInit as _, Mac as _};
use subtle::ConstantTimeEq as _;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The bytes of a key.
pub const KEY_BYTES: usize = 32;
/// The longest choice token.
pub const MAX_CHOICE_CHARS: usize = 8;
/// The longest data [`CallbackKey::sign`] makes (the smallest post id and longest choice).
pub const MAX_DATA_BYTES: usize = 48;
// Telegram's limit on a button's callback data.
const _: () = assert!(MAX_DATA_BYTES <= 64);

const VERSION: &str = "t1";
/// Bytes of the MAC kept: 96 bits, 16 base64 characters.
const MAC_BYTES: usize = 12;
/// Bytes of the chat tag: 24 bits, 4 base64 characters.
const CHAT_TAG_BYTES: usize = 3;

#[derive(Debug, thiserror::Error)]
pub enum SigningError {
    #[error("cannot {action} the callback key file {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "the callback key file {} is malformed ({reason}); it is never replaced silently: \
         delete it to make a new key (buttons already posted then stop working)",
        path.display()
    )]
    MalformedKey { path: PathBuf, reason: String },
    #[error("no randomness for a callback key: {0}")]
    Random(String),
    #[error("{0:?} is not a button choice: 1 to {MAX_CHOICE_CHARS} characters from a-z, 0-9 and _")]
    InvalidChoice(String),
    /// The data is not of the form [`CallbackKey::sign`] makes.
    #[error("malformed callback data: {0}")]
    Malformed(&'static str),
    /// Well-formed, signed for another chat or with another key (or forged).
    #[error("the callback data was made for another chat (or with another key)")]
    OtherChat,
    /// Well-formed, for this chat, but the signature does not match: tampered with or made
    /// with another key.
    #[error("the callback data's signature does not match")]
    BadSignature,
}

/// What a tap on a signed button says: which approval post, which choice.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tap {
    /// The runtime's id of the approval post the button belongs to.
    pub post_id: i64,
    /// A short token: 1 to [`MAX_CHOICE_CHARS`] characters from `[a-z0-9_]` (data signed for
    /// any other choice never verifies; [`Tap::new`] checks).
    pub choice: String,
}

impl Tap {
    /// A tap with its choice checked.
    pub fn new(post_id: i64, choice: impl Into<String>) -> Result<Tap, SigningError> {
        let choice = choice.into();
        if !valid_choice(&choice) {
            return Err(SigningError::InvalidChoice(choice));
        }
        Ok(Tap { post_id, choice })
    }
}

fn valid_choice(choice: &str) -> bool {
    (1..=MAX_CHOICE_CHARS).contains(&choice.len())
        && choice
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The secret behind callback data: 32 random bytes, kept in a 0600 file of the tern home.
#[derive(Clone)]
pub struct CallbackKey([u8; KEY_BYTES]);

// By hand: a key never shows up in logs.
impl fmt::Debug for CallbackKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CallbackKey(…)")
    }
}

impl CallbackKey {
    /// A key of these bytes (for tests, and for keys kept elsewhere).
    pub fn from_bytes(bytes: [u8; KEY_BYTES]) -> Self {
        CallbackKey(bytes)
    }

    /// A new random key.
    pub fn generate() -> Result<Self, SigningError> {
        let mut bytes = [0u8; KEY_BYTES];
        getrandom::fill(&mut bytes).map_err(|e| SigningError::Random(e.to_string()))?;
        Ok(CallbackKey(bytes))
    }

    /// The key in `path` (hex, one line), or a new one written there (0600, atomically) when
    /// there is no such file. A file that is there but malformed is an error, never replaced:
    /// a new key would silently void every button already posted.
    pub fn load_or_create(path: &Path) -> Result<Self, SigningError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text).map_err(|reason| SigningError::MalformedKey {
                path: path.to_owned(),
                reason,
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let key = Self::generate()?;
                let text = format!("{}\n", hex::encode(key.0));
                tern_util::fs::write_private(path, text.as_bytes()).map_err(|source| {
                    SigningError::Io {
                        action: "write",
                        path: path.to_owned(),
                        source,
                    }
                })?;
                tracing::info!(path = %path.display(), "created the channels' callback key");
                Ok(key)
            }
            Err(source) => Err(SigningError::Io {
                action: "read",
                path: path.to_owned(),
                source,
            }),
        }
    }

    fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let bytes = hex::decode(text).map_err(|e| format!("not hex: {e}"))?;
        let bytes: [u8; KEY_BYTES] = bytes
            .try_into()
            .map_err(|b: Vec<u8>| format!("{} bytes, where a key has {KEY_BYTES}", b.len()))?;
        Ok(CallbackKey(bytes))
    }

    fn mac(&self) -> HmacSha256 {
        #[expect(
            clippy::expect_used,
            reason = "HMAC takes keys of any length (long ones are hashed first): this cannot fail"
        )]
        HmacSha256::new_from_slice(&self.0).expect("HMAC accepts keys of any length")
    }

    fn chat_tag(&self, channel: &str, chat_id: &str) -> [u8; CHAT_TAG_BYTES] {
        let mut mac = self.mac();
        for part in ["chat", channel, chat_id] {
            feed(&mut mac, part);
        }
        let full = mac.finalize().into_bytes();
        let mut tag = [0u8; CHAT_TAG_BYTES];
        tag.copy_from_slice(&full[..CHAT_TAG_BYTES]);
        tag
    }

    fn tap_mac(&self, channel: &str, chat_id: &str, post: &str, choice: &str) -> HmacSha256 {
        let mut mac = self.mac();
        for part in [VERSION, channel, chat_id, post, choice] {
            feed(&mut mac, part);
        }
        mac
    }

    /// The callback data for `tap` on a button in `chat_id` of `channel` (the channel's
    /// configured name). At most [`MAX_DATA_BYTES`] bytes.
    pub fn sign(&self, channel: &str, chat_id: &str, tap: &Tap) -> String {
        let post = base36(tap.post_id);
        let chat_tag = URL_SAFE_NO_PAD.encode(self.chat_tag(channel, chat_id));
        let full = self
            .tap_mac(channel, chat_id, &post, &tap.choice)
            .finalize()
            .into_bytes();
        let mac = URL_SAFE_NO_PAD.encode(&full[..MAC_BYTES]);
        format!("{VERSION}.{post}.{}.{chat_tag}.{mac}", tap.choice)
    }

    /// The tap `data` stands for, if this key signed it for `chat_id` of `channel`.
    pub fn verify(&self, channel: &str, chat_id: &str, data: &str) -> Result<Tap, SigningError> {
        let mut parts = data.split('.');
        let (Some(version), Some(post), Some(choice), Some(chat_tag), Some(mac), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(SigningError::Malformed("not five dot-separated parts"));
        };
        if version != VERSION {
            return Err(SigningError::Malformed("unknown version"));
        }
        let post_id = parse_base36(post).ok_or(SigningError::Malformed("bad post id"))?;
        if !valid_choice(choice) {
            return Err(SigningError::Malformed("bad choice"));
        }
        let chat_tag =
            decode_exact::<CHAT_TAG_BYTES>(chat_tag).ok_or(SigningError::Malformed("bad tag"))?;
        let mac = decode_exact::<MAC_BYTES>(mac).ok_or(SigningError::Malformed("bad mac"))?;

        // The tag must match too: it is not under the MAC, and no two strings may carry the
        // same signed tap.
        let same_chat: bool = self.chat_tag(channel, chat_id).ct_eq(&chat_tag).into();
        let signed = self
            .tap_mac(channel, chat_id, post, choice)
            .verify_truncated_left(&mac)
            .is_ok();
        match (same_chat, signed) {
            (true, true) => Ok(Tap {
                post_id,
                choice: choice.to_owned(),
            }),
            (false, _) => Err(SigningError::OtherChat),
            (true, false) => Err(SigningError::BadSignature),
        }
    }
}

/// Feeds one field, length first, so that no two field lists feed the same bytes.
fn feed(mac: &mut HmacSha256, part: &str) {
    mac.update(&(part.len() as u64).to_be_bytes());
    mac.update(part.as_bytes());
}

const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";

/// `n` in lowercase base 36, `-` before a negative number.
fn base36(n: i64) -> String {
    let mut magnitude = n.unsigned_abs();
    let mut digits = Vec::new();
    loop {
        digits.push(DIGITS[(magnitude % 36) as usize]);
        magnitude /= 36;
        if magnitude == 0 {
            break;
        }
    }
    if n < 0 {
        digits.push(b'-');
    }
    digits.reverse();
    digits.into_iter().map(char::from).collect()
}

/// The number `text` spells in [`base36`]'s canonical form, and only that form.
fn parse_base36(text: &str) -> Option<i64> {
    if text.is_empty() || text.len() > 14 {
        return None;
    }
    let n = i64::from_str_radix(text, 36).ok()?;
    (base36(n) == text).then_some(n)
}

/// `text` as exactly `N` bytes of unpadded base64url, in its canonical spelling.
fn decode_exact<const N: usize>(text: &str) -> Option<[u8; N]> {
    let bytes = URL_SAFE_NO_PAD.decode(text).ok()?;
    let bytes: [u8; N] = bytes.try_into().ok()?;
    (URL_SAFE_NO_PAD.encode(bytes) == text).then_some(bytes)
}

#[cfg(test)]
mod tests;
