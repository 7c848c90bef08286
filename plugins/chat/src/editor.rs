//! The line editor: the input being typed (multi-line), its cursor, and
//! the history it walks with Up and Down. Pure state: keys in, actions
//! out; drawing is [`crate::screen`]'s.

use crate::keys::Key;

/// What a key asks of the app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Nothing beyond redrawing the input.
    Edited,
    /// The input was submitted (history keeps it).
    Submit(String),
    /// Ctrl-C (the input, if any, was cleared first).
    Interrupt { had_input: bool },
    /// Ctrl-D on an empty input.
    Eof,
    /// Ctrl-L.
    ClearScreen,
    /// Ctrl-T.
    ToggleReasoning,
}

/// The input line(s) and the history.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Editor {
    text: Vec<char>,
    cursor: usize,
    history: Vec<String>,
    /// The history entry shown (`None`: the input being typed).
    browsing: Option<usize>,
    /// What was typed before browsing began.
    draft: Vec<char>,
}

impl Editor {
    /// An editor over `history` (oldest first).
    pub fn new(history: Vec<String>) -> Editor {
        Editor {
            history,
            ..Editor::default()
        }
    }

    /// The input.
    pub fn text(&self) -> String {
        self.text.iter().collect()
    }

    /// The cursor, in characters from the start.
    pub fn cursor(&self) -> usize {
        self.cursor
    }

    /// The history, oldest first.
    #[cfg(test)]
    pub fn history(&self) -> &[String] {
        &self.history
    }

    /// Applies one key.
    pub fn handle(&mut self, key: Key) -> Action {
        match key {
            Key::Char(c) => self.insert(&[c]),
            Key::Newline => self.insert(&['\n']),
            Key::Tab => self.insert(&[' ', ' ']),
            Key::Paste(text) => {
                let chars: Vec<char> = text
                    .chars()
                    .filter(|c| matches!(c, '\n' | '\t') || !c.is_control())
                    .collect();
                self.insert(&chars)
            }
            Key::Enter => return self.submit(),
            Key::Backspace if self.cursor > 0 => {
                self.cursor -= 1;
                self.text.remove(self.cursor);
            }
            Key::Delete if self.cursor < self.text.len() => {
                self.text.remove(self.cursor);
            }
            Key::Left => self.cursor = self.cursor.saturating_sub(1),
            Key::Right => self.cursor = (self.cursor + 1).min(self.text.len()),
            Key::Home => self.cursor = self.line_start(),
            Key::End => self.cursor = self.line_end(),
            Key::WordLeft => self.cursor = self.word_start(),
            Key::WordRight => self.cursor = self.word_end(),
            Key::KillWordBack => {
                let start = self.word_start();
                self.text.drain(start..self.cursor);
                self.cursor = start;
            }
            Key::KillToStart => {
                let start = self.line_start();
                self.text.drain(start..self.cursor);
                self.cursor = start;
            }
            Key::KillToEnd => {
                let end = self.line_end();
                self.text.drain(self.cursor..end);
            }
            Key::Up => self.older(),
            Key::Down => self.newer(),
            Key::Interrupt => {
                let had_input = !self.text.is_empty();
                self.clear();
                return Action::Interrupt { had_input };
            }
            Key::Eof if self.text.is_empty() => return Action::Eof,
            Key::Eof => {
                if self.cursor < self.text.len() {
                    self.text.remove(self.cursor);
                }
            }
            Key::ClearScreen => return Action::ClearScreen,
            Key::ToggleReasoning => return Action::ToggleReasoning,
            Key::Backspace | Key::Delete | Key::Esc => {}
        }
        Action::Edited
    }

    fn insert(&mut self, chars: &[char]) {
        self.text
            .splice(self.cursor..self.cursor, chars.iter().copied());
        self.cursor += chars.len();
    }

    fn clear(&mut self) {
        self.text.clear();
        self.cursor = 0;
        self.browsing = None;
    }

    fn submit(&mut self) -> Action {
        let text = self.text();
        self.clear();
        if !text.trim().is_empty() && self.history.last() != Some(&text) {
            self.history.push(text.clone());
            let over = self.history.len().saturating_sub(crate::history::KEEP);
            self.history.drain(..over);
        }
        Action::Submit(text)
    }

    fn line_start(&self) -> usize {
        self.text[..self.cursor]
            .iter()
            .rposition(|c| *c == '\n')
            .map_or(0, |i| i + 1)
    }

