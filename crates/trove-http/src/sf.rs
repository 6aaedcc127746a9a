//! Just enough of Structured Field Dictionaries (RFC 8941 §4.2.2) to read
//! targeted cache-control fields such as `CDN-Cache-Control` (RFC 9213 §2.2),
//! which must be parsed strictly: a parse error makes the whole field be
//! ignored, unlike `Cache-Control`'s lenient grammar.
//!
//! Written here rather than pulled in as a crate because only the parsing
//! half is needed and the grammar is small.

/// A bare item. Byte sequences and inner lists are parsed for validity but
/// their content is not kept: no cache directive uses them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Item {
    Integer(i64),
    Decimal,
    String(String),
    Token(String),
    Boolean(bool),
    Other,
}

/// Parses a dictionary into its members in order; a key seen twice keeps
/// its last value (RFC 8941 §4.2.2). `None` on any syntax error or when the
/// field is empty.
pub(crate) fn parse_dictionary(input: &str) -> Option<Vec<(String, Item)>> {
    let mut p = Parser {
        s: input.trim_matches(' ').as_bytes(),
        i: 0,
    };
    if p.s.is_empty() {
        return None;
    }
    let mut out: Vec<(String, Item)> = Vec::new();
    loop {
        let key = p.key()?;
        let item = if p.eat(b'=') {
            p.item_or_inner_list()?
        } else {
            p.parameters()?;
            Item::Boolean(true)
        };
        out.retain(|(k, _)| *k != key);
        out.push((key, item));
        p.skip_ows();
        if p.at_end() {
            return Some(out);
        }
        if !p.eat(b',') {
            return None;
        }
        p.skip_ows();
        if p.at_end() {
            return None;
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn at_end(&self) -> bool {
        self.i >= self.s.len()
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }

    fn skip_sp(&mut self) {
        while self.eat(b' ') {}
    }

    fn key(&mut self) -> Option<String> {
        let start = self.i;
        match self.peek() {
            Some(c) if c.is_ascii_lowercase() || c == b'*' => self.i += 1,
            _ => return None,
        }
        while matches!(self.peek(), Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-.*".contains(&c))
        {
            self.i += 1;
        }
        Some(String::from_utf8_lossy(&self.s[start..self.i]).into_owned())
    }

    fn item_or_inner_list(&mut self) -> Option<Item> {
        if self.eat(b'(') {
            loop {
                self.skip_sp();
                if self.eat(b')') {
                    break;
                }
                self.bare_item()?;
                self.parameters()?;
                if !matches!(self.peek(), Some(b' ' | b')')) {
                    return None;
                }
            }
            self.parameters()?;
            return Some(Item::Other);
        }
        let item = self.bare_item()?;
        self.parameters()?;
        Some(item)
    }

    fn parameters(&mut self) -> Option<()> {
        while self.eat(b';') {
            self.skip_sp();
            self.key()?;
            if self.eat(b'=') {
                self.bare_item()?;
            }
        }
        Some(())
    }

    fn bare_item(&mut self) -> Option<Item> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => self.number(),
            b'"' => self.string(),
            b':' => self.bytes(),
            b'?' => self.boolean(),
            c if c.is_ascii_alphabetic() || c == b'*' => Some(self.token()),
            _ => None,
        }
    }

    fn number(&mut self) -> Option<Item> {
        let negative = self.eat(b'-');
        let start = self.i;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        let int_digits = self.i - start;
        if int_digits == 0 {
            return None;
        }
        if self.eat(b'.') {
            let frac_start = self.i;
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.i += 1;
            }
            let frac_digits = self.i - frac_start;
            if int_digits > 12 || !(1..=3).contains(&frac_digits) {
                return None;
            }
            return Some(Item::Decimal);
        }
        if int_digits > 15 {
            return None;
        }
        let digits = std::str::from_utf8(&self.s[start..self.i]).ok()?;
        let value: i64 = digits.parse().ok()?;
        Some(Item::Integer(if negative { -value } else { value }))
    }

    fn string(&mut self) -> Option<Item> {
        self.i += 1;
        let mut out = String::new();
        loop {
            match self.peek()? {
                b'\\' => {
                    self.i += 1;
                    let c = self.peek()?;
                    if c != b'"' && c != b'\\' {
                        return None;
                    }
                    out.push(char::from(c));
                }
                b'"' => {
                    self.i += 1;
                    return Some(Item::String(out));
                }
                c if (0x20..=0x7e).contains(&c) => out.push(char::from(c)),
                _ => return None,
            }
            self.i += 1;
        }
    }

    fn token(&mut self) -> Item {
        let start = self.i;
        self.i += 1;
        while matches!(self.peek(), Some(c) if crate::field::is_tchar(char::from(c)) || c == b':' || c == b'/')
        {
            self.i += 1;
        }
        Item::Token(String::from_utf8_lossy(&self.s[start..self.i]).into_owned())
    }

    fn bytes(&mut self) -> Option<Item> {
        self.i += 1;
        while let Some(c) = self.peek() {
            self.i += 1;
            if c == b':' {
                return Some(Item::Other);
            }
            if !(c.is_ascii_alphanumeric() || b"+/=".contains(&c)) {
                return None;
            }
        }
        None
    }

    fn boolean(&mut self) -> Option<Item> {
        self.i += 1;
        let value = match self.peek()? {
            b'0' => false,
            b'1' => true,
            _ => return None,
        };
        self.i += 1;
        Some(Item::Boolean(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_members_of_each_type_8941_4_2_2() {
        let d = parse_dictionary(
            r#"max-age=60, private="a\"b", no-store, x=?0, t=tok/1, d=1.5, b=:AQ==:, l=(1 "a");p"#,
        )
        .expect("valid dictionary");
        let keys: Vec<&str> = d.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            ["max-age", "private", "no-store", "x", "t", "d", "b", "l"]
        );
        assert_eq!(d[0].1, Item::Integer(60));
        assert_eq!(d[1].1, Item::String("a\"b".into()));
        assert_eq!(d[2].1, Item::Boolean(true));
        assert_eq!(d[3].1, Item::Boolean(false));
        assert_eq!(d[4].1, Item::Token("tok/1".into()));
        assert_eq!(d[5].1, Item::Decimal);
    }

    #[test]
    fn duplicate_keys_keep_the_last_value_8941_4_2_2() {
        let d = parse_dictionary("max-age=1, max-age=2").expect("valid");
        assert_eq!(d, vec![("max-age".to_string(), Item::Integer(2))]);
    }

    #[test]
    fn syntax_errors_reject_the_whole_field_8941_4_2() {
        for bad in [
            "",
            "   ",
            "Max-Age=1",
            "max-age=",
            "max-age=1,",
            "a, ,b",
            "a=\"unterminated",
            "a=1234567890123456",
            "a=1.2345",
            "a=?2",
            "a=:!!:",
            "a=(1",
            "a=1 b=2",
            "a=#",
        ] {
            assert_eq!(parse_dictionary(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn negative_integers_parse() {
        assert_eq!(
            parse_dictionary("max-age=-5"),
            Some(vec![("max-age".to_string(), Item::Integer(-5))])
        );
    }
}
