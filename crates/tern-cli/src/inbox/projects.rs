//! `tern inbox projects`: like `tern keys`, on the database in `$TERN_HOME` directly, with
//! or without a running gateway.

use std::path::PathBuf;
use std::process::ExitCode;

use tern_inbox::model::{Step, Steps};

use super::show::print_json;
use super::steps::parse_steps;
use super::{EXIT_USAGE, ProjectsCommand};
use crate::context;

pub(super) async fn projects(
    home: Option<PathBuf>,
    cmd: ProjectsCommand,
) -> anyhow::Result<ExitCode> {
    let (home, _) = context::load_config(home)?;
    let store = context::open_store(&home).await?;
    let inbox = tern_inbox::Inbox::new(store.clone());
    inbox.ensure_default_project().await?;
    let code = match cmd {
        ProjectsCommand::Add {
            name,
            steps,
            initial,
            json,
        } => {
            let steps = match parse_steps(name.trim(), &steps, initial.as_deref()) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("error: {e}");
                    store.close().await;
                    return Ok(ExitCode::from(EXIT_USAGE));
                }
            };
            match inbox.add_project(name.trim(), steps).await {
                Ok(p) => {
                    if json {
                        print_json(&serde_json::to_value(&p)?);
                    } else {
                        println!("added project {}: {}", p.name, steps_line(&p.steps));
                    }
                    ExitCode::SUCCESS
                }
                Err(e @ tern_inbox::InboxError::Invalid { .. }) => {
                    eprintln!("error: {e}");
                    ExitCode::from(EXIT_USAGE)
                }
                Err(e) => return Err(e.into()),
            }
        }
        ProjectsCommand::List { json } => {
            let list = inbox.projects(None).await?;
            if json {
                print_json(&serde_json::to_value(&list)?);
            } else {
                println!("{:<24}  STEPS", "NAME");
                for p in &list.items {
                    println!("{:<24}  {}", p.name, steps_line(&p.steps));
                }
            }
            ExitCode::SUCCESS
        }
    };
    store.close().await;
    Ok(code)
}

/// `triage (AGENT → review), review (HUMAN)`, initial step first.
fn steps_line(steps: &Steps) -> String {
    let mut ordered: Vec<&Step> = steps.steps.iter().collect();
    ordered.sort_by_key(|s| s.name != steps.initial_step);
    ordered
        .iter()
        .map(|s| {
            let exits = match &s.exits {
                Some(e) if !e.is_empty() => format!(" → {}", e.join(", ")),
                Some(_) => " → none".to_owned(),
                None => String::new(),
            };
            format!("{} ({}{exits})", s.name, s.owner.as_str())
        })
        .collect::<Vec<_>>()
        .join(", ")
}
