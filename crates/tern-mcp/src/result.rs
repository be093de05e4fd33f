//! A `CallToolResult` as the text the model reads.
//!
//! Each content block becomes a paragraph: text as it is; an image or audio clip described by
//! its type and size; an embedded resource's text, or a description of its blob; a resource
//! link as its name and URI. Structured content follows as JSON, unless the text already
//! carries it (servers are asked to repeat it as text for older clients, and the model should
//! not read it twice).
//!
//! An image is also handed, pixels and all, to the images of the call that asked
//! ([`push_images`]), so a model that accepts images sees it; the description stays in the
//! text for the transcript and for models that do not.

use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use tern_tools::{ToolImage, ToolImages, base64_decoded_len as base64_len};

/// Hands each image of `result` to `images`.
pub(crate) fn push_images(result: &CallToolResult, images: &ToolImages) {
    for block in &result.content {
        if let ContentBlock::Image(i) = block {
            images.push(ToolImage {
                mime_type: i.mime_type.clone(),
                data: i.data.clone(),
            });
        }
    }
}

/// The text of `result`, whether it is an error or not (the caller reads `is_error`).
pub fn result_text(result: &CallToolResult) -> String {
    let mut parts: Vec<String> = result.content.iter().map(block_text).collect();
    if let Some(structured) = &result.structured_content {
        let json = structured.to_string();
        let repeated = parts
            .iter()
            .any(|p| serde_json::from_str::<serde_json::Value>(p).is_ok_and(|v| &v == structured));
        if !repeated {
            parts.push(format!("structured content: {json}"));
        }
    }
    parts.join("\n\n")
}

fn block_text(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(t) => t.text.clone(),
        ContentBlock::Image(i) => {
            format!("[image: {}, {} bytes]", i.mime_type, base64_len(&i.data))
        }
        ContentBlock::Audio(a) => {
            format!("[audio: {}, {} bytes]", a.mime_type, base64_len(&a.data))
        }
        ContentBlock::Resource(r) => match &r.resource {
            ResourceContents::TextResourceContents { uri, text, .. } => {
                format!("[resource {uri}]\n{text}")
            }
            ResourceContents::BlobResourceContents {
                uri,
                mime_type,
                blob,
                ..
            } => format!(
                "[resource {uri}: {}, {} bytes]",
                mime_type.as_deref().unwrap_or("binary"),
                base64_len(blob)
            ),
            // A later protocol's kind of resource: its JSON, rather than nothing.
            other => serde_json::to_string(other).unwrap_or_default(),
        },
        ContentBlock::ResourceLink(link) => {
            let mut text = format!("[resource link: {} <{}>", link.name, link.uri);
            if let Some(mime) = &link.mime_type {
                text.push_str(&format!(", {mime}"));
            }
            if let Some(description) = &link.description {
                text.push_str(&format!(": {description}"));
            }
            text.push(']');
            text
        }
        // A content kind newer than this build: its JSON, so nothing is silently dropped.
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_lengths() {
        for (text, len) in [
            ("", 0),
            ("QQ==", 1),
            ("QUI=", 2),
            ("QUJD", 3),
            ("QUJDRA==", 4),
        ] {
            assert_eq!(base64_len(text), len, "{text}");
        }
    }

    #[test]
    fn structured_content_is_added_once() {
        let mut result = CallToolResult::success(vec![ContentBlock::text("{\"a\":1}")]);
        result.structured_content = Some(serde_json::json!({"a": 1}));
        assert_eq!(result_text(&result), "{\"a\":1}");
        let mut result = CallToolResult::success(vec![ContentBlock::text("done")]);
        result.structured_content = Some(serde_json::json!({"a": 1}));
        assert_eq!(
            result_text(&result),
            "done\n\nstructured content: {\"a\":1}"
        );
    }
}
