//! The configuration as a tree of keys, taken from the types' `Serialize`: what
//! `tern config show` prints and what [`crate::load`] records sources for, so that neither can
//! miss a key the types have.
//!
//! The config types serialize every field (no `skip_serializing_if`): an unset option is
//! kept here as [`Node::Unset`] rather than dropped. (TOML has no null; `toml` leaves such
//! fields out, so the types still round-trip through `config.toml`.)

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

/// One value, in the order the types declare their fields.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    /// An option that is `None`.
    Unset,
    Bool(bool),
    /// A number, as written.
    Number(String),
    String(String),
    Array(Vec<Node>),
    Table(Vec<(String, Node)>),
}

impl Node {
    /// `value` as a tree. The JSON text in between keeps the field order and the unset
    /// options (as `null`), which neither `toml` nor an unordered JSON map would.
    pub(crate) fn of<T: Serialize>(value: &T) -> Result<Node, serde_json::Error> {
        serde_json::from_str(&serde_json::to_string(value)?)
    }

    /// An array whose elements are all tables: `[[hooks]]`, `[[inbox.notify]]`, ….
    pub(crate) fn is_array_of_tables(&self) -> bool {
        matches!(self, Node::Array(items)
            if !items.is_empty() && items.iter().all(|i| matches!(i, Node::Table(_))))
    }

    /// The keys with a value of their own, dotted (`"sandbox.env.keep"`), and whether each
    /// is unset: everything but tables and arrays of tables, whose entries have no key of
    /// their own.
    pub(crate) fn leaves(&self) -> Vec<(String, bool)> {
        let mut out = Vec::new();
        self.collect_leaves("", &mut out);
        out
    }

    fn collect_leaves(&self, prefix: &str, out: &mut Vec<(String, bool)>) {
        let Node::Table(fields) = self else { return };
        for (key, value) in fields {
            let path = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            match value {
                Node::Table(_) => value.collect_leaves(&path, out),
                v if v.is_array_of_tables() => {}
                v => out.push((path, *v == Node::Unset)),
            }
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a configuration value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Unset)
    }

    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Unset)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Number(v.to_string()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Number(v.to_string()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Number(v.to_string()))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Node, E> {
        Ok(Node::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Node, E> {
        Ok(Node::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut fields = Vec::new();
        while let Some((key, value)) = map.next_entry::<String, Node>()? {
            fields.push((key, value));
        }
        Ok(Node::Table(fields))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Sample {
        z: u32,
        a: Option<String>,
        inner: Inner,
        list: Vec<Inner>,
        empty: Vec<String>,
    }

    #[derive(Serialize)]
    struct Inner {
        flag: bool,
    }

    #[test]
    fn keeps_field_order_and_unset_options() {
        let node = Node::of(&Sample {
            z: 1,
            a: None,
            inner: Inner { flag: true },
            list: vec![Inner { flag: false }],
            empty: vec![],
        })
        .unwrap();
        let Node::Table(fields) = &node else {
            panic!("{node:?}")
        };
        let keys: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["z", "a", "inner", "list", "empty"]);
        assert_eq!(
            node.leaves(),
            vec![
                ("z".to_owned(), false),
                ("a".to_owned(), true),
                ("inner.flag".to_owned(), false),
                ("empty".to_owned(), false),
            ]
        );
    }
}
