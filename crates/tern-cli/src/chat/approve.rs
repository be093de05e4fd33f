//! Asking the human at the terminal about a dangerous command, or about running a command
//! outside the sandbox.

use std::sync::{Arc, Mutex};

use tern_tools::{ApprovalDecision, ApprovalRequest, Approver, BoxFuture};

use super::input::LineReader;

/// Prompts on the terminal: once / session / always / deny.
pub struct TerminalApprover {
    pub reader: Arc<Mutex<LineReader>>,
}

pub fn parse_answer(answer: &str) -> Option<ApprovalDecision> {
    Some(match answer.trim().to_ascii_lowercase().as_str() {
        "o" | "once" | "y" | "yes" => ApprovalDecision::Once,
        "s" | "session" => ApprovalDecision::Session,
        "a" | "always" => ApprovalDecision::Always,
        "" | "d" | "deny" | "n" | "no" => ApprovalDecision::Deny {
            reason: "the user denied it".into(),
        },
        _ => return None,
    })
}

impl Approver for TerminalApprover {
    fn approve(&self, req: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision> {
        let reader = self.reader.clone();
        Box::pin(async move {
            let escalation = req.pattern_key == tern_tools::escalation::PATTERN_KEY;
            if escalation {
                eprintln!(
                    "\n⚠ The agent wants to {}:\n    {}\n  in {}",
                    req.description,
                    req.command,
                    req.workdir.display()
                );
                for (k, v) in &req.context {
                    eprintln!("  {k}: {v}");
                }
                eprintln!(
                    "  Outside the sandbox it may write anywhere and use the network \
                     ($TERN_HOME stays out of reach). [a]lways counts for this session only."
                );
            } else {
                eprintln!(
                    "\n⚠ The agent wants to run a dangerous command ({}):\n    {}\n  in {}",
                    req.description,
                    req.command,
                    req.workdir.display()
                );
            }
            let asked = tokio::task::spawn_blocking(move || {
                let mut r = reader.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    match r
                        .read_line("Allow? [o]nce, [s]ession, [a]lways, [d]eny (default: deny): ")
                    {
                        Some(line) => match parse_answer(&line) {
                            Some(d) => return d,
                            None => eprintln!("Please answer o, s, a or d."),
                        },
                        None => {
                            return ApprovalDecision::Deny {
                                reason: "the user did not answer".into(),
                            };
                        }
                    }
                }
            })
            .await;
            asked.unwrap_or(ApprovalDecision::Deny {
                reason: "the prompt failed".into(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse() {
        assert_eq!(parse_answer(" O "), Some(ApprovalDecision::Once));
        assert_eq!(parse_answer("session"), Some(ApprovalDecision::Session));
        assert_eq!(parse_answer("a"), Some(ApprovalDecision::Always));
        assert!(!parse_answer("").unwrap().allows(), "the default is deny");
        assert_eq!(parse_answer("maybe"), None);
    }
}
