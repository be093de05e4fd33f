use super::catalogue;

#[test]
fn every_tool_has_a_usable_schema_and_a_unique_name() {
    let tools = catalogue();
    let names: Vec<_> = tools.iter().map(|t| t.name).collect();
    assert_eq!(
        names,
        [
            "request_approval",
            "request_elicitation",
            "get_decision",
            "wait_for_decision",
            "process_start",
            "process_list",
            "process_poll",
            "process_log",
            "process_kill",
            "process_write",
            "session_create",
            "session_chat",
            "session_list",
            "session_messages",
        ]
    );
    for t in &tools {
        let schema = (t.schema)();
        let problems = tern_tools::tool::schema_problems(&schema);
        assert!(problems.is_empty(), "{}: {problems:?}", t.name);
    }
}

#[test]
fn request_schemas_say_where_and_leave_out_attachments() {
    let tools = catalogue();
    let approval = tools.iter().find(|t| t.name == "request_approval").unwrap();
    let schema = (approval.schema)();
    let props = schema["properties"].as_object().unwrap();
    for k in [
        "summary",
        "projectName",
        "taskId",
        "taskName",
        "idempotencyKey",
    ] {
        assert!(props.contains_key(k), "{k} missing: {schema}");
    }
    assert!(!props.contains_key("attachments"));
    assert_eq!(schema["required"], serde_json::json!(["summary"]));
}
