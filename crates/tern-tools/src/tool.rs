//! What a tool is: a name, a toolset, a description, a typed `Args` struct and `run`.
//!
//! A tool implements [`Tool`]: its arguments are one struct deriving `serde::Deserialize`
//! and `schemars::JsonSchema`, so the JSON schema the model sees and the parsing of what the
//! model sends come from the same type (the fields' doc comments become the schema's
//! descriptions). [`Registry::add`](crate::Registry::add) wraps it in [`Typed`], the
//! object-safe [`DynTool`] the registry stores: it deserialises the (already
//! schema-validated) arguments into `Args` and calls [`Tool::run`].
//!
//! The schema is generated for OpenAI function calling ([`parameters_schema`]): an object
//! schema with `properties` and `required`, every subschema inlined, and none of the
//! generator's extras (`$schema`, `title`, `$defs`, integer `format`s, `null` in the types
//! of optional fields) that the API rejects or that only add noise.

use std::future::Future;

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer};
use serde_json::{Map, Value};

use crate::{BoxFuture, ToolContext, ToolError, ToolResult};

/// Static description of a tool: what the model sees.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: &'static str,
    pub toolset: &'static str,
    pub description: &'static str,
    /// JSON Schema (draft 2020-12) of the arguments object.
    pub parameters: Value,
}

/// A tool the model can call, with typed arguments. Implement this and add the tool to a
/// registry with [`Registry::add`](crate::Registry::add).
pub trait Tool: Send + Sync + 'static {
    /// The name the model calls it by; unique in a registry (a later tool of the same name
    /// replaces the earlier one).
    const NAME: &'static str;
    /// The toolset that enables it (`agent.toolsets`).
    const TOOLSET: &'static str;
    /// What the model reads about the tool.
    const DESCRIPTION: &'static str;
    /// The arguments. The schema the model sees is generated from this type.
    type Args: DeserializeOwned + JsonSchema + Send;

    /// Adjusts the generated spec before it is registered, for what depends on the tool's
    /// configuration (a parameter's description naming a remote host). Default: nothing.
    fn customize(&self, _spec: &mut ToolSpec) {}

    /// Runs one call with arguments that passed the schema and deserialised.
    fn run(&self, args: Self::Args, ctx: ToolContext) -> impl Future<Output = ToolResult> + Send;
}

/// A tool as the registry stores it: object-safe, taking the raw JSON arguments.
/// Implemented for every [`Tool`] by [`Typed`]; implement it by hand only for a tool whose
/// arguments no Rust type describes.
pub trait DynTool: Send + Sync {
    fn spec(&self) -> &ToolSpec;
    fn call(&self, args: Value, ctx: ToolContext) -> BoxFuture<'_, ToolResult>;
}

/// A [`Tool`] with its generated [`ToolSpec`], behind [`DynTool`].
pub struct Typed<T: Tool> {
    spec: ToolSpec,
    tool: T,
}

impl<T: Tool> Typed<T> {
    pub fn new(tool: T) -> Self {
        let mut spec = spec_of::<T>();
        tool.customize(&mut spec);
        Self { spec, tool }
    }
}

impl<T: Tool> DynTool for Typed<T> {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Value, ctx: ToolContext) -> BoxFuture<'_, ToolResult> {
        Box::pin(async move {
            let args = parse_args::<T::Args>(T::NAME, args)?;
            self.tool.run(args, ctx).await
        })
    }
}

/// The spec of `T` as generated, before [`Tool::customize`].
pub fn spec_of<T: Tool>() -> ToolSpec {
    ToolSpec {
        name: T::NAME,
        toolset: T::TOOLSET,
        description: T::DESCRIPTION,
        parameters: parameters_schema::<T::Args>(),
    }
}

/// Why a tool's arguments were refused; the model reads it as the tool's error.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ArgsError {
    #[error("tool arguments are not valid JSON ({0}); send them again as a JSON object")]
    NotJson(String),
    #[error("tool arguments must be a JSON object; send them again as an object")]
    NotObject,
    /// A key given twice in one object (path to it, e.g. `edits[1].path`): which value was
    /// meant is a guess, so neither is used.
    #[error("tool arguments have a duplicate key `{0}`; send them again with each key once")]
    DuplicateKey(String),
    /// The arguments broke the tool's schema or did not deserialise into its `Args`.
    #[error("invalid arguments for `{tool}`: {problems}")]
    Invalid { tool: String, problems: String },
    #[error("tool `{tool}` has a broken schema: {reason}")]
    BrokenSchema { tool: String, reason: String },
}

impl From<ArgsError> for ToolError {
    fn from(e: ArgsError) -> Self {
        ToolError::new(e.to_string())
    }
}

