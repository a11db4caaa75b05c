//! Plugin projects: `dagr plugin new`, `dagr plugin build`, and the project
//! side of `dagr plugin push` (`plugin test` is in [`crate::plugin_test`]).
//!
//! A project is a directory in one of three languages, told apart by what
//! it holds: `Cargo.toml` (Rust, the `dagr-sdk` crate), `app.py` (Python,
//! componentize-py), `src/main.js` with a `package.json` (JavaScript, jco).
//! The templates, the SDKs and the WIT contract are embedded in the binary
//! ([`templates`]), so a project gets the SDK that matches the dagr that
//! built it: `plugin new` and every `plugin build` write them into the
//! project's `.dagr/sdk/` (not committed), and the toolchain builds against
//! that copy, never against anything it could modify.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, bail};
use clap::{Args, ValueEnum};
use dagr_runtime::{CodeSource, Plugin, Runtime, RuntimeConfig};

use crate::templates;

/// The language of a plugin project.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    /// JavaScript (TypeScript types included).
    Js,
}

impl Lang {
    pub fn as_str(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::Js => "JavaScript",
        }
    }
}

#[derive(Debug, Args)]
pub struct NewArgs {
    /// The plugin's name: lowercase letters, digits and `-`, starting with a
    /// letter. It is also the directory made for it.
    pub name: String,
    #[arg(long, value_enum, default_value = "rust")]
    pub lang: Lang,
    /// Where to make the project [default: ./NAME].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// One or two sentences for people browsing plugins.
    #[arg(long)]
    pub description: Option<String>,
}

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The project directory.
    #[arg(default_value = ".")]
    pub dir: PathBuf,
}

/// A plugin project on disk.
#[derive(Debug, Clone)]
pub struct Project {
    pub dir: PathBuf,
    pub lang: Lang,
}

impl Project {
    /// Finds the project in `dir`, naming what was looked for if there is none.
    pub fn open(dir: &Path) -> anyhow::Result<Project> {
        if !dir.is_dir() {
            bail!("{} is not a directory", dir.display());
        }
        let lang = if dir.join("Cargo.toml").is_file() {
            Lang::Rust
        } else if dir.join("app.py").is_file() {
            Lang::Python
        } else if dir.join("package.json").is_file() && dir.join("src/main.js").is_file() {
            Lang::Js
        } else {
            bail!(
                "{} is not a plugin project: it has no Cargo.toml (Rust), app.py (Python) or \
                 package.json with src/main.js (JavaScript); `dagr plugin new NAME` makes one",
                dir.display()
            );
        };
        Ok(Project { dir: dir.to_path_buf(), lang })
    }

    /// Where a Python or JavaScript build writes the component.
    fn build_output(&self) -> PathBuf {
        self.dir.join("build/plugin.wasm")
    }
}

/// A component made by `plugin build`.
#[derive(Debug)]
pub struct Built {
    pub path: PathBuf,
    /// Whether the toolchain ran (false when the component was up to date).
    pub rebuilt: bool,
    pub took: Duration,
}

