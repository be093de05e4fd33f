use super::*;
use serde_json::json;

/// Parses `wire`, checks it serializes back to exactly `wire`, and returns the field.
/// The expected JSON is written by hand in the SDK's wire format (what
/// `pumpup-sdk` 0.0.10 sends: camelCase aliases, optional properties omitted, Python
/// floats written with a fractional part).
fn round_trip(wire: Value) -> Field {
    let field: Field = serde_json::from_value(wire.clone()).unwrap();
    assert_eq!(serde_json::to_value(&field).unwrap(), wire);
    field
}

fn field(wire: Value) -> Field {
    serde_json::from_value(wire).unwrap()
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

/// Validates one answer to one field; `Ok` holds the normalized value (None: omitted).
fn answer(f: &Field, value: Value) -> Result<Option<Value>, Vec<&'static str>> {
    let mut answers = Map::new();
    answers.insert(f.id().to_owned(), value);
    validate_answers(std::slice::from_ref(f), &answers)
        .map(|m| m.get(f.id()).cloned())
        .map_err(|errs| errs.iter().map(|e| e.code).collect())
}

fn passes(f: &Field, value: Value) -> Value {
    match answer(f, value.clone()) {
        Ok(Some(v)) => v,
        other => panic!("{value} should pass for {}: {other:?}", f.kind()),
    }
}

fn fails(f: &Field, value: Value) -> Vec<&'static str> {
    match answer(f, value.clone()) {
        Err(codes) => codes,
        Ok(v) => panic!("{value} should fail for {}, got {v:?}", f.kind()),
    }
}

fn def_codes(fields: &[Field]) -> Vec<(usize, &'static str)> {
    match validate_field_defs(fields) {
        Ok(()) => Vec::new(),
        Err(errs) => errs.iter().map(|e| (e.index, e.code)).collect(),
    }
}

// ---------------------------------------------------------------- wire format

#[test]
fn text_round_trip() {
    let f = round_trip(json!({"type": "Text", "id": "name", "label": "Name", "required": true}));
    assert_eq!(
        f,
        Field::Text(Text {
            id: "name".into(),
            label: "Name".into(),
            required: true,
            description: None,
            format: None,
            min_length: None,
            max_length: None,
        })
    );
    let f = round_trip(json!({
        "type": "Text", "id": "email", "label": "Email", "required": false,
        "description": "Work address", "format": "EMAIL", "minLength": 3, "maxLength": 100
    }));
    let Field::Text(t) = f else { panic!() };
    assert_eq!(t.format, Some(TextFormat::Email));
    assert_eq!((t.min_length, t.max_length), (Some(3), Some(100)));
    for (format, wire) in [
        (TextFormat::Email, "EMAIL"),
        (TextFormat::Phone, "PHONE"),
        (TextFormat::Url, "URL"),
    ] {
        assert_eq!(serde_json::to_value(format).unwrap(), json!(wire));
    }
}

#[test]
fn text_area_round_trip() {
    round_trip(json!({"type": "TextArea", "id": "why", "label": "Why?", "required": true}));
    let f = round_trip(json!({
        "type": "TextArea", "id": "why", "label": "Why?", "required": true,
        "description": "A few sentences", "minLength": 10, "maxLength": 2000
    }));
    assert!(matches!(
        f,
        Field::TextArea(TextArea {
            max_length: Some(2000),
            ..
        })
    ));
}

#[test]
fn number_round_trip() {
    round_trip(
        json!({"type": "Number", "id": "n", "label": "N", "required": true, "integerOnly": false}),
    );
    let f = round_trip(json!({
        "type": "Number", "id": "n", "label": "N", "required": false, "description": "How many",
        "integerOnly": true, "min": 0.0, "max": 5.5
    }));
    assert!(matches!(
        f,
        Field::Number(Number {
            integer_only: true,
            min: Some(0.0),
            max: Some(5.5),
            ..
        })
    ));
    // Other clients write whole numbers without a fraction; they read the same.
    let f = field(
        json!({"type": "Number", "id": "n", "label": "N", "required": true, "integerOnly": true, "min": 1}),
    );
    assert!(matches!(f, Field::Number(Number { min: Some(1.0), .. })));
}

#[test]
fn slider_round_trip() {
    let f = round_trip(
        json!({"type": "Slider", "id": "s", "label": "S", "required": true, "min": 0.0, "max": 1.0}),
    );
    assert!(matches!(f, Field::Slider(Slider { step: None, .. })));
    let f = round_trip(json!({
        "type": "Slider", "id": "s", "label": "S", "required": true, "description": "Risk",
        "min": 0.0, "max": 1.0, "step": 0.1
    }));
    assert!(matches!(
        f,
        Field::Slider(Slider {
            step: Some(0.1),
            ..
        })
    ));
}

#[test]
fn switch_round_trip() {
    let f = round_trip(json!({"type": "Switch", "id": "ok", "label": "OK?", "required": false}));
    assert_eq!(f.kind(), "Switch");
    round_trip(
        json!({"type": "Switch", "id": "ok", "label": "OK?", "required": true, "description": "d"}),
    );
}

