mod command;
mod prompt;
mod remote_feed;
mod tools;