/// `dagr plugin new`.
pub fn new(args: NewArgs) -> anyhow::Result<()> {
    check_name(&args.name)?;
    let dir = args.dir.unwrap_or_else(|| PathBuf::from(&args.name));
    if dir.exists() && std::fs::read_dir(&dir).map(|mut d| d.next().is_some()).unwrap_or(true) {
        bail!("{} already exists and is not empty; pick another name or --dir", dir.display());
    }
    let description = args.description.unwrap_or_else(|| format!("The {} task type.", args.name));
    if description.contains(['"', '\\', '\n']) {
        bail!("--description must be one line without `\"` or `\\`");
    }
    for file in templates::project_files(args.lang) {
        let path = dir.join(file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let text = templates::render(file.text, &args.name, &description, args.lang);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let project = Project { dir: dir.clone(), lang: args.lang };
    write_sdk(&project)?;
    println!("made {} ({}) in {}", args.name, args.lang.as_str(), dir.display());
    let first = match args.lang {
        Lang::Rust => "",
        Lang::Python => "python3 -m venv .venv && .venv/bin/pip install -r requirements-dev.txt\n  ",
        Lang::Js => "npm install\n  ",
    };
    let unit = match args.lang {
        Lang::Rust => "cargo test",
        Lang::Python => ".venv/bin/pytest",
        Lang::Js => "npm test",
    };
    println!("next:\n  cd {}\n  {first}dagr plugin build\n  dagr plugin test\n  {unit}", dir.display());
    Ok(())
}

fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok {
        bail!("plugin name `{name}` must be 1 to 64 lowercase letters, digits or `-`, starting with a letter");
    }
    Ok(())
}

/// Writes the embedded SDK and WIT into `.dagr/sdk/` (only files whose
/// contents changed, so that cargo does not rebuild an unchanged SDK), and
/// for JavaScript links `node_modules/@dagr/sdk` to it when npm has not.
pub fn write_sdk(project: &Project) -> anyhow::Result<()> {
    let root = project.dir.join(".dagr/sdk");
    for file in templates::sdk_files(project.lang) {
        let path = root.join(file.path);
        if std::fs::read_to_string(&path).is_ok_and(|old| old == file.text) {
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, file.text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if project.lang == Lang::Js {
        let link = project.dir.join("node_modules/@dagr/sdk");
        if std::fs::symlink_metadata(&link).is_err() {
            std::fs::create_dir_all(project.dir.join("node_modules/@dagr"))
                .context("cannot create node_modules/@dagr")?;
            std::os::unix::fs::symlink("../../.dagr/sdk/js", &link)
                .with_context(|| format!("cannot link {} to .dagr/sdk/js", link.display()))?;
        }
    }
    Ok(())
}

/// `dagr plugin build`: the toolchain, then the component loaded (and its
/// machine code cached for `plugin test`) to print what it describes.
pub fn build_verb(args: BuildArgs) -> anyhow::Result<()> {
    let project = Project::open(&args.dir)?;
    let built = build(&project, true)?;
    let size = std::fs::metadata(&built.path).map(|m| m.len()).unwrap_or(0);
    let started = Instant::now();
    let (plugin, _) = load(&built.path)?;
    let info = plugin.info();
    println!("{}", built.path.display());
    println!("  {} {} ({}), {}", info.name, info.version, plugin.language().as_str(), megabytes(size));
    if !info.description.is_empty() {
        println!("  {}", info.description);
    }
    if let Some(schema) = &info.params_schema {
        let text = schema.to_string();
        let shown: String = text.chars().take(160).collect();
        println!("  params: {shown}{}", if shown.len() < text.len() { "…" } else { "" });
    }
    let code = match plugin.code_source() {
        CodeSource::Compiled => "compiled for dagr",
        CodeSource::Cached => "machine code from the cache",
    };
    println!("  built in {:.1?}; {code} in {:.1?}", built.took, started.elapsed());
    Ok(())
}

/// Builds the project, unless `always` is false and the component is newer
/// than every source file (Rust always asks cargo, which knows best).
pub fn build(project: &Project, always: bool) -> anyhow::Result<Built> {
    write_sdk(project)?;
    let started = Instant::now();
    match project.lang {
        Lang::Rust => {
            let path = build_rust(project)?;
            Ok(Built { path, rebuilt: true, took: started.elapsed() })
        }
        Lang::Python | Lang::Js => {
            let out = project.build_output();
            if !always && up_to_date(&project.dir, &out) {
                return Ok(Built { path: out, rebuilt: false, took: started.elapsed() });
            }
            std::fs::create_dir_all(project.dir.join("build")).context("cannot create build/")?;
            if project.lang == Lang::Python {
                build_python(project, &out)?;
            } else {
                build_js(project, &out)?;
            }
            Ok(Built { path: out, rebuilt: true, took: started.elapsed() })
        }
    }
}

fn build_rust(project: &Project) -> anyhow::Result<PathBuf> {
    if which("cargo").is_none() {
        bail!(
            "cargo is not installed: install Rust with rustup (see https://rustup.rs), then `rustup target add wasm32-wasip2`"
        );
    }
    if which("rustup").is_some() {
        let installed =
            Command::new("rustup").args(["target", "list", "--installed"]).current_dir(&project.dir).output();
        if let Ok(out) = installed
            && out.status.success()
            && !String::from_utf8_lossy(&out.stdout).lines().any(|l| l.trim() == "wasm32-wasip2")
        {
            bail!("the wasm32-wasip2 target is not installed: `rustup target add wasm32-wasip2`");
        }
    }
    eprintln!("building with cargo (wasm32-wasip2, release)…");
    let mut cargo = Command::new("cargo");
    cargo.args(["build", "--release", "--target", "wasm32-wasip2"]).current_dir(&project.dir);
    let status = cargo.status().context("cannot run cargo")?;
    if !status.success() {
        bail!("cargo build failed (its errors are above)");
    }
    let metadata = Command::new("cargo")
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(&project.dir)
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo metadata")?;
    let metadata: serde_json::Value =
        serde_json::from_slice(&metadata.stdout).context("cargo metadata printed something that is not JSON")?;
    let target = metadata["target_directory"].as_str().context("cargo metadata names no target directory")?;
    let manifest = std::fs::canonicalize(project.dir.join("Cargo.toml")).context("cannot resolve Cargo.toml")?;
    let package = metadata["packages"]
        .as_array()
        .and_then(|packages| {
            packages.iter().find(|p| p["manifest_path"].as_str().map(PathBuf::from).as_deref() == Some(&manifest))
        })
        .context("cargo metadata does not list this project's package")?;
    let name = package["name"].as_str().context("the package has no name")?.replace('-', "_");
    let path = Path::new(target).join("wasm32-wasip2/release").join(format!("{name}.wasm"));
    if !path.is_file() {
        bail!(
            "cargo built, but {} is missing: is the crate a cdylib (`[lib] crate-type = [\"cdylib\"]`)?",
            path.display()
        );
    }
    Ok(path)
}

/// componentize-py 0.25.1 is what the SDK and these instructions were
/// checked with.
const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";

fn build_python(project: &Project, out: &Path) -> anyhow::Result<()> {
    let venv = project.dir.join(".venv/bin/componentize-py");
    let tool = if venv.is_file() { Some(venv) } else { which("componentize-py") };
    let Some(tool) = tool else {
        bail!(
            "componentize-py is not installed: in {}, `python3 -m venv .venv && .venv/bin/pip install {COMPONENTIZE_PY}` \
             (or `pip install {COMPONENTIZE_PY}` into any environment on your PATH)",
            project.dir.display()
        );
    };
    eprintln!("building with {}…", tool.display());
    let mut cmd = Command::new(&tool);
    cmd.arg("-d")
        .arg(Path::new(".dagr/sdk").join(templates::PYTHON_WIT))
        .args(["-w", "plugin", "componentize", "app", "-p", ".", "-p", ".dagr/sdk/python", "-o"])
        .arg(out)
        .current_dir(&project.dir);
    run_quietly(cmd, "componentize-py")
}

fn build_js(project: &Project, out: &Path) -> anyhow::Result<()> {
    if which("node").is_none() {
        bail!("node is not installed: install Node.js 20 or newer (e.g. `apt-get install nodejs npm`)");
    }
    let local = project.dir.join("node_modules/.bin/jco");
    let tool = if local.is_file() { Some(local) } else { which("jco") };
    let Some(tool) = tool else {
        bail!(
            "jco is not installed: in {}, `npm install` (package.json pins @bytecodealliance/jco 1.35.0 and \
             @bytecodealliance/componentize-js 0.23.0, with @bytecodealliance/preview2-shim 0.25.0, which jco \
             needs to read the WIT directory)",
            project.dir.display()
        );
    };
    eprintln!("building with {}…", tool.display());
    let mut cmd = Command::new(&tool);
    cmd.args(["componentize", "src/main.js", "--bundle", "--wit", ".dagr/sdk/wit", "--world-name", "plugin", "-o"])
        .arg(out)
        .current_dir(&project.dir);
    run_quietly(cmd, "jco componentize")
}

/// Runs a toolchain, showing its output only if it fails (jco's bundler
/// warns about every `dagr:`/`wasi:` import, which are the host's).
fn run_quietly(mut cmd: Command, what: &str) -> anyhow::Result<()> {
    let output = cmd.stdin(Stdio::null()).output().with_context(|| format!("cannot run {what}"))?;
    if !output.status.success() {
        eprint!("{}", String::from_utf8_lossy(&output.stdout));
        eprint!("{}", String::from_utf8_lossy(&output.stderr));
        bail!("{what} failed ({}; its output is above)", output.status);
    }
    Ok(())
}

/// Whether `artifact` is newer than every file of the project outside
/// build/, the top cases/, .dagr/, node_modules/, .venv/ and
/// dot-directories.
///
/// The top cases/ holds `dagr plugin test`'s inputs and expectations, which are not
/// part of the component: editing a case must not build it again. (A Python
/// or JavaScript build is not reproducible, so a rebuild also means new
/// bytes and compiling them for dagr again: tens of seconds.)
fn up_to_date(dir: &Path, artifact: &Path) -> bool {
    let Ok(built) = std::fs::metadata(artifact).and_then(|m| m.modified()) else { return false };
    newest_source(dir, 0).is_some_and(|newest| newest <= built)
}

fn newest_source(dir: &Path, depth: u32) -> Option<SystemTime> {
    let mut newest = SystemTime::UNIX_EPOCH;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let meta = entry.metadata().ok()?;
        if meta.is_dir() {
            let skip = name.starts_with('.')
                || ["build", "node_modules", "target", "__pycache__"].contains(&&*name)
                || (depth == 0 && name == "cases");
            if !skip && depth < 16 {
                newest = newest.max(newest_source(&entry.path(), depth + 1)?);
            }
        } else {
            newest = newest.max(meta.modified().ok()?);
        }
    }
    Some(newest)
}

/// The component to push: FILE as it is, or a project directory's
/// component, built first if needed.
pub fn component_for_push(path: &Path) -> anyhow::Result<PathBuf> {
    if path.is_file() {
        return Ok(path.to_path_buf());
    }
    let project = Project::open(path)?;
    Ok(build(&project, false)?.path)
}

/// Loads a component with machine code cached in [`code_cache_dir`], on a
/// runtime configured like a worker's (pooling allocator, epoch ticks).
pub fn load(path: &Path) -> anyhow::Result<(Plugin, Runtime)> {
    let cache = code_cache_dir();
    let runtime = Runtime::new(RuntimeConfig {
        guest_threads: 1,
        max_concurrent_attempts: 4,
        cache_dir: cache.clone(),
        ..Default::default()
    })?;
    let plugin = runtime.load_file(path).with_context(|| format!("cannot load {}", path.display()))?;
    if let Some(dir) = cache {
        prune_cache(&dir, code_cache_keep()?);
    }
    Ok((plugin, runtime))
}

/// How many artifacts [`code_cache_dir`] keeps: `DAGR_CODE_CACHE_KEEP`, 0
/// for every one (a cache shared with a node's `[worker] cache_dir`, whose
/// artifacts the CLI must not remove); 16 by default.
fn code_cache_keep() -> anyhow::Result<usize> {
    const VAR: &str = "DAGR_CODE_CACHE_KEEP";
    match std::env::var(VAR) {
        Err(_) => Ok(16),
        Ok(value) => value
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("{VAR}={value:?} is not a number of artifacts to keep (0 keeps every one)")),
    }
}

/// `DAGR_CODE_CACHE`, else `$XDG_CACHE_HOME/dagr/code`, else
/// `~/.cache/dagr/code`.
pub fn code_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DAGR_CODE_CACHE") {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(base.join("dagr/code"))
}