/// Deserialises a tool's arguments; a mismatch is an [`ArgsError::Invalid`] naming the
/// field, so the model can correct it.
pub fn parse_args<A: DeserializeOwned>(tool: &str, args: Value) -> Result<A, ArgsError> {
    serde_json::from_value(args).map_err(|e| ArgsError::Invalid {
        tool: tool.to_owned(),
        problems: e.to_string(),
    })
}

/// The JSON schema of `A` as the model sees it (see the module docs).
pub fn parameters_schema<A: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .for_deserialize()
        .into_generator();
    let mut schema = generator.into_root_schema_for::<A>().to_value();
    if let Some(root) = schema.as_object_mut() {
        // The `Args` struct's own doc comment is for Rust readers; the model reads the tool's
        // description.
        root.remove("title");
        root.remove("description");
        root.remove("$defs");
        root.remove("definitions");
        if root.get("type").and_then(Value::as_str) == Some("object") {
            root.entry("properties")
                .or_insert_with(|| Value::Object(Map::new()));
        }
    }
    clean(&mut schema);
    schema
}

/// Removes what the generator adds that function-calling schemas do without: `null` in the
/// type of an optional field (the field is simply left out) and its `"default": null`,
/// Rust's integer and float `format`s (not JSON Schema formats).
fn clean(v: &mut Value) {
    match v {
        Value::Object(obj) => {
            if let Some(Value::Array(types)) = obj.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let only = types.remove(0);
                    obj.insert("type".into(), only);
                }
            }
            if let Some(Value::Array(values)) = obj.get_mut("enum") {
                values.retain(|e| !e.is_null());
            }
            for key in ["anyOf", "oneOf"] {
                if let Some(Value::Array(alts)) = obj.get_mut(key) {
                    alts.retain(|a| a.get("type").and_then(Value::as_str) != Some("null"));
                    if alts.len() == 1 {
                        let only = alts.remove(0);
                        obj.remove(key);
                        if let Value::Object(inner) = only {
                            for (k, val) in inner {
                                obj.entry(k).or_insert(val);
                            }
                        }
                    }
                }
            }
            // An optional field's absent value is not worth a `"default": null`.
            if obj.get("default").is_some_and(Value::is_null) {
                obj.remove("default");
            }
            if obj
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(is_rust_number_format)
            {
                obj.remove("format");
            }
            for (key, child) in obj.iter_mut() {
                // `properties` maps names to schemas; `default`/`examples`/`const`/`enum`
                // are values, not schemas, and stay as they are.
                if matches!(key.as_str(), "default" | "examples" | "const" | "enum") {
                    continue;
                }
                if key == "properties" {
                    if let Value::Object(props) = child {
                        props.values_mut().for_each(clean);
                    }
                } else {
                    clean(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(clean),
        _ => {}
    }
}

/// What in a tool's parameters schema OpenAI-style function calling would reject or
/// misread; empty when it is fine. The root must be an object schema with `properties`
/// (and `required`, when present, naming only them) that refuses unknown keys; no subschema
/// may be a reference (`$ref`, `$defs`, `definitions`) or carry `$schema`, and no optional
/// field may be typed `null`.
pub fn schema_problems(parameters: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if parameters.get("type").and_then(Value::as_str) != Some("object") {
        problems.push("the root is not `\"type\": \"object\"`".to_owned());
    }
    let props = parameters.get("properties").and_then(Value::as_object);
    match props {
        None => problems.push("the root has no `properties` object".to_owned()),
        Some(props) => {
            for r in parameters
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if !r.as_str().is_some_and(|r| props.contains_key(r)) {
                    problems.push(format!("required {r} is not a property"));
                }
            }
        }
    }
    if parameters.get("additionalProperties") != Some(&Value::Bool(false)) {
        problems.push("the root does not set `additionalProperties: false`".to_owned());
    }
    fn walk(v: &Value, at: &str, problems: &mut Vec<String>) {
        match v {
            Value::Object(obj) => {
                for key in ["$ref", "$defs", "definitions", "$schema"] {
                    if obj.contains_key(key) {
                        problems.push(format!("{at}: has `{key}`"));
                    }
                }
                let null_type = match obj.get("type") {
                    Some(Value::String(t)) => t == "null",
                    Some(Value::Array(ts)) => ts.iter().any(|t| t == "null"),
                    _ => false,
                };
                if null_type {
                    problems.push(format!("{at}: is typed null"));
                }
                for (k, child) in obj {
                    if !matches!(k.as_str(), "default" | "examples" | "const" | "enum") {
                        walk(child, &format!("{at}/{k}"), problems);
                    }
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, &format!("{at}/{i}"), problems);
                }
            }
            _ => {}
        }
    }
    walk(parameters, "", &mut problems);
    if let Err(e) = jsonschema::validator_for(parameters) {
        problems.push(format!("not a valid JSON schema: {e}"));
    }
    problems
}

