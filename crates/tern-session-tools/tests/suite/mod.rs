mod memory;
mod schemas;
mod session_search;
mod todo;