#[test]
fn select_and_multiselect_round_trip() {
    let f = round_trip(json!({
        "type": "Select", "id": "c", "label": "Color", "required": true, "options": ["red", "green"]
    }));
    assert!(matches!(&f, Field::Select(s) if s.options == ["red", "green"]));
    round_trip(json!({
        "type": "Select", "id": "c", "label": "Color", "required": true, "description": "d", "options": ["red"]
    }));
    let f = round_trip(json!({
        "type": "Multiselect", "id": "m", "label": "Tags", "required": false, "options": ["a", "b", "c"]
    }));
    assert!(matches!(&f, Field::Multiselect(m) if m.options.len() == 3));
    round_trip(json!({
        "type": "Multiselect", "id": "m", "label": "Tags", "required": false, "description": "d", "options": []
    }));
}

#[test]
fn date_kinds_round_trip() {
    round_trip(json!({"type": "DateField", "id": "d", "label": "D", "required": true}));
    let f = round_trip(json!({
        "type": "DateField", "id": "d", "label": "D", "required": true, "description": "d",
        "min": "2024-02-29", "max": "2024-12-31"
    }));
    assert!(matches!(&f, Field::DateField(d) if d.min.as_deref() == Some("2024-02-29")));

    round_trip(json!({"type": "DateTime", "id": "t", "label": "T", "required": false}));
    // As the SDK writes them: `Z` for UTC, microseconds when present, `+05:30` otherwise.
    let f = round_trip(json!({
        "type": "DateTime", "id": "t", "label": "T", "required": false, "description": "d",
        "min": "2024-01-01T10:00:00Z", "max": "2024-01-01T10:00:00.123000+05:30"
    }));
    assert!(
        matches!(&f, Field::DateTime(d) if d.max.as_deref() == Some("2024-01-01T10:00:00.123000+05:30"))
    );

    round_trip(json!({"type": "Time", "id": "h", "label": "H", "required": true}));
    round_trip(json!({
        "type": "Time", "id": "h", "label": "H", "required": true, "description": "d", "min": "09:00", "max": "17:30:00"
    }));
}

#[test]
fn field_bid_round_trip() {
    let wire = json!({"fieldId": "email", "value": "a@b.co", "confidence": 0.9, "rationale": "from the CRM"});
    let bid: FieldBid = serde_json::from_value(wire.clone()).unwrap();
    assert_eq!(bid.field_id, "email");
    assert_eq!(serde_json::to_value(&bid).unwrap(), wire);
    let wire = json!({"fieldId": "tags", "value": ["a", "b"]});
    let bid: FieldBid = serde_json::from_value(wire.clone()).unwrap();
    assert_eq!(serde_json::to_value(&bid).unwrap(), wire);
    // `value` is required but may be null, as in the SDK.
    let bid: FieldBid = serde_json::from_value(json!({"fieldId": "x", "value": null})).unwrap();
    assert_eq!(bid.value, Value::Null);
    assert!(serde_json::from_value::<FieldBid>(json!({"fieldId": "x"})).is_err());
    assert!(serde_json::from_value::<FieldBid>(json!({"field_id": "x", "value": 1})).is_err());
}

#[test]
fn required_properties_and_unknown_kinds_are_refused() {
    for wire in [
        json!({"type": "Text", "id": "a", "label": "A"}), // required
        json!({"type": "Text", "label": "A", "required": true}), // id
        json!({"type": "Text", "id": "a", "required": true}), // label
        json!({"type": "Number", "id": "a", "label": "A", "required": true}), // integerOnly
        json!({"type": "Slider", "id": "a", "label": "A", "required": true, "max": 1.0}), // min
        json!({"type": "Select", "id": "a", "label": "A", "required": true}), // options
        json!({"type": "Rating", "id": "a", "label": "A", "required": true}), // unknown kind
        json!({"id": "a", "label": "A", "required": true}), // untagged
        json!({"type": "Text", "id": "a", "label": "A", "required": true, "format": "ZIP"}),
        json!({"type": "Text", "id": "a", "label": "A", "required": true, "maxLength": -1}),
    ] {
        assert!(
            serde_json::from_value::<Field>(wire.clone()).is_err(),
            "{wire}"
        );
    }
}

#[test]
fn extra_properties_are_ignored_and_nulls_read_as_absent() {
    let f = field(json!({
        "type": "Text", "id": "a", "label": "A", "required": true, "placeholder": "x", "maxLength": null
    }));
    assert!(matches!(
        f,
        Field::Text(Text {
            max_length: None,
            ..
        })
    ));
}

#[test]
fn accessors() {
    let f = field(
        json!({"type": "DateField", "id": "due", "label": "Due", "required": true, "description": "When"}),
    );
    assert_eq!(
        (f.id(), f.label(), f.required(), f.description(), f.kind()),
        ("due", "Due", true, Some("When"), "DateField")
    );
    let f = field(json!({"type": "Switch", "id": "s", "label": "S", "required": false}));
    assert_eq!((f.required(), f.description()), (false, None));
}

#[test]
fn errors_serialize_with_wire_names() {
    let e = FieldError {
        field_id: "name".into(),
        code: code::TOO_LONG,
        message: "Must be at most 10 characters".into(),
    };
    assert_eq!(
        serde_json::to_value(&e).unwrap(),
        json!({"fieldId": "name", "code": "too_long", "message": "Must be at most 10 characters"})
    );
    assert_eq!(e.to_string(), "name: Must be at most 10 characters");
    let e = FieldDefError {
        index: 2,
        field_id: "".into(),
        code: code::EMPTY_ID,
        message: "id must not be empty".into(),
    };
    assert_eq!(
        serde_json::to_value(&e).unwrap(),
        json!({"index": 2, "fieldId": "", "code": "empty_id", "message": "id must not be empty"})
    );
}

