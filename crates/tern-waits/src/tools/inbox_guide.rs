//! `inbox_guide`: how to ask a human well (the text is [`crate::guide`]'s).

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tern_tools::{Tool, ToolContext, ToolResult};

use super::context::TOOLSET;
use crate::guide::GUIDE;

/// `inbox_guide`: how to ask a human well.
pub struct InboxGuide;

impl Tool for InboxGuide {
    const NAME: &'static str = "inbox_guide";
    const TOOLSET: &'static str = TOOLSET;
    const DESCRIPTION: &'static str = "The guide to asking a human through the inbox: when \
        to ask, how to write the request, and what to do after asking. Read it before your \
        first request.";
    type Args = GuideArgs;

    async fn run(&self, _: GuideArgs, _: ToolContext) -> ToolResult {
        Ok(json!({ "guide": GUIDE }))
    }
}

/// `inbox_guide` takes no arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GuideArgs {}