fn is_rust_number_format(f: &str) -> bool {
    matches!(
        f,
        "int"
            | "int8"
            | "int16"
            | "int32"
            | "int64"
            | "int128"
            | "uint"
            | "uint8"
            | "uint16"
            | "uint32"
            | "uint64"
            | "uint128"
            | "float"
            | "double"
    )
}

/// Deserialises a non-negative integer that may come as a whole float (`5.0`): JSON
/// Schema's `integer` admits it, and some models send it. Use with
/// `#[serde(deserialize_with = ...)]` and `#[schemars(with = "u64")]`.
pub fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = serde_json::Number::deserialize(d)?;
    n.as_u64()
        .or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u64::MAX as f64)
                .map(|f| f as u64)
        })
        .ok_or_else(|| serde::de::Error::custom(format!("{n} is not a non-negative integer")))
}

/// [`lenient_u64`] for an optional field (`#[serde(default, deserialize_with = ...)]`).
pub fn lenient_opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    lenient_u64(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[expect(dead_code, reason = "only its schema is looked at")]
    struct Inner {
        /// A name.
        name: String,
    }

    #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    #[serde(rename_all = "snake_case")]
    enum Mode {
        Fast,
        Slow,
    }

    /// Rust-only docs.
    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[expect(dead_code, reason = "only its schema and `mode` are looked at")]
    struct Args {
        /// How many.
        count: u32,
        #[serde(default)]
        inner: Option<Inner>,
        #[serde(default)]
        many: Vec<Inner>,
        #[serde(default)]
        mode: Option<Mode>,
        #[serde(default)]
        ratio: Option<f64>,
    }

    #[test]
    fn generated_schemas_are_inlined_and_free_of_generator_noise() {
        let s = parameters_schema::<Args>();
        assert_eq!(schema_problems(&s), Vec::<String>::new(), "{s:#}");
        assert!(
            s.get("title").is_none() && s.get("description").is_none(),
            "{s:#}"
        );
        let p = &s["properties"];
        assert_eq!(
            p["count"],
            json!({"type": "integer", "minimum": 0, "description": "How many."})
        );
        assert_eq!(p["inner"]["type"], "object");
        assert_eq!(p["inner"]["properties"]["name"]["description"], "A name.");
        assert_eq!(p["inner"]["additionalProperties"], false);
        assert_eq!(p["many"]["items"]["properties"]["name"]["type"], "string");
        assert_eq!(p["mode"]["enum"], json!(["fast", "slow"]));
        assert_eq!(p["ratio"], json!({"type": "number"}));
        assert_eq!(s["required"], json!(["count"]));
    }

    #[test]
    fn schema_problems_names_what_function_calling_rejects() {
        let p = schema_problems(&json!({"type": "string"}));
        assert!(p.iter().any(|p| p.contains("root is not")), "{p:?}");
        let p = schema_problems(&json!({
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/A"}, "b": {"type": ["string", "null"]}},
            "required": ["c"],
            "$defs": {"A": {"type": "string"}},
        }));
        for want in [
            "/properties/a: has `$ref`",
            "/properties/b: is typed null",
            "required \"c\"",
            "additionalProperties",
            ": has `$defs`",
        ] {
            assert!(p.iter().any(|p| p.contains(want)), "{want}: {p:?}");
        }
    }

    #[test]
    fn parse_args_names_the_field_and_lenient_integers_take_whole_floats() {
        let e = parse_args::<Args>("t", json!({"count": "x"})).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid arguments for `t`: invalid type: string \"x\""),
            "{e}"
        );
        let e = parse_args::<Args>("t", json!({"count": 1, "bogus": 2})).unwrap_err();
        assert!(e.to_string().contains("unknown field `bogus`"), "{e}");
        let e = parse_args::<Args>("t", json!({})).unwrap_err();
        assert!(e.to_string().contains("missing field `count`"), "{e}");
        let a = parse_args::<Args>("t", json!({"count": 1, "mode": "slow"})).unwrap();
        assert_eq!(a.mode, Some(Mode::Slow));

        #[derive(Deserialize)]
        struct N {
            #[serde(deserialize_with = "lenient_u64")]
            n: u64,
        }
        let n = |v: Value| serde_json::from_value::<N>(json!({ "n": v })).map(|n| n.n);
        assert_eq!(n(json!(5)).unwrap(), 5);
        assert_eq!(n(json!(5.0)).unwrap(), 5);
        assert!(n(json!(5.5)).is_err());
        assert!(n(json!(-1)).is_err());
        assert!(n(json!("5")).is_err());
    }
}
