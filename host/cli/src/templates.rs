//! What `dagr plugin new` writes, and the SDKs and WIT contract a project
//! builds against, embedded in the binary so that they always match it.
//!
//! The templates are versioned with the WIT package: [`WIT_PACKAGE`] is the
//! package every template and SDK targets, and a unit test checks it
//! against `wit/plugin.wit` and against each SDK's own declaration.

use crate::plugin_project::Lang;

/// The WIT package the templates and SDKs implement.
pub const WIT_PACKAGE: &str = "dagr:plugin@0.1.0";

/// A file to write, relative to the project (or to `.dagr/sdk/`).
#[derive(Debug, Clone, Copy)]
pub struct File {
    pub path: &'static str,
    pub text: &'static str,
}

const fn file(path: &'static str, text: &'static str) -> File {
    File { path, text }
}

const WIT: File = file("wit/plugin.wit", include_str!("../../../wit/plugin.wit"));

const README: &str = include_str!("templates/README.md.tmpl");
const CASES: [File; 3] = [
    file("cases/greets.json", include_str!("templates/case-greets.json.tmpl")),
    file("cases/empty-name.json", include_str!("templates/case-empty-name.json.tmpl")),
    file("cases/unknown-param.json", include_str!("templates/case-unknown-param.json.tmpl")),
];

const RUST: [File; 4] = [
    file("Cargo.toml", include_str!("templates/rust/Cargo.toml.tmpl")),
    file("src/lib.rs", include_str!("templates/rust/lib.rs.tmpl")),
    file(".gitignore", include_str!("templates/rust/gitignore.tmpl")),
    file("README.md", README),
];

const PYTHON: [File; 6] = [
    file("app.py", include_str!("templates/python/app.py.tmpl")),
    file("test_app.py", include_str!("templates/python/test_app.py.tmpl")),
    file("pytest.ini", include_str!("templates/python/pytest.ini.tmpl")),
    file("requirements-dev.txt", include_str!("templates/python/requirements-dev.txt.tmpl")),
    file(".gitignore", include_str!("templates/python/gitignore.tmpl")),
    file("README.md", README),
];

const JS: [File; 6] = [
    file("package.json", include_str!("templates/js/package.json.tmpl")),
    file("src/task.js", include_str!("templates/js/task.js.tmpl")),
    file("src/main.js", include_str!("templates/js/main.js.tmpl")),
    file("test/task.test.js", include_str!("templates/js/task.test.js.tmpl")),
    file(".gitignore", include_str!("templates/js/gitignore.tmpl")),
    file("README.md", README),
];

const SDK_RUST: [File; 3] = [
    file("rust/Cargo.toml", include_str!("templates/sdk-rust-Cargo.toml.tmpl")),
    file("rust/src/lib.rs", include_str!("../../../sdk/src/lib.rs")),
    file("rust/src/testing.rs", include_str!("../../../sdk/src/testing.rs")),
];

/// Where a Python project's world lives in `.dagr/sdk/` (componentize-py's `-d`).
pub const PYTHON_WIT: &str = "python/wit";

const SDK_PYTHON: [File; 14] = [
    file("python/dagr_sdk/__init__.py", include_str!("../../../sdk/python/dagr_sdk/__init__.py")),
    file("python/dagr_sdk/_host.py", include_str!("../../../sdk/python/dagr_sdk/_host.py")),
    file("python/dagr_sdk/_params.py", include_str!("../../../sdk/python/dagr_sdk/_params.py")),
    file("python/dagr_sdk/http.py", include_str!("../../../sdk/python/dagr_sdk/http.py")),
    file("python/dagr_sdk/testing.py", include_str!("../../../sdk/python/dagr_sdk/testing.py")),
    // The world componentize-py builds: the contract plus wasi:http.
    file("python/wit/world.wit", include_str!("../../../sdk/python/wit/world.wit")),
    file("python/wit/deps/dagr-plugin.wit", WIT.text),
    file("python/wit/deps/cli.wit", include_str!("../../../sdk/python/wit/deps/cli.wit")),
    file("python/wit/deps/clocks.wit", include_str!("../../../sdk/python/wit/deps/clocks.wit")),
    file("python/wit/deps/filesystem.wit", include_str!("../../../sdk/python/wit/deps/filesystem.wit")),
    file("python/wit/deps/http.wit", include_str!("../../../sdk/python/wit/deps/http.wit")),
    file("python/wit/deps/io.wit", include_str!("../../../sdk/python/wit/deps/io.wit")),
    file("python/wit/deps/random.wit", include_str!("../../../sdk/python/wit/deps/random.wit")),
    file("python/wit/deps/sockets.wit", include_str!("../../../sdk/python/wit/deps/sockets.wit")),
];

