//! Drawing `napilab top`: the NAPI map, the CPUs, the findings, a status line and a help
//! screen, from the model's rows (tested on ratatui's TestBackend).

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Clear, Paragraph, Row, Table, Wrap};
use ratatui::Frame;

use super::keys::{UiState, HELP};
use super::model::{arrange, context_short, NapiRow, Rows};

/// Below this the tables do not fit: one line says so instead.
pub const MIN_WIDTH: u16 = 80;
pub const MIN_HEIGHT: u16 = 20;

/// What the frame shows besides the rows.
pub struct Status<'a> {
    /// "live", "replay FILE"
    pub source: &'a str,
    pub host: &'a str,
    pub tier: &'a str,
    /// The latest message (end of a recording, why BPF is off, ...).
    pub message: &'a str,
}

pub fn draw(frame: &mut Frame, rows: &Rows, ui: &UiState, status: &Status) {
    let area = frame.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let notice = format!(
            "napilab top: terminal too small ({}x{}); needs {MIN_WIDTH}x{MIN_HEIGHT}",
            area.width, area.height
        );
        frame.render_widget(Paragraph::new(notice), area);
        return;
    }
    let napi = arrange(&rows.napi, ui.sort, ui.reverse, &ui.filter);
    // Two borders and the column header around the rows.
    // Each table as tall as its rows (two borders and the column header around them),
    // the NAPI table at most half the screen; the findings get what is left.
    let cpu_height = (rows.cpus.len() as u16 + 3).min(area.height / 4);
    let napi_height = (napi.len() as u16 + 3).clamp(4, area.height / 2);
    let [top, napi_area, cpu_area, findings_area, bottom] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(napi_height),
        Constraint::Length(cpu_height),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(header(rows, ui, status, napi.len()), top);
    frame.render_widget(napi_table(&napi, rows.traced, ui), napi_area);
    frame.render_widget(cpu_table(rows), cpu_area);
    frame.render_widget(findings(rows), findings_area);
    frame.render_widget(footer(ui, status), bottom);
    if ui.help {
        help(frame, area);
    }
}

fn rate(v: Option<f64>) -> String {
    v.map(napilab_core::stats::short)
        .unwrap_or_else(|| "-".into())
}

fn pct(v: Option<f64>) -> String {
    v.map(|f| format!("{:.1}%", f * 100.0))
        .unwrap_or_else(|| "-".into())
}

fn header<'a>(rows: &Rows, ui: &UiState, status: &Status, shown: usize) -> Paragraph<'a> {
    let mut spans = vec![
        Span::styled("napilab top", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!(
            "  {}  {}  {} tier  t={:.1}s every {:.1}s  {} NAPI shown  sort {}{}",
            status.host,
            status.source,
            status.tier,
            rows.at_s,
            rows.interval_s,
            shown,
            ui.sort.name(),
            if ui.reverse { " (reversed)" } else { "" }
        )),
    ];
    if !ui.filter.is_empty() || ui.editing_filter {
        spans.push(Span::raw(format!("  filter \"{}\"", ui.filter)));
    }
    if ui.paused {
        spans.push(Span::styled(
            "  PAUSED",
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ));
    }
    Paragraph::new(Line::from(spans))
}

