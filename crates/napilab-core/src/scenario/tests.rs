use super::*;

const MINI: &str = r#"
name = "mini"
[traffic]
loads_pps = [1000]
[[traffic.classes]]
name = "be"
share = 1.0
size = 64
port = 9000
"#;

#[test]
fn default_scenario_parses_and_expands() {
    let s = parse(DEFAULT_SCENARIO, DEFAULT_SCENARIO_NAME, Some(2)).expect("default scenario");
    let c = s.configurations();
    assert!(c.len() >= 2, "{c:?}");
    assert!(c.iter().any(|c| c.settings.napi == NapiContext::Threaded));
    assert!(c.iter().any(|c| c.settings.napi == NapiContext::Softirq));
    assert!(s.measurement.search);
    // Capacity first: the sweep's loads and the search's range come from the probe.
    assert!(s.loads().is_empty() && !s.load_fractions().is_empty());
    assert_eq!(s.measurement.search_max_pps, None);
    // Latency from the paced sweep, the maximum from the line-rate engine.
    assert_eq!(s.traffic.backend, Backend::Paced);
    assert_eq!(s.measurement.search_backend, Some(Backend::LineRate));
}

#[test]
fn search_backend_is_optional_and_checked() {
    let s = parse(MINI, "mini.toml", None).expect("mini");
    assert_eq!(s.measurement.search_backend, None);
    let bad = format!("{MINI}\n[measurement]\nsearch_backend = \"dpdk\"\n");
    let e = parse(&bad, "x.toml", None).expect_err("dpdk");
    assert_eq!(e.0[0].field, "measurement.search_backend");
    assert!(
        e.0[0].message.contains("paced") && e.0[0].message.contains("line-rate"),
        "{e}"
    );
}

#[test]
fn the_many_napi_scenario_parses_and_its_bad_fields_are_named() {
    let text = include_str!("../../../../scenarios/many-napi.toml");
    let s = parse(text, "scenarios/many-napi.toml", Some(2)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.topology.kind, TopologyKind::ManyNapi);
    let configs = s.configurations();
    assert_eq!(configs.len(), 12);
    let instances: std::collections::BTreeSet<u32> =
        configs.iter().map(|c| c.settings.napi_instances).collect();
    assert_eq!(
        instances.into_iter().collect::<Vec<_>>(),
        [1, 10, 100, 1000]
    );
    assert!(configs
        .iter()
        .any(|c| c.settings.napi == NapiContext::Threaded && c.settings.napi_cpus == [1]));
    let many = MINI.replace("[traffic]", "[topology]\nkind = \"many-napi\"\n[traffic]");
    let first_error = |text: &str| {
        let e = parse(text, "m.toml", Some(2)).expect_err(text);
        (e.0[0].field.clone(), e.0[0].message.clone())
    };
    // Beyond the kernel's queue limit.
    let (field, message) = first_error(&format!("{many}[dut]\nnapi_instances = 5000\n"));
    assert_eq!(field, "dut.napi_instances");
    assert!(message.contains("4096"), "{message}");
    assert_eq!(
        first_error(&format!("{many}[dut]\nnapi_instances = 0\n")).0,
        "dut.napi_instances"
    );
    // The line-rate engine cannot spread flows over the queues.
    assert_eq!(
        first_error(&many.replace("[traffic]", "[traffic]\nbackend = \"line-rate\"")).0,
        "traffic.backend"
    );
    // No NAPI instances without GRO on veth.
    let (field, message) = first_error(&format!("{many}[dut]\ngro = false\n"));
    assert_eq!(field, "dut");
    assert!(message.contains("gro = true"), "{message}");
    // napi_instances belongs to many-napi only.
    let (field, message) = first_error(&format!(
        "{MINI}[[configurations]]\nname = \"a\"\nset = {{ napi_instances = 8 }}\n"
    ));
    assert_eq!(field, "configurations[0]");
    assert!(message.contains("many-napi"), "{message}");
    let ok = parse(
        &format!("{many}[dut]\nnapi_instances = 4096\n"),
        "m.toml",
        Some(2),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ok.configurations()[0].settings.napi_instances, 4096);
}