// ---------------------------------------------------------------- field definitions

fn text(id: &str) -> Field {
    field(json!({"type": "Text", "id": id, "label": "L", "required": true}))
}

#[test]
fn a_usable_form_passes() {
    let fields: Vec<Field> = serde_json::from_value(json!([
        {"type": "Text", "id": "a", "label": "A", "required": true, "minLength": 2, "maxLength": 2},
        {"type": "TextArea", "id": "b", "label": "B", "required": false},
        {"type": "Number", "id": "c", "label": "C", "required": true, "integerOnly": true, "min": 1, "max": 1},
        {"type": "Slider", "id": "d", "label": "D", "required": true, "min": 0, "max": 10, "step": 0.5},
        {"type": "Switch", "id": "e", "label": "E", "required": false},
        {"type": "Select", "id": "f", "label": "F", "required": true, "options": ["x"]},
        {"type": "Multiselect", "id": "g", "label": "G", "required": true, "options": ["x", "y"]},
        {"type": "DateField", "id": "h", "label": "H", "required": true, "min": "2024-02-29", "max": "2024-02-29"},
        {"type": "DateTime", "id": "i", "label": "I", "required": true,
         "min": "2024-01-01T10:00:00+02:00", "max": "2024-01-01T09:00:00Z"},
        {"type": "Time", "id": "j", "label": "J", "required": true, "min": "09:00", "max": "17:00:00"}
    ]))
    .unwrap();
    assert_eq!(validate_field_defs(&fields), Ok(()));
    assert_eq!(validate_field_defs(&[]), Ok(()));
}

#[test]
fn ids_must_be_non_empty_and_unique() {
    assert_eq!(def_codes(&[text("a"), text("b")]), vec![]);
    assert_eq!(
        def_codes(&[text(""), text(" ")]),
        vec![(0, "empty_id"), (1, "empty_id")]
    );
    assert_eq!(
        def_codes(&[text("a"), text("b"), text("a"), text("a")]),
        vec![(2, "duplicate_id"), (3, "duplicate_id")]
    );
}

#[test]
fn labels_must_be_non_empty() {
    let f = field(json!({"type": "Switch", "id": "a", "label": "  ", "required": true}));
    assert_eq!(def_codes(&[f]), vec![(0, "empty_label")]);
}

#[test]
fn text_length_limits_must_not_cross() {
    let f = field(
        json!({"type": "Text", "id": "a", "label": "A", "required": true, "minLength": 5, "maxLength": 4}),
    );
    assert_eq!(def_codes(&[f]), vec![(0, "min_above_max")]);
    let f = field(
        json!({"type": "TextArea", "id": "a", "label": "A", "required": true, "minLength": 5, "maxLength": 4}),
    );
    let errs = validate_field_defs(&[f]).unwrap_err();
    assert_eq!(
        errs[0].message,
        "minLength (5) is greater than maxLength (4)"
    );
    let f = field(
        json!({"type": "TextArea", "id": "a", "label": "A", "required": true, "minLength": 5}),
    );
    assert_eq!(def_codes(&[f]), vec![]);
}

#[test]
fn number_bounds_must_be_ordered_and_finite() {
    let f = field(
        json!({"type": "Number", "id": "a", "label": "A", "required": true, "integerOnly": false, "min": 2, "max": 1}),
    );
    assert_eq!(def_codes(&[f]), vec![(0, "min_above_max")]);
    let f = Field::Number(Number {
        id: "a".into(),
        label: "A".into(),
        required: true,
        description: None,
        integer_only: false,
        min: Some(f64::NAN),
        max: Some(f64::INFINITY),
    });
    assert_eq!(
        def_codes(&[f]),
        vec![(0, "invalid_bound"), (0, "invalid_bound")]
    );
}

#[test]
fn slider_needs_ordered_bounds_and_a_positive_step() {
    let slider = |min: f64, max: f64, step: Option<f64>| {
        Field::Slider(Slider {
            id: "s".into(),
            label: "S".into(),
            required: true,
            description: None,
            min,
            max,
            step,
        })
    };
    assert_eq!(def_codes(&[slider(0.0, 1.0, Some(0.1))]), vec![]);
    assert_eq!(def_codes(&[slider(0.0, 1.0, None)]), vec![]);
    assert_eq!(
        def_codes(&[slider(1.0, 0.0, None)]),
        vec![(0, "min_above_max")]
    );
    assert_eq!(
        def_codes(&[slider(0.0, 1.0, Some(0.0))]),
        vec![(0, "invalid_step")]
    );
    assert_eq!(
        def_codes(&[slider(0.0, 1.0, Some(-0.5))]),
        vec![(0, "invalid_step")]
    );
    assert_eq!(
        def_codes(&[slider(0.0, 1.0, Some(f64::NAN))]),
        vec![(0, "invalid_step")]
    );
}