    fn line_end(&self) -> usize {
        self.text[self.cursor..]
            .iter()
            .position(|c| *c == '\n')
            .map_or(self.text.len(), |i| self.cursor + i)
    }

    fn word_start(&self) -> usize {
        let mut i = self.cursor;
        while i > 0 && self.text[i - 1].is_whitespace() {
            i -= 1;
        }
        while i > 0 && !self.text[i - 1].is_whitespace() {
            i -= 1;
        }
        i
    }

    fn word_end(&self) -> usize {
        let mut i = self.cursor;
        while i < self.text.len() && self.text[i].is_whitespace() {
            i += 1;
        }
        while i < self.text.len() && !self.text[i].is_whitespace() {
            i += 1;
        }
        i
    }

    fn older(&mut self) {
        // Inside a multi-line input, Up moves between its lines first.
        if self.line_start() > 0 {
            let col = self.cursor - self.line_start();
            let prev_end = self.line_start() - 1;
            let prev_start = self.text[..prev_end]
                .iter()
                .rposition(|c| *c == '\n')
                .map_or(0, |i| i + 1);
            self.cursor = prev_start + col.min(prev_end - prev_start);
            return;
        }
        let next = match self.browsing {
            None if self.history.is_empty() => return,
            None => {
                self.draft = self.text.clone();
                self.history.len() - 1
            }
            Some(0) => return,
            Some(i) => i - 1,
        };
        self.browsing = Some(next);
        self.text = self.history[next].chars().collect();
        self.cursor = self.text.len();
    }

    fn newer(&mut self) {
        if self.line_end() < self.text.len() {
            let col = self.cursor - self.line_start();
            let next_start = self.line_end() + 1;
            let next_end = self.text[next_start..]
                .iter()
                .position(|c| *c == '\n')
                .map_or(self.text.len(), |i| next_start + i);
            self.cursor = next_start + col.min(next_end - next_start);
            return;
        }
        match self.browsing {
            None => {}
            Some(i) if i + 1 < self.history.len() => {
                self.browsing = Some(i + 1);
                self.text = self.history[i + 1].chars().collect();
            }
            Some(_) => {
                self.browsing = None;
                self.text = std::mem::take(&mut self.draft);
            }
        }
        self.cursor = self.text.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(e: &mut Editor, s: &str) {
        for c in s.chars() {
            e.handle(Key::Char(c));
        }
    }

    #[test]
    fn typing_editing_and_submitting() {
        let mut e = Editor::default();
        typed(&mut e, "hello world");
        e.handle(Key::KillWordBack);
        typed(&mut e, "there");
        e.handle(Key::Home);
        e.handle(Key::Delete);
        typed(&mut e, "H");
        assert_eq!(e.handle(Key::Enter), Action::Submit("Hello there".into()));
        assert_eq!(e.text(), "");
        assert_eq!(e.history(), ["Hello there"]);
    }

    #[test]
    fn multi_line_input_and_pastes() {
        let mut e = Editor::default();
        typed(&mut e, "a");
        e.handle(Key::Newline);
        e.handle(Key::Paste("b\nc\u{7}".into()));
        assert_eq!(e.text(), "a\nb\nc");
        e.handle(Key::Up);
        e.handle(Key::Up);
        assert_eq!(e.cursor(), 1);
        assert_eq!(e.handle(Key::Enter), Action::Submit("a\nb\nc".into()));
    }

    #[test]
    fn history_walks_back_and_returns_to_the_draft() {
        let mut e = Editor::new(vec!["one".into(), "two".into()]);
        typed(&mut e, "dra");
        e.handle(Key::Up);
        assert_eq!(e.text(), "two");
        e.handle(Key::Up);
        e.handle(Key::Up);
        assert_eq!(e.text(), "one");
        e.handle(Key::Down);
        e.handle(Key::Down);
        assert_eq!(e.text(), "dra");
    }

    #[test]
    fn ctrl_c_clears_and_ctrl_d_exits_only_when_empty() {
        let mut e = Editor::default();
        typed(&mut e, "x");
        assert_eq!(e.handle(Key::Eof), Action::Edited);
        assert_eq!(
            e.handle(Key::Interrupt),
            Action::Interrupt { had_input: true }
        );
        assert_eq!(
            e.handle(Key::Interrupt),
            Action::Interrupt { had_input: false }
        );
        assert_eq!(e.handle(Key::Eof), Action::Eof);
    }
}
