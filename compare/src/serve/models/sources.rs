//! Where the router's models come from (llama.cpp's common/preset.cpp): the GGUF files of
//! `--models-dir` (a file is a model named after it without `.gguf`; a subdirectory is a
//! model named after it, its first shard or only GGUF, with an `mtp-`/`dspark-`/`dflash-`
//! file as its draft model), and the sections of `--models-preset` (an INI file: each
//! section a model, or options for a `--models-dir` model of that name; `[*]` options for
//! all). pocket never downloads, so llama.cpp's third source, its download cache, is not
//! read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `models_dir` or `preset`, as `GET /models` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    ModelsDir,
    Preset,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::ModelsDir => "models_dir",
            Source::Preset => "preset",
        }
    }
}

/// One model the router may load.
#[derive(Debug, Clone)]
pub struct ModelSource {
    pub name: String,
    pub source: Source,
    /// Options as the preset writes them (`key`, `value`), the model's file first
    /// (`model`); the global section's before the model's own.
    pub options: Vec<(String, String)>,
    /// The preset's `load-on-startup`.
    pub load_on_startup: bool,
}

impl ModelSource {
    fn new(name: String, source: Source) -> ModelSource {
        ModelSource {
            name,
            source,
            options: Vec::new(),
            load_on_startup: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("'{0}' does not exist or is not a directory")]
    NotADir(PathBuf),
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {msg}")]
    Preset {
        path: PathBuf,
        line: usize,
        msg: String,
    },
    #[error(
        "preset [{0}] names no model file (`model = PATH`) and no --models-dir model has that name"
    )]
    NoModel(String),
}

/// Options only a preset has: not flags of the model's server.
const PRESET_ONLY: &[&str] = &["load-on-startup", "stop-timeout", "dedup-cache-models"];

/// Every model of the two sources, by name.
pub fn scan(
    dir: Option<&Path>,
    preset: Option<&Path>,
) -> Result<BTreeMap<String, ModelSource>, SourceError> {
    let mut out = BTreeMap::new();
    if let Some(dir) = dir {
        for m in scan_dir(dir)? {
            out.insert(m.name.clone(), m);
        }
    }
    if let Some(path) = preset {
        let text = std::fs::read_to_string(path).map_err(|source| SourceError::Read {
            path: path.into(),
            source,
        })?;
        apply_preset(&mut out, &parse_ini(path, &text)?)?;
    }
    Ok(out)
}

fn read_dir(dir: &Path) -> Result<Vec<PathBuf>, SourceError> {
    let err = |source| SourceError::Read {
        path: dir.into(),
        source,
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(err)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    paths.sort();
    Ok(paths)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn is_companion(name: &str) -> bool {
    name.contains("mmproj") || is_draft(name)
}

fn is_draft(name: &str) -> bool {
    ["mtp-", "dspark-", "dflash-"]
        .iter()
        .any(|p| name.starts_with(p))
}

fn model(name: String, file: &Path, draft: Option<&Path>) -> ModelSource {
    let mut m = ModelSource::new(name, Source::ModelsDir);
    m.options
        .push(("model".into(), file.to_string_lossy().into_owned()));
    if let Some(d) = draft {
        m.options
            .push(("spec-draft-model".into(), d.to_string_lossy().into_owned()));
    }
    m
}

fn scan_dir(dir: &Path) -> Result<Vec<ModelSource>, SourceError> {
    if !dir.is_dir() {
        return Err(SourceError::NotADir(dir.into()));
    }
    let mut out = Vec::new();
    for path in read_dir(dir)? {
        let name = file_name(&path);
        if path.is_dir() {
            let (mut file, mut shard, mut draft) = (None, None, None);
            for p in read_dir(&path)? {
                let n = file_name(&p);
                if !p.is_file() || !n.ends_with(".gguf") || n.contains("mmproj") {
                    continue;
                }
                if is_draft(&n) {
                    draft.get_or_insert(p);
                } else if n.contains("-00001-of-") {
                    shard = Some(p);
                } else {
                    file = Some(p);
                }
            }
            if let Some(f) = shard.or(file) {
                out.push(model(name, &f, draft.as_deref()));
            }
        } else if path.is_file() && name.ends_with(".gguf") && !is_companion(&name) {
            out.push(model(name.replace(".gguf", ""), &path, None));
        }
    }
    Ok(out)
}

/// An INI file's sections in order: (name, options); keys before any section go to "".
type Sections = Vec<(String, Vec<(String, String)>)>;

fn parse_ini(path: &Path, text: &str) -> Result<Sections, SourceError> {
    let mut out: Sections = vec![(String::new(), Vec::new())];
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            out.push((name.trim().to_string(), Vec::new()));
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            return Err(SourceError::Preset {
                path: path.into(),
                line: i + 1,
                msg: format!("expected `key = value` or `[section]`, not `{line}`"),
            });
        };
        let v = v.trim().trim_matches('"');
        if let Some(last) = out.last_mut() {
            last.1.push((k.trim().to_string(), v.to_string()));
        }
    }
    Ok(out)
}

