//! The built-in tools, one module per tool, and [`builtin`], the list the registry is
//! built from.
//!
//! Adding a tool: write `tools/NAME.rs` with a unit struct implementing [`Tool`](crate::Tool)
//! (its `Args` struct derives `Deserialize` and `JsonSchema`; the doc comments on its fields
//! are the descriptions the model reads), declare the module below and add one line to
//! [`builtin`]. Shared sandboxed file access lives in [`crate::file_access`].

pub mod list_dir;
pub mod patch_file;
pub mod read_file;
pub mod search_files;
pub mod terminal;
pub mod write_file;

#[cfg(test)]
mod file_tests;
#[cfg(test)]
mod search_files_tests;

use crate::Registry;

/// The toolset of the file tools.
pub const FILE_TOOLSET: &str = "file";

/// Adds every built-in tool to `r`.
pub fn builtin(r: &mut Registry) {
    r.add(terminal::Terminal);
    r.add(read_file::ReadFile);
    r.add(write_file::WriteFile);
    r.add(patch_file::PatchFile);
    r.add(list_dir::ListDir);
    r.add(search_files::SearchFiles);
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use serde_json::{Value, json};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::tool::{parse_args, schema_problems};
    use crate::{DenyAll, Tool, ToolContext, ToolLimits};

    fn ctx(dir: &Path) -> ToolContext {
        ToolContext {
            session_id: "s".into(),
            call_id: "call-1".into(),
            call_seq: 0,
            workdir: dir.to_path_buf(),
            cancel: CancellationToken::new(),
            approver: Arc::new(DenyAll {
                reason: "tests never approve".into(),
            }),
            limits: ToolLimits::default(),
            preapproved: false,
            subagents: None,
            toolsets: Default::default(),
            report: Default::default(),
        }
    }

    fn all_sets() -> Vec<String> {
        vec!["terminal".into(), "file".into()]
    }

    #[test]
    fn every_builtin_schema_is_an_object_schema_with_its_required_fields() {
        let r = Registry::builtin();
        let sets = all_sets();
        let required: Vec<(&str, Value)> = r
            .specs(&sets)
            .map(|s| {
                assert_eq!(
                    schema_problems(&s.parameters),
                    Vec::<String>::new(),
                    "{}",
                    s.name
                );
                (
                    s.name,
                    s.parameters.get("required").cloned().unwrap_or(json!([])),
                )
            })
            .collect();
        assert_eq!(
            required,
            [
                ("list_dir", json!([])),
                ("patch_file", json!(["path", "old_string", "new_string"])),
                ("read_file", json!(["path"])),
                ("search_files", json!(["pattern"])),
                ("terminal", json!(["command"])),
                ("write_file", json!(["path", "content"])),
            ]
        );
        // The generated schemas keep what the hand-written ones said.
        let read = &r
            .specs(&sets)
            .find(|s| s.name == "read_file")
            .unwrap()
            .parameters;
        assert_eq!(read["properties"]["offset"]["minimum"], 1);
        assert_eq!(read["properties"]["limit"]["default"], 2000);
        assert_eq!(
            read["properties"]["path"]["description"],
            "File to read, relative to the working directory or absolute."
        );
        let term = &r
            .specs(&sets)
            .find(|s| s.name == "terminal")
            .unwrap()
            .parameters;
        assert_eq!(
            term["properties"]["sandbox_permissions"]["enum"],
            json!(["use_default", "require_escalated"])
        );
    }

    /// An example valid for each generated schema (every property set) deserialises into
    /// the tool's `Args` with the values given: the schema and the type agree.
    #[test]
    fn schema_examples_deserialise_into_the_args() {
        let r = Registry::builtin();
        let sets = all_sets();
        let check = |name: &str, example: Value| {
            let spec = r.specs(&sets).find(|s| s.name == name).unwrap();
            let props = spec.parameters["properties"].as_object().unwrap();
            assert_eq!(
                props.keys().collect::<Vec<_>>(),
                example.as_object().unwrap().keys().collect::<Vec<_>>(),
                "{name}: the example sets every property"
            );
            let v = jsonschema::validator_for(&spec.parameters).unwrap();
            assert!(
                v.is_valid(&example),
                "{name}: {example} is valid for the schema"
            );
            example
        };
        let a: read_file::ReadFileArgs = parse_args(
            "read_file",
            check("read_file", json!({"limit": 5, "offset": 2, "path": "a"})),
        )
        .unwrap();
        assert_eq!((a.path.as_str(), a.offset, a.limit), ("a", 2, 5));
        let a: write_file::WriteFileArgs = parse_args(
            "write_file",
            check("write_file", json!({"content": "x", "path": "a"})),
        )
        .unwrap();
        assert_eq!((a.path.as_str(), a.content.as_str()), ("a", "x"));
        let a: patch_file::PatchFileArgs = parse_args(
            "patch_file",
            check(
                "patch_file",
                json!({"new_string": "n", "old_string": "o", "path": "a", "replace_all": true}),
            ),
        )
        .unwrap();
        assert!(a.replace_all && a.old_string == "o" && a.new_string == "n");
        let a: list_dir::ListDirArgs = parse_args(
            "list_dir",
            check(
                "list_dir",
                json!({"include_hidden": true, "max_entries": 7, "path": "d"}),
            ),
        )
        .unwrap();
        assert!(a.include_hidden && a.max_entries == 7 && a.path == "d");
        let a: terminal::TerminalArgs = parse_args(
            "terminal",
            check(
                "terminal",
                json!({"command": "ls", "justification": "j", "sandbox_permissions": "require_escalated", "timeout": 3, "workdir": "w"}),
            ),
        )
        .unwrap();
        assert_eq!(
            a.sandbox_permissions,
            terminal::SandboxPermissions::RequireEscalated
        );
        assert_eq!((a.timeout, a.workdir.as_deref()), (Some(3), Some("w")));
        // Only the required fields: the defaults fill in the rest.
        let a: list_dir::ListDirArgs = parse_args("list_dir", json!({})).unwrap();
        assert_eq!((a.path.as_str(), a.max_entries), (".", 500));
        let a: <terminal::Terminal as Tool>::Args =
            parse_args("terminal", json!({"command": "ls"})).unwrap();
        assert_eq!(
            a.sandbox_permissions,
            terminal::SandboxPermissions::UseDefault
        );
    }

    /// A wrong type or a missing required field is a tool error naming the tool and the
    /// field, for the terminal and the file tools alike; nothing runs.
    #[tokio::test]
    async fn bad_arguments_get_an_error_the_model_can_read() {
        let dir = tempfile::tempdir().unwrap();
        let r = Registry::builtin();
        let sets = all_sets();
        let call = |name: &'static str, args: &'static str| {
            let (r, sets, c) = (&r, &sets, ctx(dir.path()));
            async move { r.call(name, args, sets, c).await.unwrap_err().0 }
        };
        let e = call("terminal", r#"{"command": 5}"#).await;
        assert!(
            e.starts_with(
                "invalid arguments for `terminal`: /command: 5 is not of type \"string\""
            ),
            "{e}"
        );
        let e = call("terminal", r#"{"timeout": 5}"#).await;
        assert!(e.starts_with("invalid arguments for `terminal`: "), "{e}");
        assert!(e.contains("\"command\" is a required property"), "{e}");
        let e = call(
            "terminal",
            r#"{"command": "touch x", "sandbox_permissions": "root"}"#,
        )
        .await;
        assert!(e.contains("/sandbox_permissions"), "{e}");
        let e = call("write_file", r#"{"path": "x"}"#).await;
        assert!(
            e.starts_with("invalid arguments for `write_file`: ")
                && e.contains("\"content\" is a required property"),
            "{e}"
        );
        let e = call("read_file", r#"{"path": "x", "limit": "ten"}"#).await;
        assert!(
            e.starts_with(
                "invalid arguments for `read_file`: /limit: \"ten\" is not of type \"integer\""
            ),
            "{e}"
        );
        let e = call("list_dir", r#"{"include_hidden": "yes"}"#).await;
        assert!(e.contains("/include_hidden"), "{e}");
        let e = call(
            "patch_file",
            r#"{"path": "x", "old_string": "a", "new_string": "b", "extra": 1}"#,
        )
        .await;
        assert!(e.contains("extra"), "{e}");
        let e = call("read_file", "[1]").await;
        assert_eq!(
            e,
            "tool arguments must be a JSON object; send them again as an object"
        );
        assert!(!dir.path().join("x").exists(), "nothing ran");
    }
}
