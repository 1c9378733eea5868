//! A set of metric families held as plain values, and its two wire formats: OpenMetrics
//! text (rendered by `prometheus-client`) and the Prometheus text format 0.0.4 (rendered
//! by the `prometheus` crate's `TextEncoder`). `prometheus-client` writes only
//! OpenMetrics, whose counter and info lines the 0.0.4 parsers (promtool, older
//! scrapers) misread, so the exporter keeps one neutral copy of every value and lets each
//! library write its own format: neither format is written by hand.

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// Label pairs in output order.
pub type Labels = Vec<(String, String)>;

#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// A monotonic count; the name is given without `_total` (both formats add it).
    Counter,
    Gauge,
    /// Bucket upper bounds (ascending, without +Inf) shared by every sample.
    Histogram(Vec<f64>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Number(f64),
    /// Per-bucket (not cumulative) counts, one per bound plus one for +Inf, and the sum.
    Histogram {
        buckets: Vec<u64>,
        sum: f64,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    pub name: String,
    pub help: String,
    pub kind: Kind,
    pub samples: Vec<(Labels, Value)>,
}

impl Family {
    pub fn new(name: &str, help: &str, kind: Kind) -> Family {
        Family {
            name: name.into(),
            help: help.into(),
            kind,
            samples: Vec::new(),
        }
    }

    /// A family of one unlabelled sample, or none when the value is unknown.
    pub fn single(name: &str, help: &str, kind: Kind, value: Option<f64>) -> Family {
        let mut family = Family::new(name, help, kind);
        if let Some(v) = value {
            family.push(&[], v);
        }
        family
    }

    pub fn push(&mut self, labels: &[(&str, String)], value: f64) {
        let labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect();
        self.samples.push((labels, Value::Number(value)));
    }

    pub fn push_histogram(&mut self, labels: &[(&str, String)], buckets: Vec<u64>, sum: f64) {
        let labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect();
        self.samples
            .push((labels, Value::Histogram { buckets, sum }));
    }

    /// The name the 0.0.4 format gives the family (counters carry `_total`).
    fn text_name(&self) -> String {
        match self.kind {
            Kind::Counter => format!("{}_total", self.name),
            _ => self.name.clone(),
        }
    }
}

/// The families as `prometheus-client` sees them: one collector that writes them all.
#[derive(Debug)]
struct Collected(Vec<Family>);

impl prometheus_client::collector::Collector for Collected {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for family in &self.0 {
            let metric_type = match family.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Histogram(_) => MetricType::Histogram,
            };
            let mut metric =
                encoder.encode_descriptor(&family.name, &family.help, None, metric_type)?;
            for (labels, value) in &family.samples {
                let mut sample = metric.encode_family(labels)?;
                match (value, &family.kind) {
                    (Value::Number(v), Kind::Counter) => {
                        sample.encode_counter::<NoLabelSet, _, f64>(v, None)?
                    }
                    (Value::Number(v), _) => sample.encode_gauge(v)?,
                    (Value::Histogram { buckets, sum }, Kind::Histogram(bounds)) => {
                        let pairs: Vec<(f64, u64)> = bounds
                            .iter()
                            .copied()
                            .chain(std::iter::once(f64::INFINITY))
                            .zip(buckets.iter().copied())
                            .collect();
                        let count = buckets.iter().sum();
                        sample.encode_histogram::<NoLabelSet>(*sum, count, &pairs, None)?
                    }
                    // A histogram value in a non-histogram family is a bug in the
                    // builder; leaving the sample out keeps the exposition valid.
                    (Value::Histogram { .. }, _) => {}
                }
            }
        }
        Ok(())
    }
}

/// OpenMetrics text (`application/openmetrics-text; version=1.0.0`), ending in `# EOF`.
pub fn openmetrics(families: Vec<Family>) -> Result<String, std::fmt::Error> {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Collected(families)));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    Ok(text)
}

