mod stdio;
mod tools;
mod manager;
mod sandbox;
mod http;