#[test]
fn options_must_be_present_non_empty_and_unique() {
    for kind in ["Select", "Multiselect"] {
        let with = |options: Value| {
            field(
                json!({"type": kind, "id": "o", "label": "O", "required": true, "options": options}),
            )
        };
        assert_eq!(def_codes(&[with(json!(["a", "b"]))]), vec![]);
        assert_eq!(def_codes(&[with(json!([]))]), vec![(0, "no_options")]);
        assert_eq!(
            def_codes(&[with(json!(["a", ""]))]),
            vec![(0, "empty_option")]
        );
        // Reported once per repeated option, however often it repeats.
        assert_eq!(
            def_codes(&[with(json!(["a", "b", "a", "a", "b"]))]),
            vec![(0, "duplicate_option"), (0, "duplicate_option")]
        );
    }
}

#[test]
fn date_bounds_must_parse_and_be_ordered() {
    let date = |min: &str, max: &str| {
        field(
            json!({"type": "DateField", "id": "d", "label": "D", "required": true, "min": min, "max": max}),
        )
    };
    assert_eq!(def_codes(&[date("2024-01-01", "2024-01-01")]), vec![]);
    assert_eq!(
        def_codes(&[date("2024-01-02", "2024-01-01")]),
        vec![(0, "min_above_max")]
    );
    assert_eq!(
        def_codes(&[date("2023-02-29", "01/01/2024")]),
        vec![(0, "invalid_bound"), (0, "invalid_bound")]
    );

    let dt = |min: &str, max: &str| {
        field(
            json!({"type": "DateTime", "id": "t", "label": "T", "required": true, "min": min, "max": max}),
        )
    };
    // 10:00+02:00 is 08:00Z: before 09:00Z although it reads later.
    assert_eq!(
        def_codes(&[dt("2024-01-01T10:00:00+02:00", "2024-01-01T09:00:00Z")]),
        vec![]
    );
    assert_eq!(
        def_codes(&[dt("2024-01-01T09:00:00Z", "2024-01-01T10:00:00+02:00")]),
        vec![(0, "min_above_max")]
    );
    assert_eq!(
        def_codes(&[dt("2024-01-01T09:00:00", "2024-01-01")]),
        vec![(0, "invalid_bound"), (0, "invalid_bound")]
    );

    let time = |min: &str, max: &str| {
        field(
            json!({"type": "Time", "id": "h", "label": "H", "required": true, "min": min, "max": max}),
        )
    };
    assert_eq!(def_codes(&[time("09:00", "09:00:00")]), vec![]);
    assert_eq!(
        def_codes(&[time("17:00", "09:00")]),
        vec![(0, "min_above_max")]
    );
    assert_eq!(
        def_codes(&[time("9am", "24:00")]),
        vec![(0, "invalid_bound"), (0, "invalid_bound")]
    );
}

#[test]
fn all_definition_problems_are_reported_together() {
    let fields: Vec<Field> = serde_json::from_value(json!([
        {"type": "Text", "id": "a", "label": "", "required": true, "minLength": 9, "maxLength": 1},
        {"type": "Select", "id": "a", "label": "B", "required": true, "options": []},
        {"type": "Slider", "id": "", "label": "C", "required": true, "min": 5, "max": 1, "step": 0}
    ]))
    .unwrap();
    let errs = validate_field_defs(&fields).unwrap_err();
    let got: Vec<_> = errs
        .iter()
        .map(|e| (e.index, e.field_id.as_str(), e.code))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, "a", "empty_label"),
            (0, "a", "min_above_max"),
            (1, "a", "duplicate_id"),
            (1, "a", "no_options"),
            (2, "", "empty_id"),
            (2, "", "min_above_max"),
            (2, "", "invalid_step"),
        ]
    );
}

// ---------------------------------------------------------------- answers: presence

fn form() -> Vec<Field> {
    serde_json::from_value(json!([
        {"type": "Text", "id": "name", "label": "Name", "required": true, "maxLength": 10},
        {"type": "Number", "id": "age", "label": "Age", "required": false, "integerOnly": true, "min": 0},
        {"type": "Switch", "id": "agree", "label": "Agree", "required": true}
    ]))
    .unwrap()
}

#[test]
fn a_complete_answer_passes_and_is_normalized() {
    let out = validate_answers(
        &form(),
        &object(json!({"name": "Ada", "age": "36", "agree": false})),
    )
    .unwrap();
    assert_eq!(
        Value::Object(out),
        json!({"name": "Ada", "age": 36, "agree": false})
    );
}

#[test]
fn required_fields_must_be_answered() {
    let errs = validate_answers(&form(), &object(json!({"age": 3}))).unwrap_err();
    let got: Vec<_> = errs.iter().map(|e| (e.field_id.as_str(), e.code)).collect();
    assert_eq!(got, vec![("name", "required"), ("agree", "required")]);
    assert_eq!(errs[0].message, "This field is required");
    // null and blank strings are no answer.
    let errs =
        validate_answers(&form(), &object(json!({"name": "  ", "agree": null}))).unwrap_err();
    let got: Vec<_> = errs.iter().map(|e| (e.field_id.as_str(), e.code)).collect();
    assert_eq!(got, vec![("name", "required"), ("agree", "required")]);
}

#[test]
fn optional_fields_may_be_left_out() {
    for answers in [
        json!({"name": "Ada", "agree": true}),
        json!({"name": "Ada", "agree": true, "age": null}),
        json!({"name": "Ada", "agree": true, "age": ""}),
    ] {
        let out = validate_answers(&form(), &object(answers)).unwrap();
        assert_eq!(
            Value::Object(out),
            json!({"name": "Ada", "agree": true}),
            "unanswered is omitted"
        );
    }
}

