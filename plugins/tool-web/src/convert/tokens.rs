//! The tokenizer's events, reduced to what the converter uses: start tags
//! with the few attributes it reads, end tags, and text.
//!
//! Tokenizing is `html5gum`'s (WHATWG-conformant, iterative, no tree): its
//! callback API hands each attribute over as it is read, so a start tag with
//! half a million attributes costs one pass and keeps five strings, where a
//! map of every attribute (or html5ever's duplicate check against all earlier
//! ones, quadratic) would not. Every event yields a token (comments, parse
//! errors and attribute names as [`Token::Other`]), so the converter can check
//! its budget between any two of them.

use std::borrow::Cow;

use html5gum::emitters::callback::{Callback, CallbackEmitter, CallbackEvent};
use html5gum::{Span, Tokenizer};

/// The attributes the converter reads; others are dropped as they are read.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Attrs {
    /// `href` (links).
    pub href: Option<String>,
    /// `src` (images).
    pub src: Option<String>,
    /// `alt` (images).
    pub alt: Option<String>,
    /// `class` (a code block's `language-*`).
    pub class: Option<String>,
    /// `start` (an ordered list's first number).
    pub start: Option<String>,
}

/// One token.
#[derive(Debug, PartialEq, Eq)]
pub enum Token {
    /// A start tag.
    Start {
        /// The tag name.
        name: String,
        /// The attributes the converter reads.
        attrs: Attrs,
        /// Written `<x/>` (meaningful in SVG and MathML only).
        self_closing: bool,
    },
    /// An end tag.
    End {
        /// The tag name.
        name: String,
    },
    /// Character data (entities decoded).
    Text(String),
    /// Something without content (a comment, a doctype, a parse error, an
    /// attribute read): a point where the budget can be checked.
    Other,
}

/// Which attribute the next value belongs to.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Href,
    Src,
    Alt,
    Class,
    Start,
}

/// The state between callback events.
#[derive(Debug, Default)]
struct Collect {
    name: String,
    attrs: Attrs,
    slot: Option<Slot>,
}

impl Collect {
    fn field(&mut self, slot: Slot) -> &mut Option<String> {
        match slot {
            Slot::Href => &mut self.attrs.href,
            Slot::Src => &mut self.attrs.src,
            Slot::Alt => &mut self.attrs.alt,
            Slot::Class => &mut self.attrs.class,
            Slot::Start => &mut self.attrs.start,
        }
    }
}

fn text(bytes: &[u8]) -> String {
    match String::from_utf8_lossy(bytes) {
        Cow::Borrowed(s) => s.to_owned(),
        Cow::Owned(s) => s,
    }
}

impl Callback<Token, ()> for Collect {
    fn handle_event(&mut self, event: CallbackEvent<'_>, _span: Span<()>) -> Option<Token> {
        match event {
            CallbackEvent::OpenStartTag { name } => {
                self.name = text(name);
                self.attrs = Attrs::default();
                self.slot = None;
                None
            }
            CallbackEvent::AttributeName { name } => {
                let slot = match name {
                    b"href" => Some(Slot::Href),
                    b"src" => Some(Slot::Src),
                    b"alt" => Some(Slot::Alt),
                    b"class" => Some(Slot::Class),
                    b"start" => Some(Slot::Start),
                    _ => None,
                };
                // The first of duplicate attributes wins, as in browsers.
                self.slot = slot.filter(|s| self.field(*s).is_none());
                if let Some(s) = self.slot {
                    *self.field(s) = Some(String::new());
                }
                Some(Token::Other)
            }
            CallbackEvent::AttributeValue { value } => {
                if let Some(s) = self.slot {
                    if let Some(v) = self.field(s) {
                        v.push_str(&String::from_utf8_lossy(value));
                    }
                }
                None
            }
            CallbackEvent::CloseStartTag { self_closing } => {
                self.slot = None;
                Some(Token::Start {
                    name: std::mem::take(&mut self.name),
                    attrs: std::mem::take(&mut self.attrs),
                    self_closing,
                })
            }
            CallbackEvent::EndTag { name } => Some(Token::End { name: text(name) }),
            CallbackEvent::String { value } => Some(Token::Text(text(value))),
            CallbackEvent::Comment { .. }
            | CallbackEvent::Doctype { .. }
            | CallbackEvent::Error(_) => Some(Token::Other),
        }
    }
}

/// The tokens of `html`, in order. Script, style, title, textarea and the
/// other raw-text elements switch the tokenizer's state by name, as a
/// browser's tree builder would.
pub fn tokens(html: &str) -> impl Iterator<Item = Token> + '_ {
    let mut emitter = CallbackEmitter::new(Collect::default());
    emitter.naively_switch_states(true);
    Tokenizer::new_with_emitter(html, emitter).map(|t| match t {
        Ok(token) => token,
        Err(never) => match never {},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(html: &str) -> Vec<Token> {
        tokens(html).filter(|t| *t != Token::Other).collect()
    }

    #[test]
    fn tags_text_and_the_attributes_read() {
        assert_eq!(
            all("<A HREF='x' id=1 href=y>t&amp;u</a>"),
            vec![
                Token::Start {
                    name: "a".into(),
                    attrs: Attrs {
                        href: Some("x".into()),
                        ..Attrs::default()
                    },
                    self_closing: false,
                },
                Token::Text("t&u".into()),
                Token::End { name: "a".into() },
            ]
        );
    }

    #[test]
    fn script_content_is_raw_text() {
        assert_eq!(
            all("<script>if (a<b) x='<p>'</script>"),
            vec![
                Token::Start {
                    name: "script".into(),
                    attrs: Attrs::default(),
                    self_closing: false,
                },
                Token::Text("if (a<b) x='<p>'".into()),
                Token::End {
                    name: "script".into()
                },
            ]
        );
    }

    #[test]
    fn every_attribute_is_a_checkpoint() {
        let html = format!("<p{}>", " a".repeat(10));
        // Ten attribute names (one kept, nine duplicates): ten tokens.
        assert_eq!(tokens(&html).filter(|t| *t == Token::Other).count(), 10);
    }
}
