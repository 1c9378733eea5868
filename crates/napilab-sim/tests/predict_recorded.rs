//! The live-host prediction from a recorded lab point: the router lab's one-cpu/softirq
//! configuration at half its probed capacity under the line-rate back end (XDP live
//! frames, which hand veth a batch per send), traced (fixture
//! `lab-line-rate-softirq-observation.json`, lab run 20261128-035622-6b01 on the
//! project's AMD EPYC VM). veth polls once per send in softirq mode, so the polls carry
//! about 31 packets each; the twin's arrivals must come in those batches, or its current
//! settings poll once per packet and the fit puts the poll's fixed cost into every
//! packet's (docs/tune.md, "Predicting from a recording").

use napilab_core::Observation;
use napilab_sim::config::NapiContext;
use napilab_sim::predict::predict;
use napilab_tune::profile::{self, Params};

fn recorded() -> Observation {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/lab-line-rate-softirq-observation.json");
    let text = std::fs::read_to_string(&path).expect("fixture");
    serde_json::from_str(&text).expect("an Observation")
}

#[test]
fn the_twin_polls_the_senders_batches_as_the_recording_did() {
    let obs = recorded();
    let (threaded, _) = profile::load("threaded").expect("shipped");
    let given = Params::from_args(&["n6b01-in".into()], Some("1"), &[]).expect("params");
    let p = predict(&obs, &threaded, &given).expect("predicted");
    let measured = &p.measured.total;
    assert!(
        measured.packets_per_poll > 20.0,
        "the recording's softirq polls take the generator's batches: {:.1} packets a poll",
        measured.packets_per_poll
    );
    let current = p.current.cpus.iter().find(|c| c.cpu == 0).expect("cpu 0");
    let ratio = current.polls_per_s.mean / measured.polls_per_s;
    assert!(
        (0.8..1.25).contains(&ratio),
        "the twin's current polls/s {:.0} against the measured {:.0}: the arrivals must come in the measured batches",
        current.polls_per_s.mean,
        measured.polls_per_s
    );
    assert!(
        p.assumed.iter().any(|a| a.contains("batches of")),
        "the batch is an assumption said in words: {:?}",
        p.assumed
    );
    // The profile moves the batches to a kthread on CPU 1; the packet path's cost per
    // packet moves with them rather than shrinking by the poll's fixed cost.
    let after = &p.predicted;
    assert_eq!(after.settings[0].context, NapiContext::Threaded);
    assert_eq!(after.settings[0].cpu, 1);
    let change = after.cpu_ns_per_packet.mean / p.current.cpu_ns_per_packet.mean;
    assert!(
        (0.8..1.25).contains(&change),
        "CPU per packet {:.0} -> {:.0} ns: a batch of 31 costs about the same per packet in either context",
        p.current.cpu_ns_per_packet.mean,
        after.cpu_ns_per_packet.mean
    );
    let headroom = after.headroom_pps.as_ref().expect("headroom").pps.mean;
    assert!(
        headroom > p.measured.packets_per_s,
        "a kthread on an idle CPU carries more than the recorded load: {headroom:.0}"
    );
}
