//! Images from tool results to the model.
//!
//! A tool hands the images it produced to the turn through its call's
//! [`ToolReport::images`](tern_tools::ToolReport) (an MCP server's image content does, see
//! `tern-mcp`), and describes each one in its result, which is all a model that does not
//! accept images gets. For a model that does (`[model] vision`, else what its server reports,
//! see [`Vision`]), once every call of a step is answered the agent appends one `user`
//! message whose content is parts: a text part naming each image's tool call, then one
//! `image_url` part per image, as a `data:` URL. A user message because chat completions'
//! tool messages carry text only.
//!
//! Limits, so that one step cannot flood the prompt or make every later request fail: at
//! most [`MAX_IMAGES_PER_STEP`] images, each at most [`MAX_IMAGE_BYTES`] decoded and in a
//! format models take ([`FORMATS`]); the others stay described only, and the text part says
//! why. A message is appended only when at least one image is sent.

use std::time::{Duration, Instant};

use base64::Engine;
use tern_llm::{ContentPart, Role, ToolCall};
use tern_store::NewMessage;
use tern_tools::ToolImage;

/// Images sent to the model per step (per model answer's tool calls); the rest are described.
pub const MAX_IMAGES_PER_STEP: usize = 8;

/// The largest image sent to the model, decoded; a larger one is described.
pub const MAX_IMAGE_BYTES: usize = 4 * 1024 * 1024;

/// The formats OpenAI-compatible servers take as `image_url`; an image in another (SVG, TIFF)
/// is described, as a server refusing it would refuse every later request of the session.
pub const FORMATS: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// How long an unanswered question about image support is not asked again.
const ASK_AGAIN_AFTER: Duration = Duration::from_secs(600);

/// Whether the model accepts images: `[model] vision` when set; else what the server
/// reports, asked when a tool first produces an image and kept for the agent's life; while the
/// server has not said, no, and asked again at most every ten minutes.
#[derive(Debug, Default)]
pub(crate) struct Vision {
    configured: Option<bool>,
    /// The server's answer, and when it was last asked.
    state: std::sync::Mutex<(Option<bool>, Option<Instant>)>,
}

impl Vision {
    pub(crate) fn new(configured: Option<bool>) -> Self {
        Self {
            configured,
            state: Default::default(),
        }
    }

    pub(crate) async fn accepts_images(&self, llm: &tern_llm::Client, model: &str) -> bool {
        if let Some(v) = self.configured {
            return v;
        }
        {
            // Poisoning cannot leave the pair inconsistent: each field is set in one store.
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(v) = st.0 {
                return v;
            }
            if st.1.is_some_and(|t| t.elapsed() < ASK_AGAIN_AFTER) {
                return false;
            }
            st.1 = Some(Instant::now());
        }
        let answer = llm.accepts_images(model).await;
        tracing::info!(model, accepts_images = ?answer, "asked the model server about image input");
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.0 = answer;
        answer.unwrap_or(false)
    }
}

/// The images of one tool call of a step.
pub(crate) struct CallImages {
    pub call: ToolCall,
    pub images: Vec<ToolImage>,
}

