//! TEMPORARY stub until the signing module lands (same signatures).
use std::path::Path;
#[derive(Debug, thiserror::Error)]
pub enum SigningError {
    #[error("bad")]
    Bad,
}
#[derive(Clone)]
pub struct CallbackKey(#[allow(dead_code)] Vec<u8>);
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tap {
    pub post_id: i64,
    pub choice: String,
}
impl CallbackKey {
    pub fn load_or_create(_path: &Path) -> Result<Self, SigningError> {
        Ok(CallbackKey(vec![1; 32]))
    }
    pub fn from_bytes(b: [u8; 32]) -> Self {
        CallbackKey(b.to_vec())
    }
    pub fn sign(&self, _channel: &str, chat_id: &str, tap: &Tap) -> String {
        format!("t1.{}.{}.{}", tap.post_id, tap.choice, chat_id)
    }
    pub fn verify(&self, _channel: &str, chat_id: &str, data: &str) -> Result<Tap, SigningError> {
        let p: Vec<&str> = data.split('.').collect();
        if p.len() != 4 || p[3] != chat_id {
            return Err(SigningError::Bad);
        }
        Ok(Tap {
            post_id: p[1].parse().map_err(|_| SigningError::Bad)?,
            choice: p[2].into(),
        })
    }
}
