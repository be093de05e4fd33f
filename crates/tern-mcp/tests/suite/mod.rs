mod stdio;
mod tools;
mod manager;
