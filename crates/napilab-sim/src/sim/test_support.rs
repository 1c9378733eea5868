//! What the event loop's unit tests share: a configuration parsed from a scenario's
//! text and a built-in hardware profile, both failing the test with the parser's own
//! message (which names the file and field) rather than a bare unwrap.

use crate::config::SimConfig;
use crate::profile::Profile;

/// `text` parsed as a twin scenario; `what` names it in the error.
pub(super) fn config_from(text: &str, what: &str) -> SimConfig {
    match SimConfig::from_toml_str(text, what) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

/// The built-in hardware profile `name`.
pub(super) fn builtin_profile(name: &str) -> Profile {
    match Profile::builtin(name) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}