const SERVER: &str =
    "name = \"s\"\n[topology]\nkind = \"server\"\n[requests]\nloads_qps = [1000]\n";

#[test]
fn a_server_scenario_names_its_bad_fields() {
    let ok = parse(
        &format!("{SERVER}[[configurations]]\nname = \"a\"\nset = {{ mode = \"irq-suspend\", server = \"memcached\" }}\n"),
        "s.toml",
        Some(2),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let c = &ok.configurations()[0];
    assert_eq!(c.settings.mode, ServerMode::IrqSuspend);
    assert_eq!(c.settings.server, ServerEngine::Memcached);
    let field_of = |text: &str| {
        parse(text, "s.toml", Some(2)).expect_err(text).0[0]
            .field
            .clone()
    };
    assert_eq!(
        field_of(&format!(
            "{SERVER}[[configurations]]\nname = \"a\"\nset = {{ mode = \"coalescing\" }}\n"
        )),
        "configurations[0].set.mode"
    );
    assert_eq!(
        field_of(&SERVER.replace("[1000]", "[1000]\nslo_p99_us = \"500us\"")),
        "requests.slo_p99_us"
    );
    assert_eq!(
        field_of("name = \"s\"\n[topology]\nkind = \"server\"\n"),
        "requests"
    );
    assert_eq!(
        field_of(&format!("{SERVER}[dut]\nserver_cpus = [7]\n")),
        "dut.server_cpus"
    );
    // Server settings in a packet scenario are refused, not ignored.
    let router = "name = \"r\"\n[dut]\nmode = \"busy-wait\"\n[traffic]\nloads_pps = [1000]\n[[traffic.classes]]\nname = \"be\"\nshare = 1.0\nsize = 64\nport = 9000\n";
    assert_eq!(field_of(router), "dut.mode");
}

#[test]
fn example_scenarios_parse() {
    for (name, text) in [
        ("ap.toml", include_str!("../../../../scenarios/ap.toml")),
        (
            "ingress-qos.toml",
            include_str!("../../../../scenarios/ingress-qos.toml"),
        ),
        (
            "bench-paced.toml",
            include_str!("../../../../scenarios/bench-paced.toml"),
        ),
        (
            "bench-repeat.toml",
            include_str!("../../../../scenarios/bench-repeat.toml"),
        ),
        (
            "server-modes.toml",
            include_str!("../../../../scenarios/server-modes.toml"),
        ),
        (
            "bench-server-modes.toml",
            include_str!("../../../../scenarios/bench-server-modes.toml"),
        ),
    ] {
        if let Err(e) = parse(text, name, Some(2)) {
            panic!("{e}");
        }
    }
}

#[test]
fn minimal_scenario_has_a_baseline() {
    let s = parse(MINI, "mini.toml", None).expect("mini");
    let c = s.configurations();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].name, "baseline");
    assert_eq!(c[0].settings.napi, NapiContext::Softirq);
    assert!(c[0].settings.gro);
    assert_eq!(s.measurement.loss_threshold, 0.001);
}

#[test]
fn trace_tier_defaults_off_and_parses_each_tier() {
    let s = parse(MINI, "mini.toml", None).expect("mini");
    assert_eq!(s.measurement.trace, TraceTier::Off);
    assert!(s.measurement.trace.observe_flags().is_empty());
    let with = |tier: &str| format!("{MINI}\n[measurement]\ntrace = \"{tier}\"\n");
    let stages = parse(&with("stages"), "t.toml", None).expect("stages");
    assert_eq!(
        stages.measurement.trace.observe_flags(),
        ["--trace", "--stages"]
    );
    let e = parse(&with("everything"), "t.toml", None).expect_err("unknown tier");
    assert_eq!(e.0[0].field, "measurement.trace", "{e}");
    assert!(e.to_string().contains("packets"), "{e}");
}

#[test]
fn errors_name_file_line_and_field() {
    let bad = MINI.replace("size = 64", "size = 20");
    let e = parse(&bad, "bad.toml", None).expect_err("size 20");
    let e0 = &e.0[0];
    assert_eq!(e0.field, "traffic.classes[0].size");
    assert_eq!(e0.line, Some(8));
    assert!(e0.message.contains("64 to 1500"), "{e0}");
    assert!(
        e.to_string()
            .starts_with("bad.toml:8: traffic.classes[0].size:"),
        "{e}"
    );
}

