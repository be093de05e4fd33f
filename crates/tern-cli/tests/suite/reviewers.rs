//! Reviewers from the command line and at gateway start, as real processes: the admin's
//! login link printed on the first start only, `inbox-admin.json` (mode 0600, a fresh token
//! each start), and `tern inbox reviewers add|list|link|token|remove`.

use crate::common;

use std::os::unix::fs::PermissionsExt;

use common::{Env, Running, http_get};
use serde_json::Value;

impl Env {
    /// Runs a command; (exit code, stdout, stderr).
    fn call(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.run(args);
        (
            out.status.code().unwrap_or(-1),
            common::stdout(&out),
            common::stderr(&out),
        )
    }

    /// Starts `tern gateway --inbox-only` on a free port and waits until it listens.
    fn inbox_gateway(&self) -> Running {
        self.gateway_with(&["--inbox-only"], &[])
    }

    fn admin_file(&self) -> Value {
        let path = self.home().join("inbox-admin.json");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "inbox-admin.json must be private");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }
}

/// The login links the gateway printed.
fn printed_links(running: &Running) -> Vec<String> {
    running
        .stderr
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.starts_with("tern: inbox: open "))
        .map(|l| l.split_whitespace().nth(3).unwrap().to_owned())
        .collect()
}

async fn me(url: &str, token: &str) -> (u16, Value) {
    http_get(&format!("{url}/inbox/api/me"), token).await
}

/// Opens a login link and presses its "Sign in" button (a POST of the token, as the page's
/// form does); returns the status and whether a session cookie was set. Opening the link
/// alone sets none.
async fn open_link(link: &str) -> (u16, bool) {
    let http = reqwest::Client::new();
    let r = http.get(link).send().await.unwrap();
    assert!(
        r.headers().get("set-cookie").is_none(),
        "the GET signs nobody in"
    );
    if !r.status().is_success() {
        return (r.status().as_u16(), false);
    }
    let (base, token) = link.rsplit_once('/').unwrap();
    let r = http
        .post(base)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap();
    let cookie = r
        .headers()
        .get("set-cookie")
        .is_some_and(|c| c.to_str().unwrap().starts_with("tern_inbox="));
    (r.status().as_u16(), cookie)
}

#[tokio::test]
async fn the_first_start_prints_the_admin_link_and_every_start_writes_a_fresh_token() {
    let env = Env::new();
    let gw = env.inbox_gateway();
    let links = printed_links(&gw);
    assert_eq!(links.len(), 1, "{:?}", gw.stderr.lock().unwrap());
    let link = &links[0];
    assert!(
        link.starts_with(&format!("{}/inbox/login/", gw.url)),
        "{link}"
    );
    // Not in the JSON log: the link is a credential.
    let log = gw.logs();
    let token_part = link.rsplit('/').next().unwrap();
    assert_eq!(log.matches(token_part).count(), 1, "{log}");

    let file = env.admin_file();
    assert_eq!(file["url"], gw.url.as_str());
    assert_eq!(file["reviewer"], "admin");
    let first_token = file["token"].as_str().unwrap().to_owned();
    assert!(first_token.starts_with("tern_rv_") && first_token.len() == 72);
    let (status, who) = me(&gw.url, &first_token).await;
    assert_eq!((status, who["name"].as_str()), (200, Some("admin")));

    // Until admin logs in, every start prints a link; after, none.
    drop(gw);
    let gw = env.inbox_gateway();
    let links = printed_links(&gw);
    assert_eq!(links.len(), 1);
    assert_eq!(open_link(&links[0]).await, (200, true));
    assert_eq!(
        open_link(&links[0]).await,
        (401, false),
        "a link works once"
    );

    let second_token = env.admin_file()["token"].as_str().unwrap().to_owned();
    assert_ne!(second_token, first_token);
    assert_eq!(me(&gw.url, &second_token).await.0, 200);
    assert_eq!(
        me(&gw.url, &first_token).await.0,
        401,
        "the old local token is revoked"
    );

    drop(gw);
    let gw = env.inbox_gateway();
    assert!(
        printed_links(&gw).is_empty(),
        "admin has logged in: no link"
    );
    let third = env.admin_file()["token"].as_str().unwrap().to_owned();
    assert_eq!(me(&gw.url, &third).await.0, 200);
}

#[tokio::test]
async fn reviewers_are_managed_from_the_command_line() {
    let env = Env::new();
    let gw = env.inbox_gateway();

    let (code, out, err) = env.call(&["inbox", "reviewers", "add", "alice"]);
    assert_eq!(code, 0, "{err}");
    let link = out.trim();
    // The link's base is the running gateway's address, read from inbox-admin.json.
    assert!(
        link.starts_with(&format!("{}/inbox/login/", gw.url)),
        "{link}"
    );
    assert_eq!(open_link(link).await, (200, true));

    let (code, _, err) = env.call(&["inbox", "reviewers", "add", "alice"]);
    assert_ne!(code, 0);
    assert!(err.contains("already exists"), "{err}");
    let (code, _, err) = env.call(&["inbox", "reviewers", "add", "no spaces"]);
    assert_ne!(code, 0);
    assert!(err.contains("invalid reviewer name"), "{err}");

    let (code, out, _) = env.call(&["inbox", "reviewers", "list", "--json"]);
    assert_eq!(code, 0);
    let list: Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["admin", "alice"]);
    assert_eq!(list[0]["admin"], true);

    let (code, out, _) = env.call(&["inbox", "reviewers", "link", "alice"]);
    assert_eq!(code, 0);
    assert_eq!(open_link(out.trim()).await, (200, true));

    let (code, out, _) = env.call(&["inbox", "reviewers", "token", "alice"]);
    assert_eq!(code, 0);
    let token = out.trim().to_owned();
    let (status, who) = me(&gw.url, &token).await;
    assert_eq!((status, who["name"].as_str()), (200, Some("alice")));

    let (code, _, err) = env.call(&["inbox", "reviewers", "link", "bob"]);
    assert_ne!(code, 0);
    assert!(err.contains("no reviewer named `bob`"), "{err}");

    let (code, _, err) = env.call(&["inbox", "reviewers", "remove", "alice"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(me(&gw.url, &token).await.0, 401);
    let (code, _, err) = env.call(&["inbox", "reviewers", "remove", "alice"]);
    assert_ne!(code, 0);
    assert!(err.contains("no reviewer named"), "{err}");
}
