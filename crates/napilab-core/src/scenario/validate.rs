//! Parsing and validation: every error names the file, the line and the field, and
//! says what is allowed.

use super::*;

/// A validation error: where (file, line) and which field, and what is allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioError {
    pub file: String,
    pub line: Option<usize>,
    pub field: String,
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}: {}", self.file, l, self.field, self.message),
            None => write!(f, "{}: {}: {}", self.file, self.field, self.message),
        }
    }
}

/// All errors of one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioErrors(pub Vec<ScenarioError>);

impl fmt::Display for ScenarioErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ScenarioErrors {}

/// Parses and validates a scenario. `file` names it in errors. `host_cpus`, when
/// given, is the number of CPUs: CPU numbers are checked against it.
pub fn parse(text: &str, file: &str, host_cpus: Option<u32>) -> Result<Scenario, ScenarioErrors> {
    let locator = Locator::new(text);
    let scenario: Scenario = match toml::from_str(text) {
        Ok(s) => s,
        Err(e) => {
            let (line, field) = match e.span() {
                Some(span) => (
                    Some(line_of(text, span.start)),
                    locator
                        .path_at(span.start)
                        .unwrap_or_else(|| "(file)".into()),
                ),
                None => (None, "(file)".into()),
            };
            return Err(ScenarioErrors(vec![ScenarioError {
                file: file.to_string(),
                line,
                field,
                message: e.message().trim_end().to_string(),
            }]));
        }
    };
    let mut v = Validator {
        file,
        text,
        locator: &locator,
        errors: Vec::new(),
    };
    validate(&scenario, &mut v, host_cpus);
    if v.errors.is_empty() {
        Ok(scenario)
    } else {
        Err(ScenarioErrors(v.errors))
    }
}

pub(super) struct Validator<'a> {
    file: &'a str,
    text: &'a str,
    locator: &'a Locator<'a>,
    errors: Vec<ScenarioError>,
}

impl Validator<'_> {
    pub(super) fn err(&mut self, field: &str, message: impl Into<String>) {
        let line = self
            .locator
            .span_of(field)
            .map(|s| line_of(self.text, s.start));
        self.errors.push(ScenarioError {
            file: self.file.to_string(),
            line,
            field: field.to_string(),
            message: message.into(),
        });
    }
}

pub(super) fn check_search(m: &Measurement, v: &mut Validator<'_>) {
    if m.search_repeats == 0 || m.search_repeats > 20 {
        v.err(
            "measurement.search_repeats",
            format!("{} is out of range: use 1 to 20", m.search_repeats),
        );
    }
    if m.disturbed_retries > 10 {
        v.err("measurement.disturbed_retries", "use 0 to 10");
    }
    if !(m.search_time_limit_s >= 1.0 && m.search_time_limit_s <= 86_400.0) {
        v.err(
            "measurement.search_time_limit_s",
            "use 1 to 86400 s (the most trial time one search may spend)",
        );
    }
    if !(m.confidence_level >= 0.5 && m.confidence_level < 1.0) {
        v.err(
            "measurement.confidence_level",
            format!("{} is out of range: use e.g. 0.95", m.confidence_level),
        );
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, g) in m.search_goals.iter().enumerate() {
        let f = format!("measurement.search_goals[{i}]");
        if g.name.trim().is_empty() || !names.insert(g.name.clone()) {
            v.err(
                &format!("{f}.name"),
                "give each goal a unique, non-empty name",
            );
        }
        if !(g.loss_ratio >= 0.0 && g.loss_ratio < 1.0) {
            v.err(
                &format!("{f}.loss_ratio"),
                "use a ratio in [0, 1), e.g. 0.005",
            );
        }
        if !(g.exceed_ratio >= 0.0 && g.exceed_ratio < 1.0) {
            v.err(
                &format!("{f}.exceed_ratio"),
                "use a ratio in [0, 1), e.g. 0.5 (0 makes every high-loss trial decide)",
            );
        }
        let fin = g.final_trial_s.unwrap_or(m.duration_s);
        if let Some(d) = g.final_trial_s {
            if !(0.2..=3600.0).contains(&d) {
                v.err(&format!("{f}.final_trial_s"), "use 0.2 to 3600 s");
            }
        }
        if let Some(d) = g.initial_trial_s {
            if !(d >= 0.2 && d <= fin) {
                v.err(
                    &format!("{f}.initial_trial_s"),
                    format!("use 0.2 s up to the final trial duration ({fin} s)"),
                );
            }
        }
        if let Some(d) = g.duration_sum_s {
            if !(d >= fin && d <= 86_400.0) {
                v.err(
                    &format!("{f}.duration_sum_s"),
                    format!("use at least the final trial duration ({fin} s)"),
                );
            }
        }
        if let Some(w) = g.width {
            if !(w > 0.0 && w < 1.0) {
                v.err(&format!("{f}.width"), "use a fraction in (0, 1), e.g. 0.05");
            }
        }
    }
}

