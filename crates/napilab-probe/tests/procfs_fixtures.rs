//! The /proc parsers against fixture trees (tests/fixtures/proc/<scenario>/proc/...):
//! two recorded on a 2-CPU Linux 6.18 VM, the rest hand-made from layouts of other
//! kernels and machines. See tests/fixtures/proc/README.md.

use std::path::{Path, PathBuf};

use napilab_probe::procfs::{
    list_packet_threads, policy_name, read_interrupts, read_softirqs, read_softnet, read_stat,
    read_task_cpus_allowed, read_task_stat, CpuTimes, InterruptLine, Interrupts, KernelThread,
    ProcError, SoftnetRow,
};

fn tree(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/proc")
        .join(name)
}

fn line<'a>(irqs: &'a Interrupts, id: &str) -> &'a InterruptLine {
    match irqs.line(id) {
        Some(l) => l,
        None => panic!("no interrupt line {id:?}"),
    }
}

fn threads(list: &[KernelThread]) -> Vec<(u32, &str)> {
    list.iter().map(|t| (t.pid, t.comm.as_str())).collect()
}

fn error_text<T: std::fmt::Debug>(r: Result<T, ProcError>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn vm_idle_interrupts() {
    let irqs = read_interrupts(&tree("vm-idle")).expect("vm-idle interrupts");
    assert_eq!(irqs.cpus, vec![0, 1]);
    assert_eq!(irqs.lines.len(), 35);
    let rx = line(&irqs, "38");
    assert_eq!(rx.number, Some(38));
    assert_eq!(rx.counts, vec![0, 11968]);
    assert_eq!(rx.chip.as_deref(), Some("PCI-MSIX-0000:00:03.0"));
    assert_eq!(rx.name, "virtio2-input.0");
    let ged = line(&irqs, "24");
    assert_eq!(
        (ged.chip.as_deref(), ged.name.as_str()),
        (Some("IO-APIC"), "ACPI:Ged")
    );
    let loc = line(&irqs, "LOC");
    assert_eq!(loc.counts, vec![56252, 59285]);
    assert_eq!(loc.name, "Local timer interrupts");
    assert_eq!(loc.number, None);
    let err = line(&irqs, "ERR");
    assert!(err.total_only);
    assert_eq!(err.counts, vec![0]);
    assert_eq!(err.name, "");
    assert_eq!(
        irqs.lines.last().map(|l| l.name.as_str()),
        Some("Posted-interrupt wakeup event")
    );
    // Every numbered line on this VM has a chip and a hwirq-flow token that is not part
    // of the name.
    for l in irqs.lines.iter().filter(|l| l.number.is_some()) {
        assert!(l.chip.is_some(), "{l:?}");
        assert!(!l.name.contains("-edge"), "{l:?}");
        assert_eq!(l.counts.len(), 2, "{l:?}");
    }
}

#[test]
fn vm_idle_softirqs_stat_softnet() {
    let root = tree("vm-idle");
    let s = read_softirqs(&root).expect("softirqs");
    assert_eq!(s.cpus, vec![0, 1]);
    assert_eq!(s.vectors.len(), 10);
    assert_eq!(s.vector("NET_RX"), Some(&[27250u64, 20018][..]));
    assert_eq!(s.count("BLOCK", 1), Some(103968));

    let stat = read_stat(&root).expect("stat");
    assert_eq!(
        stat.total,
        Some(CpuTimes {
            user: 19676,
            nice: 0,
            system: 7037,
            idle: 178168,
            iowait: 1971,
            irq: 0,
            softirq: 287,
            steal: 118,
            guest: 0,
            guest_nice: 0,
            columns: 10,
        })
    );
    assert_eq!(
        stat.cpus.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
        vec![0, 1]
    );
    assert_eq!(stat.cpu(1).map(|t| t.softirq), Some(147));
    assert_eq!(
        stat.cpu(0).map(CpuTimes::total),
        Some(9050 + 2894 + 91288 + 218 + 139 + 61)
    );
    assert_eq!(stat.intr_total, Some(848989));
    assert_eq!(stat.ctxt, Some(2701226));
    assert_eq!(stat.btime, Some(1795319099));
    assert_eq!(stat.softirq_total, Some(287690));

    let rows = read_softnet(&root, &[0, 1]).expect("softnet");
    assert_eq!(
        rows,
        vec![
            SoftnetRow {
                cpu: 0,
                processed: 0x000b71d1,
                received_rps: Some(0),
                flow_limit_count: Some(0),
                backlog_len: Some(0),
                input_qlen: Some(0),
                process_qlen: Some(0),
                cpu_from_column: true,
                ..SoftnetRow::default()
            },
            SoftnetRow {
                cpu: 1,
                processed: 0x0015dd93,
                received_rps: Some(0),
                flow_limit_count: Some(0),
                backlog_len: Some(0),
                input_qlen: Some(0),
                process_qlen: Some(0),
                cpu_from_column: true,
                ..SoftnetRow::default()
            },
        ]
    );
}

#[test]
fn vm_idle_threads() {
    let root = tree("vm-idle");
    // kthreadd (pid 2) and the non-numeric `net` directory are not packet threads.
    let list = list_packet_threads(&root).expect("scan");
    assert_eq!(
        threads(&list),
        vec![(14, "ksoftirqd/0"), (22, "ksoftirqd/1")]
    );
    let t = read_task_stat(&root, 22).expect("ksoftirqd/1 stat");
    assert_eq!(t.comm, "ksoftirqd/1");
    assert_eq!((t.state, t.utime, t.stime), ('S', 8, 0));
    assert_eq!((t.priority, t.nice), (20, 0));
    assert_eq!(
        (t.processor, t.rt_priority, t.policy),
        (Some(1), Some(0), Some(0))
    );
    assert_eq!(
        read_task_cpus_allowed(&root, 22).expect("status"),
        Some(vec![1])
    );
    assert!(matches!(
        read_task_stat(&root, 99999),
        Err(ProcError::Missing { .. })
    ));
}

#[test]
fn vm_loaded_moves_the_packet_counters() {
    let (idle, loaded) = (tree("vm-idle"), tree("vm-loaded"));
    let before = read_softnet(&idle, &[0, 1]).expect("idle softnet");
    let after = read_softnet(&loaded, &[0, 1]).expect("loaded softnet");
    let processed = |rows: &[SoftnetRow]| rows.iter().map(|r| r.processed).collect::<Vec<_>>();
    assert_eq!(processed(&after), vec![0x0013cd80, 0x001abcd4]);
    // The fixtures were recorded in this order, so they form one interval.
    assert_eq!(
        processed(&after)
            .iter()
            .zip(processed(&before))
            .map(|(a, b)| a - b)
            .collect::<Vec<_>>(),
        vec![547759, 319297]
    );

    let s = read_softirqs(&loaded).expect("softirqs");
    assert_eq!(s.vector("NET_RX"), Some(&[30287u64, 26906][..]));
    let irqs = read_interrupts(&loaded).expect("interrupts");
    assert_eq!(line(&irqs, "38").counts, vec![0, 12115]);
    assert_eq!(line(&irqs, "LOC").counts, vec![64253, 67391]);
    let stat = read_stat(&loaded).expect("stat");
    assert_eq!(
        stat.cpu(1).map(|t| (t.system, t.softirq)),
        Some((4951, 175))
    );

    let list = list_packet_threads(&loaded).expect("scan");
    assert_eq!(
        threads(&list),
        vec![
            (14, "ksoftirqd/0"),
            (22, "ksoftirqd/1"),
            (12007, "napi/vb-260")
        ]
    );
    let napi = read_task_stat(&loaded, 12007).expect("napi thread stat");
    assert_eq!(napi.comm, "napi/vb-260");
    // Threaded NAPI polling is charged as system time of the kthread.
    assert_eq!((napi.utime, napi.stime), (0, 295));
    assert_eq!(napi.processor, Some(0));
    assert_eq!(napi.policy.map(policy_name), Some("SCHED_OTHER"));
    assert_eq!(
        read_task_cpus_allowed(&loaded, 12007).expect("status"),
        Some(vec![0, 1])
    );
}

#[test]
fn arm_openwrt_layout_and_stripped_tree() {
    let root = tree("arm-openwrt");
    let irqs = read_interrupts(&root).expect("interrupts");
    assert_eq!(irqs.cpus, vec![0, 1, 2, 3]);
    assert_eq!(irqs.lines.len(), 15);
    let rx = line(&irqs, "26");
    assert_eq!(rx.counts, vec![120345, 0, 0, 0]);
    assert_eq!(rx.chip.as_deref(), Some("GIC-0"));
    assert_eq!(rx.name, "edma_eth_rx0");
    let timer = line(&irqs, "18");
    assert_eq!(timer.name, "arch_timer");
    assert_eq!(
        timer.counts.iter().sum::<u64>(),
        102938 + 88123 + 91234 + 87001
    );
    assert_eq!(line(&irqs, "60").name, "eth0");
    let unnamed = line(&irqs, "23");
    assert_eq!(
        (unnamed.chip.as_deref(), unnamed.name.as_str()),
        (Some("GIC-0"), "")
    );
    let gpio = line(&irqs, "61");
    assert_eq!(
        (gpio.chip.as_deref(), gpio.name.as_str()),
        (Some("msmgpio"), "keys")
    );
    let resched = line(&irqs, "IPI2");
    assert_eq!(resched.counts, vec![4411, 5123, 4870, 4932]);
    assert_eq!(resched.name, "Rescheduling interrupts");
    let err = line(&irqs, "Err");
    assert!(err.total_only);
    assert_eq!(err.counts, vec![0]);

    let s = read_softirqs(&root).expect("softirqs");
    assert_eq!(s.count("NET_RX", 3), Some(877));
    assert_eq!(s.count("NET_RX", 4), None);
    let stat = read_stat(&root).expect("stat");
    assert_eq!(stat.cpus.len(), 4);
    assert_eq!(stat.cpu(0).map(|t| t.softirq), Some(6012));
    assert_eq!(stat.softirq_total, Some(802010));

    // No /proc/net/softnet_stat here: the reader says so, naming the path.
    match read_softnet(&root, &[0, 1, 2, 3]) {
        Err(ProcError::Missing { path }) => {
            assert_eq!(path, root.join("proc/net/softnet_stat"));
        }
        other => panic!("expected Missing, got {other:?}"),
    }
    assert!(error_text(read_softnet(&root, &[])).ends_with("is not present on this system"));
    assert_eq!(list_packet_threads(&root).expect("scan"), vec![]);
}

#[test]
fn offline_cpu_keeps_columns_and_rows_on_the_right_cpu() {
    let root = tree("offline-cpu");
    let irqs = read_interrupts(&root).expect("interrupts");
    assert_eq!(irqs.cpus, vec![0, 1, 3]);
    assert_eq!((irqs.column(3), irqs.column(2)), (Some(2), None));
    let rx = line(&irqs, "24");
    assert_eq!(irqs.column(3).and_then(|c| rx.counts.get(c)), Some(&3301));
    assert_eq!(rx.name, "virtio2-input.0");
    let unnamed = line(&irqs, "26");
    assert_eq!(
        (unnamed.counts.clone(), unnamed.name.as_str()),
        (vec![104, 0, 0], "")
    );
    assert!(line(&irqs, "ERR").total_only && line(&irqs, "MIS").total_only);
    assert!(!line(&irqs, "RES").total_only);

    let s = read_softirqs(&root).expect("softirqs");
    assert_eq!(s.cpus, vec![0, 1, 3]);
    assert_eq!(s.count("NET_RX", 3), Some(3310));
    assert_eq!(s.count("NET_RX", 2), None);

    let stat = read_stat(&root).expect("stat");
    assert_eq!(
        stat.cpus.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
        vec![0, 1, 3]
    );
    assert_eq!(stat.cpu(3).map(|t| t.idle), Some(31000));
    assert!(stat.cpu(2).is_none());

    // The CPU column names the CPUs, whatever the caller believes is online.
    for online in [&[0, 1, 3][..], &[], &[0, 1, 2, 3]] {
        let rows = read_softnet(&root, online).expect("softnet");
        assert_eq!(
            rows.iter().map(|r| r.cpu).collect::<Vec<_>>(),
            vec![0, 1, 3]
        );
        assert!(rows.iter().all(|r| r.cpu_from_column));
    }
    let rows = read_softnet(&root, &[]).expect("softnet");
    assert_eq!(rows[0].time_squeeze, 3);
    assert_eq!(
        rows[1],
        SoftnetRow {
            cpu: 1,
            processed: 8122,
            dropped: 2,
            time_squeeze: 0,
            received_rps: Some(10),
            flow_limit_count: Some(0),
            backlog_len: Some(1),
            input_qlen: None,
            process_qlen: None,
            cpu_from_column: true,
        }
    );
    assert_eq!(rows[2].processed, 3310);
}

#[test]
fn old_kernel_layouts() {
    let root = tree("old-kernel");
    let rows = read_softnet(&root, &[0, 1]).expect("softnet");
    assert_eq!(
        rows[0],
        SoftnetRow {
            cpu: 0,
            processed: 0x002a1b3c,
            dropped: 17,
            time_squeeze: 258,
            received_rps: Some(65),
            flow_limit_count: Some(0),
            backlog_len: None,
            input_qlen: None,
            process_qlen: None,
            cpu_from_column: false,
        }
    );
    assert_eq!(
        (rows[1].time_squeeze, rows[1].flow_limit_count),
        (240, Some(2))
    );
    // Without a CPU column, rows follow the online CPUs, then their own index.
    let cpus = |online: &[u32]| {
        read_softnet(&root, online)
            .map(|rows| rows.iter().map(|r| r.cpu).collect::<Vec<_>>())
            .ok()
    };
    assert_eq!(cpus(&[2, 5]), Some(vec![2, 5]));
    assert_eq!(cpus(&[]), Some(vec![0, 1]));
    assert_eq!(cpus(&[7]), Some(vec![7, 1]));

    let stat = read_stat(&root).expect("stat");
    let total = stat.total.expect("cpu line");
    assert_eq!(
        (
            total.user,
            total.nice,
            total.system,
            total.idle,
            total.iowait,
            total.columns
        ),
        (12040, 33, 5021, 880123, 0, 4)
    );
    assert_eq!(total.total(), 12040 + 33 + 5021 + 880123);
    assert_eq!(stat.cpu(1).map(|t| t.idle), Some(440062));
    assert_eq!(
        (stat.intr_total, stat.ctxt, stat.softirq_total),
        (Some(2910055), Some(4511233), None)
    );

    let irqs = read_interrupts(&root).expect("interrupts");
    let timer = line(&irqs, "0");
    assert_eq!(
        (timer.chip.as_deref(), timer.name.as_str()),
        (Some("IO-APIC-edge"), "timer")
    );
    let shared = line(&irqs, "16");
    assert_eq!(shared.chip.as_deref(), Some("IO-APIC-fasteoi"));
    assert_eq!(shared.name, "ehci_hcd:usb1, eth1");
    let q0 = line(&irqs, "44");
    assert_eq!(
        (q0.counts.clone(), q0.name.as_str()),
        (vec![884122, 0], "eth0-TxRx-0")
    );
}

#[test]
fn truncated_lines_and_crlf_parse_leniently() {
    let root = tree("truncated-crlf");
    let irqs = read_interrupts(&root).expect("interrupts");
    assert_eq!(irqs.cpus, vec![0, 1]);
    assert_eq!(
        irqs.lines.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(),
        vec!["24", "38", "LOC", "ERR", "39"]
    );
    assert_eq!(line(&irqs, "24").name, "ACPI:Ged");
    assert_eq!(line(&irqs, "LOC").name, "Local timer interrupts");
    assert!(line(&irqs, "ERR").total_only);
    // The cut last line keeps what it has; CPU 1 is unknown, not zero.
    let cut = line(&irqs, "39");
    assert_eq!(cut.counts, vec![7324]);
    assert!(!cut.total_only);
    assert_eq!((cut.chip.as_deref(), cut.name.as_str()), (None, ""));

    let s = read_softirqs(&root).expect("softirqs");
    assert_eq!(s.vector("NET_RX"), Some(&[7339u64, 10188][..]));
    assert_eq!(s.vector("BLOCK"), Some(&[0u64][..]));
    assert_eq!(s.count("BLOCK", 1), None);

    let stat = read_stat(&root).expect("stat");
    let cpu1 = stat.cpu(1).expect("cpu1");
    assert_eq!(
        (cpu1.user, cpu1.system, cpu1.idle, cpu1.columns),
        (7419, 2526, 0, 3)
    );

    let rows = read_softnet(&root, &[0, 1]).expect("softnet");
    assert_eq!(rows.len(), 2);
    assert!(rows[0].cpu_from_column);
    assert_eq!(
        rows[1],
        SoftnetRow {
            cpu: 1,
            processed: 0x3a4b,
            dropped: 1,
            time_squeeze: 2,
            ..SoftnetRow::default()
        }
    );
}

#[test]
fn garbage_is_reported_with_file_and_line() {
    let root = tree("garbage");
    assert_eq!(
        error_text(read_interrupts(&root)),
        "/proc/interrupts line 4: expected '<irq>:' followed by counts, \
         found '%%% this is not an interrupt line %%%'"
    );
    assert_eq!(
        error_text(read_softirqs(&root)),
        "/proc/softirqs line 3: expected a count, found '-188'"
    );
    assert_eq!(
        error_text(read_stat(&root)),
        "/proc/stat line 3: expected a tick count, found '25x6'"
    );
    // Line 2 is blank; numbering still follows the file.
    assert_eq!(
        error_text(read_softnet(&root, &[0, 1])),
        "/proc/net/softnet_stat line 3: expected a hex counter, found 'zz'"
    );
    assert_eq!(
        error_text(read_task_stat(&root, 4242)),
        "/proc/4242/stat line 1: expected utime ticks, found 'notanumber'"
    );
    assert_eq!(list_packet_threads(&root).expect("scan"), vec![]);
}

#[test]
fn absent_root() {
    let root = tree("no-such-tree");
    assert!(matches!(
        read_interrupts(&root),
        Err(ProcError::Missing { .. })
    ));
    assert!(matches!(read_stat(&root), Err(ProcError::Missing { .. })));
    assert!(matches!(
        list_packet_threads(&root),
        Err(ProcError::Missing { .. })
    ));
}
