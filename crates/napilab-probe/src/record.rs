//! Recordings: `observe --record FILE` keeps the raw samples so that `observe --replay
//! FILE` reruns the whole analysis offline. JSON lines: a header, then one
//! [`RawSample`] per line, flushed as it is taken so a killed run keeps its samples.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use napilab_core::{HostFacts, Notice, Origin, Settings, TopologyMap};
use serde::{Deserialize, Serialize};

use crate::sample::RawSample;

pub const RECORDING_SCHEMA: &str = "napilab.recording/1";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordingHeader {
    pub schema: String,
    pub origin: Origin,
    pub host: HostFacts,
    /// Online CPUs when recording started (places softnet rows of old kernels).
    pub online_cpus: Vec<u32>,
    pub settings: Settings,
    pub topology: TopologyMap,
    pub notices: Vec<Notice>,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} line {line}: {what}")]
    Format {
        path: PathBuf,
        line: usize,
        what: String,
    },
}

pub struct RecordingWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl RecordingWriter {
    pub fn create(path: &Path, header: &RecordingHeader) -> Result<Self, RecordError> {
        let io = |source| RecordError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::create(path).map_err(io)?;
        let mut writer = RecordingWriter {
            path: path.to_path_buf(),
            out: BufWriter::new(file),
        };
        writer.write_line(header)?;
        Ok(writer)
    }

    fn write_line<T: Serialize>(&mut self, value: &T) -> Result<(), RecordError> {
        let io = |source| RecordError::Io {
            path: self.path.clone(),
            source,
        };
        serde_json::to_writer(&mut self.out, value).map_err(|e| io(e.into()))?;
        self.out.write_all(b"\n").map_err(io)?;
        self.out.flush().map_err(io)
    }

    pub fn append(&mut self, sample: &RawSample) -> Result<(), RecordError> {
        self.write_line(sample)
    }
}

/// Reads a recording. A truncated last line (the recorder was killed mid-write) is
/// dropped; any other bad line is an error naming it.
pub fn read_recording(path: &Path) -> Result<(RecordingHeader, Vec<RawSample>), RecordError> {
    let file = File::open(path).map_err(|source| RecordError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let lines: Vec<String> = BufReader::new(file)
        .lines()
        .collect::<Result<_, _>>()
        .map_err(|source| RecordError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    let format = |line: usize, what: String| RecordError::Format {
        path: path.to_path_buf(),
        line,
        what,
    };
    let first = lines
        .first()
        .ok_or_else(|| format(1, "empty file: not a napilab recording".into()))?;
    let header: RecordingHeader = serde_json::from_str(first).map_err(|e| {
        format(1, format!("not a napilab recording header ({e}); make one with `napilab observe --record FILE`"))
    })?;
    if header.schema != RECORDING_SCHEMA {
        return Err(format(
            1,
            format!("recording schema {} is not {RECORDING_SCHEMA}: use the napilab version that wrote it", header.schema),
        ));
    }
    let mut samples = Vec::with_capacity(lines.len().saturating_sub(1));
    let last = lines.len();
    for (i, line) in lines.iter().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<RawSample>(line) {
            Ok(s) => samples.push(s),
            Err(_) if i + 1 == last => break,
            Err(e) => return Err(format(i + 1, format!("bad sample: {e}"))),
        }
    }
    Ok((header, samples))
}
