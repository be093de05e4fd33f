mod calls;
mod http;
mod images;
mod manager;
mod sandbox;
mod stdio;
mod tools;
