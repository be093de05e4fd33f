mod stdio;
mod tools;
