//! How the settings declared in [`super`] are read: the `settings!` macro behind each
//! declaration, the file and environment stacked over the defaults, how each type is parsed,
//! checked and shown, and the summary and table generated from the declarations.
//!
//! A new setting is a declaration, not a change here. The two settings named here are those
//! whose default follows something else: the log filter (`RUST_LOG`) and the database (the data
//! directory).

use std::{
    collections::HashMap,
    fmt,
    net::SocketAddr,
    path::{Path, PathBuf},
    str::FromStr,
    time::Duration,
};

use figment::{
    Figment,
    providers::{Format as _, Toml},
    value::{Dict, Value},
};
use strum::VariantNames;

use super::{
    Config, Secret, SentinelAddrs, TimeZone, TrustedProxies, default_database_url, redact_url,
    rules,
};

/// Errors found while reading the configuration; each names the setting at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The `--config` file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The `--config` file is not valid TOML, has unknown keys or a value of the wrong type.
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    /// A value does not parse (environment) or fails its check (file or environment).
    #[error("invalid value for {name}: {message}")]
    Invalid { name: &'static str, message: String },
    /// An `HMDP_*` environment variable that is no setting: a misspelt one would otherwise
    /// leave its setting silently at the default.
    #[error(
        "unknown environment variable {name}{}; the settings are listed in docs/configuration.md",
        .suggestion.map(|s| format!(" (did you mean {s}?)")).unwrap_or_default()
    )]
    UnknownVariable {
        name: String,
        suggestion: Option<&'static str>,
    },
}

/// `HMDP_*` variables that belong to the test, fuzz, lab and bench tools rather than to the
/// service: a service started from those tools' environment must not refuse them.
const TOOL_PREFIXES: &[&str] = &["HMDP_TEST_", "HMDP_FUZZ_", "HMDP_LAB_", "HMDP_BENCH_"];
const TOOL_VARIABLES: &[&str] = &["HMDP_ORIGINAL_SQL"];

/// The first `HMDP_*` variable of `env` that is no setting (nor a tool's), with the setting
/// whose name is closest, if one is close.
fn unknown_variable(env: &HashMap<String, String>, rows: &[Row]) -> Option<ConfigError> {
    let mut unknown: Vec<&String> = env
        .keys()
        .filter(|k| k.starts_with("HMDP_"))
        .filter(|k| !rows.iter().any(|r| r.var == k.as_str()))
        .filter(|k| !TOOL_PREFIXES.iter().any(|p| k.starts_with(p)))
        .filter(|k| !TOOL_VARIABLES.contains(&k.as_str()))
        .collect();
    unknown.sort();
    let name = unknown.first()?;
    let suggestion = rows
        .iter()
        .map(|r| (strsim::levenshtein(name, r.var), r.var))
        .filter(|(d, _)| *d <= 3)
        .min()
        .map(|(_, var)| var);
    Some(ConfigError::UnknownVariable {
        name: (*name).clone(),
        suggestion,
    })
}