pub(super) fn validate(s: &Scenario, v: &mut Validator<'_>, host_cpus: Option<u32>) {
    if s.name.trim().is_empty() {
        v.err("name", "must not be empty");
    }
    check_patch(&s.dut, "dut", v, host_cpus);
    check_workload_kind(s, v);
    let packets = matches!(
        s.topology.kind,
        TopologyKind::Router | TopologyKind::Ap | TopologyKind::ManyNapi
    );
    check_classes(s, packets, v);
    check_loads(s, packets, v);
    check_measurement(&s.measurement, v);
    check_search(&s.measurement, v);
    check_twin(s, v, host_cpus);
    check_configurations(s, v, host_cpus);
}

/// The traffic classes (the packet topologies): names, shares, sizes, ports, queues.
fn check_classes(s: &Scenario, packets: bool, v: &mut Validator<'_>) {
    let t = &s.traffic;
    if packets && t.classes.is_empty() {
        v.err("traffic.classes", "add at least one [[traffic.classes]]");
    }
    let mut share = 0.0;
    let mut names = std::collections::BTreeSet::new();
    let mut ports = std::collections::BTreeSet::new();
    for (i, c) in t.classes.iter().enumerate() {
        let f = |x: &str| format!("traffic.classes[{i}].{x}");
        if c.name.is_empty()
            || !c
                .name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_')
        {
            v.err(&f("name"), "use letters, digits, '-' and '_'");
        }
        if !names.insert(c.name.clone()) {
            v.err(&f("name"), format!("class {:?} is defined twice", c.name));
        }
        if !(c.share > 0.0 && c.share <= 1.0) {
            v.err(
                &f("share"),
                format!("{} is out of range: use a fraction in (0, 1]", c.share),
            );
        }
        share += c.share;
        if !(MIN_PACKET..=MAX_PACKET).contains(&c.size) {
            v.err(
                &f("size"),
                format!(
                    "{} is out of range: use {MIN_PACKET} to {MAX_PACKET} (IP packet bytes)",
                    c.size
                ),
            );
        }
        if c.port < 1024 {
            v.err(
                &f("port"),
                format!("{} is a privileged port: use 1024 to 65535", c.port),
            );
        }
        if !ports.insert(c.port) {
            v.err(
                &f("port"),
                format!(
                    "port {} is used by two classes: give each class its own port",
                    c.port
                ),
            );
        }
    }
    let nq = s.topology.ingress_queues;
    if nq == 0 || nq > 8 {
        v.err(
            "topology.ingress_queues",
            format!("{nq} is out of range: use 1 to 8"),
        );
    }
    check_many_napi(s, v);
    for (i, c) in t.classes.iter().enumerate() {
        if c.queue >= nq.max(1) {
            v.err(
                &format!("traffic.classes[{i}].queue"),
                format!(
                    "queue {} does not exist: topology.ingress_queues = {nq} gives queues 0 to {}",
                    c.queue,
                    nq.max(1) - 1
                ),
            );
        }
    }
    if !t.classes.is_empty() && (share - 1.0).abs() > 1e-6 {
        v.err(
            "traffic.classes",
            format!("the shares add up to {share}: they must add up to 1"),
        );
    }
}

