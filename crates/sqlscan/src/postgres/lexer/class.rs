//! Byte classes: which bytes make identifiers and operators, and what the first byte of a
//! token leads to.

const START: u8 = 1;
const IDENT: u8 = 2;
const OP: u8 = 4;

/// Byte classes: identifier start, identifier continuation, operator.
static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0usize;
    while b < 256 {
        let c = b as u8;
        if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 {
            t[b] = START | IDENT;
        } else if c.is_ascii_digit() || c == b'$' {
            t[b] = IDENT;
        } else if is_op(c) {
            t[b] = OP;
        }
        b += 1;
    }
    t
};

/// The bytes operators are made of.
const fn is_op(c: u8) -> bool {
    matches!(
        c,
        b'+' | b'-'
            | b'*'
            | b'/'
            | b'<'
            | b'>'
            | b'='
            | b'~'
            | b'!'
            | b'@'
            | b'#'
            | b'%'
            | b'^'
            | b'&'
            | b'|'
            | b'`'
            | b'?'
    )
}

/// Bytes that can start an unquoted identifier: ASCII letters, `_` and any non-ASCII byte.
#[inline]
pub fn is_ident_start(b: u8) -> bool {
    CLASS[b as usize] & START != 0
}

/// Bytes that can continue an unquoted identifier: also digits and `$`.
#[inline]
pub fn is_ident_byte(b: u8) -> bool {
    CLASS[b as usize] & IDENT != 0
}

/// Bytes that make up operators.
#[inline]
pub(super) fn is_op_byte(b: u8) -> bool {
    CLASS[b as usize] & OP != 0
}

/// What the first byte of a token leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lead {
    /// Whitespace.
    Blank,
    /// A word: an identifier start other than those of [`Lead::Prefix`].
    Word,
    /// `e`, `b`, `x`, `n`, `u` in either case: a word, or the prefix of a string (`E'..'`,
    /// `U&".."`).
    Prefix,
    /// A byte that is a token by itself: `(`, `)`, `,`, `;`, `[`, `]` and any other byte that
    /// is neither an operator's nor one of those below.
    Punct,
    Digit,
    Quote,
    DoubleQuote,
    Dollar,
    /// `.`: punctuation, or the start of a number (`.5`).
    Dot,
    /// `:`: punctuation, or `::`.
    Colon,
    /// `-` and `/`: an operator, or a comment.
    CommentStart,
    /// The other operator bytes.
    Op,
}

/// The [`Lead`] of each byte.
pub(super) static LEAD: [Lead; 256] = {
    let mut t = [Lead::Punct; 256];
    let mut b = 0usize;
    while b < 256 {
        let c = b as u8;
        t[b] = match c {
            b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => Lead::Blank,
            b'e' | b'E' | b'b' | b'B' | b'x' | b'X' | b'n' | b'N' | b'u' | b'U' => Lead::Prefix,
            b'0'..=b'9' => Lead::Digit,
            b'\'' => Lead::Quote,
            b'"' => Lead::DoubleQuote,
            b'$' => Lead::Dollar,
            b'.' => Lead::Dot,
            b':' => Lead::Colon,
            b'-' | b'/' => Lead::CommentStart,
            _ if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 => Lead::Word,
            _ if is_op(c) => Lead::Op,
            _ => Lead::Punct,
        };
        b += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leads_agree_with_the_classes() {
        for b in 0..=255u8 {
            match LEAD[usize::from(b)] {
                Lead::Word | Lead::Prefix => assert!(is_ident_start(b)),
                Lead::Op | Lead::CommentStart => assert!(is_op_byte(b)),
                _ => assert!(!is_ident_start(b) && !is_op_byte(b), "{b:#x}"),
            }
        }
    }
}