fn apply_preset(
    models: &mut BTreeMap<String, ModelSource>,
    sections: &Sections,
) -> Result<(), SourceError> {
    let global: Vec<(String, String)> = sections
        .iter()
        .filter(|(n, _)| n == "*")
        .flat_map(|(_, o)| o.iter().cloned())
        .collect();
    for (name, opts) in sections.iter().filter(|(n, _)| !n.is_empty() && n != "*") {
        let names_file = opts.iter().any(|(k, _)| k == "model" || k == "m");
        let m = match models.get_mut(name) {
            Some(m) => m,
            None if names_file => models
                .entry(name.clone())
                .or_insert_with(|| ModelSource::new(name.clone(), Source::Preset)),
            None => return Err(SourceError::NoModel(name.clone())),
        };
        for (k, v) in opts {
            match k.as_str() {
                "load-on-startup" => m.load_on_startup = matches!(v.as_str(), "true" | "1"),
                "m" => m.options.push(("model".into(), v.clone())),
                k if PRESET_ONLY.contains(&k) => {}
                _ => m.options.push((k.clone(), v.clone())),
            }
        }
    }
    // Global options come first, so a model's own override them.
    for m in models.values_mut() {
        let mut opts: Vec<(String, String)> = global
            .iter()
            .filter(|(k, _)| !PRESET_ONLY.contains(&k.as_str()))
            .cloned()
            .collect();
        opts.append(&mut m.options);
        m.options = opts;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_and_preset_make_the_model_list() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::write(root.join("a.gguf"), b"").unwrap();
        std::fs::write(root.join("mmproj-a.gguf"), b"").unwrap();
        std::fs::write(root.join("notes.txt"), b"").unwrap();
        std::fs::create_dir(root.join("b")).unwrap();
        std::fs::write(root.join("b/b-00001-of-00002.gguf"), b"").unwrap();
        std::fs::write(root.join("b/b-00002-of-00002.gguf"), b"").unwrap();
        std::fs::write(root.join("b/mtp-b.gguf"), b"").unwrap();
        let ini = root.join("p.ini");
        std::fs::write(
            &ini,
            "version = 1\n[*]\nc = 512\n; comment\n[a]\nnp = 2\nload-on-startup = true\n[c]\nmodel = /x/c.gguf\n",
        )
        .unwrap();
        let m = scan(Some(root), Some(&ini)).unwrap();
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
        let a = &m["a"];
        assert!(a.load_on_startup);
        assert_eq!(a.options[0], ("c".into(), "512".into()));
        assert_eq!(a.options[1].0, "model");
        assert_eq!(a.options[2], ("np".into(), "2".into()));
        assert!(m["b"].options[1].1.ends_with("b-00001-of-00002.gguf"));
        assert_eq!(m["b"].options[2].0, "spec-draft-model");
        assert_eq!(m["c"].source, Source::Preset);
        std::fs::write(&ini, "[nofile]\nc = 1\n").unwrap();
        assert!(matches!(
            scan(None, Some(&ini)),
            Err(SourceError::NoModel(_))
        ));
        assert!(matches!(
            scan(Some(&root.join("none")), None),
            Err(SourceError::NotADir(_))
        ));
    }
}
