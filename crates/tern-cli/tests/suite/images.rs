//! A session whose model was shown an image: `tern sessions show` marks the message and
//! prints its description, search never matches the image's data, export keeps it whole.

use crate::common;

use common::{Env, assert_ok, stdout};
use serde_json::Value;
use tern_llm::{ContentPart, Role};
use tern_store::{NewMessage, NewSession, Store};

const PIXEL: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
const DESCRIPTION: &str = "Images from the tool calls above, in order:\n\
                           [image from tool call call_1 (shot): image/png, 70 bytes]";

/// A session with a user message showing one image, stored as the agent stores it.
async fn session_with_an_image(e: &Env) -> String {
    std::fs::create_dir_all(e.home()).unwrap();
    let store = Store::open(&e.home().join("tern.db")).await.unwrap();
    let s = store
        .create_session(NewSession {
            source: "cli".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    store
        .append_messages(
            &s.id,
            &[
                NewMessage::new(Role::User, "take a screenshot"),
                NewMessage {
                    parts: Some(vec![
                        ContentPart::text(DESCRIPTION),
                        ContentPart::image_data("image/png", PIXEL),
                    ]),
                    ..NewMessage::new(Role::User, DESCRIPTION)
                },
                NewMessage::new(Role::Assistant, "a single pixel"),
            ],
        )
        .await
        .unwrap();
    store.close().await;
    s.id
}

#[tokio::test]
async fn sessions_show_marks_an_image_and_prints_its_description() {
    let e = Env::new();
    let id = session_with_an_image(&e).await;

    let o = e.run(&["sessions", "show", &id]);
    assert_ok(&o);
    let out = stdout(&o);
    assert!(out.contains("#2 user [image]"), "{out}");
    assert!(
        out.contains("  [image from tool call call_1 (shot): image/png, 70 bytes]"),
        "{out}"
    );
    assert!(!out.contains(PIXEL), "{out}");

    let o = e.run(&["sessions", "search", "screenshot"]);
    assert_ok(&o);
    let o = e.run(&["sessions", "search", PIXEL]);
    assert_ok(&o);
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));

    // Export writes everything stored: the parts, image and all.
    let o = e.run(&["sessions", "export", &id]);
    assert_ok(&o);
    let lines: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let image = lines
        .iter()
        .find(|l| l["message"]["parts"].is_array())
        .unwrap();
    assert_eq!(
        image["message"]["parts"][1]["image_url"]["url"],
        format!("data:image/png;base64,{PIXEL}")
    );
    assert_eq!(image["message"]["content"], DESCRIPTION);
}
