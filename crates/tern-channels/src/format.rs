//! TEMPORARY stub until the formatting module lands (same signatures).
pub fn telegram_html(markdown: &str) -> String {
    markdown
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
pub fn matrix_html(markdown: &str) -> String {
    telegram_html(markdown)
}
pub fn plain_text(markdown: &str) -> String {
    markdown.to_owned()
}
pub fn split(markdown: &str, max_chars: usize) -> Vec<String> {
    let chars: Vec<char> = markdown.chars().collect();
    chars
        .chunks(max_chars.max(1))
        .map(|c| c.iter().collect())
        .collect()
}
