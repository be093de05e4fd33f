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
pub mod terminal;
pub mod write_file;

#[cfg(test)]
mod file_tests;

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
}


#[cfg(test)]
mod tests {
    #[test]
    fn print_schemas() {
        let r = crate::Registry::builtin();
        for s in r.schemas(&["terminal".into(), "file".into()]) {
            println!("{}", serde_json::to_string_pretty(&s).unwrap());
        }
    }
}