#[test]
fn unknown_field_ids_are_refused() {
    let errs = validate_answers(
        &form(),
        &object(json!({"name": "Ada", "agree": true, "nickname": "A", "zzz": 1})),
    )
    .unwrap_err();
    let got: Vec<_> = errs.iter().map(|e| (e.field_id.as_str(), e.code)).collect();
    assert_eq!(
        got,
        vec![("nickname", "unknown_field"), ("zzz", "unknown_field")]
    );
    assert!(validate_answers(&[], &object(json!({"x": 1}))).is_err());
    assert_eq!(validate_answers(&[], &Map::new()), Ok(Map::new()));
}

#[test]
fn all_answer_problems_are_reported_together() {
    let errs = validate_answers(
        &form(),
        &object(json!({"name": "Augusta Ada King", "age": -1.5, "agree": "yes", "extra": true})),
    )
    .unwrap_err();
    let got: Vec<_> = errs.iter().map(|e| (e.field_id.as_str(), e.code)).collect();
    assert_eq!(
        got,
        vec![
            ("name", "too_long"),
            ("age", "not_integer"),
            ("age", "below_min"),
            ("agree", "wrong_type"),
            ("extra", "unknown_field"),
        ]
    );
    assert_eq!(errs[0].message, "Must be at most 10 characters");
    assert_eq!(errs[2].message, "Must be at least 0");
}

// ---------------------------------------------------------------- answers: per kind

#[test]
fn text_lengths_count_characters() {
    let f = field(
        json!({"type": "Text", "id": "t", "label": "T", "required": true, "minLength": 2, "maxLength": 3}),
    );
    assert_eq!(
        passes(&f, json!("héé")),
        json!("héé"),
        "3 characters, 5 bytes"
    );
    assert_eq!(passes(&f, json!("ab")), json!("ab"));
    assert_eq!(fails(&f, json!("a")), vec!["too_short"]);
    assert_eq!(fails(&f, json!("abcd")), vec!["too_long"]);
    assert_eq!(fails(&f, json!(12)), vec!["wrong_type"]);
    assert_eq!(fails(&f, json!(["ab"])), vec!["wrong_type"]);
    // Kept exactly as typed, surrounding spaces included.
    assert_eq!(passes(&f, json!(" a ")), json!(" a "));

    let f = field(
        json!({"type": "TextArea", "id": "t", "label": "T", "required": true, "minLength": 1, "maxLength": 1}),
    );
    assert_eq!(passes(&f, json!("日")), json!("日"));
    assert_eq!(fails(&f, json!("日本")), vec!["too_long"]);
    assert_eq!(fails(&f, json!(true)), vec!["wrong_type"]);
    let errs = validate_answers(&[f], &object(json!({"t": "日本"}))).unwrap_err();
    assert_eq!(errs[0].message, "Must be at most 1 character");
}

#[test]
fn text_area_keeps_newlines() {
    let f = field(json!({"type": "TextArea", "id": "t", "label": "T", "required": true}));
    assert_eq!(
        passes(&f, json!("line one\nline two")),
        json!("line one\nline two")
    );
}

fn text_format(format: &str) -> Field {
    field(json!({"type": "Text", "id": "t", "label": "T", "required": true, "format": format}))
}

#[test]
fn email_format() {
    let f = text_format("EMAIL");
    for ok in [
        "a@b.co",
        "first.last+tag@mail.example.org",
        "ünï@exämple.de",
    ] {
        passes(&f, json!(ok));
    }
    for bad in [
        "plain", "@b.co", "a@b", "a@@b.co", "a@b@c.co", "a b@c.co", "a@b.co ", "a@.b.co",
        "a@b..co", "a@b.co.",
    ] {
        assert_eq!(fails(&f, json!(bad)), vec!["invalid_format"], "{bad:?}");
    }
}

#[test]
fn phone_format() {
    let f = text_format("PHONE");
    for ok in [
        "+1 (555) 123-4567",
        "555.123.4567",
        "0301234567",
        "+44 20 7946 0958",
        "1234567",
        "+123456789012345",
    ] {
        passes(&f, json!(ok));
    }
    for bad in [
        "123456",            // 6 digits
        "+1234567890123456", // 16 digits
        "555-CALL-NOW",
        "1+2345678",     // + not leading
        "(555 123 4567", // unbalanced
        "555) 123 4567",
        "555/123/4567",
    ] {
        assert_eq!(fails(&f, json!(bad)), vec!["invalid_format"], "{bad:?}");
    }
}

#[test]
fn url_format() {
    let f = text_format("URL");
    for ok in [
        "https://example.com",
        "http://example.com/path?q=1#frag",
        "HTTPS://Example.COM:8443/",
        "https://user:pw@host.internal",
        "http://localhost:8080",
        "http://127.0.0.1/x",
        "http://[::1]:3000/",
        "https://bücher.de",
    ] {
        passes(&f, json!(ok));
    }
    for bad in [
        "example.com",
        "ftp://example.com",
        "https://",
        "https:///path",
        "https://exa mple.com",
        "https://example.com:port",
        "https://example.com:",
        "https://..com",
        "https://[::1",
        "javascript:alert(1)",
    ] {
        assert_eq!(fails(&f, json!(bad)), vec!["invalid_format"], "{bad:?}");
    }
}

