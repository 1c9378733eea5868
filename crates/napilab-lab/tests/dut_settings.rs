//! The DUT settings a scenario asks for land on the DUT's devices (root, namespaces).
//! Without root the test prints why it was skipped.

use napilab_core::scenario;
use napilab_lab::netns::{new_run_id, sh_in};
use napilab_lab::topology::Lab;

const SCENARIO: &str = r#"
name = "deferral"
[dut]
napi = "threaded"
napi_cpus = [0]
defer_hard_irqs = 3
gro_flush_timeout_ns = 50000
[traffic]
loads_pps = [1000]
[[traffic.classes]]
name = "be"
share = 1.0
size = 64
port = 9000
"#;

#[test]
fn interrupt_deferral_is_applied_to_the_dut_ingress() {
    if !napilab_probe::kernel::is_root() {
        println!("SKIPPED interrupt_deferral_is_applied_to_the_dut_ingress: needs root for network namespaces");
        return;
    }
    let s = scenario::parse(SCENARIO, "deferral.toml", Some(1)).expect("scenario");
    let config = &s.configurations()[0];
    let mut lab = Lab::build(&new_run_id(), &s.topology, &config.settings).expect("lab");
    let read = |file: &str| {
        sh_in(
            &lab.dut_ns,
            &format!("cat /sys/class/net/{}/{file}", lab.dut_in),
        )
        .expect("read sysfs")
        .trim()
        .to_string()
    };
    assert_eq!(read("napi_defer_hard_irqs"), "3");
    assert_eq!(read("gro_flush_timeout"), "50000");
    assert!(lab
        .applied
        .iter()
        .any(|(what, how)| what.ends_with("napi_defer_hard_irqs") && how == "3"));
    lab.teardown().expect("teardown");
}
