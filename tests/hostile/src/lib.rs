//! Hostile plugins written as raw WebAssembly text, for the sandbox's tests
//! and benchmarks: what no SDK would let a plugin do — grow a table to the
//! largest size there is, return a batch longer than its memory, log in a
//! tight loop, create hundreds of instances or fill memories at start-up.
//!
//! Each is a component of the `filter` world built from `filter.wat` (it
//! keeps every record), or of the `process` world from `process.wat` (it
//! emits nothing), with `common.wat` inside; a record whose value starts
//! with the misdeed's trigger byte makes it misbehave (see
//! [`Misdeed::trigger`]).

use anyhow::{Context, Result};
use std::path::Path;
use wit_component::{ComponentEncoder, StringEncoding, embed_component_metadata};
use wit_parser::{Resolve, SourceMap, UnresolvedPackageGroup};

/// What a hostile component does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misdeed {
    /// Grows its table by 0xFFFF_FFFF elements (~32 GiB of host memory).
    TableGrow,
    /// Returns a batch of 1 GiB from a 64 KiB memory.
    BatchLength,
    /// Logs 100 000 lines in one call.
    LogFlood,
    /// A process plugin writing 1 MiB values to its state in an endless loop.
    StateLoop,
    /// Instantiates 900 core modules (wasmparser takes at most 1000) when the component is instantiated.
    ManyInstances,
    /// Instantiates 64 modules with a 16 MiB memory each, filled at start-up
    /// (1 GiB in all).
    ManyMemories,
}

impl Misdeed {
    /// Every misdeed.
    pub const ALL: [Misdeed; 6] = [
        Misdeed::TableGrow,
        Misdeed::BatchLength,
        Misdeed::LogFlood,
        Misdeed::StateLoop,
        Misdeed::ManyInstances,
        Misdeed::ManyMemories,
    ];

    /// Its name, as a file name.
    pub fn name(self) -> &'static str {
        match self {
            Misdeed::TableGrow => "table-grow",
            Misdeed::BatchLength => "batch-length",
            Misdeed::LogFlood => "log-flood",
            Misdeed::StateLoop => "state-loop",
            Misdeed::ManyInstances => "many-instances",
            Misdeed::ManyMemories => "many-memories",
        }
    }

    /// The first byte of the values that set it off (once the component is
    /// running: the last two misbehave when instantiated).
    pub fn trigger(self) -> u8 {
        match self {
            Misdeed::TableGrow => b'!',
            Misdeed::BatchLength => b'#',
            Misdeed::LogFlood => b'%',
            Misdeed::StateLoop => b'$',
            Misdeed::ManyInstances | Misdeed::ManyMemories => b'&',
        }
    }

    /// What the batch export does when set off.
    fn body(self) -> &'static str {
        match self {
            Misdeed::TableGrow => {
                "(if (i32.eq (table.grow $table (ref.null func) (i32.const -1)) (i32.const -1))
                   (then unreachable))"
            }
            Misdeed::BatchLength => {
                "(i32.store (i32.const 0) (i32.const 1024))
                 (i32.store (i32.const 4) (i32.const 0x40000000))
                 (return (i32.const 0))"
            }
            Misdeed::LogFlood => {
                "(local.set $i (i32.const 100000))
                 (loop $flood
                   (call $log (i32.const 3) (i32.const 16) (i32.const 7))
                   (local.set $i (i32.sub (local.get $i) (i32.const 1)))
                   (br_if $flood (local.get $i)))"
            }
            Misdeed::StateLoop => {
                "(call $reserve (i32.const 0x110000))
                 (loop $forever
                   (call $set (i32.const 16) (i32.const 7) (i32.const 0x10000) (i32.const 0x100000))
                   (br $forever))"
            }
            Misdeed::ManyInstances | Misdeed::ManyMemories => "nop",
        }
    }

    /// The world it implements.
    pub fn world(self) -> &'static str {
        match self {
            Misdeed::StateLoop => "process",
            _ => "filter",
        }
    }

    /// What is added to the component beside its main module.
    fn extra(self) -> String {
        match self {
            Misdeed::ManyInstances => {
                let mut text = "(core module $Empty)\n".to_owned();
                for _ in 0..900 {
                    text.push_str("(core instance (instantiate $Empty))\n");
                }
                text
            }
            Misdeed::ManyMemories => {
                let mut text = "(core module $Hog (memory 256)
                   (func $fill (memory.fill (i32.const 0) (i32.const 1) (i32.const 0x1000000)))
                   (start $fill))\n"
                    .to_owned();
                for _ in 0..64 {
                    text.push_str("(core instance (instantiate $Hog))\n");
                }
                text
            }
            _ => String::new(),
        }
    }

    /// The component, as bytes.
    pub fn component(self) -> Result<Vec<u8>> {
        let template = match self.world() {
            "process" => include_str!("process.wat"),
            _ => include_str!("filter.wat"),
        };
        let text = template
            .replace("{{COMMON}}", include_str!("common.wat"))
            .replace("{{TRIGGER}}", &self.trigger().to_string())
            .replace("{{MISDEED}}", self.body());
        let mut module = wat::parse_str(&text).context("filter.wat")?;
        let mut resolve = Resolve::default();
        let package = resolve.push_group(plugin_wit()?).context("wit/")?;
        let world = resolve.select_world(&[package], Some(self.world()))?;
        embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8)?;
        let component = ComponentEncoder::default()
            .module(&module)?
            .validate(true)
            .encode()?;
        let extra = self.extra();
        if extra.is_empty() {
            return Ok(component);
        }
        // Definitions may follow the component's own: appended, they leave
        // its indices as they are.
        let text = wasmprinter::print_bytes(&component)?;
        let end = text.rfind(')').context("a printed component ends with `)`")?;
        Ok(wat::parse_str(format!("{}{extra})", &text[..end]))?)
    }

    /// Writes the component to `dir/hostile-<name>.wasm` and returns its path.
    pub fn write_to(self, dir: &Path) -> Result<std::path::PathBuf> {
        let path = dir.join(format!("hostile-{}.wasm", self.name()));
        std::fs::write(&path, self.component()?)?;
        Ok(path)
    }
}

/// The plugin contract (`wit/`), compiled in: a build of this crate is
/// shared by every checkout using the same target folder, so it must not
/// read the files of the checkout it was built in.
fn plugin_wit() -> Result<UnresolvedPackageGroup> {
    let mut files = SourceMap::new();
    for (name, text) in WIT_FILES {
        files.push_str(&format!("wit/{name}"), *text);
    }
    files.parse().map_err(|(_, e)| anyhow::anyhow!("wit/: {e}"))
}

/// Every file of `wit/`, by name.
const WIT_FILES: &[(&str, &str)] = &[
    ("aliases.wit", include_str!("../../../wit/aliases.wit")),
    ("plugin.wit", include_str!("../../../wit/plugin.wit")),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wit_file_is_compiled_in() {
        let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../wit");
        let mut on_disk: Vec<String> = std::fs::read_dir(&wit)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let compiled: Vec<&str> = WIT_FILES.iter().map(|(name, _)| *name).collect();
        assert_eq!(on_disk, compiled, "list wit/'s files in WIT_FILES");
    }

    #[test]
    fn every_misdeed_builds_a_valid_component() {
        for m in Misdeed::ALL {
            let bytes = m.component().unwrap_or_else(|e| panic!("{}: {e:#}", m.name()));
            assert_eq!(&bytes[..4], b"\0asm", "{}", m.name());
        }
    }
}