/// Declares a settings struct, each field once: `VARIABLE field: Type [as Unit] = default
/// [, unset "what unset means"] [, check fn];` under its doc comment, which is also its line in
/// docs/configuration.md. It derives the struct, its `Default`, how a given value is parsed,
/// checked and stored, and its [`Row`]s; `groups` are nested settings structs.
macro_rules! settings {
    (@unset) => { String::from("unset") };
    (@unset $unset:expr) => { String::from($unset) };
    (@check) => { |_: &_| Ok(()) };
    (@check $check:expr) => { $check };
    (
        $(#[$attr:meta])*
        pub struct $name:ident {
            $(
                $(#[doc = $doc:literal])*
                $var:ident $field:ident: $ty:ty $(as $unit:ident)? = $default:expr
                    $(, unset $unset:expr)? $(, check $check:expr)?;
            )*
        }
        $(groups { $($(#[doc = $gdoc:literal])* $group:ident: $gty:ty,)* })?
    ) => {
        $(#[$attr])*
        pub struct $name {
            $(
                #[doc = concat!("`", stringify!($var), "`:")]
                $(#[doc = $doc])*
                pub $field: $ty,
            )*
            $($($(#[doc = $gdoc])* pub $group: $gty,)*)?
        }

        impl Default for $name {
            fn default() -> Self {
                Self { $($field: $default,)* $($($group: <$gty>::default(),)*)? }
            }
        }

        impl $name {
            /// Overwrites each setting that is given, once it parses and passes its check.
            fn apply(
                &mut self,
                given: &$crate::config::load::Given,
            ) -> Result<(), $crate::config::ConfigError> {
                $(if let Some(raw) = $crate::config::load::parse(given, stringify!($var), settings!(@check $($check)?))? {
                    self.$field =
                        <$ty as $crate::config::load::Setting<$($unit)?>>::from_raw(raw);
                })*
                $($(self.$group.apply(given)?;)*)?
                Ok(())
            }

            /// Every setting with its value, in declaration order.
            fn all_rows(&self) -> Vec<$crate::config::load::Row> {
                let rows = vec![$($crate::config::load::Row {
                    var: stringify!($var),
                    doc: &[$($doc),*],
                    unset: settings!(@unset $($unset)?),
                    value: <$ty as $crate::config::load::Setting<$($unit)?>>::show(&self.$field),
                }),*];
                rows.into_iter()$($(.chain(self.$group.all_rows()))*)?.collect()
            }
        }
    };
}
pub(super) use settings;

impl Config {
    /// Loads the configuration from an optional TOML file and the process environment.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let env: HashMap<String, String> = std::env::vars().collect();
        Self::from_sources(file, &env)
    }

    /// Like [`Config::load`], with the environment given explicitly (tests).
    pub fn from_sources(
        file: Option<&Path>,
        env: &HashMap<String, String>,
    ) -> Result<Self, ConfigError> {
        Self::with_origins(file, env).map(|(config, _)| config)
    }

    /// Every setting of the configuration `file` and `env` make, in declaration order: its
    /// value as the file would hold it, secrets hidden, and where it comes from (`hmdp config`).
    pub fn listing(
        file: Option<&Path>,
        env: &HashMap<String, String>,
    ) -> Result<Vec<Listed>, ConfigError> {
        let (config, origins) = Self::with_origins(file, env)?;
        let listed = config.all_rows().into_iter().map(|row| Listed {
            var: row.var,
            value: match row.value {
                Some(v) if v.is_empty() => "\"\"".to_owned(),
                Some(v) => v,
                None => format!("({})", row.unset.replace('`', "")),
            },
            source: origins.get(row.var).copied().unwrap_or(Source::Default),
        });
        Ok(listed.collect())
    }

    /// The configuration, and the source of each setting not left at its default.
    fn with_origins(
        file: Option<&Path>,
        env: &HashMap<String, String>,
    ) -> Result<(Self, HashMap<&'static str, Source>), ConfigError> {
        let mut config = Config::default();
        let mut origins = HashMap::new();
        // `HMDP_LOG` falls back to `RUST_LOG`, below the file.
        if let Some(filter) = env.get("RUST_LOG").filter(|v| !v.trim().is_empty()) {
            config.log_filter = filter.clone();
            origins.insert("HMDP_LOG", Source::Environment);
        }
        let rows = config.all_rows();
        if let Some(e) = unknown_variable(env, &rows) {
            return Err(e);
        }
        let mut given = match file {
            Some(path) => file_values(path, &rows)?,
            None => HashMap::new(),
        };
        // The environment overrides the file, for declared variables only. Empty means unset,
        // except where empty is the default (`HMDP_REDIS_PREFIX=""` overrides the file's prefix).
        given.extend(rows.iter().filter_map(|row| {
            let value = env.get(row.var)?;
            let keep_empty = row.value.as_deref() == Some("");
            let text = if keep_empty { value } else { value.trim() };
            (keep_empty || !text.is_empty()).then(|| (row.var, (text.to_owned(), None)))
        }));
        config.apply(&given)?;
        if !given.contains_key("HMDP_DATABASE_URL") {
            config.database_url = default_database_url(&config.data_dir);
        }
        rules::check(&config)?;
        origins.extend(given.iter().map(|(var, (_, file))| {
            let source = if file.is_some() {
                Source::File
            } else {
                Source::Environment
            };
            (*var, source)
        }));
        Ok((config, origins))
    }

    /// A one-line summary (the debug log, `Debug`): `key=value` for every setting, in the
    /// file's keys and units, with secrets and passwords redacted.
    pub fn redacted_summary(&self) -> String {
        let shown = self.all_rows().into_iter().map(|row| {
            let key = file_key(row.var);
            match row.value {
                Some(v) if v.is_empty() || v.contains(' ') => format!("{key}={v:?}"),
                Some(v) => format!("{key}={v}"),
                None => format!("{key}=({})", row.unset.replace('`', "")),
            }
        });
        shown.collect::<Vec<_>>().join(" ")
    }

    /// The configuration table of docs/configuration.md (variable, default, meaning), one row per
    /// setting.
    pub fn markdown_table() -> String {
        let rows = Config::default().all_rows().into_iter().map(|row| {
            let default = match row.value.as_deref() {
                Some("") => "empty".to_owned(),
                Some(v) => format!("`{v}`"),
                None => row.unset,
            };
            let meaning: Vec<&str> = row.doc.iter().map(|line| line.trim()).collect();
            format!("| `{}` | {default} | {} |\n", row.var, meaning.join(" "))
        });
        "| variable | default | meaning |\n|---|---|---|\n".to_owned() + &rows.collect::<String>()
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Config {{ {} }}", self.redacted_summary())
    }
}

/// Where a setting's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::Display)]
#[strum(serialize_all = "lowercase")]
pub enum Source {
    Default,
    /// The `--config` file.
    File,
    Environment,
}

/// One setting as [`Config::listing`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub var: &'static str,
    /// As the file would hold it, secrets hidden; unset: what that means, in parentheses.
    pub value: String,
    pub source: Source,
}

/// One setting as declared, with a value (`None` when unset).
pub(super) struct Row {
    pub(super) var: &'static str,
    pub(super) doc: &'static [&'static str],
    /// What an unset value means (Markdown).
    pub(super) unset: String,
    pub(super) value: Option<String>,
}

/// The TOML key: the variable in lower case without `HMDP_`.
pub(super) fn file_key(var: &str) -> String {
    var.trim_start_matches("HMDP_").to_ascii_lowercase()
}

/// The settings given, by variable: the text, and the file it is in (`None`: the environment).
pub(super) type Given<'a> = HashMap<&'static str, (String, Option<&'a Path>)>;

/// The raw value given for `var`, if any, parsed from its text and checked; a bad one names the
/// variable, or the file and the key when it is the file's and does not parse.
pub(super) fn parse<R: FromStr<Err: fmt::Display>>(
    given: &Given,
    var: &'static str,
    check: impl Fn(&R) -> Result<(), String>,
) -> Result<Option<R>, ConfigError> {
    let Some((text, file)) = given.get(var) else {
        return Ok(None);
    };
    let raw = text.parse().map_err(|e| match file {
        Some(path) => ConfigError::Parse {
            path: path.to_path_buf(),
            message: format!("{}: {text:?}: {e}", file_key(var)),
        },
        None => ConfigError::Invalid {
            name: var,
            message: format!("{text:?}: {e}"),
        },
    })?;
    check(&raw).map_err(|message| ConfigError::Invalid { name: var, message })?;
    Ok(Some(raw))
}

/// The file's settings by variable, as text (so a number may also be written as a string); an
/// unknown key is a typo.
fn file_values<'a>(path: &'a Path, rows: &[Row]) -> Result<Given<'a>, ConfigError> {
    let bad = |message| ConfigError::Parse {
        path: path.to_owned(),
        message,
    };
    let toml = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    let mut values: Dict = Figment::from(Toml::string(&toml))
        .extract()
        .map_err(|e| bad(e.kind.to_string()))?;
    if let Some(key) = values
        .keys()
        .find(|k| !rows.iter().any(|r| file_key(r.var) == **k))
    {
        return Err(bad(format!("unknown key `{key}`")));
    }
    let mut given = HashMap::new();
    for row in rows {
        let key = file_key(row.var);
        let text = match values.remove(&key) {
            None => continue,
            Some(Value::String(_, s)) => s,
            Some(Value::Bool(_, b)) => b.to_string(),
            Some(n @ Value::Num(..)) => n.to_i128().map_or_else(
                || n.to_f64().unwrap_or(f64::NAN).to_string(),
                |i| i.to_string(),
            ),
            Some(_) => {
                return Err(bad(format!(
                    "{key}: expected a number, a string or a boolean"
                )));
            }
        };
        given.insert(row.var, (text, Some(path)));
    }
    Ok(given)
}

/// How a field's type is written in the file and the environment, and shown; `U` is the unit
/// (`as Secs`, `as Millis`, ...) when the type alone does not say.
pub(super) trait Setting<U = Plain>: Sized {
    /// What the file or the environment holds, parsed from its text.
    type Raw: FromStr<Err: fmt::Display>;
    fn from_raw(raw: Self::Raw) -> Self;
    /// The value as the file would hold it, secrets hidden; `None` when unset.
    fn show(&self) -> Option<String>;
}

/// Units: as written; seconds; milliseconds; a URL whose password is hidden; a trimmed name
/// where empty means unset.
pub(super) enum Plain {}
pub(super) enum Secs {}
pub(super) enum Millis {}
pub(super) enum Url {}
pub(super) enum Trimmed {}

/// Implements [`Setting`]: `Unit: Type = Raw, |raw| from raw, |value| shown;`.
macro_rules! setting {
    ($($unit:ty: $ty:ty = $raw:ty, |$r:ident| $from:expr, |$v:ident| $show:expr;)*) => {$(
        impl Setting<$unit> for $ty {
            type Raw = $raw;
            fn from_raw($r: $raw) -> Self {
                $from
            }
            fn show(&self) -> Option<String> {
                let $v = self;
                $show
            }
        }
    )*};
    (as written: $($ty:ty),*) => {
        setting! { $(Plain: $ty = $ty, |raw| raw, |v| Some(v.to_string());)* }
    };
}

setting!(as written: u32, u64, usize, f64, bool, String, SocketAddr, TimeZone, TrustedProxies,
    SentinelAddrs);
setting! {
    Plain: PathBuf = PathBuf, |raw| raw, |v| Some(v.display().to_string());
    Plain: Secret = String, |raw| Secret::new(raw), |_v| Some("***".to_owned());
    Secs: Duration = u64, |raw| Duration::from_secs(raw), |v| Some(v.as_secs().to_string());
    Millis: Duration = u64, |raw| Duration::from_millis(raw), |v| Some(v.as_millis().to_string());
    Url: String = String, |raw| raw, |v| Some(redact_url(v));
    Trimmed: Option<String> = String, |raw| Some(raw.trim().to_owned()).filter(|n| !n.is_empty()),
        |v| v.clone();
}

impl<U, T: Setting<U>> Setting<U> for Option<T> {
    type Raw = T::Raw;
    fn from_raw(raw: T::Raw) -> Self {
        Some(T::from_raw(raw))
    }
    fn show(&self) -> Option<String> {
        self.as_ref().and_then(T::show)
    }
}

/// A setting that is one of an enum's names (`SeckillMode`, `HMDP_SECKILL_MODE=sync`): written
/// and shown as the name, case-insensitive, anything else refused with the names. The enum
/// derives strum's `Display`, `EnumString` and `VariantNames` and says `impl Choice for … {}`.
pub trait Choice: FromStr + VariantNames + fmt::Display {}

impl<T: Choice> Setting for T {
    type Raw = OneOf<T>;
    fn from_raw(raw: OneOf<T>) -> Self {
        raw.0
    }
    fn show(&self) -> Option<String> {
        Some(self.to_string())
    }
}

/// One of an enum's names, case-insensitive; anything else is refused with the names.
pub(super) struct OneOf<T>(T);

impl<T: FromStr + VariantNames> FromStr for OneOf<T> {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let expected = || format!("expected one of: {}", T::VARIANTS.join(", "));
        s.parse().map(OneOf).map_err(|_| expected())
    }
}

/// `Ok` if `ok`, else the message: a failed check.
fn ensure(ok: bool, message: impl Into<String>) -> Result<(), String> {
    if ok { Ok(()) } else { Err(message.into()) }
}

pub(super) fn at_least<T: PartialOrd + fmt::Display>(min: T) -> impl Fn(&T) -> Result<(), String> {
    let message = format!("must be at least {min}");
    move |v| ensure(*v >= min, &message)
}

pub(super) fn at_most<T: PartialOrd + fmt::Display>(max: T) -> impl Fn(&T) -> Result<(), String> {
    let message = format!("must be at most {max}");
    move |v| ensure(*v <= max, &message)
}

pub(super) fn between<T: PartialOrd + fmt::Display>(
    min: T,
    max: T,
) -> impl Fn(&T) -> Result<(), String> {
    let message = format!("must be between {min} and {max}");
    move |v| ensure(min <= *v && *v <= max, &message)
}

pub(super) fn min_len(min: usize) -> impl Fn(&String) -> Result<(), String> {
    let message = format!("must be at least {min} characters long");
    move |v| ensure(v.len() >= min, &message)
}

/// Keys derive their Redis Cluster hash tags from their own parts; braces in the prefix would
/// silently move every key into one slot.
pub(super) fn no_braces() -> impl Fn(&String) -> Result<(), String> {
    |v| ensure(!v.contains(['{', '}']), "must not contain '{' or '}'")
}

/// A URL of scheme `a` or `b`.
pub(super) fn scheme(a: &'static str, b: &'static str) -> impl Fn(&String) -> Result<(), String> {
    let message = format!("must be an `{a}://` or `{b}://` URL");
    move |v| {
        let ok = [a, b].iter().any(|s| v.starts_with(&format!("{s}://")));
        ensure(ok, &message)
    }
}

pub(super) fn header_name() -> impl Fn(&String) -> Result<(), String> {
    |v| {
        let ok = axum::http::HeaderName::from_bytes(v.as_bytes()).is_ok();
        ensure(ok, "must be an HTTP header name")
    }
}
