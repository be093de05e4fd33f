//! Deciding approvals and answering forms: the decision or the answers posted to the
//! reviewer API, a 409 explained (who decided first), and `--field ID=VALUE` typed by the
//! form's fields.

use serde_json::{Map, Value, json};
use tern_inbox::Field;

use super::client::{Failure, Http};
use super::request_path;
use super::show::{compact, print_json, short_time};

pub(super) async fn decide(
    http: &Http,
    id: &str,
    kind: &str,
    note: Option<String>,
    reason_code: Option<String>,
    json: bool,
) -> Result<(), Failure> {
    let mut outcome = json!({"type": kind});
    if let Some(n) = note {
        outcome["note"] = Value::String(n);
    }
    if let Some(r) = reason_code {
        outcome["reasonCode"] = Value::String(r);
    }
    let result = post_to_request(http, id, "decide", &json!({"outcome": outcome})).await?;
    if json {
        print_json(&result);
    } else {
        let by = result["decidedBy"].as_str().unwrap_or("you");
        println!(
            "{id}: {} by {by}",
            result["outcome"]["type"].as_str().unwrap_or(kind)
        );
    }
    Ok(())
}

/// Posts `body` to the request's `action` (`decide`, `answer` or `withdraw`) and returns the result; a
/// 409 says who was first ([`explain_conflict`]).
pub(super) async fn post_to_request(
    http: &Http,
    id: &str,
    action: &str,
    body: &Value,
) -> Result<Value, Failure> {
    let path = format!("{}/{action}", request_path(id));
    match http.post_json(&path, body, None).await {
        Ok(r) => Ok(r.body.unwrap_or(Value::Null)),
        Err(f) => Err(explain_conflict(http, id, f).await),
    }
}

/// Turns a 409 into "already decided by X at T", reading the request again.
async fn explain_conflict(http: &Http, id: &str, f: Failure) -> Failure {
    let Failure::Http { status: 409, body } = f else {
        return f;
    };
    let mut message = format!("request {id} was already decided");
    if let Ok(view) = http.get_json(&request_path(id), &[]).await {
        if let Some(by) = view["decidedBy"].as_str() {
            message.push_str(&format!(" by {by}"));
        }
        if let Some(at) = view["decidedAt"].as_str() {
            message.push_str(&format!(" at {}", short_time(at)));
        }
        if let Some(o) = view["outcome"].as_str() {
            message.push_str(&format!(" ({o})"));
        } else if let Some(s) = view["status"].as_str()
            && s != "decided"
        {
            message = format!("request {id} is {s}; it can no longer be decided");
        }
        message.push_str("; the first decision stands");
    }
    Failure::Conflict { message, body }
}

pub(super) async fn answer(
    http: &Http,
    id: &str,
    specs: &[String],
    json: bool,
) -> Result<(), Failure> {
    let view = http.get_json(&request_path(id), &[]).await?;
    if view["kind"].as_str().is_some_and(|k| k != "elicitation") {
        return Err(Failure::NotFound(format!(
            "request {id} is an approval, not an elicitation; decide it with `tern inbox approve` or `reject`"
        )));
    }
    let fields: Vec<Field> = serde_json::from_value(view["fields"].clone()).map_err(|e| {
        Failure::Other(format!(
            "the gateway sent fields this tern cannot read: {e}"
        ))
    })?;
    let answers = convert_answers(&fields, specs).map_err(Failure::Invalid)?;
    let result = post_to_request(http, id, "answer", &json!({"fields": answers})).await?;
    if json {
        print_json(&result);
    } else {
        let by = result["answeredBy"].as_str().unwrap_or("you");
        println!("{id}: answered by {by}");
        if let Some(map) = result["fields"].as_object() {
            for (k, v) in map {
                println!("  {k} = {}", compact(v));
            }
        }
    }
    Ok(())
}

