//! What `tern inbox` prints: the list, one request with its fields and timeline, and
//! JSON for scripts.

use std::collections::BTreeMap;

use serde_json::Value;

pub(crate) fn print_json(v: &Value) {
    match serde_json::to_string_pretty(v) {
        Ok(s) => println!("{s}"),
        Err(_) => println!("{v}"),
    }
}

/// A JSON value in one line: strings bare, everything else as JSON.
pub(super) fn compact(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        // A bound stored as a float but whole reads better as `10` than as `10.0`.
        Value::Number(n)
            if n.as_f64()
                .is_some_and(|f| f.fract() == 0.0 && f.abs() < 1e15) =>
        {
            format!("{}", n.as_f64().unwrap_or_default() as i64)
        }
        other => other.to_string(),
    }
}

/// `2024-05-01T07:30:00.123Z` → `2024-05-01 07:30:00Z`: readable, still exact to the second.
pub(crate) fn short_time(s: &str) -> String {
    let (date, rest) = s.split_once('T').unwrap_or((s, ""));
    if rest.is_empty() {
        return s.to_owned();
    }
    let time: String = rest.chars().take(8).collect();
    let zone = rest
        .find(['Z', '+'])
        .or_else(|| rest.rfind('-'))
        .map(|i| &rest[i..])
        .unwrap_or("");
    format!("{date} {time}{zone}")
}

