mod actions;
mod attach;
mod events;
mod pty;
mod restart;
mod ssh;
mod tools;
mod watch;
