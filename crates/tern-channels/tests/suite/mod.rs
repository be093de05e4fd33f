mod matrix;
mod telegram;
