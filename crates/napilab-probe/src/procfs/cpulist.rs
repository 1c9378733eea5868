//! CPU sets as the kernel prints them: lists (`0-3,8`, from `Cpus_allowed_list`,
//! `/sys/devices/system/cpu/online`) and hex masks (`ff,00000001`, from `rps_cpus`,
//! `smp_affinity`).

use super::{parse_dec_u32, parse_hex};

/// Largest number of CPUs a set may name. Far above any real `NR_CPUS` (8192 with
/// `MAXSMP`); it exists so that `0-4294967295` cannot make us allocate gigabytes.
pub const MAX_CPUS: usize = 65536;

/// Parses a CPU list such as `"0-3,8,10-11\n"` into sorted, deduplicated CPU numbers.
///
/// Empty (or blank) text is the empty set. Returns `None` for anything else that is not a
/// list, for a CPU number of [`MAX_CPUS`] or more, and for a reversed range.
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let s = s.trim();
    let mut cpus = Vec::new();
    if s.is_empty() {
        return Some(cpus);
    }
    for part in s.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (cpu_number(lo)?, cpu_number(hi)?),
            None => {
                let cpu = cpu_number(part)?;
                (cpu, cpu)
            }
        };
        if hi < lo {
            return None;
        }
        // Both ends are below MAX_CPUS, so the width and the sum cannot overflow; the
        // total cap stops `0-65535,0-65535,...` from growing without bound.
        let width = (hi - lo) as usize + 1;
        if cpus.len() + width > MAX_CPUS {
            return None;
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

fn cpu_number(s: &str) -> Option<u32> {
    parse_dec_u32(s.trim()).filter(|&cpu| (cpu as usize) < MAX_CPUS)
}

/// Parses a hex CPU mask such as `"ff,00000001"` (32-bit groups, most significant first)
/// into sorted CPU numbers. `"0"` and `"00000000"` are the empty set, as is blank text.
/// Returns `None` for a group that is empty, longer than 8 digits or not hex, and for
/// masks wider than [`MAX_CPUS`] bits.
pub fn parse_cpu_mask(s: &str) -> Option<Vec<u32>> {
    const GROUP_BITS: u32 = 32;
    let s = s.trim();
    let mut cpus = Vec::new();
    if s.is_empty() {
        return Some(cpus);
    }
    // Least significant group first, so CPUs come out in ascending order.
    for (index, group) in s.rsplit(',').enumerate() {
        if index >= MAX_CPUS / GROUP_BITS as usize || group.is_empty() || group.len() > 8 {
            return None;
        }
        let bits = parse_hex(group)?;
        // `index` < 2048, so the base fits in u32 with room to spare.
        let base = index as u32 * GROUP_BITS;
        cpus.extend(
            (0..GROUP_BITS)
                .filter(|bit| bits & (1u64 << bit) != 0)
                .map(|bit| base + bit),
        );
    }
    Some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list(" \n"), Some(vec![]));
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list("3,1-2,2"), Some(vec![1, 2, 3]));
        assert_eq!(parse_cpu_list("65535"), Some(vec![65535]));
    }

    #[test]
    fn list_garbage() {
        for bad in [
            "x",
            "0-",
            "-3",
            "3-1",
            "0,,1",
            "0,",
            "1-2-3",
            "+1",
            "65536",
            "0-65536",
            "0-4294967295",
            "0-99999999999",
        ] {
            assert_eq!(parse_cpu_list(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn list_total_is_capped() {
        let many = ["0-65535"; 3].join(",");
        assert_eq!(parse_cpu_list(&many), None);
        assert_eq!(parse_cpu_list("0-65535").map(|v| v.len()), Some(MAX_CPUS));
    }

    #[test]
    fn masks() {
        assert_eq!(
            parse_cpu_mask("ff,00000001\n"),
            Some(vec![0, 32, 33, 34, 35, 36, 37, 38, 39])
        );
        assert_eq!(parse_cpu_mask("0"), Some(vec![]));
        assert_eq!(parse_cpu_mask("00000000"), Some(vec![]));
        assert_eq!(parse_cpu_mask("3"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_mask("A"), Some(vec![1, 3]));
        assert_eq!(parse_cpu_mask("80000000"), Some(vec![31]));
        assert_eq!(parse_cpu_mask("1,00000000,00000000"), Some(vec![64]));
    }

    #[test]
    fn mask_garbage() {
        for bad in ["g", "ff,", ",1", "100000000", "0x1", "1 ,2", "-1"] {
            assert_eq!(parse_cpu_mask(bad), None, "{bad:?}");
        }
        let too_wide = vec!["0"; MAX_CPUS / 32 + 1].join(",");
        assert_eq!(parse_cpu_mask(&too_wide), None);
        let widest = vec!["0"; MAX_CPUS / 32].join(",");
        assert_eq!(parse_cpu_mask(&widest), Some(vec![]));
    }
}