#[test]
fn unknown_field_is_located() {
    let bad = MINI.replace("port = 9000", "port = 9000\ncolour = \"red\"");
    let e = parse(&bad, "bad.toml", None).expect_err("unknown field");
    let e0 = &e.0[0];
    assert_eq!(e0.line, Some(10), "{e0}");
    assert_eq!(e0.field, "traffic.classes[0].colour");
    assert!(e0.field.starts_with("traffic.classes"), "{e0}");
    assert!(e0.message.contains("colour"), "{e0}");
}

#[test]
fn bad_enum_value_says_what_is_allowed() {
    let bad = MINI.replace("port = 9000", "port = 9000\npattern = \"bursty\"");
    let e = parse(&bad, "bad.toml", None).expect_err("bad pattern");
    assert!(
        e.0[0].message.contains("cbr") && e.0[0].message.contains("poisson"),
        "{e}"
    );
    assert_eq!(e.0[0].line, Some(10));
    assert_eq!(e.0[0].field, "traffic.classes[0].pattern");
}

#[test]
fn cpus_are_checked_against_the_host() {
    let bad = format!("{MINI}\n[dut]\nnapi_cpus = [5]\n");
    let e = parse(&bad, "x.toml", Some(2)).expect_err("cpu 5");
    assert_eq!(e.0[0].field, "dut.napi_cpus");
    assert_eq!(e.0[0].line, Some(12));
    assert!(parse(&bad, "x.toml", Some(8)).is_ok());
}

#[test]
fn interrupt_deferral_needs_its_timer() {
    let with = |set: &str| format!("{MINI}\n[[configurations]]\nname = \"d\"\nset = {{ {set} }}\n");
    let e = parse(&with("defer_hard_irqs = 2"), "d.toml", None).expect_err("no timer");
    assert!(e.to_string().contains("gro_flush_timeout_ns"), "{e}");
    let ok = parse(
        &with("defer_hard_irqs = 2, gro_flush_timeout_ns = 20000"),
        "d.toml",
        None,
    )
    .expect("deferral with its timer");
    let r = &ok.configurations()[0].settings;
    assert_eq!((r.defer_hard_irqs, r.gro_flush_timeout_ns), (2, 20_000));
    let e = parse(&with("gro_flush_timeout_ns = 5000000000"), "d.toml", None).expect_err("5 s");
    assert_eq!(
        e.0[0].field, "configurations[0].set.gro_flush_timeout_ns",
        "{e}"
    );
}

#[test]
fn threaded_without_gro_is_refused() {
    let bad = format!(
        "{MINI}\n[[configurations]]\nname = \"t\"\nset = {{ napi = \"threaded\", gro = false }}\n"
    );
    let e = parse(&bad, "x.toml", None).expect_err("threaded without gro");
    assert_eq!(e.0[0].field, "configurations[0]");
    assert_eq!(e.0[0].line, Some(11));
    assert!(e.0[0].message.contains("gro = true"));
}

#[test]
fn queues_need_a_generator_cpu_each() {
    let text = MINI.replace("port = 9000", "port = 9000\nqueue = 1")
        + "\n[topology]\ningress_queues = 2\n";
    let e = parse(&text, "x.toml", None).expect_err("one generator cpu for two queues");
    assert!(e.0[0].message.contains("2 generator_cpus"), "{e}");
    let ok = text.clone() + "\n[dut]\ngenerator_cpus = [0, 1]\n";
    parse(&ok, "x.toml", None).expect("two cpus");
    let bad = MINI.replace("port = 9000", "port = 9000\nqueue = 3");
    let e = parse(&bad, "x.toml", None).expect_err("queue 3 of 1");
    assert_eq!(e.0[0].field, "traffic.classes[0].queue");
}

#[test]
fn shares_must_add_up() {
    let bad = MINI.replace("share = 1.0", "share = 0.5");
    let e = parse(&bad, "x.toml", None).expect_err("shares");
    assert_eq!(e.0[0].field, "traffic.classes");
}