/// Cuts to `n` characters, marking the cut.
pub(super) fn clip(s: &str, n: usize) -> String {
    let one_line = s.replace(['\n', '\r'], " ");
    if one_line.chars().count() <= n {
        one_line
    } else {
        let mut out: String = one_line.chars().take(n.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

pub(super) fn print_list(list: &Value) {
    let items = list["items"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let count = list["count"].as_u64().unwrap_or(items.len() as u64);
    if items.is_empty() {
        eprintln!("no requests match");
        return;
    }
    let w = items
        .iter()
        .map(|r| r["id"].as_str().unwrap_or("?").chars().count())
        .max()
        .unwrap_or(2);
    println!(
        "{:<w$}  {:<11}  {:<9}  {:<12}  {:<20}  SUMMARY",
        "ID", "KIND", "STATUS", "PROJECT", "CREATED"
    );
    for r in items {
        let mut status = r["status"].as_str().unwrap_or("?").to_owned();
        if let Some(o) = r["outcome"].as_str() {
            status = o.to_owned();
        }
        println!(
            "{:<w$}  {:<11}  {:<9}  {:<12}  {:<20}  {}",
            r["id"].as_str().unwrap_or("?"),
            r["kind"].as_str().unwrap_or("?"),
            clip(&status, 9),
            clip(r["projectName"].as_str().unwrap_or(""), 12),
            short_time(r["createdAt"].as_str().unwrap_or("")),
            clip(r["summary"].as_str().unwrap_or(""), 60),
        );
    }
    let shown = items.len() as u64;
    if count > shown {
        eprint!("{shown} of {count} shown");
        if let Some(c) = list["nextCursor"].as_str() {
            eprint!("; next page: --before {c}");
        }
        eprintln!();
    } else {
        eprintln!("{count} in all");
    }
}

pub(super) fn print_view(v: &Value) {
    let kind = v["kind"].as_str().unwrap_or("request");
    println!(
        "{} {}  [{}]",
        capitalized(kind),
        v["id"].as_str().unwrap_or("?"),
        v["status"].as_str().unwrap_or("?")
    );
    println!(
        "Project  {}   Task  {} ({})",
        v["projectName"].as_str().unwrap_or("?"),
        v["taskName"].as_str().unwrap_or("?"),
        v["taskId"].as_str().unwrap_or("?")
    );
    println!(
        "Created  {}",
        short_time(v["createdAt"].as_str().unwrap_or("?"))
    );
    println!();
    println!("{}", v["summary"].as_str().unwrap_or(""));
    if let Some(ctx) = v["keyValueContext"].as_object()
        && !ctx.is_empty()
    {
        println!("\nContext");
        let width = ctx.keys().map(|k| k.chars().count()).max().unwrap_or(0);
        for (k, val) in ctx {
            println!("  {k:<width$}  {}", compact(val));
        }
    }
    if let Some(rec) = v["approvalRecommendation"].as_object() {
        let mut line = format!(
            "\nRecommendation  {}",
            rec.get("outcome")
                .and_then(|o| o["type"].as_str())
                .unwrap_or("?")
        );
        if let Some(c) = rec.get("confidence").and_then(Value::as_f64) {
            line.push_str(&format!(" (confidence {c})"));
        }
        if let Some(note) = rec.get("outcome").and_then(|o| o["note"].as_str()) {
            line.push_str(&format!(" — note: {note}"));
        }
        if let Some(r) = rec.get("rationale").and_then(Value::as_str) {
            line.push_str(&format!("\n  {r}"));
        }
        println!("{line}");
    }
    let bids: BTreeMap<&str, &Value> = v["fieldBids"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| Some((b["fieldId"].as_str()?, &b["value"])))
        .collect();
    if let Some(fields) = v["fields"].as_array()
        && !fields.is_empty()
    {
        println!("\nFields");
        let width = fields
            .iter()
            .map(|f| f["id"].as_str().unwrap_or("?").chars().count())
            .max()
            .unwrap_or(0);
        for f in fields {
            let id = f["id"].as_str().unwrap_or("?");
            let mut line = format!(
                "  {id:<width$}  {}{}  \"{}\"",
                f["type"].as_str().unwrap_or("?"),
                if f["required"].as_bool() == Some(true) {
                    ", required"
                } else {
                    ""
                },
                f["label"].as_str().unwrap_or("")
            );
            line.push_str(&field_constraints(f));
            if let Some(b) = bids.get(id) {
                line.push_str(&format!("  suggested: {}", compact(b)));
            }
            println!("{line}");
        }
    }
    if let Some(att) = v["attachments"].as_array()
        && !att.is_empty()
    {
        println!("\nAttachments (save one with `tern inbox download ID -o FILE`)");
        for a in att {
            println!("  {}", compact(a));
        }
    }
    if let Some(result) = v.get("result").filter(|r| !r.is_null()) {
        println!("\nResult");
        if result["status"] == "withdrawn" {
            let mut line = match result["dismissedBy"].as_str() {
                Some(by) => format!("  dismissed by {by}"),
                None => match v["decidedBy"].as_str() {
                    Some(by) => format!("  withdrawn by {by}"),
                    None => "  withdrawn".to_owned(),
                },
            };
            if let Some(at) = result["withdrawnAt"].as_str() {
                line.push_str(&format!(" at {}", short_time(at)));
            }
            println!("{line}");
            if let Some(r) = result["reason"].as_str() {
                println!("  reason: {r}");
            }
        } else if let Some(o) = result.get("outcome") {
            let mut line = format!("  {}", o["type"].as_str().unwrap_or("?"));
            if let Some(by) = result["decidedBy"].as_str() {
                line.push_str(&format!(" by {by}"));
            }
            if let Some(at) = result["decidedAt"].as_str() {
                line.push_str(&format!(" at {}", short_time(at)));
            }
            println!("{line}");
            if let Some(r) = o["reasonCode"].as_str() {
                println!("  reason: {r}");
            }
            if let Some(n) = o["note"].as_str() {
                println!("  note: {n}");
            }
        } else {
            let mut line = "  answered".to_owned();
            if let Some(by) = result["answeredBy"].as_str() {
                line.push_str(&format!(" by {by}"));
            }
            if let Some(at) = result["answeredAt"].as_str() {
                line.push_str(&format!(" at {}", short_time(at)));
            }
            println!("{line}");
            for (k, val) in result["fields"].as_object().into_iter().flatten() {
                println!("  {k} = {}", compact(val));
            }
        }
    }
    if let Some(events) = v["events"].as_array()
        && !events.is_empty()
    {
        println!("\nTimeline");
        for e in events {
            println!(
                "  {}  {:<8}  {:<21}  {}",
                short_time(e["timestamp"].as_str().unwrap_or("")),
                e["source"].as_str().unwrap_or(""),
                e["eventType"].as_str().unwrap_or(""),
                clip(&event_text(e), 70)
            );
        }
    }
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// What limits a field's answer, in a few words.
fn field_constraints(f: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(fmt) = f["format"].as_str() {
        parts.push(format!("format {fmt}"));
    }
    if f["integerOnly"].as_bool() == Some(true) {
        parts.push("integer".to_owned());
    }
    match (
        f.get("min").filter(|v| !v.is_null()),
        f.get("max").filter(|v| !v.is_null()),
    ) {
        (Some(a), Some(b)) => parts.push(format!("{} to {}", compact(a), compact(b))),
        (Some(a), None) => parts.push(format!("from {}", compact(a))),
        (None, Some(b)) => parts.push(format!("up to {}", compact(b))),
        (None, None) => {}
    }
    if let Some(s) = f["step"].as_f64() {
        parts.push(format!("step {s}"));
    }
    match (f["minLength"].as_u64(), f["maxLength"].as_u64()) {
        (Some(a), Some(b)) => parts.push(format!("{a}-{b} chars")),
        (Some(a), None) => parts.push(format!("at least {a} chars")),
        (None, Some(b)) => parts.push(format!("at most {b} chars")),
        (None, None) => {}
    }
    if let Some(opts) = f["options"].as_array() {
        let o: Vec<String> = opts.iter().map(compact).collect();
        parts.push(format!("options {}", o.join("|")));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("  ({})", parts.join(", "))
    }
}

/// The gist of an event's payload for the timeline.
fn event_text(e: &Value) -> String {
    let p = &e["payload"];
    let text = match e["eventType"].as_str().unwrap_or("") {
        "TASK_CREATED" => p["name"].as_str().map(|n| format!("task {n:?}")),
        "APPROVAL_REQUESTED" | "ELICITATION_REQUESTED" => p["summary"].as_str().map(str::to_owned),
        "APPROVAL_DECIDED" => {
            let o = &p["outcome"];
            o["type"].as_str().map(|t| match o["note"].as_str() {
                Some(n) => format!("{t}: {n}"),
                None => t.to_owned(),
            })
        }
        "ELICITATION_PROVIDED" => Some(match p["answeredBy"].as_str() {
            Some(by) => format!("answered by {by}"),
            None => "answered".to_owned(),
        }),
        "ACTION" => p["description"].as_str().map(str::to_owned),
        "EXCEPTION" => p["message"].as_str().map(str::to_owned),
        "NOTE" => p["message"].as_str().map(str::to_owned),
        _ => None,
    };
    let mut text = text.unwrap_or_default();
    if let (Some(from), Some(to)) = (e["transitionFrom"].as_str(), e["transitionTo"].as_str()) {
        text.push_str(&format!(" [{from} → {to}]"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_shorten() {
        assert_eq!(
            short_time("2024-05-01T07:30:00.123Z"),
            "2024-05-01 07:30:00Z"
        );
        assert_eq!(
            short_time("2024-05-01T09:30:00+02:00"),
            "2024-05-01 09:30:00+02:00"
        );
    }
}