#[test]
fn format_and_length_errors_come_together() {
    let f = field(
        json!({"type": "Text", "id": "t", "label": "T", "required": true, "format": "EMAIL", "maxLength": 5}),
    );
    assert_eq!(
        fails(&f, json!("not an email")),
        vec!["too_long", "invalid_format"]
    );
}

fn number(integer_only: bool, min: Option<f64>, max: Option<f64>) -> Field {
    Field::Number(Number {
        id: "n".into(),
        label: "N".into(),
        required: true,
        description: None,
        integer_only,
        min,
        max,
    })
}

#[test]
fn numbers() {
    let f = number(false, Some(-1.5), Some(10.0));
    assert_eq!(passes(&f, json!(2.5)), json!(2.5));
    assert_eq!(passes(&f, json!(-1.5)), json!(-1.5), "bounds are inclusive");
    assert_eq!(passes(&f, json!(10)), json!(10));
    assert_eq!(fails(&f, json!(-2)), vec!["below_min"]);
    assert_eq!(fails(&f, json!(10.01)), vec!["above_max"]);
    for bad in [
        json!("ten"),
        json!(true),
        json!([1]),
        json!({"n": 1}),
        json!("inf"),
        json!("NaN"),
    ] {
        assert_eq!(fails(&f, bad.clone()), vec!["wrong_type"], "{bad}");
    }
    // Numeric strings (what an HTML form posts) become JSON numbers.
    assert_eq!(passes(&f, json!(" 7 ")), json!(7));
    assert_eq!(passes(&f, json!("2.25")), json!(2.25));
    assert_eq!(fails(&f, json!("11")), vec!["above_max"]);

    let unbounded = number(false, None, None);
    assert_eq!(passes(&unbounded, json!(-1e300)), json!(-1e300));
    assert_eq!(
        passes(&unbounded, json!(u64::MAX)),
        json!(u64::MAX),
        "kept as given"
    );
}

#[test]
fn integer_only_numbers() {
    let f = number(true, Some(0.0), Some(100.0));
    assert_eq!(passes(&f, json!(42)), json!(42));
    assert_eq!(
        passes(&f, json!(42.0)),
        json!(42),
        "whole floats become integers"
    );
    assert_eq!(passes(&f, json!("42")), json!(42));
    assert_eq!(fails(&f, json!(4.2)), vec!["not_integer"]);
    assert_eq!(fails(&f, json!("4.2")), vec!["not_integer"]);
    assert_eq!(fails(&f, json!(100.5)), vec!["not_integer", "above_max"]);
    let errs = validate_answers(&[f], &object(json!({"n": 0.5}))).unwrap_err();
    assert_eq!(errs[0].message, "Must be a whole number");
}

fn slider(min: f64, max: f64, step: Option<f64>) -> Field {
    Field::Slider(Slider {
        id: "s".into(),
        label: "S".into(),
        required: true,
        description: None,
        min,
        max,
        step,
    })
}

#[test]
fn slider_range() {
    let f = slider(0.0, 10.0, None);
    assert_eq!(passes(&f, json!(0)), json!(0));
    assert_eq!(passes(&f, json!(10)), json!(10));
    assert_eq!(
        passes(&f, json!(2.71)),
        json!(2.71),
        "no step: any value in range"
    );
    assert_eq!(fails(&f, json!(-0.1)), vec!["below_min"]);
    assert_eq!(fails(&f, json!(10.5)), vec!["above_max"]);
    assert_eq!(fails(&f, json!("high")), vec!["wrong_type"]);
    assert_eq!(passes(&f, json!("5")), json!(5));
}

#[test]
fn slider_steps_tolerate_float_error() {
    let f = slider(0.0, 1.0, Some(0.1));
    // 0.3 / 0.1 = 2.9999999999999996 in binary floating point.
    for ok in [0.0, 0.1, 0.3, 0.7, 0.9, 1.0, 0.1 + 0.2] {
        passes(&f, json!(ok));
    }
    for bad in [0.05, 0.35, 0.999] {
        assert_eq!(fails(&f, json!(bad)), vec!["off_step"], "{bad}");
    }
    // The grid starts at min, not at zero.
    let f = slider(0.5, 5.5, Some(1.0));
    passes(&f, json!(1.5));
    passes(&f, json!(5.5));
    assert_eq!(fails(&f, json!(2)), vec!["off_step"]);
    let errs = validate_answers(&[f], &object(json!({"s": 2}))).unwrap_err();
    assert_eq!(
        errs[0].message,
        "Must be 0.5 or go up from it in steps of 1"
    );

    let f = slider(-1.0, 1.0, Some(0.25));
    passes(&f, json!(-0.75));
    assert_eq!(fails(&f, json!(-0.8)), vec!["off_step"]);
    // Far along the scale the error grows; the tolerance grows with it.
    let f = slider(0.0, 1e9, Some(0.01));
    passes(&f, json!(123_456_789.01));
    assert_eq!(fails(&f, json!(123_456_789.015)), vec!["off_step"]);
    // Out of range and off the grid: both reported.
    let f = slider(0.0, 1.0, Some(0.1));
    assert_eq!(fails(&f, json!(1.05)), vec!["above_max", "off_step"]);
}