/// The user message that shows the step's images to the model, or `None` when none of them
/// can be sent. Its `content` is the text part alone (each image described), which is what
/// transcripts, search and compaction read.
pub(crate) fn message(step: &[CallImages]) -> Option<NewMessage> {
    let mut lines = vec!["Images from the tool calls above, in order:".to_owned()];
    let mut images = Vec::new();
    for CallImages {
        call,
        images: of_call,
    } in step
    {
        for image in of_call {
            let size = image.decoded_len();
            let about = format!(
                "image from tool call {} ({}): {}, {size} bytes",
                call.id, call.function.name, image.mime_type
            );
            let refused = if !FORMATS.contains(&image.mime_type.as_str()) {
                Some(format!("not a format models take ({})", FORMATS.join(", ")))
            } else if size > MAX_IMAGE_BYTES {
                Some(format!(
                    "larger than {} MiB",
                    MAX_IMAGE_BYTES / (1024 * 1024)
                ))
            } else if images.len() == MAX_IMAGES_PER_STEP {
                Some(format!(
                    "more than {MAX_IMAGES_PER_STEP} images in one step"
                ))
            } else if base64::engine::general_purpose::STANDARD
                .decode(image.data.trim())
                .is_err()
            {
                Some("its data is not valid base64".to_owned())
            } else {
                None
            };
            match refused {
                Some(why) => lines.push(format!("[{about}; not shown: {why}]")),
                None => {
                    lines.push(format!("[{about}]"));
                    images.push(ContentPart::image_data(&image.mime_type, image.data.trim()));
                }
            }
        }
    }
    if images.is_empty() {
        return None;
    }
    let text = lines.join("\n");
    let mut parts = Vec::with_capacity(images.len() + 1);
    parts.push(ContentPart::text(text.clone()));
    parts.extend(images);
    Some(NewMessage {
        parts: Some(parts),
        ..NewMessage::new(Role::User, text)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(mime: &str, bytes: usize) -> ToolImage {
        ToolImage {
            mime_type: mime.to_owned(),
            data: base64::engine::general_purpose::STANDARD.encode(vec![7u8; bytes]),
        }
    }

    fn call(id: &str, images: Vec<ToolImage>) -> CallImages {
        CallImages {
            call: ToolCall::new(id, "shot", "{}"),
            images,
        }
    }

    fn image_urls(m: &NewMessage) -> Vec<String> {
        m.parts
            .iter()
            .flatten()
            .filter_map(|p| match p {
                ContentPart::ImageUrl { image_url } => Some(image_url.url.clone()),
                ContentPart::Text { .. } => None,
            })
            .collect()
    }

    #[test]
    fn the_text_part_names_each_images_call_and_comes_first() {
        let m = message(&[
            call("c1", vec![image("image/png", 3)]),
            call("c2", vec![image("image/jpeg", 6), image("image/png", 3)]),
        ])
        .unwrap();
        assert_eq!(m.role, Some(Role::User));
        let text = m.content.clone().unwrap();
        assert_eq!(
            text,
            "Images from the tool calls above, in order:\n\
             [image from tool call c1 (shot): image/png, 3 bytes]\n\
             [image from tool call c2 (shot): image/jpeg, 6 bytes]\n\
             [image from tool call c2 (shot): image/png, 3 bytes]"
        );
        let parts = m.parts.as_ref().unwrap();
        assert_eq!(parts[0], ContentPart::text(text));
        assert_eq!(
            image_urls(&m),
            [
                "data:image/png;base64,BwcH",
                "data:image/jpeg;base64,BwcHBwcH",
                "data:image/png;base64,BwcH"
            ]
        );
    }

    #[test]
    fn past_the_limits_images_are_described_not_sent() {
        let mut many = vec![
            image("image/png", MAX_IMAGE_BYTES + 1),
            image("image/svg+xml", 3),
            ToolImage {
                mime_type: "image/png".into(),
                data: "not base64!".into(),
            },
        ];
        many.extend((0..MAX_IMAGES_PER_STEP + 1).map(|_| image("image/png", 3)));
        let m = message(&[call("c1", many)]).unwrap();
        assert_eq!(image_urls(&m).len(), MAX_IMAGES_PER_STEP);
        let text = m.content.unwrap();
        assert!(
            text.contains(&format!(
                "image/png, {} bytes; not shown: larger than 4 MiB]",
                MAX_IMAGE_BYTES + 1
            )),
            "{text}"
        );
        assert!(
            text.contains("; not shown: more than 8 images in one step]"),
            "{text}"
        );
        assert!(
            text.contains("image/svg+xml, 3 bytes; not shown: not a format models take"),
            "{text}"
        );
        assert!(
            text.contains("; not shown: its data is not valid base64]"),
            "{text}"
        );
    }

    #[test]
    fn nothing_to_send_is_no_message() {
        assert!(message(&[]).is_none());
        assert!(message(&[call("c1", vec![image("image/png", MAX_IMAGE_BYTES + 1)])]).is_none());
    }
}
