//! Reading the argument string a model sent: JSON, an object, and no key twice.
//!
//! `serde_json` keeps the last of two equal keys, so `{"path":"a","path":"b"}` would run on
//! `b` while the model may have meant `a`; a guess is worse than asking again. The check is a
//! visitor that builds the same [`Value`] serde_json would, refusing a key already seen in
//! the same object, at any depth.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value, json};

use crate::ArgsError;

/// Parses the argument string the model sent. Models sometimes send an empty string for a
/// tool without parameters; that is read as `{}`.
pub fn parse_arguments(raw: &str) -> Result<Value, ArgsError> {
    if raw.trim().is_empty() {
        return Ok(json!({}));
    }
    let duplicate = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_str(raw);
    let parsed = Unique {
        path: String::new(),
        duplicate: &duplicate,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    match parsed {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(ArgsError::NotObject),
        Err(e) => match duplicate.into_inner() {
            Some(key) => Err(ArgsError::DuplicateKey(key)),
            None => Err(ArgsError::NotJson(e.to_string())),
        },
    }
}

/// A JSON value whose objects have each key once; `duplicate` receives the first key seen
/// twice, as a path (`edits[1].path`).
struct Unique<'a> {
    path: String,
    duplicate: &'a RefCell<Option<String>>,
}

impl Unique<'_> {
    fn child(&self, step: String) -> Self {
        Unique {
            path: step,
            duplicate: self.duplicate,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) =
            seq.next_element_seed(self.child(format!("{}[{}]", self.path, out.len())))?
        {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            if out.contains_key(&key) {
                let msg = format!("duplicate key `{path}`");
                *self.duplicate.borrow_mut() = Some(path);
                return Err(de::Error::custom(msg));
            }
            let v = map.next_value_seed(self.child(path))?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duplicate_key_is_an_error_the_model_can_read() {
        let e = parse_arguments(r#"{"path":"a","path":"b"}"#).unwrap_err();
        assert_eq!(e, ArgsError::DuplicateKey("path".into()));
        let text = e.to_string();
        assert!(text.contains("duplicate key `path`"), "{text}");
    }

    #[test]
    fn duplicates_are_found_at_any_depth_and_named_by_path() {
        let e = parse_arguments(r#"{"edits":[{"old":"x","new":"y"},{"old":"a","old":"b"}]}"#)
            .unwrap_err();
        assert_eq!(e, ArgsError::DuplicateKey("edits[1].old".into()));
        let e = parse_arguments(r#"{"opts":{"env":{"A":"1","A":"2"}}}"#).unwrap_err();
        assert_eq!(e, ArgsError::DuplicateKey("opts.env.A".into()));
    }

    #[test]
    fn equal_keys_in_different_objects_are_fine_and_values_are_kept() {
        let raw =
            r#"{"a":{"k":1},"b":{"k":[1,2.5,"s",null,true,{"k":-3}]},"c":18446744073709551615}"#;
        let v = parse_arguments(raw).unwrap();
        let plain: Value = serde_json::from_str(raw).unwrap();
        assert_eq!(v, plain);
    }

    #[test]
    fn other_bad_input_keeps_its_errors() {
        assert_eq!(parse_arguments("  ").unwrap(), json!({}));
        assert_eq!(parse_arguments("[1]").unwrap_err(), ArgsError::NotObject);
        assert!(matches!(
            parse_arguments(r#"{"path":"a""#).unwrap_err(),
            ArgsError::NotJson(_)
        ));
        assert!(matches!(
            parse_arguments(r#"{"path":"a"} trailing"#).unwrap_err(),
            ArgsError::NotJson(_)
        ));
    }
}
