mod images;
mod stdio;
mod tools;
