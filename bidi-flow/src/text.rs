//! What an error says about what a peer sent: quotes kept short ([`cap()`]), where a value is
//! wrong ([`pointer()`]), and why in the peer's terms ([`reason()`]). The one home for all
//! three, for this crate and for transports.

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

/// Serde's reason for refusing a value, in the terms of the JSON the peer sent (see
/// [`untyped`]), capped as [`cap`] does.
///
/// ```
/// use bidi_flow::text::reason;
///
/// assert_eq!(
///     reason("invalid type: null, expected struct AgentInit"),
///     "invalid type: null, expected an object"
/// );
/// assert_eq!(
///     reason("data did not match any variant of untagged enum TurnInput"),
///     "the value does not match any accepted form"
/// );
/// assert_eq!(reason("missing field `text`"), "missing field `text`");
/// ```
#[must_use]
pub fn reason(reason: &str) -> String {
    cap_owned(untyped(reason))
}

/// `text` (a message that may quote serde) without the Rust types serde names: they are
/// internal (`expected struct AgentInit`, `untagged enum TurnInput`), so they become the JSON
/// they stand for (`expected an object`, `does not match any accepted form`). Everything
/// else is kept as it is.
#[must_use]
pub fn untyped(text: &str) -> String {
    // (what serde writes before a Rust type's name, what it stands for in JSON)
    const TYPES: [(&str, &str); 9] = [
        (
            "data did not match any variant of untagged enum ",
            "the value does not match any accepted form",
        ),
        (
            "expected internally tagged enum ",
            "expected an object with its tag",
        ),
        (
            "expected adjacently tagged enum ",
            "expected an object with its tag",
        ),
        ("expected unit struct ", "expected null"),
        ("expected tuple struct ", "expected an array"),
        ("expected struct variant ", "expected an object"),
        ("expected tuple variant ", "expected an array"),
        ("expected struct ", "expected an object"),
        ("expected enum ", "expected one of the accepted values"),
    ];
    let mut text = text.to_owned();
    for (rust, json) in TYPES {
        while let Some(at) = text.find(rust) {
            let name = &text[at + rust.len()..];
            let end = name
                .find(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | ':' | '<' | '>')))
                .unwrap_or(name.len());
            text.replace_range(at..at + rust.len() + end, json);
        }
    }
    text
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

/// `bytes` as lowercase hex: what an opaque cursor or page token a wire hands its clients is
/// written in (read back with [`unhex`]).
///
/// ```
/// use bidi_flow::text::{hex, unhex};
///
/// assert_eq!(hex(b"a:1"), "613a31");
/// assert_eq!(unhex("613a31").as_deref(), Some(&b"a:1"[..]));
/// ```
#[must_use]
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut text, byte| {
            let _ = write!(text, "{byte:02x}");
            text
        })
}

/// The bytes hex `text` writes; `None` for text that is not hex pairs.
#[must_use]
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(text.get(at..at + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_name_json_not_rust_types() {
        for (serde, plain) in [
            (
                "invalid type: string \"x\", expected struct Foo at line 1 column 3",
                "invalid type: string \"x\", expected an object at line 1 column 3",
            ),
            (
                "invalid type: null, expected internally tagged enum Event",
                "invalid type: null, expected an object with its tag",
            ),
            (
                "invalid length 1, expected tuple struct Pair with 2 elements",
                "invalid length 1, expected an array with 2 elements",
            ),
            (
                "unknown field `x`, expected one of `a`, `b`",
                "unknown field `x`, expected one of `a`, `b`",
            ),
        ] {
            assert_eq!(reason(serde), plain);
        }
    }

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
