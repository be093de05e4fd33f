//! A project's steps from `--step NAME[:OWNER][>EXIT,EXIT…]` and `--initial`.

use tern_inbox::model::{Actor, Step, Steps};

/// `--step NAME[:OWNER][>EXIT,EXIT…]` arguments and `--initial` → the project's steps. The
/// service checks consistency (unique names, exits and the initial step among the steps).
pub(crate) fn parse_steps(
    project: &str,
    specs: &[String],
    initial: Option<&str>,
) -> Result<Steps, String> {
    let mut steps = Vec::new();
    for spec in specs {
        let (head, exits) = match spec.split_once('>') {
            Some((h, e)) => (
                h,
                Some(
                    e.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect::<Vec<_>>(),
                ),
            ),
            None => (spec.as_str(), None),
        };
        let (name, owner) = match head.split_once(':') {
            Some((n, o)) => (n.trim(), parse_owner(o.trim())?),
            None => (head.trim(), Actor::Agent),
        };
        if name.is_empty() {
            return Err(format!("--step {spec:?}: the step needs a name"));
        }
        steps.push(Step {
            name: name.to_owned(),
            owner,
            exits,
        });
    }
    if steps.is_empty() {
        if let Some(i) = initial
            && i != project
        {
            return Err(format!(
                "--initial {i:?} names no step; list the steps with --step"
            ));
        }
        steps.push(Step {
            name: project.to_owned(),
            owner: Actor::Agent,
            exits: None,
        });
    }
    let initial_step = initial.map_or_else(|| steps[0].name.clone(), str::to_owned);
    Ok(Steps {
        initial_step,
        steps,
        step_schemas: None,
    })
}

fn parse_owner(s: &str) -> Result<Actor, String> {
    Actor::step_owner(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn steps_parse() {
        let s = parse_steps(
            "refunds",
            &specs(&["triage>review, done", "review:human>done", "done:AGENT>"]),
            None,
        )
        .unwrap();
        assert_eq!(s.initial_step, "triage");
        assert_eq!(s.steps[1].owner, Actor::Human);
        assert_eq!(
            s.steps[0].exits.as_deref(),
            Some(&["review".to_owned(), "done".to_owned()][..])
        );
        assert_eq!(s.steps[2].exits.as_deref(), Some(&[][..]));
        assert!(parse_steps("p", &specs(&["x:robot"]), None).is_err());
        let one = parse_steps("p", &[], None).unwrap();
        assert_eq!((one.initial_step.as_str(), one.steps.len()), ("p", 1));
    }
}