/// The Prometheus text format 0.0.4 (`text/plain; version=0.0.4`).
pub fn prometheus_text(families: &[Family]) -> Result<String, prometheus::Error> {
    use prometheus::proto;
    let mut out = Vec::with_capacity(families.len());
    for family in families {
        // The 0.0.4 format has no empty families; promtool rejects them.
        if family.samples.is_empty() {
            continue;
        }
        let mut mf = proto::MetricFamily::default();
        mf.set_name(family.text_name());
        mf.set_help(family.help.clone());
        mf.set_field_type(match family.kind {
            Kind::Counter => proto::MetricType::COUNTER,
            Kind::Gauge => proto::MetricType::GAUGE,
            Kind::Histogram(_) => proto::MetricType::HISTOGRAM,
        });
        let mut metrics = Vec::with_capacity(family.samples.len());
        for (labels, value) in &family.samples {
            let mut m = proto::Metric::default();
            m.set_label(
                labels
                    .iter()
                    .map(|(k, v)| {
                        let mut pair = proto::LabelPair::default();
                        pair.set_name(k.clone());
                        pair.set_value(v.clone());
                        pair
                    })
                    .collect(),
            );
            match (value, &family.kind) {
                (Value::Number(v), Kind::Counter) => {
                    let mut c = proto::Counter::default();
                    c.set_value(*v);
                    m.set_counter(c);
                }
                (Value::Number(v), _) => {
                    let mut g = proto::Gauge::default();
                    g.set_value(*v);
                    m.set_gauge(g);
                }
                (Value::Histogram { buckets, sum }, Kind::Histogram(bounds)) => {
                    let mut h = proto::Histogram::default();
                    let mut cumulative = 0;
                    let mut out_buckets = Vec::with_capacity(bounds.len());
                    for (bound, count) in bounds.iter().zip(buckets) {
                        cumulative += count;
                        let mut b = proto::Bucket::default();
                        b.set_upper_bound(*bound);
                        b.set_cumulative_count(cumulative);
                        out_buckets.push(b);
                    }
                    h.set_bucket(out_buckets);
                    h.set_sample_count(buckets.iter().sum());
                    h.set_sample_sum(*sum);
                    m.set_histogram(h);
                }
                (Value::Histogram { .. }, _) => continue,
            }
            metrics.push(m);
        }
        mf.set_metric(metrics);
        out.push(mf);
    }
    prometheus::TextEncoder::new().encode_to_string(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_families() -> Vec<Family> {
        let mut polls = Family::new("napilab_napi_polls", "NAPI polls.", Kind::Counter);
        polls.push(
            &[("device", "vb".into()), ("context", "ksoftirqd".into())],
            7.0,
        );
        let mut info = Family::new("napilab_napi_info", "Settings.", Kind::Gauge);
        info.push(&[("threaded", "1".into())], 1.0);
        let mut hist = Family::new(
            "napilab_napi_packets_per_poll",
            "Packets per poll.",
            Kind::Histogram(vec![0.0, 1.0, 64.0]),
        );
        hist.push_histogram(&[("device", "vb".into())], vec![2, 3, 1, 0], 70.0);
        let empty = Family::new("napilab_finding", "Findings.", Kind::Gauge);
        vec![polls, info, hist, empty]
    }

    #[test]
    fn openmetrics_has_counters_with_total_and_eof() {
        let text = openmetrics(sample_families()).expect("encode");
        assert!(text.contains("# TYPE napilab_napi_polls counter"), "{text}");
        assert!(
            text.contains("napilab_napi_polls_total{device=\"vb\",context=\"ksoftirqd\"} 7"),
            "{text}"
        );
        assert!(
            text.contains("napilab_napi_packets_per_poll_bucket{le=\"1.0\",device=\"vb\"} 5"),
            "{text}"
        );
        assert!(
            text.contains("napilab_napi_packets_per_poll_count{device=\"vb\"} 6"),
            "{text}"
        );
        assert!(text.trim_end().ends_with("# EOF"), "{text}");
    }

    #[test]
    fn text_format_names_counters_with_total_and_skips_empty_families() {
        let text = prometheus_text(&sample_families()).expect("encode");
        assert!(
            text.contains("# TYPE napilab_napi_polls_total counter"),
            "{text}"
        );
        assert!(
            text.contains("napilab_napi_polls_total{device=\"vb\",context=\"ksoftirqd\"} 7"),
            "{text}"
        );
        assert!(
            text.contains("napilab_napi_packets_per_poll_bucket{device=\"vb\",le=\"64\"} 6"),
            "{text}"
        );
        assert!(
            text.contains("napilab_napi_packets_per_poll_bucket{device=\"vb\",le=\"+Inf\"} 6"),
            "{text}"
        );
        assert!(!text.contains("napilab_finding"), "{text}");
        assert!(!text.contains("# EOF"), "{text}");
    }
}