#[test]
fn axes_make_a_product_and_overlay_the_baseline() {
    let text = format!(
        "{MINI}\n[dut]\nsink_cpus = [1]\n\n[[axes]]\nname = \"placement\"\nvalues = [{{ name = \"a\", set = {{ napi_cpus = [0] }} }}, {{ name = \"b\", set = {{ napi_cpus = [1] }} }}]\n\n[[axes]]\nname = \"napi\"\nvalues = [{{ name = \"softirq\", set = {{ napi = \"softirq\" }} }}, {{ name = \"threaded\", set = {{ napi = \"threaded\" }} }}]\n"
    );
    let s = parse(&text, "x.toml", Some(2)).expect("axes");
    let c = s.configurations();
    let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["a/softirq", "a/threaded", "b/softirq", "b/threaded"]
    );
    assert_eq!(c[3].settings.napi_cpus, [1]);
    assert_eq!(c[3].settings.napi, NapiContext::Threaded);
    assert_eq!(c[3].settings.sink_cpus, [1]);
    assert!(c[3].overrides.contains(&("napi".into(), "threaded".into())));
}

#[test]
fn sweep_is_linear_or_geometric() {
    let text = MINI.replace(
        "loads_pps = [1000]",
        "sweep = { from_pps = 1000, to_pps = 100000, steps = 3, log = true }",
    );
    let s = parse(&text, "x.toml", None).expect("sweep");
    assert_eq!(s.loads(), [1000.0, 10000.0, 100000.0]);
    let text = MINI.replace(
        "loads_pps = [1000]",
        "sweep = { from_pps = 1000, to_pps = 3000, steps = 3 }",
    );
    let s = parse(&text, "x.toml", None).expect("sweep");
    assert_eq!(s.loads(), [1000.0, 2000.0, 3000.0]);
}

#[test]
fn a_sweep_of_fractions_of_the_capacity_and_its_checks() {
    let text = MINI.replace(
        "loads_pps = [1000]",
        "loads_pps = [1000]\nsweep = { fractions = [0.25, 0.5] }",
    );
    let s = parse(&text, "x.toml", None).expect("fractions");
    assert_eq!(s.loads(), [1000.0]);
    assert_eq!(s.load_fractions(), [0.25, 0.5]);
    for (sweep, field) in [
        ("{ fractions = [0.5, 3.0] }", "traffic.sweep.fractions[1]"),
        ("{ fractions = [0.5], from_pps = 10 }", "traffic.sweep"),
        ("{ from_pps = 10, to_pps = 20 }", "traffic.sweep"),
        ("{ fractions = [0.5], log = true }", "traffic.sweep.log"),
    ] {
        let text = MINI.replace("loads_pps = [1000]", &format!("sweep = {sweep}"));
        let e = parse(&text, "x.toml", None).expect_err(sweep);
        assert_eq!(e.0[0].field, field, "{sweep}: {e}");
    }
}

#[test]
fn search_max_pps_is_an_optional_cap() {
    let s = parse(MINI, "x.toml", None).expect("mini");
    assert_eq!(s.measurement.search_max_pps, None);
    // Files that set it keep loading; it is then a cap.
    let text = format!("{MINI}\n[measurement]\nsearch = true\nsearch_max_pps = 3000000\n");
    let s = parse(&text, "x.toml", None).expect("a cap");
    assert_eq!(s.measurement.search_max_pps, Some(3e6));
    let text = format!("{MINI}\n[measurement]\nsearch_max_pps = 1\n");
    let e = parse(&text, "x.toml", None).expect_err("too low");
    assert_eq!(e.0[0].field, "measurement.search_max_pps");
}

#[test]
fn qdisc_arguments() {
    let q = Qdisc {
        kind: QdiscKind::Tbf,
        limit: None,
        rate_mbit: Some(10.0),
        burst_bytes: Some(3000),
        latency_ms: Some(5.0),
    };
    assert_eq!(
        q.tc_args().join(" "),
        "tbf rate 10000kbit burst 3000 latency 5000us"
    );
    let bad = format!("{MINI}\n[dut]\nqdisc = {{ kind = \"tbf\" }}\n");
    let e = parse(&bad, "x.toml", None).expect_err("tbf without rate");
    assert_eq!(e.0[0].field, "dut.qdisc.kind");
}