fn by_context(row: &NapiRow) -> String {
    row.by_context
        .iter()
        .filter(|c| c.1 > 0.0)
        .map(|(c, polls, per)| {
            format!(
                "{} {}/s x{per:.1}",
                context_short(*c),
                napilab_core::stats::short(*polls)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn napi_table<'a>(napi: &[NapiRow], traced: bool, ui: &UiState) -> Table<'a> {
    let head = Row::new([
        "NAPI",
        "device",
        "queue",
        "IRQ",
        "CPU",
        "polled by",
        "polls/s",
        "pkt/poll",
        "rx pkt/s",
        "by context (polls/s x pkt/poll)",
    ])
    .style(Style::new().add_modifier(Modifier::BOLD));
    let body = napi.iter().map(|r| {
        let row = Row::new([
            Cell::from(r.napi_id.to_string()),
            Cell::from(if r.in_map {
                r.device.clone()
            } else {
                format!("{}*", r.device)
            }),
            Cell::from(r.queues.clone()),
            Cell::from(r.irq.map(|i| i.to_string()).unwrap_or_else(|| "-".into())),
            Cell::from(r.cpus.clone()),
            Cell::from(r.polled_by.clone()),
            Cell::from(rate(r.polls_per_s)),
            Cell::from(
                r.packets_per_poll
                    .map(|p| format!("{p:.1}"))
                    .unwrap_or_else(|| "-".into()),
            ),
            Cell::from(rate(r.rx_pps)),
            Cell::from(by_context(r)),
        ]);
        if r.polls_per_s.unwrap_or(0.0) > 0.0 || r.rx_pps.unwrap_or(0.0) > 0.0 {
            row.style(Style::new().fg(Color::Green))
        } else {
            row
        }
    });
    let title = format!(
        " NAPI instances{} (sorted by {}; * = another network namespace) ",
        if traced {
            ""
        } else {
            ": proc tier, run with --trace (root) for polls by context"
        },
        ui.sort.name()
    );
    Table::new(
        body,
        [
            Constraint::Length(6),
            Constraint::Length(12),
            Constraint::Length(6),
            Constraint::Length(5),
            Constraint::Length(5),
            Constraint::Length(20),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(9),
            Constraint::Fill(1),
        ],
    )
    .header(head)
    .block(Block::bordered().title(title))
}

fn cpu_table<'a>(rows: &Rows) -> Table<'a> {
    let head = Row::new([
        "CPU",
        "sirq meas",
        "sirq tick",
        "irq meas",
        "irq tick",
        "ksoftirqd",
        "NET_RX/s",
        "processed/s",
        "dropped/s",
        "squeezed/s",
    ])
    .style(Style::new().add_modifier(Modifier::BOLD));
    let body = rows.cpus.iter().map(|c| {
        let warn = c.dropped.unwrap_or(0.0) > 0.0 || c.squeezed.unwrap_or(0.0) > 0.0;
        let row = Row::new([
            format!("cpu{}", c.cpu),
            pct(c.softirq_measured),
            pct(c.softirq_ticks),
            pct(c.irq_measured),
            pct(c.irq_ticks),
            pct(c.ksoftirqd),
            rate(c.net_rx_softirqs),
            rate(c.processed),
            rate(c.dropped),
            rate(c.squeezed),
        ]);
        if warn {
            row.style(Style::new().fg(Color::Yellow))
        } else {
            row
        }
    });
    Table::new(body, [Constraint::Length(11); 10])
        .header(head)
        .block(Block::bordered().title(
            " CPUs: softirq and IRQ time measured (trace) beside /proc/stat ticks; softnet ",
        ))
}

fn findings<'a>(rows: &Rows) -> Paragraph<'a> {
    let mut lines: Vec<Line> = Vec::new();
    if rows.findings.is_empty() {
        lines.push(Line::from("none over the window"));
    }
    for f in &rows.findings {
        let level = if f.warning {
            Span::styled(
                "WARN ",
                Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
            )
        } else {
            Span::styled("info ", Style::new().fg(Color::Cyan))
        };
        lines.push(Line::from(vec![
            level,
            Span::raw(format!(
                "{} [{} {}] since t={:.1}s",
                f.title, f.rule, f.subject, f.since_s
            )),
        ]));
        lines.push(Line::from(format!("     evidence: {}", f.evidence)));
    }
    Paragraph::new(lines)
        .wrap(Wrap { trim: false })
        .block(Block::bordered().title(" Findings (napilab observe's rules over the window) "))
}

fn footer<'a>(ui: &UiState, status: &Status) -> Paragraph<'a> {
    let keys = if ui.editing_filter {
        format!("filter: {}_  (Enter keeps, Esc clears)", ui.filter)
    } else {
        "q quit  ? help  s sort  r reverse  / filter  p pause".to_string()
    };
    let line = if status.message.is_empty() {
        keys
    } else {
        format!("{keys}  |  {}", status.message)
    };
    Paragraph::new(line).style(Style::new().add_modifier(Modifier::REVERSED))
}

fn help(frame: &mut Frame, area: Rect) {
    let width = 92.min(area.width);
    let height = (HELP.len() as u16 + 2).min(area.height);
    let popup = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    let lines: Vec<Line> = HELP
        .iter()
        .map(|(key, what)| {
            Line::from(vec![
                Span::styled(
                    format!("{key:>10}  "),
                    Style::new().add_modifier(Modifier::BOLD),
                ),
                Span::raw(*what),
            ])
        })
        .collect();
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" napilab top: keys ")),
        popup,
    );
}

#[cfg(test)]
mod tests {
    use super::super::model::{CpuRow, FindingRow};
    use super::*;
    use napilab_core::trace::ExecContext;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn rows() -> Rows {
        Rows {
            napi: vec![
                NapiRow {
                    napi_id: 8193,
                    device: "eth0".into(),
                    queues: "0".into(),
                    irq: Some(40),
                    cpus: "0".into(),
                    polled_by: "after-irq ksoftirqd".into(),
                    polls_per_s: Some(1200.0),
                    packets_per_poll: Some(12.5),
                    by_context: vec![
                        (ExecContext::Hardirq, 1000.0, 4.0),
                        (ExecContext::Ksoftirqd, 200.0, 55.0),
                    ],
                    rx_pps: Some(15000.0),
                    in_map: true,
                },
                NapiRow {
                    napi_id: 9001,
                    device: "vb".into(),
                    queues: String::new(),
                    irq: None,
                    cpus: "1".into(),
                    polled_by: "bh-enable".into(),
                    polls_per_s: Some(5.0),
                    packets_per_poll: Some(1.0),
                    by_context: vec![(ExecContext::BhEnable, 5.0, 1.0)],
                    rx_pps: None,
                    in_map: false,
                },
            ],
            cpus: vec![CpuRow {
                cpu: 0,
                softirq_measured: Some(0.25),
                softirq_ticks: Some(0.02),
                dropped: Some(7.0),
                ..Default::default()
            }],
            findings: vec![FindingRow {
                warning: true,
                rule: "tick_sampled_accounting",
                subject: "cpu0".into(),
                title: "softirq time hidden from /proc/stat".into(),
                evidence: "measured=25% (trace), ticks=2% (tick)".into(),
                since_s: 3.0,
            }],
            traced: true,
            at_s: 5.0,
            interval_s: 1.0,
        }
    }

    fn screen(width: u16, height: u16, ui: &UiState) -> String {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("test terminal");
        let status = Status {
            source: "live",
            host: "testhost",
            tier: "trace",
            message: "end of recording",
        };
        terminal
            .draw(|f| draw(f, &rows(), ui, &status))
            .expect("draw");
        let buffer = terminal.backend().buffer();
        let mut text = String::new();
        for y in 0..buffer.area.height {
            for x in 0..buffer.area.width {
                text.push_str(buffer[(x, y)].symbol());
            }
            text.push('\n');
        }
        text
    }

    #[test]
    fn draws_the_map_the_cpus_and_the_findings_with_evidence() {
        let text = screen(140, 30, &UiState::default());
        for expected in [
            "napilab top",
            "testhost",
            "8193",
            "eth0",
            "after-irq ksoftirqd",
            "1.2k",
            "12.5",
            "after-irq 1.0k/s x4.0",
            "vb*",
            "cpu0",
            "25.0%",
            "2.0%",
            "WARN",
            "softirq time hidden",
            "evidence: measured=25% (trace)",
            "since t=3.0s",
            "q quit",
            "end of recording",
        ] {
            assert!(
                text.contains(expected),
                "{expected:?} missing from:\n{text}"
            );
        }
    }

    #[test]
    fn filter_pause_and_help_show() {
        let ui = UiState {
            filter: "eth".into(),
            paused: true,
            ..Default::default()
        };
        let text = screen(140, 30, &ui);
        assert!(
            text.contains("PAUSED") && text.contains("filter \"eth\""),
            "{text}"
        );
        assert!(!text.contains("vb*"), "filtered out:\n{text}");
        let text = screen(
            140,
            30,
            &UiState {
                help: true,
                ..Default::default()
            },
        );
        assert!(
            text.contains("napilab top: keys") && text.contains("reverse the sort"),
            "{text}"
        );
    }

    #[test]
    fn a_small_terminal_gets_one_line() {
        let text = screen(60, 10, &UiState::default());
        assert!(
            text.starts_with("napilab top: terminal too small (60x10); needs 80x20"),
            "{text}"
        );
        assert!(!text.contains("8193"));
    }
}