/// `ID=VALUE` arguments → the answers object, typed by each field's kind. Every problem is
/// reported at once; an id the form does not have is one of them.
pub(crate) fn convert_answers(
    fields: &[Field],
    specs: &[String],
) -> Result<Map<String, Value>, Vec<String>> {
    let mut errors = Vec::new();
    let mut answers = Map::new();
    for spec in specs {
        let Some((id, raw)) = spec.split_once('=') else {
            errors.push(format!("--field {spec:?}: write ID=VALUE"));
            continue;
        };
        let id = id.trim();
        let Some(field) = fields.iter().find(|f| f.id() == id) else {
            let known: Vec<&str> = fields.iter().map(Field::id).collect();
            errors.push(format!(
                "{id}: the request has no such field (its fields: {})",
                known.join(", ")
            ));
            continue;
        };
        match convert_value(field, raw) {
            Ok(Value::Array(items)) => {
                // Repeating a Multiselect's --field adds to its list.
                match answers.entry(id.to_owned()).or_insert_with(|| json!([])) {
                    Value::Array(list) => list.extend(items),
                    other => *other = Value::Array(items),
                }
            }
            Ok(v) => {
                if answers.insert(id.to_owned(), v).is_some() {
                    errors.push(format!("{id}: given twice"));
                }
            }
            Err(e) => errors.push(format!("{id}: {e}")),
        }
    }
    if errors.is_empty() {
        Ok(answers)
    } else {
        Err(errors)
    }
}

fn convert_value(field: &Field, raw: &str) -> Result<Value, String> {
    match field {
        Field::Number(_) | Field::Slider(_) => parse_number(raw.trim())
            .ok_or_else(|| format!("{} field: {raw:?} is not a number", field.kind())),
        Field::Switch(_) => match raw.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "y" | "on" | "1" => Ok(Value::Bool(true)),
            "false" | "no" | "n" | "off" | "0" => Ok(Value::Bool(false)),
            _ => Err(format!("Switch field: {raw:?} is not true/false or yes/no")),
        },
        Field::Multiselect(_) => Ok(Value::Array(
            raw.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_owned()))
                .collect(),
        )),
        _ => Ok(Value::String(raw.to_owned())),
    }
}

/// A JSON number: an integer when the text is one, so integer-only fields accept it.
fn parse_number(s: &str) -> Option<Value> {
    if let Ok(i) = s.parse::<i64>() {
        return Some(Value::from(i));
    }
    let f: f64 = s.parse().ok()?;
    serde_json::Number::from_f64(f).map(Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> Vec<Field> {
        serde_json::from_value(json!([
            {"type": "Number", "id": "n", "label": "N", "required": true, "integerOnly": true},
            {"type": "Slider", "id": "s", "label": "S", "required": false, "min": 0, "max": 1},
            {"type": "Switch", "id": "ok", "label": "OK", "required": true},
            {"type": "Multiselect", "id": "tags", "label": "Tags", "required": false, "options": ["a", "b", "c"]},
            {"type": "Text", "id": "t", "label": "T", "required": false},
        ]))
        .unwrap()
    }

    fn specs(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn answers_are_typed_by_field_kind() {
        let a = convert_answers(
            &fields(),
            &specs(&["n=42", "s=0.5", "ok=yes", "tags=a,b", "tags=c", "t=x=y"]),
        )
        .unwrap();
        assert_eq!(
            Value::Object(a),
            json!({"n": 42, "s": 0.5, "ok": true, "tags": ["a", "b", "c"], "t": "x=y"})
        );
    }

    #[test]
    fn bad_answers_are_all_reported() {
        let e = convert_answers(&fields(), &specs(&["n=many", "ok=perhaps", "nope=1", "t"]))
            .unwrap_err();
        assert_eq!(e.len(), 4, "{e:?}");
        assert!(
            e[0].starts_with("n: ") && e[2].contains("no such field"),
            "{e:?}"
        );
    }
}
