//! The OpenAI chat shapes tern sends and reads.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "system" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            _ => return None,
        })
    }
}

/// One tool call the model asked for. `arguments` is the raw string the model sent, which
/// may not be valid JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".to_owned()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    #[serde(default)]
    pub arguments: String,
}

impl ToolCall {
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            kind: function_type(),
            function: FunctionCall {
                name: name.into(),
                arguments: arguments.into(),
            },
        }
    }
}

/// A message as sent to the model. Reasoning is kept in the transcript but never sent back:
/// several servers reject it in requests.
///
/// Its content is text (`content`), or, when `parts` is set, an array of parts sent as
/// `content` in its place (a user message carrying images); `content` then holds the same
/// message as text, for whatever reads messages as text.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestMessage {
    pub role: Role,
    /// `null` is allowed for an assistant message that only calls tools.
    pub content: Option<String>,
    /// Sent as `content` instead of the text when set.
    pub parts: Option<Vec<ContentPart>>,
    pub tool_calls: Vec<ToolCall>,
    pub tool_call_id: Option<String>,
}

impl RequestMessage {
    pub fn text(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: Some(content.into()),
            parts: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

impl Serialize for RequestMessage {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(untagged)]
        enum Content<'a> {
            Text(&'a Option<String>),
            Parts(&'a [ContentPart]),
        }
        #[derive(Serialize)]
        struct Wire<'a> {
            role: Role,
            content: Content<'a>,
            #[serde(skip_serializing_if = "<[ToolCall]>::is_empty")]
            tool_calls: &'a [ToolCall],
            #[serde(skip_serializing_if = "Option::is_none")]
            tool_call_id: &'a Option<String>,
        }
        Wire {
            role: self.role,
            content: match &self.parts {
                Some(parts) => Content::Parts(parts),
                None => Content::Text(&self.content),
            },
            tool_calls: &self.tool_calls,
            tool_call_id: &self.tool_call_id,
        }
        .serialize(serializer)
    }
}

/// One part of a message's content in chat completions' array form: text, or an image by URL
/// (a `data:` URL carries the image itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    Text { text: String },
    ImageUrl { image_url: ImageUrl },
}

impl ContentPart {
    pub fn text(text: impl Into<String>) -> Self {
        ContentPart::Text { text: text.into() }
    }

    /// An image given as its bytes in base64: a `data:` URL.
    pub fn image_data(mime_type: &str, base64: &str) -> Self {
        ContentPart::ImageUrl {
            image_url: ImageUrl {
                url: format!("data:{mime_type};base64,{base64}"),
                detail: None,
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageUrl {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// One chat-completions request.
#[derive(Debug, Clone, Serialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<RequestMessage>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Value>,
    pub stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<Value>,
}

/// Token usage; any field may be missing on real servers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        // Saturating: a server reporting absurd counts must not overflow the sum.
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(other.completion_tokens);
        self.total_tokens = self.total_tokens.saturating_add(other.total_tokens);
    }
}

/// The assembled answer of one model call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatResponse {
    pub content: Option<String>,
    pub reasoning: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Option<Usage>,
    pub finish_reason: Option<String>,
    /// The model the server says answered (e.g. a dated version of the one asked for, or the
    /// one a router picked); `None` when it does not say.
    pub model: Option<String>,
}

// ---- wire shapes of answers (lenient: every field optional) ----

#[derive(Debug, Deserialize)]
pub(crate) struct WireCompletion {
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub choices: Vec<WireChoice>,
    #[serde(default)]
    pub usage: Option<Usage>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireChoice {
    #[serde(default)]
    pub message: Option<WireMessage>,
    #[serde(default)]
    pub delta: Option<WireDelta>,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireMessage {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub reasoning_content: Option<String>,
    #[serde(default)]
    pub reasoning: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireToolCall {
    #[serde(default)]
    pub index: Option<usize>,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub function: Option<WireFunction>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireFunction {
    #[serde(default)]
    pub name: Option<String>,
    /// Usually a string; some servers send an object.
    #[serde(default)]
    pub arguments: Option<Value>,
}

pub(crate) type WireDelta = WireMessage;

pub(crate) fn arguments_to_string(v: Option<Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s,
        Some(other) => other.to_string(),
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireModels {
    #[serde(default)]
    pub data: Vec<WireModel>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireModel {
    pub id: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parts_are_sent_as_content() {
        let mut m = RequestMessage::text(Role::User, "as text");
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            json!({"role": "user", "content": "as text"})
        );
        m.parts = Some(vec![
            ContentPart::text("look"),
            ContentPart::image_data("image/png", "iVBOR"),
        ]);
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            json!({"role": "user", "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}},
            ]})
        );
        let calls = RequestMessage {
            role: Role::Assistant,
            content: None,
            parts: None,
            tool_calls: vec![ToolCall::new("c1", "t", "{}")],
            tool_call_id: None,
        };
        let v = serde_json::to_value(&calls).unwrap();
        assert_eq!(v["content"], Value::Null);
        assert_eq!(v["tool_calls"][0]["id"], "c1");
    }
}