#[test]
fn switches() {
    let f = field(json!({"type": "Switch", "id": "s", "label": "S", "required": true}));
    assert_eq!(passes(&f, json!(true)), json!(true));
    assert_eq!(
        passes(&f, json!(false)),
        json!(false),
        "off is an answer, even when required"
    );
    assert_eq!(passes(&f, json!("true")), json!(true));
    assert_eq!(passes(&f, json!("false")), json!(false));
    for bad in [
        json!(1),
        json!(0),
        json!("yes"),
        json!("TRUE"),
        json!([true]),
    ] {
        assert_eq!(fails(&f, bad.clone()), vec!["wrong_type"], "{bad}");
    }
}

#[test]
fn selects() {
    let f = field(
        json!({"type": "Select", "id": "c", "label": "C", "required": true, "options": ["red", "green"]}),
    );
    assert_eq!(passes(&f, json!("green")), json!("green"));
    assert_eq!(fails(&f, json!("blue")), vec!["not_an_option"]);
    assert_eq!(
        fails(&f, json!("Red")),
        vec!["not_an_option"],
        "options match exactly"
    );
    assert_eq!(fails(&f, json!(["red"])), vec!["wrong_type"]);
    assert_eq!(fails(&f, json!(1)), vec!["wrong_type"]);
    let errs = validate_answers(&[f], &object(json!({"c": "blue"}))).unwrap_err();
    assert_eq!(errs[0].message, "\"blue\" is not one of the options");
}

#[test]
fn multiselects() {
    let options = json!(["a", "b", "c"]);
    let f = field(
        json!({"type": "Multiselect", "id": "m", "label": "M", "required": true, "options": options}),
    );
    assert_eq!(passes(&f, json!(["c", "a"])), json!(["c", "a"]));
    assert_eq!(fails(&f, json!(["a", "a"])), vec!["duplicate_option"]);
    assert_eq!(
        fails(&f, json!(["a", "b", "a", "b", "a"])),
        vec!["duplicate_option", "duplicate_option"]
    );
    assert_eq!(fails(&f, json!(["a", "z"])), vec!["not_an_option"]);
    assert_eq!(
        fails(&f, json!(["z", "z"])),
        vec!["not_an_option"],
        "a repeated non-option is reported once"
    );
    assert_eq!(fails(&f, json!(["a", 1, null])), vec!["wrong_type"]);
    assert_eq!(fails(&f, json!("a")), vec!["wrong_type"]);
    assert_eq!(
        fails(&f, json!([])),
        vec!["required"],
        "required: at least one choice"
    );

    let optional = field(
        json!({"type": "Multiselect", "id": "m", "label": "M", "required": false, "options": options}),
    );
    assert_eq!(
        passes(&optional, json!([])),
        json!([]),
        "optional: none of these is an answer"
    );
    assert_eq!(answer(&optional, Value::Null), Ok(None));
}

#[test]
fn dates() {
    let f = field(json!({"type": "DateField", "id": "d", "label": "D", "required": true}));
    assert_eq!(
        passes(&f, json!("2024-02-29")),
        json!("2024-02-29"),
        "2024 is a leap year"
    );
    passes(&f, json!("2000-02-29"));
    assert_eq!(fails(&f, json!("2023-02-29")), vec!["invalid_date"]);
    assert_eq!(
        fails(&f, json!("1900-02-29")),
        vec!["invalid_date"],
        "centuries are not leap years"
    );
    assert_eq!(fails(&f, json!("2024-04-31")), vec!["invalid_date"]);
    assert_eq!(fails(&f, json!("2024-13-01")), vec!["invalid_date"]);
    for bad in [
        "29/02/2024",
        "2024-2-29",
        "2024-02-29T00:00:00Z",
        "tomorrow",
    ] {
        assert_eq!(fails(&f, json!(bad)), vec!["invalid_format"], "{bad}");
    }
    assert_eq!(fails(&f, json!(20240229)), vec!["wrong_type"]);
    let errs = validate_answers(&[f], &object(json!({"d": "2023-02-29"}))).unwrap_err();
    assert_eq!(errs[0].message, "2023-02-29 is not a real date");
}

#[test]
fn date_bounds() {
    let f = field(
        json!({"type": "DateField", "id": "d", "label": "D", "required": true, "min": "2024-02-28", "max": "2024-03-01"}),
    );
    for ok in ["2024-02-28", "2024-02-29", "2024-03-01"] {
        passes(&f, json!(ok));
    }
    assert_eq!(fails(&f, json!("2024-02-27")), vec!["below_min"]);
    assert_eq!(fails(&f, json!("2023-12-31")), vec!["below_min"]);
    assert_eq!(fails(&f, json!("2024-03-02")), vec!["above_max"]);
    let errs = validate_answers(&[f], &object(json!({"d": "2024-03-02"}))).unwrap_err();
    assert_eq!(errs[0].message, "Must be on or before 2024-03-01");
}

