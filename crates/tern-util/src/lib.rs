//! Small helpers every tern crate shares, each defined once: [`fs::write_atomic`] (a file
//! replaced whole or not at all, with the mode asked for), [`backoff::Backoff`] (exponential
//! retry delays with jitter and a cap), [`clock::now_ms`] (the wall clock as the store
//! keeps it) and [`text`] (text framed for a model kept inside its frame).
//!
//! It sits at the bottom of the workspace (it depends on no other tern crate) so that every
//! crate can use it.

pub mod backoff;
pub mod clock;
pub mod fs;
pub mod text;

pub use backoff::Backoff;
pub use clock::now_ms;