/// The packet loads: fixed loads, the sweep (packets/s or fractions of the probed
/// capacity), and that there is something to measure.
fn check_loads(s: &Scenario, packets: bool, v: &mut Validator<'_>) {
    let t = &s.traffic;
    for (i, l) in t.loads_pps.iter().enumerate() {
        if !(*l >= 1.0 && *l <= 100e6) {
            v.err(
                &format!("traffic.loads_pps[{i}]"),
                format!("{l} is out of range: use 1 to 100000000 packets/s"),
            );
        }
    }
    if let Some(sw) = &t.sweep {
        let range = [
            sw.from_pps.is_some(),
            sw.to_pps.is_some(),
            sw.steps.is_some(),
        ];
        match (sw.fractions.is_empty(), range) {
            (true, [true, true, true]) => {
                let (from, to) = (sw.from_pps.unwrap_or(0.0), sw.to_pps.unwrap_or(0.0));
                if !(from >= 1.0 && to >= from && to <= 100e6) {
                    v.err("traffic.sweep", "use 1 <= from_pps <= to_pps <= 100000000");
                }
                let steps = sw.steps.unwrap_or(0);
                if steps == 0 || steps > 100 {
                    v.err(
                        "traffic.sweep.steps",
                        format!("{steps} is out of range: use 1 to 100"),
                    );
                }
            }
            (false, [false, false, false]) => {
                if sw.fractions.len() > 100 {
                    v.err("traffic.sweep.fractions", "give at most 100 fractions");
                }
                for (i, f) in sw.fractions.iter().enumerate() {
                    if !(*f > 0.0 && *f <= 2.0) {
                        v.err(
                            &format!("traffic.sweep.fractions[{i}]"),
                            format!("{f} is out of range: give a fraction of the probed capacity in (0, 2], e.g. 0.5"),
                        );
                    }
                }
                if sw.log {
                    v.err(
                        "traffic.sweep.log",
                        "applies to from_pps/to_pps/steps, not to fractions: leave it out",
                    );
                }
            }
            (true, _) => v.err(
                "traffic.sweep",
                "give from_pps, to_pps and steps (packets/s), or fractions = [..] of the probed capacity",
            ),
            (false, _) => v.err(
                "traffic.sweep",
                "give either fractions (of the probed capacity) or from_pps/to_pps/steps, not both",
            ),
        }
    }
    if packets && t.loads_pps.is_empty() && t.sweep.is_none() && !s.measurement.search {
        v.err(
            "traffic",
            "nothing to measure: give loads_pps, a [traffic.sweep], or measurement.search = true",
        );
    }
}

/// The measurement's windows, repeats, loss threshold and search bounds.
fn check_measurement(m: &Measurement, v: &mut Validator<'_>) {
    // The lab's minimum window is checked with the lab's host (`check_twin`).
    if !(m.duration_s >= 0.001 && m.duration_s <= 3600.0) {
        v.err(
            "measurement.duration_s",
            format!(
                "{} is out of range: use 0.2 to 3600 s (the twin: from 0.001 s)",
                m.duration_s
            ),
        );
    }
    if !(m.warmup_s >= 0.0 && m.warmup_s <= 600.0) {
        v.err(
            "measurement.warmup_s",
            format!("{} is out of range: use 0 to 600 s", m.warmup_s),
        );
    }
    if m.repeats == 0 || m.repeats > 100 {
        v.err(
            "measurement.repeats",
            format!("{} is out of range: use 1 to 100", m.repeats),
        );
    }
    if !(m.loss_threshold >= 0.0 && m.loss_threshold < 1.0) {
        v.err(
            "measurement.loss_threshold",
            format!(
                "{} is out of range: use a ratio in [0, 1)",
                m.loss_threshold
            ),
        );
    }
    if let Some(cap) = m.search_max_pps {
        if !(10.0..=100e6).contains(&cap) {
            v.err(
                "measurement.search_max_pps",
                format!("{cap} is out of range: use 10 to 100000000 packets/s, or leave it out so that the range comes from the capacity probe"),
            );
        }
    }
    if m.search_iterations == 0 || m.search_iterations > 30 {
        v.err(
            "measurement.search_iterations",
            format!("{} is out of range: use 1 to 30", m.search_iterations),
        );
    }
    if !(m.search_resolution > 0.0 && m.search_resolution < 1.0) {
        v.err(
            "measurement.search_resolution",
            "use a fraction in (0, 1), e.g. 0.03",
        );
    }
    if m.drain_ms > 10_000 {
        v.err("measurement.drain_ms", "use at most 10000 ms");
    }
}

