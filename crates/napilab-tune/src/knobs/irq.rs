//! IRQ affinity through `/proc/irq/<n>/smp_affinity_list`.

use super::{cpus, Ctx, Knob, KnobError, KnobResult};
use crate::model::{cpu_list, Key, Value};

pub const ATTRS: &[&str] = &["affinity"];

pub struct IrqAffinity;

fn rel(key: &Key) -> String {
    format!("proc/irq/{}/smp_affinity_list", key.irq.unwrap_or(0))
}

impl Knob for IrqAffinity {
    fn read(&self, ctx: &mut Ctx, key: &Key) -> KnobResult<Value> {
        let rel = rel(key);
        let text = ctx
            .read_file(&rel)
            .map_err(|e| KnobError::Gone(format!("IRQ {}: /{rel}: {e}", key.irq.unwrap_or(0))))?;
        crate::model::parse_cpus(&text)
            .map(Value::Cpus)
            .map_err(|e| KnobError::Failed(format!("/{rel}: {e}")))
    }

    fn validate(&self, ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()> {
        cpus(ctx, key, value, false).map(|_| ())
    }

    fn write(&self, ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()> {
        let c = cpus(ctx, key, value, false)?;
        ctx.write_file(&rel(key), &cpu_list(&c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Kind;

    #[test]
    fn reads_and_writes_the_affinity_list_under_root() {
        let dir = std::env::temp_dir().join(format!("napilab-tune-irq-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("proc/irq/42")).expect("mkdir");
        std::fs::create_dir_all(dir.join("sys/devices/system/cpu")).expect("mkdir");
        std::fs::write(dir.join("sys/devices/system/cpu/online"), "0-3\n").expect("write");
        std::fs::write(dir.join("proc/irq/42/smp_affinity_list"), "0-3\n").expect("write");
        let mut ctx = Ctx::new(&dir);
        let mut key = Key::global(Kind::Irq, "affinity");
        key.irq = Some(42);
        assert_eq!(
            IrqAffinity.read(&mut ctx, &key),
            Ok(Value::Cpus(vec![0, 1, 2, 3]))
        );
        assert!(IrqAffinity
            .validate(&mut ctx, &key, &Value::Cpus(vec![7]))
            .is_err());
        assert!(IrqAffinity
            .validate(&mut ctx, &key, &Value::Cpus(vec![]))
            .is_err());
        IrqAffinity
            .write(&mut ctx, &key, &Value::Cpus(vec![1, 2]))
            .expect("write");
        assert_eq!(
            std::fs::read_to_string(dir.join("proc/irq/42/smp_affinity_list")).ok(),
            Some("1-2".to_string())
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
