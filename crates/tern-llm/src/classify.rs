//! What an error body says, by the texts real servers send: a prompt over the context window,
//! or model output the server could not parse.
//!
//! Matching is on lowercase text, never on the whole message: servers put numbers (token
//! counts, positions) inside their sentences, and wrap them in JSON of their own shape. The
//! phrases are specific on purpose: a loose one ("context length") also matches errors that
//! only mention the window (an out-of-memory refusal that suggests a smaller context), and
//! taking those for an overflow makes the caller compact a transcript that was never too long.

/// Codes and phrases of context-window errors, lowercase. Samples are in the tests.
const OVERFLOW: &[&str] = &[
    // OpenAI's error code; OpenRouter and several proxies send it too.
    "context_length_exceeded",
    // OpenAI, vLLM (V0 and the OpenAI server), OpenRouter: "This model's maximum context
    // length is 8192 tokens", "This endpoint's maximum context length is …".
    "maximum context length",
    // vLLM V1: "Prompt length of 5016 is longer than the maximum model length of 4096."
    "longer than the maximum model length",
    // vLLM: "The prompt (total length 25938) is too long to fit into the model (context
    // length 4096)."
    "too long to fit into the model",
    // vLLM: "The input (5000 tokens) is longer than the model's context length (4096
    // tokens)."
    "longer than the model's context length",
    // llama.cpp: "request (33056 tokens) exceeds the available context size (32768
    // tokens), try increasing it", type `exceed_context_size_error`.
    "exceeds the available context size",
    "exceed_context_size_error",
    // Ollama: "the input length exceeds the context length".
    "input length exceeds the context length",
    // Anthropic and Anthropic-compatible servers: "prompt is too long: 208656 tokens >
    // 200000 maximum".
    "prompt is too long",
];

/// Phrases of errors about model output the server failed to parse, lowercase.
const PARSE_FAILURE: &[&str] = &[
    // llama.cpp: "Failed to parse input at pos 184: <tool_call>…", "Failed to parse tool
    // call arguments as JSON".
    "failed to parse",
    // llama.cpp, when sampling breaks the tool-call grammar.
    "unexpected empty grammar stack",
    // vLLM tool parsers: "Error in extracting tool call from response."; servers that
    // refuse malformed tool calls: `MalformedToolCallError`.
    "error in extracting tool call",
    "malformedtoolcallerror",
    "malformed tool call",
];

pub(crate) fn says_context_overflow(body: &str) -> bool {
    contains_any(body, OVERFLOW)
}

pub(crate) fn says_parse_failure(body: &str) -> bool {
    contains_any(body, PARSE_FAILURE)
}

fn contains_any(body: &str, phrases: &[&str]) -> bool {
    let lower = body.to_lowercase();
    phrases.iter().any(|p| lower.contains(p))
}

#[cfg(test)]
mod tests {
    use crate::LlmError;

    fn http(status: u16, body: &str) -> LlmError {
        LlmError::Http {
            status,
            body: body.to_owned(),
        }
    }

    #[test]
    fn openai_context_length_exceeded() {
        let e = http(
            400,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 8227 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        );
        assert!(e.is_context_overflow());
        assert!(!e.is_retryable());
        // The code alone is enough.
        assert!(
            http(
                400,
                r#"{"error":{"message":"too long","code":"context_length_exceeded"}}"#
            )
            .is_context_overflow()
        );
    }

    #[test]
    fn vllm_maximum_context_length_and_v1_model_length() {
        for body in [
            r#"{"object":"error","message":"This model's maximum context length is 16384 tokens. However, you requested 122946 tokens (112946 in the messages, 10000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#,
            r#"{"object":"error","message":"Prompt length of 5016 is longer than the maximum model length of 4096.","type":"BadRequestError","param":null,"code":400}"#,
            r#"{"object":"error","message":"The input (5000 tokens) is longer than the model's context length (4096 tokens).","type":"BadRequestError","code":400}"#,
            r#"{"object":"error","message":"The prompt (total length 25938) is too long to fit into the model (context length 4096). Make sure that `max_model_len` is no smaller than the number of text tokens plus multimodal tokens.","type":"BadRequestError","code":400}"#,
        ] {
            assert!(http(400, body).is_context_overflow(), "{body}");
        }
    }