/// The configurations and axes, then each resolved configuration's combination of
/// settings (e.g. threaded NAPI without GRO).
fn check_configurations(s: &Scenario, v: &mut Validator<'_>, host_cpus: Option<u32>) {
    let mut config_names = std::collections::BTreeSet::new();
    for (i, c) in s.configurations.iter().enumerate() {
        let f = format!("configurations[{i}]");
        if c.name.trim().is_empty() {
            v.err(&format!("{f}.name"), "must not be empty");
        }
        if !config_names.insert(c.name.clone()) {
            v.err(
                &format!("{f}.name"),
                format!("configuration {:?} is defined twice", c.name),
            );
        }
        check_patch(&c.set, &format!("{f}.set"), v, host_cpus);
    }
    for (i, a) in s.axes.iter().enumerate() {
        if a.values.is_empty() {
            v.err(
                &format!("axes[{i}].values"),
                "an axis needs at least one value",
            );
        }
        for (j, c) in a.values.iter().enumerate() {
            if c.name.trim().is_empty() || c.name.contains('/') {
                v.err(
                    &format!("axes[{i}].values[{j}].name"),
                    "must be non-empty without '/'",
                );
            }
            check_patch(&c.set, &format!("axes[{i}].values[{j}].set"), v, host_cpus);
        }
    }
    if v.errors.is_empty() {
        // Combinations: check each resolved configuration (e.g. threaded without GRO).
        let (configs, origin) = expand_with_origin(s);
        for (c, field) in configs.iter().zip(origin) {
            let r = &c.settings;
            if s.topology.kind != TopologyKind::ManyNapi && r.napi_instances != 1 {
                v.err(&field, format!("configuration {:?}: napi_instances = {} is the many-napi topology's setting: set topology.kind = \"many-napi\" or remove it", c.name, r.napi_instances));
            }
            if s.topology.kind == TopologyKind::ManyNapi && !r.gro {
                v.err(&field, format!("configuration {:?}: the many-napi topology needs gro = true (veth has NAPI instances only with GRO or XDP on)", c.name));
            } else if r.napi == NapiContext::Threaded && !r.gro {
                v.err(&field, format!("configuration {:?}: napi = \"threaded\" needs gro = true (veth has NAPI instances only with GRO on)", c.name));
            }
            if r.defer_hard_irqs > 0 && r.gro_flush_timeout_ns == 0 {
                v.err(&field, format!("configuration {:?}: defer_hard_irqs = {} has no effect without gro_flush_timeout_ns (the timer that polls while interrupts stay deferred): set both, e.g. gro_flush_timeout_ns = 20000", c.name, r.defer_hard_irqs));
            }
            if s.topology.ingress_queues > 1
                && (r.generator_cpus.len() as u32) < s.topology.ingress_queues
            {
                v.err(&field, format!("configuration {:?}: {} ingress queues need {} generator_cpus (one per queue: XPS steers each CPU's packets to its queue)", c.name, s.topology.ingress_queues, s.topology.ingress_queues));
            }
            if s.topology.kind == TopologyKind::Ap && r.qdisc.kind == QdiscKind::None {
                v.err(&field, format!("configuration {:?}: the ap topology's wired side needs a qdisc (qdisc.kind pfifo_fast, pfifo, htb or tbf); its wireless side has none", c.name));
            }
        }
        if configs.len() > 64 {
            v.err(
                "axes",
                format!("{} configurations: use at most 64", configs.len()),
            );
        }
    }
}

