//! What an error says about what a peer sent: quotes kept short ([`cap()`]) and where a value is
//! wrong ([`pointer()`]). The one home for both, for this crate and for transports.

use std::borrow::Cow;
use std::fmt::Write as _;

use serde_path_to_error::Segment;

/// The most bytes an error message quotes of one thing a peer sent (a reason, a key, a path).
pub const QUOTE_LIMIT: usize = 256;

/// `text`, or if it is longer than [`QUOTE_LIMIT`] bytes, its start and its end around a marker
/// saying how many bytes were cut, in at most [`QUOTE_LIMIT`] bytes. Cuts fall on char
/// boundaries. The end is kept because that is where serde says what it expected.
#[must_use]
pub fn cap(text: &str) -> Cow<'_, str> {
    if text.len() <= QUOTE_LIMIT {
        return Cow::Borrowed(text);
    }
    // The marker is sized for the longest possible cut, so the result always fits.
    let widest = marker(text.len()).len();
    let budget = QUOTE_LIMIT - widest;
    let head = floor_char_boundary(text, budget * 2 / 3);
    let tail = ceil_char_boundary(text, text.len() - (budget - budget * 2 / 3));
    let mut capped = String::with_capacity(QUOTE_LIMIT);
    capped.push_str(&text[..head]);
    capped.push_str(&marker(tail - head));
    capped.push_str(&text[tail..]);
    Cow::Owned(capped)
}

/// [`cap`] for an owned string: no copy when it is short enough.
pub(crate) fn cap_owned(text: String) -> String {
    if text.len() <= QUOTE_LIMIT {
        text
    } else {
        cap(&text).into_owned()
    }
}

fn marker(cut: usize) -> String {
    format!("…[{cut} bytes cut]…")
}

fn floor_char_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn ceil_char_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

/// `path` as a JSON Pointer (RFC 6901). A segment serde cannot name (inside an untagged enum,
/// say) ends the pointer there: it points at the closest value it can name.
#[must_use]
pub fn pointer(path: &serde_path_to_error::Path) -> String {
    let mut pointer = String::new();
    for segment in path {
        match segment {
            Segment::Seq { index } => {
                let _ = write!(pointer, "/{index}");
            }
            Segment::Map { key } | Segment::Enum { variant: key } => {
                pointer.push('/');
                for c in key.chars() {
                    match c {
                        '~' => pointer.push_str("~0"),
                        '/' => pointer.push_str("~1"),
                        c => pointer.push(c),
                    }
                }
            }
            Segment::Unknown => break,
        }
    }
    pointer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept() {
        assert!(matches!(
            cap("expected a string"),
            Cow::Borrowed("expected a string")
        ));
        let exact = "x".repeat(QUOTE_LIMIT);
        assert_eq!(cap(&exact), exact);
    }

    #[test]
    fn long_text_keeps_both_ends_and_says_how_much_was_cut() {
        let long = format!(
            "invalid type: string \"{}\", expected u32",
            "é".repeat(5_000)
        );
        let capped = cap(&long);
        assert!(capped.len() <= QUOTE_LIMIT, "{}", capped.len());
        assert!(capped.starts_with("invalid type: string \"é"), "{capped}");
        assert!(capped.ends_with("é\", expected u32"), "{capped}");
        let cut: usize = capped
            .split("…[")
            .nth(1)
            .and_then(|rest| rest.split(" bytes cut]").next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        let marker_len = marker(cut).len();
        assert_eq!(
            capped.len() - marker_len + cut,
            long.len(),
            "the count is exact"
        );
    }
}