    #[test]
    fn llama_cpp_exceeds_the_available_context_size() {
        let e = http(
            400,
            r#"{"error":{"code":400,"message":"request (33056 tokens) exceeds the available context size (32768 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":33056,"n_ctx":32768}}"#,
        );
        assert!(e.is_context_overflow());
    }

    #[test]
    fn ollama_input_length_exceeds_the_context_length() {
        // Ollama answers 400, 413 or 500 depending on the version and endpoint.
        for status in [400, 413, 500] {
            let e = http(
                status,
                r#"{"error":"the input length exceeds the context length"}"#,
            );
            assert!(e.is_context_overflow(), "{status}");
        }
    }

    #[test]
    fn openrouter_endpoint_maximum_context_length() {
        let e = http(
            400,
            r#"{"error":{"message":"This endpoint's maximum context length is 16384 tokens. However, you requested about 26265 tokens (26255 of text input, 10 in the output). Please reduce the length of either one, or use the context-compression plugin to compress your prompt automatically.","code":400,"metadata":{"provider_name":null}}}"#,
        );
        assert!(e.is_context_overflow());
    }

    #[test]
    fn anthropic_compatible_prompt_is_too_long() {
        let e = http(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208656 tokens > 200000 maximum"}}"#,
        );
        assert!(e.is_context_overflow());
    }

    #[test]
    fn an_overflow_inside_a_stream_is_one_and_is_not_retried() {
        let e = LlmError::Stream {
            message: r#"{"code":400,"message":"request (9000 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error"}"#.into(),
        };
        assert!(e.is_context_overflow());
        assert!(!e.is_retryable());
    }

    /// Errors that only mention the window, or come with another status, are not overflows:
    /// compacting for them would shorten a transcript that was never too long.
    #[test]
    fn other_errors_are_not_overflows() {
        for e in [
            http(
                400,
                r#"{"error":{"message":"Prefill would require ~15.27 GB peak but dynamic ceiling is 13.50 GB; reduce batch size or reduce context length."}}"#,
            ),
            http(
                429,
                r#"{"error":{"message":"Request too large on tokens per min (TPM): Limit 10000, Requested 12000.","code":"rate_limit_exceeded"}}"#,
            ),
            http(401, "maximum context length"),
            http(500, r#"{"error":{"message":"CUDA error: out of memory"}}"#),
            LlmError::Timeout { secs: 1 },
        ] {
            assert!(!e.is_context_overflow(), "{e}");
        }
    }

    #[test]
    fn parse_failures_of_llama_cpp_and_vllm() {
        for body in [
            r#"{"error":{"code":500,"message":"Failed to parse input at pos 184: <tool_call>\n<function=bash>","type":"server_error"}}"#,
            r#"{"error":{"code":500,"message":"Failed to parse tool call arguments as JSON","type":"server_error"}}"#,
            r#"{"error":{"code":500,"message":"Unexpected empty grammar stack after accepting piece: <tool_call>","type":"server_error"}}"#,
            r#"{"object":"error","message":"Error in extracting tool call from response.","type":"InternalServerError","code":500}"#,
        ] {
            assert!(http(500, body).is_output_parse_failure(), "{body}");
            assert!(
                LlmError::Stream {
                    message: body.into()
                }
                .is_output_parse_failure(),
                "{body}"
            );
        }
        // Only a 500 (or a stream error): a 400 about the request's own JSON is the client's.
        assert!(!http(400, "Failed to parse the request body as JSON").is_output_parse_failure());
        assert!(!http(502, "bad gateway").is_output_parse_failure());
    }
}