/// The many-napi topology's traffic: on the paced back end (which spreads flows over
/// the queues), with its queues from `dut.napi_instances` only.
pub(super) fn check_many_napi(s: &Scenario, v: &mut Validator<'_>) {
    if s.topology.kind != TopologyKind::ManyNapi {
        return;
    }
    if s.topology.ingress_queues != 1 {
        v.err(
            "topology.ingress_queues",
            "the many-napi topology sets its queues from dut.napi_instances: remove ingress_queues",
        );
    }
    if s.traffic.backend != Backend::Paced {
        v.err(
            "traffic.backend",
            "the many-napi topology needs the paced back end (its flows are what spreads the traffic over the NAPI instances): use backend = \"paced\"",
        );
    }
    if s.measurement
        .search_backend
        .is_some_and(|b| b != Backend::Paced)
    {
        v.err(
            "measurement.search_backend",
            "the many-napi topology searches with the paced back end only: remove search_backend",
        );
    }
}

/// A server scenario has `[requests]` and no packet classes; the packet topologies
/// have no `[requests]` and no server settings.
pub(super) fn check_workload_kind(s: &Scenario, v: &mut Validator<'_>) {
    let server = s.topology.kind == TopologyKind::Server;
    match (&s.requests, server) {
        (None, true) => v.err(
            "requests",
            "topology.kind = \"server\" needs a [requests] section (loads_qps, slo_p99_us, ...)",
        ),
        (Some(_), false) => v.err(
            "requests",
            "[requests] is the server topology's workload: set topology.kind = \"server\" or remove it",
        ),
        (Some(r), true) => {
            for (field, message) in r.problems() {
                v.err(&field, message);
            }
        }
        (None, false) => {}
    }
    let vpn = s.topology.kind == TopologyKind::Vpn;
    match (&s.tunnel, vpn) {
        (None, true) => v.err(
            "tunnel",
            "topology.kind = \"vpn\" needs a [tunnel] section (peers, loads_pps)",
        ),
        (Some(_), false) => v.err(
            "tunnel",
            "[tunnel] is the vpn topology's workload: set topology.kind = \"vpn\" or remove it",
        ),
        (Some(t), true) => {
            for (field, message) in t.problems() {
                v.err(&field, message);
            }
        }
        (None, false) => {}
    }
    if (server || vpn) && !s.traffic.classes.is_empty() {
        v.err(
            "traffic.classes",
            format!(
                "the {} topology's load is [{}]: remove the packet classes",
                s.topology.kind.as_str(),
                if server { "requests" } else { "tunnel" }
            ),
        );
    }
    if !server {
        let patches = std::iter::once(("dut".to_string(), &s.dut))
            .chain(
                s.configurations
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (format!("configurations[{i}].set"), &c.set)),
            )
            .chain(s.axes.iter().enumerate().flat_map(|(i, a)| {
                a.values
                    .iter()
                    .enumerate()
                    .map(move |(j, c)| (format!("axes[{i}].values[{j}].set"), &c.set))
            }));
        for (at, p) in patches {
            for (name, set) in [
                ("mode", p.mode.is_some()),
                ("server", p.server.is_some()),
                ("server_cpus", p.server_cpus.is_some() && !vpn),
            ] {
                if set {
                    v.err(
                        &format!("{at}.{name}"),
                        format!("{name} is a server-topology setting: set topology.kind = \"server\" or remove it"),
                    );
                }
            }
        }
    }
}

