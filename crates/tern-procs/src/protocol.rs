//! The supervisor's socket protocol: one JSON object per line each way.
//!
//! Flow: the client connects to `<dir>/sock`, writes a [`Request`] line and reads one
//! [`Response`] line; a connection may carry several requests in turn. `wait` is answered
//! when the child has exited and its status is recorded; a closed connection without an
//! answer means the supervisor is gone. `attach` is the one request after which the
//! connection carries raw bytes instead of lines ([`crate::attach`]).

use std::path::Path;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use crate::ProcError;
use crate::layout::ExitRecord;

/// Longest request line the supervisor reads (stdin data travels in it).
pub const MAX_LINE: usize = 4 * 1024 * 1024;

/// A request to the supervisor.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Is it there? Answers with the child's pid.
    Ping,
    /// Bytes to the child's stdin (UTF-8 text).
    Write { data: String },
    /// A line to the child's stdin: the data and Enter (`\n` on a pipe, `\r` on a PTY, as a
    /// keyboard sends it).
    Submit { data: String },
    /// End the child's stdin (on a PTY: Ctrl-D, the terminal's end of input).
    Close,
    /// TERM to the child's process group, KILL after `grace_ms` (default: the spec's).
    Kill { grace_ms: Option<u64> },
    /// Answered when the child has exited.
    Wait,
    /// PTY processes only: after the `ok` answer (whose `offset` is the log offset of the
    /// first byte streamed) the connection becomes a raw byte stream both ways: the live
    /// output to the client, the client's bytes to the terminal's input. It ends when the
    /// client closes its side, the output ends, or the client falls too far behind
    /// ([`crate::attach`]).
    Attach,
    /// PTY processes only: sets the terminal's size (the program gets SIGWINCH).
    Resize { cols: u16, rows: u16 },
}

/// The supervisor's answer.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Response {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_pid: Option<i32>,
    /// Set once the child has exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitRecord>,
    /// `attach`: the log offset at which the live stream begins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
}

impl Response {
    pub fn ok() -> Self {
        Self {
            ok: true,
            ..Self::default()
        }
    }
    pub fn err(msg: impl Into<String>) -> Self {
        Self {
            ok: false,
            error: Some(msg.into()),
            ..Self::default()
        }
    }
}

/// Sends one request and reads its answer. `Ok(None)`: the supervisor is not there or
/// closed the connection without answering (it is gone or going).
pub async fn call(socket: &Path, req: &Request) -> Result<Option<Response>, ProcError> {
    let stream = match UnixStream::connect(socket).await {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(ProcError::io(socket, e)),
    };
    let (rd, mut wr) = stream.into_split();
    let mut line = serde_json::to_vec(req)
        .map_err(|e| ProcError::Protocol(format!("cannot encode a request: {e}")))?;
    line.push(b'\n');
    if let Err(e) = wr.write_all(&line).await {
        // The supervisor closed the socket between our connect and write: it is ending (the
        // process exited), as when the connect itself is refused.
        return if is_gone(&e) {
            Ok(None)
        } else {
            Err(ProcError::io(socket, e))
        };
    }
    let mut answer = String::new();
    match BufReader::new(rd).read_line(&mut answer).await {
        Ok(0) => Ok(None),
        Ok(_) => serde_json::from_str(&answer).map(Some).map_err(|e| {
            ProcError::Protocol(format!("the supervisor answered nonsense: {e}: {answer}"))
        }),
        Err(e) if is_gone(&e) => Ok(None),
        Err(e) => Err(ProcError::io(socket, e)),
    }
}

/// An error that means the supervisor closed the connection (it is gone or going).
fn is_gone(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::NotConnected
    )
}

/// Sends `req` to process `id`'s supervisor for a plain yes: `NotRunning` when nobody
/// answers (the process ended), `Refused` with the supervisor's reason.
pub async fn call_ok(socket: &Path, id: &str, req: &Request) -> Result<(), ProcError> {
    match call(socket, req).await? {
        None => Err(ProcError::NotRunning(id.to_owned())),
        Some(r) if r.ok => Ok(()),
        Some(r) => Err(ProcError::Refused(
            r.error.unwrap_or_else(|| "refused".into()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A supervisor that is ending: it accepts, then closes without an answer (with the
    /// request unread, which resets the connection). Its callers read that as "gone".
    #[tokio::test]
    async fn a_connection_closed_unanswered_means_gone() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let server = tokio::spawn(async move {
            for _ in 0..2 {
                let (s, _) = listener.accept().await.unwrap();
                drop(s);
            }
        });
        for _ in 0..2 {
            let r = call(&path, &Request::Wait).await.unwrap();
            assert!(r.is_none());
        }
        server.await.unwrap();
        // No socket at all: gone too.
        std::fs::remove_file(&path).unwrap();
        assert!(call(&path, &Request::Ping).await.unwrap().is_none());
    }

    #[test]
    fn requests_have_a_stable_shape() {
        let r = serde_json::to_string(&Request::Submit { data: "x".into() }).unwrap();
        assert_eq!(r, r#"{"op":"submit","data":"x"}"#);
        let k: Request = serde_json::from_str(r#"{"op":"kill"}"#).unwrap();
        assert_eq!(k, Request::Kill { grace_ms: None });
        let r = serde_json::to_string(&Request::Resize { cols: 80, rows: 24 }).unwrap();
        assert_eq!(r, r#"{"op":"resize","cols":80,"rows":24}"#);
        let a: Request = serde_json::from_str(r#"{"op":"attach"}"#).unwrap();
        assert_eq!(a, Request::Attach);
        assert_eq!(
            serde_json::to_string(&Response::ok()).unwrap(),
            r#"{"ok":true}"#
        );
    }
}
