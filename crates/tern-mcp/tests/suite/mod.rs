mod http;
mod manager;
mod sandbox;
mod stdio;
mod tools;
