//! The keys of `napilab top` and the view state they change (pure, tested without a
//! terminal).

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::model::SortKey;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UiState {
    pub sort: SortKey,
    pub reverse: bool,
    /// Substring the NAPI rows must contain (device, id, IRQ, poller).
    pub filter: String,
    /// Typing the filter: keys go into it until Enter or Esc.
    pub editing_filter: bool,
    /// The view keeps what it showed; sampling goes on underneath.
    pub paused: bool,
    pub help: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    None,
    Quit,
}

/// One line for the help screen per key.
pub const HELP: &[(&str, &str)] = &[
    ("q, Ctrl-C", "quit (restores the terminal, detaches BPF)"),
    ("?", "this help; any key closes it"),
    (
        "s",
        "sort the NAPI table by the next column (polls/s, rx pkt/s, napi id, device)",
    ),
    ("r", "reverse the sort"),
    (
        "/",
        "filter the NAPI table (device, NAPI id, IRQ or poller); Enter keeps, Esc clears",
    ),
    ("p, space", "pause the view (sampling goes on)"),
    ("", ""),
    (
        "polled by",
        "after-irq: NET_RX softirq on the way out of a hard IRQ",
    ),
    (
        "",
        "bh-enable: softirq run when a task re-enabled bottom halves",
    ),
    ("", "ksoftirqd: softirq deferred to ksoftirqd/N"),
    (
        "",
        "kthread: a threaded-NAPI kthread; busy-poll: an application's syscall",
    ),
    (
        "",
        "(proc tier: the map's poller; --trace measures the contexts)",
    ),
    (
        "sirq/irq",
        "meas: measured by the trace tier; tick: /proc/stat's tick-sampled view",
    ),
];

pub fn handle(state: &mut UiState, key: KeyEvent) -> Action {
    if key.kind == KeyEventKind::Release {
        return Action::None;
    }
    // Ctrl-C quits from anywhere: raw mode turns it into a key, not a signal.
    if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
        return Action::Quit;
    }
    if state.help {
        state.help = false;
        return Action::None;
    }
    if state.editing_filter {
        match key.code {
            KeyCode::Enter => state.editing_filter = false,
            KeyCode::Esc => {
                state.editing_filter = false;
                state.filter.clear();
            }
            KeyCode::Backspace => {
                state.filter.pop();
            }
            KeyCode::Char(c) if state.filter.len() < 40 => state.filter.push(c),
            _ => {}
        }
        return Action::None;
    }
    match key.code {
        KeyCode::Char('q') => return Action::Quit,
        KeyCode::Char('?') | KeyCode::Char('h') => state.help = true,
        KeyCode::Char('s') => state.sort = state.sort.next(),
        KeyCode::Char('r') => state.reverse = !state.reverse,
        KeyCode::Char('/') => {
            state.editing_filter = true;
            state.filter.clear();
        }
        KeyCode::Esc => state.filter.clear(),
        KeyCode::Char('p') | KeyCode::Char(' ') => state.paused = !state.paused,
        _ => {}
    }
    Action::None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn press(state: &mut UiState, code: KeyCode) -> Action {
        handle(state, KeyEvent::new(code, KeyModifiers::NONE))
    }

    #[test]
    fn keys_sort_filter_pause_help_and_quit() {
        let mut s = UiState::default();
        assert_eq!(press(&mut s, KeyCode::Char('s')), Action::None);
        assert_eq!(s.sort, SortKey::RxPackets);
        press(&mut s, KeyCode::Char('r'));
        assert!(s.reverse);
        press(&mut s, KeyCode::Char('/'));
        for c in "eth".chars() {
            press(&mut s, KeyCode::Char(c));
        }
        // 'q' while typing the filter is a letter, not quit.
        assert_eq!(press(&mut s, KeyCode::Char('q')), Action::None);
        press(&mut s, KeyCode::Backspace);
        press(&mut s, KeyCode::Enter);
        assert_eq!((s.filter.as_str(), s.editing_filter), ("eth", false));
        press(&mut s, KeyCode::Char('p'));
        assert!(s.paused);
        press(&mut s, KeyCode::Char('?'));
        assert!(s.help);
        // Any key closes the help, and only that.
        assert_eq!(press(&mut s, KeyCode::Char('q')), Action::None);
        assert!(!s.help);
        assert_eq!(press(&mut s, KeyCode::Char('q')), Action::Quit);
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        s.editing_filter = true;
        assert_eq!(handle(&mut s, ctrl_c), Action::Quit);
    }
}
