//! `[[inbox.projects]]` of config.toml, applied at gateway start: the projects that do not
//! exist yet are created. A project that exists keeps its steps: a project's tasks refer to
//! them, so changing them under running tasks is not done silently; a difference is logged.

use tern_config::InboxProjectConfig;

use crate::model::{Actor, Step, Steps};
use crate::{Inbox, InboxError};

impl Actor {
    /// The owner of a step as a person writes it (any case): `AGENT` or `HUMAN`.
    pub fn step_owner(s: &str) -> Result<Actor, InboxError> {
        match s.to_ascii_uppercase().as_str() {
            "AGENT" => Ok(Actor::Agent),
            "HUMAN" => Ok(Actor::Human),
            _ => Err(InboxError::Invalid {
                code: "invalid_step_owner",
                message: format!(
                    "step owner {s:?}: write AGENT or HUMAN (PLATFORM steps are not for people \
                     to set)"
                ),
            }),
        }
    }
}

impl Inbox {
    /// Creates the configured projects that do not exist yet (see the module docs).
    pub async fn apply_config_projects(
        &self,
        projects: &[InboxProjectConfig],
    ) -> Result<(), InboxError> {
        for p in projects {
            let in_project = |e: InboxError| InboxError::Invalid {
                code: "invalid_config_project",
                message: format!("[[inbox.projects]] {:?}: {e}", p.name),
            };
            let mut steps = Vec::new();
            for s in &p.steps {
                steps.push(Step {
                    name: s.name.clone(),
                    owner: Actor::step_owner(&s.owner).map_err(|e| InboxError::Invalid {
                        code: "invalid_config_project",
                        message: format!("[[inbox.projects]] {:?}, step {:?}: {e}", p.name, s.name),
                    })?,
                    exits: s.exits.clone(),
                });
            }
            let wanted = Steps {
                initial_step: p.initial_step().unwrap_or_default().to_owned(),
                steps,
                step_schemas: None,
            };
            let existing = self.projects(Some(&p.name)).await?;
            match existing.items.iter().find(|e| e.name == p.name) {
                Some(e) if e.steps == wanted => {}
                Some(_) => tracing::warn!(
                    project = %p.name,
                    "the project exists with other steps than config.toml's; its stored steps stay"
                ),
                None => {
                    self.add_project(&p.name, wanted)
                        .await
                        .map_err(in_project)?;
                    tracing::info!(project = %p.name, "created the project from config.toml");
                }
            }
        }
        Ok(())
    }
}