/// Keeps the `keep` most recently written artifacts (a Python component's
/// machine code is ~35 MB); 0 keeps them all.
fn prune_cache(dir: &Path, keep: usize) {
    if keep == 0 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut artifacts: Vec<(SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    artifacts.sort_by_key(|a| std::cmp::Reverse(a.0));
    for (_, path) in artifacts.into_iter().skip(keep) {
        let _ = std::fs::remove_file(path);
    }
}

fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| p.is_file())
}

pub fn megabytes(bytes: u64) -> String {
    if bytes >= 1_000_000 { format!("{:.1} MB", bytes as f64 / 1e6) } else { format!("{:.0} KB", bytes as f64 / 1e3) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_name("csv-summary").is_ok());
        for bad in ["", "Csv", "1csv", "csv_summary", "csv summary"] {
            assert!(check_name(bad).unwrap_err().to_string().contains("lowercase letters"), "{bad}");
        }
    }

    #[test]
    fn projects_are_told_apart_by_their_files() {
        let dir = tempfile::tempdir().unwrap();
        let err = Project::open(dir.path()).unwrap_err().to_string();
        assert!(err.contains("not a plugin project"), "{err}");
        std::fs::write(dir.path().join("app.py"), "").unwrap();
        assert_eq!(Project::open(dir.path()).unwrap().lang, Lang::Python);
    }

    #[test]
    fn a_component_newer_than_its_sources_is_up_to_date() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("app.py"), "").unwrap();
        let out = dir.path().join("build/plugin.wasm");
        assert!(!up_to_date(dir.path(), &out));
        std::thread::sleep(Duration::from_millis(20));
        std::fs::create_dir_all(dir.path().join("build")).unwrap();
        std::fs::write(&out, "").unwrap();
        assert!(up_to_date(dir.path(), &out));
        std::thread::sleep(Duration::from_millis(20));
        std::fs::create_dir_all(dir.path().join("cases")).unwrap();
        std::fs::write(dir.path().join("cases/greets.json"), "{}").unwrap();
        assert!(up_to_date(dir.path(), &out), "a test case is not a source");
        std::fs::create_dir_all(dir.path().join("lib/cases")).unwrap();
        std::fs::write(dir.path().join("lib/cases/table.py"), "").unwrap();
        assert!(!up_to_date(dir.path(), &out), "a package named cases deeper down is");
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&out, "").unwrap();
        assert!(up_to_date(dir.path(), &out));
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(dir.path().join("app.py"), "x = 1").unwrap();
        assert!(!up_to_date(dir.path(), &out));
    }

    #[test]
    fn the_cache_keeps_the_newest_artifacts_or_all_of_them() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["a", "b", "c"] {
            std::fs::write(dir.path().join(format!("{name}.cwasm")), name).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        std::fs::write(dir.path().join("cache.key"), "k").unwrap();
        let left = || {
            let mut names: Vec<String> =
                std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
            names.sort();
            names
        };
        prune_cache(dir.path(), 0);
        assert_eq!(left(), ["a.cwasm", "b.cwasm", "c.cwasm", "cache.key"]);
        prune_cache(dir.path(), 2);
        assert_eq!(left(), ["b.cwasm", "c.cwasm", "cache.key"]);
    }
}
