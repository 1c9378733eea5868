//! `napilab map`.

use std::path::Path;

use anyhow::Result;
use napilab_probe::observe::describe_host;

use crate::render;

pub fn run(json: bool, root: Option<&Path>) -> Result<()> {
    let header = describe_host(root.unwrap_or(Path::new("/")), root.is_none());
    if json {
        let out = serde_json::json!({
            "schema": "napilab.map/1",
            "host": header.host,
            "settings": header.settings,
            "topology": header.topology,
            "notices": header.notices,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!(
            "{}",
            render::map(&header.topology, &header.host, &header.settings)
        );
        print!("{}", render::notices(&header.notices));
    }
    Ok(())
}