#[test]
fn date_times_compare_instants_across_zones() {
    let f = field(json!({
        "type": "DateTime", "id": "t", "label": "T", "required": true,
        "min": "2024-05-01T09:00:00+02:00", "max": "2024-05-01T17:00:00Z"
    }));
    // min is 07:00Z.
    assert_eq!(
        passes(&f, json!("2024-05-01T07:00:00Z")),
        json!("2024-05-01T07:00:00Z"),
        "kept as given"
    );
    passes(&f, json!("2024-05-01T03:00:00-04:00")); // 07:00Z
    passes(&f, json!("2024-05-01T14:00:00.250+05:30")); // 08:30:00.25Z
    // Noon in India is 06:30Z: before the min although it reads later.
    assert_eq!(
        fails(&f, json!("2024-05-01T12:00:00+05:30")),
        vec!["below_min"]
    );
    passes(&f, json!("2024-05-02T02:00:00+09:00")); // 17:00Z, the max
    assert_eq!(
        fails(&f, json!("2024-05-01T08:59:59+02:00")),
        vec!["below_min"]
    );
    assert_eq!(
        fails(&f, json!("2024-05-01T06:59:59.999Z")),
        vec!["below_min"]
    );
    assert_eq!(
        fails(&f, json!("2024-05-01T13:00:01-04:00")),
        vec!["above_max"]
    ); // 17:00:01Z
    assert_eq!(
        fails(&f, json!("2024-05-01T17:00:00.001Z")),
        vec!["above_max"]
    );
    // Wall-clock earlier than max but a later instant.
    assert_eq!(
        fails(&f, json!("2024-05-01T16:00:00-02:00")),
        vec!["above_max"]
    );
}

#[test]
fn date_time_shapes() {
    let f = field(json!({"type": "DateTime", "id": "t", "label": "T", "required": true}));
    passes(&f, json!("2024-02-29T23:59:59Z"));
    passes(&f, json!("2024-05-01T10:00:00.123456+00:00"));
    for bad in [
        "2024-05-01T10:00:00",
        "2024-05-01",
        "2024-05-01T10:00Z",
        "2024-05-01 10:00:00Z",
        "now",
    ] {
        assert_eq!(fails(&f, json!(bad)), vec!["invalid_format"], "{bad}");
    }
    for bad in [
        "2023-02-29T10:00:00Z",
        "2024-05-01T24:00:00Z",
        "2024-05-01T10:60:00Z",
        "2024-05-01T10:00:00+25:00",
    ] {
        assert_eq!(fails(&f, json!(bad)), vec!["invalid_date"], "{bad}");
    }
    assert_eq!(fails(&f, json!(1_714_548_600)), vec!["wrong_type"]);
}

#[test]
fn times() {
    let f = field(
        json!({"type": "Time", "id": "h", "label": "H", "required": true, "min": "09:00", "max": "17:30"}),
    );
    assert_eq!(passes(&f, json!("09:00")), json!("09:00"));
    assert_eq!(passes(&f, json!("12:15:30")), json!("12:15:30"));
    passes(&f, json!("17:30:00"));
    assert_eq!(fails(&f, json!("08:59:59")), vec!["below_min"]);
    assert_eq!(fails(&f, json!("17:30:01")), vec!["above_max"]);
    let unbounded = field(json!({"type": "Time", "id": "h", "label": "H", "required": true}));
    passes(&unbounded, json!("00:00"));
    passes(&unbounded, json!("23:59:59"));
    assert_eq!(fails(&unbounded, json!("24:00")), vec!["invalid_time"]);
    assert_eq!(fails(&unbounded, json!("12:60")), vec!["invalid_time"]);
    for bad in ["9:00", "09:00 AM", "0900", "09:00:00.5", "09:00Z"] {
        assert_eq!(
            fails(&unbounded, json!(bad)),
            vec!["invalid_format"],
            "{bad}"
        );
    }
    assert_eq!(fails(&unbounded, json!(900)), vec!["wrong_type"]);
}

#[test]
fn unparsable_bounds_are_ignored_when_answering() {
    // validate_field_defs reports these when the request is opened; answers are not
    // blocked by them.
    let f = field(
        json!({"type": "DateField", "id": "d", "label": "D", "required": true, "min": "soon"}),
    );
    passes(&f, json!("1999-01-01"));
}

// ---------------------------------------------------------------- pre-fills

fn bid(field_id: &str, value: Value) -> FieldBid {
    FieldBid {
        field_id: field_id.into(),
        value,
        confidence: Some(0.7),
        rationale: None,
    }
}

#[test]
fn bids_apply_only_when_valid_for_their_field() {
    let f = field(
        json!({"type": "Slider", "id": "risk", "label": "Risk", "required": true, "min": 0, "max": 1, "step": 0.1}),
    );
    assert!(bid_applies(&f, &bid("risk", json!(0.3))));
    assert!(!bid_applies(&f, &bid("risk", json!(0.35))), "off the grid");
    assert!(!bid_applies(&f, &bid("risk", json!(2))), "out of range");
    assert!(
        !bid_applies(&f, &bid("other", json!(0.3))),
        "another field's bid"
    );
    assert!(
        !bid_applies(&f, &bid("risk", Value::Null)),
        "nothing to pre-fill"
    );

    let f = field(
        json!({"type": "Multiselect", "id": "m", "label": "M", "required": false, "options": ["a", "b"]}),
    );
    assert!(bid_applies(&f, &bid("m", json!(["b"]))));
    assert!(!bid_applies(&f, &bid("m", json!(["b", "b"]))));
    let f = field(
        json!({"type": "Text", "id": "e", "label": "E", "required": false, "format": "EMAIL"}),
    );
    assert!(bid_applies(&f, &bid("e", json!("a@b.co"))));
    assert!(
        !bid_applies(&f, &bid("e", json!(""))),
        "blank pre-fills nothing"
    );
    assert!(!bid_applies(&f, &bid("e", json!("nope"))));
}
