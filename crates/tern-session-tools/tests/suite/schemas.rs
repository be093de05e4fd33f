//! The three tools' schemas are fit for OpenAI function calling, and each tool is in its
//! toolset.

use tern_tools::tool::schema_problems;

use crate::common::Env;

#[tokio::test]
async fn schemas_are_fit_for_function_calling() {
    let env = Env::new().await;
    for (tool, toolset) in [
        ("todo", "todo"),
        ("memory", "memory"),
        ("session_search", "session_search"),
    ] {
        let sets = [toolset.to_owned()];
        let spec = env
            .registry
            .specs(&sets)
            .find(|s| s.name == tool)
            .unwrap_or_else(|| panic!("{tool} is not in toolset {toolset}"));
        assert_eq!(
            schema_problems(&spec.parameters),
            Vec::<String>::new(),
            "{tool}"
        );
        jsonschema::validator_for(&spec.parameters).unwrap();
    }
    assert_eq!(
        env.registry
            .contexts(&["todo".to_owned(), "memory".to_owned()])
            .count(),
        2
    );
    assert_eq!(
        env.registry
            .contexts(&["session_search".to_owned()])
            .count(),
        0
    );
}