pub(super) fn check_patch(p: &DutPatch, at: &str, v: &mut Validator<'_>, host_cpus: Option<u32>) {
    let cpus = [
        ("napi_cpus", &p.napi_cpus),
        ("rps_cpus", &p.rps_cpus),
        ("generator_cpus", &p.generator_cpus),
        ("sink_cpus", &p.sink_cpus),
        ("server_cpus", &p.server_cpus),
    ];
    for (name, list) in cpus {
        let Some(list) = list else { continue };
        if matches!(name, "generator_cpus" | "sink_cpus" | "server_cpus") && list.is_empty() {
            v.err(&format!("{at}.{name}"), "give at least one CPU");
        }
        if let Some(n) = host_cpus {
            for c in list {
                if *c >= n {
                    v.err(
                        &format!("{at}.{name}"),
                        format!(
                            "CPU {c} does not exist: this host has CPUs 0 to {}",
                            n.saturating_sub(1)
                        ),
                    );
                }
            }
        }
        if host_cpus.is_none() && list.iter().any(|c| *c >= 1024) {
            v.err(&format!("{at}.{name}"), "CPU numbers must be below 1024");
        }
    }
    if let Some(n) = p.napi_instances {
        if n == 0 || n > MAX_VETH_QUEUES {
            v.err(
                &format!("{at}.napi_instances"),
                format!("{n} is out of range: use 1 to {MAX_VETH_QUEUES} (the kernel refuses more queues on one device)"),
            );
        }
    }
    if let Some(f) = &p.napi_fifo {
        if f.iter().any(|x| *x > 99) {
            v.err(
                &format!("{at}.napi_fifo"),
                "SCHED_FIFO priorities are 1 to 99 (0: SCHED_OTHER)",
            );
        }
    }
    if let Some(n) = p.defer_hard_irqs {
        if n > i32::MAX as u32 {
            v.err(
                &format!("{at}.defer_hard_irqs"),
                format!(
                    "{n} is out of range: use 0 to {} (the kernel's limit)",
                    i32::MAX
                ),
            );
        }
    }
    if let Some(ns) = p.gro_flush_timeout_ns {
        if ns > 1_000_000_000 {
            v.err(
                &format!("{at}.gro_flush_timeout_ns"),
                format!("{ns} is out of range: use 0 to 1000000000 ns (0: off)"),
            );
        }
    }
    if let Some(b) = p.netdev_budget {
        if b == 0 || b > 100_000 {
            v.err(
                &format!("{at}.netdev_budget"),
                format!("{b} is out of range: use 1 to 100000 (kernel default 300)"),
            );
        }
    }
    if let Some(b) = p.netdev_budget_usecs {
        if b == 0 || b > 1_000_000 {
            v.err(
                &format!("{at}.netdev_budget_usecs"),
                format!("{b} is out of range: use 1 to 1000000 (kernel default 2 jiffies)"),
            );
        }
    }
    if let Some(q) = &p.qdisc {
        let f = |x: &str| format!("{at}.qdisc.{x}");
        let needs_rate = matches!(q.kind, QdiscKind::Htb | QdiscKind::Tbf);
        match q.rate_mbit {
            Some(r) if !(0.01..=100_000.0).contains(&r) => v.err(
                &f("rate_mbit"),
                format!("{r} is out of range: use 0.01 to 100000 Mbit/s"),
            ),
            None if needs_rate => v.err(&f("kind"), "htb and tbf need rate_mbit"),
            Some(_) if !needs_rate => v.err(&f("rate_mbit"), "only htb and tbf take a rate"),
            _ => {}
        }
        if let Some(l) = q.limit {
            if !matches!(q.kind, QdiscKind::Pfifo | QdiscKind::Htb) {
                v.err(&f("limit"), "only pfifo and htb (its leaf pfifo) take a limit; tbf's limit comes from latency_ms");
            } else if l == 0 || l > 1_000_000 {
                v.err(
                    &f("limit"),
                    format!("{l} is out of range: use 1 to 1000000 packets"),
                );
            }
        }
        if q.latency_ms.is_some() && q.kind != QdiscKind::Tbf {
            v.err(&f("latency_ms"), "only tbf takes latency_ms");
        }
        if let Some(l) = q.latency_ms {
            if !(0.01..=10_000.0).contains(&l) {
                v.err(
                    &f("latency_ms"),
                    format!("{l} is out of range: use 0.01 to 10000 ms"),
                );
            }
        }
        if q.burst_bytes.is_some() && !needs_rate {
            v.err(&f("burst_bytes"), "only htb and tbf take burst_bytes");
        }
        if let Some(b) = q.burst_bytes {
            if !(1600..=100_000_000).contains(&b) {
                v.err(
                    &f("burst_bytes"),
                    format!("{b} is out of range: use 1600 (one MTU-sized frame) to 100000000"),
                );
            }
        }
    }
}