const SDK_JS: [File; 6] = [
    file("js/package.json", include_str!("../../../sdk/js/package.json")),
    file("js/index.js", include_str!("../../../sdk/js/index.js")),
    file("js/index.d.ts", include_str!("../../../sdk/js/index.d.ts")),
    file("js/schema.js", include_str!("../../../sdk/js/schema.js")),
    file("js/testing.js", include_str!("../../../sdk/js/testing.js")),
    file("js/testing.d.ts", include_str!("../../../sdk/js/testing.d.ts")),
];

/// The files of a new project.
pub fn project_files(lang: Lang) -> Vec<File> {
    let own: &[File] = match lang {
        Lang::Rust => &RUST,
        Lang::Python => &PYTHON,
        Lang::Js => &JS,
    };
    own.iter().chain(CASES.iter()).copied().collect()
}

/// The SDK and the WIT, relative to `.dagr/sdk/`.
pub fn sdk_files(lang: Lang) -> Vec<File> {
    let sdk: &[File] = match lang {
        Lang::Rust => &SDK_RUST,
        Lang::Python => &SDK_PYTHON,
        Lang::Js => &SDK_JS,
    };
    std::iter::once(WIT).chain(sdk.iter().copied()).collect()
}

/// Fills a template's placeholders.
pub fn render(text: &str, name: &str, description: &str, lang: Lang) -> String {
    let (setup, unit_test, artifact, guide) = match lang {
        Lang::Rust => ("", "cargo test", "target/wasm32-wasip2/release/*.wasm", "rust"),
        Lang::Python => (
            "python3 -m venv .venv && .venv/bin/pip install -r requirements-dev.txt   # once\n",
            ".venv/bin/pytest",
            "build/plugin.wasm",
            "python",
        ),
        Lang::Js => ("npm install               # once\n", "npm test  ", "build/plugin.wasm", "js"),
    };
    text.replace("{{name}}", name)
        .replace("{{description}}", description)
        .replace("{{language}}", lang.as_str())
        .replace("{{dagr_version}}", env!("CARGO_PKG_VERSION"))
        .replace("{{wit_package}}", WIT_PACKAGE)
        .replace("{{setup}}", setup)
        .replace("{{unit_test}}", unit_test)
        .replace("{{artifact}}", artifact)
        .replace("{{guide}}", guide)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The templates and every SDK target the package that wit/ defines: a
    /// new WIT version fails here until they are brought along.
    #[test]
    fn templates_and_sdks_are_versioned_with_the_wit_package() {
        let declared = WIT.text.lines().find_map(|l| l.strip_prefix("package ")).unwrap().trim_end_matches(';');
        assert_eq!(declared, WIT_PACKAGE);
        let python = SDK_PYTHON[0].text;
        assert!(python.contains(&format!("WIT_PACKAGE = \"{WIT_PACKAGE}\"")), "sdk/python declares another package");
        let js = SDK_JS[1].text;
        assert!(js.contains(&format!("WIT_PACKAGE = '{WIT_PACKAGE}'")), "sdk/js declares another package");
        let (pkg, version) = WIT_PACKAGE.split_once('@').unwrap();
        let host_import = format!("{pkg}/host@{version}");
        assert!(JS[2].text.contains(&host_import), "the JS template imports another host package");
    }

    /// The Rust SDK's copy builds with the dependencies sdk/Cargo.toml names.
    #[test]
    fn the_rust_sdk_copy_has_the_sdks_dependencies() {
        let ours = include_str!("../../../sdk/Cargo.toml");
        let deps = |text: &'static str| -> Vec<&'static str> {
            text.split("[dependencies]").nth(1).unwrap().lines().filter(|l| l.contains('=')).collect()
        };
        assert_eq!(deps(ours), deps(SDK_RUST[0].text));
    }

    /// The placeholders [`render`] fills, as `{{name}}` and so on.
    const PLACEHOLDERS: [&str; 9] =
        ["name", "description", "language", "dagr_version", "wit_package", "setup", "unit_test", "artifact", "guide"];

    #[test]
    fn rendered_templates_have_no_placeholders_left() {
        for lang in [Lang::Rust, Lang::Python, Lang::Js] {
            for file in project_files(lang) {
                let text = render(file.text, "greet", "Greets.", lang);
                // JSDoc's `{{ name: string }}` is not a placeholder.
                for placeholder in PLACEHOLDERS {
                    assert!(!text.contains(&format!("{{{{{placeholder}}}}}")), "{:?} {}", lang, file.path);
                }
            }
        }
    }
}
