mod calls;
mod images;
mod stdio;
mod tools;
